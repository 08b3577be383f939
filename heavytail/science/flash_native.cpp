// Flash-style eq. 7 on the CPU in one fused C++ loop: A_g(S)_ij = g(S_ij) / sum_l g(S_il), S = q k^T / sqrt(d)
// (eq. 1), for the kernels whose weight chain is written here (Table 1 and the power ELU of App. A).
//
// Per query block of BQ rows and key block of BK keys, the score tile S (BQ x BK floats, in L2) is made by one
// BLAS call, turned into weights in place while still in cache, and consumed by the next call, the loop structure
// of torch's own CPU flash attention for softmax. Forward keeps, per row, log g of the running maximum m, the
// kernel's row term and 1 / sum (the same three numbers as heavytail/science/flash_attention.py); backward
// recomputes S and uses d log g:
//
//   A = g(S) / sum g,  dV = A^T dO,  dS = A (dO V^T - D) (log g)'(S) / sqrt(d),  D = rowsum(dO * O),
//   dQ = dS K,  dK = dS^T Q.
//
// The weight chains mirror heavytail/science/kernels.py (``g_ratio``, ``ratio_row``, ``dlog_g``) term for term;
// tests/test_flash_native.py checks them against those functions on scores from -1e30 to 3e38.
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int W = Vec::size();

}  // namespace

// Fortran BLAS single-precision matrix product: torch's CPU build links MKL (or OpenBLAS) and exports it.
extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);

namespace {

// Row-major C (m x n) = alpha op(A) op(B) + beta C through column-major BLAS: C^T = op(B)^T op(A)^T.
inline void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  const char first = tb ? 'T' : 'N', second = ta ? 'T' : 'N';
  sgemm_(&first, &second, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

// The weight chains: EXP is softmax's e^s; POWER is (1 + elu(s))^q (squared ELU q = 2, linear ELU q = 1, and the
// power ELU family); LOG_ELU is log(1 + s) + 1 for s > 0, 1 / (1 - s) for s <= 0 (Table 1).
enum Chain { EXP = 0, POWER = 1, LOG_ELU = 2 };

// A chain as a type, with POWER's way to (1 + s)^q = b^q fixed at compile time: H = 2q when that is a whole number up
// to 8, b^(H / 2) sqrt(b)^(H % 2) with the products unrolled; H = -1 otherwise, exp(q log b) as kernels._base_power.
// (With the count of products read at run time, the per-score loop held an inner loop whose bounds it reloaded per
// vector: at N = 4096, d = 32, one thread, the squared ELU's forward took 45 ms against softmax's 23 ms; unrolled, 26.)
template <int Chain_, int H = 0>
struct Form {
  static constexpr int C = Chain_;
  static constexpr int halves = H;
};

// log g(m) for the row maximum m (once per row, so in scalar code).
template <int C>
inline float log_g(float q, float m) {
  if (C == EXP) return m;
  if (C == POWER) return m > 0.f ? q * std::log1p(m) : q * m;
  return m > 0.f ? std::log1p(std::log1p(m)) : -std::log1p(-m);
}

// The kernel's ratio_row: log g(m) for softmax, 1 + max(m, 0) for the ELU powers, 1 / g(m) for log-ELU.
template <int C>
inline float ratio_row(float m, float lg) {
  if (C == EXP) return lg;
  if (C == POWER) return 1.f + std::max(m, 0.f);
  return std::exp(-lg);
}

// e^x, log x and 1 / x for the chains. With AVX-512 they are inline (Cephes' single-precision polynomials, about 1 ulp,
// with the exponent handled exactly by scalef / getexp): a call to Sleef's e^x or log x, which at::vec makes,
// spills every live vector register around it (all are caller-saved), which the weight chains, with several
// vectors live around their one transcendental, pay per score. Elsewhere at::vec's (Sleef's) functions.
#if defined(CPU_CAPABILITY_AVX512)
inline Vec vexp(Vec v) {
  // x <= 0 here (s <= m); below -104 e^x is 0 in float32, and clamping keeps n finite for x = -inf.
  const __m512 x = _mm512_max_ps(v, _mm512_set1_ps(-104.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return Vec(_mm512_scalef_ps(y, n));
}

inline Vec vlog(Vec v) {
  // For x > 0, denormals included (getexp / getmant normalize them): x = 2^e m with m in [sqrt(1/2), sqrt(2)).
  const __m512 x = v;
  __m512 e = _mm512_getexp_ps(x);
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
  const __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356237309505f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.f));
  const __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.f));
  const __m512 z = _mm512_mul_ps(f, f);
  __m512 y = _mm512_set1_ps(7.0376836292e-2f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.1514610310e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.1676998740e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.2420140846e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.4249322787e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-1.6668057665e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.0000714765e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(-2.4999993993e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(3.3333331174e-1f));
  y = _mm512_mul_ps(_mm512_mul_ps(y, f), z);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
  y = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), y);
  __m512 out = _mm512_add_ps(f, y);
  out = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), out);
  // log inf = inf and log 0 = -inf, which the polynomial would turn into NaN.
  out = _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), x);
  return Vec(_mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                _mm512_set1_ps(-INFINITY)));
}

