// rnnt_joint_logprobs: validation and CPU/GPU dispatch. Registered by build/generated/rnnt_joint_logprobs.ops.cc
// (generated from ops/rnnt_joint_logprobs.yaml), which includes this file. The Python API has checked the
// arguments with clear exceptions; these checks catch what a static graph only sees when it runs.
#include "paddle_ext/rnnt_joint_logprobs.h"

#include <cstring>

#include "paddle_ext/binding/common.h"
#include "paddle_ext/binding/joiner.h"

namespace paddle_ext {
namespace {

// The grad clamp's bound from its float64 bit pattern (+inf: off).
void set_clamp(JointShape* d, int64_t clamp_bits, const char* op) {
  std::memcpy(&d->clamp, &clamp_bits, sizeof(d->clamp));
  PE_CHECK(d->clamp > 0, op, ": the clamp's bound must be > 0 (+inf: off), got ", d->clamp);
}

// The shapes of the joint op's inputs; the values of symbols and ranges are checked on CPU only (a GPU
// kernel skips a bad row instead of synchronising to check).
JointShape joint_shape(const paddle::Tensor& logits, const paddle::Tensor& symbols,
                       const paddle::optional<paddle::Tensor>& ranges, int termination_symbol, int64_t clamp_bits,
                       const char* op) {
  PE_CHECK(logits.shape().size() == 4, op, ": logits must be 4-D [B, T, R, C], got rank ", logits.shape().size());
  PE_CHECK(symbols.shape().size() == 2 && symbols.dtype() == paddle::DataType::INT64, op,
           ": symbols must be int64 [B, S]");
  const auto& s = logits.shape();
  JointShape d{s[0], s[1], s[2], symbols.shape()[1], s[3], termination_symbol};
  set_clamp(&d, clamp_bits, op);
  PE_CHECK(symbols.shape()[0] == d.B, op, ": symbols has ", symbols.shape()[0], " rows but logits has B = ", d.B);
  PE_CHECK(termination_symbol >= 0 && termination_symbol < d.C, op, ": termination_symbol must be in [0, C = ", d.C,
           "), got ", termination_symbol);
  check_same_place(logits, symbols, op, "logits", "symbols");
  if (ranges) {
    PE_CHECK(ranges->dtype() == paddle::DataType::INT64 && ranges->shape() == std::vector<int64_t>({d.B, d.T, d.R}),
             op, ": ranges must be int64 [B, T, R] = [", d.B, ", ", d.T, ", ", d.R, "]");
    check_same_place(logits, *ranges, op, "logits", "ranges");
  } else {  // (Paddle hands an empty optional input over as absent: pruned logits with no frames come here too)
    PE_CHECK(d.R == d.S + 1 || d.B * d.T == 0, op, ": logits must be [B, T, S+1, C] with S = ", d.S,
             " (symbols [B, S]), got R = ", d.R);
  }
  return d;
}

void check_values(const paddle::Tensor& symbols, const paddle::Tensor* ranges, const JointShape& d, const char* op) {
  if (!symbols.is_cpu()) return;
  const int64_t* sy = symbols.data<int64_t>();
  for (int64_t i = 0; i < symbols.numel(); ++i) {
    if (sy[i] < 0 || sy[i] >= d.C) PE_THROW_INDEX(op, ": symbols[", i / d.S, ", ", i % d.S, "] = ", sy[i],
                                                  " is out of range [0, ", d.C, ")");
  }
  if (ranges == nullptr) return;
  const int64_t* rg = ranges->data<int64_t>();
  for (int64_t i = 0; i < ranges->numel(); ++i) {  // each frame: s_begin + arange(R) inside [0, S]
    const int64_t r = i % d.R, first = rg[i - r];
    if (!joint_context_ok(rg[i], d.S) || rg[i] != first + r) {
      PE_THROW_INDEX(op, ": ranges[", i / (d.T * d.R), ", ", (i / d.R) % d.T, ", ", r, "] = ", rg[i],
                     ": each frame's ranges must be s_begin + arange(R) inside [0, S = ", d.S, "]");
    }
    const int64_t t = (i / d.R) % d.T;  // and s_begin non-decreasing along T (k2's ranges)
    if (r == 0 && t > 0 && rg[i] < rg[i - d.R]) {
      PE_THROW_INDEX(op, ": ranges must be non-decreasing along T, but ranges[", i / (d.T * d.R), ", ", t,
                     ", 0] = ", rg[i], " < ranges[", i / (d.T * d.R), ", ", t - 1, ", 0] = ", rg[i - d.R]);
    }
  }
}

paddle::DataType lse_dtype(paddle::DataType dtype) {
  return (dtype == paddle::DataType::FLOAT16 || dtype == paddle::DataType::BFLOAT16) ? paddle::DataType::FLOAT32
                                                                                   : dtype;
}

}  // namespace

std::vector<std::vector<int64_t>> RnntJointInferShape(const std::vector<int64_t>& logits_shape,
                                                      const std::vector<int64_t>& symbols_shape,
                                                      const paddle::optional<std::vector<int64_t>>&) {
  PE_CHECK(logits_shape.size() == 4 && symbols_shape.size() == 2,
           "rnnt_joint_logprobs: logits must be [B, T, R, C] and symbols [B, S]");
  const int64_t B = logits_shape[0], T = logits_shape[1], R = logits_shape[2], S = symbols_shape[1];
  return {{B, S, T}, {B, S < 0 ? -1 : S + 1, T}, {B, T, R, 2}, {B}};
}

std::vector<paddle::DataType> RnntJointInferDtype(const paddle::DataType& logits, const paddle::DataType&,
                                                  const paddle::optional<paddle::DataType>&) {
  return {logits, logits, lse_dtype(logits), logits};
}

std::vector<paddle::Tensor> RnntJointKernel(const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
                                            const paddle::optional<paddle::Tensor>& ranges_in, int termination_symbol,
                                            int64_t clamp_bits) {
  const char* op = "rnnt_joint_logprobs";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in);
  const JointShape d = joint_shape(logits, symbols, ranges_in, termination_symbol, clamp_bits, op);
  paddle::Tensor ranges = ranges_in ? dense(*ranges_in) : paddle::Tensor();
  check_values(symbols, ranges_in ? &ranges : nullptr, d, op);
  const int64_t* rptr = ranges_in ? ranges.data<int64_t>() : nullptr;
  paddle::Tensor px = new_output({d.B, d.S, d.T}, logits.dtype(), logits.place());
  paddle::Tensor py = new_output({d.B, d.S + 1, d.T}, logits.dtype(), logits.place());
  paddle::Tensor lse = new_output({d.B, d.T, d.R, 2}, lse_dtype(logits.dtype()), logits.place());
  paddle::Tensor scale = zero_scale(d.B, logits.dtype(), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::rnnt_joint_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), rptr, mutable_ptr<T>(px), mutable_ptr<T>(py),
                                 mutable_ptr<A>(lse), d);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_joint_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), rptr, mutable_ptr<T>(px), mutable_ptr<T>(py),
                                 mutable_ptr<A>(lse), d, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {px, py, lse, scale};
}

