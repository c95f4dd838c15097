// transducer_jump_loss: validation and CPU/GPU dispatch. Registered by build/generated/transducer_jump_loss.ops.cc
// (generated from ops/transducer_jump_loss.yaml), which includes this file. The Python API has checked the
// arguments with clear exceptions; these checks catch what a static graph only sees when it runs.
#include "paddle_ext/transducer_jump_loss.h"

#include <array>
#include <cstring>

#include "paddle_ext/binding/common.h"
#include "paddle_ext/binding/joiner.h"

namespace paddle_ext {
namespace {

double real_from_bits(int64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// The lattice of logits [B, T, S+1, units] (`s`: that shape, `logits`: the tensor whose place the others share).
JumpLattice jump_lattice(const paddle::Tensor& logits, const std::vector<int64_t>& s, const paddle::Tensor& symbols,
                         const paddle::optional<paddle::Tensor>& boundary, int termination_symbol, bool multiblank,
                         const std::vector<int64_t>& real_bits, const std::vector<int64_t>& durations,
                         const char* op) {
  PE_CHECK(s.size() == 4, op, ": logits must be 4-D [B, T, S+1, units], got rank ", s.size());
  PE_CHECK(symbols.shape().size() == 2 && symbols.dtype() == paddle::DataType::INT64, op,
           ": symbols must be int64 [B, S]");
  PE_CHECK(real_bits.size() == 3, op, ": real_bits must hold sigma, fastemit_lambda and the clamp's bound");
  const int n = static_cast<int>(durations.size());
  PE_CHECK(n <= kMaxJumpDurations, op, ": at most ", kMaxJumpDurations, " durations, got ", n);
  JumpLattice L{};
  L.B = s[0], L.T = s[1], L.S = symbols.shape()[1];
  L.D = multiblank ? 0 : n;
  L.C = s[3] - L.D;
  L.sigma = real_from_bits(real_bits[0]);
  L.fastemit_lambda = real_from_bits(real_bits[1]);
  L.clamp = real_from_bits(real_bits[2]);
  PE_CHECK(L.clamp > 0, op, ": the clamp's bound must be > 0 (+inf: off), got ", L.clamp);
  PE_CHECK(symbols.shape()[0] == L.B, op, ": symbols has ", symbols.shape()[0], " rows but logits has B = ", L.B);
  PE_CHECK(s[2] == L.S + 1, op, ": logits must be [B, T, S+1, units] with S = ", L.S, " (symbols [B, S]), got ",
           s[2]);
  PE_CHECK(termination_symbol >= 0 && termination_symbol < L.C, op, ": termination_symbol must be in [0, C = ", L.C,
           "), got ", termination_symbol);
  for (int k = 0; k < n; ++k) {
    PE_CHECK(durations[k] >= (multiblank ? 2 : 0), op, ": duration ", durations[k], " must be >= ",
             multiblank ? 2 : 0);
  }
  if (multiblank) {
    PE_CHECK(termination_symbol - n >= 0, op, ": ", n, " big blanks need termination_symbol >= ", n, ", got ",
             termination_symbol);
    L.arcs = multiblank_arcs(durations.data(), n, termination_symbol);
  } else {
    L.arcs = tdt_arcs(durations.data(), n, termination_symbol);
  }
  check_same_place(logits, symbols, op, "logits", "symbols");
  if (boundary) {
    PE_CHECK(boundary->dtype() == paddle::DataType::INT64 && boundary->shape() == std::vector<int64_t>({L.B, 4}), op,
             ": boundary must be int64 [B, 4]");
    check_same_place(logits, *boundary, op, "logits", "boundary");
  }
  return L;
}

// On CPU: boundary rows inside [0, S] x [0, T]; a GPU kernel reads them as given.
void check_boundary_values(const paddle::Tensor* boundary, const JumpLattice& L, const char* op) {
  if (boundary == nullptr || !boundary->is_cpu()) return;
  const int64_t* r = boundary->data<int64_t>();
  for (int64_t b = 0; b < L.B; ++b, r += 4) {
    if (!(0 <= r[0] && r[0] <= r[2] && r[2] <= L.S && 0 <= r[1] && r[1] <= r[3] && r[3] <= L.T))
      PE_THROW(op, ": boundary row ", b, " = [", r[0], ", ", r[1], ", ", r[2], ", ", r[3],
               "] breaks 0 <= s_begin <= s_end <= S, 0 <= t_begin <= t_end <= T (S = ", L.S, ", T = ", L.T, ")");
  }
}

// On CPU: symbols in [0, C), and the boundary's rows; a GPU kernel reads them as given.
void check_values(const paddle::Tensor& symbols, const paddle::Tensor* boundary, const JumpLattice& L,
                  const char* op) {
  if (symbols.is_cpu()) {
    const int64_t* sy = symbols.data<int64_t>();
    for (int64_t i = 0; i < symbols.numel(); ++i) {
      if (sy[i] < 0 || sy[i] >= L.C) PE_THROW_INDEX(op, ": symbols[", i / L.S, ", ", i % L.S, "] = ", sy[i],
                                                    " is out of range [0, ", L.C, ")");
    }
  }
  check_boundary_values(boundary, L, op);
}

const int64_t* boundary_data(const paddle::optional<paddle::Tensor>& boundary, paddle::Tensor* holder) {
  if (!boundary) return nullptr;
  *holder = dense(*boundary);
  return holder->data<int64_t>();
}

// boundary's data (null without one), once check_values passed.
const int64_t* checked_boundary(const paddle::Tensor& symbols, const paddle::optional<paddle::Tensor>& boundary_in,
                                paddle::Tensor* boundary, const JumpLattice& L, const char* op) {
  const int64_t* data = boundary_data(boundary_in, boundary);
  check_values(symbols, boundary_in ? boundary : nullptr, L, op);
  return data;
}

// loss [B] (like's dtype), lse [B, T, S+1, 4], alpha and beta [B, T+1, S+1] (float64), on like's place.
std::array<paddle::Tensor, 4> forward_outputs(const JumpLattice& L, const paddle::Tensor& like) {
  const auto f64 = paddle::DataType::FLOAT64;
  return {new_output({L.B}, like.dtype(), like.place()), new_output({L.B, L.T, L.S + 1, 4}, f64, like.place()),
          new_output({L.B, L.T + 1, L.S + 1}, f64, like.place()), new_output({L.B, L.T + 1, L.S + 1}, f64, like.place())};
}

}  // namespace

std::vector<std::vector<int64_t>> TransducerJumpInferShape(const std::vector<int64_t>& logits_shape,
                                                           const std::vector<int64_t>& symbols_shape,
                                                           const paddle::optional<std::vector<int64_t>>&) {
  PE_CHECK(logits_shape.size() == 4 && symbols_shape.size() == 2,
           "transducer_jump_loss: logits must be [B, T, S+1, units] and symbols [B, S]");
  const int64_t B = logits_shape[0], T = logits_shape[1], S1 = logits_shape[2];
  const int64_t T1 = T < 0 ? -1 : T + 1;
  return {{B}, {B, T, S1, 4}, {B, T1, S1}, {B, T1, S1}};
}

std::vector<paddle::DataType> TransducerJumpInferDtype(const paddle::DataType& logits, const paddle::DataType&,
                                                       const paddle::optional<paddle::DataType>&) {
  return {logits, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64};
}

std::vector<paddle::Tensor> TransducerJumpKernel(const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
                                                 const paddle::optional<paddle::Tensor>& boundary_in,
                                                 int termination_symbol, bool multiblank,
                                                 const std::vector<int64_t>& real_bits,
                                                 const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_loss";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in);
  const JumpLattice L =
      jump_lattice(logits, logits.shape(), symbols, boundary_in, termination_symbol, multiblank, real_bits, durations,
                   op);
  paddle::Tensor boundary;
  const int64_t* bptr = checked_boundary(symbols, boundary_in, &boundary, L, op);
  std::array<paddle::Tensor, 4> out = forward_outputs(L, logits);
  paddle::Tensor &loss = out[0], &lse = out[1], &alpha = out[2], &beta = out[3];
  dispatch_float_double(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (logits.is_cpu()) {
      cpu::transducer_jump_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), bptr, mutable_ptr<double>(lse),
                                      mutable_ptr<double>(alpha), mutable_ptr<double>(beta), mutable_ptr<T>(loss), L);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::transducer_jump_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), bptr, mutable_ptr<double>(lse),
                                      mutable_ptr<double>(alpha), mutable_ptr<double>(beta), mutable_ptr<T>(loss), L,
                                      logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {loss, lse, alpha, beta};
}

std::vector<paddle::Tensor> TransducerJumpGradKernel(
    const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
    const paddle::optional<paddle::Tensor>& boundary_in, const paddle::Tensor& lse_in, const paddle::Tensor& alpha_in,
    const paddle::Tensor& beta_in, const paddle::Tensor& loss_grad_in, int termination_symbol, bool multiblank,
    const std::vector<int64_t>& real_bits, const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_loss_grad";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in), lse = dense(lse_in),
                       alpha = dense(alpha_in), beta = dense(beta_in), loss_grad = dense(loss_grad_in);
  const JumpLattice L =
      jump_lattice(logits, logits.shape(), symbols, boundary_in, termination_symbol, multiblank, real_bits, durations,
                   op);
  paddle::Tensor boundary;
  const int64_t* bptr = checked_boundary(symbols, boundary_in, &boundary, L, op);
  const std::vector<int64_t> lattice_shape{L.B, L.T + 1, L.S + 1};
  PE_CHECK(lse.shape() == std::vector<int64_t>({L.B, L.T, L.S + 1, 4}) && alpha.shape() == lattice_shape &&
               beta.shape() == lattice_shape && loss_grad.numel() == L.B,
           op, ": lse, alpha, beta and loss_grad must be [B, T, S+1, 4], [B, T+1, S+1] (twice) and [B]");
  paddle::Tensor logits_grad = new_output(logits.shape(), logits.dtype(), logits.place());
  dispatch_float_double(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (logits.is_cpu()) {
      cpu::transducer_jump_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), bptr, ptr<double>(lse),
                                       ptr<double>(alpha), ptr<double>(beta), ptr<T>(loss_grad),
                                       mutable_ptr<T>(logits_grad), L);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::transducer_jump_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), bptr, ptr<double>(lse),
                                       ptr<double>(alpha), ptr<double>(beta), ptr<T>(loss_grad),
                                       mutable_ptr<T>(logits_grad), L, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {logits_grad};
}

