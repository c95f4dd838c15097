// adaptive_log_softmax: declarations of the raw-pointer kernels (cpu/ and gpu/) and the per-element math
// shared by both. Every op views its logits as rows [M, K] and reduces each row once to
//   lse[m] = logsumexp(logits[m, :])        (max, then sum of exp(x - max): two reads, no temporary)
// then, per element:
//   target forward   out[m]       = logits[m, t] - lse[m]                       (one element per row)
//   target backward  grad[m, k]   = ([k == t] - exp(x - lse)) * g[m]   (the loss -out gets softmax - onehot)
//   full forward     out[m, k]    = x - lse[m] + offset[m]
//   full backward    grad[m, k]   = g[m, k] - exp(x - lse) * sum_k g[m, k],   offset_grad[m] = sum_k g[m, k]
// Conventions (as torch/NumPy log_softmax): -inf logits get log-probability -inf and softmax 0 (the grad
// keeps only the target term g); a row of only -inf (or with +inf/NaN) gives NaN. Half types accumulate in float32, and lse is
// stored in the accumulation type (float32 for half types) so the grads do not see a rounded lse.
#pragma once

#include <type_traits>

#include "paddle_ext/common.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

// exp on the host for float: Cephes' range reduction (x = n ln2 + r, |r| <= ln2/2) and degree-5
// minimax polynomial, within ~1 ulp of std::exp; branch-free so the CPU row loops vectorise (glibc's expf
// does not). exp(x) for x < -87.3 (including -inf) is 0, for x > 88 +inf (the kernels only pass x - max or
// x - lse, <= ~0); NaN stays NaN. Device code and double use std::exp.
inline float als_expf_host(float x) {
  const float kMax = 88.0f, kMin = -87.3365447504019f;
  float xc = x > kMax ? kMax : x;
  xc = xc < kMin ? kMin : xc;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: (v + kRound) - kRound rounds v to nearest, no libm call
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float y = p * scale;
  y = x < kMin ? 0.0f : y;
  y = x > kMax ? -neg_inf<float>() : y;
  return x != x ? x : y;
}

template <typename A>
PE_HOSTDEVICE inline A als_exp(A x) {
#ifdef __CUDA_ARCH__
  return std::exp(x);
#else
  if constexpr (std::is_same<A, float>::value) {
    return als_expf_host(x);
  } else {
    return std::exp(x);
  }
#endif
}

// lse from the row maximum and sum(exp(x - max)). A row of -inf has max -inf: lse is -inf, and every
// x - lse below is NaN, like NumPy's x - logsumexp(x). +inf or NaN maxima propagate.
template <typename A>
PE_HOSTDEVICE inline A als_lse(A max, A sum_exp) {
  if (max == neg_inf<A>() || max == -neg_inf<A>() || max != max) return max;
  return max + std::log(sum_exp);
}

// One term of the sum of exp(x - max); a -inf max (all-(-inf) row) contributes nothing.
template <typename A>
PE_HOSTDEVICE inline A als_exp_term(A x, A max) {
  return max == neg_inf<A>() ? A(0) : als_exp<A>(x - max);
}

template <typename A>
PE_HOSTDEVICE inline A als_softmax(A x, A lse) {
  return als_exp<A>(x - lse);
}

template <typename A>
PE_HOSTDEVICE inline A als_target_grad(A x, A lse, A g, bool is_target) {
  return ((is_target ? A(1) : A(0)) - als_softmax(x, lse)) * g;
}

template <typename A>
PE_HOSTDEVICE inline A als_full_value(A x, A lse, A offset) {
  return x - lse + offset;
}

template <typename A>
PE_HOSTDEVICE inline A als_full_grad(A x, A lse, A g, A g_sum) {
  return g - als_softmax(x, lse) * g_sum;
}

// Target out of [0, K): the C++ binding rejects it on CPU; a GPU kernel writes NaN instead (no host sync).
PE_HOSTDEVICE inline bool als_target_ok(int64_t t, index_t k) { return t >= 0 && t < k; }

namespace cpu {
template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k);
template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad, T* logits_grad,
                         index_t m, index_t k);
template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k);
template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad, index_t m,
                       index_t k);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/adaptive_log_softmax.cu; T is float, double, float16_t or bfloat16_t
template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k,
                        cudaStream_t stream);
template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad, T* logits_grad,
                         index_t m, index_t k, cudaStream_t stream);
template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k, cudaStream_t stream);
template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad, index_t m,
                       index_t k, cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