std::vector<paddle::Tensor> RnntJointGradKernel(const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
                                                const paddle::optional<paddle::Tensor>& ranges_in,
                                                const paddle::Tensor& lse_in, const paddle::Tensor& px_grad_in,
                                                const paddle::Tensor& py_grad_in, const paddle::Tensor& scale_grad_in,
                                                int termination_symbol, int64_t clamp_bits) {
  const char* op = "rnnt_joint_logprobs_grad";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in), lse = dense(lse_in);
  const JointShape d = joint_shape(logits, symbols, ranges_in, termination_symbol, clamp_bits, op);
  const paddle::Tensor px_grad = grad_or_zeros(px_grad_in, {d.B, d.S, d.T}, logits.dtype(), logits.place()),
                       py_grad = grad_or_zeros(py_grad_in, {d.B, d.S + 1, d.T}, logits.dtype(), logits.place());
  // (read only with the clamp on, where the API adds scale to the loss; unused, it counts as zeros)
  const paddle::Tensor scale_grad = clamp_scale_grad(d.clamp, d.B, scale_grad_in, logits.dtype(), logits.place(), op);
  paddle::Tensor ranges = ranges_in ? dense(*ranges_in) : paddle::Tensor();
  check_values(symbols, ranges_in ? &ranges : nullptr, d, op);
  PE_CHECK(px_grad.shape() == std::vector<int64_t>({d.B, d.S, d.T}) &&
               py_grad.shape() == std::vector<int64_t>({d.B, d.S + 1, d.T}) && lse.numel() == d.B * d.T * d.R * 2,
           op, ": px_grad, py_grad and lse must be [B, S, T], [B, S+1, T] and [B, T, R, 2]");
  const int64_t* rptr = ranges_in ? ranges.data<int64_t>() : nullptr;
  paddle::Tensor logits_grad = new_output(logits.shape(), logits.dtype(), logits.place());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (logits.is_cpu()) {
      cpu::rnnt_joint_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), rptr, ptr<A>(lse), ptr<T>(px_grad),
                                  ptr<T>(py_grad), scale_ptr<T>(scale_grad), mutable_ptr<T>(logits_grad), d);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_joint_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), rptr, ptr<A>(lse), ptr<T>(px_grad),
                                  ptr<T>(py_grad), scale_ptr<T>(scale_grad), mutable_ptr<T>(logits_grad), d,
                                  logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {logits_grad};
}