// The joiner fused in: the lattice of the joiner's logits [B, T, S+1, X] (lm [B, S+1, J], weight [J, X]).
namespace {

JumpLattice joiner_lattice(const paddle::Tensor& am, const paddle::Tensor& lm, const paddle::Tensor& weight,
                           const paddle::Tensor& bias, const paddle::Tensor& symbols,
                           const paddle::optional<paddle::Tensor>& boundary, int termination_symbol, bool multiblank,
                           int activation, const std::vector<int64_t>& real_bits,
                           const std::vector<int64_t>& durations, const char* op, JoinerShape* j) {
  *j = joiner_shape(am, lm, weight, bias, nullptr, activation, op);
  return jump_lattice(am, {j->B, j->T, j->U, j->X}, symbols, boundary, termination_symbol, multiblank, real_bits,
                      durations, op);
}

}  // namespace

std::vector<std::vector<int64_t>> JumpJoinerInferShape(const std::vector<int64_t>& am_shape,
                                                       const std::vector<int64_t>& lm_shape,
                                                       const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                       const std::vector<int64_t>&,
                                                       const paddle::optional<std::vector<int64_t>>&) {
  PE_CHECK(am_shape.size() == 3 && lm_shape.size() == 3, "transducer_jump_joiner_loss: am must be [B, T, J] and lm "
           "[B, S+1, J]");
  const int64_t B = am_shape[0], T = am_shape[1], S1 = lm_shape[1], T1 = T < 0 ? -1 : T + 1;
  return {{B}, {B, T, S1, 4}, {B, T1, S1}, {B, T1, S1}};
}

