// adaptive_log_softmax: declarations of the raw-pointer kernels (cpu/ and gpu/) and the per-element math
// shared by both. Every op views its logits as rows [M, K] and reduces each row once to
//   lse[m] = logsumexp(logits[m, :])        (max, then sum of exp(x - max): two reads, no temporary)
// then, per element:
//   target forward   out[m]       = logits[m, t] - lse[m]                       (one element per row)
//   target backward  grad[m, k]   = ([k == t] - exp(x - lse)) * g[m]   (the loss -out gets softmax - onehot)
//   full forward     out[m, k]    = x - lse[m] + offset[m]
//   full backward    grad[m, k]   = g[m, k] - exp(x - lse) * sum_k g[m, k],   offset_grad[m] = sum_k g[m, k]
// Conventions (as torch's log_softmax): -inf logits get log-probability -inf and softmax 0 (the grad
// keeps only the target term g); a row of only -inf, or holding +inf or NaN, gives NaN everywhere. Half types accumulate in float32, and lse is
// stored in the accumulation type (float32 for half types) so the grads do not see a rounded lse.
#pragma once

#include <type_traits>

#include "paddle_ext/common.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

// Host compilers must inline the formulas into the CPU kernels: there they run on vectors, inside
// functions compiled for a wider instruction set than the default one (vec_math.h's dispatch).
#if defined(__GNUC__) && !defined(__CUDACC__)
#define PE_ALS_INLINE __attribute__((always_inline)) inline
#else
#define PE_ALS_INLINE inline
#endif

// The formulas below take the exp as a functor: std::exp by default (the CUDA kernels and the CPU's scalar
// path), vec_math.h's vector exp on double lanes in the CPU kernels, where A is then a vector type.
struct AlsStdExp {
  template <typename A>
  PE_HOSTDEVICE A operator()(A x) const {
    return std::exp(x);
  }
};

template <typename A>
PE_HOSTDEVICE inline A als_exp(A x) {
  return std::exp(x);
}

// lse from the row maximum and sum(exp(x - max)). A row of -inf has max -inf: lse is -inf, and every
// x - lse below is NaN. A row holding +inf (max +inf) or NaN gets lse NaN, so that every output and grad
// of the row is NaN, as torch's log_softmax gives (there x - max is NaN at +inf, and their logsumexp NaN).
template <typename A>
PE_HOSTDEVICE inline A als_lse(A max, A sum_exp) {
  if (max == neg_inf<A>()) return max;
  if (max == -neg_inf<A>() || max != max) return A(NAN);
  return max + std::log(sum_exp);
}

// One term of the sum of exp(x - max); a -inf max (all-(-inf) row) contributes nothing.
template <typename A>
PE_HOSTDEVICE inline A als_exp_term(A x, A max) {
  return max == neg_inf<A>() ? A(0) : als_exp<A>(x - max);
}

template <typename A, typename Exp = AlsStdExp>
PE_HOSTDEVICE PE_ALS_INLINE A als_softmax(A x, A lse, Exp exp = Exp()) {
  return exp(x - lse);
}

template <typename A, typename Exp = AlsStdExp>
PE_HOSTDEVICE PE_ALS_INLINE A als_target_grad(A x, A lse, A g, bool is_target, Exp exp = Exp()) {
  const A p = als_softmax(x, lse, exp);
  return (is_target ? 1 - p : 0 - p) * g;
}

template <typename A>
PE_HOSTDEVICE PE_ALS_INLINE A als_full_value(A x, A lse, A offset) {
  return x - lse + offset;
}

template <typename A, typename Exp = AlsStdExp>
PE_HOSTDEVICE PE_ALS_INLINE A als_full_grad(A x, A lse, A g, A g_sum, Exp exp = Exp()) {
  return g - als_softmax(x, lse, exp) * g_sum;
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
// The target op through the projection that makes its logits (logits = x @ w; x [m, n_in], w [n_in, k]), in
// blocks of rows so that the [m, k] logits never exist whole: out[r] = logits[r, target[r]] - lse(logits[r]),
// and, where x_grad and w_grad are given, the grads of sum_r out_grad[r] * out[r] (out_grad nullptr: ones):
// x_grad = dlogits @ w^T and w_grad = x^T @ dlogits on sgemm (gemm.h), each block's dlogits made and consumed
// while the block is in memory.
void als_linear_target_blocked(const float* x, const float* w, const int64_t* target, const float* out_grad,
                               float* out, float* x_grad, float* w_grad, index_t m, index_t n_in, index_t k);
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