namespace {

// The lattice shape of the fused joiner's rows, checked as the joint op's (symbols, ranges, termination).
JointShape joiner_joint_shape(const paddle::Tensor& am, const paddle::Tensor& lm, const paddle::Tensor& weight,
                              const paddle::Tensor& bias, const paddle::Tensor& symbols, const paddle::Tensor* ranges,
                              int termination_symbol, int activation, int64_t clamp_bits, const char* op,
                              JoinerShape* j) {
  PE_CHECK(symbols.shape().size() == 2 && symbols.dtype() == paddle::DataType::INT64, op,
           ": symbols must be int64 [B, S]");
  if (ranges) {
    PE_CHECK(ranges->dtype() == paddle::DataType::INT64 && ranges->shape().size() == 3, op,
             ": ranges must be int64 [B, T, R]");
  }
  *j = joiner_shape(am, lm, weight, bias, ranges, activation, op);
  JointShape d{j->B, j->T, j->R, symbols.shape()[1], j->X, termination_symbol};
  set_clamp(&d, clamp_bits, op);
  PE_CHECK(symbols.shape()[0] == d.B, op, ": symbols has ", symbols.shape()[0], " rows but am has B = ", d.B);
  PE_CHECK(j->U == d.S + 1, op, ": lm must be [B, S+1, J] with S = ", d.S, " (symbols [B, S]), got ", j->U, " rows");
  PE_CHECK(termination_symbol >= 0 && termination_symbol < d.C, op, ": termination_symbol must be in [0, X = ", d.C,
           "), got ", termination_symbol);
  if (ranges) {
    PE_CHECK(ranges->shape() == std::vector<int64_t>({d.B, d.T, d.R}) && d.R <= d.S + 1, op,
             ": ranges must be int64 [B, T, R] = [", d.B, ", ", d.T, ", R <= S+1]");
  }
  check_values(symbols, ranges, d, op);
  return d;
}

}  // namespace

std::vector<std::vector<int64_t>> RnntJoinerInferShape(const std::vector<int64_t>& am_shape,
                                                       const std::vector<int64_t>& lm_shape,
                                                       const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                       const std::vector<int64_t>& symbols_shape,
                                                       const paddle::optional<std::vector<int64_t>>& ranges_shape) {
  PE_CHECK(am_shape.size() == 3 && lm_shape.size() == 3 && symbols_shape.size() == 2,
           "rnnt_joiner_logprobs: am must be [B, T, J], lm [B, S+1, J] and symbols [B, S]");
  const int64_t B = am_shape[0], T = am_shape[1], S = symbols_shape[1];
  const int64_t R = ranges_shape ? (ranges_shape->size() == 3 ? (*ranges_shape)[2] : -1) : lm_shape[1];
  return {{B, S, T}, {B, S < 0 ? -1 : S + 1, T}, {B, T, R, 2}, {B}};
}

