// rnnt_simple_logprobs: validation and CPU/GPU dispatch. Registered by
// build/generated/rnnt_simple_logprobs.ops.cc (generated from ops/rnnt_simple_logprobs.yaml).
#include "paddle_ext/rnnt_simple_logprobs.h"

#include "paddle_ext/binding/common.h"

namespace paddle_ext {
namespace {

struct SimpleShape {
  int64_t B, S, L, T, C;  // L: lm's rows, S+1 or 1 (one row shared by every s)
};

// The Python API has already checked all of this with clear Python exceptions.
SimpleShape simple_shape(const paddle::Tensor& lm, const paddle::Tensor& am, const paddle::Tensor& symbols,
                         int termination_symbol, const char* op) {
  PE_CHECK(lm.shape().size() == 3 && am.shape().size() == 3, op, ": lm and am must be 3-D");
  const int64_t B = am.shape()[0], T = am.shape()[1], C = am.shape()[2], L = lm.shape()[1];
  PE_CHECK(symbols.dtype() == paddle::DataType::INT64 && symbols.shape().size() == 2 && symbols.shape()[0] == B, op,
           ": symbols must be int64 [B, S]");
  const int64_t S = symbols.shape()[1];
  PE_CHECK(lm.shape()[0] == B && (L == S + 1 || L == 1) && lm.shape()[2] == C, op,
           ": lm must be [B, S+1, C] or [B, 1, C] with am's B and C");
  PE_CHECK(lm.dtype() == am.dtype(), op, ": lm and am must have the same dtype");
  PE_CHECK(termination_symbol >= 0 && termination_symbol < C, op, ": termination_symbol ", termination_symbol,
           " is out of range [0, ", C, ")");
  check_same_place(lm, am, op, "lm", "am");
  check_same_place(lm, symbols, op, "lm", "symbols");
  if (symbols.is_cpu()) {  // on a GPU the kernel reads symbols clamped into [0, C) instead
    const int64_t* sym = symbols.data<int64_t>();
    for (int64_t i = 0; i < B * S; ++i) {
      if (sym[i] < 0 || sym[i] >= C) PE_THROW_INDEX(op, ": symbols[", i, "] = ", sym[i], " is out of range [0, ", C, ")");
    }
  }
  return {B, S, L, T, C};
}

}  // namespace

std::vector<std::vector<int64_t>> RnntSimpleLogprobsInferShape(const std::vector<int64_t>& lm_shape,
                                                               const std::vector<int64_t>& am_shape,
                                                               const std::vector<int64_t>& symbols_shape,
                                                               int termination_symbol, bool modified) {
  PE_CHECK(lm_shape.size() == 3 && am_shape.size() == 3, "rnnt_simple_logprobs: lm and am must be 3-D");
  PE_CHECK(symbols_shape.size() == 2, "rnnt_simple_logprobs: symbols must be 2-D [B, S]");
  const int64_t B = am_shape[0], T = am_shape[1], L = lm_shape[1], S = symbols_shape[1];
  const int64_t T1 = T < 0 ? -1 : (modified ? T : T + 1);
  return {{B, S, T1}, {B, S < 0 ? -1 : S + 1, T}, {B, L, T}};
}

std::vector<paddle::Tensor> RnntSimpleLogprobsKernel(const paddle::Tensor& lm_in, const paddle::Tensor& am_in,
                                                     const paddle::Tensor& symbols_in, int termination_symbol,
                                                     bool modified) {
  const char* op = "rnnt_simple_logprobs";
  const paddle::Tensor lm = dense(lm_in), am = dense(am_in), symbols = dense(symbols_in);
  const SimpleShape d = simple_shape(lm, am, symbols, termination_symbol, op);
  paddle::Tensor px = new_output({d.B, d.S, modified ? d.T : d.T + 1}, am.dtype(), am.place());
  paddle::Tensor py = new_output({d.B, d.S + 1, d.T}, am.dtype(), am.place());
  paddle::Tensor approx = new_output({d.B, d.L, d.T}, am.dtype(), am.place());
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (am.is_cpu()) {
      cpu::rnnt_simple_logprobs_forward<T>(ptr<T>(lm), ptr<T>(am), ptr<int64_t>(symbols), mutable_ptr<T>(px),
                                           mutable_ptr<T>(py), mutable_ptr<T>(approx), d.B, d.S, d.L, d.T, d.C,
                                           termination_symbol, modified);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_simple_logprobs_forward<T>(ptr<T>(lm), ptr<T>(am), ptr<int64_t>(symbols), mutable_ptr<T>(px),
                                           mutable_ptr<T>(py), mutable_ptr<T>(approx), d.B, d.S, d.L, d.T, d.C,
                                           termination_symbol, modified, am.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {px, py, approx};
}

std::vector<paddle::Tensor> RnntSimpleLogprobsGradKernel(const paddle::Tensor& lm_in, const paddle::Tensor& am_in,
                                                         const paddle::Tensor& symbols_in,
                                                         const paddle::Tensor& approx_in,
                                                         const paddle::Tensor& px_grad_in,
                                                         const paddle::Tensor& py_grad_in, int termination_symbol,
                                                         bool modified) {
  const char* op = "rnnt_simple_logprobs_grad";
  const paddle::Tensor lm = dense(lm_in), am = dense(am_in), symbols = dense(symbols_in), approx = dense(approx_in);
  const SimpleShape d = simple_shape(lm, am, symbols, termination_symbol, op);
  const paddle::Tensor px_grad = grad_or_zeros(px_grad_in, {d.B, d.S, modified ? d.T : d.T + 1}, am.dtype(), am.place()),
                       py_grad = grad_or_zeros(py_grad_in, {d.B, d.S + 1, d.T}, am.dtype(), am.place());
  PE_CHECK(approx.shape() == std::vector<int64_t>({d.B, d.L, d.T}), op, ": approx must be [B, L, T] (lm's L rows)");
  PE_CHECK(py_grad.shape() == std::vector<int64_t>({d.B, d.S + 1, d.T}), op, ": py_grad must be [B, S+1, T]");
  PE_CHECK(px_grad.shape() == std::vector<int64_t>({d.B, d.S, modified ? d.T : d.T + 1}), op,
           ": px_grad must be [B, S, T+1] (regular) or [B, S, T] (modified)");
  paddle::Tensor lm_grad = new_output(lm.shape(), lm.dtype(), lm.place());
  paddle::Tensor am_grad = new_output(am.shape(), am.dtype(), am.place());
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (am.is_cpu()) {
      cpu::rnnt_simple_logprobs_backward<T>(ptr<T>(lm), ptr<T>(am), ptr<int64_t>(symbols), ptr<T>(approx),
                                            ptr<T>(px_grad), ptr<T>(py_grad), mutable_ptr<T>(lm_grad),
                                            mutable_ptr<T>(am_grad), d.B, d.S, d.L, d.T, d.C, termination_symbol,
                                            modified);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_simple_logprobs_backward<T>(ptr<T>(lm), ptr<T>(am), ptr<int64_t>(symbols), ptr<T>(approx),
                                            ptr<T>(px_grad), ptr<T>(py_grad), mutable_ptr<T>(lm_grad),
                                            mutable_ptr<T>(am_grad), d.B, d.S, d.L, d.T, d.C, termination_symbol,
                                            modified, am.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {lm_grad, am_grad};
}

}  // namespace paddle_ext