// log x for 1 <= x < inf (the log-ELU's 1 + s), to an absolute error below 1e-8, which is what the chain needs, since
// it adds the log to 1. Write x = 2^e m with m in [1, 2). The top four mantissa bits i of m pick
// c = 1 + (2i + 1) / 32, the middle of m's sixteenth of [1, 2), from a table holding c, 1 / c and log c. Then
// log x = e log 2 + log c + log(1 + r), where r = (m - c) / c and m - c is exact. Since |r| <= 1/33, five terms of
// log(1 + r)'s series leave an error of 1.3e-10. This takes 16 vector instructions against 21 for vlog's polynomial
// (Cephes', on [sqrt(1/2), sqrt(2)), checks aside), and the log-ELU pays for its log in both forward and backward.
alignas(64) constexpr float kLogMid[16] = {
    1.031250000e+00f, 1.093750000e+00f, 1.156250000e+00f, 1.218750000e+00f, 1.281250000e+00f, 1.343750000e+00f,
    1.406250000e+00f, 1.468750000e+00f, 1.531250000e+00f, 1.593750000e+00f, 1.656250000e+00f, 1.718750000e+00f,
    1.781250000e+00f, 1.843750000e+00f, 1.906250000e+00f, 1.968750000e+00f};
alignas(64) constexpr float kLogMidInv[16] = {
    9.696969697e-01f, 9.142857143e-01f, 8.648648649e-01f, 8.205128205e-01f, 7.804878049e-01f, 7.441860465e-01f,
    7.111111111e-01f, 6.808510638e-01f, 6.530612245e-01f, 6.274509804e-01f, 6.037735849e-01f, 5.818181818e-01f,
    5.614035088e-01f, 5.423728814e-01f, 5.245901639e-01f, 5.079365079e-01f};
alignas(64) constexpr float kLogMidLog[16] = {
    3.077165867e-02f, 8.961215869e-02f, 1.451820098e-01f, 1.978257433e-01f, 2.478361639e-01f, 2.954642129e-01f,
    3.409265870e-01f, 3.844116989e-01f, 4.260843953e-01f, 4.660897299e-01f, 5.045560108e-01f, 5.415972824e-01f,
    5.773153650e-01f, 6.118015411e-01f, 6.451379614e-01f, 6.773988236e-01f};

inline Vec vlog_ge1(Vec v) {
  const __m512 x = v;
  const __m512 e = _mm512_getexp_ps(x);
  const __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
  const __m512i i = _mm512_srli_epi32(_mm512_castps_si512(m), 19);  // permutexvar reads its low four bits
  const __m512 c = _mm512_permutexvar_ps(i, _mm512_load_ps(kLogMid));
  const __m512 r = _mm512_mul_ps(_mm512_sub_ps(m, c), _mm512_permutexvar_ps(i, _mm512_load_ps(kLogMidInv)));
  __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(0.2f), r, _mm512_set1_ps(-0.25f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.f / 3.f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(-0.5f));
  __m512 out = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);  // log(1 + r)
  out = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), out);
  out = _mm512_add_ps(out, _mm512_permutexvar_ps(i, _mm512_load_ps(kLogMidLog)));
  return Vec(_mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), out));
}

