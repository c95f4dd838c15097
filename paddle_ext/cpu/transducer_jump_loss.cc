// CPU transducer_jump_loss kernels on raw pointers (no Paddle header). The forward reads each logits row
// once for its two heads' lse (cpu_rows.h, SIMD; rows split across the cores) and its node's K arc weights,
// then runs alpha and beta per item on those weights alone (transducer_jump_loss.h; items across the cores). The backward reads each row once more and
// writes its grad: softmax times the node's occupancy, minus the occupancy of the few units its arcs emit.
// The two-step form runs the same pieces apart: rows -> arc weights (HeadsForward), the recursions on the
// weights, the weights' grad (each arc's occupancy), and each row's grad from its arcs' (row_grad).
#include "paddle_ext/transducer_jump_loss.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "paddle_ext/cpu_rows.h"
#include "paddle_ext/joiner_blocks.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

using namespace rows;  // NOLINT: the shared row helpers (cpu_rows.h)

template <typename L, bool kClamp>
struct SoftmaxTimes {  // -softmax * g_sum (joint_grad with no own grad), g_sum = -(occupancy); kClamp: then clamped
  typename L::V max, log_sum, g_sum, bound, scale;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t) const {
    const typename L::V v = joint_grad(x, max, log_sum, typename L::V{}, g_sum, LaneExp<L>());
    if constexpr (kClamp) return clamped_grad(v, bound, scale);
    return v;
  }
};

struct HeadClamp {  // a head's grads clamped to [-bound, bound] (bound +inf: not clamped), then times scale
  double bound, scale;
};

// A node's arc terms padded with -inf to whole double vectors (kMaxJumpArcs + one vector of slack).
constexpr int kPaddedArcs = kMaxJumpArcs + 8;

// exp(v[k]) for k < n, in double lanes (vec_math.h's full-precision exp). The lanes past n are set to -inf
// first: an earlier call left their exps there, and the exp of those is not defined for every value.
template <int W>
PE_VINLINE void exp_terms(double* v, int n) {
  using D = Lanes<W, double>;
  for (int k = n; k % D::N != 0; ++k) v[k] = -kInf;
  for (int k = 0; k < n; k += D::N) D::store(v + k, D::exp(D::load(v + k)));
}

// log(sum(exp(v[0, n)))) as jump_log_sum (NaN sticks, +inf wins, all -inf gives -inf), the exps in lanes.
template <int W>
PE_VINLINE double log_sum_terms(double* v, int n) {
  double max = -kInf;
  bool nan = false;
  for (int k = 0; k < n; ++k) {
    nan |= v[k] != v[k];
    max = v[k] > max ? v[k] : max;
  }
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  if (!finite(max)) return max;
  for (int k = 0; k < n; ++k) v[k] -= max;
  exp_terms<W>(v, n);
  double sum = 0.0;
  for (int k = 0; k < n; ++k) sum += v[k];
  return max + std::log(sum);
}

template <typename T>
struct HeadsForward {  // each row's heads (lse) and its node's arc weights
  const T* logits;
  const int64_t* symbols;
  double* lse;
  double* weights;
  JumpLattice L;
  index_t row0;  // logits[0] is row row0 (the fused joiner's block)
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + (r - row0) * L.X();
      const LseParts tok = row_lse_parts<Lanes<W, T>>(x, L.C);
      LseParts dur{0.0, 0.0};
      if (L.D > 0) dur = row_lse_parts<Lanes<W, T>>(x + L.C, L.D);
      double* h = lse + 4 * r;
      h[0] = tok.max, h[1] = tok.log_sum, h[2] = dur.max, h[3] = dur.log_sum;
      const index_t s = r % (L.S + 1), b = r / ((L.S + 1) * L.T);
      jump_node_weights(L, x, h, jump_symbol(symbols, L, b, s), weights + r * L.arcs.count);
    }
  }
};

// Writes grad = softmax(head) * occupancy for one head of k units (the units its arcs emit are rewritten after);
// with `clamp`, each value then clamped and scaled (the clamp on: occupancy leaves out the loss grad).
template <typename L, typename T>
PE_VINLINE void head_grad(const T* x, T* dx, index_t k, double max, double log_sum, double occupancy,
                          const HeadClamp* clamp) {
  if (occupancy == 0.0) {
    std::memset(static_cast<void*>(dx), 0, sizeof(T) * k);
  } else if (!finite(max)) {  // NaN or +inf in the head: the scalar rules
    for (index_t c = 0; c < k; ++c) {
      const double v = joint_grad<double>(load(x[c]), max, log_sum, 0.0, -occupancy);
      dx[c] = store<T>(static_cast<acc_t<T>>(clamp ? clamped_grad(v, clamp->bound, clamp->scale) : v));
    }
  } else if (clamp) {
    map_row<L>(x, dx, k, -kInf, SoftmaxTimes<L, true>{L::splat(max), L::splat(log_sum), L::splat(-occupancy),
                                                     L::splat(clamp->bound), L::splat(clamp->scale)});
  } else {
    map_row<L>(x, dx, k, -kInf, SoftmaxTimes<L, false>{L::splat(max), L::splat(log_sum), L::splat(-occupancy)});
  }
}

