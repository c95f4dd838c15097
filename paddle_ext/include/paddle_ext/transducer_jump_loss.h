// transducer_jump_loss: transducer losses whose arcs jump over frames, TDT (token-and-duration) and
// multi-blank RNN-T (docs/transducer_jump_loss.md). Declarations of the raw-pointer kernels (cpu/ and gpu/) and the
// lattice math both share, written once here.
//
// Item b's lattice has nodes (t, s) in its box t0 <= t <= t1, s0 <= s <= s1 (boundary rows (s0, t0, s1, t1);
// default (0, 0, S, T)). Every node with t < t1 has the same K arcs, listed once in a JumpArcs table: arc a
// moves (dt_a, ds_a) and emits one token unit (the blank, a fixed unit, or the node's symbol symbols[b, s]),
// with, for TDT, one duration unit. A blank arc (ds = 0, dt >= 1) may land on t1; a symbol arc (ds = 1,
// dt >= 0) must land before it and needs s < s1. Its weight at node (t, s) of logits row x = logits[b, t, s]:
//   w_a = (x[token] - lse(token head)) - sigma + (x[C + dur] - lse(duration head))   (no duration term without
// a duration head). A head of only -inf gives its arcs weight -inf (no arc), not NaN.
// alpha(t0, s0) = 0, alpha(n) = logsumexp over arcs a into n of alpha(source) + w_a(source);
// beta(t1, s1) = 0, beta(n) = logsumexp over arcs a out of n of w_a(n) + beta(dest); loss = -beta(t0, s0).
// Every arc raises t + s, so both run over anti-diagonals (GPU) or in (t, s) order (CPU).
// Grad of loss_grad[b] * loss w.r.t. a unit j of a head with softmax p at node n:
//   g (p_j N(n) - E_j(n)),   gamma_a = exp(alpha(n) + w_a(n) + beta(dest) - logZ) (x (1 + fastemit) for ds = 1),
// N the sum of gamma over the node's arcs, E_j over those emitting j. An item with logZ = -inf gets zeros.
// With the clamp on (grad_clamp.h), gamma leaves out g, each token unit's value is clamped, then every value
// is multiplied by g; the duration units are not clamped (NeMo's TDT clamps only the token logits' grads).
// Lattice values are float64 for every input dtype; a node's heads (max, log_sum) per head are kept for the
// grad as lse [B, T, S+1, 4] float64.
#pragma once

#include <cmath>

#include "paddle_ext/common.h"
#include "paddle_ext/grad_clamp.h"
#include "paddle_ext/joiner.h"
#include "paddle_ext/log_math.h"
#include "paddle_ext/rnnt_joint_logprobs.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

constexpr int kMaxJumpArcs = 40;       // TDT: at most 2 x 16 durations; multi-blank: 1 + 16 big blanks + 1
constexpr int kMaxJumpDurations = 16;  // the Python API rejects longer lists
constexpr int64_t kJumpSymbolUnit = -1;  // an arc's token is the node's symbol

struct JumpArcs {
  int count;
  int dt[kMaxJumpArcs];
  int ds[kMaxJumpArcs];
  int64_t token[kMaxJumpArcs];  // a unit in [0, C), or kJumpSymbolUnit
  int dur[kMaxJumpArcs];        // a duration unit in [0, D), or -1 (no duration head)
  int group[kMaxJumpArcs];      // the first arc with the same token entry (symbol arcs: the first symbol arc)
};

inline JumpArcs jump_grouped(JumpArcs a) {
  for (int k = 0; k < a.count; ++k) {
    a.group[k] = k;
    for (int j = 0; j < k; ++j)
      if (a.token[j] == a.token[k]) {
        a.group[k] = j;
        break;
      }
  }
  return a;
}

struct JumpLattice {
  index_t B, T, S, C, D;  // logits [B, T, S+1, C + D]: C token units, D duration units (0 for multi-blank)
  double sigma, fastemit_lambda;
  double clamp;  // the grad clamp's bound; +inf: off
  JumpArcs arcs;
  PE_HOSTDEVICE index_t X() const { return C + D; }
  PE_HOSTDEVICE index_t node(index_t b, index_t t, index_t s) const { return (b * T + t) * (S + 1) + s; }
  PE_HOSTDEVICE index_t lattice(index_t b, index_t t, index_t s) const { return (b * (T + 1) + t) * (S + 1) + s; }
};

