// CPU logcumsumexp on complex64/complex128: a sequential complex log-add-exp scan per (outer, inner) line
// (scan_complex_line in include/paddle_ext/logcumsumexp_complex.h, shared with CUDA), lines spread over
// the threads. Neighbouring lines of a strided axis are neighbouring columns, so a block of lines shares
// the cache lines it reads. Scalar: each step is a complex exp and log1p in double.
#include "paddle_ext/logcumsumexp_complex.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext::cpu {
namespace {

template <typename IO>
void scan_lines(const IO& io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse) {
  if (outer == 0 || n == 0 || inner == 0) return;
  // grain: ~4096 complex steps per thread at least (each is ~100 ns)
  parallel_for_dynamic(0, outer * inner, std::max<index_t>(1, 4096 / n), [&](int64_t begin, int64_t end) {
    for (index_t line = begin; line < end; ++line) {
      const index_t o = line / inner, column = line % inner;
      scan_complex_line(io, o * n * inner + column, n, inner, exclusive, reverse);
    }
  });
}

}  // namespace

// The grad of x[j] gathers the outputs that j fed: the same scan in the opposite direction.
#define PE_DEFINE_COMPLEX_LAUNCHERS(T)                                                                           \
  template <>                                                                                                   \
  void logcumsumexp_forward<T>(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,      \
                               bool reverse) {                                                                  \
    scan_lines(ComplexForwardIO<T>{x, out}, outer, n, inner, exclusive, reverse);                               \
  }                                                                                                             \
  template <>                                                                                                   \
  void logcumsumexp_backward<T>(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, \
                                index_t inner, bool exclusive, bool reverse) {                                  \
    scan_lines(ComplexBackwardIO<T>{x, out, out_grad, x_grad}, outer, n, inner, exclusive, !reverse);          \
  }
PE_DEFINE_COMPLEX_LAUNCHERS(complex<float>)
PE_DEFINE_COMPLEX_LAUNCHERS(complex<double>)
#undef PE_DEFINE_COMPLEX_LAUNCHERS

}  // namespace paddle_ext::cpu
