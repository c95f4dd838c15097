// CPU logcumsumexp kernels on raw pointers (no Paddle header).
//
// float64 is computed in double lanes with the SIMD exp/log of vec_math.h (within ~1.5 ulp).
// float32, float16 and bfloat16 are computed in float lanes (2W per vector: twice the lanes and about
// half the work per exp/log) with every output checked against an error bound (float_unsafe): outputs
// the bound cannot certify to 1e-6 relative (in practice those near 0) are recomputed in double lanes
// (~1e-13), so every dtype is rounded once, at the store, from a result within 1e-6.
// Kernels are templates on the SIMD width W, compiled for AVX-512/AVX2/SSE2 and picked at run time
// (simd::dispatch).
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
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "paddle_ext/logcumsumexp.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/vec_math.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace paddle_ext {
namespace cpu {
namespace {

using simd::vd;
using simd::vl;

constexpr index_t kChunk = 512;     // elements per chunk of a contiguous row (4 KiB of doubles per buffer)
constexpr index_t kColumns = 256;   // columns advanced together on a strided axis
constexpr double kMaxRange = 640.;  // exp(x - M) stays a normal double (> e^-708) within this range
constexpr double kInf = std::numeric_limits<double>::infinity();

// Loads and stores between T and double. The 16-bit types are converted on their bits, branch-free
// (bit-identical to common.h's conversions, round to nearest even), so the copy loops vectorize.
PE_VINLINE double half_bits_to_double(uint32_t h) {
  const uint32_t magnitude = (h & 0x7fffu) << 13;  // exponent and mantissa in float position
  float f;
  uint32_t bits = magnitude;
  std::memcpy(&f, &bits, 4);
  f *= 5.192296858534828e+33f;  // 2^112 rebiases the exponent (and normalises subnormals)
  std::memcpy(&bits, &f, 4);
  bits = (h & 0x7c00u) == 0x7c00u ? (magnitude | 0x7f800000u) : bits;  // inf / nan
  bits |= (h & 0x8000u) << 16;
  std::memcpy(&f, &bits, 4);
  return f;
}
PE_VINLINE uint16_t double_to_half_bits(double v) {
  const float value = static_cast<float>(v);
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  // Subnormal results: adding 0.5f rounds at the half's subnormal step (2^-24), to nearest even.
  float sub;
  std::memcpy(&sub, &f, 4);
  sub += 0.5f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  const uint32_t subnormal = sub_bits - 0x3f000000u;
  // Normal results: rebias, round the 13 dropped bits to nearest even (a carry may reach inf: right).
  const uint32_t normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
  uint32_t o = f < 0x38800000u ? subnormal : normal;
  o = f >= 0x47800000u ? (f > 0x7f800000u ? 0x7e00u : 0x7c00u) : o;
  return static_cast<uint16_t>(o | (sign >> 16));
}
PE_VINLINE double bf16_bits_to_double(uint32_t b) {
  const uint32_t bits = b << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
PE_VINLINE uint16_t double_to_bf16_bits(double v) {
  const float value = static_cast<float>(v);
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  const uint32_t nan = (f >> 16) | 0x40u;
  return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

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
  PE_VINLINE static double to_double(uint16_t v) { return half_bits_to_double(v); }
  PE_VINLINE static uint16_t from_double(double v) { return double_to_half_bits(v); }
};
template <>
struct Storage<bfloat16_t> {
  using type = uint16_t;
  PE_VINLINE static double to_double(uint16_t v) { return bf16_bits_to_double(v); }
  PE_VINLINE static uint16_t from_double(double v) { return double_to_bf16_bits(v); }
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

// W 16-bit values <-> W doubles with vector bit arithmetic (the same formulas as the scalar ones above).
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

// ---- float lanes: the fast path for float32, float16 and bfloat16 outputs ----
// 2W floats per vector (16 with AVX-512). exp and log here are within ~1.5 ulp of float (measured
// exhaustively on their domains by the development harness); every output they produce is checked
// against an error bound and recomputed in double lanes when float could not guarantee 1e-6 (see
// scan_chunk_f).
template <int W>
struct FTypes {
  typedef float vf __attribute__((vector_size(8 * W)));
  typedef int32_t vi __attribute__((vector_size(8 * W)));
  typedef uint32_t vu __attribute__((vector_size(8 * W)));
};
template <int W>
struct FV {
  static constexpr int L = 2 * W;
  using vf = typename FTypes<W>::vf;
  using vi = typename FTypes<W>::vi;
  using vu = typename FTypes<W>::vu;

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
    return select(x == 0.0f, splat(-kInf), result);
  }
};

// Copies k elements of a line into buf in scan order, converted to B (double: W lanes per vector;
// float: 2W), and pads to a whole vector; scatter writes such a buffer back. The 16-bit types use
// explicit vectors (GCC does not vectorize their conversions).
template <int W, typename B, typename T>
PE_VINLINE index_t gather(const T* line_in, index_t n, index_t start, index_t k, bool reverse, B* __restrict buf,
                          B pad) {
  using S = Storage<T>;
  const typename S::type* __restrict line = reinterpret_cast<const typename S::type*>(line_in);
  constexpr int L = sizeof(B) == 8 ? W : 2 * W;
  index_t j = 0;
  if (sizeof(T) == 2) {
    using V = Vec16<L>;
    const bool half = std::is_same<T, float16_t>::value;
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
  using S = Storage<T>;
  typename S::type* __restrict line = reinterpret_cast<typename S::type*>(line_out);
  constexpr int L = sizeof(B) == 8 ? W : 2 * W;
  index_t j = 0;
  if (sizeof(T) == 2) {
    using V = Vec16<L>;
    const bool half = std::is_same<T, float16_t>::value;
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

template <typename T>
struct ForwardRows {
  const T* x;
  T* out;
  index_t n;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13

  // Scans positions [s0, s1) (in scan order) of row r from `carry`.
  template <int W>
  PE_VINLINE void scan_range(index_t r, index_t s0, index_t s1, double carry) const {
    alignas(64) double buf[kChunk];
    for (index_t start = s0; start < s1; start += kChunk) {
      const index_t k = std::min(kChunk, s1 - start);
      prefetch_next(x + r * n, out + r * n, n, start + kChunk, reverse);
      const index_t kp = gather<W>(x + r * n, n, start, k, reverse, buf, -kInf);
      carry = exclusive ? scan_chunk<W, kFull, true>(buf, kp, carry) : scan_chunk<W, kFull, false>(buf, kp, carry);
      scatter<W>(buf, n, start, k, reverse, out + r * n);
    }
  }

  // The float-lane version (float32 and narrower): false when the float bound failed after float
  // rounding had entered the carry (`exact` false); then the caller rescans the line in double.
  template <int W>
  PE_VINLINE bool scan_range_f(index_t r, index_t s0, index_t s1, double carry, bool exact) const {
    alignas(64) float bx[kChunk], bo[kChunk];
    for (index_t start = s0; start < s1; start += kChunk) {
      const index_t k = std::min(kChunk, s1 - start);
      // float32 forward chunks of whole vectors are scanned in place, without the copies.
      const bool direct = std::is_same<T, float>::value && !reverse && k % (2 * W) == 0;
      const float* in = direct ? reinterpret_cast<const float*>(x + r * n + start) : bx;
      float* res = direct ? reinterpret_cast<float*>(out + r * n + start) : bo;
      const index_t kp = direct ? k : gather<W>(x + r * n, n, start, k, reverse, bx, -std::numeric_limits<float>::infinity());
      NextLines next;
      if (start + kChunk < s1) {
        const index_t first = reverse ? n - start - kChunk - std::min(kChunk, s1 - start - kChunk) : start + kChunk;
        next = {reinterpret_cast<const char*>(x + r * n + first), reinterpret_cast<char*>(out + r * n + first),
                static_cast<index_t>(2 * W * sizeof(T))};
      }
      const bool ok = exclusive ? scan_chunk_f<W, true>(in, res, kp, carry, exact, next)
                                : scan_chunk_f<W, false>(in, res, kp, carry, exact, next);
      if (!ok) return false;
      if (!direct) scatter<W>(bo, n, start, k, reverse, out + r * n);
    }
    return true;
  }

  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      if (kFull || !scan_range_f<W>(r, 0, n, -kInf, true)) scan_range<W>(r, 0, n, -kInf);
    }
  }

  // The total of positions [0, split) of the single row as a log value.
  template <int W>
  PE_VINLINE double reduce_range(index_t split, bool float_lanes) const {
    double carry = -kInf;
    if (float_lanes) {
      alignas(64) float bx[kChunk];
      index_t start = 0;
      for (; start < split; start += kChunk) {
        const index_t k = std::min(kChunk, split - start);
        if (!reduce_chunk_f<W>(bx, gather<W>(x, n, start, k, reverse, bx, -std::numeric_limits<float>::infinity()),
                               carry)) {
          break;
        }
      }
      if (start >= split) return carry;
      carry = -kInf;
    }
    alignas(64) double buf[kChunk];
    for (index_t start = 0; start < split; start += kChunk) {
      const index_t k = std::min(kChunk, split - start);
      carry = reduce_chunk<W, kFull>(buf, gather<W>(x, n, start, k, reverse, buf, -kInf), carry);
    }
    return carry;
  }

  // One long row on two threads: part 0 scans [0, split); part 1 first reduces [0, split) to its total
  // (an exp per element, about a third of a scan's cost), then scans [split, n) from it.
  template <int W>
  PE_VINLINE void run_split(index_t part, index_t split) const {
    if (part == 0) {
      if (kFull || !scan_range_f<W>(0, 0, split, -kInf, true)) scan_range<W>(0, 0, split, -kInf);
      return;
    }
    if (kFull || !scan_range_f<W>(0, split, n, reduce_range<W>(split, !kFull), false)) {
      scan_range<W>(0, split, n, reduce_range<W>(split, false));
    }
  }
};

template <typename T>
struct ForwardSplitRow {
  ForwardRows<T> rows;
  index_t split;
  template <int W>
  PE_VINLINE void run(index_t part) const {
    rows.template run_split<W>(part, split);
  }
};

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

// The grad of a contiguous row, scanned from the end of the forward's order (`reverse` here is the
// backward's scan direction).
template <typename T>
struct BackwardRows {
  const T *x, *out, *out_grad;
  T* x_grad;
  index_t n;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13

  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    alignas(64) double bx[kChunk], bg[kChunk], bo[kChunk], bv[kChunk];
    for (index_t r = r0; r < r1; ++r) {
      LinearCarry carry;
      bool scalar = false;  // the state went NaN/+inf: stay on the scalar path
      LogSumAcc<double> pos, neg;
      for (index_t start = 0; start < n; start += kChunk) {
        const index_t k = std::min(kChunk, n - start);
        const index_t kp = gather<W>(x + r * n, n, start, k, reverse, bx, -kInf);
        gather<W>(out_grad + r * n, n, start, k, reverse, bg, 0.0);
        gather<W>(out + r * n, n, start, k, reverse, bo, -kInf);
        bool done = false;
        if (!scalar) {
          done = exclusive ? backward_chunk<W, kFull, true>(bx, bg, bo, bv, kp, carry)
                           : backward_chunk<W, kFull, false>(bx, bg, bo, bv, kp, carry);
          if (!done) carry_to_accs(carry, pos, neg);
        }
        if (!done) {
          for (index_t j = 0; j < k; ++j) bx[j] = backward_step(bx[j], bg[j], bo[j], pos, neg, exclusive);
          scalar = !accs_to_carry(pos, neg, carry);
        }
        scatter<W>(bx, n, start, k, reverse, x_grad + r * n);
      }
    }
  }
};

// W floats <-> W doubles.
template <int W>
PE_VINLINE vd<W> load_half_d(const float* p) {
  typename FV<W>::vhalf h;
  std::memcpy(&h, p, sizeof(h));
  return __builtin_convertvector(h, vd<W>);
}
template <int W>
PE_VINLINE void store_half_d(float* p, vd<W> v) {
  const typename FV<W>::vhalf h = __builtin_convertvector(v, typename FV<W>::vhalf);
  std::memcpy(p, &h, sizeof(h));
}

// A block of `steps` steps of one lane group (2W neighbouring columns; row k at xs + k * xst, its
// outputs at os + k * ost) in double lanes, from the per-column log carries; exact, as the double
// kernels (NaN/+inf and wide ranges per lane by LogSumAcc).
template <int W, bool kExclusive>
PE_VINLINE void column_block_d(const float* xs, index_t xst, float* os, index_t ost, index_t steps, double* carry) {
  for (int half = 0; half < 2; ++half) {
    const int off = half * W;
    vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), check = vd<W>{};
    for (index_t k = 0; k < steps; ++k) {
      const vd<W> v = load_half_d<W>(xs + k * xst + off);
      check += v;
      hi = simd::vmax<W>(hi, v);
      lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
    }
    const vd<W> Lc = simd::loadu<W>(carry + off);
    const vd<W> M = simd::vmax<W>(hi, Lc);
    lo = simd::select<W>(Lc == -kInf, lo, simd::vmin<W>(lo, Lc));
    const vl<W> wide = (M - lo > kMaxRange) & (M > -kInf);
    const vl<W> bad = (check != check) | (check == kInf) | (Lc != Lc) | (Lc == kInf) | wide;
    if (simd::any<W>(bad)) {
      for (int l = 0; l < W; ++l) {
        LogSumAcc<double> acc = acc_from_log(carry[off + l]);
        for (index_t k = 0; k < steps; ++k) {
          const double v = xs[k * xst + off + l];
          if (kExclusive) os[k * ost + off + l] = static_cast<float>(acc.value());
          acc.add(v);
          if (!kExclusive) os[k * ost + off + l] = static_cast<float>(acc.value());
        }
        carry[off + l] = acc.value();
      }
      continue;
    }
    const vl<W> empty = M == -kInf;  // nothing but -inf so far: c stays 0, outputs -inf
    vd<W> c = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, true>(Lc - M));
    for (index_t k = 0; k < steps; ++k) {
      const vd<W> e = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, true>(load_half_d<W>(xs + k * xst + off) - M));
      if (!kExclusive) c += e;
      store_half_d<W>(os + k * ost + off, M + simd::vlog<W, true>(c));  // c == 0 gives -inf
      if (kExclusive) c += e;
    }
    simd::storeu<W>(carry + off, M + simd::vlog<W, true>(c));
  }
}

