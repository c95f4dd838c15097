// The transducer joiner fused into a loss (docs/transducer_joiner.md): lattice row
// (b, t, r) has logits act(am[b, t] + lm[b, u]) @ weight + bias, u = ranges[b, t, r] (pruned) or r, for
// am [B, T, J], lm [B, U, J], weight [J, X] (Paddle's Linear layout), bias [X]. The shape of the rows and
// the activation with its derivative (from the activation's output), shared by the CPU and GPU kernels.
#pragma once

#include <cmath>

#include "paddle_ext/common.h"

namespace paddle_ext {

enum class JoinerActivation : int { kTanh = 0, kRelu = 1, kIdentity = 2 };

struct JoinerShape {
  index_t B, T, U, R, J, X;  // R rows per frame (b, t); U rows of lm per item
  const int64_t* ranges;     // [B, T, R]: the lm row of (b, t, r); null: r
  JoinerActivation act;
  PE_HOSTDEVICE index_t frames() const { return B * T; }
  PE_HOSTDEVICE index_t lm_row(index_t frame, index_t r) const {
    return (frame / T) * U + (ranges ? ranges[frame * R + r] : r);
  }
};

// act(x); relu keeps NaN (as Paddle's relu).
template <typename A>
PE_HOSTDEVICE inline A joiner_act(A x, JoinerActivation act) {
  if (act == JoinerActivation::kTanh) return std::tanh(x);
  if (act == JoinerActivation::kRelu) return x > A(0) || x != x ? x : A(0);
  return x;
}

// act'(x) from h = act(x), as Paddle's grads take it: 1 - h^2, [h > 0], 1.
template <typename A>
PE_HOSTDEVICE inline A joiner_act_grad(A h, JoinerActivation act) {
  if (act == JoinerActivation::kTanh) return A(1) - h * h;
  if (act == JoinerActivation::kRelu) return h > A(0) ? A(1) : A(0);
  return A(1);
}

}  // namespace paddle_ext