// A row's grad from its arcs' occupancies gamma (summing to n_out) and its item's loss grad g: softmax times
// n_out in each head (with the clamp on, clamped and times g), then the units the arcs emit.
template <typename Lane, typename T>
PE_VINLINE void row_grad(const JumpLattice& L, const T* x, T* dx, const double* h, int64_t symbol,
                         const double* gamma, double n_out, double g) {
  const HeadClamp tokens{L.clamp, g}, durations{kInf, g};
  const bool clamped = clamp_on(L.clamp);
  head_grad<Lane>(x, dx, L.C, h[0], h[1], n_out, clamped ? &tokens : nullptr);
  if (L.D > 0) head_grad<Lane>(x + L.C, dx + L.C, L.D, h[2], h[3], n_out, clamped ? &durations : nullptr);
  if (n_out != 0.0) jump_emitted_grads(L, x, dx, h, symbol, gamma, n_out, g);
}

template <typename T>
struct JumpBackward {
  const T* logits;
  const int64_t* symbols;
  const int64_t* boundary;
  const double* lse;
  const double* alpha;
  const double* beta;
  const T* loss_grad;
  T* logits_grad;
  JumpLattice L;
  index_t row0;  // logits[0] and logits_grad[0] are row row0 (the fused joiner's block)
  // The next row's columns the occupancies read first, scattered in it: without this each row stalls on
  // them before the streaming pass over it.
  PE_VINLINE void prefetch_arc_units(index_t r) const {
    const T* x = logits + (r - row0) * L.X();
    const int64_t symbol = jump_symbol(symbols, L, r / ((L.S + 1) * L.T), r % (L.S + 1));
    for (int k = 0; k < L.arcs.count; ++k) __builtin_prefetch(x + jump_token(L.arcs, k, symbol));
    if (L.D > 0) __builtin_prefetch(x + L.C);
  }
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using Lane = Lanes<W, T>;
    const JumpArcs& a = L.arcs;
    double gamma[kPaddedArcs];
    for (int k = 0; k < kPaddedArcs; ++k) gamma[k] = -kInf;
    for (index_t r = r0; r < r1; ++r) {
      const index_t s = r % (L.S + 1), t = (r / (L.S + 1)) % L.T, b = r / ((L.S + 1) * L.T);
      const JumpBox box = jump_box(boundary, b, L);
      if (r + 1 < r1) prefetch_arc_units(r + 1);
      const double g = static_cast<double>(load(loss_grad[b])), fold = jump_fold(L, g);
      const T* x = logits + (r - row0) * L.X();
      T* dx = logits_grad + (r - row0) * L.X();
      double n_out = 0.0;
      if (g != 0.0 && jump_occupancy_exponents(L, x, symbols, lse, alpha, beta, b, t, s, box, gamma)) {
        exp_terms<W>(gamma, a.count);
        for (int k = 0; k < a.count; ++k) n_out += gamma[k] *= jump_arc_scale(L, k, fold);
      } else {
        for (int k = 0; k < a.count; ++k) gamma[k] = 0.0;
      }
      row_grad<Lane>(L, x, dx, lse + 4 * r, jump_symbol(symbols, L, b, s), gamma, n_out, g);
    }
  }
};

// The arc-weights step's grad: each row's from its arcs' occupancies as weights_grad holds them (with the clamp
// on, without the loss grad, which scale_grad brings).
template <typename T>
struct ArcWeightsBackward {
  const T* logits;
  const int64_t* symbols;
  const double* lse;
  const double* weights_grad;
  const T* scale_grad;
  T* logits_grad;
  JumpLattice L;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    const int K = L.arcs.count;
    double gamma[kMaxJumpArcs];
    for (index_t r = r0; r < r1; ++r) {
      const index_t s = r % (L.S + 1), b = r / ((L.S + 1) * L.T);
      const double g = clamp_on(L.clamp) ? static_cast<double>(load(scale_grad[b])) : 1.0;
      double n_out = 0.0;
      for (int k = 0; k < K; ++k) n_out += gamma[k] = g == 0.0 ? 0.0 : weights_grad[r * K + k];
      row_grad<Lanes<W, T>>(L, logits + r * L.X(), logits_grad + r * L.X(), lse + 4 * r,
                            jump_symbol(symbols, L, b, s), gamma, n_out, g);
    }
  }
};