std::vector<paddle::DataType> JumpJoinerInferDtype(const paddle::DataType& am, const paddle::DataType&,
                                                   const paddle::DataType&, const paddle::DataType&,
                                                   const paddle::DataType&, const paddle::optional<paddle::DataType>&) {
  return {am, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64};
}

std::vector<paddle::Tensor> JumpJoinerKernel(const paddle::Tensor& am_in, const paddle::Tensor& lm_in,
                                             const paddle::Tensor& weight_in, const paddle::Tensor& bias_in,
                                             const paddle::Tensor& symbols_in,
                                             const paddle::optional<paddle::Tensor>& boundary_in,
                                             int termination_symbol, bool multiblank, int activation,
                                             const std::vector<int64_t>& real_bits,
                                             const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_joiner_loss";
  const paddle::Tensor am = dense(am_in), lm = dense(lm_in), weight = dense(weight_in), bias = dense(bias_in),
                       symbols = dense(symbols_in);
  JoinerShape j;
  const JumpLattice L = joiner_lattice(am, lm, weight, bias, symbols, boundary_in, termination_symbol, multiblank,
                                       activation, real_bits, durations, op, &j);
  paddle::Tensor boundary;
  const int64_t* bptr = checked_boundary(symbols, boundary_in, &boundary, L, op);
  std::array<paddle::Tensor, 4> out = forward_outputs(L, am);  // loss, lse, alpha, beta
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::jump_joiner_forward<T>(ptr<T>(am), ptr<T>(lm), ptr<T>(weight), ptr<T>(bias), symbols.data<int64_t>(), bptr,
                                mutable_ptr<double>(out[1]), mutable_ptr<double>(out[2]), mutable_ptr<double>(out[3]),
                                mutable_ptr<T>(out[0]), L, j);
  });
  return {out.begin(), out.end()};
}

