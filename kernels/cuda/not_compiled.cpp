// Linked instead of the .cu sources when HYPIC_CUDA is off, so callers need no #ifdefs.
#include <stdexcept>

#include "hypic/kernels/device.hpp"

namespace hypic::kernels {
namespace {
[[noreturn]] void not_compiled() {
  throw std::runtime_error(
      "hypic was not compiled with CUDA (reconfigure with -DHYPIC_CUDA=ON and a CUDA toolkit)");
}
}  // namespace

DeviceInfo cuda_device_info() {
  return {false, 0, "not compiled with CUDA"};
}

namespace cuda {
void gemm(bool, bool, int, int, int, const float*, int, const float*, int, float*, int) {
  not_compiled();
}
void rms_norm_zero_centred(const float*, const float*, float*, int, int, float) {
  not_compiled();
}
std::string self_check(float) {
  not_compiled();
}
}  // namespace cuda
}  // namespace hypic::kernels
