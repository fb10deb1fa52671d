#pragma once
// The CPU this process runs on: its model name, the vector and matrix instruction sets that both
// the CPU and the OS enable, and the machine's floating-point peak as register-resident loops of
// each instruction set measure it (`hypic bench peak`). Implementation: kernels/host/cpu.cpp.
#include <cstdint>
#include <string>

namespace hypic::kernels {

// Instruction sets usable here: reported by cpuid AND with their register state enabled by the
// OS (XCR0; for AMX also granted to this process by arch_prctl on Linux).
struct CpuIsa {
  bool avx2_fma = false;     // AVX2 + FMA3: 8 f32 lanes per FMA
  bool avx512f = false;      // AVX-512 F: 16 f32 lanes per FMA
  bool avx512_bf16 = false;  // AVX-512 BF16: vdpbf16ps, 32 bf16 pairs per instruction
  bool amx_bf16 = false;     // AMX tiles with bf16: tdpbf16ps, 16 x 16 x 32 per instruction
};
CpuIsa cpu_isa();
// The brand string (cpuid 0x80000002-4), trimmed, with cpuid's family and model numbers, e.g.
// "AMD EPYC (family 25, model 1)"; "unknown CPU" where there is none.
std::string cpu_model();
// The usable sets in words, e.g. "avx2+fma" or "avx2+fma avx512f avx512_bf16 amx_bf16".
std::string cpu_isa_summary();

// The register-resident loops of `hypic bench peak`, one per instruction set. Each keeps
// independent accumulators in registers (enough to cover the instruction's latency on two
// pipes) and updates them with values whose results are exact, so every run can be checked.
enum class PeakLoop { Avx2Fma, Avx512Fma, Avx512Bf16, AmxBf16 };
constexpr PeakLoop kPeakLoops[] = {PeakLoop::Avx2Fma, PeakLoop::Avx512Fma, PeakLoop::Avx512Bf16,
                                   PeakLoop::AmxBf16};
// "avx2_fma_f32", "avx512_fma_f32", "avx512_bf16_dot", "amx_bf16_tile"
const char* peak_loop_name(PeakLoop loop);
// True where the loop can run here; otherwise why_not (if given) says why, in a few words.
bool peak_loop_available(PeakLoop loop, std::string* why_not = nullptr);
// Floating-point operations of one iteration of the loop (a multiply-add counts 2).
double peak_loop_flops_per_iteration(PeakLoop loop);

// One run of `iterations` iterations on the calling thread. `checksum` is the sum of the final
// accumulators and `expected` what exact arithmetic gives (computed without the instruction
// set); they are equal when the loop computed what it should. Throws hypic::Error where the
// loop is not available.
struct PeakLoopRun {
  double flops = 0;
  double checksum = 0;
  double expected = 0;
};
PeakLoopRun run_peak_loop(PeakLoop loop, int64_t iterations);

}  // namespace hypic::kernels