// The same block in float lanes: per column M = the max of the block and the carry, then
// s = exp(carry - M) + t with t the block's running float sum of exp(x - M) (the carry and t are
// combined in double at the block's end, so rounding does not compound from block to block), and
// out = M + log(s). Returns false (carry untouched) for NaN/+inf, a range too wide for float exps,
// or an output the error bound rejects; the caller then redoes the block (or the column group) in
// double.
template <int W, bool kExclusive>
PE_VINLINE bool column_block_f(const float* xs, index_t xst, float* os, index_t ost, index_t steps, double* carry) {
  using F = FV<W>;
  using vf = typename F::vf;
  using vi = typename F::vi;
  vf hi = F::splat(-kInf), lo = F::splat(kInf), check = vf{};
  for (index_t k = 0; k < steps; ++k) {
    const vf v = F::load(xs + k * xst);
    check += v;
    hi = F::vmax(hi, v);
    lo = F::select(v == -kInf, lo, F::vmin(lo, v));
  }
  const vd<W> cl = simd::loadu<W>(carry), ch = simd::loadu<W>(carry + W);
  const vf Lc = F::from_d(cl, ch);  // rounded: only the choice of M and the range test see it
  const vf M = F::vmax(hi, Lc);
  lo = F::select(Lc == -kInf, lo, F::vmin(lo, Lc));
  const vi bad = (check != check) | (check == kInf) | (Lc != Lc) | (Lc == kInf) | ((M - lo > 80.0f) & (M > -kInf)) |
                 (F::vabs(M) > 1e30f & (M != -kInf));
  if (F::any(bad)) return false;
  const vf Mz = F::select(M == -kInf, vf{}, M);  // an empty column: every term and the carry are 0
  const vd<W> Ml = F::lo_d(Mz), Mh = F::hi_d(Mz);
  const vd<W> Cl = simd::vexp_neg<W, false>(cl - Ml), Ch = simd::vexp_neg<W, false>(ch - Mh);  // -inf gives 0
  const vf C = F::from_d(Cl, Ch);
  vf t = vf{};
  vi unsafe = vi{};
  for (index_t k = 0; k < steps; ++k) {
    const vf e = F::exp_neg(F::load(xs + k * xst) - Mz);
    if (!kExclusive) t += e;
    const vf l = F::log(C + t);
    const vf o = Mz + l;
    unsafe |= float_unsafe<W>(o, l, 16.0f);
    F::store(os + k * ost, o);
    if (kExclusive) t += e;
  }
  if (F::any(unsafe)) return false;
  simd::storeu<W>(carry, Ml + simd::vlog<W, false>(Cl + F::lo_d(t)));  // C + t == 0: -inf
  simd::storeu<W>(carry + W, Mh + simd::vlog<W, false>(Ch + F::hi_d(t)));
  return true;
}