std::vector<paddle::Tensor> RnntJoinerKernel(const paddle::Tensor& am_in, const paddle::Tensor& lm_in,
                                             const paddle::Tensor& weight_in, const paddle::Tensor& bias_in,
                                             const paddle::Tensor& symbols_in,
                                             const paddle::optional<paddle::Tensor>& ranges_in, int termination_symbol,
                                             int activation, int64_t clamp_bits) {
  const char* op = "rnnt_joiner_logprobs";
  const paddle::Tensor am = dense(am_in), lm = dense(lm_in), weight = dense(weight_in), bias = dense(bias_in),
                       symbols = dense(symbols_in);
  const paddle::Tensor ranges = ranges_in ? dense(*ranges_in) : paddle::Tensor();
  JoinerShape j;
  const JointShape d = joiner_joint_shape(am, lm, weight, bias, symbols, ranges_in ? &ranges : nullptr,
                                          termination_symbol, activation, clamp_bits, op, &j);
  paddle::Tensor px = new_output({d.B, d.S, d.T}, am.dtype(), am.place());
  paddle::Tensor py = new_output({d.B, d.S + 1, d.T}, am.dtype(), am.place());
  paddle::Tensor lse = new_output({d.B, d.T, d.R, 2}, am.dtype(), am.place());
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::rnnt_joiner_forward<T>(ptr<T>(am), ptr<T>(lm), ptr<T>(weight), ptr<T>(bias), symbols.data<int64_t>(),
                                j.ranges, mutable_ptr<T>(px), mutable_ptr<T>(py), mutable_ptr<T>(lse), d, j);
  });
  return {px, py, lse, zero_scale(d.B, am.dtype(), am.place())};
}

std::vector<paddle::Tensor> RnntJoinerGradKernel(const paddle::Tensor& am_in, const paddle::Tensor& lm_in,
                                                 const paddle::Tensor& weight_in, const paddle::Tensor& bias_in,
                                                 const paddle::Tensor& symbols_in,
                                                 const paddle::optional<paddle::Tensor>& ranges_in,
                                                 const paddle::Tensor& lse_in, const paddle::Tensor& px_grad_in,
                                                 const paddle::Tensor& py_grad_in, const paddle::Tensor& scale_grad_in,
                                                 int termination_symbol, int activation, int64_t clamp_bits) {
  const char* op = "rnnt_joiner_logprobs_grad";
  const paddle::Tensor am = dense(am_in), lm = dense(lm_in), weight = dense(weight_in), bias = dense(bias_in),
                       symbols = dense(symbols_in), lse = dense(lse_in);
  const paddle::Tensor ranges = ranges_in ? dense(*ranges_in) : paddle::Tensor();
  JoinerShape j;
  const JointShape d = joiner_joint_shape(am, lm, weight, bias, symbols, ranges_in ? &ranges : nullptr,
                                          termination_symbol, activation, clamp_bits, op, &j);
  const paddle::Tensor px_grad = grad_or_zeros(px_grad_in, {d.B, d.S, d.T}, am.dtype(), am.place()),
                       py_grad = grad_or_zeros(py_grad_in, {d.B, d.S + 1, d.T}, am.dtype(), am.place());
  PE_CHECK(px_grad.shape() == std::vector<int64_t>({d.B, d.S, d.T}) &&
               py_grad.shape() == std::vector<int64_t>({d.B, d.S + 1, d.T}) &&
               lse.numel() == d.B * d.T * d.R * 2 && lse.dtype() == am.dtype(),
           op, ": px_grad, py_grad and lse must be [B, S, T], [B, S+1, T] and [B, T, R, 2]");
  const paddle::Tensor scale_grad = clamp_scale_grad(d.clamp, d.B, scale_grad_in, am.dtype(), am.place(), op);
  std::vector<paddle::Tensor> g = joiner_grads(am, lm, weight, bias);
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::rnnt_joiner_backward<T>(ptr<T>(am), ptr<T>(lm), ptr<T>(weight), ptr<T>(bias), symbols.data<int64_t>(),
                                 j.ranges, ptr<T>(lse), ptr<T>(px_grad), ptr<T>(py_grad), scale_ptr<T>(scale_grad),
                                 mutable_ptr<T>(g[0]), mutable_ptr<T>(g[1]), mutable_ptr<T>(g[2]), mutable_ptr<T>(g[3]),
                                 d, j);
  });
  return g;
}

