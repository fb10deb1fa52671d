// The CUDA backend: trusted only against the host backend (kernels/cuda/device.cu runs each
// device op on random data and compares; the op harness runs the full grid). Needs a GPU; without
// one the test says why.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device.hpp"

namespace {
namespace device_test {

TEST(CudaBackend, DeviceKernelsMatchHostKernels) {
  const auto info = hypic::kernels::cuda_device_info();
  if (!info.compiled) GTEST_SKIP() << "built without CUDA (-DHYPIC_CUDA=OFF)";
  if (info.count == 0) GTEST_SKIP() << "no CUDA device on this machine: " << info.description;
  const std::string report = hypic::kernels::cuda::self_check(1e-4f);
  std::printf("%s", report.c_str());
  EXPECT_NE(report.find("rms_norm"), std::string::npos);
}

TEST(CudaBackend, EntryPointsLinkAndExplainWhenNotCompiled) {
  const auto info = hypic::kernels::cuda_device_info();
  if (info.compiled) {
    EXPECT_NE(info.description.find("CUDA runtime"), std::string::npos);
    return;
  }
  try {
    hypic::kernels::cuda_backend().rms_norm_zero_centred(nullptr, nullptr, nullptr, 0, 0, 1e-6f);
    FAIL() << "expected an error from a build without CUDA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not compiled with CUDA"), std::string::npos);
  }
}

}  // namespace device_test
}  // namespace
