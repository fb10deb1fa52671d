// Per-head forms of a segment entry's T: the bound, the SVD, packing and unpacking
// (entry_forms.hpp has the derivation).
#include "pic/entry_forms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "hypic/error.hpp"
#include "hypic/kernels/blas.hpp"
#include "store/entry.hpp"

#if defined(HYPIC_BLAS_OPENBLAS)
// OpenBLAS exports LAPACK's Fortran interface (no lapacke.h is installed): sgesdd with the
// trailing hidden length of the character argument (harmless where it is not expected).
extern "C" void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda,
                        float* s, float* u, const int* ldu, float* vt, const int* ldvt, float* work,
                        const int* lwork, int* iwork, int* info, size_t jobz_len);
#endif

namespace hypic::pic {

const char* head_form_name(HeadForm f) {
  switch (f) {
    case HeadForm::Absent:
      return "absent";
    case HeadForm::Scalar:
      return "scalar";
    case HeadForm::Diagonal:
      return "diagonal";
    case HeadForm::LowRank:
      return "lowrank";
    case HeadForm::Dense:
      return "dense";
    case HeadForm::Fp8:
      return "fp8";
  }
  return "?";
}

int64_t head_form_floats(HeadForm f, int dk, int rank) {
  switch (f) {
    case HeadForm::Absent:
      return 0;
    case HeadForm::Scalar:
      return 1;
    case HeadForm::Diagonal:
      return dk;
    case HeadForm::LowRank:
      return int64_t(dk) + 2 * int64_t(rank) * dk;
    case HeadForm::Dense:
      return int64_t(dk) * dk;
    case HeadForm::Fp8:
      return fp8_floats(dk, dk);
  }
  return 0;
}

uint8_t e4m3_encode(double x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  if (a < std::ldexp(1.0, -6)) {  // subnormal: steps of 2⁻⁹ (8 steps: the smallest normal)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * 512.0)));
  }
  if (a >= 448.0) return sign | 0x7E;  // saturate (448 is the largest finite value)
  int e = 0;
  std::frexp(a, &e);  // a = f·2^e, f ∈ [0.5, 1): a = 1.m·2^(e−1)
  int exponent = e - 1;
  double m = std::nearbyint(std::ldexp(a, 3 - exponent));  // 8 … 16
  if (m == 16.0) {
    m = 8.0;
    ++exponent;
  }
  return static_cast<uint8_t>(sign | ((exponent + 7) << 3) | (static_cast<int>(m) - 8));
}

float e4m3_decode(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(static_cast<float>(8 + m), e - 10);
}

bool fp8_fits_store(DType store_dtype) {
  return store_dtype == DType::BF16 || store_dtype == DType::F32;
}

int64_t fp8_floats(int rows, int cols) {
  return int64_t(rows) + (int64_t(rows) * cols + 1) / 2;
}

namespace {
// The smallest row exponent e whose scale 2^e maps the row's largest magnitude below 240.
int fp8_row_exponent(double amax) {
  if (amax == 0) return 0;
  int e = 0;
  std::frexp(amax / kFp8RowMax, &e);  // amax / 240 < 2^e
  return e;
}
constexpr int kFp8MinExponent = -200, kFp8MaxExponent = 200;  // past float's range either way
}  // namespace

bool fp8_encode_matrix(const float* x, int rows, int cols, float* out) {
  const size_t n = size_t(rows) * cols;
  std::vector<uint8_t> codes(n + 1, 0);
  for (int r = 0; r < rows; ++r) {
    double amax = 0;
    const float* row = x + size_t(r) * cols;
    for (int c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) return false;
      amax = std::max(amax, std::fabs(double(row[c])));
    }
    const int e = fp8_row_exponent(amax);
    out[r] = static_cast<float>(e);
    for (int c = 0; c < cols; ++c)
      codes[size_t(r) * cols + c] = e4m3_encode(std::ldexp(double(row[c]), -e));
  }
  float* pairs = out + rows;
  for (size_t i = 0; i < n; i += 2)
    pairs[i / 2] = store::bf16_to_f32(static_cast<uint16_t>((codes[i] << 8) | codes[i + 1]));
  return true;
}

