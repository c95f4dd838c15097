// CUDA logcumsumexp on a few long contiguous rows: each row cut into chunks of kChunk positions, one block
// each. A first kernel writes each chunk's log-sum, the second scans each chunk from the log-sum of the
// chunks before it (forward; the backward the same with signed sums).
#include "launch.cuh"
#include "scan.cuh"

namespace paddle_ext::gpu {
namespace {

// Long rows, pass 1: the log-sum of each chunk (LogSumAcc per thread, then a log-add-exp block reduce).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_chunk_sums_kernel(const T* x,
                                                                        typename LogcumsumexpAcc<T>::type* sums,
                                                                        index_t rows, index_t n, index_t chunks) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, s0 = (b % chunks) * kChunk, s1 = std::min(n, s0 + kChunk);
    LogSumAcc<A> acc;  // the direction does not change a chunk's sum: read it forwards
    for (index_t s = s0 + threadIdx.x; s < s1; s += kRowThreads) acc.add(static_cast<A>(load(x[row * n + s])));
    const A total = cub::BlockReduce<A, kRowThreads>(temp.log_reduce).Reduce(acc.value(), LogAddExpOp<A>());
    if (threadIdx.x == 0) sums[b] = total;
    __syncthreads();  // temp is reused by the next chunk
  }
}

// Long rows, pass 2: block b scans chunk b % chunks of its row (in scan order) from the chunks before it.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_chunks_kernel(const T* x, T* out,
                                                                    const typename LogcumsumexpAcc<T>::type* sums,
                                                                    index_t rows, index_t n, index_t chunks,
                                                                    bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ A carry_shared;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, q = b % chunks;
    index_t s0, s1;
    chunk_positions(q, chunks, n, reverse, &s0, &s1);
    const A carry = chunk_carry(sums, row, q, chunks, reverse, neg_inf<A>(), LogAddExpOp<A>());
    forward_row_span<T, A>(x, out, row * n, n, s0, s1, carry, exclusive, reverse, temp, &stats_shared,
                           &carry_shared);
    __syncthreads();
  }
}

// Long rows of the backward, pass 1: each chunk's (positive, negative) log sums of the grad terms.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_chunk_sums_kernel(
    const T* out, const T* out_grad, SignedLog<typename LogcumsumexpAcc<T>::type>* sums, index_t rows, index_t n,
    index_t chunks) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, s0 = (b % chunks) * kChunk, s1 = std::min(n, s0 + kChunk);
    LogSumAcc<A> pos, neg;
    for (index_t s = s0 + threadIdx.x; s < s1; s += kRowThreads) {
      A term;
      bool negative;
      const index_t i = row * n + s;
      if (logcumsumexp_grad_term<A>(static_cast<A>(load(out_grad[i])), static_cast<A>(load(out[i])), &term,
                                    &negative)) {
        (negative ? neg : pos).add(term);
      }
    }
    const SignedLog<A> total = cub::BlockReduce<SignedLog<A>, kRowThreads>(temp.signed_reduce)
                                   .Reduce(SignedLog<A>{pos.value(), neg.value()}, SignedLogAddExpOp<A>());
    if (threadIdx.x == 0) sums[b] = total;
    __syncthreads();
  }
}

// Long rows of the backward, pass 2 (chunk order as in forward_chunks_kernel).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_chunks_kernel(
    const T* x, const T* out, const T* out_grad, T* x_grad, const SignedLog<typename LogcumsumexpAcc<T>::type>* sums,
    index_t rows, index_t n, index_t chunks, bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ SignedLog<A> carry_shared;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, q = b % chunks;
    index_t s0, s1;
    chunk_positions(q, chunks, n, reverse, &s0, &s1);
    const SignedLog<A> carry =
        chunk_carry(sums, row, q, chunks, reverse, BackwardIO<T, A>::identity(), SignedLogAddExpOp<A>());
    backward_row_span<T, A>(x, out, out_grad, x_grad, row * n, n, s0, s1, carry, exclusive, reverse, temp,
                            &stats_shared, &carry_shared);
    __syncthreads();
  }
}

}  // namespace

namespace lse {

template <typename T>
void launch_forward_chunks(const T* x, T* out, index_t outer, index_t n, index_t chunks, bool exclusive, bool reverse,
                           cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  DeviceScratch<A> sums(outer * chunks, stream);
  forward_chunk_sums_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(x, sums.ptr, outer, n,
                                                                                        chunks);
  forward_chunks_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(x, out, sums.ptr, outer, n,
                                                                                    chunks, exclusive, reverse);
  check_launch("logcumsumexp");
}

template <typename T>
void launch_backward_chunks(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                            index_t chunks, bool exclusive, bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  DeviceScratch<SignedLog<A>> sums(outer * chunks, stream);
  backward_chunk_sums_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(out, out_grad, sums.ptr,
                                                                                         outer, n, chunks);
  backward_chunks_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(
      x, out, out_grad, x_grad, sums.ptr, outer, n, chunks, exclusive, reverse);
  check_launch("logcumsumexp_grad");
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void launch_forward_chunks<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t);  \
  template void launch_backward_chunks<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool, bool, \
                                          cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace lse
}  // namespace paddle_ext::gpu