// A block of columns of one outer slice of a strided axis (task t: columns [c0, c0 + kColumns)), in
// the rows' linear form with one column per lane: kSteps steps are gathered, each lane gets its max M
// over them (and its carry), then c += exp(x - M) and out = M + log(c) step by step. A lane-vector with
// NaN/+inf, or a range too wide for exp(x - M), takes LogSumAcc for those steps.
template <typename T>
struct ForwardColumns {
  const T* x;
  T* out;
  index_t n, inner;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13
  static constexpr index_t kSteps = 16;
  // Columns per task: float lanes take a whole 4 KiB page of each row (fewer, longer hardware-prefetch
  // streams; measured ~10% faster than 256 on [4096, 4096] along axis 0).
  static constexpr index_t kWidth = kFull ? kColumns : 1024;

  // Float lanes (float32 and narrower): lane groups of 2W columns. A group is `exact` until its first
  // float block; a block that float cannot do is redone in double while the group is exact, and
  // otherwise the group is rescanned in double from step 0 and stays in double.
  template <int W>
  PE_VINLINE void run_f(index_t t0, index_t t1) const {
    constexpr int L = 2 * W;
    constexpr index_t kGroups = kWidth / L;
    alignas(64) double carry[kWidth];
    alignas(64) float bx[kSteps * L], bo[kSteps * L];
    unsigned char mode[kGroups];  // 0: exact, 1: float rounding in the carry, 2: double from now on
    const index_t blocks = (inner + kWidth - 1) / kWidth;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kWidth;
      const index_t w = std::min(kWidth, inner - c0), groups = (w + L - 1) / L;
      std::fill(carry, carry + groups * L, -kInf);
      std::fill(mode, mode + groups, 0);
      for (index_t step0 = 0; step0 < n; step0 += kSteps) {
        const index_t steps = std::min(kSteps, n - step0);
        for (index_t g = 0; g < groups; ++g) {
          const index_t c = c0 + g * L, lanes = std::min<index_t>(L, w - g * L);
          const index_t row0 = o * n + (reverse ? n - 1 - step0 : step0);
          const index_t dir = reverse ? -1 : 1;  // rows of successive steps
          const bool direct = std::is_same<T, float>::value && lanes == L;  // read and write the tensors in place
          const float* xs = bx;
          float* os = bo;
          index_t xst = L, ost = L;
          if (direct) {
            xs = reinterpret_cast<const float*>(x) + row0 * inner + c;
            os = reinterpret_cast<float*>(out) + row0 * inner + c;
            xst = ost = dir * inner;
          } else {
            gather_block<W>(row0, dir, c, lanes, steps, bx);
          }
          double* cg = carry + g * L;
          bool done = false;
          if (mode[g] != 2) {
            done = exclusive ? column_block_f<W, true>(xs, xst, os, ost, steps, cg)
                             : column_block_f<W, false>(xs, xst, os, ost, steps, cg);
            if (done) mode[g] = 1;
          }
          if (!done && mode[g] == 1) {  // rescan the group from step 0 in double
            std::fill(cg, cg + L, -kInf);
            for (index_t s0 = 0; s0 < step0; s0 += kSteps) {
              const index_t r0 = o * n + (reverse ? n - 1 - s0 : s0);
              gather_block<W>(r0, dir, c, lanes, kSteps, bx);
              exclusive ? column_block_d<W, true>(bx, L, bo, L, kSteps, cg) : column_block_d<W, false>(bx, L, bo, L, kSteps, cg);
              scatter_block<W>(r0, dir, c, lanes, kSteps, bo);
            }
            if (!direct) gather_block<W>(row0, dir, c, lanes, steps, bx);  // bx held earlier blocks
            mode[g] = 2;
          }
          if (!done) {
            exclusive ? column_block_d<W, true>(xs, xst, os, ost, steps, cg)
                      : column_block_d<W, false>(xs, xst, os, ost, steps, cg);
          }
          if (!direct) scatter_block<W>(row0, dir, c, lanes, steps, bo);
        }
      }
    }
  }

  // Rows row0 + k * dir (k < steps), columns [c, c + lanes), as float into buf[k * 2W + l] (padded
  // with -inf), and back.
  template <int W>
  PE_VINLINE void gather_block(index_t row0, index_t dir, index_t c, index_t lanes, index_t steps, float* buf) const {
    constexpr int L = 2 * W;
    using S = Storage<T>;
    for (index_t k = 0; k < steps; ++k) {
      const typename S::type* row = reinterpret_cast<const typename S::type*>(x) + (row0 + k * dir) * inner + c;
      float* b = buf + k * L;
      index_t l = 0;
      if (sizeof(T) == 2 && lanes == L) {
        typename Vec16<L>::vh h;
        std::memcpy(&h, row, sizeof(h));
        const typename Vec16<L>::vf f = Vec16<L>::to_float(h, std::is_same<T, float16_t>::value);
        std::memcpy(b, &f, sizeof(f));
        l = L;
      }
      for (; l < lanes; ++l) b[l] = static_cast<float>(S::to_double(row[l]));
      for (; l < L; ++l) b[l] = -std::numeric_limits<float>::infinity();
    }
  }
  template <int W>
  PE_VINLINE void scatter_block(index_t row0, index_t dir, index_t c, index_t lanes, index_t steps,
                                const float* buf) const {
    constexpr int L = 2 * W;
    using S = Storage<T>;
    for (index_t k = 0; k < steps; ++k) {
      typename S::type* row = reinterpret_cast<typename S::type*>(out) + (row0 + k * dir) * inner + c;
      const float* b = buf + k * L;
      index_t l = 0;
      if (sizeof(T) == 2 && lanes == L) {
        typename Vec16<L>::vf f;
        std::memcpy(&f, b, sizeof(f));
        const typename Vec16<L>::vh h = Vec16<L>::from_float(f, std::is_same<T, float16_t>::value);
        std::memcpy(row, &h, sizeof(h));
        l = L;
      }
      for (; l < lanes; ++l) row[l] = S::from_double(b[l]);
    }
  }

  template <int W>
  PE_VINLINE void run(index_t t0, index_t t1) const {
    if constexpr (!kFull) {
      run_f<W>(t0, t1);
      return;
    }
    alignas(64) double carry[kColumns], buf[kSteps][kColumns];
    const index_t blocks = (inner + kColumns - 1) / kColumns;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kColumns;
      const index_t w = std::min(kColumns, inner - c0), wp = (w + W - 1) / W * W;
      std::fill(carry, carry + wp, -kInf);
      for (index_t step0 = 0; step0 < n; step0 += kSteps) {
        const index_t steps = std::min(kSteps, n - step0);
        for (index_t k = 0; k < steps; ++k) {
          const index_t row = o * n + (reverse ? n - 1 - (step0 + k) : step0 + k);
          gather<W>(x + row * inner + c0, w, 0, w, false, buf[k], -kInf);
        }
        for (index_t i = 0; i < wp; i += W) {
          vd<W> hi = simd::splat<W>(-kInf), lo = simd::splat<W>(kInf), check = vd<W>{};
          for (index_t k = 0; k < steps; ++k) {
            const vd<W> v = simd::loadu<W>(buf[k] + i);
            check += v;  // NaN or +inf shows
            hi = simd::vmax<W>(hi, v);
            lo = simd::select<W>(v == -kInf, lo, simd::vmin<W>(lo, v));
          }
          const vd<W> L = simd::loadu<W>(carry + i);
          const vd<W> M = simd::vmax<W>(hi, L);
          lo = simd::select<W>(L == -kInf, lo, simd::vmin<W>(lo, L));
          const vl<W> wide = (M - lo > kMaxRange) & (M > -kInf);
          const vl<W> bad = (check != check) | (check == kInf) | (L != L) | (L == kInf) | wide;
          if (simd::any<W>(bad)) {
            for (int l = 0; l < W; ++l) {
              LogSumAcc<double> acc = acc_from_log(carry[i + l]);
              for (index_t k = 0; k < steps; ++k) {
                const double v = buf[k][i + l];
                if (exclusive) buf[k][i + l] = acc.value();
                acc.add(v);
                if (!exclusive) buf[k][i + l] = acc.value();
              }
              carry[i + l] = acc.value();
            }
            continue;
          }
          const vl<W> empty = M == -kInf;  // nothing but -inf so far: c stays 0, outputs -inf
          vd<W> c = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, kFull>(L - M));
          for (index_t k = 0; k < steps; ++k) {
            const vd<W> e = simd::select<W>(empty, vd<W>{}, simd::vexp_neg<W, kFull>(simd::loadu<W>(buf[k] + i) - M));
            if (!exclusive) c += e;
            simd::storeu<W>(buf[k] + i, M + simd::vlog<W, kFull>(c));  // c == 0 gives -inf
            if (exclusive) c += e;
          }
          simd::storeu<W>(carry + i, M + simd::vlog<W, kFull>(c));
        }
        for (index_t k = 0; k < steps; ++k) {
          const index_t row = o * n + (reverse ? n - 1 - (step0 + k) : step0 + k);
          scatter<W>(buf[k], w, 0, w, false, out + row * inner + c0);
        }
      }
    }
  }
};