std::string fp8_decode_matrix(const float* packed, int rows, int cols, float* x) {
  const size_t n = size_t(rows) * cols;
  const float* pairs = packed + rows;
  for (int r = 0; r < rows; ++r) {
    const float e = packed[r];
    if (!(e == std::floor(e) && e >= kFp8MinExponent && e <= kFp8MaxExponent))
      return "an fp8 row exponent is " + std::to_string(e);
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      uint32_t bits = 0;
      std::memcpy(&bits, &pairs[i / 2], sizeof bits);
      if ((bits & 0xFFFFu) != 0 || (i == n - 1 && i % 2 == 0 && ((bits >> 16) & 0xFFu) != 0))
        return "an fp8 pair is not a pair of codes";
      const uint8_t code = static_cast<uint8_t>(i % 2 == 0 ? bits >> 24 : bits >> 16);
      if ((code & 0x7F) > 0x77) return "an fp8 code lies past the row's scale";
      x[i] = static_cast<float>(std::ldexp(double(e4m3_decode(code)), static_cast<int>(e)));
    }
  }
  return "";
}

bool svd_uses_lapack() {
#if defined(HYPIC_BLAS_OPENBLAS)
  return true;
#else
  return false;
#endif
}

void svd_jacobi(int n, const float* a, std::vector<float>& sigma, std::vector<float>& u,
                std::vector<float>& vt) {
  const size_t nn = size_t(n) * n;
  std::vector<double> w(nn), v(nn, 0.0);  // columns of A·V, rotated to orthogonality
  for (size_t i = 0; i < nn; ++i) w[i] = a[i];
  for (int i = 0; i < n; ++i) v[size_t(i) * n + i] = 1.0;
  const double eps = std::numeric_limits<double>::epsilon();
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int p = 0; p < n - 1; ++p)
      for (int q = p + 1; q < n; ++q) {
        double al = 0, be = 0, ga = 0;
        for (int i = 0; i < n; ++i) {
          const double x = w[size_t(i) * n + p], y = w[size_t(i) * n + q];
          al += x * x;
          be += y * y;
          ga += x * y;
        }
        if (ga == 0.0 || std::abs(ga) <= 4 * eps * std::sqrt(al * be)) continue;
        rotated = true;
        const double zeta = (be - al) / (2 * ga);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (int i = 0; i < n; ++i) {
          double& x = w[size_t(i) * n + p];
          double& y = w[size_t(i) * n + q];
          const double nx = c * x - s * y, ny = s * x + c * y;
          x = nx;
          y = ny;
          double& vx = v[size_t(i) * n + p];
          double& vy = v[size_t(i) * n + q];
          const double nvx = c * vx - s * vy, nvy = s * vx + c * vy;
          vx = nvx;
          vy = nvy;
        }
      }
    if (!rotated) break;
  }
  std::vector<double> norm(n);
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += w[size_t(i) * n + j] * w[size_t(i) * n + j];
    norm[j] = std::sqrt(s);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return norm[x] > norm[y]; });
  sigma.assign(n, 0.0f);
  u.assign(nn, 0.0f);
  vt.assign(nn, 0.0f);
  for (int k = 0; k < n; ++k) {
    const int j = order[k];
    sigma[k] = static_cast<float>(norm[j]);
    for (int i = 0; i < n; ++i) {
      if (norm[j] > 0) u[size_t(i) * n + k] = static_cast<float>(w[size_t(i) * n + j] / norm[j]);
      vt[size_t(k) * n + i] = static_cast<float>(v[size_t(i) * n + j]);
    }
  }
}

void svd(int n, const float* a, std::vector<float>& sigma, std::vector<float>& u,
         std::vector<float>& vt) {
#if defined(HYPIC_BLAS_OPENBLAS)
  // LAPACK is column-major: the row-major buffer is Aᵀ = V Σ Uᵀ there, so its "U" output read
  // row-major is Vᵀ and its "VT" output read row-major is U.
  const size_t nn = size_t(n) * n;
  std::vector<float> work_a(a, a + nn);
  sigma.assign(n, 0.0f);
  u.assign(nn, 0.0f);
  vt.assign(nn, 0.0f);
  std::vector<int> iwork(8 * size_t(n));
  int lwork = -1, info = 0;
  float query = 0;
  sgesdd_("S", &n, &n, work_a.data(), &n, sigma.data(), vt.data(), &n, u.data(), &n, &query, &lwork,
          iwork.data(), &info, 1);
  HYPIC_REQUIRE(info == 0, "sgesdd: workspace query failed (info " + std::to_string(info) + ")");
  lwork = static_cast<int>(query) + 1;
  std::vector<float> work(static_cast<size_t>(lwork));
  sgesdd_("S", &n, &n, work_a.data(), &n, sigma.data(), vt.data(), &n, u.data(), &n, work.data(),
          &lwork, iwork.data(), &info, 1);
  if (info != 0) svd_jacobi(n, a, sigma, u, vt);  // no convergence: the slower, sure path
#else
  svd_jacobi(n, a, sigma, u, vt);
#endif
}

