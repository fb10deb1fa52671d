// CPU identification and the register-resident peak loops of `hypic bench peak`. Each loop's
// instruction set is enabled for its function alone (target attributes), and a loop runs only
// where cpu_isa() says the CPU and the OS support it, so one binary runs on AVX2, AVX-512 and
// AMX machines.
#include "hypic/kernels/cpu.hpp"

#include <cstring>
#include <string>

#include "hypic/error.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hypic::kernels {
namespace {

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

uint64_t xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

bool bit(unsigned v, int b) {
  return (v >> b) & 1u;
}

// Linux hands AMX's tile data state to a process only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction faults.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuIsa detect() {
  CpuIsa isa;
  const Regs l1 = cpuid(1);
  if (!bit(l1.c, 27) || !bit(l1.c, 28)) return isa;  // no OSXSAVE or no AVX
  const uint64_t xcr = xcr0();
  const bool os_avx = (xcr & 0x6) == 0x6;                 // SSE and AVX state
  const bool os_avx512 = os_avx && (xcr & 0xe0) == 0xe0;  // opmask, ZMM0-15 upper, ZMM16-31
  const bool os_amx = (xcr & 0x60000) == 0x60000;         // XTILECFG and XTILEDATA
  const Regs l7 = cpuid(7, 0);
  const Regs l7s1 = cpuid(7, 1);
  isa.avx2_fma = os_avx && bit(l7.b, 5) && bit(l1.c, 12);
  isa.avx512f = os_avx512 && bit(l7.b, 16);
  isa.avx512_bf16 = isa.avx512f && bit(l7s1.a, 5);
  isa.amx_bf16 = os_amx && bit(l7.d, 24) && bit(l7.d, 22) && request_amx_permission();
  return isa;
}
#else
CpuIsa detect() {
  return {};
}
#endif

// The loops. Every f32 accumulator starts at 1 + i/8 and is updated by acc = acc·(−1) + 3,
// which gives 3 − acc and back again: exact in f32, so the checksum after n iterations is known
// without running the instruction set, and no compiler can shorten the chain. The dot-product
// loops add a row of +1 products and then a row of −1 products per iteration, and one more
// row of +1 products after the loop: exact too, and each instruction changes its accumulator.
double alternating_expected(int accumulators, int lanes, int64_t iterations) {
  double sum = 0;
  for (int i = 0; i < accumulators; ++i) {
    const double start = 1.0 + i / 8.0;
    sum += lanes * (iterations % 2 == 0 ? start : 3.0 - start);
  }
  return sum;
}

#if defined(__x86_64__)
// The accumulators are named variables, not an array: with an array GCC kept a copy of every
// accumulator on the stack and stored all of them on each iteration, which halved the rate.
#define HYPIC_EACH12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define HYPIC_EACH16(X) HYPIC_EACH12(X) X(12) X(13) X(14) X(15)
constexpr int kAvx2Accumulators = 12;    // FMA latency 4-5 cycles x 2 pipes, plus slack
constexpr int kAvx512Accumulators = 16;  // the same with 32 registers to spare

__attribute__((target("avx2,fma"))) float lane_sum(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx512f"))) float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx2,fma"))) PeakLoopRun avx2_fma_loop(int64_t iterations) {
#define HYPIC_INIT(i) __m256 acc##i = _mm256_set1_ps(1.0f + (i) / 8.0f);
  HYPIC_EACH12(HYPIC_INIT)
#undef HYPIC_INIT
  __m256 a = _mm256_set1_ps(-1.0f), b = _mm256_set1_ps(3.0f);
  __asm__ volatile("" : "+x"(a), "+x"(b));  // opaque to the optimiser
  for (int64_t it = 0; it < iterations; ++it) {
#define HYPIC_STEP(i) acc##i = _mm256_fmadd_ps(acc##i, a, b);
    HYPIC_EACH12(HYPIC_STEP)
#undef HYPIC_STEP
  }
  PeakLoopRun run;
#define HYPIC_SUM(i) run.checksum += lane_sum(acc##i);
  HYPIC_EACH12(HYPIC_SUM)
#undef HYPIC_SUM
  run.expected = alternating_expected(kAvx2Accumulators, 8, iterations);
  return run;
}