// The loss-on-weights step's grad: each node's arc occupancies times the loss grad (and FastEmit's factor).
struct WeightsLossBackward {
  const double* weights;
  const int64_t* boundary;
  const double* alpha;
  const double* beta;
  const double* loss_grad;
  double* weights_grad;
  JumpLattice L;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    const int K = L.arcs.count;
    double e[kPaddedArcs];
    for (int k = 0; k < kPaddedArcs; ++k) e[k] = -kInf;
    for (index_t r = r0; r < r1; ++r) {
      const index_t s = r % (L.S + 1), t = (r / (L.S + 1)) % L.T, b = r / ((L.S + 1) * L.T);
      const double g = loss_grad[b];
      double* out = weights_grad + r * K;
      if (g != 0.0 && jump_weight_occupancy_exponents(L, weights + r * K, alpha, beta, b, t, s,
                                                      jump_box(boundary, b, L), e)) {
        exp_terms<W>(e, K);
        for (int k = 0; k < K; ++k) out[k] = e[k] * jump_arc_scale(L, k, g);
      } else {
        for (int k = 0; k < K; ++k) out[k] = 0.0;
      }
    }
  }
};

// alpha in (t, s) order and beta in reverse, per item: a node's sources (destinations) are done before it.
template <typename T>
struct Recursions {
  const int64_t* boundary;
  const double* weights;
  double* alpha;
  double* beta;
  T* loss;
  JumpLattice L;
  template <int W>
  PE_VINLINE void run(index_t b0, index_t b1) const {
    double v[kPaddedArcs];
    for (int k = 0; k < kPaddedArcs; ++k) v[k] = -kInf;
    const int K = L.arcs.count;
    for (index_t b = b0; b < b1; ++b) {
      const JumpBox box = jump_box(boundary, b, L);
      alpha[L.lattice(b, box.t0, box.s0)] = 0.0;
      for (index_t t = box.t0; t <= box.t1; ++t) {
        for (index_t s = box.s0; s <= box.s1; ++s) {
          if (t == box.t0 && s == box.s0) continue;
          jump_alpha_terms(L, weights, alpha, b, t, s, box, v);
          alpha[L.lattice(b, t, s)] = log_sum_terms<W>(v, K);
        }
      }
      beta[L.lattice(b, box.t1, box.s1)] = 0.0;
      for (index_t t = box.t1 - 1; t >= box.t0; --t) {
        for (index_t s = box.s1; s >= box.s0; --s) {
          jump_beta_terms(L, weights, beta, b, t, s, box, v);
          beta[L.lattice(b, t, s)] = log_sum_terms<W>(v, K);
        }
      }
      loss[b] = store<T>(static_cast<acc_t<T>>(-beta[L.lattice(b, box.t0, box.s0)]));
    }
  }
};

inline index_t node_grain(const JumpLattice& L) { return row_grain(L.X()); }

// alpha, beta and the loss from the nodes' arc weights.
template <typename T>
void recursions(const int64_t* boundary, const double* weights, double* alpha, double* beta, T* loss,
                const JumpLattice& L) {
  const index_t per_item = (L.T + 1) * (L.S + 1);
  std::fill(alpha, alpha + L.B * per_item, neg_inf<double>());
  std::fill(beta, beta + L.B * per_item, neg_inf<double>());
  parallel_for(0, L.B, 1, [&](index_t b0, index_t b1) {
    simd::dispatch(Recursions<T>{boundary, weights, alpha, beta, loss, L}, b0, b1);
  });
}

}  // namespace

template <typename T>
void transducer_jump_forward(const T* logits, const int64_t* symbols, const int64_t* boundary, double* lse,
                             double* alpha, double* beta, T* loss, const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  ScratchVector<double> weights(nodes * L.arcs.count);  // [B, T, S+1, K]: the recursions' only reads
  if (nodes > 0 && L.X() > 0) {
    parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
      simd::dispatch(HeadsForward<T>{logits, symbols, lse, weights.data(), L, 0}, r0, r1);
    });
  }
  recursions(boundary, weights.data(), alpha, beta, loss, L);
}

