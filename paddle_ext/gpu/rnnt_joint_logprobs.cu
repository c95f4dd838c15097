// CUDA rnnt_joint_logprobs: one warp per row of the joiner logits (rows are short: the vocabulary), 8 rows
// per block. A warp reduces its row to lse (max, then sum of exp in double for float rows, as on the CPU),
// lane 0 writes the two log-probabilities; the backward writes the row's grad in one coalesced pass. The
// per-element math and indexing are shared with cpu/ (rnnt_joint_logprobs.h, adaptive_log_softmax.h).
// The pruning gather: one thread per output element; its grad adds with atomics (in float32 for the
// half types, converted at the end). Contexts or indices out of range are skipped, a symbol out of range
// gives a NaN px (no host sync).
#include <limits>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/rnnt_joint_logprobs.h"

namespace paddle_ext {
namespace gpu {
namespace {

constexpr int kRowsPerBlock = 8;

// lse parts (max, log_sum) of one row, in every lane of the warp (rnnt_joint_logprobs.h; the rules of
// adaptive_log_softmax.h for NaN, +inf and all -inf: that lse in max, log_sum 0).
template <typename T>
__device__ RowLse<acc_t<T>> warp_lse(const T* x, index_t k, int lane) {
  using A = acc_t<T>;
  RowLse<A> l = warp_row_lse<A>(x, k, lane);
  if (l.max == neg_inf<A>() || l.max == -neg_inf<A>()) l.max = als_lse<A>(l.max, A(0));  // NaN stays NaN
  return l;
}

template <typename T>
__global__ void joint_forward_kernel(const T* logits, const int64_t* symbols, const int64_t* ranges, T* px, T* py,
                                     acc_t<T>* lse, JointShape d) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % kWarp;
  const index_t rows = d.B * d.T * d.R;
  const index_t stride = (index_t)gridDim.x * kRowsPerBlock;
  for (index_t row = (index_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp; row < rows; row += stride) {
    const T* x = logits + row * d.C;
    const RowLse<A> l = warp_lse(x, d.C, lane);
    if (lane != 0) continue;
    lse[2 * row] = l.max;
    lse[2 * row + 1] = l.log_sum;
    const index_t r = row % d.R, f = row / d.R, b = f / d.T, t = f % d.T;
    const int64_t s = joint_context(ranges, row, r);
    if (!joint_context_ok(s, d.S)) continue;
    py[joint_py_at(d, b, s, t)] = store<T>(static_cast<A>(joint_logprob<double>(load(x[d.termination]), l.max, l.log_sum)));
    if (s < d.S) {  // a symbol out of [0, C) gives NaN (the CPU binding rejects it)
      const int64_t sym = symbols[b * d.S + s];
      const A v = als_target_ok(sym, d.C) ? static_cast<A>(joint_logprob<double>(load(x[sym]), l.max, l.log_sum))
                                          : A(NAN);
      px[joint_px_at(d, b, s, t)] = store<T>(v);
    }
  }
}

template <typename T>
__global__ void joint_backward_kernel(const T* logits, const int64_t* symbols, const int64_t* ranges,
                                      const acc_t<T>* lse, const T* px_grad, const T* py_grad, const T* scale,
                                      T* logits_grad, JointShape d) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % kWarp;
  const index_t rows = d.B * d.T * d.R;
  const index_t stride = (index_t)gridDim.x * kRowsPerBlock;
  for (index_t row = (index_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp; row < rows; row += stride) {
    const index_t r = row % d.R, f = row / d.R, b = f / d.T, t = f % d.T;
    const int64_t s = joint_context(ranges, row, r);
    const bool ok = joint_context_ok(s, d.S), has_symbol = ok && s < d.S;
    const A gy = ok ? static_cast<A>(load(py_grad[joint_py_at(d, b, s, t)])) : A(0);
    const A gx = has_symbol ? static_cast<A>(load(px_grad[joint_px_at(d, b, s, t)])) : A(0);
    const int64_t sym = has_symbol ? symbols[b * d.S + s] : -1, blank = ok ? d.termination : -1;
    const A g = gx + gy, m = lse[2 * row], ls = lse[2 * row + 1];
    const bool clamped = clamp_on(d.clamp);
    const A bound = static_cast<A>(d.clamp), item = clamped ? static_cast<A>(load(scale[b])) : A(1);
    const T* x = logits + row * d.C;
    T* dx = logits_grad + row * d.C;
    for (index_t c = lane; c < d.C; c += kWarp) {
      const A own = (c == sym ? gx : A(0)) + (c == blank ? gy : A(0));
      const A v = joint_grad<A>(load(x[c]), m, ls, own, g);
      dx[c] = store<T>(clamped ? clamped_grad(v, bound, item) : v);
    }
  }
}

template <typename T>
__global__ void gather_kernel(const T* x, const int64_t* index, T* out, index_t B, index_t N, index_t M, index_t D) {
  const index_t total = B * M * D;
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
    const index_t row = i / D, c = i % D, b = row / M;
    const int64_t n = index[row];
    out[i] = n >= 0 && n < N ? x[(b * N + n) * D + c] : store<T>(acc_t<T>(NAN));
  }
}

__device__ inline void atomic_add(float* a, float v) { atomicAdd(a, v); }
__device__ inline void atomic_add(double* a, double v) { atomicAdd(a, v); }

template <typename A, typename T>
__global__ void gather_backward_kernel(const int64_t* index, const T* out_grad, A* acc, index_t B, index_t N,
                                       index_t M, index_t D) {
  const index_t total = B * M * D;
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
    const index_t row = i / D, c = i % D, b = row / M;
    const int64_t n = index[row];
    if (n >= 0 && n < N) atomic_add(acc + (b * N + n) * D + c, static_cast<A>(load(out_grad[i])));
  }
}

template <typename A, typename T>
__global__ void convert_kernel(const A* acc, T* out, index_t n) {
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x) {
    out[i] = store<T>(acc[i]);
  }
}

