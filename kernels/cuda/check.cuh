#pragma once
// Error checking for CUDA runtime and cuBLAS calls: failures become hypic::Error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "hypic/error.hpp"

namespace hypic::kernels::cuda {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}
inline void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLAS status " + std::to_string(int(st)));
}

}  // namespace hypic::kernels::cuda