// The column backward in the same linear form, one column per lane: the lane's carry is rescaled to
// the newest -out at each step (exp of minus the difference), so two exps per element. Lanes go over to
// the scalar path, for good, at the first NaN/+inf of their block.
template <typename T>
struct BackwardColumns {
  const T *x, *out, *out_grad;
  T* x_grad;
  index_t n, inner;
  bool exclusive, reverse;  // reverse: the backward scan direction

  static constexpr bool kFull = sizeof(T) == 8;

  // One step of every lane: the grads of bx (in place), the carries (sum, scale) updated.
  template <int W, bool kExclusive>
  PE_VINLINE static void lanes_step(double* bx, const double* bg, const double* bo, double* sum, double* scale,
                                    index_t wp) {
    for (index_t i = 0; i < wp; i += W) {
      const vd<W> xv = simd::loadu<W>(bx + i), g = simd::loadu<W>(bg + i), ov = simd::loadu<W>(bo + i);
      vd<W> sv = simd::loadu<W>(sum + i), mv = simd::loadu<W>(scale + i);
      const vl<W> live = (g != 0.0) & (ov > -kInf);
      const vd<W> v = simd::select<W>(live, -ov, simd::splat<W>(-kInf));
      // One exp serves both: the carry's rescale (v above the scale) or the new term's (below).
      const vl<W> up = v > mv;
      const vd<W> e = simd::vexp_neg<W, kFull>(simd::select<W>(up, mv - v, v - mv));  // -inf - -inf: NaN,
      const vd<W> term = simd::select<W>(live, g * simd::select<W>(up, simd::splat<W>(1.0), e), vd<W>{});
      // x <= out of every output x feeds, so exp(x + scale) <= 1 at the scale of those outputs
      // only: exclusive reads the carry before this step's output joins it (x may exceed that
      // out: exp(x - out) can overflow, or the rescaled carry underflow to 0 under it).
      if (kExclusive) simd::storeu<W>(bx + i, simd::vexp<W, kFull>(xv + mv) * sv);  // scale -inf: 0 * 0
      sv = simd::select<W>(up, sv * e, sv);  // ... only where neither lane side is used
      mv = simd::vmax<W>(mv, v);
      sv += term;
      if (!kExclusive) simd::storeu<W>(bx + i, simd::vexp<W, kFull>(xv + mv) * sv);
      simd::storeu<W>(sum + i, sv);
      simd::storeu<W>(scale + i, mv);
    }
  }

