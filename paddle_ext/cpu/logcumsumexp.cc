// CPU logcumsumexp kernels on raw pointers (no Paddle header).
#include "paddle_ext/logcumsumexp.h"

#include "paddle_ext/scan.h"

namespace paddle_ext {
namespace cpu {

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner,
                          bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  scan_lines(outer, n, inner, reverse, LogSumAcc<A>{}, [&](LogSumAcc<A>& acc, index_t i) {
    const A v = static_cast<A>(load(x[i]));
    if (exclusive) {
      out[i] = store<T>(acc.value());
      acc.add(v);
    } else {
      acc.add(v);
      out[i] = store<T>(acc.value());
    }
  });
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer,
                           index_t n, index_t inner, bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  struct State {
    LogSumAcc<A> pos, neg;
  };
  // The grad of x[j] collects the outputs that j fed, so it runs in the opposite direction.
  scan_lines(outer, n, inner, !reverse, State{}, [&](State& s, index_t i) {
    A term;
    bool negative;
    const bool contributes = logcumsumexp_grad_term<A>(static_cast<A>(load(out_grad[i])),
                                                       static_cast<A>(load(out[i])), &term, &negative);
    if (!exclusive && contributes) (negative ? s.neg : s.pos).add(term);
    const A g = logcumsumexp_grad_value<A>(static_cast<A>(load(x[i])), s.pos.value(), s.neg.value());
    x_grad[i] = store<T>(g);
    if (exclusive && contributes) (negative ? s.neg : s.pos).add(term);
  });
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
