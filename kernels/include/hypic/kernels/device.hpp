#pragma once
// CUDA device discovery and the device-against-host self check. The CUDA ops themselves are
// reached through cuda_backend() (backend.hpp). When hypic is built without CUDA these still
// link, and throw hypic::Error("hypic was not compiled with CUDA ...")
// (kernels/cuda/not_compiled.cpp). With CUDA they forward to the CUDA module, loaded on the
// first call (kernels/cuda/module_loader.cpp); one that cannot be loaded throws hypic::Error
// naming its path and dlerror(), and cuda_device_info() reports it with 0 devices.
#include <cstdint>
#include <string>

namespace hypic::kernels {

struct DeviceInfo {
  bool compiled = false;  // built with HYPIC_CUDA
  int count = 0;          // visible CUDA devices (0 when none or not compiled)
  std::string description;
};
DeviceInfo cuda_device_info();  // never throws

namespace cuda {

// Runs each op the CUDA backend supports on random data and compares it with the host
// backend; returns a report line per op with its max abs difference. Throws when a difference
// exceeds tol. The full grid of shapes is the op harness (tests/unit/backend_ops_test.cpp).
std::string self_check(float tol = 1e-4f);

// Makes device `index` (among the visible ones) current for this process's CUDA work; call it
// before anything is allocated on the device (one rank per GPU: cluster/gpu_plan.hpp).
void set_device(int index);
// The device's UUID ("GPU-…"), the same string in every process that sees that GPU whatever
// its index there: how ranks tell a shared GPU from their own.
std::string device_uuid(int index);

// Where the first sticky CUDA error (an illegal address, a trap: the context is lost and every
// later CUDA call fails) was reported; empty while the context is usable. A test harness stops
// running device cases once it is set rather than report every later case as a new failure.
std::string sticky_fault();

// Whether the CUDA backend's products run on tensor cores (Backend::tensor_core_products():
// bf16-rounded activations, bf16 weights and attention panels, f32 accumulation), as
// HYPIC_CUDA_GEMM set it when the backend was created (bf16, the default; f32: exact). Tests
// switch it around cases that compare with the host at f32 tolerances; a model's weights keep
// the dtype model::to_backend gave them in the mode of their upload. Without CUDA: false, and
// setting it is an error.
bool tensor_cores();
void set_tensor_cores(bool on);

// C[m,n] (f32) = alpha · op(A) · op(B) + beta · C, row-major, with A and B bf16 (raw bit
// patterns) in device memory and f32 accumulation: cublasGemmEx on tensor cores. The bf16 row
// of the op harness's dtype axis; device pointers only.
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const uint16_t* a,
               int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);

}  // namespace cuda
}  // namespace hypic::kernels