__attribute__((target("avx512f"))) PeakLoopRun avx512_fma_loop(int64_t iterations) {
#define HYPIC_INIT(i) __m512 acc##i = _mm512_set1_ps(1.0f + (i) / 8.0f);
  HYPIC_EACH16(HYPIC_INIT)
#undef HYPIC_INIT
  __m512 a = _mm512_set1_ps(-1.0f), b = _mm512_set1_ps(3.0f);
  __asm__ volatile("" : "+v"(a), "+v"(b));
  for (int64_t it = 0; it < iterations; ++it) {
#define HYPIC_STEP(i) acc##i = _mm512_fmadd_ps(acc##i, a, b);
    HYPIC_EACH16(HYPIC_STEP)
#undef HYPIC_STEP
  }
  PeakLoopRun run;
#define HYPIC_SUM(i) run.checksum += lane_sum(acc##i);
  HYPIC_EACH16(HYPIC_SUM)
#undef HYPIC_SUM
  run.expected = alternating_expected(kAvx512Accumulators, 16, iterations);
  return run;
}

constexpr uint16_t kBf16One = 0x3f80, kBf16MinusOne = 0xbf80;

#if defined(HYPIC_HAVE_AVX512BF16)
__attribute__((target("avx512f,avx512bw,avx512bf16"))) PeakLoopRun avx512_bf16_loop(
    int64_t iterations) {
  // Each vdpbf16ps adds 2 products per lane: +2 with `ones`, -2 with `minus`.
#define HYPIC_INIT(i) __m512 acc##i = _mm512_set1_ps(1.0f + (i) / 8.0f);
  HYPIC_EACH16(HYPIC_INIT)
#undef HYPIC_INIT
  __m512i up = _mm512_set1_epi16(static_cast<short>(kBf16One));
  __m512i down = _mm512_set1_epi16(static_cast<short>(kBf16MinusOne));
  __asm__ volatile("" : "+v"(up), "+v"(down));
  const __m512bh ones = reinterpret_cast<__m512bh&>(up);
  const __m512bh minus = reinterpret_cast<__m512bh&>(down);
#define HYPIC_UP(i) acc##i = _mm512_dpbf16_ps(acc##i, ones, ones);
#define HYPIC_DOWN(i) acc##i = _mm512_dpbf16_ps(acc##i, minus, ones);
  for (int64_t it = 0; it < iterations; ++it) {
    HYPIC_EACH16(HYPIC_UP)
    HYPIC_EACH16(HYPIC_DOWN)
  }
  HYPIC_EACH16(HYPIC_UP)
#undef HYPIC_UP
#undef HYPIC_DOWN
  PeakLoopRun run;
#define HYPIC_SUM(i) run.checksum += lane_sum(acc##i);
  HYPIC_EACH16(HYPIC_SUM)
#undef HYPIC_SUM
  for (int i = 0; i < kAvx512Accumulators; ++i) run.expected += 16 * (1.0 + i / 8.0 + 2.0);
  return run;
}
#endif

#if defined(HYPIC_HAVE_AMX)
// Tiles 0-3 accumulate C (16 x 16 f32), tile 4 holds A = +1, tile 5 A = −1, tile 6 B = +1
// (16 rows x 32 bf16 each: every tdpbf16ps adds ±32 to each element of C).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) PeakLoopRun amx_bf16_loop(int64_t iterations) {
  TileConfig cfg;
  for (int t = 0; t < 7; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) uint16_t plus[16 * 32], minus[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) {
    plus[i] = kBf16One;
    minus[i] = kBf16MinusOne;
  }
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, plus, 64);
  _tile_loadd(5, minus, 64);
  _tile_loadd(6, plus, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 6);
    _tile_dpbf16ps(0, 5, 6);
    _tile_dpbf16ps(1, 5, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 6);
  }
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 6);
  _tile_dpbf16ps(2, 4, 6);
  _tile_dpbf16ps(3, 4, 6);
  alignas(64) float c[4][16 * 16];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  _tile_release();
  PeakLoopRun run;
  for (const auto& tile : c)
    for (float v : tile) run.checksum += v;
  run.expected = 4.0 * 256 * 32;
  return run;
}
#endif
#endif  // __x86_64__

}  // namespace

CpuIsa cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

