// CPU adaptive_log_softmax kernels on raw pointers (no Paddle header): rows split across the cores,
// each row read twice for its lse (max, then sum of exp) and once more for an elementwise output.
// Every dtype is computed in double lanes with vec_math.h's exp (the formulas of adaptive_log_softmax.h
// with a vector exp functor), rounded once at the store; the kernels are templates on the SIMD width W,
// compiled for AVX-512/AVX2/SSE2 and picked at run time (simd::dispatch, PADDLE_EXT_SIMD caps it).
// The vector path needs a finite lse (a finite row maximum): then x - lse <= ~0 and NaN cannot occur. Rows
// with NaN or +inf, or of only -inf, take the scalar path (std::exp), with the header's exact semantics.
#include "paddle_ext/adaptive_log_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

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

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows per thread chunk: at least ~1M elements (~1 ms) per thread. Smaller calls stay serial: a parallel
// region costs a barrier, and on an oversubscribed machine OpenMP's spin-waiting sibling can cost a whole
// time slice (measured: the N=512 layer step went from ~20 ms to ~100 ms with a 32k-element grain).
inline index_t row_grain(index_t k) { return std::max<index_t>(1, (index_t(1) << 20) / std::max<index_t>(k, 1)); }

template <int W>
struct FloatLanes {  // (outside the functions: GCC rejects __builtin_convertvector on dependent local typedefs)
  typedef float vf __attribute__((vector_size(4 * W)));
};

// W elements of T <-> W double lanes; n < W loads the first n and fills the rest with `pad` (stores n).
// float and double convert as vectors; the 16-bit types go through common.h's scalar conversions.
template <int W, typename T>
PE_VINLINE vd<W> load_lanes(const T* p) {
  if constexpr (std::is_same<T, double>::value) {
    return simd::loadu<W>(p);
  } else if constexpr (std::is_same<T, float>::value) {
    typename FloatLanes<W>::vf f;
    std::memcpy(&f, p, sizeof(f));
    return __builtin_convertvector(f, vd<W>);
  } else {
    vd<W> v;
    for (int i = 0; i < W; ++i) v[i] = load(p[i]);
    return v;
  }
}
template <int W, typename T>
PE_VINLINE vd<W> load_part(const T* p, index_t n, double pad) {
  vd<W> v = simd::splat<W>(pad);
  for (index_t i = 0; i < n; ++i) v[i] = static_cast<double>(load(p[i]));
  return v;
}
template <int W, typename T>
PE_VINLINE void store_lanes(T* p, vd<W> v) {
  if constexpr (std::is_same<T, double>::value) {
    simd::storeu<W>(p, v);
  } else if constexpr (std::is_same<T, float>::value) {
    const typename FloatLanes<W>::vf f = __builtin_convertvector(v, typename FloatLanes<W>::vf);
    std::memcpy(p, &f, sizeof(f));
  } else {
    for (int i = 0; i < W; ++i) p[i] = store<T>(static_cast<float>(v[i]));
  }
}
template <int W, typename T>
PE_VINLINE void store_part(T* p, vd<W> v, index_t n) {
  for (index_t i = 0; i < n; ++i) p[i] = store<T>(static_cast<acc_t<T>>(v[i]));
}

// exp(x) for x <= ~0 (x - max or x - lse with a finite lse); -inf gives 0. Full double precision for
// float64 data, ~1e-13 relative (ample before rounding to float32 or narrower) otherwise.
template <int W, bool kFull>
struct VecExp {
  PE_VINLINE vd<W> operator()(vd<W> x) const { return simd::vexp_neg<W, kFull>(x); }
};

