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
// Lanes below -745.2 (-inf among them) are evaluated at 0: their product would underflow, a microcode
// assist per lane.
template <int W, bool kFull = true>
PE_VINLINE vd<W> vexp(vd<W> x) {
  const vd<W> xc = select<W>(x < -745.2, vd<W>{}, vmin<W>(x, splat<W>(710.0)));
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


// |x| up to which vsincos is accurate: the reduction's multiples of pi/2 stay below 2^20, so q times each
// 33-bit part of pi/2 is exact. Callers send larger, infinite or NaN arguments to libm.
constexpr double kSinCosMaxArg = 1.0e6;

// sin(x) and cos(x) for |x| <= kSinCosMaxArg, within ~1 ulp (plus ~1e-22 absolute from the reduction):
// x = q pi/2 + r with pi/2 in three parts (fdlibm's), |r| <= pi/4, and fdlibm's sin/cos kernels on r.
template <int W>
PE_VINLINE void vsincos(vd<W> x, vd<W>& sin_out, vd<W>& cos_out) {
  const double magic = 6755399441055744.0;  // 1.5 * 2^52: rounds to an integer in the low bits
  const vd<W> t = x * 0.63661977236758134308 + magic;
  const vd<W> q = t - magic;
  const vl<W> qi = as_int<W>(t) - as_int<W>(splat<W>(magic));
  const vd<W> r = ((x - q * 1.57079632673412561417e+00) - q * 6.07710050630396597660e-11) -
                  q * 2.02226624879595063154e-21;
  const vd<W> z = r * r;
  const vd<W> s = r + z * r *
                          (-1.66666666666666324348e-01 +
                           z * (8.33333333332248946124e-03 +
                                z * (-1.98412698298579493134e-04 +
                                     z * (2.75573137070700676789e-06 +
                                          z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)))));
  const vd<W> w = z * z;
  const vd<W> cr = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * 2.48015872894767294178e-05)) +
                   w * w * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11));
  const vd<W> hz = 0.5 * z;
  const vd<W> one_minus = 1.0 - hz;
  const vd<W> c = one_minus + (((1.0 - one_minus) - hz) + z * cr);
  const vl<W> odd = (qi & 1) != 0;
  const vd<W> sv = select<W>(odd, c, s), cv = select<W>(odd, s, c);
  const vl<W> sin_neg = (qi & 2) << 62, cos_neg = ((qi + 1) & 2) << 62;  // the sign bit where negated
  sin_out = as_double<W>(as_int<W>(sv) ^ sin_neg);
  cos_out = as_double<W>(as_int<W>(cv) ^ cos_neg);
}

