// CUDA adaptive_log_softmax: one block per row (grid-stride over rows). Each row is reduced with cub
// block reductions (max, then sum of exp — in double for float rows, as on the CPU) and written in
// one coalesced pass; the per-element math lives in paddle_ext/adaptive_log_softmax.h, shared with cpu/.
// A target out of [0, K) yields NaN (out) / no target term (grad): checking it would cost a host sync.
#include <cub/block/block_reduce.cuh>

#include "paddle_ext/adaptive_log_softmax.h"
#include "paddle_ext/gpu/cuda_utils.cuh"

namespace paddle_ext {
namespace gpu {
namespace {

constexpr int kThreads = 256;

template <typename A>
struct SumType {  // float rows sum their exp terms in double, like the CPU kernels
  using type = double;
};

struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a > b ? a : b;
  }
};

// Block-wide sum of v, returned to every thread (the temp storage is reused safely).
template <typename S>
__device__ S block_sum(S v) {
  using Reduce = cub::BlockReduce<S, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ S result;
  const S total = Reduce(storage).Sum(v);
  if (threadIdx.x == 0) result = total;
  __syncthreads();
  const S out = result;
  __syncthreads();
  return out;
}

// lse of one row of K elements, returned to every thread of the block.
template <typename T>
__device__ acc_t<T> block_lse(const T* x, index_t k) {
  using A = acc_t<T>;
  using S = typename SumType<A>::type;
  using Reduce = cub::BlockReduce<A, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ A max_shared;
  __shared__ int nan_shared;
  if (threadIdx.x == 0) nan_shared = 0;
  A max = neg_inf<A>();
  bool nan = false;
  for (index_t j = threadIdx.x; j < k; j += blockDim.x) {
    const A v = load(x[j]);
    max = v > max ? v : max;
    nan |= v != v;
  }
  __syncthreads();
  if (nan) nan_shared = 1;
  const A row_max = Reduce(storage).Reduce(max, MaxOp());
  if (threadIdx.x == 0) max_shared = row_max;
  __syncthreads();
  const A m = max_shared;
  const bool row_nan = nan_shared != 0;
  __syncthreads();
  if (row_nan) return A(NAN);
  if (m == neg_inf<A>() || m == -neg_inf<A>()) return als_lse<A>(m, A(0));  // -inf, or NaN for +inf
  S sum = 0;
  for (index_t j = threadIdx.x; j < k; j += blockDim.x) sum += als_exp_term<A>(load(x[j]), m);
  return als_lse<A>(m, static_cast<A>(block_sum<S>(sum)));
}

template <typename T>
__global__ void target_forward_kernel(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m,
                                      index_t k) {
  using A = acc_t<T>;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    const A l = block_lse(x, k);
    if (threadIdx.x == 0) {
      const int64_t t = target[r];
      lse[r] = l;
      out[r] = store<T>(als_target_ok(t, k) ? static_cast<A>(load(x[t])) - l : A(NAN));
    }
  }
}

template <typename T>
__global__ void target_backward_kernel(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                                       T* logits_grad, index_t m, index_t k) {
  using A = acc_t<T>;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    T* dx = logits_grad + r * k;
    const A l = lse[r], g = load(out_grad[r]);
    const int64_t t = target[r];
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) {
      dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, j == t));
    }
  }
}

template <typename T>
__global__ void full_forward_kernel(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k) {
  using A = acc_t<T>;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    T* y = out + r * k;
    const A l = block_lse(x, k), off = load(offset[r]);
    if (threadIdx.x == 0) lse[r] = l;
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) y[j] = store<T>(als_full_value<A>(load(x[j]), l, off));
  }
}

template <typename T>
__global__ void full_backward_kernel(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad,
                                     T* offset_grad, index_t m, index_t k) {
  using A = acc_t<T>;
  using S = typename SumType<A>::type;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    const T* g = out_grad + r * k;
    T* dx = logits_grad + r * k;
    S partial = 0;
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) partial += load(g[j]);
    const A s = static_cast<A>(block_sum<S>(partial));
    const A l = lse[r];
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) dx[j] = store<T>(als_full_grad<A>(load(x[j]), l, load(g[j]), s));
    if (threadIdx.x == 0) offset_grad[r] = store<T>(s);
  }
}

inline unsigned row_blocks(index_t m) { return (unsigned)std::max<index_t>(1, std::min<index_t>(m, 65535LL * 16)); }

}  // namespace

template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k,
                        cudaStream_t stream) {
  if (m == 0) return;
  target_forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, target, out, lse, m, k);
  check_launch("adaptive_log_softmax_target");
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k, cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  target_backward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, target, lse, out_grad, logits_grad, m, k);
  check_launch("adaptive_log_softmax_target_grad");
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k,
                      cudaStream_t stream) {
  if (m == 0) return;
  full_forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, offset, out, lse, m, k);
  check_launch("adaptive_log_softmax_full");
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k, cudaStream_t stream) {
  if (m == 0) return;
  full_backward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, lse, out_grad, logits_grad, offset_grad, m,
                                                                  k);
  check_launch("adaptive_log_softmax_full_grad");
}

#define PE_INSTANTIATE(T)                                                                                          \
  template void als_target_forward<T>(const T*, const int64_t*, T*, acc_t<T>*, index_t, index_t, cudaStream_t);  \
  template void als_target_backward<T>(const T*, const int64_t*, const acc_t<T>*, const T*, T*, index_t, index_t, \
                                       cudaStream_t);                                                             \
  template void als_full_forward<T>(const T*, const T*, T*, acc_t<T>*, index_t, index_t, cudaStream_t);          \
  template void als_full_backward<T>(const T*, const acc_t<T>*, const T*, T*, T*, index_t, index_t, cudaStream_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
