// CPU blocks of the fused joiner (joiner.h), CPU only, no Paddle header. Whole frames of lattice rows at a
// time go through act -> GEMM (bias pre-filled, gemm.h) into scratch and are handed to the loss's row kernel
// (rnnt_joint_logprobs.cc, transducer_jump_loss.cc); the backward recomputes each block, the row kernel
// forms d(logits) in scratch, and the block's share of d(weight) (a GEMM), d(bias) (column sums) and d(am),
// d(lm) (d(logits) @ weight^T through act') is added up. Scratch is ~4 MiB of logits per block (at least
// one frame's rows), whatever the vocabulary and T * S; the GEMMs run on all threads, the rest split by rows
// or columns so that no two threads write one element.
#pragma once

#include "paddle_ext/cpu_rows.h"  // (vec_math.h's lanes, <algorithm>, <cstring>, <limits>, <type_traits>)
#include "paddle_ext/gemm.h"
#include "paddle_ext/joiner.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace joiner {

constexpr index_t kBlockBytes = index_t(4) << 20;  // one block's logits: GEMMs of a few hundred rows
constexpr index_t kGrain = index_t(1) << 15;       // elements worth a thread in the elementwise passes

// d(logits) smaller than this (2^16 x the smallest normal: 7.7e-34 in float32) go into the backward's GEMMs as
// zeros. The nodes a lattice's paths hardly visit give a few % of such grads, whose products with the weights
// are subnormal, and each subnormal operation takes a microcode assist on Intel CPUs (the backward's GEMMs ran
// 4-7x slower). A dropped value moves a grad by less than 2^16 x its weight x the smallest normal: FTZ's
// error, give or take a 2^16 factor, and far below the rounding of any grad that is a normal number.
template <typename T>
constexpr T kFlushBelow = std::numeric_limits<T>::min() * T(65536);

// tanh on float lanes within ~2 float ulps: x * (its Taylor series to x^14) below |x| = 0.5 (the first term
// left out is < 1e-8 relative there), else (1 - e) / (1 + e) with e = exp(-2|x|) and x's sign. NaN stays NaN.
template <int F>
PE_VINLINE simd::vf<F> vtanhf(simd::vf<F> x) {
  using V = simd::vf<F>;
  using I = simd::vi<F>;
  const I sign = (I)x & std::numeric_limits<int32_t>::min();
  const V t = (V)((I)x & std::numeric_limits<int32_t>::max());
  const V e = simd::vexpf<F>(t * -2.0f);
  const V big = (V)((I)((1.0f - e) / (1.0f + e)) | sign);
  const V x2 = x * x;
  V p = simd::splatf<F>(-1.4558343870e-3f);
  p = p * x2 + 3.5921280366e-3f;
  p = p * x2 - 8.8632355299e-3f;
  p = p * x2 + 2.1869488536e-2f;
  p = p * x2 - 5.3968253968e-2f;
  p = p * x2 + 1.3333333333e-1f;
  p = p * x2 - 3.3333333333e-1f;
  p = p * x2 + 1.0f;
  return simd::selectf<F>(t < 0.5f, x * p, big);
}

// h[i] = act(a[i] + l[i]) for i < n: float tanh in lanes (the tail through one padded vector), the rest
// scalar (float64 tanh is std::tanh: the exact path).
template <typename T>
struct Activate {
  const T* a;
  const T* l;
  T* h;
  index_t n;
  JoinerActivation act;
  template <int W>
  PE_VINLINE void run() const {
    if constexpr (std::is_same<T, float>::value) {
      if (act == JoinerActivation::kTanh) {
        constexpr int F = 2 * W;
        using V = simd::vf<F>;
        index_t i = 0;
        for (; i + F <= n; i += F) {
          V va, vl;
          std::memcpy(&va, a + i, sizeof(V));
          std::memcpy(&vl, l + i, sizeof(V));
          const V y = vtanhf<F>(va + vl);
          std::memcpy(h + i, &y, sizeof(V));
        }
        if (i < n) {
          V v{};
          for (index_t k = i; k < n; ++k) v[k - i] = a[k] + l[k];
          const V y = vtanhf<F>(v);
          for (index_t k = i; k < n; ++k) h[k] = y[k - i];
        }
        return;
      }
    }
    for (index_t i = 0; i < n; ++i) h[i] = joiner_act<T>(a[i] + l[i], act);
  }
};

// Splits [0, n) into column chunks (multiples of 16) for the threads worth using on rows x n elements.
template <typename Fn>
void for_column_chunks(index_t rows, index_t n, const Fn& fn) {
  const index_t threads = threads_for(rows * n, kGrain);
  const index_t width = std::max<index_t>(16, (n / threads + 15) / 16 * 16);
  parallel_for(0, (n + width - 1) / width, 1, [&](index_t k0, index_t k1) {
    for (index_t k = k0; k < k1; ++k) fn(k * width, std::min(n, (k + 1) * width));
  });
}

template <typename T>
class Blocks {
 public:
  Blocks(const T* am, const T* lm, const T* weight, const T* bias, const JoinerShape& j)
      : am_(am), lm_(lm), weight_(weight), bias_(bias), j_(j) {}

