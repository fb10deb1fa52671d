#pragma once
// Error checking for CUDA runtime and cuBLAS calls: failures become hypic::Error, one line
// naming the call (or the kernel) and the error. A sticky error (an illegal address, a trap:
// the context is lost and every later call fails) says so, and once one has been seen every
// later failure names the first one, so a harness stops instead of blaming each later test.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "hypic/error.hpp"
#include "hypic/kernels/device_book.hpp"

namespace hypic::kernels::cuda {

// HYPIC_CUDA_SYNC_DEBUG=1: the compute stream is synchronised after every launch and checked
// (check_launch). Read once, when the backend is created (cuda_backend.cu).
inline bool& sync_debug() {
  static bool on = false;
  return on;
}

// HYPIC_CUDA_GEMM (device_book::gemm_tensor_cores_setting): products of bf16 weights on tensor
// cores with bf16-rounded activations (true, the default) or exact (f32). Read once, when the
// backend is created.
inline bool& tensor_cores_flag() {
  static bool on = true;
  return on;
}

// Errors after which the CUDA context is unusable.
inline bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// Where the first sticky error was reported (empty: none yet).
inline std::string& first_sticky_fault() {
  static std::string where;
  return where;
}

[[noreturn]] inline void fail(cudaError_t err, const std::string& what) {
  const std::string error = std::string(cudaGetErrorName(err)) + ", " + cudaGetErrorString(err);
  const bool sticky = is_sticky(err);
  if (!sticky) cudaGetLastError();  // cleared: reported here, not again at the next call
  if (sticky && !first_sticky_fault().empty())
    throw Error(what + ": " + error + " (sticky CUDA error first reported at " +
                first_sticky_fault() + "; the device context is lost; stop)");
  if (sticky) first_sticky_fault() = what;
  throw Error(device_book::fault_message(what, error, sticky, sync_debug()));
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(err, what);
}
inline void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLAS status " + std::to_string(int(st)));
}

}  // namespace hypic::kernels::cuda
