// cub::BlockReduce for the emulated CUDA runtime: thread 0 folds the block's values after one barrier; the
// result is valid in thread 0 only, and reusing the temp storage needs a barrier of the caller's (as with cub).
#pragma once

#include <cuda_runtime.h>

namespace cub {

template <typename T, int kThreads>
class BlockReduce {
 public:
  struct TempStorage {
    T partial[kThreads];
  };
  __device__ explicit BlockReduce(TempStorage& temp) : temp_(temp) {}

  template <typename Op>
  __device__ T Reduce(T in, Op op) {
    return Reduce(in, op, kThreads);
  }
  template <typename Op>
  __device__ T Reduce(T in, Op op, int valid) {
    const int t = threadIdx.x;
    temp_.partial[t] = in;
    __syncthreads();
    if (t != 0) return in;
    T acc = temp_.partial[0];
    for (int i = 1; i < valid; ++i) acc = op(acc, temp_.partial[i]);
    return acc;
  }
  __device__ T Sum(T in) {
    return Reduce(in, [](const T& a, const T& b) { return a + b; });
  }

 private:
  TempStorage& temp_;
};

}  // namespace cub