// TDT: blank arcs for the durations >= 1, symbol arcs for all durations, each with that duration unit.
inline JumpArcs tdt_arcs(const int64_t* durations, int count, int64_t blank) {
  JumpArcs a{};
  for (int k = 0; k < count; ++k) {
    if (durations[k] >= 1) a.dt[a.count] = int(durations[k]), a.ds[a.count] = 0, a.token[a.count] = blank,
                           a.dur[a.count++] = k;
  }
  for (int k = 0; k < count; ++k) a.dt[a.count] = int(durations[k]), a.ds[a.count] = 1,
                                  a.token[a.count] = kJumpSymbolUnit, a.dur[a.count++] = k;
  return jump_grouped(a);
}

// Multi-blank: the blank moves one frame, big blank i (unit blank - 1 - i) big_durations[i], a symbol none.
inline JumpArcs multiblank_arcs(const int64_t* big_durations, int count, int64_t blank) {
  JumpArcs a{};
  a.dt[0] = 1, a.ds[0] = 0, a.token[0] = blank, a.dur[0] = -1;
  for (int i = 0; i < count; ++i) a.dt[i + 1] = int(big_durations[i]), a.ds[i + 1] = 0, a.token[i + 1] = blank - 1 - i,
                                  a.dur[i + 1] = -1;
  a.dt[count + 1] = 0, a.ds[count + 1] = 1, a.token[count + 1] = kJumpSymbolUnit, a.dur[count + 1] = -1;
  a.count = count + 2;
  return jump_grouped(a);
}

struct JumpBox {
  index_t s0, t0, s1, t1;
};
PE_HOSTDEVICE inline JumpBox jump_box(const int64_t* boundary, index_t b, const JumpLattice& L) {
  if (boundary == nullptr) return {0, 0, L.S, L.T};
  const int64_t* r = boundary + 4 * b;
  return {r[0], r[1], r[2], r[3]};
}

// log-softmax of x from its head's (max, log_sum); a head of only -inf gives -inf.
PE_HOSTDEVICE inline double jump_logprob(double x, double max, double log_sum) {
  return max == neg_inf<double>() ? max : (x - max) - log_sum;
}

// The token unit arc a emits at a node whose symbol is `symbol`.
PE_HOSTDEVICE inline int64_t jump_token(const JumpArcs& a, int k, int64_t symbol) {
  return a.token[k] == kJumpSymbolUnit ? symbol : a.token[k];
}

// Weight of arc k at the node with logits row x, heads h (lse [4]) and symbol `symbol`.
template <typename T>
PE_HOSTDEVICE inline double jump_weight(const JumpLattice& L, int k, const T* x, const double* h, int64_t symbol) {
  const JumpArcs& a = L.arcs;
  double w = jump_logprob(static_cast<double>(load(x[jump_token(a, k, symbol)])), h[0], h[1]) - L.sigma;
  if (a.dur[k] >= 0) w += jump_logprob(static_cast<double>(load(x[L.C + a.dur[k]])), h[2], h[3]);
  return w;
}

// Whether arc k from (t, s) (t < t1, inside the box) lands inside the box.
PE_HOSTDEVICE inline bool jump_lands(const JumpArcs& a, int k, index_t t, index_t s, const JumpBox& box) {
  return a.ds[k] == 0 ? t + a.dt[k] <= box.t1 : (s < box.s1 && t + a.dt[k] < box.t1);
}

PE_HOSTDEVICE inline int64_t jump_symbol(const int64_t* symbols, const JumpLattice& L, index_t b, index_t s) {
  return s < L.S ? symbols[b * L.S + s] : int64_t(0);  // s = S has no symbol arc; any unit reads safely
}

// The K arc weights of one node, read while its logits row is in cache: the recursions then touch only
// these (K doubles per node) instead of K scattered logits rows.
template <typename T>
PE_HOSTDEVICE inline void jump_node_weights(const JumpLattice& L, const T* x, const double* h, int64_t symbol,
                                            double* w) {
  for (int k = 0; k < L.arcs.count; ++k) w[k] = jump_weight(L, k, x, h, symbol);
}