  // Frames per block: ~kBlockBytes of logits, and never more than the problem has (the scratch below is
  // value-initialised: a small problem must not pay for a whole block's pages).
  index_t frames_per_block() const {
    const index_t rows = std::max<index_t>(1, kBlockBytes / index_t(sizeof(T) * std::max<index_t>(j_.X, 1)));
    return std::max<index_t>(1, std::min(j_.frames(), rows / std::max<index_t>(j_.R, 1)));
  }

  // Rows (frames) per thread chunk in a row kernel over one block.
  index_t row_grain() const { return std::max<index_t>(1, kGrain / std::max<index_t>(j_.X, 1)); }
  index_t frame_grain() const { return std::max<index_t>(1, row_grain() / std::max<index_t>(j_.R, 1)); }

  // rows(z, f0, f1) for each block: z holds the logits of frames [f0, f1), R rows each.
  template <typename Rows>
  void forward(const Rows& rows) const {
    const index_t fb = frames_per_block(), n = fb * j_.R;
    ScratchVector<T> h(n * j_.J), z(n * j_.X);
    for (index_t f0 = 0; f0 < j_.frames(); f0 += fb) {
      const index_t f1 = std::min(j_.frames(), f0 + fb);
      logits(f0, f1, h.data(), z.data());
      rows(static_cast<const T*>(z.data()), f0, f1);
    }
  }

  // rows(z, dz, f0, f1) writes every d(logits) row of the block into dz; the grads are written whole.
  template <typename Rows>
  void backward(const Rows& rows, T* am_grad, T* lm_grad, T* weight_grad, T* bias_grad) const {
    const index_t J = j_.J, X = j_.X;
    std::fill(am_grad, am_grad + j_.B * j_.T * J, T(0));
    std::fill(lm_grad, lm_grad + j_.B * j_.U * J, T(0));
    std::fill(weight_grad, weight_grad + J * X, T(0));
    std::fill(bias_grad, bias_grad + X, T(0));
    const index_t fb = frames_per_block(), n = fb * j_.R;
    ScratchVector<T> h(n * J), z(n * X), dz(n * X), dh(n * J);
    for (index_t f0 = 0; f0 < j_.frames(); f0 += fb) {
      const index_t f1 = std::min(j_.frames(), f0 + fb), m = (f1 - f0) * j_.R;
      logits(f0, f1, h.data(), z.data());
      rows(static_cast<const T*>(z.data()), dz.data(), f0, f1);
      // d(bias) (column sums), then d(logits) below kFlushBelow zeroed for the GEMMs (see there).
      for_column_chunks(m, X, [&](index_t c0, index_t c1) {
        const T tiny = kFlushBelow<T>;
        for (index_t i = 0; i < m; ++i) {
          T* g = dz.data() + i * X;
          for (index_t c = c0; c < c1; ++c) {
            bias_grad[c] += g[c];
            g[c] = (g[c] < tiny && g[c] > -tiny) ? T(0) : g[c];
          }
        }
      });
      gemm(true, false, J, X, m, h.data(), J, dz.data(), X, T(1), weight_grad, X);
      gemm(false, true, m, J, X, dz.data(), X, weight_, X, T(0), dh.data(), J);
      add_input_grads(h.data(), dh.data(), f0, f1, am_grad, lm_grad);
    }
  }

 private:
  void logits(index_t f0, index_t f1, T* h, T* z) const {
    const index_t m = (f1 - f0) * j_.R, J = j_.J, X = j_.X;
    parallel_for(0, m, std::max<index_t>(1, kGrain / std::max<index_t>(J + X, 1)), [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const index_t f = f0 + i / j_.R;
        simd::dispatch(Activate<T>{am_ + f * J, lm_ + j_.lm_row(f, i % j_.R) * J, h + i * J, J, j_.act});
        if (bias_) std::memcpy(static_cast<void*>(z + i * X), bias_, sizeof(T) * X);
      }
    });
    gemm(false, false, m, X, J, h, J, weight_, X, bias_ ? T(1) : T(0), z, X);
  }

  // d(pre-activation) = dh * act'(h), added to its am row and its lm row; threads own column chunks.
  void add_input_grads(const T* h, const T* dh, index_t f0, index_t f1, T* am_grad, T* lm_grad) const {
    const index_t J = j_.J, m = (f1 - f0) * j_.R;
    for_column_chunks(m, J, [&](index_t c0, index_t c1) {
      for (index_t i = 0; i < m; ++i) {
        const index_t f = f0 + i / j_.R;
        T* ga = am_grad + f * J;
        T* gl = lm_grad + j_.lm_row(f, i % j_.R) * J;
        const T* hi = h + i * J;
        const T* di = dh + i * J;
        for (index_t c = c0; c < c1; ++c) {
          const T g = di[c] * joiner_act_grad(hi[c], j_.act);
          ga[c] += g;
          gl[c] += g;
        }
      }
    });
  }

  const T* am_;
  const T* lm_;
  const T* weight_;
  const T* bias_;
  JoinerShape j_;
};

}  // namespace joiner
}  // namespace cpu
}  // namespace paddle_ext