std::vector<paddle::Tensor> JumpJoinerGradKernel(
    const paddle::Tensor& am_in, const paddle::Tensor& lm_in, const paddle::Tensor& weight_in,
    const paddle::Tensor& bias_in, const paddle::Tensor& symbols_in, const paddle::optional<paddle::Tensor>& boundary_in,
    const paddle::Tensor& lse_in, const paddle::Tensor& alpha_in, const paddle::Tensor& beta_in,
    const paddle::Tensor& loss_grad_in, int termination_symbol, bool multiblank, int activation,
    const std::vector<int64_t>& real_bits, const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_joiner_loss_grad";
  const paddle::Tensor am = dense(am_in), lm = dense(lm_in), weight = dense(weight_in), bias = dense(bias_in),
                       symbols = dense(symbols_in), lse = dense(lse_in), alpha = dense(alpha_in),
                       beta = dense(beta_in), loss_grad = dense(loss_grad_in);
  JoinerShape j;
  const JumpLattice L = joiner_lattice(am, lm, weight, bias, symbols, boundary_in, termination_symbol, multiblank,
                                       activation, real_bits, durations, op, &j);
  paddle::Tensor boundary;
  const int64_t* bptr = checked_boundary(symbols, boundary_in, &boundary, L, op);
  const std::vector<int64_t> lattice_shape{L.B, L.T + 1, L.S + 1};
  PE_CHECK(lse.shape() == std::vector<int64_t>({L.B, L.T, L.S + 1, 4}) && alpha.shape() == lattice_shape &&
               beta.shape() == lattice_shape && loss_grad.numel() == L.B && loss_grad.dtype() == am.dtype(),
           op, ": lse, alpha, beta and loss_grad must be [B, T, S+1, 4], [B, T+1, S+1] (twice) and [B]");
  std::vector<paddle::Tensor> g = joiner_grads(am, lm, weight, bias);
  dispatch_float_double(am.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::jump_joiner_backward<T>(ptr<T>(am), ptr<T>(lm), ptr<T>(weight), ptr<T>(bias), symbols.data<int64_t>(), bptr,
                                 ptr<double>(lse), ptr<double>(alpha), ptr<double>(beta), ptr<T>(loss_grad),
                                 mutable_ptr<T>(g[0]), mutable_ptr<T>(g[1]), mutable_ptr<T>(g[2]), mutable_ptr<T>(g[3]),
                                 L, j);
  });
  return g;
}

