// CPU logcumsumexp kernels on raw pointers (no Paddle header): the scan pieces shared by rows.cc and
// columns.cc (logcumsumexp.cc dispatches).
//
// float64 is computed in double lanes with the SIMD exp/log of vec_math.h (within ~1.5 ulp).
// float32, float16 and bfloat16 are computed in float lanes (2W per vector: twice the lanes and about
// half the work per exp/log) with every output checked against an error bound (float_unsafe): outputs
// the bound cannot certify to 1e-6 relative (in practice those near 0) are recomputed in double lanes
// (~1e-13), so every dtype is rounded once, at the store, from a result within 1e-6.
// Kernels are templates on the SIMD width W, compiled for AVX-512/AVX2/SSE2 and picked at run time
// (simd::dispatch); the SIMD math (double and float lanes, 16-bit conversions) is vec_math.h's.
//   Contiguous axis (inner == 1): a blocked two-level scan. A row is cut into chunks of kChunk
//     elements; in a chunk every term is exp(x - M) with M the chunk's max (and the carry's), prefix
//     sums run across SIMD lanes, and out = M + log(carry + prefix). The serial chain is one add per
//     vector, not one log-add-exp per element. The carry between chunks is a log value. A single long
//     row is split over both threads (the second reduces the first part to its carry).
//   Strided axis (inner > 1): the same linear form with one column per lane, neighbouring columns
//     and kSteps steps at a time, so every step reads contiguous memory.
//   Backward: the same scans run in the opposite direction, in linear form (see LinearCarry), in
//     double lanes for every dtype.
// Chunks (or lane blocks) holding NaN or +inf, or spanning more than kMaxRange in log space (where
// exp(x - M) would underflow), take the scalar LogSumAcc path, so the edge semantics are exactly those
// of log_math.h and logcumsumexp.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "paddle_ext/logcumsumexp.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/vec_math.h"

namespace paddle_ext::cpu {
namespace {

using simd::vd;
using simd::vl;

constexpr index_t kChunk = 512;     // elements per chunk of a contiguous row (4 KiB of doubles per buffer)
constexpr index_t kColumns = 256;   // columns advanced together on a strided axis
constexpr double kMaxRange = 640.;  // exp(x - M) stays a normal double (> e^-708) within this range
constexpr double kInf = std::numeric_limits<double>::infinity();

using simd::FV;
using simd::Vec16;

// Loads and stores between T and double (common.h's conversions for the 16-bit types).
// T as the element type the copy loops see: float16_t/bfloat16_t as their uint16_t bits.
template <typename T>
struct Storage {
  using type = T;
  PE_VINLINE static double to_double(T v) { return static_cast<double>(v); }
  PE_VINLINE static T from_double(double v) { return static_cast<T>(v); }
};
template <>
struct Storage<float16_t> {
  using type = uint16_t;
  PE_VINLINE static double to_double(uint16_t v) { return half_bits_to_float(v); }
  PE_VINLINE static uint16_t from_double(double v) { return float_to_half_bits(static_cast<float>(v)); }
};
template <>
struct Storage<bfloat16_t> {
  using type = uint16_t;
  PE_VINLINE static double to_double(uint16_t v) { return bf16_bits_to_float(v); }
  PE_VINLINE static uint16_t from_double(double v) { return float_to_bf16_bits(static_cast<float>(v)); }
};
static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage");

inline LogSumAcc<double> acc_from_log(double carry) {
  LogSumAcc<double> acc;
  if (carry != -kInf) {
    acc.max = carry;
    acc.sum = 1.0;
  }
  return acc;
}

// The exact scalar scan of one chunk in scan order, in place; returns the new carry.
template <bool kExclusive>
inline double scan_chunk_scalar(double* buf, index_t k, double carry) {
  LogSumAcc<double> acc = acc_from_log(carry);
  for (index_t j = 0; j < k; ++j) {
    const double v = buf[j];
    if (kExclusive) {
      buf[j] = acc.value();
      acc.add(v);
    } else {
      acc.add(v);
      buf[j] = acc.value();
    }
  }
  return acc.value();
}

// buf[j] <- log(exp(carry) + sum of exp(buf[i]) for i <= j (i < j if exclusive)), in place; k is a
// multiple of W (pad with -inf). Returns the log of the whole sum, the carry of the next chunk.
template <int W, bool kFull, bool kExclusive>
PE_VINLINE double scan_chunk(double* buf, index_t k, double carry) {
  // One cheap pass: max, min and sum. A NaN or +inf makes the sum NaN or +inf (so does an overflow:
  // then the scalar path is merely slower); -inf is fine (exp gives 0).
  vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), sum = vd<W>{};
  for (index_t i = 0; i < k; i += W) {
    const vd<W> v = simd::loadu<W>(buf + i);
    hi = simd::vmax<W>(hi, v);
    lo = simd::vmin<W>(lo, v);
    sum += v;
  }
  double total = simd::hsum<W>(sum);
  if (total != total || total == kInf || carry != carry || carry == kInf) {
    return scan_chunk_scalar<kExclusive>(buf, k, carry);
  }
  const double M = std::max(simd::hmax<W>(hi), carry);
  if (M == -kInf) {  // nothing but -inf so far
    std::fill(buf, buf + k, -kInf);
    return -kInf;
  }
  double low = simd::hmin<W>(lo);
  if (low == -kInf) {  // the range counts finite terms only
    lo = simd::splat<W>(kInf);
    for (index_t i = 0; i < k; i += W) {
      const vd<W> v = simd::loadu<W>(buf + i);
      lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
    }
    low = simd::hmin<W>(lo);
  }
  if (carry != -kInf) low = std::min(low, carry);
  if (M - low > kMaxRange) return scan_chunk_scalar<kExclusive>(buf, k, carry);

