// Linked instead of the .cu sources when HYPIC_CUDA is off, so callers need no #ifdefs.
#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device.hpp"
#include "hypic/kernels/device_link.hpp"

namespace hypic::kernels {
namespace {
[[noreturn]] void not_compiled() {
  throw Error(
      "hypic was not compiled with CUDA (reconfigure with -DHYPIC_CUDA=ON and a CUDA toolkit)");
}
}  // namespace

DeviceInfo cuda_device_info() {
  return {false, 0, "not compiled with CUDA"};
}

const Backend& cuda_backend() {
  not_compiled();
}

std::string nccl_missing() {
  return "built without CUDA and NCCL";
}
NcclId nccl_unique_id() {
  not_compiled();
}
std::unique_ptr<DeviceLink> nccl_link(const NcclId&, int, int) {
  not_compiled();
}

namespace cuda {
std::string self_check(float) {
  not_compiled();
}
void set_device(int) {
  not_compiled();
}
std::string device_uuid(int) {
  not_compiled();
}
std::string sticky_fault() {
  return "";
}
bool tensor_cores() {
  return false;
}
void set_tensor_cores(bool) {
  not_compiled();
}
void gemm_bf16(bool, bool, int, int, int, float, const uint16_t*, int, const uint16_t*, int, float,
               float*, int) {
  not_compiled();
}
}  // namespace cuda
}  // namespace hypic::kernels
