// rnnt_simple_logprobs: px / py of the simple (additive-joiner) RNN-T loss straight from lm and am, without
// the [B, T, S+1, C] joint tensor. Shared by cpu/ and gpu/; launcher declarations.
//
// Shapes: lm [B, L, C] with L = S+1 (row s for context s) or L = 1 (one row for every s: the smoothed loss's
// AM-only model), am [B, T, C], symbols int64 [B, S], approx [B, L, T] (saved for the grad),
// px [B, S, T1] with T1 = T + 1 (regular; px[:, :, T] = -inf) or T (modified), py [B, S+1, T].
// Below, lm[s] means lm's row s (L = S+1) or its only row (L = 1).
//   lp[s, c] = exp(lm[s, c] - lm_max[s]),  ap[t, c] = exp(am[t, c] - am_max[t])      (maxima over c)
//   approx[s, t] = sum_c lp[s, c] ap[t, c]                      (a GEMM over the L rows; every factor <= 1)
//   N[s, t] = log(approx[s, t]) + lm_max[s] + am_max[t]          = logsumexp_c(lm[s, c] + am[t, c])
//   px[s, t] = am[t, sym[s]] + lm[s, sym[s]] - N[s, t],   py[s, t] = am[t, term] + lm[s, term] - N[s, t]
// approx is exact to rounding unless its largest term lost digits to underflow: approx >= bound =
// C sqrt(tiny) means the largest term is >= sqrt(tiny), so its factors are normal numbers and every
// term lost to underflow (< tiny) is a relative C tiny / bound = sqrt(tiny) of the sum, far below
// rounding. The other cells ("fallback cells", e.g. logits spread by hundreds) get N by an exact
// logsumexp over c in double.
// Grad, with G[s, t] = px_grad[s, t] (s < S, t < T) + py_grad[s, t] and P = exp(lm[s] + am[t] - N[s, t])
// (L = 1: lm_grad's one row gathers the terms of every s, and the GEMMs use G summed over s):
//   am_grad[t, c] = sum_{s<S} px_grad[s, t] [c = sym[s]] + [c = term] sum_s py_grad[s, t] - sum_s G P[s, t, c]
//   lm_grad[s, c] = [s < S, c = sym[s]] sum_t px_grad[s, t] + [c = term] sum_t py_grad[s, t] - sum_t G P[s, t, c]
// where sum_s G P = ap[t, c] sum_s (G / approx)[s, t] lp[s, c] and sum_t G P = lp[s, c] sum_t (G / approx)
// ap[t, c] are two more GEMMs; fallback cells (weight 0 there) add G P exactly, in double.
// Rows whose maximum is not finite (all -inf, or +inf / NaN entries) give NaN, as the unfused formulas do.
#pragma once

#include <cmath>
#include <limits>

#include "paddle_ext/common.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

// C sqrt(tiny): approx below it is recomputed exactly (see above). NaN approx is not below it (NaN stays).
template <typename T>
PE_HOSTDEVICE inline T rnnt_fallback_bound(index_t C) {
  return static_cast<T>(C) * (sizeof(T) == 4 ? T(1.0842021724855044e-19) : T(1.4916681462400413e-154));
}

// logsumexp_c(lm_row[c] + am_row[c]) in double, two passes (the fallback cells).
template <typename T>
PE_HOSTDEVICE inline double rnnt_exact_lse(const T* lm_row, const T* am_row, index_t C) {
  double m = -std::numeric_limits<double>::infinity();
  for (index_t c = 0; c < C; ++c) {
    const double v = static_cast<double>(lm_row[c]) + static_cast<double>(am_row[c]);
    m = v > m ? v : m;
  }
  if (!(m > -std::numeric_limits<double>::infinity() && m < std::numeric_limits<double>::infinity())) return m;
  double sum = 0.0;
  for (index_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(lm_row[c]) + static_cast<double>(am_row[c]) - m);
  return m + std::log(sum);
}

// N[s, t] from approx and the shift lm_max[s] + am_max[t]; exact for a fallback cell.
template <typename T>
PE_HOSTDEVICE inline double rnnt_normalizer(T approx, double shift, T bound, const T* lm_row, const T* am_row,
                                            index_t C) {
  if (approx < bound) return rnnt_exact_lse(lm_row, am_row, C);
  return std::log(static_cast<double>(approx)) + shift;
}

namespace cpu {
template <typename T>
void rnnt_simple_logprobs_forward(const T* lm, const T* am, const int64_t* symbols, T* px, T* py, T* approx,
                                  index_t B, index_t S, index_t L, index_t T_, index_t C, int64_t termination_symbol,
                                  bool modified);
template <typename T>
void rnnt_simple_logprobs_backward(const T* lm, const T* am, const int64_t* symbols, const T* approx,
                                   const T* px_grad, const T* py_grad, T* lm_grad, T* am_grad, index_t B, index_t S,
                                   index_t L, index_t T_, index_t C, int64_t termination_symbol, bool modified);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/rnnt_simple_logprobs.cu; T is float or double
template <typename T>
void rnnt_simple_logprobs_forward(const T* lm, const T* am, const int64_t* symbols, T* px, T* py, T* approx,
                                  index_t B, index_t S, index_t L, index_t T_, index_t C, int64_t termination_symbol,
                                  bool modified, cudaStream_t stream);
template <typename T>
void rnnt_simple_logprobs_backward(const T* lm, const T* am, const int64_t* symbols, const T* approx,
                                   const T* px_grad, const T* py_grad, T* lm_grad, T* am_grad, index_t B, index_t S,
                                   index_t L, index_t T_, index_t C, int64_t termination_symbol, bool modified,
                                   cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