HeadChoice choose_head_form(const float* t, int dk, double tol, std::vector<float>& payload,
                            bool fp8) {
  HYPIC_REQUIRE(std::isfinite(tol) && tol >= 0,
                "entry tolerance must be a finite number >= 0, not " + std::to_string(tol));
  HeadChoice c;
  const size_t dd = size_t(dk) * dk;
  auto keep_dense = [&] {
    c.form = HeadForm::Dense;
    c.rank = 0;
    c.t_error = 0;
    c.bound = 0;
    payload.assign(t, t + dd);
    return c;
  };
  double t_fro = 0, r_fro = 0, d_max = 0, d_min = 0;
  std::vector<float> d(dk);
  std::vector<float> r(t, t + dd);
  for (int i = 0; i < dk; ++i) {
    d[i] = t[size_t(i) * dk + i];
    r[size_t(i) * dk + i] = 0.0f;
  }
  for (size_t i = 0; i < dd; ++i) {
    t_fro += double(t[i]) * t[i];
    r_fro += double(r[i]) * r[i];
  }
  t_fro = std::sqrt(t_fro);
  r_fro = std::sqrt(r_fro);
  if (!std::isfinite(t_fro) || tol == 0) {
    c.t_norm = t_fro;
    return keep_dense();
  }
  d_max = *std::max_element(d.begin(), d.end());
  d_min = *std::min_element(d.begin(), d.end());
  const double inf = std::numeric_limits<double>::infinity();
  auto amplified = [&](double err, double tau) {
    if (err == 0) return 0.0;
    return tau < 1 ? err / (1 - tau) : inf;
  };
  auto pick = [&](HeadForm f, int rank, double err, double tau) {
    c.form = f;
    c.rank = rank;
    c.t_norm = tau;
    c.t_error = err;
    c.bound = amplified(err, tau);
  };

  // Cheap first: the Frobenius norms bound the spectral ones, no SVD needed.
  const double t_mid = 0.5 * (d_max + d_min), d_spread = 0.5 * (d_max - d_min);
  // The forms that need no SVD, tried with τ (a bound on ‖T‖₂, which also bounds the absent
  // form's error): first with ‖T‖_F, then, when none passed, with the SVD's exact σ₁.
  auto structured = [&](double tau) {
    if (amplified(tau, tau) <= tol) {
      pick(HeadForm::Absent, 0, tau, tau);
      payload.clear();
      return true;
    }
    if (amplified(d_spread + r_fro, tau) <= tol) {
      pick(HeadForm::Scalar, 0, d_spread + r_fro, tau);
      payload.assign(1, static_cast<float>(t_mid));
      return true;
    }
    if (amplified(r_fro, tau) <= tol) {
      pick(HeadForm::Diagonal, 0, r_fro, tau);
      payload = d;
      return true;
    }
    return false;
  };
  if (structured(t_fro)) return c;
  // The SVD of T: its exact spectral norm, and the truncation errors. The SVD's float rounding
  // (backward error ~ dk·2⁻²⁴·‖T‖) is added to every σ used as an error.
  std::vector<float> sigma, u, vt;
  svd(dk, t, sigma, u, vt);
  const double slack = 8.0 * dk * std::ldexp(1.0, -24) * t_fro;
  auto sv = [&](int i) { return i < dk ? std::min(double(sigma[i]) + slack, t_fro) : 0.0; };
  const double tau = sv(0);
  if (structured(tau)) return c;
  const int max_rank = std::min(lowrank_max_tokens(dk), 256);
  // fp8 is tried where it is smaller than the low rank left to try: its error is measured.
  const int64_t fp8_size = head_form_floats(HeadForm::Fp8, dk, 0);
  bool fp8_tried = !fp8;
  auto try_fp8 = [&] {
    fp8_tried = true;
    std::vector<float> q(static_cast<size_t>(fp8_size)), back(dd);
    if (!fp8_encode_matrix(t, dk, dk, q.data())) return false;
    fp8_decode_matrix(q.data(), dk, dk, back.data());
    double err = 0;
    for (size_t i = 0; i < dd; ++i) {
      const double dlt = double(t[i]) - back[i];
      err += dlt * dlt;
    }
    err = std::sqrt(err);
    if (amplified(err, tau) > tol) return false;
    pick(HeadForm::Fp8, 0, err, tau);
    payload = std::move(q);
    return true;
  };
  for (int k = 1; k <= max_rank; ++k) {
    if (!fp8_tried && head_form_floats(HeadForm::LowRank, dk, k) >= fp8_size && try_fp8()) return c;
    if (amplified(sv(k), tau) > tol) continue;
    pick(HeadForm::LowRank, k, sv(k), tau);
    // T̂ = T_k = Σ_{i<k} σ_i u_i v_iᵀ, kept as diag(0) − XᵀY with X's rows −σ_i·u_i and Y's
    // rows v_iᵀ (LinearSummary's low-rank form).
    payload.assign(static_cast<size_t>(head_form_floats(HeadForm::LowRank, dk, k)), 0.0f);
    float* x = payload.data() + dk;
    float* y = x + size_t(k) * dk;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < dk; ++j) {
        x[size_t(i) * dk + j] = -sigma[i] * u[size_t(j) * dk + i];
        y[size_t(i) * dk + j] = vt[size_t(i) * dk + j];
      }
    return c;
  }
  if (!fp8_tried && try_fp8()) return c;
  keep_dense();
  c.t_norm = tau;
  return c;
}

