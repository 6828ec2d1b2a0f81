// LapSum's compiled CPU kernels (docs/lapsum.md, "Backends and precision"): everything after the
// row sort, fused per row, in double whatever the input type. Plain C++17 with a C ABI, loaded by
// icml25/lapsum/_cpu.py through ctypes (no torch headers: it compiles in about two seconds and
// does not depend on the torch build). Rows are contiguous, R rows of n values; `alpha` holds one
// scale per row; `threads` > 1 splits the rows over that many threads when the work is large.
//
// Scans. For an ascending row s (in units of alpha) the exclusive sums of the paper's sorted
// statistics (Sec. 3) are linear recurrences with factors d_i = exp(s_{i-1} - s_i) <= 1:
//   b_i = sum_{j<i} e^{s_j - s_i} = d_i (b_{i-1} + 1),  a_i = sum_{j>i} e^{s_i - s_j} = d_{i+1} (a_{i+1} + 1),
// so only non-positive numbers are ever exponentiated and no spread of the row can overflow (the
// torch path needs logcumsumexp past a spread of 600 alpha). Signed weights u give the Laplace-kernel
// mat-vecs of the backward passes the same way: L_i = d_i (L_{i-1} + u_{i-1}).
//
// The factors are computed by exp_nonpos, a branch-free exp the compiler vectorises (2 ulp; one
// AVX2/FMA clone and a baseline one, chosen at load time on x86-64 Linux).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define LAPSUM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LAPSUM_CLONES
#endif

namespace {

constexpr double kLog2 = 0.69314718055994530942;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline double bits_to_double(uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}

inline uint64_t double_to_bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// exp(x) for x <= 0 (and -inf -> 0; NaN stays NaN), subnormal results included, within 2 ulp of
// std::exp: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite), e^r by its degree-13 Taylor polynomial
// (truncation below 2e-16), 2^k assembled in the exponent bits.
inline double exp_nonpos(double x) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShifter = 0x1.8p52;  // adding it rounds to an integer in the low bits
  x = x < -746.0 ? -746.0 : x;          // e^-746 rounds to 0
  const double k = (x * kLog2e + kShifter) - kShifter;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k as 2^(k + c) 2^-c, c = 600 when the result is subnormal (k < -1000), so the exponent field
  // k + c + 1023 stays in [1, 2046]; the last product rounds into the subnormal range correctly
  const bool tiny = k < -1000.0;
  const double biased = k + (tiny ? 600.0 : 0.0) + 1023.0;
  const uint64_t e = double_to_bits(biased + 0x1p52) - double_to_bits(0x1p52);
  return p * bits_to_double(e << 52) * (tiny ? 0x1p-600 : 1.0);
}

// log(x), within 1 ulp of std::log: x = m 2^k with m in [sqrt(1/2), sqrt(2)) read from the bits
// (subnormal x scaled by 2^54 first), log m = 2 atanh(s) with s = (m - 1)/(m + 1), |s| <= 0.172,
// by its series to s^21 (truncation below 1e-17). log 0 = -inf, log inf = inf, NaN and negative
// x give NaN. Branch-free, so the compiler vectorises it.
inline double log_pos(double x) {
  constexpr double kTiny = 0x1p-1022;
  const bool sub = x < kTiny;
  const double xs = sub ? x * 0x1p54 : x;
  const uint64_t bits = double_to_bits(xs);
  // subtracting the bits of sqrt(1/2) moves the exponent's boundary there; the added bias keeps
  // the value positive for the logical shift
  const uint64_t ku = (bits - double_to_bits(0.70710678118654752440) + (1023ull << 52)) >> 52;
  const double m = bits_to_double(bits - (ku << 52) + (1023ull << 52));
  const double k = (bits_to_double(0x4330000000000000ull | ku) - 0x1p52) - (sub ? 1077.0 : 1023.0);
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 21;
  p = p * s2 + 1.0 / 19;
  p = p * s2 + 1.0 / 17;
  p = p * s2 + 1.0 / 15;
  p = p * s2 + 1.0 / 13;
  p = p * s2 + 1.0 / 11;
  p = p * s2 + 1.0 / 9;
  p = p * s2 + 1.0 / 7;
  p = p * s2 + 1.0 / 5;
  p = p * s2 + 1.0 / 3;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double r = k * kLn2Hi + (2.0 * s + (2.0 * s * s2 * p + k * kLn2Lo));
  const double special = x > 0 ? x : (x == 0 ? -kInf : std::numeric_limits<double>::quiet_NaN());
  return x > 0 && x < kInf ? r : special;  // +inf stays inf; 0, negatives and NaN as std::log
}

