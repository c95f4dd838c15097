// C ABI over the rnnt_simple_logprobs launchers for unittests/gpu (dtype codes: see gpu_runtime.py; only
// 0 = float32 and 1 = float64: the Python API computes 16-bit types in float32).
#include "paddle_ext/rnnt_simple_logprobs.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

template <typename Fn>
static int rsl_dispatch(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return shim_run([&] { fn(ShimTag<float>{}); });
    case 1: return shim_run([&] { fn(ShimTag<double>{}); });
    default: return -2;
  }
}

// lm [B, L, C] (L = S+1 or 1), am [B, T, C], symbols int64 [B, S]; px [B, S, T+1] (T when modified), py [B, S+1, T], approx [B, L, T].
extern "C" int pe_rnnt_simple_logprobs_forward(int dtype, const void* lm, const void* am, const void* symbols,
                                               void* px, void* py, void* approx, int64_t B, int64_t S, int64_t L,
                                               int64_t T, int64_t C, int64_t termination_symbol, int modified) {
  return rsl_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::rnnt_simple_logprobs_forward<V>((const V*)lm, (const V*)am, (const int64_t*)symbols, (V*)px, (V*)py,
                                         (V*)approx, B, S, L, T, C, termination_symbol, modified != 0, 0);
  });
}

extern "C" int pe_rnnt_simple_logprobs_backward(int dtype, const void* lm, const void* am, const void* symbols,
                                                const void* approx, const void* px_grad, const void* py_grad,
                                                void* lm_grad, void* am_grad, int64_t B, int64_t S, int64_t L,
                                                int64_t T, int64_t C, int64_t termination_symbol, int modified) {
  return rsl_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::rnnt_simple_logprobs_backward<V>((const V*)lm, (const V*)am, (const int64_t*)symbols, (const V*)approx,
                                          (const V*)px_grad, (const V*)py_grad, (V*)lm_grad, (V*)am_grad, B, S, L, T, C,
                                          termination_symbol, modified != 0, 0);
  });
}
