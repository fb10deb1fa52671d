// Device discovery and the device-against-host self check (every device kernel is trusted
// only against the host one, as ggml's test-backend-ops does).
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "check.cuh"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/device.hpp"
#include "hypic/kernels/norm.hpp"

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
struct DeviceBuffer {
  float* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<float>& host) {
    check(cudaMalloc(&ptr, host.size() * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy H2D");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<float> fetch(size_t n) const {
    std::vector<float> out(n);
    check(cudaMemcpy(out.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}
}  // namespace

std::string self_check(float tol) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  std::ostringstream report;
  bool ok = true;

  {  // gemm with both transposes
    const int m = 67, n = 45, k = 130;
    auto a = random(size_t(k) * m), b = random(size_t(n) * k);
    std::vector<float> host(size_t(m) * n);
    kernels::gemm(true, true, m, n, k, 1.0f, a.data(), m, b.data(), k, 0.0f, host.data(), n);
    DeviceBuffer da(a), db(b), dc(host);
    gemm(true, true, m, n, k, da.ptr, m, db.ptr, k, dc.ptr, n);
    check(cudaDeviceSynchronize(), "gemm");
    const float d = max_abs_diff(host, dc.fetch(host.size()));
    report << "gemm(T,T 67x45x130) max_abs_diff " << d << "\n";
    ok = ok && d <= tol * 10;  // k=130 accumulations in a different order
  }
  {  // zero-centred RMSNorm
    const int rows = 33, cols = 300;
    auto x = random(size_t(rows) * cols), w = random(cols);
    std::vector<float> host(x.size());
    kernels::rms_norm_zero_centred(x.data(), w.data(), host.data(), rows, cols, 1e-6f);
    DeviceBuffer dx(x), dw(w), dy(host);
    rms_norm_zero_centred(dx.ptr, dw.ptr, dy.ptr, rows, cols, 1e-6f);
    check(cudaDeviceSynchronize(), "rms_norm");
    const float d = max_abs_diff(host, dy.fetch(host.size()));
    report << "rms_norm_zero_centred(33x300) max_abs_diff " << d << "\n";
    ok = ok && d <= tol;
  }
  if (!ok) throw std::runtime_error("CUDA self check failed:\n" + report.str());
  return report.str();
}

}  // namespace cuda
}  // namespace hypic::kernels
