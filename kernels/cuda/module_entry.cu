// The exported table of the CUDA module (module_abi.hpp): the module's own definitions of the
// entry points that kernels/cuda/module_loader.cpp forwards to.
#include "module_abi.hpp"

extern "C" __attribute__((visibility("default"))) const hypic::kernels::CudaModule*
hypic_cuda_module() {
  namespace k = hypic::kernels;
  static const k::CudaModule table{
      k::kCudaModuleAbi,      sizeof(k::Backend),        &k::cuda_device_info,
      &k::cuda_backend,       &k::nccl_missing,          &k::nccl_unique_id,
      &k::nccl_link,          &k::cuda::self_check,      &k::cuda::set_device,
      &k::cuda::device_uuid,  &k::cuda::sticky_fault,    &k::cuda::gemm_bf16,
      &k::cuda::tensor_cores, &k::cuda::set_tensor_cores};
  return &table;
}
