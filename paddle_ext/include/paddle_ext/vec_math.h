// Portable SIMD math on double lanes (GCC/Clang vector extensions), CPU only.
//
// vd<W> is W doubles (W = 2: SSE2, 4: AVX2, 8: AVX-512). Every function is always_inline so that it
// is compiled with the instruction set of the caller: a kernel written once as a template on W is
// instantiated inside functions marked __attribute__((target(...))) and picked at run time
// (see simd::dispatch), so the package runs on any x86-64 and uses AVX2/AVX-512 where present.
//
// Accuracy (measured against libm over the whole double range while writing them; the op tests check
// the results they feed): kFull variants within ~1.5 ulp of double; the others (for outputs rounded to
// float32 or narrower) within 1.5e-13 relative (exp) and 1.2e-13 absolute (log).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#if !defined(__CUDACC__)

#if defined(__GNUC__)
// Wide vectors pass between always_inline functions only; the ABI note does not apply. (Not popped:
// the note is reported where the templates are instantiated, in the including file.)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define PE_VINLINE __attribute__((always_inline)) inline

namespace paddle_ext {
namespace simd {

template <int W>
struct VecTypes {
  typedef double vd __attribute__((vector_size(8 * W)));
  typedef int64_t vl __attribute__((vector_size(8 * W)));
  typedef uint64_t vu __attribute__((vector_size(8 * W)));
};
template <int W>
using vd = typename VecTypes<W>::vd;
template <int W>
using vl = typename VecTypes<W>::vl;
template <int W>
using vu = typename VecTypes<W>::vu;

template <int W>
PE_VINLINE vd<W> splat(double v) {
  return vd<W>{} + v;
}
template <int W>
PE_VINLINE vd<W> loadu(const double* p) {
  vd<W> v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
template <int W>
PE_VINLINE void storeu(double* p, vd<W> v) {
  __builtin_memcpy(p, &v, sizeof(v));
}
template <int W>
PE_VINLINE vd<W> as_double(vl<W> v) {
  return (vd<W>)v;
}
template <int W>
PE_VINLINE vl<W> as_int(vd<W> v) {
  return (vl<W>)v;
}
template <int W>
PE_VINLINE vd<W> select(vl<W> mask, vd<W> a, vd<W> b) {  // mask lanes are 0 or -1
  // Bitwise, because GCC lowers `mask ? a : b` lane by lane when mask is not a comparison.
  return (vd<W>)((mask & (vl<W>)a) | (~mask & (vl<W>)b));
}
template <int W>
PE_VINLINE vd<W> vmax(vd<W> a, vd<W> b) {
  return a > b ? a : b;
}
template <int W>
PE_VINLINE vd<W> vmin(vd<W> a, vd<W> b) {
  return a < b ? a : b;
}
template <int W>
PE_VINLINE double lane(vd<W> v, int i) {
  return v[i];
}
template <int W>
PE_VINLINE double hmax(vd<W> v) {
  double m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <int W>
PE_VINLINE double hmin(vd<W> v) {
  double m = v[0];
  for (int i = 1; i < W; ++i) m = v[i] < m ? v[i] : m;
  return m;
}
template <int W>
PE_VINLINE double hsum(vd<W> v) {
  double m = v[0];
  for (int i = 1; i < W; ++i) m += v[i];
  return m;
}
template <int W>
PE_VINLINE bool any(vl<W> mask) {
  int64_t r = 0;
  for (int i = 0; i < W; ++i) r |= mask[i];
  return r != 0;
}

// Lanes moved up by S (lane i gets lane i - S), zeros shifted in.
template <int S, int W>
PE_VINLINE vd<W> shift_up(vd<W> v) {
  vl<W> idx;
  for (int i = 0; i < W; ++i) idx[i] = i < S ? W + i : i - S;  // indices >= W pick the zero vector
  return __builtin_shuffle(v, vd<W>{}, idx);
}
// Every lane set to the last one.
template <int W>
PE_VINLINE vd<W> broadcast_last(vd<W> v) {
  return __builtin_shuffle(v, vl<W>{} + (W - 1));
}

// Inclusive prefix sum across the lanes (Hillis-Steele, log2 W steps).
template <int W>
PE_VINLINE vd<W> prefix_sum(vd<W> v) {
  v += shift_up<1, W>(v);
  if (W > 2) v += shift_up<2, W>(v);
  if (W > 4) v += shift_up<4, W>(v);
  return v;
}

// 2^(j/16), j = 0..15, correctly rounded: the table of the exp reduction.
constexpr double kExp2Sixteenths[16] = {
    1.0, 1.0442737824274138, 1.0905077326652577, 1.1387886347566916, 1.189207115002721, 1.241857812073484,
    1.2968395546510096, 1.3542555469368927, 1.4142135623730951, 1.4768261459394993, 1.5422108254079407,
    1.6104903319492543, 1.681792830507429, 1.7562521603732995, 1.8340080864093424, 1.9152065613971474};

// The shared core of the exps: x = (k S + j) ln2 / S + r with S = 2W table entries (one two-vector
// shuffle picks 2^(j/S)), |r| <= ln2 / 2S, e^r by its Taylor polynomial. kFull: within 1 ulp of double
// (truncation < 1e-17); otherwise within ~1e-13, ample for outputs rounded to float32 or narrower.
// Returns p = e^r 2^(j/S) in [0.97, 2.03] and k.
template <int W, bool kFull>
PE_VINLINE vd<W> exp_core(vd<W> x, vl<W>& k) {
  constexpr int S = 2 * W;
  constexpr int kLogS = W == 8 ? 4 : W == 4 ? 3 : 2;
  constexpr int kDegree = W == 8 ? (kFull ? 7 : 5) : W == 4 ? (kFull ? 8 : 6) : (kFull ? 10 : 7);
  const double magic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer in the low bits
  const vd<W> t = x * (S * 1.4426950408889634) + magic;
  const vd<W> n = t - magic;
  // ln2 / S in two parts (the high one has 32 significant bits, so n * high is exact).
  const vd<W> r = (x - n * (0.04332169877307024 * (16.0 / S))) - n * (1.1926343307941173e-11 * (16.0 / S));
  const vl<W> ni = as_int<W>(t) - as_int<W>(splat<W>(magic));
  const vl<W> j = ni & (S - 1);
  k = (vl<W>)((vu<W>)(ni - j + (int64_t(S) << 20)) >> kLogS) - (int64_t(1) << 20);  // floor(n / S)
  vd<W> lo, hi;
  for (int i = 0; i < W; ++i) {
    lo[i] = kExp2Sixteenths[i * (16 / S)];
    hi[i] = kExp2Sixteenths[(i + W) * (16 / S)];
  }
  const vd<W> table = __builtin_shuffle(lo, hi, j);
  constexpr double kInvFactorial[11] = {1.0,         1.0,          0.5,           1.0 / 6,        1.0 / 24,
                                        1.0 / 120,   1.0 / 720,    1.0 / 5040,    1.0 / 40320,    1.0 / 362880,
                                        1.0 / 3628800};
  vd<W> p = splat<W>(kInvFactorial[kDegree]);
  for (int d = kDegree - 1; d >= 0; --d) p = p * r + kInvFactorial[d];
  return p * table;
}

// exp(x) for every double x: 0 below -745.2 (and for -inf), subnormals, +inf above 709.78; NaN is not
// supported. 2^k is applied as two factors so that subnormal and overflowing results come out right.
template <int W, bool kFull = true>
PE_VINLINE vd<W> vexp(vd<W> x) {
  const vd<W> xc = vmin<W>(vmax<W>(x, splat<W>(-746.0)), splat<W>(710.0));
  vl<W> k;
  const vd<W> p = exp_core<W, kFull>(xc, k);
  // k in [-1077, 1025]: k1 = floor(k / 2) via a logical shift of k + 2048, k2 = k - k1.
  const vl<W> k1 = (vl<W>)((vu<W>)(k + 2048) >> 1) - 1024;
  const vl<W> k2 = k - k1;
  const vd<W> result = p * as_double<W>((k1 + 1023) << 52) * as_double<W>((k2 + 1023) << 52);
  return select<W>(x < -745.2, vd<W>{}, result);
}

// exp(x) for x <= 0 where only sums of such terms matter: 0 below -707 (and for -inf), so no subnormal
// results; 2^k goes straight into the exponent.
template <int W, bool kFull = true>
PE_VINLINE vd<W> vexp_neg(vd<W> x) {
  const vd<W> xc = vmax<W>(x, splat<W>(-707.0));
  vl<W> k;
  const vd<W> p = exp_core<W, kFull>(xc, k);
  return select<W>(x < -707.0, vd<W>{}, as_double<W>(as_int<W>(p) + (k << 52)));
}

// log(x) for x > 0 (subnormals included); x == 0 gives -inf. Inputs must not be negative, inf or NaN.
// x = 2^k m with m in [sqrt(1/2), sqrt(2)); log m from f = m - 1, s = f / (2 + f) and the classic
// minimax series in s^2 (error < 2^-58), then k ln2 added in two parts.
// 1/c_j and -log(1/c_j) for c_j = 1 + (j + 1/2)/16, the centres of the 16 mantissa intervals of [1, 2).
constexpr double kLogInvCentre[16] = {
    0.9696969696969697, 0.9142857142857143, 0.8648648648648649, 0.8205128205128205, 0.7804878048780488,
    0.7441860465116279, 0.7111111111111111, 0.6808510638297872, 0.6530612244897959, 0.6274509803921569,
    0.6037735849056604, 0.5818181818181818, 0.5614035087719298, 0.5423728813559322, 0.5245901639344263,
    0.5079365079365079};
constexpr double kLogCentre[16] = {
    0.03077165866675366, 0.08961215868968717, 0.14518200984449783, 0.19782574332991992, 0.2478361639045812,
    0.2954642128938359,  0.3409265869705932,  0.38441169891033206, 0.42608439531090014, 0.46608972992459924,
    0.5045560107523953,  0.5415972824327444,  0.5773153650348236,  0.6118015411059929,  0.6451379613735847,
    0.6773988235918061};

// log(x) for 8 lanes where ~1e-13 is enough: x = 2^k m, m in [1, 2); the top 4 mantissa bits pick c_j
// (one two-vector shuffle per table), r = m / c_j - 1 is within 1/32, and log(1 + r) is its degree-7
// series (truncation 1.1e-13). No divide, no Newton steps: about two thirds of vlog's work.
PE_VINLINE vd<8> vlog_table8(vd<8> x) {
  constexpr int W = 8;
  const vl<W> tiny = x < 2.2250738585072014e-308;
  const vd<W> xs = select<W>(tiny, x * 18014398509481984.0, x);  // * 2^54 lifts subnormals
  const vl<W> bits = as_int<W>(xs);
  const vl<W> k = (vl<W>)((vu<W>)bits >> 52) - 1023 - (tiny & 54);
  const vl<W> j = (vl<W>)((vu<W>)bits >> 48) & 15;
  const vd<W> m = as_double<W>((bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
  vd<W> inv_lo, inv_hi, log_lo, log_hi;
  for (int i = 0; i < W; ++i) {
    inv_lo[i] = kLogInvCentre[i];
    inv_hi[i] = kLogInvCentre[i + W];
    log_lo[i] = kLogCentre[i];
    log_hi[i] = kLogCentre[i + W];
  }
  const vd<W> r = m * __builtin_shuffle(inv_lo, inv_hi, j) - 1.0;
  vd<W> p = splat<W>(-1.0 / 8);
  p = p * r + 1.0 / 7;
  p = p * r - 1.0 / 6;
  p = p * r + 1.0 / 5;
  p = p * r - 1.0 / 4;
  p = p * r + 1.0 / 3;
  p = p * r - 0.5;
  p = p * r * r + r;
  const vd<W> kd = __builtin_convertvector(k, vd<W>);
  const vd<W> result = kd * 6.93147180369123816490e-01 +
                       (__builtin_shuffle(log_lo, log_hi, j) + (p + kd * 1.90821492927058770002e-10));
  return select<W>(x == 0.0, splat<W>(-std::numeric_limits<double>::infinity()), result);
}

template <int W, bool kFull = true>
PE_VINLINE vd<W> vlog(vd<W> x) {
  if constexpr (W == 8 && !kFull) return vlog_table8(x);
  const vl<W> tiny = x < 2.2250738585072014e-308;
  const vd<W> xs = select<W>(tiny, x * 18014398509481984.0, x);  // * 2^54 lifts subnormals
  const vl<W> bits = as_int<W>(xs);
  vl<W> k = (vl<W>)((vu<W>)bits >> 52) - 1023;
  vd<W> m = as_double<W>((bits & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
  const vl<W> big = m > 1.4142135623730951;
  m = select<W>(big, m * 0.5, m);
  k = k - big - (tiny & 54);  // big is -1 where set
  const vd<W> kd = __builtin_convertvector(k, vd<W>);
  const vd<W> f = m - 1.0;
  // s = f / (2 + f) without a divide (a divide costs 2 cycles per lane): 1/d for d in [1.71, 2.42] from a
  // quadratic fit (8 bits) refined by Newton steps (2 give 2e-11, 3 give full precision).
  const vd<W> d = f + 2.0;
  vd<W> y = (0.11723899 * d - 0.72292647) * d + 1.47711562;
  y = y * (2.0 - d * y);
  y = y + y * (1.0 - d * y);  // 2e-11
  if (kFull) y = y + y * (1.0 - d * y);
  const vd<W> s = f * y;
  const vd<W> z = s * s;
  const vd<W> w = z * z;
  const vd<W> t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  const vd<W> t2 = z * (6.666666666666735130e-01 +
                        w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  const vd<W> R = t1 + t2;
  const vd<W> hfsq = 0.5 * f * f;
  const vd<W> result = kd * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + R) + kd * 1.90821492927058770002e-10)) - f);
  return select<W>(x == 0.0, splat<W>(-std::numeric_limits<double>::infinity()), result);
}


// 2: AVX-512, 1: AVX2 + FMA, 0: SSE2 (every x86-64). PADDLE_EXT_SIMD=sse2|avx2 caps it (tests run every
// path on one machine this way).
inline int simd_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int level = [] {
    int l = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")       ? 1
                                                                                    : 0;
    if (const char* cap = std::getenv("PADDLE_EXT_SIMD")) {
      if (std::strcmp(cap, "sse2") == 0) l = 0;
      if (std::strcmp(cap, "avx2") == 0 && l > 1) l = 1;
    }
    return l;
  }();
  return level;
#else
  return 0;
#endif
}

// dispatch(k, args...) calls k.template run<W>(args...) compiled for the widest instruction set the CPU
// has. K::run must be PE_VINLINE (and everything it calls), so that it is compiled inside these
// target-specific wrappers; lambdas inside it would not be.
template <typename K>
struct Dispatch {
  template <typename... Args>
  __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"))) static void avx512(const K& k, Args... args) {
    k.template run<8>(args...);
  }
  template <typename... Args>
  __attribute__((target("avx2,fma"))) static void avx2(const K& k, Args... args) {
    k.template run<4>(args...);
  }
  template <typename... Args>
  static void sse2(const K& k, Args... args) {
    k.template run<2>(args...);
  }
};
template <typename K, typename... Args>
void dispatch(const K& k, Args... args) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (simd_level()) {
    case 2:
      Dispatch<K>::avx512(k, args...);
      return;
    case 1:
      Dispatch<K>::avx2(k, args...);
      return;
  }
#endif
  Dispatch<K>::sse2(k, args...);
}

}  // namespace simd
}  // namespace paddle_ext