// Finite = true: for finite x only (1 - s and 1 + s of finite scores), without the check for 1 / inf.
template <bool Finite = false>
inline Vec vrcp(Vec v) {
  // 1 / x for x >= 1 (1 - s for s <= 0, the log-ELU and power-ELU bases): a 14-bit estimate and one Newton step,
  // within an ulp or two, at a quarter of a division's cost; 1 / inf = 0, which the Newton step would make NaN.
  const __m512 x = v;
  const __m512 r = _mm512_rcp14_ps(x);
  const __m512 out = _mm512_mul_ps(r, _mm512_fnmadd_ps(x, r, _mm512_set1_ps(2.f)));
  if constexpr (Finite) return Vec(out);
  return Vec(_mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ),
                                _mm512_setzero_ps()));
}

// The two sides of a score, max(s, 0) and min(s, 0), the mask s > 0, and a blend by it, in one instruction each
// (at::vec's maximum / minimum add a NaN check, and its comparisons widen the mask to a vector and back).
// vmaxps / vminps return their second operand when either is NaN, so a NaN score stays NaN on both sides.
using Mask = __mmask16;
inline Vec pos_part(Vec s) { return Vec(_mm512_max_ps(_mm512_setzero_ps(), s)); }
inline Vec neg_part(Vec s) { return Vec(_mm512_min_ps(_mm512_setzero_ps(), s)); }
inline Mask positive(Vec s) { return _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GT_OQ); }
inline Vec select(Mask pos, Vec if_pos, Vec if_not) { return Vec(_mm512_mask_blend_ps(pos, if_not, if_pos)); }
#else
inline Vec vexp(Vec x) { return x.exp(); }
inline Vec vlog(Vec x) { return x.log(); }
inline Vec vlog_ge1(Vec x) { return x.log(); }
template <bool Finite = false>
inline Vec vrcp(Vec x) { return Vec(1.f) / x; }

using Mask = Vec;
inline Vec pos_part(Vec s) { return at::vec::maximum(s, Vec(0.f)); }
inline Vec neg_part(Vec s) { return at::vec::minimum(s, Vec(0.f)); }
inline Mask positive(Vec s) { return s > Vec(0.f); }
inline Vec select(Mask pos, Vec if_pos, Vec if_not) { return Vec::blendv(if_not, if_pos, pos); }
#endif

struct RowTerms {
  Vec lg, row, inv_row;
};

template <int C>
inline RowTerms row_terms(float lg, float row) {
  return {Vec(lg), Vec(row), Vec(C == POWER ? 1.f / row : row)};
}

template <int H>
inline Vec power(float q, Vec b) {
  if constexpr (H < 0) {
    return vexp(Vec(q) * vlog(b));
  } else if constexpr (H == 0) {
    return Vec(1.f);
  } else {
    Vec out = (H % 2) ? b.sqrt() : b;
    for (int i = (H % 2) ? 0 : 1; i < H / 2; ++i) out = out * b;
    return out;
  }
}

// g(s) / g(m) for scaled scores s <= m. The branches are split with max / min (each side's input finite and in
// its domain) and joined by one blend.
template <class F>
inline Vec ratio(float q, Vec s, const RowTerms& r) {
  constexpr int C = F::C;
  if (C == EXP) return vexp(s - r.lg);
  const Vec one(1.f);
  const Vec sp = pos_part(s), sn = neg_part(s);
  const Mask pos = positive(s);
  if (C == POWER) return select(pos, power<F::halves>(q, (one + sp) * r.inv_row), vexp(Vec(q) * sn - r.lg));
  return select(pos, vlog_ge1(one + sp) + one, vrcp<true>(one - sn)) * r.row;
}

