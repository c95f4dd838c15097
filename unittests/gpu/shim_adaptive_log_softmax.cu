// C ABI over the adaptive_log_softmax launchers for unittests/gpu (dtype codes: see gpu_runtime.py).
// lse buffers are in the accumulation type: float32 for float16/bfloat16.
#include "paddle_ext/adaptive_log_softmax.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

extern "C" int pe_als_target_forward(int dtype, const void* logits, const void* target, void* out, void* lse,
                                     int64_t m, int64_t k) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::als_target_forward<T>((const T*)logits, (const int64_t*)target, (T*)out, (acc_t<T>*)lse, m, k, 0);
  });
}

extern "C" int pe_als_target_backward(int dtype, const void* logits, const void* target, const void* lse,
                                      const void* out_grad, void* logits_grad, int64_t m, int64_t k) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::als_target_backward<T>((const T*)logits, (const int64_t*)target, (const acc_t<T>*)lse, (const T*)out_grad,
                                (T*)logits_grad, m, k, 0);
  });
}

extern "C" int pe_als_full_forward(int dtype, const void* logits, const void* offset, void* out, void* lse, int64_t m,
                                   int64_t k) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::als_full_forward<T>((const T*)logits, (const T*)offset, (T*)out, (acc_t<T>*)lse, m, k, 0);
  });
}

extern "C" int pe_als_full_backward(int dtype, const void* logits, const void* lse, const void* out_grad,
                                    void* logits_grad, void* offset_grad, int64_t m, int64_t k) {
  return shim_dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::als_full_backward<T>((const T*)logits, (const acc_t<T>*)lse, (const T*)out_grad, (T*)logits_grad,
                              (T*)offset_grad, m, k, 0);
  });
}