  const vd<W> Mv = simd::splat<W>(M);
  vd<W> c = simd::splat<W>(carry == -kInf ? 0.0 : std::exp(carry - M));
  for (index_t i = 0; i < k; i += W) {
    const vd<W> e = simd::vexp_neg<W, kFull>(simd::loadu<W>(buf + i) - Mv);  // -inf gives 0
    const vd<W> p = simd::prefix_sum<W>(e);
    const vd<W> s = c + (kExclusive ? simd::shift_up<1, W>(p) : p);
    c += simd::broadcast_last<W>(p);
    simd::storeu<W>(buf + i, Mv + simd::vlog<W, kFull>(s));  // s == 0 (an empty prefix) gives -inf
  }
  return M + std::log(c[0]);
}

// True when buf[0, k) holds no NaN and no +inf (-inf is fine). One add per lane: a NaN or +inf makes the
// sum NaN or +inf; so may an overflow of huge values, which then merely take the exact scalar path.
template <int W>
PE_VINLINE bool no_nan_or_pos_inf(const double* buf, index_t k) {
  vd<W> sum = vd<W>{};
  for (index_t i = 0; i < k; i += W) sum += simd::loadu<W>(buf + i);
  const double total = simd::hsum<W>(sum);
  return total == total && total != kInf;
}
template <int W>
PE_VINLINE bool all_finite(const double* buf, index_t k) {
  vd<W> sum = vd<W>{};
  for (index_t i = 0; i < k; i += W) sum += simd::loadu<W>(buf + i) * 0.0;  // inf * 0 and NaN give NaN
  const double total = simd::hsum<W>(sum);
  return total == total;
}

// One backward element, exactly as logcumsumexp.h defines it (scalar path).
inline double backward_step(double x, double g, double o, LogSumAcc<double>& pos, LogSumAcc<double>& neg,
                            bool exclusive) {
  double term;
  bool negative;
  const bool contributes = logcumsumexp_grad_term<double>(g, o, &term, &negative);
  if (!exclusive && contributes) (negative ? neg : pos).add(term);
  const double value = logcumsumexp_grad_value<double>(x, pos.value(), neg.value());
  if (exclusive && contributes) (negative ? neg : pos).add(term);
  return value;
}

// Asks for the chunk after this one (input, and the output lines about to be written) while this one
// is computed: a chunk takes ~1 us, about ten memory latencies.
template <typename T>
inline void prefetch_next(const T* in, T* out, index_t n, index_t start, bool reverse) {
  if (start >= n) return;
  const index_t k = std::min(kChunk, n - start);
  const index_t first = reverse ? n - start - k : start;
  for (index_t j = 0; j < k; j += 64 / sizeof(T)) {
    __builtin_prefetch(in + first + j, 0);
    __builtin_prefetch(out + first + j, 1);
  }
}

// Copies k elements of a line into buf in scan order, converted to B (double: W lanes per vector;
// float: 2W), and pads to a whole vector; scatter writes such a buffer back. The 16-bit types use
// explicit vectors (GCC does not vectorize their conversions).
template <int W, typename B, typename T>
PE_VINLINE index_t gather(const T* line_in, index_t n, index_t start, index_t k, bool reverse, B* __restrict buf,
                          B pad) {
  constexpr int L = sizeof(B) == 8 ? W : 2 * W;
  using S = Storage<T>;
  using V = Vec16<L>;
  constexpr bool half = std::is_same<T, float16_t>::value;
  const typename S::type* __restrict line = reinterpret_cast<const typename S::type*>(line_in);
  index_t j = 0;
  if (sizeof(T) == 2) {
    for (; j + L <= k; j += L) {
      typename V::vh h;
      if (reverse) {
        std::memcpy(&h, line + (n - 1 - start - j - (L - 1)), sizeof(h));
        h = V::reversed(h);
      } else {
        std::memcpy(&h, line + start + j, sizeof(h));
      }
      if constexpr (sizeof(B) == 8) {
        const vd<L> v = V::to_double(h, half);
        std::memcpy(buf + j, &v, sizeof(v));
      } else {
        const typename V::vf v = V::to_float(h, half);
        std::memcpy(buf + j, &v, sizeof(v));
      }
    }
  }
  if (reverse) {
    const typename S::type* src = line + (n - 1 - start);
    for (; j < k; ++j) buf[j] = static_cast<B>(S::to_double(src[-j]));
  } else {
    const typename S::type* src = line + start;
    for (; j < k; ++j) buf[j] = static_cast<B>(S::to_double(src[j]));
  }
  const index_t kp = (k + L - 1) / L * L;
  for (index_t i = k; i < kp; ++i) buf[i] = pad;
  return kp;
}

template <int W, typename B, typename T>
PE_VINLINE void scatter(const B* __restrict buf, index_t n, index_t start, index_t k, bool reverse, T* line_out) {
  constexpr int L = sizeof(B) == 8 ? W : 2 * W;
  using S = Storage<T>;
  using V = Vec16<L>;
  constexpr bool half = std::is_same<T, float16_t>::value;
  typename S::type* __restrict line = reinterpret_cast<typename S::type*>(line_out);
  index_t j = 0;
  if (sizeof(T) == 2) {
    for (; j + L <= k; j += L) {
      typename V::vh h;
      if constexpr (sizeof(B) == 8) {
        vd<L> v;
        std::memcpy(&v, buf + j, sizeof(v));
        h = V::from_double(v, half);
      } else {
        typename V::vf v;
        std::memcpy(&v, buf + j, sizeof(v));
        h = V::from_float(v, half);
      }
      if (reverse) {
        h = V::reversed(h);
        std::memcpy(line + (n - 1 - start - j - (L - 1)), &h, sizeof(h));
      } else {
        std::memcpy(line + start + j, &h, sizeof(h));
      }
    }
  }
  if (reverse) {
    typename S::type* dst = line + (n - 1 - start);
    for (; j < k; ++j) dst[-j] = S::from_double(buf[j]);
  } else {
    typename S::type* dst = line + start;
    for (; j < k; ++j) dst[j] = S::from_double(buf[j]);
  }
}

// The float lanes' error bound. With u = 2^-24, an output o = M + l (l = log of the running sum)
// computed in float is within u (10 + 2.1 |l|) + u/2 |o| of the exact value: exp within 2u, the
// rounding of x - M weighted by the terms (at most u/2 (log(count) + max(0, -l))), 2u for the lanes'
// prefix sums, the sums carried in double, log within 1.6u max(1, |l|) (exp and log measured
// exhaustively). An output is kept when that is below half of 1e-6 |o|, i.e.
// 8 |o| >= 12 + 2.5 |l|; otherwise it is recomputed in double. Only outputs near 0 fail it (normal
// data: the first few of a line).
template <int W>
PE_VINLINE typename FV<W>::vi float_unsafe(typename FV<W>::vf o, typename FV<W>::vf l, float k0) {
  return FV<W>::vabs(o) * 8.0f < k0 + 2.5f * FV<W>::vabs(l);
}

// One vector of a row chunk in double lanes, from the exact running sum C at scale M; returns the new C.
// Full-precision exp/log: the outputs that come here are the ones near 0 (and they are few).
template <int W, bool kExclusive>
PE_VINLINE double scan_vector_d(typename FV<W>::vf x, float M, double C, float* out) {
  using F = FV<W>;
  const vd<W> Md = simd::splat<W>(M);
  const vd<W> el = simd::vexp_neg<W, true>(F::lo_d(x) - Md), eh = simd::vexp_neg<W, true>(F::hi_d(x) - Md);
  const vd<W> pl = simd::prefix_sum<W>(el), ph = simd::prefix_sum<W>(eh);
  const vd<W> cl = simd::splat<W>(C), ch = cl + simd::broadcast_last<W>(pl);
  const vd<W> sl = cl + (kExclusive ? simd::shift_up<1, W>(pl) : pl);
  const vd<W> sh = ch + (kExclusive ? simd::shift_up<1, W>(ph) : ph);
  F::store(out, F::from_d(Md + simd::vlog<W, true>(sl), Md + simd::vlog<W, true>(sh)));
  return ch[0] + ph[W - 1];
}

// The float-lane stats of a chunk: max, finite min, and whether it holds NaN or +inf.
template <int W>
PE_VINLINE bool chunk_stats_f(const float* bx, index_t kp, float& hi_out, float& lo_out) {
  using F = FV<W>;
  using vf = typename F::vf;
  vf hi = F::splat(-kInf), lo = F::splat(kInf), check = vf{};
  for (index_t i = 0; i < kp; i += F::L) {
    const vf v = F::load(bx + i);
    hi = F::vmax(hi, v);
    lo = F::select(v == -kInf, lo, F::vmin(lo, v));
    check += v;  // NaN or +inf shows (a float overflow too: then the double path merely runs)
  }
  hi_out = F::hmax(hi);
  lo_out = F::hmin(lo);
  const float total = F::hsum(check);  // a float overflow here too merely sends the chunk to the double path
  return total == total && total != kInf;
}

// l = log(C + prefix sums of exp(x - M)) for one vector in float lanes; p gets the prefix sums.
template <int W, bool kExclusive>
PE_VINLINE typename FV<W>::vf scan_vector_f(typename FV<W>::vf x, typename FV<W>::vf Mv, double C,
                                            typename FV<W>::vf& p) {
  using F = FV<W>;
  p = F::prefix_sum(F::exp_neg(x - Mv));
  return F::log(F::splat(static_cast<float>(C)) + (kExclusive ? F::template shift_up<1>(p) : p));
}

// bo <- the scan of bx[0, kp) (scan order, padded with -inf) from `carry` in float lanes. `exact`: no
// float rounding has entered the carry yet (true at a line's start); outputs that fail the bound are
// recomputed in double while that holds. Returns false when one fails after it: the caller rescans the
// line in double from its start.
// The lines of the chunk after this one, requested one vector's worth per scanned vector: a chunk's
// scan takes ~1 us, about ten memory latencies, and spread-out requests do not overflow the line-fill
// buffers the way a burst at the chunk's start does.
struct NextLines {
  const char* in = nullptr;  // null: no next chunk
  char* out = nullptr;
  index_t bytes_per_vector = 0;
  PE_VINLINE void request(index_t vector) const {
    if (in == nullptr) return;
    __builtin_prefetch(in + vector * bytes_per_vector, 0);
    __builtin_prefetch(out + vector * bytes_per_vector, 1);
  }
};

template <int W, bool kExclusive>
PE_VINLINE bool scan_chunk_f(const float* bx, float* bo, index_t kp, double& carry, bool& exact,
                             const NextLines& next) {
  using F = FV<W>;
  using vf = typename F::vf;
  constexpr int L = F::L;
  float hi, lo;
  const bool clean = chunk_stats_f<W>(bx, kp, hi, lo) && carry == carry && carry != kInf;
  const double Md = std::max(static_cast<double>(hi), carry);
  if (clean && Md == -kInf) {  // nothing but -inf so far
    std::fill(bo, bo + kp, -std::numeric_limits<float>::infinity());
    return true;
  }
  const float M = static_cast<float>(Md);
  const double low = carry == -kInf ? lo : std::min(static_cast<double>(lo), carry);
  if (!clean || M - low > 80.0 || !(std::fabs(M) < 1e30f)) {  // exp(x - M) would underflow float
    if (!exact) return false;
    alignas(64) double buf[kChunk];
    for (index_t i = 0; i < kp; ++i) buf[i] = bx[i];
    carry = scan_chunk<W, false, kExclusive>(buf, kp, carry);
    for (index_t i = 0; i < kp; ++i) bo[i] = static_cast<float>(buf[i]);
    return true;
  }
  const vf Mv = F::splat(M);
  double C = carry == -kInf ? 0.0 : std::exp(carry - static_cast<double>(M));
  index_t i = 0;
  // While the running sum is exact, every vector is checked on its own (a failing one is redone in
  // double, which keeps it exact); the first float vector ends that.
  for (; exact && i < kp; i += L) {
    const vf x = F::load(bx + i);
    vf p;
    const vf l = scan_vector_f<W, kExclusive>(x, Mv, C, p);
    const vf o = Mv + l;
    if (F::any(float_unsafe<W>(o, l, 12.0f))) {
      C = scan_vector_d<W, kExclusive>(x, M, C, bo + i);
    } else {
      F::store(bo + i, o);
      C += p[L - 1];
      exact = C == 0.0;  // nothing but -inf so far (outputs -inf): no rounding yet
    }
  }
  // Then one check for the rest of the chunk: a failure there asks for the double rescan. The outputs
  // never decrease along the scan (nor does l = o - M), so the bound holds for all of them when it
  // holds for the smallest |o| and the largest |l|, which sit at the two ends; the bound's factor-2
  // margin covers the ulps by which computed outputs may be out of order.
  const index_t first = i;
  for (; i < kp; i += L) {
    next.request(i / L);
    vf p;
    F::store(bo + i, Mv + scan_vector_f<W, kExclusive>(F::load(bx + i), Mv, C, p));
    C += p[L - 1];
  }
  if (first < kp) {
    const float lo_o = bo[first], hi_o = bo[kp - 1];
    const float min_abs_o = lo_o > 0.0f ? lo_o : hi_o < 0.0f ? -hi_o : 0.0f;
    const float max_abs_l = std::max(std::fabs(lo_o - M), std::fabs(hi_o - M));
    if (!(min_abs_o * 8.0f >= 12.0f + 2.5f * max_abs_l)) return false;
  }
  carry = static_cast<double>(M) + std::log(C);
  return true;
}

// carry <- log(exp(carry) + sum of exp(bx[0, kp))) with float exps summed in double; false (carry
// untouched) for NaN/+inf, which the double reduction handles.
template <int W>
PE_VINLINE bool reduce_chunk_f(const float* bx, index_t kp, double& carry) {
  using F = FV<W>;
  using vf = typename F::vf;
  float hi, lo;
  if (!chunk_stats_f<W>(bx, kp, hi, lo) || carry != carry || carry == kInf) return false;
  const double Md = std::max(static_cast<double>(hi), carry);
  if (Md == -kInf) return true;
  const float M = static_cast<float>(Md);
  if (!(std::fabs(M) < 1e30f)) return false;
  const vf Mv = F::splat(M);
  vd<W> sl = vd<W>{}, sh = vd<W>{};  // terms below e^-85 of the max are dropped: relative 1e-37 each
  for (index_t i = 0; i < kp; i += F::L) {
    const vf e = F::exp_neg(F::load(bx + i) - Mv);
    sl += F::lo_d(e);
    sh += F::hi_d(e);
  }
  const double C = carry == -kInf ? 0.0 : std::exp(carry - static_cast<double>(M));
  carry = static_cast<double>(M) + std::log(C + simd::hsum<W>(sl + sh));
  return true;
}

// log(exp(carry) + sum of exp(buf[0, k))): the chunk's total without its prefix values (one exp per
// element, no log); NaN/+inf and wide ranges go through LogSumAcc.
template <int W, bool kFull>
PE_VINLINE double reduce_chunk(double* buf, index_t k, double carry) {
  vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), check = vd<W>{};
  for (index_t i = 0; i < k; i += W) {
    const vd<W> v = simd::loadu<W>(buf + i);
    hi = simd::vmax<W>(hi, v);
    lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
    check += v;
  }
  const double total = simd::hsum<W>(check);
  const double M = std::max(simd::hmax<W>(hi), carry);
  const double low = carry == -kInf ? simd::hmin<W>(lo) : std::min(simd::hmin<W>(lo), carry);
  if (total != total || total == kInf || carry != carry || carry == kInf || (M > -kInf && M - low > kMaxRange)) {
    return scan_chunk_scalar<false>(buf, k, carry);
  }
  if (M == -kInf) return -kInf;
  const vd<W> Mv = simd::splat<W>(M);
  vd<W> sum = vd<W>{};
  for (index_t i = 0; i < k; i += W) sum += simd::vexp_neg<W, kFull>(simd::loadu<W>(buf + i) - Mv);
  return M + std::log((carry == -kInf ? 0.0 : std::exp(carry - M)) + simd::hsum<W>(sum));
}