bool PackedT::all_dense() const {
  return std::all_of(choices.begin(), choices.end(),
                     [](const HeadChoice& c) { return c.form == HeadForm::Dense; });
}

int64_t head_s_floats(bool fp8, int dk, int dv) {
  return fp8 ? fp8_floats(dk, dv) : int64_t(dk) * dv;
}

PackedT pack_t(const LinearSummary& dense, double tolerance, bool fp8) {
  HYPIC_REQUIRE(dense.structure == TStructure::Dense, "pack_t: T must be dense");
  const int H = dense.heads, dk = dense.dk, dv = dense.dv;
  PackedT p;
  p.forms.resize(size_t(H) * 2);
  p.choices.resize(H);
  std::vector<float> payload, payload_fp8_s, s_q;
  std::vector<std::vector<float>> s_payloads(H);
  std::vector<float> s_back(size_t(dk) * dv);
  bool any_s_fp8 = false;
  for (int h = 0; h < H; ++h) {
    const float* t = dense.t.data() + size_t(dk) * dk * h;
    HeadChoice c = choose_head_form(t, dk, tolerance, payload, fp8);
    // S(C|0) in fp8 when its measured error leaves room for a T form, and the pair is smaller.
    if (fp8 && tolerance > 0 && dense.s.size() == size_t(H) * dk * dv) {
      const float* s = dense.s.data() + size_t(dk) * dv * h;
      s_q.assign(static_cast<size_t>(fp8_floats(dk, dv)), 0.0f);
      if (fp8_encode_matrix(s, dk, dv, s_q.data())) {
        fp8_decode_matrix(s_q.data(), dk, dv, s_back.data());
        double err = 0, norm = 0;
        for (size_t i = 0; i < s_back.size(); ++i) {
          const double dlt = double(s[i]) - s_back[i];
          err += dlt * dlt;
          norm += double(s[i]) * s[i];
        }
        const double eps_s = norm > 0 ? std::sqrt(err / norm) : 0.0;
        if (eps_s <= tolerance) {
          std::vector<float> alt_payload;
          HeadChoice alt = eps_s < tolerance
                               ? choose_head_form(t, dk, tolerance - eps_s, alt_payload, fp8)
                               : choose_head_form(t, dk, 0.0, alt_payload, fp8);
          const int64_t full = head_form_floats(c.form, dk, c.rank) + head_s_floats(false, dk, dv);
          const int64_t with_fp8 =
              head_form_floats(alt.form, dk, alt.rank) + head_s_floats(true, dk, dv);
          if (with_fp8 < full) {
            c = alt;
            c.s_fp8 = true;
            c.s_error = eps_s;
            c.bound += eps_s;
            payload = std::move(alt_payload);
            s_payloads[h] = s_q;
            any_s_fp8 = true;
          }
        }
      }
    }
    p.choices[h] = c;
    p.forms[size_t(h) * 2] = static_cast<float>(static_cast<int>(c.form));
    p.forms[size_t(h) * 2 + 1] =
        static_cast<float>(c.form == HeadForm::Fp8 ? kFp8PackBf16 : c.rank);
    p.packed.insert(p.packed.end(), payload.begin(), payload.end());
  }
  if (any_s_fp8) {
    p.s_forms.resize(size_t(H) * 4);
    for (int h = 0; h < H; ++h) {
      const bool q = p.choices[h].s_fp8;
      p.s_forms[size_t(h) * 4] = q ? 1.0f : 0.0f;
      p.s_forms[size_t(h) * 4 + 1] = q ? static_cast<float>(kFp8PackBf16) : 0.0f;
      p.s_forms[size_t(h) * 4 + 2] = static_cast<float>(dk);
      p.s_forms[size_t(h) * 4 + 3] = static_cast<float>(dv);
      if (q) {
        p.s_packed.insert(p.s_packed.end(), s_payloads[h].begin(), s_payloads[h].end());
      } else {
        const float* s = dense.s.data() + size_t(dk) * dv * h;
        p.s_packed.insert(p.s_packed.end(), s, s + size_t(dk) * dv);
      }
    }
  }
  return p;
}