// g(s) / g(m) and dscale d log g(s) together, sharing their terms (log-ELU: one log and one division per score).
template <class F>
inline Vec ratio_dlog(float q, Vec s, const RowTerms& r, Vec& dlog, float dscale) {
  constexpr int C = F::C;
  const Vec one(1.f);
  if (C == EXP) {
    dlog = Vec(dscale);
    return vexp(s - r.lg);
  }
  const Vec sp = pos_part(s), sn = neg_part(s), base = one + sp;
  const Mask pos = positive(s);
  if (C == POWER) {
    dlog = Vec(q * dscale) * vrcp<true>(base);  // q / (1 + s); q on the negative branch, where the base is 1
    return select(pos, power<F::halves>(q, base * r.inv_row), vexp(Vec(q) * sn - r.lg));
  }
  const Vec lg1 = vlog_ge1(base) + one;
  const Vec inv = vrcp(select(pos, base * lg1, one - sn));  // 1 / (1 - s), or 1 / ((1 + s)(1 + log(1 + s)))
  dlog = inv * Vec(dscale);
  return select(pos, lg1, inv) * r.row;
}

inline float hmax(Vec v) {
  float t[W];
  v.store(t);
  return *std::max_element(t, t + W);
}

inline float hsum(Vec v) {
  float t[W];
  v.store(t);
  float s = 0.f;
  for (int i = 0; i < W; ++i) s += t[i];
  return s;
}

inline float row_max(const float* x, int n) {
  Vec mv(-std::numeric_limits<float>::infinity());
  int i = 0;
  for (; i + W <= n; i += W) mv = at::vec::maximum(mv, Vec::loadu(x + i));
  float m = hmax(mv);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[0..n) <- g(scale x) / g(m); returns their sum.
template <class F>
inline float weights(float q, float* x, int n, float scale, float lg, float row) {
  const Vec vs(scale);
  const RowTerms r = row_terms<F::C>(lg, row);
  Vec acc(0.f);
  int i = 0;
  for (; i + W <= n; i += W) {
    const Vec p = ratio<F>(q, Vec::loadu(x + i) * vs, r);
    p.store(x + i);
    acc = acc + p;
  }
  float sum = hsum(acc);
  if (i < n) {
    float t[W];
    ratio<F>(q, Vec::loadu(x + i, n - i) * vs, r).store(t);
    for (int j = 0; j < n - i; ++j) {
      x[i + j] = t[j];
      sum += t[j];
    }
  }
  return sum;
}

// s[0..n) <- A = g(scale s) / g(m) / sum;  dp[0..n) <- dS = A (dp - D) (log g)'(scale s) scale.
template <class F>
inline void weights_and_ds(float q, float* s, float* dp, int n, float scale, float lg, float row,
                           float inv_sum, float delta) {
  constexpr bool row_scaled = F::C == LOG_ELU;  // its weights end in a product with the row term: 1 / sum joins it
  const Vec vs(scale), vi(inv_sum), vd(delta);
  const RowTerms r = row_terms<F::C>(lg, row_scaled ? row * inv_sum : row);
  auto one = [&](Vec x, Vec d) {
    Vec dlog;
    Vec a = ratio_dlog<F>(q, x * vs, r, dlog, scale);
    if constexpr (!row_scaled) a = a * vi;
    return std::make_pair(a, a * (d - vd) * dlog);
  };
  int i = 0;
  for (; i + W <= n; i += W) {
    const auto [a, ds] = one(Vec::loadu(s + i), Vec::loadu(dp + i));
    a.store(s + i);
    ds.store(dp + i);
  }
  if (i < n) {
    const auto [a, ds] = one(Vec::loadu(s + i, n - i), Vec::loadu(dp + i, n - i));
    a.store(s + i, n - i);
    ds.store(dp + i, n - i);
  }
}

struct Shape {
  int64_t batch;
  int n, l, d, dv, bq, bk;
  int blocks() const { return (n + bq - 1) / bq; }
};

// Forward over (batch, query block) tasks; key blocks accumulated with online rescaling by g(m_old) / g(m_new).
template <class F>
void forward(float order, const Shape& z, const float* Q, const float* K, const float* V, float* O, float* R) {
  const float scale = 1.f / std::sqrt(static_cast<float>(z.d));
  const int nqb = z.blocks();
  at::parallel_for(0, z.batch * nqb, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> S(static_cast<size_t>(z.bq) * z.bk), acc(static_cast<size_t>(z.bq) * z.dv);
    std::vector<float> m(z.bq), lg(z.bq), row(z.bq), sum(z.bq);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / nqb;
      const int i0 = static_cast<int>(task % nqb) * z.bq, bq = std::min(z.bq, z.n - i0);
      const float* q = Q + (b * z.n + i0) * z.d;
      const float* k = K + b * z.l * z.d;
      const float* v = V + b * z.l * z.dv;
      for (int j0 = 0; j0 < z.l; j0 += z.bk) {
        const int bk = std::min(z.bk, z.l - j0);
        gemm(false, true, bq, bk, z.d, 1.f, q, z.d, k + static_cast<int64_t>(j0) * z.d, z.d, 0.f, S.data(), bk);
        for (int r = 0; r < bq; ++r) {
          float* s = S.data() + static_cast<int64_t>(r) * bk;
          const float mb = row_max(s, bk) * scale;  // g is increasing: max log g(S) = log g(max S)
          if (j0 == 0 || mb > m[r]) {
            const float lgn = log_g<F::C>(order, mb);
            if (j0 == 0) {
              sum[r] = 0.f;
            } else {
              const float c = std::exp(lg[r] - lgn);  // g(m_old) / g(m_new)
              float* a = acc.data() + static_cast<int64_t>(r) * z.dv;
              for (int t = 0; t < z.dv; ++t) a[t] *= c;
              sum[r] *= c;
            }
            m[r] = mb;
            lg[r] = lgn;
            row[r] = ratio_row<F::C>(mb, lgn);
          }
          sum[r] += weights<F>(order, s, bk, scale, lg[r], row[r]);
        }
        gemm(false, false, bq, z.dv, bk, 1.f, S.data(), bk, v + static_cast<int64_t>(j0) * z.dv, z.dv,
             j0 == 0 ? 0.f : 1.f, acc.data(), z.dv);
      }
      float* out = O + (b * z.n + i0) * z.dv;
      float* rows = R + (b * z.n + i0) * 3;
      for (int r = 0; r < bq; ++r) {
        const float inv = 1.f / sum[r];
        for (int t = 0; t < z.dv; ++t) out[r * z.dv + t] = acc[r * z.dv + t] * inv;
        rows[r * 3] = lg[r];
        rows[r * 3 + 1] = row[r];
        rows[r * 3 + 2] = inv;
      }
    }
  });
}

