// CUDA logcumsumexp along contiguous rows (inner == 1): one block per row (forward and backward, the tiles of
// forward_row_span / backward_row_span), or one warp per row for many rows up to kWarpRowMax long.
#include "launch.cuh"
#include "scan.cuh"
#include "tile_io.cuh"

namespace paddle_ext::gpu {
namespace {

template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_rows_kernel(const T* x, T* out, index_t rows, index_t n,
                                                                  bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ A carry_shared;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    forward_row_span<T, A>(x, out, row * n, n, 0, n, neg_inf<A>(), exclusive, reverse, temp, &stats_shared,
                           &carry_shared);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_rows_warp_kernel(const T* x, T* out, index_t rows, index_t n,
                                                                       bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  constexpr int kWarps = kRowThreads / 32;
  const LogAddExpOp<A> op;
  const int lane = threadIdx.x & 31;
  for (index_t row = (index_t)blockIdx.x * kWarps + threadIdx.x / 32; row < rows; row += (index_t)gridDim.x * kWarps) {
    const index_t base = row * n;
    A carry = neg_inf<A>();  // warp-uniform
    A ahead[kWarpItems];
    load_group(x, base, n, (index_t)lane * kWarpItems, reverse, ahead);
    for (index_t step = 0; step < n; step += 32 * kWarpItems) {
      const index_t s = step + (index_t)lane * kWarpItems;
      A v[kWarpItems], o[kWarpItems];
#pragma unroll
      for (int k = 0; k < kWarpItems; ++k) v[k] = ahead[k];
      if (step + 32 * kWarpItems < n) load_group(x, base, n, s + 32 * kWarpItems, reverse, ahead);
      A mx = neg_inf<A>(), mn = -neg_inf<A>();
      bool bad = false;
#pragma unroll
      for (int k = 0; k < kWarpItems; ++k) {
        if (nan_or_pos_inf(v[k])) {
          bad = true;
        } else if (v[k] != neg_inf<A>()) {
          mx = v[k] > mx ? v[k] : mx;
          mn = v[k] < mn ? v[k] : mn;
        }
      }
      mx = warp_reduce(mx, MaxOp<A>());
      mn = warp_reduce(mn, MinOp<A>());
      bad = __any_sync(0xffffffffu, bad);
      const A M = mx > carry ? mx : carry;
      const A low = carry == neg_inf<A>() || mn < carry ? mn : carry;
      const bool fast = !bad && !nan_or_pos_inf(carry) && (M == neg_inf<A>() || M - low <= linear_range<A>());
      A next;
      if (fast && M == neg_inf<A>()) {  // nothing but -inf so far
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = neg_inf<A>();
        next = carry;
      } else if (fast) {
        A in_lane[kWarpItems], run = A(0);  // prefix sums of exp(v - M) within the lane
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) {
          const A before = run;
          run += std::exp(v[k] - M);  // -inf gives 0
          in_lane[k] = exclusive ? before : run;
        }
        const A lanes_incl = warp_inclusive_scan(run, PlusOp<A>());
        const A lanes_before = warp_shift_up(lanes_incl, A(0));
        const A c = carry == neg_inf<A>() ? A(0) : std::exp(carry - M);
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = M + std::log(c + lanes_before + in_lane[k]);  // log 0 = -inf
        next = M + std::log(c + __shfl_sync(0xffffffffu, lanes_incl, 31));
      } else {  // exact: the log-add-exp scan
        A in_lane[kWarpItems], run = neg_inf<A>();
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) {
          const A before = run;
          run = op(run, v[k]);
          in_lane[k] = exclusive ? before : run;
        }
        const A lanes_incl = warp_inclusive_scan(run, op);
        const A lanes_before = warp_shift_up(lanes_incl, neg_inf<A>());
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = op(carry, op(lanes_before, in_lane[k]));
        next = op(carry, __shfl_sync(0xffffffffu, lanes_incl, 31));
      }
      store_group(out, base, n, s, reverse, o);
      carry = next;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_rows_kernel(const T* x, const T* out, const T* out_grad,
                                                                   T* x_grad, index_t rows, index_t n,
                                                                   bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ SignedLog<A> carry_shared;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    backward_row_span<T, A>(x, out, out_grad, x_grad, row * n, n, 0, n, BackwardIO<T, A>::identity(), exclusive,
                            reverse, temp, &stats_shared, &carry_shared);
  }
}

}  // namespace

namespace lse {

template <typename T>
void launch_forward_rows(const T* x, T* out, index_t rows, index_t n, bool exclusive, bool reverse, cudaStream_t stream) {
  forward_rows_kernel<T><<<grid_size(rows, 1), kRowThreads, 0, stream>>>(x, out, rows, n, exclusive, reverse);
  check_launch("logcumsumexp");
}

template <typename T>
void launch_forward_rows_warp(const T* x, T* out, index_t rows, index_t n, bool exclusive, bool reverse,
                              cudaStream_t stream) {
  forward_rows_warp_kernel<T><<<grid_size(rows, kRowThreads / 32), kRowThreads, 0, stream>>>(x, out, rows, n,
                                                                                           exclusive, reverse);
  check_launch("logcumsumexp");
}

template <typename T>
void launch_backward_rows(const T* x, const T* out, const T* out_grad, T* x_grad, index_t rows, index_t n,
                          bool exclusive, bool reverse, cudaStream_t stream) {
  backward_rows_kernel<T><<<grid_size(rows, 1), kRowThreads, 0, stream>>>(x, out, out_grad, x_grad, rows, n,
                                                                           exclusive, reverse);
  check_launch("logcumsumexp_grad");
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void launch_forward_rows<T>(const T*, T*, index_t, index_t, bool, bool, cudaStream_t);             \
  template void launch_forward_rows_warp<T>(const T*, T*, index_t, index_t, bool, bool, cudaStream_t);        \
  template void launch_backward_rows<T>(const T*, const T*, const T*, T*, index_t, index_t, bool, bool, cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace lse
}  // namespace paddle_ext::gpu