std::string unpack_s(const std::vector<float>& forms, const std::vector<float>& packed,
                     LinearSummary& sum) {
  const int H = sum.heads, dk = sum.dk, dv = sum.dv;
  if (forms.size() != size_t(H) * 4)
    return "Sform holds " + std::to_string(forms.size()) + " values, not 4 per head (" +
           std::to_string(4 * H) + ")";
  int64_t total = 0;
  for (int h = 0; h < H; ++h) {
    const float* f = forms.data() + size_t(h) * 4;
    const bool ok_form = (f[0] == 0 && f[1] == 0) || (f[0] == 1 && f[1] == kFp8PackBf16);
    if (!ok_form || f[2] != static_cast<float>(dk) || f[3] != static_cast<float>(dv))
      return "head " + std::to_string(h) + "'s S form (" + std::to_string(f[0]) + ", " +
             std::to_string(f[1]) + ", " + std::to_string(f[2]) + ", " + std::to_string(f[3]) +
             ") is not (0, 0, dk, dv) or (1, " + std::to_string(kFp8PackBf16) +
             ", dk, dv) with dk " + std::to_string(dk) + ", dv " + std::to_string(dv);
    total += head_s_floats(f[0] == 1, dk, dv);
  }
  if (total != static_cast<int64_t>(packed.size()))
    return "Spack holds " + std::to_string(packed.size()) + " values, the forms need " +
           std::to_string(total);
  sum.s.assign(size_t(H) * dk * dv, 0.0f);
  const float* p = packed.data();
  for (int h = 0; h < H; ++h) {
    const bool q = forms[size_t(h) * 4] == 1;
    float* s = sum.s.data() + size_t(dk) * dv * h;
    if (q) {
      const std::string problem = fp8_decode_matrix(p, dk, dv, s);
      if (!problem.empty()) return "head " + std::to_string(h) + "'s S: " + problem;
    } else {
      std::copy(p, p + size_t(dk) * dv, s);
    }
    p += head_s_floats(q, dk, dv);
  }
  return "";
}