double logaddexp(double x, double y) {
  if (x == -kInf) return y;
  if (y == -kInf) return x;
  const double m = std::max(x, y);
  return m + std::log1p(std::exp(-std::fabs(x - y)));
}

// Runs body(first_row, last_row) over the R rows, on up to `threads` threads when there is enough
// work to pay for starting them (thread start-up is tens of microseconds).
template <class F>
void for_rows(int64_t R, int64_t n, int threads, F body) {
  constexpr int64_t kMinWorkPerThread = 1 << 17;
  int64_t use = std::min<int64_t>({static_cast<int64_t>(std::max(threads, 1)), R,
                                   std::max<int64_t>(R * n / kMinWorkPerThread, 1)});
  if (use <= 1) {
    body(0, R);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (R + use - 1) / use;
  for (int64_t t = 1; t < use; ++t) {
    const int64_t lo = t * chunk, hi = std::min(R, lo + chunk);
    if (lo < hi) pool.emplace_back(body, lo, hi);
  }
  body(0, std::min(R, chunk));
  for (auto& th : pool) th.join();
}

// d[0] = 0, d[i] = exp((sv[i-1] - sv[i]) / alpha) for an ascending row; returns the number of
// non-finite values (x - x is 0 exactly for finite x, NaN otherwise: a test the loop vectorises).
template <class T>
LAPSUM_CLONES int64_t factors(const T* sv, int64_t n, double alpha, double* d) {
  int64_t nonfinite = 0;
  d[0] = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(sv[i]);
    nonfinite += !(v - v == 0.0);
  }
  for (int64_t i = 1; i < n; ++i)
    d[i] = exp_nonpos((static_cast<double>(sv[i - 1]) - static_cast<double>(sv[i])) / alpha);
  return nonfinite;
}

// Scratch of n values: a slot of a per-thread pool, grown when needed and kept between calls
// (a fresh buffer of a large row costs a page fault every 4 KiB, about as much as the scan it
// serves), or, past kPooledMax values, a buffer of its own.
constexpr int64_t kPooledMax = int64_t{1} << 21;

template <class V>
struct Buffer {
  V* ptr;
  std::unique_ptr<V[]> owned;
  Buffer(int64_t n, int slot) {
    thread_local std::vector<V> pool[4];  // slots: see each caller
    n = std::max<int64_t>(n, 1);
    if (n <= kPooledMax) {
      auto& v = pool[slot];
      if (static_cast<int64_t>(v.size()) < n) v.resize(n);
      ptr = v.data();
    } else {
      owned.reset(new V[n]);
      ptr = owned.get();
    }
  }
  V& operator[](int64_t i) { return ptr[i]; }
  const V& operator[](int64_t i) const { return ptr[i]; }
  V* get() { return ptr; }
};

