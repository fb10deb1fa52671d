// Device discovery and the device-against-host self check (every device kernel is trusted
// only against the host one, as ggml's test-backend-ops does).
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "check.cuh"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device.hpp"
#include "ops.cuh"

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

void set_device(int index) {
  check(cudaSetDevice(index), "cudaSetDevice");
  keep_pool_mapped();
}

bool tensor_cores() {
  cuda_backend();  // HYPIC_CUDA_GEMM is read when the backend is created
  return tensor_cores_flag();
}
void set_tensor_cores(bool on) {
  cuda_backend();
  tensor_cores_flag() = on;
}

std::string sticky_fault() {
  return first_sticky_fault();
}

void keep_pool_mapped() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = UINT64_MAX;  // never unmap at a sync; memory goes back at exit
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute (release threshold)");
}

std::string device_uuid(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

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
  auto f = [](Tensor& t) { return static_cast<float*>(t.raw()); };
  {  // the chunked delta rule with its transition, Gated DeltaNet and KDA, 2 chunks + a tail
    for (Member m : {Member::GatedDeltaNet, Member::KDA}) {
      const FamilySpec spec = member_spec(m);
      const FamilyDims d{150, 2, 4, 48, 64};
      auto q = random(size_t(d.T) * d.Hk * d.dk), k = random(q.size()),
           v = random(size_t(d.T) * d.Hv * d.dv);
      for (auto* x : {&q, &k})  // unit rows, as after the layer's L2 norm
        host.l2_normalize_rows(x->data(), d.T * d.Hk, d.dk, 1e-6f, 1.0f);
      std::vector<float> g(size_t(d.T) * d.Hv * (m == Member::KDA ? d.dk : 1)),
          beta(size_t(d.T) * d.Hv);
      std::uniform_real_distribution<float> gate(-0.5f, -0.01f), b01(0.0f, 1.0f);
      for (auto& x : g) x = gate(rng);
      for (auto& x : beta) x = b01(rng);
      std::vector<float> state(size_t(d.Hv) * d.dk * d.dv, 0.0f), out(size_t(d.T) * d.Hv * d.dv),
          trans(size_t(d.Hv) * d.dk * d.dk);
      Tensor dq = upload(q), dk = upload(k), dv = upload(v), dg = upload(g), db = upload(beta),
             ds = upload(state), dout = upload(out), dt = upload(trans);
      host.family_chunked(spec, d, {q.data(), k.data(), v.data(), g.data(), beta.data()},
                          state.data(), out.data(), trans.data(), 64);
      dev.family_chunked(spec, d, {f(dq), f(dk), f(dv), f(dg), f(db)}, f(ds), f(dout), f(dt), 64);
      const float diff =
          std::max({max_abs_diff(out, dout.to_vector()), max_abs_diff(state, ds.to_vector()),
                    max_abs_diff(trans, dt.to_vector())});
      report << "family_chunked(" << member_name(m) << ", 150 tokens) max_abs_diff " << diff
             << "\n";
      ok = ok && diff <= tol * 10;
    }
  }
  {  // causal GQA attention over cached + new keys
    const AttentionDims d{70, 90, 8, 2, 64, 0.125f};
    auto q = random(size_t(d.T) * d.H * d.hd), k = random(size_t(d.n_kv) * d.Hkv * d.hd),
         v = random(k.size());
    std::vector<float> out(q.size()), work(host.attention_workspace_floats(d));
    host.attention_causal(d, q.data(), k.data(), v.data(), out.data(), work.data());
    Tensor dq = upload(q), dk = upload(k), dv = upload(v), dout = upload(out);
    dev.attention_causal(d, f(dq), f(dk), f(dv), f(dout), nullptr);
    const float diff = max_abs_diff(out, dout.to_vector());
    report << "attention_causal(70 queries, 90 keys, GQA 4) max_abs_diff " << diff << "\n";
    ok = ok && diff <= tol;
  }
  dev.synchronize();
  if (!ok) throw Error("CUDA self check failed:\n" + report.str());
  return report.str();
}

}  // namespace cuda
}  // namespace hypic::kernels
