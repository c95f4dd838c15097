// logcumsumexp: validation and CPU/GPU dispatch. Registered by build/generated/logcumsumexp.ops.cc
// (generated from ops/logcumsumexp.yaml), which includes this file.
#include "paddle_ext/logcumsumexp.h"

#include "paddle/phi/common/complex.h"
#include "paddle_ext/binding/common.h"
#include "paddle_ext/logcumsumexp_complex.h"

namespace paddle_ext {

// The kernels see Paddle's complex tensors as paddle_ext::complex (the same two reals).
static_assert(sizeof(phi::dtype::complex<float>) == sizeof(complex<float>) &&
                  alignof(phi::dtype::complex<float>) == alignof(complex<float>) &&
                  sizeof(phi::dtype::complex<double>) == sizeof(complex<double>) &&
                  alignof(phi::dtype::complex<double>) == alignof(complex<double>),
              "paddle_ext::complex must have phi::dtype::complex's layout");

// The floating dtypes and complex64/complex128, whose launchers are specialised in logcumsumexp_complex.h.
template <typename Fn>
void dispatch_floating_and_complex(paddle::DataType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case paddle::DataType::COMPLEX64: return fn(TypeTag<complex<float>>{});
    case paddle::DataType::COMPLEX128: return fn(TypeTag<complex<double>>{});
    default: return dispatch_floating(dtype, op, std::forward<Fn>(fn));
  }
}

std::vector<std::vector<int64_t>> LogcumsumexpInferShape(const std::vector<int64_t>& x_shape, int axis,
                                                         bool flatten) {
  if (flatten) return {{numel_of(x_shape)}};
  normalize_axis(axis, (int64_t)x_shape.size(), "logcumsumexp");
  return {x_shape};
}

std::vector<paddle::Tensor> LogcumsumexpKernel(const paddle::Tensor& x_in, int axis, bool flatten,
                                               bool exclusive, bool reverse) {
  const paddle::Tensor x = dense(x_in);
  const AxisView v = axis_view(x.shape(), axis, flatten, "logcumsumexp");
  const std::vector<int64_t> out_shape = flatten ? std::vector<int64_t>{x.numel()} : x.shape();
  paddle::Tensor out = new_output(out_shape, x.dtype(), x.place());
  dispatch_floating_and_complex(x.dtype(), "logcumsumexp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.is_cpu()) {
      cpu::logcumsumexp_forward<T>(ptr<T>(x), mutable_ptr<T>(out), v.outer, v.n, v.inner, exclusive, reverse);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::logcumsumexp_forward<T>(ptr<T>(x), mutable_ptr<T>(out), v.outer, v.n, v.inner, exclusive, reverse,
                                   x.stream());
#else
      throw_no_cuda("logcumsumexp");
#endif
    }
  });
  return {out};
}

std::vector<paddle::Tensor> LogcumsumexpGradKernel(const paddle::Tensor& x_in, const paddle::Tensor& out_in,
                                                   const paddle::Tensor& out_grad_in, int axis, bool flatten,
                                                   bool exclusive, bool reverse) {
  const paddle::Tensor x = dense(x_in), out = dense(out_in), out_grad = dense(out_grad_in);
  const AxisView v = axis_view(x.shape(), axis, flatten, "logcumsumexp_grad");
  paddle::Tensor x_grad = new_output(x.shape(), x.dtype(), x.place());
  dispatch_floating_and_complex(x.dtype(), "logcumsumexp_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.is_cpu()) {
      cpu::logcumsumexp_backward<T>(ptr<T>(x), ptr<T>(out), ptr<T>(out_grad), mutable_ptr<T>(x_grad), v.outer,
                                    v.n, v.inner, exclusive, reverse);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::logcumsumexp_backward<T>(ptr<T>(x), ptr<T>(out), ptr<T>(out_grad), mutable_ptr<T>(x_grad), v.outer,
                                    v.n, v.inner, exclusive, reverse, x.stream());
#else
      throw_no_cuda("logcumsumexp_grad");
#endif
    }
  });
  return {x_grad};
}

}  // namespace paddle_ext
