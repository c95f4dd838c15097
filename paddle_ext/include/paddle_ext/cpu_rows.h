// Row-wise log-softmax building blocks for the CPU kernels (CPU only, no Paddle header): SIMD lanes for
// every dtype, row maps and sums, and the exact row logsumexp (vector path for finite rows, the scalar
// rules of adaptive_log_softmax.h for rows with NaN, +inf or only -inf). Kernels that use them are
// templates on the SIMD width W, run through simd::dispatch (vec_math.h); cpu/adaptive_log_softmax.cc
// and cpu/rnnt_joint_logprobs.cc share them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "paddle_ext/adaptive_log_softmax.h"
#include "paddle_ext/vec_math.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace paddle_ext {
namespace cpu {
namespace rows {

using simd::vd;
using simd::vl;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows per thread chunk: at least ~1M elements (~1 ms) per thread. Smaller calls stay serial: a parallel
// region costs a barrier, and on an oversubscribed machine OpenMP's spin-waiting sibling can cost a whole
// time slice.
inline index_t row_grain(index_t k) { return std::max<index_t>(1, (index_t(1) << 20) / std::max<index_t>(k, 1)); }

// Lanes<W, T>: the vector type kernels compute T in, for the dispatcher's register width (W doubles).
// float: 2W float lanes and vec_math.h's float exp (~1 ulp); every other dtype: W double lanes and its
// double exp (full precision for float64; ~1e-13 relative for the 16-bit types, rounded once at the store).
template <int W, typename T>
struct Lanes {
  static constexpr int N = W;
  using V = vd<W>;
  using Mask = vl<W>;
  PE_VINLINE static V splat(double v) { return simd::splat<W>(v); }
  PE_VINLINE static V load(const T* p) {
    if constexpr (std::is_same<T, double>::value) {
      return simd::loadu<W>(p);
    } else {  // the 16-bit types, through common.h's scalar conversions
      V v;
      for (int i = 0; i < W; ++i) v[i] = paddle_ext::load(p[i]);
      return v;
    }
  }
  PE_VINLINE static void store(T* p, V v) {
    if constexpr (std::is_same<T, double>::value) {
      simd::storeu<W>(p, v);
    } else {
      for (int i = 0; i < W; ++i) p[i] = paddle_ext::store<T>(static_cast<float>(v[i]));
    }
  }
  PE_VINLINE static V exp(V x) { return simd::vexp_neg<W, sizeof(T) == 8>(x); }  // x <= ~0 here
  PE_VINLINE static double hmax(V v) { return simd::hmax<W>(v); }
  PE_VINLINE static double hsum(V v) { return simd::hsum<W>(v); }
  PE_VINLINE static bool any(Mask m) { return simd::any<W>(m); }
};
template <int W>
struct Lanes<W, float> {
  static constexpr int N = 2 * W;
  using V = simd::vf<N>;
  using Mask = simd::vi<N>;
  PE_VINLINE static V splat(double v) { return simd::splatf<N>(static_cast<float>(v)); }
  PE_VINLINE static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  PE_VINLINE static void store(float* p, V v) { std::memcpy(p, &v, sizeof(v)); }
  PE_VINLINE static V exp(V x) { return simd::vexpf<N>(x); }
  PE_VINLINE static double hmax(V v) {
    float m = v[0];
    for (int i = 1; i < N; ++i) m = v[i] > m ? v[i] : m;
    return m;
  }
  PE_VINLINE static double hsum(V v) {
    double s = 0;
    for (int i = 0; i < N; ++i) s += v[i];
    return s;
  }
  PE_VINLINE static bool any(Mask m) {
    int32_t r = 0;
    for (int i = 0; i < N; ++i) r |= m[i];
    return r != 0;
  }
};

// The first n < N elements, the other lanes set to `pad`; and the partial store.
template <typename L, typename T>
PE_VINLINE typename L::V load_part(const T* p, index_t n, double pad) {
  typename L::V v = L::splat(pad);
  for (index_t i = 0; i < n; ++i) v[i] = load(p[i]);
  return v;
}
template <typename L, typename T>
PE_VINLINE void store_part(T* p, typename L::V v, index_t n) {
  for (index_t i = 0; i < n; ++i) p[i] = store<T>(static_cast<acc_t<T>>(v[i]));
}

template <typename L>
struct LaneExp {
  PE_VINLINE typename L::V operator()(typename L::V x) const { return L::exp(x); }
};

// y[j] = f(x[j], j) over a row of k elements, L::N lanes at a time; the last partial vector is padded with
// `pad` and stored partially. F is a functor with a PE_VINLINE operator() (a lambda would not be compiled
// for the dispatcher's instruction set).
template <typename L, typename T, typename F>
PE_VINLINE void map_row(const T* x, T* y, index_t k, double pad, const F& f) {
  constexpr int N = L::N;
  index_t j = 0;
  for (; j + N <= k; j += N) L::store(y + j, f(L::load(x + j), j));
  if (j < k) store_part<L>(y + j, f(load_part<L>(x + j, k - j, pad), j), k - j);
}

// sum of f(x[j]) over a row in double: lanes add within chunks of 64 vectors (float lanes: ~1e-7 relative
// at 10^5 columns), chunks add in double. Padding lanes hold `pad` (f(pad) must be 0).
template <typename L, typename T, typename F>
PE_VINLINE double sum_row(const T* x, index_t k, double pad, const F& f) {
  constexpr int N = L::N;
  double total = 0;
  for (index_t j = 0; j < k;) {
    const index_t end = std::min(k, j + 64 * N);
    typename L::V part{};
    for (; j + N <= end; j += N) part += f(L::load(x + j));
    if (j < end) {
      part += f(load_part<L>(x + j, end - j, pad));
      j = end;
    }
    total += L::hsum(part);
  }
  return total;
}

// The scalar lse (std::exp), exactly as the header defines it: for rows the vector path does not take.
template <typename T>
double row_lse_scalar(const T* x, index_t k) {
  double max = -kInf;
  for (index_t j = 0; j < k; ++j) {
    const double v = load(x[j]);
    if (v != v) return v;
    max = v > max ? v : max;
  }
  double sum = 0;
  for (index_t j = 0; j < k; ++j) sum += als_exp_term<double>(load(x[j]), max);
  return als_lse<double>(max, sum);
}

inline bool finite(double v) { return v - v == 0; }

template <typename L>
struct ExpShifted {  // the terms of the lse sum: exp(x - max), 0 for the -inf padding
  typename L::V max;
  PE_VINLINE typename L::V operator()(typename L::V x) const { return als_softmax(x, max, LaneExp<L>()); }
};
template <typename L>
struct Identity {
  PE_VINLINE typename L::V operator()(typename L::V x) const { return x; }
};

// lse of a row in double, in two parts: lse = max + log_sum, with max the row maximum and log_sum =
// log(sum(exp(x - max))) (so that x - max stays exact in float lanes). Rows with NaN or +inf, or of only -inf,
// take the scalar rules: their lse (NaN or -inf) is in max, log_sum is 0.
struct LseParts {
  double max, log_sum;
};
template <typename L, typename T>
PE_VINLINE LseParts row_lse_parts(const T* x, index_t k) {
  constexpr int N = L::N;
  using V = typename L::V;
  V hi = L::splat(-kInf);
  typename L::Mask nan{};
  index_t j = 0;
  for (; j + N <= k; j += N) {
    const V v = L::load(x + j);
    hi = v > hi ? v : hi;
    nan |= v != v;
  }
  if (j < k) {
    const V v = load_part<L>(x + j, k - j, -kInf);
    hi = v > hi ? v : hi;
    nan |= v != v;
  }
  const double max = L::hmax(hi);
  if (L::any(nan) || !finite(max)) return {row_lse_scalar(x, k), 0.0};
  return {max, std::log(sum_row<L>(x, k, -kInf, ExpShifted<L>{L::splat(max)}))};
}

template <typename L, typename T>
PE_VINLINE double row_lse(const T* x, index_t k) {
  const LseParts p = row_lse_parts<L>(x, k);
  return p.max + p.log_sum;
}

}  // namespace rows
}  // namespace cpu
}  // namespace paddle_ext