  template <int W>
  PE_VINLINE void run(index_t t0, index_t t1) const {
    alignas(64) double sum[kColumns], scale[kColumns], bx[kColumns], bg[kColumns], bo[kColumns];
    LogSumAcc<double> pos[kColumns], neg[kColumns];
    const index_t blocks = (inner + kColumns - 1) / kColumns;
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks, c0 = (t % blocks) * kColumns;
      const index_t w = std::min(kColumns, inner - c0), wp = (w + W - 1) / W * W;
      std::fill(sum, sum + wp, 0.0);
      std::fill(scale, scale + wp, -kInf);
      bool clean = true;
      for (index_t step = 0; step < n; ++step) {
        const index_t offset = (o * n + (reverse ? n - 1 - step : step)) * inner + c0;
        gather<W>(x + offset, w, 0, w, false, bx, -kInf);
        gather<W>(out_grad + offset, w, 0, w, false, bg, 0.0);
        gather<W>(out + offset, w, 0, w, false, bo, -kInf);
        if (clean && !(no_nan_or_pos_inf<W>(bx, wp) && all_finite<W>(bg, wp) && no_nan_or_pos_inf<W>(bo, wp))) {
          clean = false;
          for (index_t l = 0; l < wp; ++l) carry_to_accs(LinearCarry{sum[l], scale[l]}, pos[l], neg[l]);
        }
        if (!clean) {
          for (index_t l = 0; l < w; ++l) bx[l] = backward_step(bx[l], bg[l], bo[l], pos[l], neg[l], exclusive);
        } else {
          exclusive ? lanes_step<W, true>(bx, bg, bo, sum, scale, wp) : lanes_step<W, false>(bx, bg, bo, sum, scale, wp);
        }
        scatter<W>(bx, w, 0, w, false, x_grad + offset);
      }
    }
  }
};

