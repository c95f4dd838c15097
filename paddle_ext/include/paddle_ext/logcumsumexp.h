// logcumsumexp: declarations of the raw-pointer kernels (cpu/ and gpu/) and the per-element math.
//
// The tensor is viewed as [outer, n, inner] around the scanned axis.
//   forward   out[i]  = log sum_{j in P(i)} exp(x[j]),  P(i) = {j <= i} ({j < i} if exclusive),
//             in scan order (reversed if `reverse`).
//   backward  dx[j]   = sum_{i : j in P(i)} g[i] * exp(x[j] - out[i])
//                     = exp(x[j] + L+[j]) - exp(x[j] + L-[j]),
//             where L± is the same kind of scan run in the opposite direction over
//             log(max(±g, 0)) - out (terms with out = -inf contribute nothing): the positive/negative
//             split keeps every exp argument bounded, and -inf inputs get exactly 0.
#pragma once

#include "paddle_ext/common.h"
#include "paddle_ext/log_math.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

template <typename T>
struct LogcumsumexpAcc {  // float32 accumulates in float64: 2^20-long rows stay within 1e-6
  using type = acc_t<T>;
};
template <>
struct LogcumsumexpAcc<float> {
  using type = double;
};

// One backward term: log(|g|) - out, split by the sign of g. Returns false when it contributes nothing.
template <typename A>
PE_HOSTDEVICE inline bool logcumsumexp_grad_term(A g, A out, A* log_term, bool* negative) {
  if (g == A(0) || out == neg_inf<A>()) return false;
  *negative = g < A(0);
  *log_term = std::log(*negative ? -g : g) - out;
  return true;
}

// exp(x + L+) - exp(x + L-), with 0 for x = -inf.
template <typename A>
PE_HOSTDEVICE inline A logcumsumexp_grad_value(A x, A log_pos, A log_neg) {
  if (x == neg_inf<A>()) return A(0);
  const A pos = log_pos == neg_inf<A>() ? A(0) : std::exp(x + log_pos);
  const A neg = log_neg == neg_inf<A>() ? A(0) : std::exp(x + log_neg);
  return pos - neg;
}

namespace cpu {
template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner,
                          bool exclusive, bool reverse);
template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer,
                           index_t n, index_t inner, bool exclusive, bool reverse);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/logcumsumexp/; T is float, double, float16_t or bfloat16_t
template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse, cudaStream_t stream);
template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer,
                           index_t n, index_t inner, bool exclusive, bool reverse, cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