template <typename T>
__global__ void fill_kernel(T* out, T value, index_t n) {
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x) {
    out[i] = value;
  }
}

inline unsigned row_blocks(index_t rows) { return grid_size(rows, kRowsPerBlock, 65535LL * 16); }

}  // namespace

template <typename T>
void rnnt_joint_forward(const T* logits, const int64_t* symbols, const int64_t* ranges, T* px, T* py, acc_t<T>* lse,
                        const JointShape& d, cudaStream_t stream) {
  if (ranges) {  // cells outside every frame's range stay -inf
    const T minus_inf = store<T>(-std::numeric_limits<acc_t<T>>::infinity());
    const index_t nx = d.B * d.S * d.T, ny = d.B * (d.S + 1) * d.T;
    if (nx) fill_kernel<T><<<grid_size(nx, 256), 256, 0, stream>>>(px, minus_inf, nx);
    if (ny) fill_kernel<T><<<grid_size(ny, 256), 256, 0, stream>>>(py, minus_inf, ny);
  }
  const index_t rows = d.B * d.T * d.R;
  if (rows == 0 || d.C == 0) return;
  joint_forward_kernel<T><<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(logits, symbols, ranges, px, py,
                                                                                    lse, d);
  check_launch("rnnt_joint_logprobs");
}

template <typename T>
void rnnt_joint_backward(const T* logits, const int64_t* symbols, const int64_t* ranges, const acc_t<T>* lse,
                         const T* px_grad, const T* py_grad, const T* scale, T* logits_grad, const JointShape& d,
                         cudaStream_t stream) {
  const index_t rows = d.B * d.T * d.R;
  if (rows == 0 || d.C == 0) return;
  joint_backward_kernel<T><<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(
      logits, symbols, ranges, lse, px_grad, py_grad, scale, logits_grad, d);
  check_launch("rnnt_joint_logprobs_grad");
}

template <typename T>
void rnnt_prune_gather(const T* x, const int64_t* index, T* out, index_t B, index_t N, index_t M, index_t D,
                       cudaStream_t stream) {
  const index_t total = B * M * D;
  if (total == 0) return;
  gather_kernel<T><<<grid_size(total, 256), 256, 0, stream>>>(x, index, out, B, N, M, D);
  check_launch("rnnt_prune_gather");
}

template <typename T>
void rnnt_prune_gather_backward(const int64_t* index, const T* out_grad, T* x_grad, index_t B, index_t N, index_t M,
                                index_t D, cudaStream_t stream) {
  using A = acc_t<T>;
  const index_t n = B * N * D, total = B * M * D;
  if (n == 0) return;
  if constexpr (sizeof(A) == sizeof(T)) {  // float, double: add in place
    cudaMemsetAsync(x_grad, 0, sizeof(T) * n, stream);
    if (total) gather_backward_kernel<A, T><<<grid_size(total, 256), 256, 0, stream>>>(index, out_grad, (A*)x_grad, B, N, M, D);
  } else {  // half types: add in float32, then round once
    DeviceScratch<A> acc(n, stream);
    cudaMemsetAsync(acc.ptr, 0, sizeof(A) * n, stream);
    if (total) gather_backward_kernel<A, T><<<grid_size(total, 256), 256, 0, stream>>>(index, out_grad, acc.ptr, B, N, M, D);
    convert_kernel<A, T><<<grid_size(n, 256), 256, 0, stream>>>(acc.ptr, x_grad, n);
  }
  check_launch("rnnt_prune_gather_grad");
}

#define PE_INSTANTIATE(T)                                                                                          \
  template void rnnt_joint_forward<T>(const T*, const int64_t*, const int64_t*, T*, T*, acc_t<T>*, const JointShape&, \
                                      cudaStream_t);                                                              \
  template void rnnt_joint_backward<T>(const T*, const int64_t*, const int64_t*, const acc_t<T>*, const T*,       \
                                       const T*, const T*, T*, const JointShape&, cudaStream_t);                  \
  template void rnnt_prune_gather<T>(const T*, const int64_t*, T*, index_t, index_t, index_t, index_t,            \
                                     cudaStream_t);                                                               \
  template void rnnt_prune_gather_backward<T>(const int64_t*, const T*, T*, index_t, index_t, index_t, index_t,   \
                                              cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