namespace {

struct GatherShape {
  int64_t B, N, T, R, D;
};

GatherShape gather_shape(const paddle::Tensor& x, const paddle::Tensor& index, const char* op) {
  PE_CHECK(x.shape().size() == 3, op, ": x must be 3-D [B, N, D], got rank ", x.shape().size());
  PE_CHECK(index.shape().size() == 3 && index.dtype() == paddle::DataType::INT64, op,
           ": index must be int64 [B, T, R]");
  PE_CHECK(index.shape()[0] == x.shape()[0], op, ": index has B = ", index.shape()[0], " but x has ", x.shape()[0]);
  check_same_place(x, index, op, "x", "index");
  const GatherShape g{x.shape()[0], x.shape()[1], index.shape()[1], index.shape()[2], x.shape()[2]};
  if (index.is_cpu()) {
    const int64_t* p = index.data<int64_t>();
    for (int64_t i = 0; i < index.numel(); ++i) {
      if (p[i] < 0 || p[i] >= g.N) PE_THROW_INDEX(op, ": index value ", p[i], " is out of range [0, ", g.N, ")");
    }
  }
  return g;
}

}  // namespace

std::vector<std::vector<int64_t>> RnntPruneGatherInferShape(const std::vector<int64_t>& x_shape,
                                                            const std::vector<int64_t>& index_shape) {
  PE_CHECK(x_shape.size() == 3 && index_shape.size() == 3, "rnnt_prune_gather: x must be [B, N, D], index [B, T, R]");
  return {{index_shape[0], index_shape[1], index_shape[2], x_shape[2]}};
}

std::vector<paddle::Tensor> RnntPruneGatherKernel(const paddle::Tensor& x_in, const paddle::Tensor& index_in) {
  const char* op = "rnnt_prune_gather";
  const paddle::Tensor x = dense(x_in), index = dense(index_in);
  const GatherShape g = gather_shape(x, index, op);
  paddle::Tensor out = new_output({g.B, g.T, g.R, g.D}, x.dtype(), x.place());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.is_cpu()) {
      cpu::rnnt_prune_gather<T>(ptr<T>(x), index.data<int64_t>(), mutable_ptr<T>(out), g.B, g.N, g.T * g.R, g.D);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_prune_gather<T>(ptr<T>(x), index.data<int64_t>(), mutable_ptr<T>(out), g.B, g.N, g.T * g.R, g.D,
                                x.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {out};
}

std::vector<paddle::Tensor> RnntPruneGatherGradKernel(const paddle::Tensor& x_in, const paddle::Tensor& index_in,
                                                      const paddle::Tensor& out_grad_in) {
  const char* op = "rnnt_prune_gather_grad";
  const paddle::Tensor x = dense(x_in), index = dense(index_in), out_grad = dense(out_grad_in);
  const GatherShape g = gather_shape(x, index, op);
  PE_CHECK(out_grad.shape() == std::vector<int64_t>({g.B, g.T, g.R, g.D}), op, ": out_grad must be [B, T, R, D]");
  paddle::Tensor x_grad = new_output(x.shape(), x.dtype(), x.place());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (x.is_cpu()) {
      cpu::rnnt_prune_gather_backward<T>(index.data<int64_t>(), ptr<T>(out_grad), mutable_ptr<T>(x_grad), g.B, g.N,
                                         g.T * g.R, g.D);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::rnnt_prune_gather_backward<T>(index.data<int64_t>(), ptr<T>(out_grad), mutable_ptr<T>(x_grad), g.B, g.N,
                                         g.T * g.R, g.D, x.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {x_grad};
}

}  // namespace paddle_ext
