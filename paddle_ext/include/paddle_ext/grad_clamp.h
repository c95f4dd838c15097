// Gradient clamping of the transducer losses (the `clamp` of NeMo's and torchaudio's RNN-T losses), written
// once for CPU and CUDA. A logit's grad of its own item's loss (what the item's lattice gives, FastEmit
// included) is clamped to [-bound, bound], and then multiplied by the item's upstream grad (the reduction's
// 1/B, the caller's weights): the order of torchaudio's and NeMo's CUDA kernels. The Python API turns
// clamp <= 0 (off) into bound = +inf, which the kernels test to keep their unclamped path. NaN stays NaN.
#pragma once

#include "paddle_ext/common.h"

namespace paddle_ext {

PE_HOSTDEVICE inline bool clamp_on(double bound) { return bound < -neg_inf<double>(); }

// g clamped to [-bound, bound]; V is a scalar or a GCC vector (lane-wise `?:`), whose NaN lanes pass through.
// Forced inline: an out-of-line copy taking AVX vectors would be called from code of another instruction set,
// which passes them differently (the build checks that no such copy is emitted).
template <typename V>
PE_HOSTDEVICE PE_FORCEINLINE V clamp_grad(V g, V bound) {
  return g > bound ? bound : (g < -bound ? -bound : g);
}

// The grad of one element: its unscaled grad clamped, times the item's upstream grad.
template <typename V>
PE_HOSTDEVICE PE_FORCEINLINE V clamped_grad(V unscaled, V bound, V scale) {
  return clamp_grad(unscaled, bound) * scale;
}

}  // namespace paddle_ext
