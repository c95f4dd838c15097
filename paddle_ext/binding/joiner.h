// The fused joiner's input checks, shared by the bindings of the losses it is fused into
// (rnnt_joint_logprobs.cc, transducer_jump_loss.cc).
#pragma once

#include "paddle_ext/binding/common.h"
#include "paddle_ext/joiner.h"

namespace paddle_ext {

// The fused joiner's inputs: am [B, T, J], lm [B, U, J], weight [J, X], bias [X], one floating dtype, CPU.
// Returns the row shape with R rows per frame (ranges [B, T, R], or R = U).
inline JoinerShape joiner_shape(const paddle::Tensor& am, const paddle::Tensor& lm, const paddle::Tensor& weight,
                         const paddle::Tensor& bias, const paddle::Tensor* ranges, int activation, const char* op) {
  PE_CHECK(am.shape().size() == 3 && lm.shape().size() == 3, op, ": am must be [B, T, J] and lm [B, U, J], got ranks ",
           am.shape().size(), " and ", lm.shape().size());
  PE_CHECK(weight.shape().size() == 2 && bias.shape().size() == 1, op,
           ": weight must be [J, X] and bias [X], got ranks ", weight.shape().size(), " and ", bias.shape().size());
  const auto &a = am.shape(), &l = lm.shape(), &w = weight.shape();
  JoinerShape j{a[0], a[1], l[1], l[1], a[2], w[1], nullptr, static_cast<JoinerActivation>(activation)};
  PE_CHECK(l[0] == j.B && l[2] == j.J && w[0] == j.J && bias.shape()[0] == j.X, op, ": am [", j.B, ", ", j.T, ", ",
           j.J, "], lm [", l[0], ", ", l[1], ", ", l[2], "], weight [", w[0], ", ", w[1], "] and bias [",
           bias.shape()[0], "] do not fit am [B, T, J], lm [B, U, J], weight [J, X], bias [X]");
  PE_CHECK(lm.dtype() == am.dtype() && weight.dtype() == am.dtype() && bias.dtype() == am.dtype(), op,
           ": am, lm, weight and bias must have one dtype");
  PE_CHECK(activation >= 0 && activation <= 2, op, ": activation must be 0 (tanh), 1 (relu) or 2 (identity), got ",
           activation);
  PE_CHECK(am.is_cpu() && lm.is_cpu() && weight.is_cpu() && bias.is_cpu(), op,
           ": the fused joiner runs on CPU tensors (the Python API composes the joiner elsewhere)");
  if (ranges) {
    j.R = ranges->shape().size() == 3 ? ranges->shape()[2] : -1;
    j.ranges = ranges->data<int64_t>();
  }
  return j;
}

// The grads of am, lm, weight and bias: new tensors of their shapes.
inline std::vector<paddle::Tensor> joiner_grads(const paddle::Tensor& am, const paddle::Tensor& lm,
                                                const paddle::Tensor& weight, const paddle::Tensor& bias) {
  std::vector<paddle::Tensor> grads;
  for (const paddle::Tensor* x : {&am, &lm, &weight, &bias}) grads.push_back(new_output(x->shape(), x->dtype(), x->place()));
  return grads;
}

}  // namespace paddle_ext