// The recursions as terms and one log-sum-exp, so that the CPU can exponentiate K terms in SIMD lanes and
// the GPU with the scalar LogSumAcc below; -inf marks an arc that does not count.

// Terms of alpha(t, s) for (t, s) != (t0, s0): alpha(source) + w_k(source) for each arc k coming in.
PE_HOSTDEVICE inline void jump_alpha_terms(const JumpLattice& L, const double* weights, const double* alpha, index_t b,
                                           index_t t, index_t s, const JumpBox& box, double* v) {
  const int K = L.arcs.count;
  for (int k = 0; k < K; ++k) {
    const index_t ts = t - L.arcs.dt[k], ss = s - L.arcs.ds[k];
    v[k] = neg_inf<double>();
    if (ts < box.t0 || ss < box.s0 || !jump_lands(L.arcs, k, ts, ss, box)) continue;
    const double from = alpha[L.lattice(b, ts, ss)];
    if (from != neg_inf<double>()) v[k] = from + weights[L.node(b, ts, ss) * K + k];
  }
}

// Terms of beta(t, s) for t < t1: w_k(t, s) + beta(dest) for each arc k going out.
PE_HOSTDEVICE inline void jump_beta_terms(const JumpLattice& L, const double* weights, const double* beta, index_t b,
                                          index_t t, index_t s, const JumpBox& box, double* v) {
  const int K = L.arcs.count;
  const double* w = weights + L.node(b, t, s) * K;
  for (int k = 0; k < K; ++k) {
    v[k] = neg_inf<double>();
    if (!jump_lands(L.arcs, k, t, s, box)) continue;
    const double to = beta[L.lattice(b, t + L.arcs.dt[k], s + L.arcs.ds[k])];
    if (to != neg_inf<double>()) v[k] = w[k] + to;
  }
}

// Exponents of node (t, s)'s arc occupancies from its K arc weights w: e[k] = alpha + w[k] + beta(dest) - logZ
// (-inf for arcs that leave the box or reach no end). False when the node has no occupancy at all (outside the
// box, logZ not finite, unreachable): then its grad is zero.
PE_HOSTDEVICE inline bool jump_weight_occupancy_exponents(const JumpLattice& L, const double* w, const double* alpha,
                                                          const double* beta, index_t b, index_t t, index_t s,
                                                          const JumpBox& box, double* e) {
  const double log_z = beta[L.lattice(b, box.t0, box.s0)];
  if (t < box.t0 || t >= box.t1 || s < box.s0 || s > box.s1 || !(log_z > neg_inf<double>()) ||
      log_z == -neg_inf<double>()) {
    return false;
  }
  const double from = alpha[L.lattice(b, t, s)];
  if (from == neg_inf<double>()) return false;
  for (int k = 0; k < L.arcs.count; ++k) {
    e[k] = neg_inf<double>();
    if (!jump_lands(L.arcs, k, t, s, box)) continue;
    const double to = beta[L.lattice(b, t + L.arcs.dt[k], s + L.arcs.ds[k])];
    if (to != neg_inf<double>()) e[k] = from + w[k] + to - log_z;
  }
  return true;
}

// The same from the node's logits row x (its weights formed here).
template <typename T>
PE_HOSTDEVICE inline bool jump_occupancy_exponents(const JumpLattice& L, const T* x, const int64_t* symbols,
                                                   const double* lse, const double* alpha, const double* beta,
                                                   index_t b, index_t t, index_t s, const JumpBox& box, double* e) {
  double w[kMaxJumpArcs];
  jump_node_weights(L, x, lse + 4 * L.node(b, t, s), jump_symbol(symbols, L, b, s), w);
  return jump_weight_occupancy_exponents(L, w, alpha, beta, b, t, s, box, e);
}

// An arc's occupancy factor besides exp(e): the item's loss grad g, times 1 + fastemit_lambda on symbol arcs.
PE_HOSTDEVICE inline double jump_arc_scale(const JumpLattice& L, int k, double g) {
  return L.arcs.ds[k] == 1 ? g * (1.0 + L.fastemit_lambda) : g;
}

