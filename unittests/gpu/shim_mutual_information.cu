// C ABI over the mutual_information launchers for unittests/gpu (dtype codes: see gpu_runtime.py;
// only 0 = float32 and 1 = float64: the Python API computes 16-bit types in float32).
#include "paddle_ext/mutual_information.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

template <typename Fn>
static int mi_dispatch(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return shim_run([&] { fn(ShimTag<float>{}); });
    case 1: return shim_run([&] { fn(ShimTag<double>{}); });
    default: return -2;
  }
}

// p is float64 [B, S+1, T+1]; boundary is int64 [B, 4] or null; ans_grad may be null (ones).
extern "C" int pe_mutual_information_forward(int dtype, const void* px, const void* py, const void* boundary, void* p,
                                             void* ans, int64_t B, int64_t S, int64_t T, int modified) {
  return mi_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::mutual_information_forward<V>((const V*)px, (const V*)py, (const int64_t*)boundary, (double*)p, (V*)ans, B,
                                       S, T, modified != 0, 0);
  });
}

extern "C" int pe_mutual_information_backward(int dtype, const void* px, const void* py, const void* boundary,
                                              const void* p, const void* ans_grad, void* px_grad, void* py_grad,
                                              int64_t B, int64_t S, int64_t T, int modified) {
  return mi_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::mutual_information_backward<V>((const V*)px, (const V*)py, (const int64_t*)boundary, (const double*)p,
                                        (const V*)ans_grad, (V*)px_grad, (V*)py_grad, B, S, T, modified != 0, 0);
  });
}

// joint_mutual_information_recursion's passes: the sum over N stacked terms, the rows [N, B] from the
// occupations and ans, and the grad of one stacked input.
extern "C" int pe_joint_mutual_information_sum(int dtype, const void* terms, void* total, int64_t N, int64_t size) {
  return mi_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::joint_mutual_information_sum<V>((const V*)terms, (V*)total, N, size, 0);
  });
}

extern "C" int pe_joint_mutual_information_rows(int dtype, const void* px, const void* py, const void* occ_x,
                                                const void* occ_y, const void* ans, void* out, int64_t N, int64_t B,
                                                int64_t cells_x, int64_t cells_y) {
  return mi_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::joint_mutual_information_rows<V>((const V*)px, (const V*)py, (const V*)occ_x, (const V*)occ_y,
                                          (const V*)ans, (V*)out, N, B, cells_x, cells_y, 0);
  });
}

extern "C" int pe_joint_mutual_information_grad(int dtype, const void* occ, const void* out_grad, void* grad, int64_t N,
                                                int64_t B, int64_t cells) {
  return mi_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::joint_mutual_information_grad<V>((const V*)occ, (const V*)out_grad, (V*)grad, N, B, cells, 0);
  });
}