// y[j] = f(x[j], j) over a row of k elements, W lanes at a time; the last partial vector is padded with
// `pad` and stored partially. F is a functor with a PE_VINLINE operator() (a lambda would not be compiled
// for the dispatcher's instruction set).
template <int W, typename T, typename F>
PE_VINLINE void map_row(const T* x, T* y, index_t k, double pad, const F& f) {
  index_t j = 0;
  for (; j + W <= k; j += W) store_lanes<W>(y + j, f(load_lanes<W>(x + j), j));
  if (j < k) store_part<W>(y + j, f(load_part<W>(x + j, k - j, pad), j), k - j);
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

// lse of a row in double; NaN (NaN or +inf in the row) and -inf (all -inf) come from the scalar rules.
template <int W, bool kFull, typename T>
PE_VINLINE double row_lse(const T* x, index_t k) {
  vd<W> hi = simd::splat<W>(-kInf);
  vl<W> nan = vl<W>{};
  index_t j = 0;
  for (; j + W <= k; j += W) {
    const vd<W> v = load_lanes<W>(x + j);
    hi = simd::vmax<W>(hi, v);
    nan |= v != v;
  }
  if (j < k) {
    const vd<W> v = load_part<W>(x + j, k - j, -kInf);
    hi = simd::vmax<W>(hi, v);
    nan |= v != v;
  }
  const double max = simd::hmax<W>(hi);
  if (simd::any<W>(nan) || max == kInf || max == -kInf) return row_lse_scalar(x, k);
  const vd<W> m = simd::splat<W>(max);
  const VecExp<W, kFull> exp;
  vd<W> sum = vd<W>{};
  for (j = 0; j + W <= k; j += W) sum += als_softmax(load_lanes<W>(x + j), m, exp);
  if (j < k) sum += als_softmax(load_part<W>(x + j, k - j, -kInf), m, exp);
  return als_lse<double>(max, simd::hsum<W>(sum));
}

inline bool finite(double v) { return v - v == 0; }

// The header's elementwise formulas on W lanes, as map_row functors.
template <int W, bool kFull>
struct TargetGradLanes {  // a non-target element; the target one is fixed up after the row
  vd<W> lse, g;
  PE_VINLINE vd<W> operator()(vd<W> x, index_t) const { return als_target_grad(x, lse, g, false, VecExp<W, kFull>()); }
};
template <int W>
struct FullValueLanes {
  vd<W> lse, offset;
  PE_VINLINE vd<W> operator()(vd<W> x, index_t) const { return als_full_value(x, lse, offset); }
};
template <int W, typename T>
struct FullGradLanes {
  vd<W> lse, g_sum;
  const T* g;
  index_t k;
  PE_VINLINE vd<W> operator()(vd<W> x, index_t j) const {
    const vd<W> gj = j + W <= k ? load_lanes<W>(g + j) : load_part<W>(g + j, k - j, 0.0);
    return als_full_grad(x, lse, gj, g_sum, VecExp<W, sizeof(T) == 8>());
  }
};

template <typename T>
struct TargetForward {
  const T* logits;
  const int64_t* target;
  T* out;
  acc_t<T>* lse;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const double l = row_lse<W, sizeof(T) == 8>(x, k);
      lse[r] = static_cast<acc_t<T>>(l);
      const int64_t t = target[r];
      out[r] = store<T>(static_cast<acc_t<T>>(als_target_ok(t, k) ? load(x[t]) - l : std::nan("")));
    }
  }
};

template <typename T>
struct TargetBackward {
  const T* logits;
  const int64_t* target;
  const acc_t<T>* lse;
  const T* out_grad;
  T* logits_grad;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using A = acc_t<T>;
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      T* dx = logits_grad + r * k;
      const A l = lse[r], g = load(out_grad[r]);
      if (finite(l)) {
        map_row<W>(x, dx, k, -kInf, TargetGradLanes<W, sizeof(T) == 8>{simd::splat<W>(l), simd::splat<W>(g)});
      } else {
        for (index_t j = 0; j < k; ++j) dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, false));
      }
      const int64_t t = target[r];
      if (als_target_ok(t, k)) dx[t] = store<T>(als_target_grad<A>(load(x[t]), l, g, true));
    }
  }
};

template <typename T>
struct FullForward {
  const T* logits;
  const T* offset;
  T* out;
  acc_t<T>* lse;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const double l = row_lse<W, sizeof(T) == 8>(x, k);
      lse[r] = static_cast<acc_t<T>>(l);
      map_row<W>(x, out + r * k, k, 0.0, FullValueLanes<W>{simd::splat<W>(l), simd::splat<W>(load(offset[r]))});
    }
  }
};

template <typename T>
struct FullBackward {
  const T* logits;
  const acc_t<T>* lse;
  const T* out_grad;
  T* logits_grad;
  T* offset_grad;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using A = acc_t<T>;
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const T* g = out_grad + r * k;
      T* dx = logits_grad + r * k;
      vd<W> acc = vd<W>{};
      index_t j = 0;
      for (; j + W <= k; j += W) acc += load_lanes<W>(g + j);
      if (j < k) acc += load_part<W>(g + j, k - j, 0.0);
      const double s = simd::hsum<W>(acc);
      const A l = lse[r];
      if (finite(l)) {
        map_row<W>(x, dx, k, -kInf, FullGradLanes<W, T>{simd::splat<W>(l), simd::splat<W>(s), g, k});
      } else {
        for (j = 0; j < k; ++j) dx[j] = store<T>(als_full_grad<A>(load(x[j]), l, load(g[j]), static_cast<A>(s)));
      }
      offset_grad[r] = store<T>(static_cast<A>(s));
    }
  }
};

// Rows [0, m) in chunks over the threads, each chunk through the widest SIMD the CPU has.
template <typename K>
void for_rows(const K& kernel, index_t m, index_t k) {
  parallel_for(0, m, row_grain(k), [&](index_t begin, index_t end) { simd::dispatch(kernel, begin, end); });
}

}  // namespace

template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k) {
  for_rows(TargetForward<T>{logits, target, out, lse, k}, m, k);
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k) {
  for_rows(TargetBackward<T>{logits, target, lse, out_grad, logits_grad, k}, m, k);
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k) {
  for_rows(FullForward<T>{logits, offset, out, lse, k}, m, k);
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k) {
  for_rows(FullBackward<T>{logits, lse, out_grad, logits_grad, offset_grad, k}, m, k);
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void als_target_forward<T>(const T*, const int64_t*, T*, acc_t<T>*, index_t, index_t);            \
  template void als_target_backward<T>(const T*, const int64_t*, const acc_t<T>*, const T*, T*, index_t,     \
                                       index_t);                                                             \
  template void als_full_forward<T>(const T*, const T*, T*, acc_t<T>*, index_t, index_t);                    \
  template void als_full_backward<T>(const T*, const acc_t<T>*, const T*, T*, T*, index_t, index_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
