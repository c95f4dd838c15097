// rnnt_joint_logprobs: the RNN-T joiner's log-softmax reduced to the two columns the lattice uses, and the
// pruning gather (docs/rnnt_loss.md). Declarations of the raw-pointer kernels (cpu/ and gpu/) and the
// indexing shared by both; the per-element math is adaptive_log_softmax.h's.
//
// logits [B, T, R, C] hold one row per (b, t, r); row (b, t, r) is lattice context s = r (full joiner,
// R = S+1, no ranges) or s = ranges[b, t, r] (pruned joiner). With lse = logsumexp(row):
//   px[b, s, t] = row[symbols[b, s]] - lse   (s < S)        py[b, s, t] = row[termination] - lse
// Pruned: (s, t) cells that no row reaches stay -inf. The grad of one row is the log-softmax grad with a
// sparse incoming grad: d row[c] = [c == sym] gx + [c == blank] gy - softmax(row)[c] (gx + gy), with
// gx = px_grad[b, s, t] (0 for s = S), gy = py_grad[b, s, t]. Each row's lse is kept for the grad as two
// parts in the accumulation type, lse = max + log_sum (the row maximum, exact in any dtype, and
// log(sum(exp(x - max)))), so x - lse = (x - max) - log_sum keeps float32 exact at large |logits|.
// A row of only -inf, or holding +inf or NaN, gives NaN (as log_softmax): its lse is in max, log_sum 0.
// A context s outside [0, S] or a symbol outside [0, C): the CPU binding rejects it; a GPU kernel skips the
// row (a NaN px for the symbol) instead of synchronising to check.
// The grad clamp (grad_clamp.h; rnnt_loss's `clamp`): px_grad and py_grad then hold each item's own loss's grads
// (the Python API hands the lattice a loss grad of 1) and scale[b] the item's upstream grad (the grad of the
// op's zero output `scale`, which the API adds to the loss); each row's grad is clamped, then times scale[b].
//
// Pruning gather: out[b, t, r, :] = x[b, index[b, t, r], :] (x [B, N, D], index [B, T, R] in [0, N));
// its grad adds each out_grad row into x_grad[b, index[b, t, r], :].
#pragma once

#include "paddle_ext/adaptive_log_softmax.h"
#include "paddle_ext/common.h"
#include "paddle_ext/grad_clamp.h"
#include "paddle_ext/joiner.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

struct JointShape {
  index_t B, T, R, S, C;
  int64_t termination;
  double clamp = -neg_inf<double>();  // the grad clamp's bound; +inf: off
};

// Lattice context of row `row` = (b, t, r).
PE_HOSTDEVICE inline int64_t joint_context(const int64_t* ranges, index_t row, index_t r) {
  return ranges ? ranges[row] : r;
}
PE_HOSTDEVICE inline bool joint_context_ok(int64_t s, index_t S) { return s >= 0 && s <= S; }
PE_HOSTDEVICE inline index_t joint_px_at(const JointShape& d, index_t b, int64_t s, index_t t) {
  return (b * d.S + s) * d.T + t;
}
PE_HOSTDEVICE inline index_t joint_py_at(const JointShape& d, index_t b, int64_t s, index_t t) {
  return (b * (d.S + 1) + s) * d.T + t;
}

// log_softmax(row)[x] from the row's lse parts, and its grad (als_full_grad on x - max).
template <typename A>
PE_HOSTDEVICE PE_ALS_INLINE A joint_logprob(A x, A max, A log_sum) {
  return (x - max) - log_sum;
}
template <typename A, typename Exp = AlsStdExp>
PE_HOSTDEVICE PE_ALS_INLINE A joint_grad(A x, A max, A log_sum, A own, A g_sum, Exp exp = Exp()) {
  return als_full_grad(x - max, log_sum, own, g_sum, exp);
}

namespace cpu {
template <typename T>
void rnnt_joint_forward(const T* logits, const int64_t* symbols, const int64_t* ranges, T* px, T* py, acc_t<T>* lse,
                        const JointShape& d);
template <typename T>  // scale [B]: read only with the clamp on
void rnnt_joint_backward(const T* logits, const int64_t* symbols, const int64_t* ranges, const acc_t<T>* lse,
                         const T* px_grad, const T* py_grad, const T* scale, T* logits_grad, const JointShape& d);
template <typename T>
void rnnt_prune_gather(const T* x, const int64_t* index, T* out, index_t B, index_t N, index_t M, index_t D);
template <typename T>
void rnnt_prune_gather_backward(const int64_t* index, const T* out_grad, T* x_grad, index_t B, index_t N, index_t M,
                                index_t D);
// The joiner fused in (joiner.h; T float or double): px, py and lse as rnnt_joint_forward on the logits
// act(am + lm) @ weight + bias (bias may be null), which are never whole; the backward writes the four grads
// from the logits grads of rnnt_joint_backward (clamped, and scale read, only with the clamp on).
template <typename T>
void rnnt_joiner_forward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                         const int64_t* ranges, T* px, T* py, T* lse, const JointShape& d, const JoinerShape& j);
template <typename T>
void rnnt_joiner_backward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                          const int64_t* ranges, const T* lse, const T* px_grad, const T* py_grad, const T* scale,
                          T* am_grad, T* lm_grad, T* weight_grad, T* bias_grad, const JointShape& d,
                          const JoinerShape& j);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/rnnt_joint_logprobs.cu; T is float, double, float16_t or bfloat16_t
template <typename T>
void rnnt_joint_forward(const T* logits, const int64_t* symbols, const int64_t* ranges, T* px, T* py, acc_t<T>* lse,
                        const JointShape& d, cudaStream_t stream);
template <typename T>
void rnnt_joint_backward(const T* logits, const int64_t* symbols, const int64_t* ranges, const acc_t<T>* lse,
                         const T* px_grad, const T* py_grad, const T* scale, T* logits_grad, const JointShape& d,
                         cudaStream_t stream);
template <typename T>
void rnnt_prune_gather(const T* x, const int64_t* index, T* out, index_t B, index_t N, index_t M, index_t D,
                       cudaStream_t stream);
template <typename T>
void rnnt_prune_gather_backward(const int64_t* index, const T* out_grad, T* x_grad, index_t B, index_t N, index_t M,
                                index_t D, cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