// The backward in linear form. With P(i) the inputs of output i, the grad is
//   dx[j] = exp(x[j] + M) * S[j],   S[j] = sum over outputs i fed by j of g[i] exp(-out[i] - M),
// for any common scale M: no log at all, two exps per element. It equals the log-domain formula of
// logcumsumexp.h (exp(x + L+) - exp(x + L-) = exp(x + M) (S+ - S-)). The carry between chunks is the
// signed sum `sum` at scale `scale` (scale = -inf: nothing yet). As out never decreases in forward
// order, -out never decreases in the backward's order: rescaling the carry only shrinks it.
struct LinearCarry {
  double sum = 0.0, scale = -kInf;
};

// Converts to the scalar path's state (and back): pos/neg log sums.
inline void carry_to_accs(const LinearCarry& c, LogSumAcc<double>& pos, LogSumAcc<double>& neg) {
  pos = acc_from_log(c.sum > 0.0 ? c.scale + std::log(c.sum) : -kInf);
  neg = acc_from_log(c.sum < 0.0 ? c.scale + std::log(-c.sum) : -kInf);
}
// False when the scalar state holds NaN or +inf: the rest of the line stays on the scalar path.
inline bool accs_to_carry(const LogSumAcc<double>& pos, const LogSumAcc<double>& neg, LinearCarry& c) {
  const double lp = pos.value(), ln = neg.value();
  if (lp != lp || ln != ln || lp == kInf || ln == kInf) return false;
  c.scale = std::max(lp, ln);
  c.sum = c.scale == -kInf ? 0.0 : (lp == -kInf ? 0.0 : std::exp(lp - c.scale)) - (ln == -kInf ? 0.0 : std::exp(ln - c.scale));
  return true;
}