std::string unpack_t(const std::vector<float>& forms, const std::vector<float>& packed,
                     LinearSummary& sum) {
  const int H = sum.heads, dk = sum.dk;
  if (forms.size() != size_t(H) * 2)
    return "Tform holds " + std::to_string(forms.size()) + " values, not 2 per head (" +
           std::to_string(2 * H) + ")";
  std::vector<HeadForm> f(H);
  std::vector<int> rank(H);
  int64_t total = 0;
  int max_rank = 0;
  bool any_dense = false, any_diag = false;
  for (int h = 0; h < H; ++h) {
    const float code = forms[size_t(h) * 2], rk = forms[size_t(h) * 2 + 1];
    if (!(code >= 0 && code < kHeadForms && code == std::floor(code)))
      return "head " + std::to_string(h) + " has no form code " + std::to_string(code);
    f[h] = static_cast<HeadForm>(static_cast<int>(code));
    const bool lowrank = f[h] == HeadForm::LowRank, q = f[h] == HeadForm::Fp8;
    if (!(rk == std::floor(rk)) || (lowrank && !(rk >= 1 && rk <= lowrank_max_tokens(dk))) ||
        (q && rk != kFp8PackBf16) || (!lowrank && !q && rk != 0))
      return "head " + std::to_string(h) + " (" + head_form_name(f[h]) + ") has rank " +
             std::to_string(rk);
    rank[h] = lowrank ? static_cast<int>(rk) : 0;
    max_rank = std::max(max_rank, rank[h]);
    any_dense |= f[h] == HeadForm::Dense || q;
    any_diag |= f[h] == HeadForm::Diagonal || lowrank;
    total += head_form_floats(f[h], dk, rank[h]);
  }
  if (total != static_cast<int64_t>(packed.size()))
    return "Tpack holds " + std::to_string(packed.size()) + " values, the forms need " +
           std::to_string(total);
  const TStructure st = any_dense      ? TStructure::Dense
                        : max_rank > 0 ? TStructure::LowRank
                        : any_diag     ? TStructure::Diagonal
                                       : TStructure::Scalar;
  sum.structure = st;
  sum.rank = st == TStructure::LowRank ? max_rank : 0;
  sum.t.assign(size_t(kernels::transition_floats_per_head(st, dk)) * H, 0.0f);
  sum.x.clear();
  sum.y.clear();
  if (st == TStructure::LowRank) {
    sum.x.assign(size_t(H) * max_rank * dk, 0.0f);
    sum.y.assign(sum.x.size(), 0.0f);
  }
  const float* p = packed.data();
  for (int h = 0; h < H; ++h) {
    const int64_t n = head_form_floats(f[h], dk, rank[h]);
    if (st == TStructure::Scalar) {
      sum.t[h] = f[h] == HeadForm::Scalar ? p[0] : 0.0f;
    } else if (st == TStructure::Dense) {
      float* t = sum.t.data() + size_t(dk) * dk * h;
      switch (f[h]) {
        case HeadForm::Absent:
          break;
        case HeadForm::Scalar:
          for (int c = 0; c < dk; ++c) t[size_t(c) * dk + c] = p[0];
          break;
        case HeadForm::Diagonal:
          for (int c = 0; c < dk; ++c) t[size_t(c) * dk + c] = p[c];
          break;
        case HeadForm::LowRank: {  // diag(d) − XᵀY, in double
          const float* x = p + dk;
          const float* y = x + size_t(rank[h]) * dk;
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dk; ++j) {
              double v = i == j ? p[i] : 0.0;
              for (int k = 0; k < rank[h]; ++k)
                v -= double(x[size_t(k) * dk + i]) * y[size_t(k) * dk + j];
              t[size_t(i) * dk + j] = static_cast<float>(v);
            }
          break;
        }
        case HeadForm::Dense:
          std::memcpy(t, p, sizeof(float) * size_t(n));
          break;
        case HeadForm::Fp8: {
          const std::string problem = fp8_decode_matrix(p, dk, dk, t);
          if (!problem.empty()) return "head " + std::to_string(h) + "'s T: " + problem;
          break;
        }
      }
    } else {  // Diagonal or LowRank: d per head, then the factors' rows (zero past the rank)
      float* d = sum.t.data() + size_t(dk) * h;
      if (f[h] == HeadForm::Scalar) std::fill(d, d + dk, p[0]);
      if (f[h] == HeadForm::Diagonal || f[h] == HeadForm::LowRank) std::copy(p, p + dk, d);
      if (f[h] == HeadForm::LowRank) {
        const size_t rows = size_t(rank[h]) * dk;
        std::copy(p + dk, p + dk + rows, sum.x.data() + size_t(max_rank) * dk * h);
        std::copy(p + dk + rows, p + dk + 2 * rows, sum.y.data() + size_t(max_rank) * dk * h);
      }
    }
    p += n;
  }
  return "";
}