// The sorted statistics of one ascending row sv (paper Sec. 3): factors d, the exclusive sums
// b_ex[i] = sum_{j<i} e^{s_j-s_i} and a_ex[i] = sum_{j>i} e^{s_i-s_j}, and on demand the centred
// scaled values s_i = (sv_i - median) / alpha and G_i = LapSum(s_i) = i + 1/2 + (a_ex_i - b_ex_i)/2.
template <class T>
struct RowStats {
  Buffer<double> d, a_ex, b_ex;
  const T* sv = nullptr;
  double c = 0.0, alpha = 1.0, inv_alpha = 1.0;
  explicit RowStats(int64_t n) : d(n, 0), a_ex(n, 1), b_ex(n, 2) {}
  int64_t compute(const T* row, int64_t n, double a) {
    sv = row;
    alpha = a;
    inv_alpha = 1.0 / a;
    c = static_cast<double>(row[(n - 1) / 2]);
    const int64_t bad = factors(row, n, a, d.get());
    b_ex[0] = 0.0;
    for (int64_t i = 1; i < n; ++i) b_ex[i] = d[i] * (b_ex[i - 1] + 1.0);
    a_ex[n - 1] = 0.0;
    for (int64_t i = n - 2; i >= 0; --i) a_ex[i] = d[i + 1] * (a_ex[i + 1] + 1.0);
    return bad;
  }
  double s(int64_t i) const { return (static_cast<double>(sv[i]) - c) * inv_alpha; }
  double g(int64_t i) const { return i + 0.5 + 0.5 * (a_ex[i] - b_ex[i]); }
};

// tau with sum_i Lap(tau - s_i) = w in the bracket j = #{G_i < w} (docs/lapsum.md): with
// A = 1 + a_ex[j], B = 1 + b_ex[j-1], e = w - j and L = A B e^{s_{j-1} - s_j}, the root is
// z = |e| + sqrt(e^2 + L), tau = s_j + log(z / A) (e > 0) or s_{j-1} - log(z / B). When L is
// below the normal range the same root is taken in the log domain
// (icml25.lapsum._stats.solve_inverse, which never forms L).
template <class T>
double solve_in_bracket(const RowStats<T>& st, int64_t n, int64_t j, double w) {
  const int64_t lo = std::max<int64_t>(j - 1, 0), hi = std::min<int64_t>(j, n - 1);
  const double a_hat = j < n ? 1.0 + st.a_ex[hi] : 0.0;
  const double b_hat = j > 0 ? 1.0 + st.b_ex[lo] : 0.0;
  const double e = w - static_cast<double>(j);
  const bool both = a_hat > 0 && b_hat > 0;
  const double s_lo = st.s(lo), s_hi = st.s(hi);
  const double big = both ? a_hat * b_hat * std::exp(s_lo - s_hi) : 0.0;
  if (!both || big >= 1e-290) {
    const double z = std::fabs(e) + std::sqrt(e * e + big);
    return e > 0 ? s_hi + std::log(z / a_hat) : s_lo - std::log(z / b_hat);
  }
  const double log_a = std::log(a_hat), log_b = std::log(b_hat);
  const double ell = std::log(std::fabs(e));
  const double log_z = logaddexp(ell, 0.5 * logaddexp(2.0 * ell, log_a + log_b + (s_lo - s_hi)));
  return e > 0 ? s_hi + log_z - log_a : s_lo - log_z + log_b;
}

// The root for every target from its bracket's values (A = 0 above the last point, B = 0 below
// the first), branch-free so the compiler vectorises it. A target whose L would fall below
// 1e-290 (its bracket points more than ~660 alpha apart) is left NaN here and solved in the log
// domain by solve_row.
LAPSUM_CLONES void solve_brackets(const double* a_hat, const double* b_hat, const double* s_lo,
                                  const double* s_hi, const double* e, int64_t m, double c,
                                  double alpha, double* t) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (int64_t q = 0; q < m; ++q) {
    const double ab = a_hat[q] * b_hat[q];  // 0 unless the target lies between two points
    const double big = ab * exp_nonpos(s_lo[q] - s_hi[q]);
    const double z = std::fabs(e[q]) + std::sqrt(e[q] * e[q] + big);
    const double tau = e[q] > 0 ? s_hi[q] + log_pos(z / a_hat[q]) : s_lo[q] - log_pos(z / b_hat[q]);
    const double value = c + alpha * tau;
    t[q] = big < 1e-290 ? (ab > 0 ? kNaN : value) : value;
  }
}