// The loss in two steps (the joiner composed in blocks of frames). Step one: a block's logits -> the arc
// weights of its nodes; `arcs` is the arc table's size the caller expects (the weights' last dim).
namespace {

JumpLattice arc_weights_lattice(const paddle::Tensor& logits, const paddle::Tensor& symbols, int arcs,
                                int termination_symbol, bool multiblank, const std::vector<int64_t>& real_bits,
                                const std::vector<int64_t>& durations, const char* op) {
  const JumpLattice L = jump_lattice(logits, logits.shape(), symbols, paddle::optional<paddle::Tensor>(),
                                     termination_symbol, multiblank, real_bits, durations, op);
  PE_CHECK(arcs == L.arcs.count, op, ": arcs must be the arc table's size ", L.arcs.count, ", got ", arcs);
  check_values(symbols, nullptr, L, op);
  return L;
}

// Step two's lattice: weights [B, T, S+1, K] float64 of the arc table of `durations` (the token units do not
// matter here); real_bits holds fastemit_lambda.
JumpLattice weights_lattice(const paddle::Tensor& weights, const paddle::optional<paddle::Tensor>& boundary,
                            bool multiblank, const std::vector<int64_t>& real_bits,
                            const std::vector<int64_t>& durations, const char* op) {
  const std::vector<int64_t>& s = weights.shape();
  PE_CHECK(s.size() == 4 && weights.dtype() == paddle::DataType::FLOAT64, op,
           ": weights must be float64 [B, T, S+1, K]");
  PE_CHECK(real_bits.size() == 1, op, ": real_bits must hold fastemit_lambda");
  const int n = static_cast<int>(durations.size());
  PE_CHECK(n <= kMaxJumpDurations, op, ": at most ", kMaxJumpDurations, " durations, got ", n);
  JumpLattice L{};
  L.B = s[0], L.T = s[1], L.S = s[2] - 1, L.C = 1;
  L.fastemit_lambda = real_from_bits(real_bits[0]);
  L.clamp = -neg_inf<double>();
  L.arcs = multiblank ? multiblank_arcs(durations.data(), n, n) : tdt_arcs(durations.data(), n, 0);
  PE_CHECK(s[3] == L.arcs.count, op, ": weights must have K = ", L.arcs.count, " arcs a node, got ", s[3]);
  if (boundary) {
    PE_CHECK(boundary->dtype() == paddle::DataType::INT64 && boundary->shape() == std::vector<int64_t>({L.B, 4}), op,
             ": boundary must be int64 [B, 4]");
    check_same_place(weights, *boundary, op, "weights", "boundary");
  }
  return L;
}

}  // namespace

std::vector<std::vector<int64_t>> JumpArcWeightsInferShape(const std::vector<int64_t>& logits_shape,
                                                           const std::vector<int64_t>&, int arcs) {
  PE_CHECK(logits_shape.size() == 4, "transducer_jump_arc_weights: logits must be [B, T, S+1, units]");
  const int64_t B = logits_shape[0], T = logits_shape[1], S1 = logits_shape[2];
  return {{B, T, S1, arcs}, {B, T, S1, 4}, {B}};
}

std::vector<paddle::DataType> JumpArcWeightsInferDtype(const paddle::DataType& logits, const paddle::DataType&) {
  return {paddle::DataType::FLOAT64, paddle::DataType::FLOAT64, logits};
}