// Backward over the same tasks. dQ rows belong to one task; dK and dV sum over query blocks, so with several
// threads each thread adds into its own copy and the copies are summed in thread order (deterministic).
template <class F>
void backward(float order, const Shape& z, const float* Q, const float* K, const float* V, const float* O,
              const float* dO, const float* R, float* dQ, float* dK, float* dV) {
  const float scale = 1.f / std::sqrt(static_cast<float>(z.d));
  const int nqb = z.blocks();
  const int threads = at::get_num_threads();
  const bool own_copies = threads > 1 && z.batch * nqb > 1;
  const int64_t nk = z.batch * z.l * z.d, nv = z.batch * z.l * z.dv;
  std::vector<std::vector<float>> dk_copy(own_copies ? threads : 0), dv_copy(own_copies ? threads : 0);
  at::parallel_for(0, z.batch * nqb, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> S(static_cast<size_t>(z.bq) * z.bk), dP(static_cast<size_t>(z.bq) * z.bk);
    std::vector<float> delta(z.bq);
    float* dk_all = dK;
    float* dv_all = dV;
    if (own_copies) {
      const int t = at::get_thread_num();
      if (dk_copy[t].empty()) {
        dk_copy[t].assign(nk, 0.f);
        dv_copy[t].assign(nv, 0.f);
      }
      dk_all = dk_copy[t].data();
      dv_all = dv_copy[t].data();
    }
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / nqb;
      const int i0 = static_cast<int>(task % nqb) * z.bq, bq = std::min(z.bq, z.n - i0);
      const int64_t row0 = b * z.n + i0;
      const float* q = Q + row0 * z.d;
      const float* dout = dO + row0 * z.dv;
      const float* out = O + row0 * z.dv;
      const float* rows = R + row0 * 3;
      const float* k = K + b * z.l * z.d;
      const float* v = V + b * z.l * z.dv;
      float* dq = dQ + row0 * z.d;
      for (int r = 0; r < bq; ++r) {
        float s = 0.f;
        for (int t = 0; t < z.dv; ++t) s += dout[r * z.dv + t] * out[r * z.dv + t];
        delta[r] = s;  // D = rowsum(dO * O)
      }
      for (int j0 = 0; j0 < z.l; j0 += z.bk) {
        const int bk = std::min(z.bk, z.l - j0);
        const float* kj = k + static_cast<int64_t>(j0) * z.d;
        const float* vj = v + static_cast<int64_t>(j0) * z.dv;
        gemm(false, true, bq, bk, z.d, 1.f, q, z.d, kj, z.d, 0.f, S.data(), bk);
        gemm(false, true, bq, bk, z.dv, 1.f, dout, z.dv, vj, z.dv, 0.f, dP.data(), bk);
        for (int r = 0; r < bq; ++r)
          weights_and_ds<F>(order, S.data() + static_cast<int64_t>(r) * bk, dP.data() + static_cast<int64_t>(r) * bk,
                            bk, scale, rows[r * 3], rows[r * 3 + 1], rows[r * 3 + 2], delta[r]);
        gemm(true, false, bk, z.dv, bq, 1.f, S.data(), bk, dout, z.dv, 1.f, dv_all + (b * z.l + j0) * z.dv, z.dv);
        gemm(true, false, bk, z.d, bq, 1.f, dP.data(), bk, q, z.d, 1.f, dk_all + (b * z.l + j0) * z.d, z.d);
        gemm(false, false, bq, z.d, bk, 1.f, dP.data(), bk, kj, z.d, j0 == 0 ? 0.f : 1.f, dq, z.d);
      }
    }
  });
  for (int t = 0; t < static_cast<int>(dk_copy.size()); ++t) {
    if (dk_copy[t].empty()) continue;
    for (int64_t i = 0; i < nk; ++i) dK[i] += dk_copy[t][i];
    for (int64_t i = 0; i < nv; ++i) dV[i] += dv_copy[t][i];
  }
}

