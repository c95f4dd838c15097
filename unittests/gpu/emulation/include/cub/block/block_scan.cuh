// cub::BlockScan for the emulated CUDA runtime, laid out as cub's warp-scans variant: each thread folds its
// items, each warp scans the thread totals with shuffles, the last lane of each warp stores the warp's total,
// and after one barrier every thread folds the totals of the warps before its own. As with cub, reusing the temp
// storage afterwards needs a barrier of the caller's (the next scan's stores would race with these loads).
#pragma once

#include <cuda_runtime.h>

namespace cub {

template <typename T, int kThreads>
class BlockScan {
 public:
  static_assert(kThreads % 32 == 0, "whole warps");
  struct TempStorage {
    T warp_total[kThreads / 32];
  };
  __device__ explicit BlockScan(TempStorage& temp) : temp_(temp) {}

  __device__ void InclusiveSum(T in, T& out, T& total) { InclusiveScan(in, out, Sum(), total); }
  __device__ void ExclusiveSum(T in, T& out, T& total) { ExclusiveScan(in, out, T(0), Sum(), total); }
  template <int kItems>
  __device__ void InclusiveSum(T (&in)[kItems], T (&out)[kItems], T& total) {
    InclusiveScan(in, out, Sum(), total);
  }
  template <int kItems>
  __device__ void ExclusiveSum(T (&in)[kItems], T (&out)[kItems], T& total) {
    ExclusiveScan(in, out, T(0), Sum(), total);
  }

  template <typename Op>
  __device__ void InclusiveScan(T in, T& out, Op op, T& total) {
    T items[1] = {in};
    InclusiveScan(items, items, op, total);
    out = items[0];
  }
  template <typename Op>
  __device__ void ExclusiveScan(T in, T& out, T init, Op op, T& total) {
    T items[1] = {in};
    ExclusiveScan(items, items, init, op, total);
    out = items[0];
  }
  // Blocked arrangement: thread i holds items [i * kItems, (i + 1) * kItems).
  template <int kItems, typename Op>
  __device__ void InclusiveScan(T (&in)[kItems], T (&out)[kItems], Op op, T& total) {
    T run = in[0];
    for (int k = 1; k < kItems; ++k) run = op(run, in[k]);
    bool first = false;
    const T prefix = thread_prefix(run, op, &first, total);
    T acc = first ? in[0] : op(prefix, in[0]);
    out[0] = acc;
    for (int k = 1; k < kItems; ++k) out[k] = acc = op(acc, in[k]);
  }
  template <int kItems, typename Op>
  __device__ void ExclusiveScan(T (&in)[kItems], T (&out)[kItems], T init, Op op, T& total) {
    T run = in[0];
    for (int k = 1; k < kItems; ++k) run = op(run, in[k]);
    bool first = false;
    const T prefix = thread_prefix(run, op, &first, total);
    T acc = first ? init : op(init, prefix);
    for (int k = 0; k < kItems; ++k) {
      const T v = in[k];
      out[k] = acc;
      acc = op(acc, v);
    }
  }

 private:
  struct Sum {
    __device__ T operator()(const T& a, const T& b) const { return a + b; }
  };
  // The op-fold of the lower threads' totals (first: this is thread 0, which has none) and of all of them.
  template <typename Op>
  __device__ T thread_prefix(const T& mine, Op op, bool* first, T& total) {
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    T inclusive = mine;
    for (int d = 1; d < 32; d *= 2) {
      const T lower = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive = op(lower, inclusive);
    }
    const T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 31) temp_.warp_total[warp] = inclusive;
    __syncthreads();
    T prefix = temp_.warp_total[0];
    total = temp_.warp_total[0];
    for (int w = 1; w < kThreads / 32; ++w) {
      if (w == warp) prefix = total;
      total = op(total, temp_.warp_total[w]);
    }
    *first = t == 0;
    if (warp == 0) return exclusive;
    return lane == 0 ? prefix : op(prefix, exclusive);
  }
  TempStorage& temp_;
};

}  // namespace cub
