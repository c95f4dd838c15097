// CUDA logcumsumexp on complex64/complex128, forward and backward (one kernel pair, two IO functors from
// include/paddle_ext/logcumsumexp_complex.h), everything in complex<double>:
//   inner == 1 (contiguous rows): one warp per row, 32 positions a step, scanned with shuffles of the
//     complex log-add-exp (associative; the first operand is always the earlier), the carry in registers; the
//     imaginary parts then put on the sequential scan's branch (on_scan_branch), as the CPU has them;
//   inner  > 1 (strided axis): one thread per (outer, column) line walking the axis (scan_complex_line, as
//     on the CPU); neighbouring threads read neighbouring columns, so every step is coalesced.
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/logcumsumexp_complex.h"

namespace paddle_ext::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

template <typename IO>
__global__ void __launch_bounds__(kThreads) complex_columns_kernel(IO io, index_t outer, index_t n, index_t inner,
                                                                   bool exclusive, bool reverse) {
  const index_t lines = outer * inner;
  for (index_t line = blockIdx.x * (index_t)blockDim.x + threadIdx.x; line < lines;
       line += (index_t)gridDim.x * blockDim.x) {
    const index_t o = line / inner, column = line % inner;
    scan_complex_line(io, o * n * inner + column, n, inner, exclusive, reverse);
  }
}

__device__ inline complex_acc shuffle_up(complex_acc v, int delta) {
  return {__shfl_up_sync(0xffffffffu, v.real, delta), __shfl_up_sync(0xffffffffu, v.imag, delta)};
}

// The warp's inclusive values `v` (lane l: the log-sum of the carry and the terms up to lane l, right but for a
// multiple of 2 pi in the imaginary part) on scan_complex_line's branch: lane l's imaginary part is its pivot's
// (its term's, or lane l - 1's output, the carry's for lane 0) plus v's wrapped around it. The turns of 2 pi that
// separate the two, absolute where the term is the pivot and relative to lane l - 1's otherwise, are summed by a
// segmented scan (exact: integers), which gives every lane its predecessor's branch in five shuffles. Every lane
// takes part in the shuffles (a NaN lane counts no turns and stays NaN + NaN i).
__device__ inline complex_acc on_scan_branch(complex_acc v, complex_acc term, complex_acc carry, int lane) {
  constexpr double kTwoPi = 6.283185307179586477;
  complex_acc prev = shuffle_up(v, 1);
  if (lane == 0) prev = carry;
  const bool term_pivot = complex_scan_term_is_pivot(prev.real, term.real);
  const double pivot = term_pivot ? term.imag : prev.imag;
  const double turns_here = std::nearbyint((on_pivot_branch(pivot, v.imag) - v.imag) / kTwoPi);
  long long turns = std::isfinite(turns_here) ? (long long)turns_here : 0;
  int absolute = term_pivot || lane == 0;  // lane 0's predecessor, the carry, is on the branch already
#pragma unroll
  for (int delta = 1; delta < 32; delta *= 2) {
    const long long lower = __shfl_up_sync(0xffffffffu, turns, delta);
    const int lower_absolute = __shfl_up_sync(0xffffffffu, absolute, delta);
    if (lane >= delta && !absolute) {
      turns += lower;
      absolute = lower_absolute;
    }
  }
  double prev_imag = __shfl_up_sync(0xffffffffu, v.imag + kTwoPi * (double)turns, 1);
  if (lane == 0) prev_imag = carry.imag;
  return {v.real, on_pivot_branch(term_pivot ? term.imag : prev_imag, v.imag)};
}

template <typename IO>
__global__ void __launch_bounds__(kThreads) complex_rows_kernel(IO io, index_t rows, index_t n, bool exclusive,
                                                                bool reverse) {
  const int lane = threadIdx.x % 32;
  const index_t warps = (index_t)gridDim.x * kWarpsPerBlock;
  for (index_t row = blockIdx.x * (index_t)kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    complex_acc carry = complex_log_zero<double>();
    for (index_t k0 = 0; k0 < n; k0 += 32) {
      const index_t k = k0 + lane;
      const index_t p = row * n + (reverse ? n - 1 - k : k);
      const complex_acc term = k < n ? io.term(p) : complex_log_zero<double>();
      complex_acc prefix = term;  // inclusive prefix of this step's 32 terms
#pragma unroll
      for (int delta = 1; delta < 32; delta *= 2) {
        const complex_acc earlier = shuffle_up(prefix, delta);
        if (lane >= delta) prefix = complex_log_add_exp(earlier, prefix);
      }
      const complex_acc value = on_scan_branch(complex_log_add_exp(carry, prefix), term, carry, lane);
      complex_acc before = shuffle_up(value, 1);
      if (lane == 0) before = carry;
      if (k < n) io.finish(p, exclusive ? before : value);
      carry = {__shfl_sync(0xffffffffu, value.real, 31), __shfl_sync(0xffffffffu, value.imag, 31)};
    }
  }
}

template <typename IO>
void launch(const IO& io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
  if (outer == 0 || n == 0 || inner == 0) return;
  if (inner == 1) {
    complex_rows_kernel<<<grid_size(outer, kWarpsPerBlock), kThreads, 0, stream>>>(io, outer, n, exclusive, reverse);
  } else {
    complex_columns_kernel<<<grid_size(outer * inner, kThreads), kThreads, 0, stream>>>(io, outer, n, inner, exclusive,
                                                                                       reverse);
  }
  check_launch("logcumsumexp (complex)");
}

}  // namespace

// The grad of x[j] gathers the outputs that j fed: the same scan in the opposite direction.
#define PE_DEFINE_COMPLEX_LAUNCHERS(T)                                                                           \
  template <>                                                                                                   \
  void logcumsumexp_forward<T>(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,      \
                               bool reverse, cudaStream_t stream) {                                             \
    launch(ComplexForwardIO<T>{x, out}, outer, n, inner, exclusive, reverse, stream);                           \
  }                                                                                                             \
  template <>                                                                                                   \
  void logcumsumexp_backward<T>(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, \
                                index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {             \
    launch(ComplexBackwardIO<T>{x, out, out_grad, x_grad}, outer, n, inner, exclusive, !reverse, stream);      \
  }
PE_DEFINE_COMPLEX_LAUNCHERS(complex<float>)
PE_DEFINE_COMPLEX_LAUNCHERS(complex<double>)
#undef PE_DEFINE_COMPLEX_LAUNCHERS

}  // namespace paddle_ext::gpu
