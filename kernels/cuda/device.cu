// Device discovery and the device-against-host self check (every device kernel is trusted
// only against the host one, as ggml's test-backend-ops does).
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "check.cuh"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device.hpp"

namespace hypic::kernels {

DeviceInfo cuda_device_info() {
  DeviceInfo info;
  info.compiled = true;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  info.count = count;
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  std::ostringstream os;
  os << "CUDA runtime " << CUDART_VERSION << ", NCCL " << nccl_version << ", " << count
     << " device(s)";
  if (count > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) os << ": " << prop.name;
  }
  info.description = os.str();
  return info;
}

namespace cuda {
namespace {
// Host data copied into a device tensor of the CUDA backend.
Tensor upload(const std::vector<float>& host) {
  return Tensor::from_vector({static_cast<int64_t>(host.size())}, host)
      .to(Device::Cuda, &cuda_backend());
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}
}  // namespace

std::string self_check(float tol) {
  const Backend& host = host_backend();
  const Backend& dev = cuda_backend();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  std::ostringstream report;
  bool ok = true;

  {  // gemm with both transposes, alpha and beta
    const int m = 67, n = 45, k = 130;
    auto a = random(size_t(k) * m), b = random(size_t(n) * k), c = random(size_t(m) * n);
    std::vector<float> expect = c;
    host.gemm(true, true, m, n, k, 0.5f, a.data(), m, b.data(), k, 2.0f, expect.data(), n);
    Tensor da = upload(a), db = upload(b), dc = upload(c);
    dev.gemm(true, true, m, n, k, 0.5f, static_cast<const float*>(da.raw()), m,
             static_cast<const float*>(db.raw()), k, 2.0f, static_cast<float*>(dc.raw()), n);
    dev.synchronize();
    const float d = max_abs_diff(expect, dc.to_vector());
    report << "gemm(T,T 67x45x130, alpha 0.5, beta 2) max_abs_diff " << d << "\n";
    ok = ok && d <= tol * 10;  // k=130 accumulations in a different order
  }
  {  // zero-centred RMSNorm
    const int rows = 33, cols = 300;
    auto x = random(size_t(rows) * cols), w = random(cols);
    std::vector<float> expect(x.size());
    host.rms_norm_zero_centred(x.data(), w.data(), expect.data(), rows, cols, 1e-6f);
    Tensor dx = upload(x), dw = upload(w), dy = upload(expect);
    dev.rms_norm_zero_centred(static_cast<const float*>(dx.raw()),
                              static_cast<const float*>(dw.raw()), static_cast<float*>(dy.raw()),
                              rows, cols, 1e-6f);
    dev.synchronize();
    const float d = max_abs_diff(expect, dy.to_vector());
    report << "rms_norm_zero_centred(33x300) max_abs_diff " << d << "\n";
    ok = ok && d <= tol;
  }
  if (!ok) throw Error("CUDA self check failed:\n" + report.str());
  return report.str();
}

}  // namespace cuda
}  // namespace hypic::kernels
