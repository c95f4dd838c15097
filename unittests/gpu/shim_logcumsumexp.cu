// C ABI over the logcumsumexp launchers for unittests/gpu (dtype codes: see gpu_runtime.py).
#include <exception>

#include "paddle_ext/logcumsumexp.h"
#include "paddle_ext/logcumsumexp_complex.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

// The floating codes, plus 6 complex64 and 7 complex128 (logcumsumexp's launchers are specialised for both).
template <typename Fn>
int shim_dispatch_floating_and_complex(int dtype, Fn&& fn) {
  switch (dtype) {
    case 6: return shim_run([&] { fn(ShimTag<complex<float>>{}); });
    case 7: return shim_run([&] { fn(ShimTag<complex<double>>{}); });
    default: return shim_dispatch_floating(dtype, fn);
  }
}

extern "C" int pe_logcumsumexp_forward(int dtype, const void* x, void* out, int64_t outer, int64_t n,
                                       int64_t inner, int exclusive, int reverse) {
  return shim_dispatch_floating_and_complex(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::logcumsumexp_forward<T>((const T*)x, (T*)out, outer, n, inner, exclusive, reverse, 0);
  });
}

extern "C" int pe_logcumsumexp_backward(int dtype, const void* x, const void* out, const void* out_grad,
                                        void* x_grad, int64_t outer, int64_t n, int64_t inner, int exclusive,
                                        int reverse) {
  return shim_dispatch_floating_and_complex(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::logcumsumexp_backward<T>((const T*)x, (const T*)out, (const T*)out_grad, (T*)x_grad, outer, n, inner,
                                  exclusive, reverse, 0);
  });
}