std::vector<paddle::Tensor> JumpArcWeightsKernel(const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
                                                 int arcs, int termination_symbol, bool multiblank,
                                                 const std::vector<int64_t>& real_bits,
                                                 const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_arc_weights";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in);
  const JumpLattice L =
      arc_weights_lattice(logits, symbols, arcs, termination_symbol, multiblank, real_bits, durations, op);
  const auto f64 = paddle::DataType::FLOAT64;
  paddle::Tensor weights = new_output({L.B, L.T, L.S + 1, arcs}, f64, logits.place()),
                 lse = new_output({L.B, L.T, L.S + 1, 4}, f64, logits.place());
  dispatch_float_double(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (logits.is_cpu()) {
      cpu::jump_arc_weights_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), mutable_ptr<double>(lse),
                                       mutable_ptr<double>(weights), L);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::jump_arc_weights_forward<T>(ptr<T>(logits), symbols.data<int64_t>(), mutable_ptr<double>(lse),
                                       mutable_ptr<double>(weights), L, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {weights, lse, zero_scale(L.B, logits.dtype(), logits.place())};
}

std::vector<paddle::Tensor> JumpArcWeightsGradKernel(const paddle::Tensor& logits_in, const paddle::Tensor& symbols_in,
                                                     const paddle::Tensor& lse_in, const paddle::Tensor& weights_grad_in,
                                                     const paddle::Tensor& scale_grad_in, int arcs,
                                                     int termination_symbol, bool multiblank,
                                                     const std::vector<int64_t>& real_bits,
                                                     const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_arc_weights_grad";
  const paddle::Tensor logits = dense(logits_in), symbols = dense(symbols_in), lse = dense(lse_in);
  const JumpLattice L =
      arc_weights_lattice(logits, symbols, arcs, termination_symbol, multiblank, real_bits, durations, op);
  const std::vector<int64_t> weights_shape{L.B, L.T, L.S + 1, arcs};
  const paddle::Tensor weights_grad =
      grad_or_zeros(weights_grad_in, weights_shape, paddle::DataType::FLOAT64, logits.place());
  const paddle::Tensor scale_grad =
      clamp_scale_grad(L.clamp, L.B, scale_grad_in, logits.dtype(), logits.place(), op);
  PE_CHECK(weights_grad.shape() == weights_shape && weights_grad.dtype() == paddle::DataType::FLOAT64 &&
               lse.shape() == std::vector<int64_t>({L.B, L.T, L.S + 1, 4}),
           op, ": weights_grad and lse must be float64 [B, T, S+1, K] and [B, T, S+1, 4]");
  paddle::Tensor logits_grad = new_output(logits.shape(), logits.dtype(), logits.place());
  dispatch_float_double(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (logits.is_cpu()) {
      cpu::jump_arc_weights_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), ptr<double>(lse),
                                        ptr<double>(weights_grad), scale_ptr<T>(scale_grad),
                                        mutable_ptr<T>(logits_grad), L);
    } else {
#ifdef PADDLE_EXT_WITH_CUDA
      gpu::jump_arc_weights_backward<T>(ptr<T>(logits), symbols.data<int64_t>(), ptr<double>(lse),
                                        ptr<double>(weights_grad), scale_ptr<T>(scale_grad),
                                        mutable_ptr<T>(logits_grad), L, logits.stream());
#else
      throw_no_cuda(op);
#endif
    }
  });
  return {logits_grad};
}

// Step two: the loss on all the nodes' arc weights.
std::vector<std::vector<int64_t>> JumpWeightsLossInferShape(const std::vector<int64_t>& weights_shape,
                                                            const paddle::optional<std::vector<int64_t>>&) {
  PE_CHECK(weights_shape.size() == 4, "transducer_jump_weights_loss: weights must be [B, T, S+1, K]");
  const int64_t B = weights_shape[0], T = weights_shape[1], S1 = weights_shape[2], T1 = T < 0 ? -1 : T + 1;
  return {{B}, {B, T1, S1}, {B, T1, S1}};
}