// t = c + alpha tau for the m targets w of one row: the brackets (searchsorted side="left" on G;
// ascending targets walk G once, others bisect it) and their values, then solve_brackets, in
// blocks of kBlock targets so the intermediate values stay in the L1 cache.
template <class T>
void solve_row(const RowStats<T>& st, int64_t n, const double* w, int64_t m, double* t) {
  constexpr int64_t kBlock = 256;
  double a_hat[kBlock], b_hat[kBlock], s_lo[kBlock], s_hi[kBlock], e[kBlock];
  int64_t jj[kBlock];
  int64_t j = 0;
  // soft sort's targets w_q = q + 1/2 (checked): G_i < q + 1/2 exactly when
  // q >= first_i = floor(G_i - 1/2) + 1, so the bracket of target q, #{i : G_i < w_q}, is the
  // running count of first_i <= q: a histogram and a prefix sum, without the data-dependent
  // branch of the general walk (where many points share a bracket it mispredicts often)
  bool grid = m > 1;
  for (int64_t q = 0; q < m && grid; ++q) grid = w[q] == static_cast<double>(q) + 0.5;
  std::vector<int64_t> below;  // grid: below[q] = #{i : G_i < w_q}
  if (grid) {
    below.assign(m + 1, 0);
    const double top = static_cast<double>(m);
    for (int64_t i = 0; i < n; ++i) {
      const double f = std::floor(st.g(i) - 0.5) + 1.0;
      // f in [0, m] counts; beyond m never (and NaN, a non-finite row, also lands there)
      below[f >= 0.0 ? (f < top ? static_cast<int64_t>(f) : m) : (f < 0.0 ? 0 : m)] += 1;
    }
    for (int64_t q = 1; q < m; ++q) below[q] += below[q - 1];
  }
  for (int64_t q0 = 0; q0 < m; q0 += kBlock) {
    const int64_t len = std::min(kBlock, m - q0);
    for (int64_t b = 0; b < len; ++b) {
      const int64_t q = q0 + b;
      if (grid) {
        j = below[q];
      } else if (q == 0 || w[q] < w[q - 1]) {
        int64_t lo = 0, hi = n;  // first j with G_j >= w
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (st.g(mid) < w[q])
            lo = mid + 1;
          else
            hi = mid;
        }
        j = lo;
      } else {
        while (j < n && st.g(j) < w[q]) ++j;
      }
      const int64_t lo = std::max<int64_t>(j - 1, 0), hi = std::min<int64_t>(j, n - 1);
      jj[b] = j;
      a_hat[b] = j < n ? 1.0 + st.a_ex[hi] : 0.0;
      b_hat[b] = j > 0 ? 1.0 + st.b_ex[lo] : 0.0;
      s_lo[b] = st.s(lo);
      s_hi[b] = st.s(hi);
      e[b] = w[q] - static_cast<double>(j);
    }
    solve_brackets(a_hat, b_hat, s_lo, s_hi, e, len, st.c, st.alpha, t + q0);
    for (int64_t b = 0; b < len; ++b)
      if (std::isnan(t[q0 + b]))
        t[q0 + b] = st.c + st.alpha * solve_in_bracket(st, n, jj[b], w[q0 + b]);
  }
}

// sum_p c_p e^{-|dst_l - src_p|} for ascending src (np) and ascending dst (nq); a source tied
// with a destination counts on its left (the torch path's stable merge puts sources first).
void cross_kernel(const double* src, const double* c, int64_t np, const double* dst, int64_t nq,
                  double* out) {
  double acc = 0.0, last = 0.0;
  bool any = false;
  int64_t p = 0;
  for (int64_t l = 0; l < nq; ++l) {  // sources at or before dst_l: e^{src - dst}
    while (p < np && src[p] <= dst[l]) {
      acc = any ? acc * std::exp(last - src[p]) + c[p] : c[p];
      last = src[p];
      any = true;
      ++p;
    }
    out[l] = any ? acc * std::exp(last - dst[l]) : 0.0;
  }
  acc = 0.0;
  any = false;
  p = np - 1;
  for (int64_t l = nq - 1; l >= 0; --l) {  // sources after dst_l: e^{dst - src}
    while (p >= 0 && src[p] > dst[l]) {
      acc = any ? acc * std::exp(src[p] - last) + c[p] : c[p];
      last = src[p];
      any = true;
      --p;
    }
    if (any) out[l] += acc * std::exp(dst[l] - last);
  }
}

