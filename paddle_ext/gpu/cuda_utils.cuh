// Small CUDA helpers shared by the kernels in gpu/ (no Paddle header here, by design).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "paddle_ext/common.h"

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
// device's default pool, freed in stream order when the launcher returns.
template <typename V>
struct DeviceScratch {
  V* ptr = nullptr;
  cudaStream_t stream;
  DeviceScratch(index_t count, cudaStream_t s) : stream(s) {
    const cudaError_t err = cudaMallocAsync((void**)&ptr, sizeof(V) * std::max<index_t>(count, 1), stream);
    if (err != cudaSuccess) throw std::runtime_error(std::string("scratch allocation: ") + cudaGetErrorString(err));
  }
  ~DeviceScratch() { cudaFreeAsync(ptr, stream); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

}  // namespace gpu
}  // namespace paddle_ext
