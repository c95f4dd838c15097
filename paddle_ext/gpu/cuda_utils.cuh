// Small CUDA helpers shared by the kernels in gpu/ (no Paddle header here, by design).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "paddle_ext/common.h"
#include "paddle_ext/memory.h"

// The types the kernels of the float32-or-wider ops are built for (their Python API casts 16-bit inputs).
#define PE_FOR_FLOAT32_64(M) M(float) M(double)

// The body of a spin-wait on another warp or block: nothing on a GPU; the emulated runtime of the GPU suite
// (docs/gpu_emulation.md) defines it to let the other threads run.
#ifndef PE_SPIN_YIELD
#define PE_SPIN_YIELD() \
  do {                  \
  } while (0)
#endif

namespace paddle_ext {
namespace gpu {

// Launch errors become C++ exceptions; the binding turns them into Python errors.
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline unsigned grid_size(index_t work, int block, index_t max_blocks = 65535LL * 8) {
  const index_t blocks = (work + block - 1) / block;
  return (unsigned)std::max<index_t>(1, std::min(blocks, max_blocks));
}

// A small stream-ordered scratch buffer (the launchers get no allocator): cudaMallocAsync from the
// device's default pool, freed in stream order when the launcher returns. No device memory: OutOfMemory
// (memory.h) with the bytes asked for, which the binding reports as a MemoryError; another error: a
// runtime_error. Either way the error is cleared first, so that no later launch check reads it.
template <typename V>
struct DeviceScratch {
  V* ptr = nullptr;
  cudaStream_t stream;
  DeviceScratch(index_t count, cudaStream_t s) : stream(s) {
    const size_t bytes = sizeof(V) * std::max<index_t>(count, 1);
    const cudaError_t err = cudaMallocAsync((void**)&ptr, bytes, stream);
    if (err == cudaSuccess) return;
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) throw OutOfMemory(bytes);
    throw std::runtime_error(std::string("scratch allocation: ") + cudaGetErrorString(err));
  }
  ~DeviceScratch() { cudaFreeAsync(ptr, stream); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

constexpr int kWarp = 32;

// Warp reductions, the result in every lane; a NaN never wins warp_max.
template <typename V>
__device__ inline V warp_max(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const V w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
template <typename V>
__device__ inline V warp_sum(V v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// (max, log_sum) of a row x[0, k) that one warp reads (lane j reads x[j], x[j + 32], ...), in every lane:
// max in V (double, or the row's accumulation type), NaN when any element is NaN, -inf for a row of only
// -inf or an empty one; when max is finite, log_sum = log(sum of exp(x - max)), each term in V and the sum
// in double (float rows too, as the CPU kernels). A max that is not finite comes back with log_sum 0 and is
// left to the caller's rule.
template <typename V>
struct RowLse {
  V max, log_sum;
};
template <typename V, typename T>
__device__ inline RowLse<V> warp_row_lse(const T* x, index_t k, int lane) {
  V max = neg_inf<V>();
  int nan = 0;
  for (index_t j = lane; j < k; j += kWarp) {
    const V v = load(x[j]);
    max = v > max ? v : max;
    nan |= v != v;
  }
  max = warp_max(max);
  if (__any_sync(0xffffffffu, nan)) max = V(NAN);
  if (!(max - max == V(0))) return {max, V(0)};
  double sum = 0;
  for (index_t j = lane; j < k; j += kWarp) sum += std::exp(static_cast<V>(load(x[j])) - max);
  return {max, static_cast<V>(std::log(warp_sum(sum)))};
}

}  // namespace gpu
}  // namespace paddle_ext