void check_inputs(const std::vector<torch::Tensor>& ts, int64_t chain) {
  TORCH_CHECK(chain == EXP || chain == POWER || chain == LOG_ELU, "unknown weight chain ", chain);
  for (const auto& t : ts) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.dim() == 3,
                "flash_native expects contiguous float32 CPU tensors of shape (B, N, d)");
  }
}

Shape shape_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t bq, int64_t bk) {
  TORCH_CHECK(bq > 0 && bk > 0, "block sizes must be positive");
  return {q.size(0), static_cast<int>(q.size(1)), static_cast<int>(k.size(1)), static_cast<int>(q.size(2)),
          static_cast<int>(v.size(2)), static_cast<int>(bq), static_cast<int>(bk)};
}

// Calls f(Form<...>{}) for the chain and order.
template <class Fn>
void by_form(int64_t chain, double q, Fn&& f) {
  if (chain == EXP) return f(Form<EXP>{});
  if (chain == LOG_ELU) return f(Form<LOG_ELU>{});
  const double halves = 2.0 * q;
  const int h = halves == std::round(halves) && halves >= 0.0 && halves <= 8.0 ? static_cast<int>(halves) : -1;
  switch (h) {
    case 0: return f(Form<POWER, 0>{});
    case 1: return f(Form<POWER, 1>{});
    case 2: return f(Form<POWER, 2>{});
    case 3: return f(Form<POWER, 3>{});
    case 4: return f(Form<POWER, 4>{});
    case 5: return f(Form<POWER, 5>{});
    case 6: return f(Form<POWER, 6>{});
    case 7: return f(Form<POWER, 7>{});
    case 8: return f(Form<POWER, 8>{});
    default: return f(Form<POWER, -1>{});
  }
}

