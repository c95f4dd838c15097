// adaptive_log_softmax: validation and CPU/GPU dispatch. Registered by
// build/generated/adaptive_log_softmax.ops.cc (generated from ops/adaptive_log_softmax.yaml).
#include "paddle_ext/adaptive_log_softmax.h"

#include "paddle_ext/binding/common.h"
#include "paddle_ext/gemm.h"

namespace paddle_ext {
namespace {

struct Rows {
  int64_t m, k;
};

Rows rows_of(const paddle::Tensor& logits, const char* op) {
  PE_CHECK(logits.shape().size() == 2, op, ": logits must be 2-D [M, K], got rank ", logits.shape().size());
  return {logits.shape()[0], logits.shape()[1]};
}

// lse is kept in the accumulation type: float32 for the half types.
paddle::DataType lse_dtype(paddle::DataType dtype) {
  return (dtype == paddle::DataType::FLOAT16 || dtype == paddle::DataType::BFLOAT16) ? paddle::DataType::FLOAT32
                                                                                   : dtype;
}

// One value per row. Only the count is checked: an inference graph may hand a [0, 1] slice for [0].
void check_rows(const paddle::Tensor& t, int64_t m, const char* op, const char* name) {
  PE_CHECK(t.numel() == m, op, ": ", name, " must hold one value per row (", m, "), got ", t.numel());
}

// CPU only: the GPU kernels write NaN for a bad target rather than synchronising to check.
void check_targets(const paddle::Tensor& target, int64_t k, const char* op) {
  PE_CHECK(target.dtype() == paddle::DataType::INT64, op, ": target must be int64");
  if (!target.is_cpu()) return;
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i) {
    if (t[i] < 0 || t[i] >= k) PE_THROW_INDEX(op, ": target[", i, "] = ", t[i], " is out of range [0, ", k, ")");
  }
}

}  // namespace

std::vector<std::vector<int64_t>> AlsTargetInferShape(const std::vector<int64_t>& logits_shape,
                                                      const std::vector<int64_t>& target_shape) {
  PE_CHECK(logits_shape.size() == 2, "adaptive_log_softmax_target: logits must be 2-D [M, K]");
  return {{logits_shape[0]}, {logits_shape[0]}};
}

std::vector<std::vector<int64_t>> AlsFullInferShape(const std::vector<int64_t>& logits_shape,
                                                    const std::vector<int64_t>& offset_shape) {
  PE_CHECK(logits_shape.size() == 2, "adaptive_log_softmax_full: logits must be 2-D [M, K]");
  return {logits_shape, {logits_shape[0]}};
}

// adaptive_log_softmax_full_vjp: logits_grad like logits, offset_grad like offset.
std::vector<std::vector<int64_t>> AlsFullVjpInferShape(const std::vector<int64_t>& logits_shape,
                                                       const std::vector<int64_t>& offset_shape,
                                                       const std::vector<int64_t>& lse_shape,
                                                       const std::vector<int64_t>& out_grad_shape) {
  return {logits_shape, offset_shape};
}

std::vector<paddle::DataType> AlsInferDtype(const paddle::DataType& logits, const paddle::DataType& other) {
  return {logits, lse_dtype(logits)};
}