template <class T>
double row_mean(const T* r, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(r[i]);
  return sum / static_cast<double>(n);
}

// Laplace CDF (or its log) of x = (r_i - t) / alpha over a row; E = e^{-|x|} <= 1.
template <class T>
LAPSUM_CLONES void lap_cdf_row(const T* r, int64_t n, double t, double alpha, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = (static_cast<double>(r[i]) - t) / alpha;
    const double e = exp_nonpos(-std::fabs(x));
    out[i] = static_cast<T>(x <= 0 ? 0.5 * e : 1.0 - 0.5 * e);
  }
}

template <class T>
void lap_log_cdf_row(const T* r, int64_t n, double t, double alpha, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = (static_cast<double>(r[i]) - t) / alpha;
    out[i] = static_cast<T>(x <= 0 ? x - kLog2 : std::log1p(-0.5 * std::exp(-x)));
  }
}

// ---------------------------------------------------------------------------------------------
// soft rank: rank_i = sum_{j != i} Lap((r_i - r_j)/alpha), 0-based ascending; k1 = (a_ex + b_ex)/2
// in sorted order (the off-diagonal K 1, saved for backward).
template <class T>
int64_t rank_fwd(const T* sv, const int64_t* perm, const double* alpha, int64_t R, int64_t n,
                 int threads, T* rank, double* k1) {
  std::vector<int64_t> bad(R, 0);
  for_rows(R, n, threads, [&](int64_t r0, int64_t r1) {
    Buffer<double> d(n, 0), a_ex(n, 1), b_ex(n, 2);
    for (int64_t row = r0; row < r1; ++row) {
      bad[row] = factors(sv + row * n, n, alpha[row], d.get());
      // the two recurrences are independent: one loop runs both, so their latencies overlap
      double b = 0.0, a = 0.0;
      b_ex[0] = 0.0;
      a_ex[n - 1] = 0.0;
      for (int64_t i = 1; i < n; ++i) {
        b = d[i] * (b + 1.0);
        a = d[n - i] * (a + 1.0);
        b_ex[i] = b;
        a_ex[n - 1 - i] = a;
      }
      const int64_t* pm = perm + row * n;
      T* out = rank + row * n;
      double* k = k1 + row * n;
      for (int64_t i = 0; i < n; ++i) k[i] = 0.5 * (a_ex[i] + b_ex[i]);
      for (int64_t i = 0; i < n; ++i) out[pm[i]] = static_cast<T>(i + 0.5 * (a_ex[i] - b_ex[i]));
      if (bad[row]) {  // a NaN or inf in the row (check_finite=False): the whole row is NaN
        std::fill(out, out + n, std::numeric_limits<T>::quiet_NaN());
        std::fill(k, k + n, std::numeric_limits<double>::quiet_NaN());
      }
    }
  });
  return std::accumulate(bad.begin(), bad.end(), int64_t{0});
}

