// dtype code -> storage type for the C ABI shims; exceptions become a non-zero return.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>

#include "paddle_ext/common.h"

extern "C" int pe_sync_after_launch;  // shim_common.cu

template <typename T>
struct ShimTag {
  using type = T;
};

// Runs a launch, then synchronizes (unless bench_gpu.py turned that off): 0 on success, a CUDA error code,
// or -1 for a C++ exception.
template <typename Body>
int shim_run(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return -1;
  }
  return (int)(pe_sync_after_launch ? cudaDeviceSynchronize() : cudaGetLastError());
}

// Codes shared with gpu_runtime.py: 0 float32, 1 float64, 2 float16, 3 bfloat16, 4 int32, 5 int64 (6 complex64,
// 7 complex128: shim_logcumsumexp.cu).
template <typename Fn>
int shim_dispatch_floating(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return shim_run([&] { fn(ShimTag<float>{}); });
    case 1: return shim_run([&] { fn(ShimTag<double>{}); });
    case 2: return shim_run([&] { fn(ShimTag<paddle_ext::float16_t>{}); });
    case 3: return shim_run([&] { fn(ShimTag<paddle_ext::bfloat16_t>{}); });
    default: return -2;
  }
}

template <typename Fn>
int shim_dispatch_all(int dtype, Fn&& fn) {
  switch (dtype) {
    case 4: return shim_run([&] { fn(ShimTag<int32_t>{}); });
    case 5: return shim_run([&] { fn(ShimTag<int64_t>{}); });
    default: return shim_dispatch_floating(dtype, fn);
  }
}