// The loss grad g as the occupancies carry it: g, or with the clamp on 1 (jump_finish scales each value by g
// after clamping it); 0 stays 0, so rows of an item with g = 0 stay zero either way.
PE_HOSTDEVICE inline double jump_fold(const JumpLattice& L, double g) {
  return g == 0.0 || !clamp_on(L.clamp) ? g : 1.0;
}

// A grad value v computed with jump_fold(L, g): as it is with the clamp off, else clamped (token units) and
// times g.
PE_HOSTDEVICE inline double jump_finish(const JumpLattice& L, double v, double g, bool token) {
  if (!clamp_on(L.clamp)) return v;
  return (token ? clamp_grad(v, L.clamp) : v) * g;
}

// log(sum(exp(v[0, n)))) with log_add_exp's rules, one term at a time (the GPU's way).
PE_HOSTDEVICE inline double jump_log_sum(const double* v, int n) {
  LogSumAcc<double> acc;
  for (int k = 0; k < n; ++k) acc.add(v[k]);
  return acc.value();
}

// The occupancies gamma[k] of node (t, s)'s arcs, scaled (jump_arc_scale), one exp at a time; returns their
// sum N (0 with every gamma 0 for a node without occupancy, or g = 0).
template <typename T>
PE_HOSTDEVICE inline double jump_occupancy(const JumpLattice& L, const T* logits, const int64_t* symbols,
                                           const double* lse, const double* alpha, const double* beta, index_t b,
                                           index_t t, index_t s, const JumpBox& box, double g, double* gamma) {
  const bool any = g != 0.0 && jump_occupancy_exponents(L, logits + L.node(b, t, s) * L.X(), symbols, lse, alpha,
                                                        beta, b, t, s, box, gamma);
  double total = 0.0;
  for (int k = 0; k < L.arcs.count; ++k) {
    gamma[k] = any ? jump_arc_scale(L, k, g) * std::exp(gamma[k]) : 0.0;
    total += gamma[k];
  }
  return total;
}

// After a row's grad holds softmax * N everywhere: the columns its arcs emit get softmax * N - E, each column
// written once with the summed occupancy of the arcs that emit it (tokens, then the duration units); gamma and
// n_out carry jump_fold(L, g).
template <typename T>
PE_HOSTDEVICE inline void jump_emitted_grads(const JumpLattice& L, const T* x, T* dx, const double* h, int64_t symbol,
                                             const double* gamma, double n_out, double g) {
  const JumpArcs& a = L.arcs;
  double emitted[kMaxJumpArcs], by_duration[kMaxJumpDurations];
  bool token_used[kMaxJumpArcs], duration_used[kMaxJumpDurations];
  for (int k = 0; k < a.count; ++k) emitted[k] = 0.0, token_used[k] = false;
  for (index_t d = 0; d < L.D; ++d) by_duration[d] = 0.0, duration_used[d] = false;
  int symbol_group = -1;
  for (int k = 0; k < a.count; ++k) {
    if (gamma[k] == 0.0) continue;
    emitted[a.group[k]] += gamma[k], token_used[a.group[k]] = true;
    if (a.token[k] == kJumpSymbolUnit) symbol_group = a.group[k];
    if (a.dur[k] >= 0) by_duration[a.dur[k]] += gamma[k], duration_used[a.dur[k]] = true;
  }
  // The node's symbol may be a unit that fixed-token arcs emit too: one column, one sum.
  for (int k = 0; symbol_group >= 0 && k < a.count; ++k) {
    if (!token_used[k] || a.group[k] != k || a.token[k] != symbol) continue;
    emitted[k] += emitted[symbol_group], token_used[symbol_group] = false;
  }
  for (int k = 0; k < a.count; ++k) {
    if (!token_used[k]) continue;
    const int64_t unit = jump_token(a, k, symbol);
    const double v = joint_grad<double>(load(x[unit]), h[0], h[1], -emitted[k], -n_out);
    dx[unit] = store<T>(static_cast<acc_t<T>>(jump_finish(L, v, g, true)));
  }
  for (index_t d = 0; d < L.D; ++d) {
    if (!duration_used[d]) continue;
    const double v = joint_grad<double>(load(x[L.C + d]), h[2], h[3], -by_duration[d], -n_out);
    dx[L.C + d] = store<T>(static_cast<acc_t<T>>(jump_finish(L, v, g, false)));
  }
}