// g_r = (v_sorted k1 - K_offdiag v_sorted) / alpha scattered back; g_alpha = -<g_r, r - mean>/alpha
// (icml25.lapsum._ref._SoftRankFn.backward), from the sorted row sv and its permutation.
template <class T>
void rank_bwd(const T* v, const T* sv, const int64_t* perm, const double* k1, const double* alpha,
              int64_t R, int64_t n, int threads, T* g_r, double* g_alpha) {
  for_rows(R, n, threads, [&](int64_t r0, int64_t r1) {
    Buffer<double> d(n, 0), u(n, 1), left(n, 2), right(n, 3);
    for (int64_t row = r0; row < r1; ++row) {
      const T* srow = sv + row * n;
      const T* vv = v + row * n;
      const int64_t* pm = perm + row * n;
      const double* k = k1 + row * n;
      const double a = alpha[row];
      const double c = row_mean(srow, n);
      factors(srow, n, a, d.get());
      for (int64_t i = 0; i < n; ++i) u[i] = static_cast<double>(vv[pm[i]]);
      // left[i] = sum_{j<i} e^{s_j - s_i} u_j and right[i] = sum_{j>i} e^{s_i - s_j} u_j, the two
      // recurrences in one loop so their latencies overlap
      double lsum = 0.0, rsum = 0.0;
      left[0] = 0.0;
      right[n - 1] = 0.0;
      for (int64_t i = 1; i < n; ++i) {
        lsum = d[i] * (lsum + u[i - 1]);
        rsum = d[n - i] * (rsum + u[n - i]);
        left[i] = lsum;
        right[n - 1 - i] = rsum;
      }
      double ga = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double g = (u[i] * k[i] - 0.5 * (left[i] + right[i])) / a;
        left[i] = g;
        ga += g * (static_cast<double>(srow[i]) - c);
      }
      T* out = g_r + row * n;
      for (int64_t i = 0; i < n; ++i) out[pm[i]] = static_cast<T>(left[i]);
      g_alpha[row] = -ga / a;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// LapSum inverse (soft sort: w_l = l + 1/2): t (R, m) in T and in double.
template <class T>
int64_t inverse_fwd(const T* sv, const double* alpha, const double* w, int64_t R, int64_t n,
                    int64_t m, int threads, T* t_out, double* t64) {
  std::vector<int64_t> bad(R, 0);
  for_rows(R, n + m, threads, [&](int64_t r0, int64_t r1) {
    RowStats<T> st(n);
    for (int64_t row = r0; row < r1; ++row) {
      bad[row] = st.compute(sv + row * n, n, alpha[row]);
      double* t = t64 + row * m;
      solve_row(st, n, w + row * m, m, t);
      if (bad[row]) std::fill(t, t + m, std::numeric_limits<double>::quiet_NaN());  // as rank_fwd
      for (int64_t q = 0; q < m; ++q) t_out[row * m + q] = static_cast<T>(t[q]);
    }
  });
  return std::accumulate(bad.begin(), bad.end(), int64_t{0});
}

// VJP of t = LapSum^{-1}(r; w) (docs/lapsum.md): with F_l = sum_j e^{-|tau_l - z_j|},
// weights_l = 2 u_l / F_l, g_r_j = sum_l weights_l e^{-|tau_l - z_j|} / 2, g_w = alpha weights,
// g_alpha = (<u, t - c> - <g_r, r - c>) / alpha, c the row mean (icml25.lapsum._ref._inverse_vjp).
template <class T>
void inverse_bwd(const double* u, const T* sv, const int64_t* perm, const double* t64,
                 const double* alpha, int64_t R, int64_t n, int64_t m, int threads, T* g_r,
                 double* g_w, double* g_alpha) {
  for_rows(R, n + m, threads, [&](int64_t r0, int64_t r1) {
    std::vector<double> z(n), tau(m), ones(n, 1.0), f(m), wt(m), gz(n);
    std::vector<int64_t> order(m);
    for (int64_t row = r0; row < r1; ++row) {
      const T* srow = sv + row * n;
      const int64_t* pm = perm + row * n;
      const double* t = t64 + row * m;
      const double* uu = u + row * m;
      const double a = alpha[row];
      const double c = row_mean(srow, n);
      for (int64_t i = 0; i < n; ++i) z[i] = (static_cast<double>(srow[i]) - c) / a;
      std::iota(order.begin(), order.end(), 0);
      if (!std::is_sorted(t, t + m))
        std::stable_sort(order.begin(), order.end(),
                         [t](int64_t x, int64_t y) { return t[x] < t[y]; });
      for (int64_t q = 0; q < m; ++q) tau[q] = (t[order[q]] - c) / a;
      cross_kernel(z.data(), ones.data(), n, tau.data(), m, f.data());
      double ut = 0.0;
      for (int64_t q = 0; q < m; ++q) {
        const double uq = uu[order[q]];
        wt[q] = 2.0 * uq / f[q];
        g_w[row * m + order[q]] = a * wt[q];
        ut += uq * (t[order[q]] - c);
      }
      cross_kernel(tau.data(), wt.data(), m, z.data(), n, gz.data());
      double gr = 0.0;
      T* out = g_r + row * n;
      for (int64_t i = 0; i < n; ++i) {
        const double g = 0.5 * gz[i];
        out[pm[i]] = static_cast<T>(g);
        gr += g * (static_cast<double>(srow[i]) - c);
      }
      g_alpha[row] = (ut - gr) / a;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// soft top-k: p_qi = Lap((r_i - t_q)/alpha), t_q = LapSum^{-1}(r; n - k_q); out (R, m, n).
template <class T>
int64_t topk_fwd(const T* r, const T* sv, const double* alpha, const double* k, int64_t R,
                 int64_t n, int64_t m, int log, int threads, T* out, double* t64) {
  std::vector<int64_t> bad(R, 0);
  for_rows(R, n * (m + 1), threads, [&](int64_t r0, int64_t r1) {
    RowStats<T> st(n);
    std::vector<double> w(m);
    for (int64_t row = r0; row < r1; ++row) {
      const double a = alpha[row];
      for (int64_t q = 0; q < m; ++q) w[q] = static_cast<double>(n) - k[row * m + q];
      bad[row] = st.compute(sv + row * n, n, a);
      double* t = t64 + row * m;
      solve_row(st, n, w.data(), m, t);
      if (bad[row]) std::fill(t, t + m, std::numeric_limits<double>::quiet_NaN());  // as rank_fwd
      for (int64_t q = 0; q < m; ++q) {
        T* o = out + (row * m + q) * n;
        if (log)
          lap_log_cdf_row(r + row * n, n, t[q], a, o);
        else
          lap_cdf_row(r + row * n, n, t[q], a, o);
      }
    }
  });
  return std::accumulate(bad.begin(), bad.end(), int64_t{0});
}

// Backward of soft top-k (icml25.lapsum._ref._SoftTopKFn.backward): per slice the softmax q of
// -|x| and f = sum e^{-|x|} / 2; g_k is clamped to +-k_max (the k dtype's largest finite value).
template <class T>
void topk_bwd(const T* v, const T* r, const double* t64, const double* alpha, int64_t R, int64_t n,
              int64_t m, int log, double k_max, int threads, T* g_r, double* g_k,
              double* g_alpha) {
  for_rows(R, n * m, threads, [&](int64_t r0, int64_t r1) {
    std::vector<double> x(n), e(n), h(n), acc(n);
    for (int64_t row = r0; row < r1; ++row) {
      const T* rr = r + row * n;
      const double a = alpha[row];
      std::fill(acc.begin(), acc.end(), 0.0);
      double ga = 0.0;
      for (int64_t q = 0; q < m; ++q) {
        const double t = t64[row * m + q];
        const T* vv = v + (row * m + q) * n;
        double mx = -kInf;
        for (int64_t i = 0; i < n; ++i) {
          x[i] = (static_cast<double>(rr[i]) - t) / a;
          mx = std::max(mx, -std::fabs(x[i]));
        }
        double zsum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          e[i] = exp_nonpos(-std::fabs(x[i]) - mx);
          zsum += e[i];
        }
        const double log_f = mx + std::log(zsum) - kLog2;
        if (!log) {
          double g_bar = 0.0;
          for (int64_t i = 0; i < n; ++i) g_bar += e[i] / zsum * static_cast<double>(vv[i]);
          const double scale = std::exp(log_f) / a;
          for (int64_t i = 0; i < n; ++i) {
            const double g = scale * (e[i] / zsum) * (static_cast<double>(vv[i]) - g_bar);
            acc[i] += g;
            ga -= g * x[i];
          }
          g_k[row * m + q] = g_bar;
        } else {
          double h_bar = 0.0;
          for (int64_t i = 0; i < n; ++i) {
            const double em = exp_nonpos(-std::max(x[i], 0.0));
            h[i] = x[i] <= 0 ? 1.0 : em / (2.0 - em);  // f(x) / Lap(x)
            h_bar += h[i] * static_cast<double>(vv[i]);
          }
          for (int64_t i = 0; i < n; ++i) {
            const double g = (h[i] * static_cast<double>(vv[i]) - e[i] / zsum * h_bar) / a;
            acc[i] += g;
            ga -= g * x[i];
          }
          g_k[row * m + q] = std::clamp(h_bar * std::exp(-log_f), -k_max, k_max);
        }
      }
      for (int64_t i = 0; i < n; ++i) g_r[row * n + i] = static_cast<T>(acc[i]);
      g_alpha[row] = ga;
    }
  });
}

// exp_nonpos and log_pos themselves, for their accuracy test (tests/lapsum/test_cpu_kernels.py).
LAPSUM_CLONES void exp_nonpos_array(const double* x, int64_t n, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_nonpos(x[i]);
}

LAPSUM_CLONES void log_pos_array(const double* x, int64_t n, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = log_pos(x[i]);
}

}  // namespace

extern "C" void lapsum_exp_nonpos(const double* x, int64_t n, double* out) {
  exp_nonpos_array(x, n, out);
}

extern "C" void lapsum_log_pos(const double* x, int64_t n, double* out) { log_pos_array(x, n, out); }

// C ABI: one entry per kernel and input type (f32 / f64). Forward kernels return the number of
// non-finite inputs they met (the caller raises on it when asked to check).
#define LAPSUM_EXPORT(T, SUF)                                                                     \
  extern "C" int64_t lapsum_rank_fwd_##SUF(const T* sv, const int64_t* perm, const double* alpha, \
                                            int64_t R, int64_t n, int threads, T* rank,           \
                                            double* k1) {                                         \
    return rank_fwd<T>(sv, perm, alpha, R, n, threads, rank, k1);                                 \
  }                                                                                               \
  extern "C" void lapsum_rank_bwd_##SUF(const T* v, const T* sv, const int64_t* perm,            \
                                         const double* k1, const double* alpha, int64_t R,       \
                                         int64_t n, int threads, T* g_r, double* g_alpha) {      \
    rank_bwd<T>(v, sv, perm, k1, alpha, R, n, threads, g_r, g_alpha);                            \
  }                                                                                               \
  extern "C" int64_t lapsum_inverse_fwd_##SUF(const T* sv, const double* alpha, const double* w, \
                                               int64_t R, int64_t n, int64_t m, int threads,     \
                                               T* t_out, double* t64) {                          \
    return inverse_fwd<T>(sv, alpha, w, R, n, m, threads, t_out, t64);                           \
  }                                                                                               \
  extern "C" void lapsum_inverse_bwd_##SUF(const double* u, const T* sv, const int64_t* perm,    \
                                            const double* t64, const double* alpha, int64_t R,   \
                                            int64_t n, int64_t m, int threads, T* g_r,           \
                                            double* g_w, double* g_alpha) {                      \
    inverse_bwd<T>(u, sv, perm, t64, alpha, R, n, m, threads, g_r, g_w, g_alpha);                \
  }                                                                                               \
  extern "C" int64_t lapsum_topk_fwd_##SUF(const T* r, const T* sv, const double* alpha,         \
                                            const double* k, int64_t R, int64_t n, int64_t m,     \
                                            int log, int threads, T* out, double* t64) {          \
    return topk_fwd<T>(r, sv, alpha, k, R, n, m, log, threads, out, t64);                         \
  }                                                                                               \
  extern "C" void lapsum_topk_bwd_##SUF(const T* v, const T* r, const double* t64,               \
                                         const double* alpha, int64_t R, int64_t n, int64_t m,    \
                                         int log, double k_max, int threads, T* g_r,              \
                                         double* g_k, double* g_alpha) {                          \
    topk_bwd<T>(v, r, t64, alpha, R, n, m, log, k_max, threads, g_r, g_k, g_alpha);               \
  }

LAPSUM_EXPORT(float, f32)
LAPSUM_EXPORT(double, f64)
