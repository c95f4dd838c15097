// CPU adaptive_log_softmax kernels on raw pointers (no Paddle header): rows split across the cores,
// each row read twice for its lse (max, then sum of exp) and once more for an elementwise output.
// FP compares may not trap here, so GCC can turn the clamps/selects of als_expf_host into vector blends
// (with the default -ftrapping-math the exp loops stay scalar and branchy). No FP exceptions are used.
#pragma GCC optimize("no-trapping-math")

#include "paddle_ext/adaptive_log_softmax.h"

#include <algorithm>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

// Rows per thread chunk: at least ~32k elements of work per thread, so tiny calls stay serial.
inline index_t row_grain(index_t k) { return std::max<index_t>(1, (index_t(1) << 15) / std::max<index_t>(k, 1)); }

// Sum of f(j) over [0, k) in double, from vectorised chunks of 256 summed in A: float rows keep ~1e-7
// relative accuracy at 10^5 columns, and the chunk loop vectorises (a float->double reduction does not).
template <typename A, typename Fn>
double chunked_sum(index_t k, const Fn& f) {
  constexpr index_t kChunk = 256;
  double total = 0;
  for (index_t begin = 0; begin < k; begin += kChunk) {
    const index_t end = std::min(k, begin + kChunk);
    A part = 0;
#pragma omp simd reduction(+ : part)
    for (index_t j = begin; j < end; ++j) part += f(j);
    total += part;
  }
  return total;
}

template <typename T>
acc_t<T> row_lse(const T* x, index_t k) {
  using A = acc_t<T>;
  A max = neg_inf<A>();
  int nan = 0;
#pragma omp simd reduction(max : max) reduction(| : nan)
  for (index_t j = 0; j < k; ++j) {
    const A v = load(x[j]);
    max = v > max ? v : max;
    nan |= (int)(v != v);
  }
  if (nan) return std::numeric_limits<A>::quiet_NaN();
  if (max == neg_inf<A>() || max == -neg_inf<A>()) return max;
  // max is finite here
  const double sum = chunked_sum<A>(k, [&](index_t j) { return als_exp<A>(static_cast<A>(load(x[j])) - max); });
  return als_lse<A>(max, static_cast<A>(sum));
}

template <typename Fn>
void for_rows(index_t m, index_t k, const Fn& fn) {
  parallel_for(0, m, row_grain(k), [&](index_t begin, index_t end) {
    for (index_t r = begin; r < end; ++r) fn(r);
  });
}

}  // namespace

template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k) {
  using A = acc_t<T>;
  for_rows(m, k, [&](index_t r) {
    const T* x = logits + r * k;
    const A l = row_lse(x, k);
    lse[r] = l;
    const int64_t t = target[r];
    out[r] = store<T>(als_target_ok(t, k) ? static_cast<A>(load(x[t])) - l : std::numeric_limits<A>::quiet_NaN());
  });
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k) {
  using A = acc_t<T>;
  for_rows(m, k, [&](index_t r) {
    const T* x = logits + r * k;
    T* dx = logits_grad + r * k;
    const A l = lse[r], g = load(out_grad[r]);
#pragma omp simd
    for (index_t j = 0; j < k; ++j) dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, false));
    const int64_t t = target[r];
    if (als_target_ok(t, k)) dx[t] = store<T>(als_target_grad<A>(load(x[t]), l, g, true));
  });
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k) {
  using A = acc_t<T>;
  for_rows(m, k, [&](index_t r) {
    const T* x = logits + r * k;
    T* y = out + r * k;
    const A l = row_lse(x, k), off = load(offset[r]);
    lse[r] = l;
#pragma omp simd
    for (index_t j = 0; j < k; ++j) y[j] = store<T>(als_full_value<A>(load(x[j]), l, off));
  });
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k) {
  using A = acc_t<T>;
  for_rows(m, k, [&](index_t r) {
    const T* x = logits + r * k;
    const T* g = out_grad + r * k;
    T* dx = logits_grad + r * k;
    const A l = lse[r], s = static_cast<A>(chunked_sum<A>(k, [&](index_t j) { return static_cast<A>(load(g[j])); }));
#pragma omp simd
    for (index_t j = 0; j < k; ++j) dx[j] = store<T>(als_full_grad<A>(load(x[j]), l, load(g[j]), s));
    offset_grad[r] = store<T>(s);
  });
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