namespace cpu {
// lse [B, T, S+1, 4], alpha and beta [B, T+1, S+1] float64; loss [B].
template <typename T>
void transducer_jump_forward(const T* logits, const int64_t* symbols, const int64_t* boundary, double* lse,
                             double* alpha, double* beta, T* loss, const JumpLattice& L);
template <typename T>
void transducer_jump_backward(const T* logits, const int64_t* symbols, const int64_t* boundary, const double* lse,
                              const double* alpha, const double* beta, const T* loss_grad, T* logits_grad,
                              const JumpLattice& L);
// The joiner fused in (joiner.h; T float or double): the same loss, lse, alpha and beta on the logits
// act(am + lm) @ weight + bias (bias may be null), which are never whole; the backward writes the four grads.
template <typename T>
void jump_joiner_forward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                         const int64_t* boundary, double* lse, double* alpha, double* beta, T* loss,
                         const JumpLattice& L, const JoinerShape& j);
template <typename T>
void jump_joiner_backward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                          const int64_t* boundary, const double* lse, const double* alpha, const double* beta,
                          const T* loss_grad, T* am_grad, T* lm_grad, T* weight_grad, T* bias_grad,
                          const JumpLattice& L, const JoinerShape& j);
// The loss in two steps, for a joiner composed in blocks of frames (the block's logits never whole): each
// block's logits [B, Tb, S+1, X] -> its nodes' arc weights [B, Tb, S+1, K] and lse [B, Tb, S+1, 4] (float64);
// its grad from weights_grad (each arc's occupancy, as the loss on the weights gives it) and, with the clamp on,
// each item's upstream grad scale_grad [B]. Then the loss, alpha and beta [B, T+1, S+1] on all the weights
// (L.T the whole T; float64), whose grad is each arc's occupancy times the loss grad (x 1 + fastemit_lambda
// on symbol arcs).
template <typename T>
void jump_arc_weights_forward(const T* logits, const int64_t* symbols, double* lse, double* weights,
                              const JumpLattice& L);
template <typename T>
void jump_arc_weights_backward(const T* logits, const int64_t* symbols, const double* lse,
                               const double* weights_grad, const T* scale_grad, T* logits_grad, const JumpLattice& L);
void jump_weights_loss_forward(const double* weights, const int64_t* boundary, double* alpha, double* beta,
                               double* loss, const JumpLattice& L);
void jump_weights_loss_backward(const double* weights, const int64_t* boundary, const double* alpha,
                                const double* beta, const double* loss_grad, double* weights_grad,
                                const JumpLattice& L);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/transducer_jump_loss.cu; T is float or double (the API casts 16-bit inputs)
template <typename T>
void transducer_jump_forward(const T* logits, const int64_t* symbols, const int64_t* boundary, double* lse,
                             double* alpha, double* beta, T* loss, const JumpLattice& L, cudaStream_t stream);
template <typename T>
void transducer_jump_backward(const T* logits, const int64_t* symbols, const int64_t* boundary, const double* lse,
                              const double* alpha, const double* beta, const T* loss_grad, T* logits_grad,
                              const JumpLattice& L, cudaStream_t stream);
template <typename T>  // the two steps, as cpu::
void jump_arc_weights_forward(const T* logits, const int64_t* symbols, double* lse, double* weights,
                              const JumpLattice& L, cudaStream_t stream);
template <typename T>
void jump_arc_weights_backward(const T* logits, const int64_t* symbols, const double* lse,
                               const double* weights_grad, const T* scale_grad, T* logits_grad, const JumpLattice& L,
                               cudaStream_t stream);
void jump_weights_loss_forward(const double* weights, const int64_t* boundary, double* alpha, double* beta,
                               double* loss, const JumpLattice& L, cudaStream_t stream);
void jump_weights_loss_backward(const double* weights, const int64_t* boundary, const double* alpha,
                                const double* beta, const double* loss_grad, double* weights_grad,
                                const JumpLattice& L, cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