// atan2(y, x) for finite y and x, within ~2 ulp (Cephes' atan on [0, 1], folded into the quadrants;
// atan2(+-0, +0) = +-0, atan2(+-0, -0) = +-pi).
template <int W>
PE_VINLINE vd<W> vatan2(vd<W> y, vd<W> x) {
  const vl<W> sign_bit = vl<W>{} + std::numeric_limits<int64_t>::min();
  const vd<W> ax = as_double<W>(as_int<W>(x) & ~sign_bit), ay = as_double<W>(as_int<W>(y) & ~sign_bit);
  const vd<W> hi = vmax<W>(ax, ay), lo = vmin<W>(ax, ay);
  // t = lo / hi in [0, 1]; past 0.66 atan t = pi/4 + atan((t - 1) / (t + 1)), lo - hi exact (Sterbenz).
  const vl<W> upper = lo > 0.66 * hi;
  const vd<W> num = select<W>(upper, lo - hi, lo);
  const vd<W> den = select<W>(hi == 0.0, splat<W>(1.0), select<W>(upper, lo + hi, hi));
  const vd<W> z = num / den;
  const vd<W> zz = z * z;
  const vd<W> p = (((-8.750608600031904122785e-01 * zz - 1.615753718733365076637e+01) * zz -
                    7.500855792314704667340e+01) * zz - 1.228866684490136173410e+02) * zz - 6.485021904942025371773e+01;
  const vd<W> qd = ((((zz + 2.485846490142306297962e+01) * zz + 1.650270098316988542046e+02) * zz +
                     4.328810604912902668951e+02) * zz + 4.853903996359136964868e+02) * zz + 1.945506571482613964425e+02;
  vd<W> a = z + z * (zz * p / qd);
  a = select<W>(upper, 0.78539816339744830962 + (a + 3.061616997868382943065e-17), a);
  // pi/2 and pi as a double plus its rounding error, for the folds.
  a = select<W>(ay > ax, 1.57079632679489661923 - (a - 6.123233995736765886130e-17), a);
  a = select<W>(as_int<W>(x) < 0, 3.14159265358979311600 - (a - 1.2246467991473531772e-16), a);
  return as_double<W>(as_int<W>(a) | (as_int<W>(y) & sign_bit));
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

// dispatch() capped at AVX2 (W = 4 on AVX-512 CPUs too): for kernels whose AVX-512 instantiation is not
// verified.
template <typename K, typename... Args>
void dispatch_avx2(const K& k, Args... args) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (simd_level() >= 1) {
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
// Float lanes: vf<F> is F floats, F = 2W for the same register width (adaptive_log_softmax's vexpf; FV<W>,
// logcumsumexp's exp and log), and 16-bit floats converted on vectors (Vec16).
#if !defined(__CUDACC__)
namespace paddle_ext {
namespace simd {

template <int F>
struct VecTypesF {
  typedef float vf __attribute__((vector_size(4 * F)));
  typedef int32_t vi __attribute__((vector_size(4 * F)));
  typedef uint32_t vu __attribute__((vector_size(4 * F)));
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
// and for -inf; +inf above 88; NaN stays NaN. Lanes below -87.3 are evaluated at 0, not at the bound: a
// product landing just under FLT_MIN would be subnormal, and each one costs a microcode assist.
template <int F>
PE_VINLINE vf<F> vexpf(vf<F> x) {
  const float kMax = 88.0f, kMin = -87.3365447504019f;
  vf<F> xc = x > kMax ? splatf<F>(kMax) : x;
  xc = x < kMin ? vf<F>{} : xc;
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


// FV<W>: 2W float lanes (the register width of vd<W>) with an exp for x <= 0 and a log, both within ~1.5 ulp
// of float (measured exhaustively on their domains); callers check what they produce against an error bound
// (logcumsumexp redoes in double lanes what float cannot certify).
template <int W>
struct FV {
  static constexpr int L = 2 * W;
  using vf = typename VecTypesF<2 * W>::vf;
  using vi = typename VecTypesF<2 * W>::vi;
  using vu = typename VecTypesF<2 * W>::vu;

  PE_VINLINE static vf splat(float v) { return vf{} + v; }
  PE_VINLINE static vf load(const float* p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
  }
  PE_VINLINE static void store(float* p, vf v) { __builtin_memcpy(p, &v, sizeof(v)); }
  PE_VINLINE static vf vmax(vf a, vf b) { return a > b ? a : b; }
  PE_VINLINE static vf vmin(vf a, vf b) { return a < b ? a : b; }
  PE_VINLINE static vf vabs(vf a) { return (vf)((vi)a & 0x7fffffff); }
  PE_VINLINE static vf select(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }
  PE_VINLINE static bool any(vi mask) {
    int32_t r = 0;
    for (int i = 0; i < L; ++i) r |= mask[i];
    return r != 0;
  }
  // Horizontal max/min/sum as butterflies: log2(L) shuffles instead of a serial chain over the lanes.
  template <int S>
  PE_VINLINE static vf butterfly(vf v) {
    vi idx;
    for (int i = 0; i < L; ++i) idx[i] = i ^ S;
    return __builtin_shuffle(v, idx);
  }
  template <typename Op>
  PE_VINLINE static float reduce(vf v, Op op) {
    if constexpr (L > 8) v = op(v, butterfly<8>(v));
    if constexpr (L > 4) v = op(v, butterfly<4>(v));
    v = op(v, butterfly<2>(v));
    return op(v, butterfly<1>(v))[0];
  }
  struct Max {
    PE_VINLINE vf operator()(vf a, vf b) const { return vmax(a, b); }
  };
  struct Min {
    PE_VINLINE vf operator()(vf a, vf b) const { return vmin(a, b); }
  };
  struct Add {
    PE_VINLINE vf operator()(vf a, vf b) const { return a + b; }
  };
  PE_VINLINE static float hmax(vf v) { return reduce(v, Max()); }
  PE_VINLINE static float hmin(vf v) { return reduce(v, Min()); }
  PE_VINLINE static float hsum(vf v) { return reduce(v, Add()); }
  template <int S>
  PE_VINLINE static vf shift_up(vf v) {
    vi idx;
    for (int i = 0; i < L; ++i) idx[i] = i < S ? L + i : i - S;
    return __builtin_shuffle(v, vf{}, idx);
  }
  PE_VINLINE static vf prefix_sum(vf v) {  // log2(L) levels: each lane's sum is within 2 ulp per level pair
    v += shift_up<1>(v);
    v += shift_up<2>(v);
    if (L > 4) v += shift_up<4>(v);
    if (L > 8) v += shift_up<8>(v);
    return v;
  }
  PE_VINLINE static vf broadcast_last(vf v) { return __builtin_shuffle(v, vi{} + (L - 1)); }
  // Halves as double lanes and back.
  typedef float vhalf __attribute__((vector_size(4 * W)));
  PE_VINLINE static vd<W> lo_d(vf v) {
    vhalf h;
    __builtin_memcpy(&h, &v, sizeof(h));
    return __builtin_convertvector(h, vd<W>);
  }
  PE_VINLINE static vd<W> hi_d(vf v) {
    vhalf h;
    __builtin_memcpy(&h, reinterpret_cast<const char*>(&v) + sizeof(h), sizeof(h));
    return __builtin_convertvector(h, vd<W>);
  }
  PE_VINLINE static vf from_d(vd<W> lo, vd<W> hi) {
    const vhalf a = __builtin_convertvector(lo, vhalf), b = __builtin_convertvector(hi, vhalf);
    vf v;
    __builtin_memcpy(&v, &a, sizeof(a));
    __builtin_memcpy(reinterpret_cast<char*>(&v) + sizeof(a), &b, sizeof(b));
    return v;
  }

  // 2^(j/16), rounded to float.
  static constexpr float kExp2[16] = {1.0f, 1.0442737340927124f, 1.0905077457427979f, 1.1387885808944702f,
                                      1.1892070770263672f, 1.2418577671051025f, 1.2968395948410034f,
                                      1.3542555570602417f, 1.4142135381698608f, 1.4768261909484863f,
                                      1.5422108173370361f, 1.610490322113037f, 1.6817928552627563f,
                                      1.7562521696090698f, 1.8340080976486206f, 1.9152065515518188f};
  // exp(x) for x <= 0 (-inf included); 0 below -85 (never a subnormal). x = (k S + j) ln2 / S + r with
  // S = L table entries, |r| <= ln2 / 2S, e^r by Taylor (degree 3 for S = 16: truncation 0.16 ulp).
  PE_VINLINE static vf exp_neg(vf x) {
    constexpr int S = L;
    constexpr int kLogS = S == 16 ? 4 : S == 8 ? 3 : 2;
    constexpr int kDegree = S == 16 ? 3 : S == 8 ? 4 : 5;
    // ln2 / S in two parts; the high one has 12 significant bits, so n * kHi is exact without an FMA.
    constexpr float kHi = 0.693359375f / S;
    constexpr float kLo = -2.1219444170128554e-4f / S;
    constexpr float kInvLn2S = S == 16 ? 23.083120346069336f : S == 8 ? 11.541560173034668f : 5.770780086517334f;
    const float magic = 12582912.0f;  // 1.5 * 2^23
    const vf xc = vmax(x, splat(-86.0f));
    const vf t = xc * kInvLn2S + magic;
    const vf n = t - magic;
    const vf r = (xc - n * kHi) - n * kLo;
    const vi ni = (vi)t - (vi)splat(magic);
    const vi j = ni & (S - 1);
    const vi k = ni >> kLogS;
    vf table;
    for (int i = 0; i < S; ++i) table[i] = kExp2[i * (16 / S)];
    const vf T = __builtin_shuffle(table, j);
    vf p = splat(kDegree == 3 ? 1.0f / 6 : kDegree == 4 ? 1.0f / 24 : 1.0f / 120);
    if (kDegree >= 5) p = p * r + 1.0f / 24;
    if (kDegree >= 4) p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r;
    const vf q = T + T * p;
    return select(x < -85.0f, vf{}, (vf)((vi)q + (vi)((vu)k << 23)));
  }

  static constexpr float kInvC[16] = {0.9696969985961914f, 0.9142857193946838f, 0.8648648858070374f,
                                      0.8205128312110901f, 0.7804877758026123f, 0.7441860437393188f,
                                      0.7111111283302307f, 0.6808510422706604f, 0.6530612111091614f,
                                      0.6274510025978088f, 0.6037735939025879f, 0.581818163394928f,
                                      0.5614035129547119f, 0.5423728823661804f, 0.5245901346206665f,
                                      0.5079365372657776f};
  static constexpr float kLogC[16] = {0.03077162802219391f, 0.08961215615272522f, 0.14518198370933533f,
                                      0.19782572984695435f, 0.24783620238304138f, 0.2954642176628113f,
                                      0.34092655777931213f, 0.3844117224216461f, 0.42608442902565f,
                                      0.4660896956920624f, 0.5045560002326965f, 0.541597306728363f,
                                      0.5773153305053711f, 0.6118015646934509f, 0.6451380252838135f,
                                      0.6773987412452698f};
  // log(x) for x >= 0 normal (0 gives -inf). x = 2^k m, m in [1, 2); the top 4 mantissa bits pick
  // c_j; r = m (1/c_j)_float - 1 is within 0.031 and log c_j is stored as -log((1/c_j)_float), so the
  // rounding of the reciprocal cancels; log(1 + r) by its degree-5 series (truncation 0.02 ulp).
  PE_VINLINE static vf log(vf x) {
    const vi bits = (vi)x;
    const vi k = ((bits >> 23) & 0xff) - 127;
    const vi j = (bits >> 19) & 15;
    const vf m = (vf)((bits & 0x7fffff) | 0x3f800000);
    vf inv_lo, inv_hi, log_lo, log_hi;
    for (int i = 0; i < L; ++i) {
      inv_lo[i] = kInvC[i % 16];
      inv_hi[i] = kInvC[(i + L) % 16];
      log_lo[i] = kLogC[i % 16];
      log_hi[i] = kLogC[(i + L) % 16];
    }
    vf inv, logc;
    if constexpr (L == 16) {
      inv = __builtin_shuffle(inv_lo, j);
      logc = __builtin_shuffle(log_lo, j);
    } else if constexpr (L == 8) {
      inv = __builtin_shuffle(inv_lo, inv_hi, j);
      logc = __builtin_shuffle(log_lo, log_hi, j);
    } else {
      for (int i = 0; i < L; ++i) {
        inv[i] = kInvC[j[i]];
        logc[i] = kLogC[j[i]];
      }
    }
    const vf r = m * inv - 1.0f;
    vf p = splat(0.2f);
    p = p * r - 0.25f;
    p = p * r + (1.0f / 3);
    p = p * r - 0.5f;
    p = p * r * r + r;
    const vf kf = __builtin_convertvector(k, vf);
    const vf result = kf * 0.693145751953125f + (logc + (p + kf * 1.428606765330187e-06f));
    return select(x == 0.0f, splat(-std::numeric_limits<float>::infinity()), result);
  }
};

// W 16-bit floats <-> W floats or doubles with vector bit arithmetic: common.h's scalar conversions on
// lanes (GCC does not vectorize those loops on its own).
template <int W>
struct Types16 {  // (outside Vec16: GCC 12 rejects __builtin_convertvector on the enclosing class's own typedefs)
  typedef uint16_t vh __attribute__((vector_size(2 * W)));
  typedef uint32_t vu __attribute__((vector_size(4 * W)));
  typedef float vf __attribute__((vector_size(4 * W)));
};
template <int W>
struct Vec16 {
  using vh = typename Types16<W>::vh;
  using vu = typename Types16<W>::vu;
  using vf = typename Types16<W>::vf;
  PE_VINLINE static vu bitsel(vu mask, vu a, vu b) { return (mask & a) | (~mask & b); }
  PE_VINLINE static vf to_float(vh h16, bool half) {
    const vu h = __builtin_convertvector(h16, vu);
    if (!half) return (vf)(h << 16);
    const vu magnitude = (h & 0x7fffu) << 13;
    vu bits = (vu)((vf)magnitude * 5.192296858534828e+33f);
    bits = bitsel((vu)((h & 0x7c00u) == 0x7c00u), magnitude | 0x7f800000u, bits);
    return (vf)(bits | ((h & 0x8000u) << 16));
  }
  PE_VINLINE static vd<W> to_double(vh h16, bool half) { return __builtin_convertvector(to_float(h16, half), vd<W>); }
  PE_VINLINE static vh from_double(vd<W> v, bool half) { return from_float(__builtin_convertvector(v, vf), half); }
  PE_VINLINE static vh from_float(vf value, bool half) {
    vu f = (vu)value;
    if (!half) {
      const vu rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
      return __builtin_convertvector(bitsel((vu)((f & 0x7fffffffu) > 0x7f800000u), (f >> 16) | 0x40u, rounded), vh);
    }
    const vu sign = f & 0x80000000u;
    f ^= sign;
    const vu subnormal = (vu)((vf)f + 0.5f) - 0x3f000000u;
    const vu normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
    vu o = bitsel((vu)(f < 0x38800000u), subnormal, normal);
    o = bitsel((vu)(f >= 0x47800000u), bitsel((vu)(f > 0x7f800000u), o * 0 + 0x7e00u, o * 0 + 0x7c00u), o);
    return __builtin_convertvector(o | (sign >> 16), vh);
  }
  PE_VINLINE static vh reversed(vh v) {
    vh idx;
    for (int i = 0; i < W; ++i) idx[i] = (uint16_t)(W - 1 - i);
    return __builtin_shuffle(v, idx);
  }
};

}  // namespace simd
}  // namespace paddle_ext
#endif  // !__CUDACC__
