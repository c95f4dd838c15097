// Small CUDA helpers shared by the kernels in gpu/ (no Paddle header here, by design).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "paddle_ext/common.h"
#include "paddle_ext/memory.h"

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

}  // namespace gpu
}  // namespace paddle_ext