std::string cpu_model() {
#if defined(__x86_64__)
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string s(brand);
    const auto first = s.find_first_not_of(' ');
    const auto last = s.find_last_not_of(' ');
    if (first != std::string::npos) {
      // A VM's brand string may be as short as "AMD EPYC": the family and model say which
      // generation (AMD family 25 is Zen 3 and Zen 4, Intel family 6 model 143 Sapphire Rapids).
      const unsigned sig = cpuid(1).a;
      unsigned family = (sig >> 8) & 0xf, model = (sig >> 4) & 0xf;
      if (family == 0xf) family += (sig >> 20) & 0xff;
      if (family == 0x6 || family >= 0xf) model += ((sig >> 16) & 0xf) << 4;
      return s.substr(first, last - first + 1) + " (family " + std::to_string(family) + ", model " +
             std::to_string(model) + ")";
    }
  }
#endif
  return "unknown CPU";
}

std::string cpu_isa_summary() {
  const CpuIsa isa = cpu_isa();
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(isa.avx2_fma, "avx2+fma");
  add(isa.avx512f, "avx512f");
  add(isa.avx512_bf16, "avx512_bf16");
  add(isa.amx_bf16, "amx_bf16");
  return s.empty() ? "no AVX2/FMA" : s;
}

const char* peak_loop_name(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::Avx2Fma:
      return "avx2_fma_f32";
    case PeakLoop::Avx512Fma:
      return "avx512_fma_f32";
    case PeakLoop::Avx512Bf16:
      return "avx512_bf16_dot";
    case PeakLoop::AmxBf16:
      return "amx_bf16_tile";
  }
  return "?";
}

double peak_loop_flops_per_iteration(PeakLoop loop) {
  switch (loop) {
    case PeakLoop::Avx2Fma:
      return 12 * 8 * 2;  // 12 accumulators x 8 lanes x multiply-add
    case PeakLoop::Avx512Fma:
      return 16 * 16 * 2;
    case PeakLoop::Avx512Bf16:
      return 2 * 16 * 16 * 2 * 2;  // 2 rows x 16 accumulators x 16 lanes x 2 pairs x 2
    case PeakLoop::AmxBf16:
      return 8 * 16 * 16 * 32 * 2.0;  // 8 tdpbf16ps of 16 x 16 x 32 multiply-adds
  }
  return 0;
}

bool peak_loop_available(PeakLoop loop, std::string* why_not) {
  const CpuIsa isa = cpu_isa();
  bool compiled = true, cpu = false;
  switch (loop) {
    case PeakLoop::Avx2Fma:
      cpu = isa.avx2_fma;
      break;
    case PeakLoop::Avx512Fma:
      cpu = isa.avx512f;
      break;
    case PeakLoop::Avx512Bf16:
#if !defined(HYPIC_HAVE_AVX512BF16)
      compiled = false;
#endif
      cpu = isa.avx512_bf16;
      break;
    case PeakLoop::AmxBf16:
#if !defined(HYPIC_HAVE_AMX)
      compiled = false;
#endif
      cpu = isa.amx_bf16;
      break;
  }
#if !defined(__x86_64__)
  compiled = false;
#endif
  if (why_not) {
    if (!compiled)
      *why_not = "not compiled in (the compiler lacks the instruction set)";
    else if (!cpu)
      *why_not = "this CPU or OS does not offer it";
    else
      why_not->clear();
  }
  return compiled && cpu;
}

PeakLoopRun run_peak_loop(PeakLoop loop, int64_t iterations) {
  std::string why;
  HYPIC_REQUIRE(peak_loop_available(loop, &why),
                std::string("peak loop ") + peak_loop_name(loop) + " cannot run here: " + why);
  HYPIC_REQUIRE(iterations >= 0, "peak loop: negative iteration count");
  PeakLoopRun run;
#if defined(__x86_64__)
  switch (loop) {
    case PeakLoop::Avx2Fma:
      run = avx2_fma_loop(iterations);
      break;
    case PeakLoop::Avx512Fma:
      run = avx512_fma_loop(iterations);
      break;
    case PeakLoop::Avx512Bf16:
#if defined(HYPIC_HAVE_AVX512BF16)
      run = avx512_bf16_loop(iterations);
#endif
      break;
    case PeakLoop::AmxBf16:
#if defined(HYPIC_HAVE_AMX)
      run = amx_bf16_loop(iterations);
#endif
      break;
  }
#endif
  run.flops = peak_loop_flops_per_iteration(loop) * double(iterations);
  return run;
}

}  // namespace hypic::kernels
