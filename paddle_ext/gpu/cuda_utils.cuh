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

}  // namespace gpu
}  // namespace paddle_ext
