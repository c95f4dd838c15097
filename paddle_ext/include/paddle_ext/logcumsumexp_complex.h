// logcumsumexp on complex64/complex128: the per-line scan (shared by cpu/ and gpu/) and the launchers'
// specialisations. Storage T is complex<float> or complex<double>; both compute in complex<double>.
//
// The tensor is viewed as [outer, n, inner] around the scanned axis, as for the real dtypes.
//   forward   out[i] = log sum_{j in P(i)} exp(x[j]) by complex_log_add_exp, in scan order; an output
//             that nothing (or only -inf real parts) reached is -inf + 0i.
//   backward  Paddle's complex convention, x_grad = out_grad * conj(d out / d x) (as PyTorch's), with
//             d out[i] / d x[j] = exp(x[j] - out[i]):
//             x_grad[j] = sum_{i : j in P(i)} g[i] conj(exp(x[j] - out[i])) = exp(conj(x[j]) + L[j]),
//             L the opposite-direction scan of log(g[i]) - conj(out[i]); one complex scan, and every exp
//             argument is the log of a term's size, so nothing overflows that the result does not.
#pragma once

#include "paddle_ext/common.h"
#include "paddle_ext/complex_math.h"
#include "paddle_ext/logcumsumexp.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

using complex_acc = complex<double>;

// One backward term, log(g) - conj(out). As in the real grad: g = 0 adds nothing (even where out is NaN),
// and an output at +-inf adds nothing; NaN otherwise propagates.
PE_HOSTDEVICE inline complex_acc logcumsumexp_complex_grad_term(complex_acc g, complex_acc out) {
  if (has_nan(g)) return complex_nan<double>();
  if (g.real == 0.0 && g.imag == 0.0) return complex_log_zero<double>();
  if (has_nan(out)) return complex_nan<double>();
  if (out.real == neg_inf<double>() || out.real == -neg_inf<double>()) return complex_log_zero<double>();
  return complex_log(g) - conj(out);
}

// exp(conj(x) + L), exactly 0 for x with real part -inf and where nothing reached x (L = -inf).
PE_HOSTDEVICE inline complex_acc logcumsumexp_complex_grad_value(complex_acc x, complex_acc log_sum) {
  if (x.real == neg_inf<double>() && x.imag == x.imag) return {0.0, 0.0};
  if (log_sum.real == neg_inf<double>()) return {0.0, 0.0};
  return complex_exp(conj(x) + log_sum);
}

// The forward's reads and writes: term(p) is x[p]; finish(p, v) stores out[p].
template <typename T>
struct ComplexForwardIO {
  const T* x;
  T* out;
  PE_HOSTDEVICE complex_acc term(index_t p) const { return widen(x[p]); }
  PE_HOSTDEVICE void finish(index_t p, complex_acc value) const { out[p] = narrow<T>(value); }
};

// The backward's: term(p) from out_grad[p] and out[p]; finish(p, L) stores x_grad[p].
template <typename T>
struct ComplexBackwardIO {
  const T* x;
  const T* out;
  const T* out_grad;
  T* x_grad;
  PE_HOSTDEVICE complex_acc term(index_t p) const {
    return logcumsumexp_complex_grad_term(widen(out_grad[p]), widen(out[p]));
  }
  PE_HOSTDEVICE void finish(index_t p, complex_acc log_sum) const {
    x_grad[p] = narrow<T>(logcumsumexp_complex_grad_value(widen(x[p]), log_sum));
  }
};

// The branch of a parallel scan's imaginary parts. A scan that combines terms in another order (the GPU's warp
// scan) gets each output right but for a multiple of 2 pi in its imaginary part; scan_complex_line's branch is
// the pivot's imaginary part plus arg(1 + exp(q - p)) in (-pi, pi] at each step.
// Whether complex_log_add_exp(acc, term) takes the term as its pivot (NaN aside: then the branch is moot).
PE_HOSTDEVICE inline bool complex_scan_term_is_pivot(double acc_real, double term_real) {
  return term_real != neg_inf<double>() && acc_real != -neg_inf<double>() && acc_real < term_real;
}
// The value of d + 2 pi k in (-pi, pi] (about: at the rounding of pi), 2 pi in two parts as the CPU's SIMD scan.
PE_HOSTDEVICE inline double wrap_to_pi(double d) {
  const double m = std::nearbyint(d * 0.15915494309189533577);
  return (d - m * 6.28318530693650245667e+00) - m * 2.43084020260247689973e-10;
}
// The output on scan_complex_line's branch whose imaginary part equals `imag` modulo 2 pi, given its pivot's.
PE_HOSTDEVICE inline double on_pivot_branch(double pivot_imag, double imag) {
  return pivot_imag + wrap_to_pi(imag - pivot_imag);
}

// Scans one line of n positions `stride` apart from `first`, in scan order (backwards if `reverse`):
// finish(p, value) gets the log-sum up to p (before p if `exclusive`).
template <typename IO>
PE_HOSTDEVICE inline void scan_complex_line(const IO& io, index_t first, index_t n, index_t stride, bool exclusive,
                                            bool reverse) {
  complex_acc acc = complex_log_zero<double>();
  for (index_t k = 0; k < n; ++k) {
    const index_t p = first + (reverse ? n - 1 - k : k) * stride;
    const complex_acc term = io.term(p);
    if (exclusive) io.finish(p, acc);
    acc = complex_log_add_exp(acc, term);
    if (!exclusive) io.finish(p, acc);
  }
}

// The launchers of logcumsumexp.h, specialised for complex64/complex128 (cpu/logcumsumexp/complex.cc,
// gpu/logcumsumexp/complex.cu), so that the binding dispatches every dtype to the same names.
#define PE_DECLARE_COMPLEX_LAUNCHERS(T, STREAM)                                                                 \
  template <>                                                                                                 \
  void logcumsumexp_forward<T>(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,    \
                               bool reverse STREAM);                                                     \
  template <>                                                                                                 \
  void logcumsumexp_backward<T>(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer,        \
                                index_t n, index_t inner, bool exclusive, bool reverse STREAM);
namespace cpu {
PE_DECLARE_COMPLEX_LAUNCHERS(complex<float>, )
PE_DECLARE_COMPLEX_LAUNCHERS(complex<double>, )
}  // namespace cpu
#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {
#define PE_STREAM_PARAM , cudaStream_t stream
PE_DECLARE_COMPLEX_LAUNCHERS(complex<float>, PE_STREAM_PARAM)
PE_DECLARE_COMPLEX_LAUNCHERS(complex<double>, PE_STREAM_PARAM)
#undef PE_STREAM_PARAM
}  // namespace gpu
#endif
#undef PE_DECLARE_COMPLEX_LAUNCHERS

}  // namespace paddle_ext