std::string compose_packed(const std::vector<float>& forms, const std::vector<float>& packed,
                           int heads, int dk, int dv, const float* s0, float* state) {
  if (forms.size() != size_t(heads) * 2)
    return "Tform holds " + std::to_string(forms.size()) + " values, not 2 per head";
  const size_t hs = size_t(dk) * dv;
  std::vector<float> scratch, out(hs);
  const float* p = packed.data();
  const float* end = packed.data() + packed.size();
  for (int h = 0; h < heads; ++h) {
    const float code = forms[size_t(h) * 2], rk = forms[size_t(h) * 2 + 1];
    if (!(code >= 0 && code < kHeadForms && code == std::floor(code)))
      return "head " + std::to_string(h) + " has no form code " + std::to_string(code);
    const HeadForm f = static_cast<HeadForm>(static_cast<int>(code));
    const int rank = f == HeadForm::LowRank ? static_cast<int>(rk) : 0;
    if (f == HeadForm::LowRank && !(rank >= 1 && rank <= lowrank_max_tokens(dk)))
      return "head " + std::to_string(h) + " (lowrank) has rank " + std::to_string(rk);
    const int64_t n = head_form_floats(f, dk, rank);
    if (end - p < n) return "Tpack is shorter than its forms";
    float* x = state + hs * h;
    const float* add = s0 + hs * h;
    switch (f) {
      case HeadForm::Absent:
        std::copy(add, add + hs, x);
        break;
      case HeadForm::Scalar:
        for (size_t i = 0; i < hs; ++i) x[i] = p[0] * x[i] + add[i];
        break;
      case HeadForm::Diagonal:
        for (int r = 0; r < dk; ++r)
          for (int c = 0; c < dv; ++c) {
            const size_t i = size_t(r) * dv + c;
            x[i] = p[r] * x[i] + add[i];
          }
        break;
      case HeadForm::LowRank: {  // d ⊙ x − Xᵀ·(Y·x): Y·x is rank × dv
        const float* fx = p + dk;
        const float* fy = fx + size_t(rank) * dk;
        scratch.assign(size_t(rank) * dv, 0.0f);
        kernels::gemm(false, false, rank, dv, dk, 1.0f, fy, dk, x, dv, 0.0f, scratch.data(), dv);
        for (int r = 0; r < dk; ++r)
          for (int c = 0; c < dv; ++c) out[size_t(r) * dv + c] = p[r] * x[size_t(r) * dv + c];
        kernels::gemm(true, false, dk, dv, rank, -1.0f, fx, dk, scratch.data(), dv, 1.0f,
                      out.data(), dv);
        for (size_t i = 0; i < hs; ++i) x[i] = out[i] + add[i];
        break;
      }
      case HeadForm::Dense:
      case HeadForm::Fp8: {
        const float* t = p;
        if (f == HeadForm::Fp8) {
          scratch.assign(size_t(dk) * dk, 0.0f);
          const std::string problem = fp8_decode_matrix(p, dk, dk, scratch.data());
          if (!problem.empty()) return "head " + std::to_string(h) + "'s T: " + problem;
          t = scratch.data();
        }
        kernels::gemm(false, false, dk, dv, dk, 1.0f, t, dk, x, dv, 0.0f, out.data(), dv);
        for (size_t i = 0; i < hs; ++i) x[i] = out[i] + add[i];
        break;
      }
    }
    p += n;
  }
  if (p != end) return "Tpack is longer than its forms";
  return "";
}

int64_t PackedT::head_floats(int h, int dk) const {
  return head_form_floats(choices[h].form, dk, choices[h].rank);
}

void tally(const PackedT& p, int dk, FormTally& into, int dv) {
  for (size_t h = 0; h < p.choices.size(); ++h) {
    const int f = static_cast<int>(p.choices[h].form);
    into.heads[f] += 1;
    into.floats[f] += p.head_floats(static_cast<int>(h), dk);
    if (dv <= 0) continue;
    const bool q = p.choices[h].s_fp8;
    (q ? into.s_fp8_heads : into.s_full_heads) += 1;
    (q ? into.s_fp8_floats : into.s_full_floats) += head_s_floats(q, dk, dv);
  }
}

double default_entry_tolerance(DType store_dtype) {
  switch (store_dtype) {
    case DType::BF16:
      return std::ldexp(1.0, -9);
    case DType::F16:
      return std::ldexp(1.0, -12);
    default:
      return std::ldexp(1.0, -25);
  }
}

double parse_entry_tolerance(const std::string& text, DType store_dtype) {
  if (text == "auto") return default_entry_tolerance(store_dtype);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  HYPIC_REQUIRE(used == text.size() && !text.empty() && std::isfinite(v) && v >= 0,
                "--entry-tolerance '" + text + "': expected auto or a number >= 0");
  return v;
}

}  // namespace hypic::pic