template <typename T>
void transducer_jump_backward(const T* logits, const int64_t* symbols, const int64_t* boundary, const double* lse,
                              const double* alpha, const double* beta, const T* loss_grad, T* logits_grad,
                              const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes == 0 || L.X() == 0) return;
  populate_for_write(logits_grad, sizeof(T) * nodes * L.X());
  parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
    simd::dispatch(JumpBackward<T>{logits, symbols, boundary, lse, alpha, beta, loss_grad, logits_grad, L, 0}, r0, r1);
  });
}

template <typename T>
void jump_arc_weights_forward(const T* logits, const int64_t* symbols, double* lse, double* weights,
                              const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes == 0 || L.X() == 0) return;
  parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
    simd::dispatch(HeadsForward<T>{logits, symbols, lse, weights, L, 0}, r0, r1);
  });
}

template <typename T>
void jump_arc_weights_backward(const T* logits, const int64_t* symbols, const double* lse,
                               const double* weights_grad, const T* scale_grad, T* logits_grad, const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes == 0 || L.X() == 0) return;
  parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
    simd::dispatch(ArcWeightsBackward<T>{logits, symbols, lse, weights_grad, scale_grad, logits_grad, L}, r0, r1);
  });
}

void jump_weights_loss_forward(const double* weights, const int64_t* boundary, double* alpha, double* beta,
                               double* loss, const JumpLattice& L) {
  recursions(boundary, weights, alpha, beta, loss, L);
}

void jump_weights_loss_backward(const double* weights, const int64_t* boundary, const double* alpha,
                                const double* beta, const double* loss_grad, double* weights_grad,
                                const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  parallel_for(0, nodes, 256, [&](index_t r0, index_t r1) {
    simd::dispatch(WeightsLossBackward{weights, boundary, alpha, beta, loss_grad, weights_grad, L}, r0, r1);
  });
}

// The fused joiner: the same row kernels on each block of joiner_blocks.h (R = S+1 rows a frame).
template <typename T>
void jump_joiner_forward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                         const int64_t* boundary, double* lse, double* alpha, double* beta, T* loss,
                         const JumpLattice& L, const JoinerShape& j) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  ScratchVector<double> weights(nodes * L.arcs.count);
  if (nodes > 0 && L.X() > 0) {
    const joiner::Blocks<T> blocks(am, lm, weight, bias, j);
    blocks.forward([&](const T* z, index_t f0, index_t f1) {
      const HeadsForward<T> k{z, symbols, lse, weights.data(), L, f0 * j.R};
      parallel_for(f0 * j.R, f1 * j.R, blocks.row_grain(), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
    });
  }
  recursions(boundary, weights.data(), alpha, beta, loss, L);
}

template <typename T>
void jump_joiner_backward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                          const int64_t* boundary, const double* lse, const double* alpha, const double* beta,
                          const T* loss_grad, T* am_grad, T* lm_grad, T* weight_grad, T* bias_grad,
                          const JumpLattice& L, const JoinerShape& j) {
  const joiner::Blocks<T> blocks(am, lm, weight, bias, j);
  blocks.backward(
      [&](const T* z, T* dz, index_t f0, index_t f1) {
        const JumpBackward<T> k{z, symbols, boundary, lse, alpha, beta, loss_grad, dz, L, f0 * j.R};
        parallel_for(f0 * j.R, f1 * j.R, blocks.row_grain(), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
      },
      am_grad, lm_grad, weight_grad, bias_grad);
}

#define PE_INSTANTIATE(T)                                                                                       \
  template void transducer_jump_forward<T>(const T*, const int64_t*, const int64_t*, double*, double*, double*, \
                                           T*, const JumpLattice&);                                            \
  template void transducer_jump_backward<T>(const T*, const int64_t*, const int64_t*, const double*,           \
                                            const double*, const double*, const T*, T*, const JumpLattice&);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

#define PE_INSTANTIATE(T)                                                                                       \
  template void jump_arc_weights_forward<T>(const T*, const int64_t*, double*, double*, const JumpLattice&);    \
  template void jump_arc_weights_backward<T>(const T*, const int64_t*, const double*, const double*, const T*,  \
                                             T*, const JumpLattice&);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

#define PE_INSTANTIATE(T)                                                                                      \
  template void jump_joiner_forward<T>(const T*, const T*, const T*, const T*, const int64_t*, const int64_t*, \
                                       double*, double*, double*, T*, const JumpLattice&, const JoinerShape&); \
  template void jump_joiner_backward<T>(const T*, const T*, const T*, const T*, const int64_t*, const int64_t*, \
                                        const double*, const double*, const double*, const T*, T*, T*, T*, T*,  \
                                        const JumpLattice&, const JoinerShape&);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