std::vector<paddle::DataType> JumpWeightsLossInferDtype(const paddle::DataType&,
                                                        const paddle::optional<paddle::DataType>&) {
  return {paddle::DataType::FLOAT64, paddle::DataType::FLOAT64, paddle::DataType::FLOAT64};
}

std::vector<paddle::Tensor> JumpWeightsLossKernel(const paddle::Tensor& weights_in,
                                                  const paddle::optional<paddle::Tensor>& boundary_in, bool multiblank,
                                                  const std::vector<int64_t>& real_bits,
                                                  const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_weights_loss";
  const paddle::Tensor weights = dense(weights_in);
  const JumpLattice L = weights_lattice(weights, boundary_in, multiblank, real_bits, durations, op);
  paddle::Tensor boundary;
  const int64_t* bptr = boundary_data(boundary_in, &boundary);
  check_boundary_values(boundary_in ? &boundary : nullptr, L, op);
  const auto f64 = paddle::DataType::FLOAT64;
  paddle::Tensor loss = new_output({L.B}, f64, weights.place()),
                 alpha = new_output({L.B, L.T + 1, L.S + 1}, f64, weights.place()),
                 beta = new_output({L.B, L.T + 1, L.S + 1}, f64, weights.place());
  if (weights.is_cpu()) {
    cpu::jump_weights_loss_forward(ptr<double>(weights), bptr, mutable_ptr<double>(alpha), mutable_ptr<double>(beta),
                                   mutable_ptr<double>(loss), L);
  } else {
#ifdef PADDLE_EXT_WITH_CUDA
    gpu::jump_weights_loss_forward(ptr<double>(weights), bptr, mutable_ptr<double>(alpha), mutable_ptr<double>(beta),
                                   mutable_ptr<double>(loss), L, weights.stream());
#else
    throw_no_cuda(op);
#endif
  }
  return {loss, alpha, beta};
}

std::vector<paddle::Tensor> JumpWeightsLossGradKernel(const paddle::Tensor& weights_in,
                                                      const paddle::optional<paddle::Tensor>& boundary_in,
                                                      const paddle::Tensor& alpha_in, const paddle::Tensor& beta_in,
                                                      const paddle::Tensor& loss_grad_in, bool multiblank,
                                                      const std::vector<int64_t>& real_bits,
                                                      const std::vector<int64_t>& durations) {
  const char* op = "transducer_jump_weights_loss_grad";
  const paddle::Tensor weights = dense(weights_in), alpha = dense(alpha_in), beta = dense(beta_in),
                       loss_grad = dense(loss_grad_in);
  const JumpLattice L = weights_lattice(weights, boundary_in, multiblank, real_bits, durations, op);
  paddle::Tensor boundary;
  const int64_t* bptr = boundary_data(boundary_in, &boundary);
  check_boundary_values(boundary_in ? &boundary : nullptr, L, op);
  const std::vector<int64_t> lattice_shape{L.B, L.T + 1, L.S + 1};
  PE_CHECK(alpha.shape() == lattice_shape && beta.shape() == lattice_shape && loss_grad.numel() == L.B &&
               loss_grad.dtype() == paddle::DataType::FLOAT64,
           op, ": alpha, beta and loss_grad must be float64 [B, T+1, S+1] (twice) and [B]");
  paddle::Tensor weights_grad = new_output(weights.shape(), weights.dtype(), weights.place());
  if (weights.is_cpu()) {
    cpu::jump_weights_loss_backward(ptr<double>(weights), bptr, ptr<double>(alpha), ptr<double>(beta),
                                    ptr<double>(loss_grad), mutable_ptr<double>(weights_grad), L);
  } else {
#ifdef PADDLE_EXT_WITH_CUDA
    gpu::jump_weights_loss_backward(ptr<double>(weights), bptr, ptr<double>(alpha), ptr<double>(beta),
                                    ptr<double>(loss_grad), mutable_ptr<double>(weights_grad), L, weights.stream());
#else
    throw_no_cuda(op);
#endif
  }
  return {weights_grad};
}

}  // namespace paddle_ext