inline index_t grain_for(index_t work_per_task) {  // ~32k elements per thread at least
  return std::max<index_t>(1, (index_t(1) << 15) / std::max<index_t>(work_per_task, 1));
}

}  // namespace

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse) {
  if (outer == 0 || n == 0 || inner == 0) return;
  populate_for_write(out, sizeof(T) * outer * n * inner);
  if (inner == 1 && outer == 1 && n >= (index_t(1) << 16) && max_threads() >= 2) {
    // Split so that both threads finish together: the reducing thread's first part costs ~0.45 scans
    // in double lanes, ~0.6 in float lanes (its exps are float, but summed in double).
    const ForwardSplitRow<T> k{{x, out, n, exclusive, reverse}, sizeof(T) == 8 ? n * 11 / 16 : n * 5 / 8};
    parallel_for(0, 2, 1, [&](index_t p0, index_t p1) {
      for (index_t p = p0; p < p1; ++p) simd::dispatch(k, p);
    });
  } else if (inner == 1) {
    const ForwardRows<T> k{x, out, n, exclusive, reverse};
    parallel_for_dynamic(0, outer, grain_for(n), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
  } else {
    const ForwardColumns<T> k{x, out, n, inner, exclusive, reverse};
    constexpr index_t width = ForwardColumns<T>::kWidth;
    const index_t tasks = outer * ((inner + width - 1) / width);
    parallel_for_dynamic(0, tasks, grain_for(n * std::min(inner, width)),
                 [&](index_t t0, index_t t1) { simd::dispatch(k, t0, t1); });
  }
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                           index_t inner, bool exclusive, bool reverse) {
  if (outer == 0 || n == 0 || inner == 0) return;
  populate_for_write(x_grad, sizeof(T) * outer * n * inner);
  // The grad of x[j] collects the outputs that j fed, so it runs in the opposite direction.
  if (inner == 1) {
    const BackwardRows<T> k{x, out, out_grad, x_grad, n, exclusive, !reverse};
    parallel_for_dynamic(0, outer, grain_for(n), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
  } else {
    const BackwardColumns<T> k{x, out, out_grad, x_grad, n, inner, exclusive, !reverse};
    const index_t tasks = outer * ((inner + kColumns - 1) / kColumns);
    parallel_for_dynamic(0, tasks, grain_for(n * std::min(inner, kColumns)),
                 [&](index_t t0, index_t t1) { simd::dispatch(k, t0, t1); });
  }
}

#define PE_INSTANTIATE(T)                                                                    \
  template void logcumsumexp_forward<T>(const T*, T*, index_t, index_t, index_t, bool, bool); \
  template void logcumsumexp_backward<T>(const T*, const T*, const T*, T*, index_t, index_t,  \
                                         index_t, bool, bool);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