std::vector<paddle::Tensor> AlsTargetKernel(const paddle::Tensor& logits_in, const paddle::Tensor& target_in) {
  const char* op = "adaptive_log_softmax_target";
  const paddle::Tensor logits = dense(logits_in), target = dense(target_in);
  const Rows r = rows_of(logits, op);
  check_rows(target, r.m, op, "target");
  check_same_place(logits, target, op, "logits", "target");
  check_targets(target, r.k, op);
  paddle::Tensor out = new_output({r.m}, logits.dtype(), logits.place());
  paddle::Tensor lse = new_output({r.m}, lse_dtype(logits.dtype()), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::als_target_forward<T>(ptr<T>(logits), target.data<int64_t>(), mutable_ptr<T>(out), mutable_ptr<A>(lse),
                                 r.m, r.k);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::als_target_forward<T>(ptr<T>(logits), target.data<int64_t>(), mutable_ptr<T>(out), mutable_ptr<A>(lse),
                                 r.m, r.k, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {out, lse};
}

std::vector<paddle::Tensor> AlsTargetGradKernel(const paddle::Tensor& logits_in, const paddle::Tensor& target_in,
                                                const paddle::Tensor& lse_in, const paddle::Tensor& out_grad_in) {
  const char* op = "adaptive_log_softmax_target_grad";
  const paddle::Tensor logits = dense(logits_in), target = dense(target_in), lse = dense(lse_in),
                       out_grad = dense(out_grad_in);
  const Rows r = rows_of(logits, op);
  check_rows(out_grad, r.m, op, "out_grad");
  paddle::Tensor logits_grad = new_output(logits.shape(), logits.dtype(), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::als_target_backward<T>(ptr<T>(logits), target.data<int64_t>(), ptr<A>(lse), ptr<T>(out_grad),
                                  mutable_ptr<T>(logits_grad), r.m, r.k);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::als_target_backward<T>(ptr<T>(logits), target.data<int64_t>(), ptr<A>(lse), ptr<T>(out_grad),
                                  mutable_ptr<T>(logits_grad), r.m, r.k, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {logits_grad};
}

std::vector<paddle::Tensor> AlsFullKernel(const paddle::Tensor& logits_in, const paddle::Tensor& offset_in) {
  const char* op = "adaptive_log_softmax_full";
  const paddle::Tensor logits = dense(logits_in), offset = dense(offset_in);
  const Rows r = rows_of(logits, op);
  check_rows(offset, r.m, op, "offset");
  check_same_place(logits, offset, op, "logits", "offset");
  PE_CHECK(offset.dtype() == logits.dtype(), op, ": offset must have the dtype of logits");
  paddle::Tensor out = new_output(logits.shape(), logits.dtype(), logits.place());
  paddle::Tensor lse = new_output({r.m}, lse_dtype(logits.dtype()), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::als_full_forward<T>(ptr<T>(logits), ptr<T>(offset), mutable_ptr<T>(out), mutable_ptr<A>(lse), r.m, r.k);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::als_full_forward<T>(ptr<T>(logits), ptr<T>(offset), mutable_ptr<T>(out), mutable_ptr<A>(lse), r.m, r.k,
                               logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {out, lse};
}

std::vector<paddle::Tensor> AlsFullGradKernel(const paddle::Tensor& logits_in, const paddle::Tensor& offset_in,
                                              const paddle::Tensor& lse_in, const paddle::Tensor& out_grad_in) {
  const char* op = "adaptive_log_softmax_full_grad";
  const paddle::Tensor logits = dense(logits_in), lse = dense(lse_in), out_grad = dense(out_grad_in);
  const Rows r = rows_of(logits, op);
  paddle::Tensor logits_grad = new_output(logits.shape(), logits.dtype(), logits.place());
  paddle::Tensor offset_grad = new_output({r.m}, offset_in.dtype(), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::als_full_backward<T>(ptr<T>(logits), ptr<A>(lse), ptr<T>(out_grad), mutable_ptr<T>(logits_grad),
                                mutable_ptr<T>(offset_grad), r.m, r.k);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::als_full_backward<T>(ptr<T>(logits), ptr<A>(lse), ptr<T>(out_grad), mutable_ptr<T>(logits_grad),
                                mutable_ptr<T>(offset_grad), r.m, r.k, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {logits_grad, offset_grad};
}

// ---------------------------------------------------------------------------------------------------
// The projections: out = op(x) @ op(y) for float32 CPU tensors, on cpu::sgemm (oneDNN's sgemm from the
// user's Paddle, gemm.h). op(x) is x, or x^T when transpose_x; likewise y. The Python API calls it only
// where that holds and oneDNN was found; anything else stays on Paddle's matmul.

namespace {

struct Gemm {
  int64_t m, k, n;
};

Gemm gemm_dims(const std::vector<int64_t>& x, const std::vector<int64_t>& y, bool tx, bool ty, const char* op) {
  PE_CHECK(x.size() == 2 && y.size() == 2, op, ": x and y must be 2-D, got ranks ", x.size(), " and ", y.size());
  const int64_t m = tx ? x[1] : x[0], k = tx ? x[0] : x[1];
  const int64_t ky = ty ? y[1] : y[0], n = ty ? y[0] : y[1];
  PE_CHECK(k < 0 || ky < 0 || k == ky, op, ": the inner dimensions differ (", k, " and ", ky, ")");
  return {m, k, n};
}

// op(a) @ op(b) as a new [m, n] float32 CPU tensor.
paddle::Tensor sgemm_of(const paddle::Tensor& a, bool ta, const paddle::Tensor& b, bool tb, const char* op) {
  PE_CHECK(a.dtype() == paddle::DataType::FLOAT32 && b.dtype() == paddle::DataType::FLOAT32, op,
           ": float32 only (the Python API uses Paddle's matmul for the other dtypes)");
  PE_CHECK(a.is_cpu() && b.is_cpu(), op, ": CPU tensors only (the Python API uses Paddle's matmul elsewhere)");
  const Gemm g = gemm_dims(a.shape(), b.shape(), ta, tb, op);
  paddle::Tensor out = new_output({g.m, g.n}, paddle::DataType::FLOAT32, a.place(), BlockCache::kGemmMinBytes);
  cpu::sgemm(ta, tb, g.m, g.n, g.k, ptr<float>(a), a.shape()[1], ptr<float>(b), b.shape()[1], 0.f,
             mutable_ptr<float>(out), g.n);
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> AlsMatmulInferShape(const std::vector<int64_t>& x_shape,
                                                      const std::vector<int64_t>& y_shape, bool transpose_x,
                                                      bool transpose_y) {
  const Gemm g = gemm_dims(x_shape, y_shape, transpose_x, transpose_y, "adaptive_matmul");
  return {{g.m, g.n}};
}

std::vector<paddle::Tensor> AlsMatmulKernel(const paddle::Tensor& x_in, const paddle::Tensor& y_in, bool transpose_x,
                                            bool transpose_y) {
  const paddle::Tensor x = dense(x_in), y = dense(y_in);
  return {sgemm_of(x, transpose_x, y, transpose_y, "adaptive_matmul")};
}

// x_grad and y_grad of out = op(x) @ op(y), each one GEMM (matmul's grad formulas).
std::vector<paddle::Tensor> AlsMatmulGradKernel(const paddle::Tensor& x_in, const paddle::Tensor& y_in,
                                                const paddle::Tensor& out_grad_in, bool transpose_x, bool transpose_y) {
  const char* op = "adaptive_matmul_grad";
  const paddle::Tensor x = dense(x_in), y = dense(y_in), g = dense(out_grad_in);
  paddle::Tensor x_grad, y_grad;
  if (!transpose_x) {
    x_grad = sgemm_of(g, false, y, !transpose_y, op);                                     // g op(y)^T
    y_grad = transpose_y ? sgemm_of(g, true, x, false, op) : sgemm_of(x, true, g, false, op);  // (x^T g)^T or x^T g
  } else {
    x_grad = transpose_y ? sgemm_of(y, true, g, true, op) : sgemm_of(y, false, g, true, op);   // (g op(y)^T)^T
    y_grad = transpose_y ? sgemm_of(g, true, x, true, op) : sgemm_of(x, false, g, false, op);  // (x g)^T or x g
  }
  return {x_grad, y_grad};
}

// out = target(x @ w) (pe_adaptive_matmul, then pe_adaptive_log_softmax_target) in blocks of rows
// (cpu::als_linear_target_blocked); with `grads`, also x_grad and w_grad of sum(out), else two empty tensors.
namespace {

Gemm linear_target_dims(const paddle::Tensor& x, const paddle::Tensor& w, const paddle::Tensor& target, const char* op) {
  for (const paddle::Tensor* t : {&x, &w}) {
    PE_CHECK(t->dtype() == paddle::DataType::FLOAT32 && t->is_cpu(), op,
             ": float32 CPU tensors only (the Python API composes Paddle's ops elsewhere)");
  }
  const Gemm g = gemm_dims(x.shape(), w.shape(), false, false, op);
  check_rows(target, g.m, op, "target");
  check_targets(target, g.n, op);
  return g;
}

}  // namespace

std::vector<std::vector<int64_t>> AlsLinearTargetInferShape(const std::vector<int64_t>& x_shape,
                                                            const std::vector<int64_t>& w_shape,
                                                            const std::vector<int64_t>& target_shape, bool grads) {
  PE_CHECK(x_shape.size() == 2, "adaptive_linear_target: x must be 2-D [M, n_in]");
  return {{x_shape[0]}, grads ? x_shape : std::vector<int64_t>{0}, grads ? w_shape : std::vector<int64_t>{0}};
}

std::vector<paddle::Tensor> AlsLinearTargetKernel(const paddle::Tensor& x_in, const paddle::Tensor& w_in,
                                                  const paddle::Tensor& target_in, bool grads) {
  const char* op = "adaptive_linear_target";
  const paddle::Tensor x = dense(x_in), w = dense(w_in), target = dense(target_in);
  const Gemm g = linear_target_dims(x, w, target, op);
  paddle::Tensor out = new_output({g.m}, x.dtype(), x.place());
  paddle::Tensor x_grad = new_output(grads ? x.shape() : std::vector<int64_t>{0}, x.dtype(), x.place(),
                                     BlockCache::kGemmMinBytes);
  paddle::Tensor w_grad = new_output(grads ? w.shape() : std::vector<int64_t>{0}, w.dtype(), w.place(),
                                     BlockCache::kGemmMinBytes);
  cpu::als_linear_target_blocked(ptr<float>(x), ptr<float>(w), target.data<int64_t>(), nullptr, mutable_ptr<float>(out),
                                 grads ? mutable_ptr<float>(x_grad) : nullptr, grads ? mutable_ptr<float>(w_grad) : nullptr,
                                 g.m, g.k, g.n);
  return {out, x_grad, w_grad};
}

// x_grad and w_grad of out = target(x @ w) for any out_grad, the logits recomputed block by block.
std::vector<std::vector<int64_t>> AlsLinearTargetVjpInferShape(const std::vector<int64_t>& x_shape,
                                                               const std::vector<int64_t>& w_shape,
                                                               const std::vector<int64_t>& target_shape,
                                                               const std::vector<int64_t>& out_grad_shape) {
  return {x_shape, w_shape};
}

std::vector<paddle::Tensor> AlsLinearTargetVjpKernel(const paddle::Tensor& x_in, const paddle::Tensor& w_in,
                                                     const paddle::Tensor& target_in, const paddle::Tensor& out_grad_in) {
  const char* op = "adaptive_linear_target_vjp";
  const paddle::Tensor x = dense(x_in), w = dense(w_in), target = dense(target_in), out_grad = dense(out_grad_in);
  const Gemm g = linear_target_dims(x, w, target, op);
  PE_CHECK(out_grad.dtype() == paddle::DataType::FLOAT32 && out_grad.is_cpu(), op, ": out_grad must be float32 on the CPU");
  check_rows(out_grad, g.m, op, "out_grad");
  paddle::Tensor out = new_output({g.m}, x.dtype(), x.place());  // (recomputed on the way; not returned)
  paddle::Tensor x_grad = new_output(x.shape(), x.dtype(), x.place(), BlockCache::kGemmMinBytes);
  paddle::Tensor w_grad = new_output(w.shape(), w.dtype(), w.place(), BlockCache::kGemmMinBytes);
  cpu::als_linear_target_blocked(ptr<float>(x), ptr<float>(w), target.data<int64_t>(), ptr<float>(out_grad),
                                 mutable_ptr<float>(out), mutable_ptr<float>(x_grad), mutable_ptr<float>(w_grad), g.m,
                                 g.k, g.n);
  return {x_grad, w_grad};
}

}  // namespace paddle_ext