#endif  // !__CUDACC__

// ---------------------------------------------------------------------------------------------------
// Float lanes (used by adaptive_log_softmax): vf<F> is F floats, F = 2W for the same register width.
#if !defined(__CUDACC__)
namespace paddle_ext {
namespace simd {

template <int F>
struct VecTypesF {
  typedef float vf __attribute__((vector_size(4 * F)));
  typedef int32_t vi __attribute__((vector_size(4 * F)));
};
template <int F>
using vf = typename VecTypesF<F>::vf;
template <int F>
using vi = typename VecTypesF<F>::vi;

template <int F>
PE_VINLINE vf<F> splatf(float v) {
  return vf<F>{} + v;
}
template <int F>
PE_VINLINE vf<F> selectf(vi<F> mask, vf<F> a, vf<F> b) {  // mask lanes are 0 or -1
  return (vf<F>)((mask & (vi<F>)a) | (~mask & (vi<F>)b));
}

// exp(x) on float lanes within ~1 ulp of float: Cephes' reduction x = n ln2 + r (|r| <= ln2/2, ln2 in two
// parts) and degree-5 minimax polynomial, 2^n put into the exponent. 0 below -87.3 (no subnormal results)
// and for -inf; +inf above 88; NaN stays NaN.
template <int F>
PE_VINLINE vf<F> vexpf(vf<F> x) {
  const float kMax = 88.0f, kMin = -87.3365447504019f;
  vf<F> xc = x > kMax ? splatf<F>(kMax) : x;
  xc = xc < kMin ? splatf<F>(kMin) : xc;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: (v + kRound) - kRound rounds v to an integer
  const vf<F> n = (xc * 1.44269504088896341f + kRound) - kRound;
  vf<F> r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf<F> p = splatf<F>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const vf<F> y = p * (vf<F>)((__builtin_convertvector(n, vi<F>) + 127) << 23);
  vf<F> out = selectf<F>(x < kMin, vf<F>{}, y);
  out = selectf<F>(x > kMax, splatf<F>(std::numeric_limits<float>::infinity()), out);
  return selectf<F>(x != x, x, out);
}

}  // namespace simd
}  // namespace paddle_ext
#endif  // !__CUDACC__
