// C ABI over the rnnt_joint_logprobs launchers for unittests/gpu (dtype codes: see gpu_runtime.py).
// lse buffers hold [B, T, R, 2] values in the accumulation type (float32 for float16/bfloat16); ranges may be
// null (the full joiner).
#include "paddle_ext/rnnt_joint_logprobs.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

extern "C" int pe_rnnt_joint_forward(int dtype, const void* logits, const void* symbols, const void* ranges, void* px,
                                     void* py, void* lse, int64_t B, int64_t T, int64_t R, int64_t S, int64_t C,
                                     int64_t termination) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    gpu::rnnt_joint_forward<T_>((const T_*)logits, (const int64_t*)symbols, (const int64_t*)ranges, (T_*)px, (T_*)py,
                                (acc_t<T_>*)lse, JointShape{B, T, R, S, C, termination}, 0);
  });
}

// scale [B] and clamp: the grad clamp (clamp +inf: off, scale unread; grad_clamp.h)
extern "C" int pe_rnnt_joint_backward(int dtype, const void* logits, const void* symbols, const void* ranges,
                                      const void* lse, const void* px_grad, const void* py_grad, const void* scale,
                                      void* logits_grad, int64_t B, int64_t T, int64_t R, int64_t S, int64_t C,
                                      int64_t termination, double clamp) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    gpu::rnnt_joint_backward<T_>((const T_*)logits, (const int64_t*)symbols, (const int64_t*)ranges,
                                 (const acc_t<T_>*)lse, (const T_*)px_grad, (const T_*)py_grad, (const T_*)scale,
                                 (T_*)logits_grad, JointShape{B, T, R, S, C, termination, clamp}, 0);
  });
}

extern "C" int pe_rnnt_prune_gather(int dtype, const void* x, const void* index, void* out, int64_t B, int64_t N,
                                    int64_t M, int64_t D) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    gpu::rnnt_prune_gather<T_>((const T_*)x, (const int64_t*)index, (T_*)out, B, N, M, D, 0);
  });
}

extern "C" int pe_rnnt_prune_gather_backward(int dtype, const void* index, const void* out_grad, void* x_grad,
                                             int64_t B, int64_t N, int64_t M, int64_t D) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    gpu::rnnt_prune_gather_backward<T_>((const int64_t*)index, (const T_*)out_grad, (T_*)x_grad, B, N, M, D, 0);
  });
}
