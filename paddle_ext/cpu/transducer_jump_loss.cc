// CPU transducer_jump_loss kernels on raw pointers (no Paddle header). The forward reads each logits row
// once for its two heads' lse (cpu_rows.h, SIMD; frames split across the cores), then runs alpha and beta
// per item (transducer_jump_loss.h; items across the cores). The backward reads each row once more and
// writes its grad: softmax times the node's occupancy, minus the occupancy of the few units its arcs emit.
#include "paddle_ext/transducer_jump_loss.h"

#include <algorithm>
#include <cstring>

#include "paddle_ext/cpu_rows.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/rnnt_joint_logprobs.h"

namespace paddle_ext {
namespace cpu {
namespace {

using namespace rows;  // NOLINT: the shared row helpers (cpu_rows.h)

template <typename L>
struct SoftmaxTimes {  // -softmax * g_sum (joint_grad with no own grad), g_sum = -(occupancy)
  typename L::V max, log_sum, g_sum;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t) const {
    return joint_grad(x, max, log_sum, typename L::V{}, g_sum, LaneExp<L>());
  }
};

template <typename T>
struct HeadsForward {
  const T* logits;
  double* lse;
  JumpLattice L;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * L.X();
      const LseParts tok = row_lse_parts<Lanes<W, T>>(x, L.C);
      LseParts dur{0.0, 0.0};
      if (L.D > 0) dur = row_lse_parts<Lanes<W, T>>(x + L.C, L.D);
      lse[4 * r] = tok.max, lse[4 * r + 1] = tok.log_sum, lse[4 * r + 2] = dur.max, lse[4 * r + 3] = dur.log_sum;
    }
  }
};

// Writes grad = softmax(head) * occupancy - (occupancy of the arcs emitting each unit) for one head of k units.
template <typename L, typename T>
PE_VINLINE void head_grad(const T* x, T* dx, index_t k, double max, double log_sum, double occupancy) {
  if (occupancy == 0.0) {
    std::memset(static_cast<void*>(dx), 0, sizeof(T) * k);
  } else if (!finite(max)) {  // NaN or +inf in the head: the scalar rules
    for (index_t c = 0; c < k; ++c)
      dx[c] = store<T>(static_cast<acc_t<T>>(joint_grad<double>(load(x[c]), max, log_sum, 0.0, -occupancy)));
  } else {
    map_row<L>(x, dx, k, -kInf, SoftmaxTimes<L>{L::splat(max), L::splat(log_sum), L::splat(-occupancy)});
  }
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
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using Lane = Lanes<W, T>;
    const JumpArcs& a = L.arcs;
    double gamma[kMaxJumpArcs];
    for (index_t r = r0; r < r1; ++r) {
      const index_t s = r % (L.S + 1), t = (r / (L.S + 1)) % L.T, b = r / ((L.S + 1) * L.T);
      const JumpBox box = jump_box(boundary, b, L);
      const double n_out = jump_occupancy(L, logits, symbols, lse, alpha, beta, b, t, s, box,
                                          static_cast<double>(load(loss_grad[b])), gamma);
      const T* x = logits + r * L.X();
      T* dx = logits_grad + r * L.X();
      const double* h = lse + 4 * r;
      head_grad<Lane>(x, dx, L.C, h[0], h[1], n_out);
      if (L.D > 0) head_grad<Lane>(x + L.C, dx + L.C, L.D, h[2], h[3], n_out);
      if (n_out == 0.0) continue;
      // the emitted units: each column once, with the occupancy of every arc that emits it
      const int64_t symbol = jump_symbol(symbols, L, b, s);
      for (int k = 0; k < a.count; ++k) {
        const int64_t unit = jump_token(a, k, symbol);
        bool first = gamma[k] != 0.0;
        for (int j = 0; j < k && first; ++j) first = !(gamma[j] != 0.0 && jump_token(a, j, symbol) == unit);
        if (!first) continue;
        double emitted = 0.0;
        for (int j = k; j < a.count; ++j) emitted += jump_token(a, j, symbol) == unit ? gamma[j] : 0.0;
        dx[unit] = store<T>(static_cast<acc_t<T>>(joint_grad<double>(load(x[unit]), h[0], h[1], -emitted, -n_out)));
      }
      for (index_t d = 0; d < L.D; ++d) {
        double emitted = 0.0;
        for (int k = 0; k < a.count; ++k) emitted += a.dur[k] == d ? gamma[k] : 0.0;
        if (emitted != 0.0)
          dx[L.C + d] = store<T>(static_cast<acc_t<T>>(joint_grad<double>(load(x[L.C + d]), h[2], h[3], -emitted,
                                                                           -n_out)));
      }
    }
  }
};

inline index_t node_grain(const JumpLattice& L) { return row_grain(L.X()); }

}  // namespace

template <typename T>
void transducer_jump_forward(const T* logits, const int64_t* symbols, const int64_t* boundary, double* lse,
                             double* alpha, double* beta, T* loss, const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes > 0 && L.X() > 0) {
    parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
      simd::dispatch(HeadsForward<T>{logits, lse, L}, r0, r1);
    });
  }
  const index_t per_item = (L.T + 1) * (L.S + 1);
  std::fill(alpha, alpha + L.B * per_item, neg_inf<double>());
  std::fill(beta, beta + L.B * per_item, neg_inf<double>());
  // alpha in (t, s) order and beta in reverse: a node's sources (destinations) are all done before it
  parallel_for(0, L.B, 1, [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) {
      const JumpBox box = jump_box(boundary, b, L);
      for (index_t t = box.t0; t <= box.t1; ++t)
        for (index_t s = box.s0; s <= box.s1; ++s)
          alpha[L.lattice(b, t, s)] = jump_alpha_at(L, logits, symbols, lse, alpha, b, t, s, box);
      for (index_t t = box.t1; t >= box.t0; --t)
        for (index_t s = box.s1; s >= box.s0; --s)
          beta[L.lattice(b, t, s)] = jump_beta_at(L, logits, symbols, lse, beta, b, t, s, box);
      loss[b] = store<T>(static_cast<acc_t<T>>(-beta[L.lattice(b, box.t0, box.s0)]));
    }
  });
}

template <typename T>
void transducer_jump_backward(const T* logits, const int64_t* symbols, const int64_t* boundary, const double* lse,
                              const double* alpha, const double* beta, const T* loss_grad, T* logits_grad,
                              const JumpLattice& L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes == 0 || L.X() == 0) return;
  populate_for_write(logits_grad, sizeof(T) * nodes * L.X());
  parallel_for(0, nodes, node_grain(L), [&](index_t r0, index_t r1) {
    simd::dispatch(JumpBackward<T>{logits, symbols, boundary, lse, alpha, beta, loss_grad, logits_grad, L}, r0, r1);
  });
}

#define PE_INSTANTIATE(T)                                                                                       \
  template void transducer_jump_forward<T>(const T*, const int64_t*, const int64_t*, double*, double*, double*, \
                                           T*, const JumpLattice&);                                            \
  template void transducer_jump_backward<T>(const T*, const int64_t*, const int64_t*, const double*,           \
                                            const double*, const double*, const T*, T*, const JumpLattice&);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