// (B, N, d), (B, L, d), (B, L, dv) -> out (B, N, dv) and rows (B, N, 3): log g(m), ratio_row, 1 / sum.
std::vector<torch::Tensor> flash_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, int64_t chain,
                                         double order, int64_t bq, int64_t bk) {
  check_inputs({q, k, v}, chain);
  const Shape z = shape_of(q, k, v, bq, bk);
  auto out = torch::empty({z.batch, z.n, z.dv}, q.options());
  auto rows = torch::empty({z.batch, z.n, 3}, q.options());
  by_form(chain, order, [&](auto form) {
    forward<decltype(form)>(static_cast<float>(order), z, q.data_ptr<float>(), k.data_ptr<float>(),
                            v.data_ptr<float>(), out.data_ptr<float>(), rows.data_ptr<float>());
  });
  return {out, rows};
}

// The gradients dQ, dK, dV from the forward's output and rows.
std::vector<torch::Tensor> flash_backward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor out,
                                          torch::Tensor dout, torch::Tensor rows, int64_t chain, double order,
                                          int64_t bq, int64_t bk) {
  check_inputs({q, k, v, out, dout, rows}, chain);
  const Shape z = shape_of(q, k, v, bq, bk);
  auto dq = torch::empty_like(q);
  auto dk = torch::zeros_like(k);
  auto dv = torch::zeros_like(v);
  by_form(chain, order, [&](auto form) {
    backward<decltype(form)>(static_cast<float>(order), z, q.data_ptr<float>(), k.data_ptr<float>(),
                             v.data_ptr<float>(), out.data_ptr<float>(), dout.data_ptr<float>(),
                             rows.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(), dv.data_ptr<float>());
  });
  return {dq, dk, dv};
}

// The chains alone, for the tests: scores (R, L) at scale 1 -> the forward's weights g(s)/g(m) per row, the
// backward's weights and (log g)'(s) (ratio_dlog), each (R, L).
std::vector<torch::Tensor> chain_terms(torch::Tensor s, int64_t chain, double order) {
  TORCH_CHECK(s.scalar_type() == torch::kFloat32 && s.dim() == 2 && s.is_contiguous(), "scores must be (R, L) float32");
  TORCH_CHECK(chain == EXP || chain == POWER || chain == LOG_ELU, "unknown weight chain ", chain);
  const int rows = static_cast<int>(s.size(0)), n = static_cast<int>(s.size(1));
  auto fwd = s.clone(), bwd = torch::empty_like(s), dlog = torch::empty_like(s);
  const float q = static_cast<float>(order);
  by_form(chain, order, [&](auto form) {
    using F = decltype(form);
    constexpr int C = F::C;
    for (int r = 0; r < rows; ++r) {
      const int64_t off = static_cast<int64_t>(r) * n;
      const float* x = s.data_ptr<float>() + off;
      const float m = row_max(x, n), lg = log_g<C>(q, m), rt = ratio_row<C>(m, lg);
      weights<F>(q, fwd.data_ptr<float>() + off, n, 1.f, lg, rt);
      const RowTerms terms = row_terms<C>(lg, rt);
      for (int i = 0; i < n; i += W) {
        const int cnt = std::min(W, n - i);
        Vec d;
        ratio_dlog<F>(q, Vec::loadu(x + i, cnt), terms, d, 1.f).store(bwd.data_ptr<float>() + off + i, cnt);
        d.store(dlog.data_ptr<float>() + off + i, cnt);
      }
    }
  });
  return {fwd, bwd, dlog};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &flash_forward, "flash-style eq. 7 forward");
  m.def("backward", &flash_backward, "flash-style eq. 7 backward");
  m.def("chain_terms", &chain_terms, "the weight chain on raw scores (tests)");
}
