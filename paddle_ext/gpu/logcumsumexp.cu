// CUDA logcumsumexp: a real scan, forward and backward through the same two kernels.
//   inner == 1 (scanned axis contiguous): one block per row, cub::BlockScan over tiles with a
//     log-add-exp operator and a running carry between tiles;
//   inner  > 1 (strided axis): one thread per column, walking the axis; neighbouring threads read
//     neighbouring addresses, so every step is coalesced, and no transpose buffer is needed.
// The per-element math lives in paddle_ext/logcumsumexp.h and log_math.h, shared with the CPU.
#include <cub/block/block_scan.cuh>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/logcumsumexp.h"

namespace paddle_ext {
namespace gpu {
namespace {

template <typename A>
struct LogAddExpOp {
  __device__ A operator()(A a, A b) const { return log_add_exp(a, b); }
};

// Backward scan element: the positive and negative halves of log(g) - out, scanned independently.
template <typename A>
struct SignedLog {
  A pos, neg;
};
template <typename A>
struct SignedLogAddExpOp {
  __device__ SignedLog<A> operator()(const SignedLog<A>& a, const SignedLog<A>& b) const {
    return {log_add_exp(a.pos, b.pos), log_add_exp(a.neg, b.neg)};
  }
};

// Forward: element i contributes x[i] and receives out[i].
template <typename T, typename A>
struct ForwardIO {
  using Value = A;
  using Op = LogAddExpOp<A>;
  const T* x;
  T* out;
  __device__ static Value identity() { return neg_inf<A>(); }
  __device__ Value read(index_t i) const { return static_cast<A>(load(x[i])); }
  __device__ void write(index_t i, const Value& scanned) const { out[i] = store<T>(scanned); }
};

// Backward: element i contributes log|g[i]| - out[i] and receives the grad of x[i].
template <typename T, typename A>
struct BackwardIO {
  using Value = SignedLog<A>;
  using Op = SignedLogAddExpOp<A>;
  const T *x, *out, *out_grad;
  T* x_grad;
  __device__ static Value identity() { return {neg_inf<A>(), neg_inf<A>()}; }
  __device__ Value read(index_t i) const {
    A term;
    bool negative;
    Value v = identity();
    if (logcumsumexp_grad_term<A>(static_cast<A>(load(out_grad[i])), static_cast<A>(load(out[i])), &term,
                                  &negative)) {
      (negative ? v.neg : v.pos) = term;
    }
    return v;
  }
  __device__ void write(index_t i, const Value& s) const {
    x_grad[i] = store<T>(logcumsumexp_grad_value<A>(static_cast<A>(load(x[i])), s.pos, s.neg));
  }
};

constexpr int kRowThreads = 256;
constexpr int kItems = 4;

// One block scans one row of n contiguous elements (several rows by grid stride).
template <typename IO>
__global__ void __launch_bounds__(kRowThreads) scan_rows_kernel(IO io, index_t rows, index_t n, bool exclusive,
                                                                 bool reverse) {
  using V = typename IO::Value;
  using BlockScan = cub::BlockScan<V, kRowThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  __shared__ V carry_shared;
  const typename IO::Op op;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const index_t base = row * n;
    V carry = IO::identity();
    for (index_t tile = 0; tile < n; tile += (index_t)kRowThreads * kItems) {
      V items[kItems];
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        const index_t pos = reverse ? n - 1 - s : s;
        items[k] = s < n ? io.read(base + pos) : IO::identity();
      }
      V tile_total;
      if (exclusive) {
        BlockScan(temp).ExclusiveScan(items, items, IO::identity(), op, tile_total);
      } else {
        BlockScan(temp).InclusiveScan(items, items, op, tile_total);
      }
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < n) io.write(base + (reverse ? n - 1 - s : s), op(carry, items[k]));
      }
      if (threadIdx.x == 0) carry_shared = op(carry, tile_total);
      __syncthreads();  // also guards temp before the next tile reuses it
      carry = carry_shared;
      __syncthreads();
    }
  }
}

// One thread per (outer, column) line of a strided axis.
template <typename IO>
__global__ void scan_columns_kernel(IO io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse) {
  using V = typename IO::Value;
  const typename IO::Op op;
  const index_t lines = outer * inner;
  for (index_t line = blockIdx.x * (index_t)blockDim.x + threadIdx.x; line < lines;
       line += (index_t)gridDim.x * blockDim.x) {
    const index_t o = line / inner, c = line % inner;
    const index_t base = o * n * inner + c;
    V acc = IO::identity();
    for (index_t s = 0; s < n; ++s) {
      const index_t i = base + (reverse ? n - 1 - s : s) * inner;
      const V v = io.read(i);
      if (exclusive) {
        io.write(i, acc);
        acc = op(acc, v);
      } else {
        acc = op(acc, v);
        io.write(i, acc);
      }
    }
  }
}

template <typename IO>
void launch_scan(const IO& io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse,
                 cudaStream_t stream, const char* what) {
  if (outer == 0 || n == 0 || inner == 0) return;
  if (inner == 1) {
    scan_rows_kernel<IO><<<grid_size(outer, 1), kRowThreads, 0, stream>>>(io, outer, n, exclusive, reverse);
  } else {
    constexpr int kThreads = 256;
    scan_columns_kernel<IO><<<grid_size(outer * inner, kThreads), kThreads, 0, stream>>>(io, outer, n, inner,
                                                                                          exclusive, reverse);
  }
  check_launch(what);
}

}  // namespace

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  launch_scan(ForwardIO<T, A>{x, out}, outer, n, inner, exclusive, reverse, stream, "logcumsumexp");
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                           index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  // The grad of x[j] gathers the outputs j fed: the same scan, run in the opposite direction.
  launch_scan(BackwardIO<T, A>{x, out, out_grad, x_grad}, outer, n, inner, exclusive, !reverse, stream,
              "logcumsumexp_grad");
}

#define PE_INSTANTIATE(T)                                                                                  \
  template void logcumsumexp_forward<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t); \
  template void logcumsumexp_backward<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool,  \
                                         bool, cudaStream_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