// One chunk of the row backward in scan order (bx: x, bg: g, bo: out, bv: scratch; the grads go to bx). Returns
// false (touching nothing) when the chunk needs the exact scalar path.
template <int W, bool kFull, bool kExclusive>
PE_VINLINE bool backward_chunk(double* bx, const double* bg, const double* bo, double* bv, index_t kp,
                               LinearCarry& carry) {
  // bv <- v = -out where the element contributes (g != 0, out > -inf), else -inf; stats on the way.
  vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), xhi = simd::splat<W>(-kInf);
  vd<W> check = vd<W>{};
  for (index_t i = 0; i < kp; i += W) {
    const vd<W> xv = simd::loadu<W>(bx + i), g = simd::loadu<W>(bg + i), o = simd::loadu<W>(bo + i);
    check += xv + g * 0.0 + o;  // NaN or +inf in x or out, or a non-finite g, spoils it
    const vl<W> live = (g != 0.0) & (o > -kInf);
    const vd<W> v = simd::select<W>(live, -o, simd::splat<W>(-kInf));
    simd::storeu<W>(bv + i, v);
    hi = simd::vmax<W>(hi, v);
    lo = simd::select<W>(live, simd::vmin<W>(lo, v), lo);
    xhi = simd::vmax<W>(xhi, xv);
  }
  const double total = simd::hsum<W>(check);
  if (total != total || total == kInf) return false;
  const double M = std::max(simd::hmax<W>(hi), carry.scale);
  if (M == -kInf) {  // nothing contributes yet: every grad is 0
    std::fill(bx, bx + kp, 0.0);
    return true;
  }
  const double low = std::min(simd::hmin<W>(lo), carry.scale == -kInf ? kInf : carry.scale);
  if (M - low > kMaxRange || simd::hmax<W>(xhi) + M > 700.0) return false;
  const vd<W> Mv = simd::splat<W>(M);
  vd<W> c = simd::splat<W>(carry.scale == -kInf ? 0.0 : carry.sum * std::exp(carry.scale - M));
  for (index_t i = 0; i < kp; i += W) {
    const vd<W> e = simd::loadu<W>(bg + i) * simd::vexp_neg<W, kFull>(simd::loadu<W>(bv + i) - Mv);
    const vd<W> p = simd::prefix_sum<W>(e);
    const vd<W> sum = c + (kExclusive ? simd::shift_up<1, W>(p) : p);
    c += simd::broadcast_last<W>(p);
    simd::storeu<W>(bx + i, simd::vexp<W, kFull>(simd::loadu<W>(bx + i) + Mv) * sum);  // x = -inf gives 0
  }
  carry.sum = c[0];
  carry.scale = M;
  return true;
}

inline index_t grain_for(index_t work_per_task) {  // ~32k elements per thread at least
  return std::max<index_t>(1, (index_t(1) << 15) / std::max<index_t>(work_per_task, 1));
}

}  // namespace
}  // namespace paddle_ext::cpu
