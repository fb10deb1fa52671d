#pragma once
// The CUDA backend is a shared module (libhypic_cuda.so, built from kernels/cuda/*.cu beside the
// hypic binary) that the binary opens with dlopen on first use (kernels/cuda/module_loader.cpp),
// so that a command which never computes on a GPU does not load the CUDA runtime, cuBLAS and
// NCCL (~0.17 s and 220 MB of relocations at every start; docs/threads.md). The module exports
// one C function returning this table; everything else in it is local (cuda_module.map). Its
// host-side references (Tensor, the Backend base, host_backend, ...) resolve against the binary,
// which exports its symbols (-rdynamic).
#include <cstdint>
#include <memory>
#include <string>

#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device.hpp"
#include "hypic/kernels/device_link.hpp"

namespace hypic::kernels {

// Raised whenever the table or the types it passes change shape (the binary refuses a module
// of another version rather than call through a mismatched table).
constexpr int kCudaModuleAbi = 2;

struct CudaModule {
  int abi;
  size_t backend_size;  // sizeof(Backend) as the module was compiled: a stale module is refused
  DeviceInfo (*device_info)();
  const Backend& (*backend)();
  std::string (*nccl_missing)();
  NcclId (*nccl_unique_id)();
  std::unique_ptr<DeviceLink> (*nccl_link)(const NcclId& id, int ranks, int rank);
  std::string (*self_check)(float tol);
  void (*set_device)(int index);
  std::string (*device_uuid)(int index);
  std::string (*sticky_fault)();
  void (*gemm_bf16)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const uint16_t* a,
                    int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);
  bool (*tensor_cores)();
  void (*set_tensor_cores)(bool on);
};

}  // namespace hypic::kernels

// The module's one exported symbol.
extern "C" const hypic::kernels::CudaModule* hypic_cuda_module();
#define HYPIC_CUDA_MODULE_ENTRY "hypic_cuda_module"
