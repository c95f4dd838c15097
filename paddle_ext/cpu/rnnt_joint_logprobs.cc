// CPU rnnt_joint_logprobs kernels on raw pointers (no Paddle header). Frames (b, t) are split across the
// cores; each of a frame's R rows is read twice for its lse (cpu_rows.h: max, then sum of exp, SIMD) and
// gives two values; the backward reads each row once more and writes its grad (the only big write).
// The pruning gather copies rows; its grad adds them back, threads owning disjoint (b, column) blocks.
#include "paddle_ext/rnnt_joint_logprobs.h"

#include <algorithm>
#include <cstring>

#include "paddle_ext/cpu_rows.h"
#include "paddle_ext/joiner_blocks.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

using namespace rows;  // NOLINT: the shared row helpers (cpu_rows.h)

template <typename L, bool kClamp>
struct SoftmaxScaled {  // joint_grad with no incoming grad at the element: -softmax * g_sum; kClamp: then clamped
  typename L::V max, log_sum, g_sum, bound, scale;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t) const {
    const typename L::V v = joint_grad(x, max, log_sum, typename L::V{}, g_sum, LaneExp<L>());
    if constexpr (kClamp) return clamped_grad(v, bound, scale);
    return v;
  }
};

template <typename T>
struct JointForward {
  const T* logits;
  const int64_t* symbols;
  const int64_t* ranges;
  T* px;
  T* py;
  acc_t<T>* lse;
  JointShape d;
  index_t row0;  // logits[0] is row row0 (the fused joiner's block)
  template <int W>
  PE_VINLINE void run(index_t f0, index_t f1) const {
    using A = acc_t<T>;
    for (index_t f = f0; f < f1; ++f) {
      const index_t b = f / d.T, t = f % d.T;
      for (index_t r = 0; r < d.R; ++r) {
        const index_t row = f * d.R + r;
        const T* x = logits + (row - row0) * d.C;
        const LseParts l = row_lse_parts<Lanes<W, T>>(x, d.C);
        lse[2 * row] = static_cast<A>(l.max);
        lse[2 * row + 1] = static_cast<A>(l.log_sum);
        const int64_t s = joint_context(ranges, row, r);
        if (!joint_context_ok(s, d.S)) continue;
        const auto logprob = [&](int64_t c) {
          return store<T>(static_cast<A>(joint_logprob<double>(load(x[c]), l.max, l.log_sum)));
        };
        py[joint_py_at(d, b, s, t)] = logprob(d.termination);
        if (s < d.S) px[joint_px_at(d, b, s, t)] = logprob(symbols[b * d.S + s]);
      }
    }
  }
};

template <typename T>
struct JointBackward {
  const T* logits;
  const int64_t* symbols;
  const int64_t* ranges;
  const acc_t<T>* lse;
  const T* px_grad;
  const T* py_grad;
  const T* scale;
  T* logits_grad;
  JointShape d;
  index_t row0;  // logits[0] and logits_grad[0] are row row0 (the fused joiner's block)
  template <int W>
  PE_VINLINE void run(index_t f0, index_t f1) const {
    using A = acc_t<T>;
    using L = Lanes<W, T>;
    const bool clamped = clamp_on(d.clamp);
    for (index_t f = f0; f < f1; ++f) {
      const index_t b = f / d.T, t = f % d.T;
      const A bound = static_cast<A>(d.clamp), item = clamped ? load(scale[b]) : A(1);
      const auto finish = [&](A v) { return clamped ? clamped_grad(v, bound, item) : v; };
      for (index_t r = 0; r < d.R; ++r) {
        const index_t row = f * d.R + r;
        const T* x = logits + (row - row0) * d.C;
        T* dx = logits_grad + (row - row0) * d.C;
        const int64_t s = joint_context(ranges, row, r);
        const bool ok = joint_context_ok(s, d.S), has_symbol = ok && s < d.S;
        const A gy = ok ? load(py_grad[joint_py_at(d, b, s, t)]) : A(0);
        const A gx = has_symbol ? load(px_grad[joint_px_at(d, b, s, t)]) : A(0);
        const A g = gx + gy, m = lse[2 * row], ls = lse[2 * row + 1];
        if (!finite(m)) {
          for (index_t c = 0; c < d.C; ++c) dx[c] = store<T>(finish(joint_grad<A>(load(x[c]), m, ls, A(0), g)));
        } else if (g == 0) {  // a cell no path uses: softmax * 0 (finite softmax)
          std::memset(static_cast<void*>(dx), 0, sizeof(T) * d.C);
        } else if (clamped) {
          map_row<L>(x, dx, d.C, -kInf, SoftmaxScaled<L, true>{L::splat(m), L::splat(ls), L::splat(g),
                                                              L::splat(bound), L::splat(item)});
        } else {
          map_row<L>(x, dx, d.C, -kInf, SoftmaxScaled<L, false>{L::splat(m), L::splat(ls), L::splat(g)});
        }
        if (!ok) continue;
        const int64_t sym = has_symbol ? symbols[b * d.S + s] : -1, blank = d.termination;
        dx[blank] = store<T>(finish(joint_grad<A>(load(x[blank]), m, ls, gy + (sym == blank ? gx : A(0)), g)));
        if (has_symbol && sym != blank) dx[sym] = store<T>(finish(joint_grad<A>(load(x[sym]), m, ls, gx, g)));
      }
    }
  }
};

// Frames per thread chunk: about row_grain(C) rows.
inline index_t frame_grain(const JointShape& d) { return std::max<index_t>(1, row_grain(d.C) / std::max<index_t>(d.R, 1)); }

template <typename K>
void for_frames(const K& kernel, const JointShape& d) {
  parallel_for(0, d.B * d.T, frame_grain(d), [&](index_t f0, index_t f1) { simd::dispatch(kernel, f0, f1); });
}

template <typename T>
void fill_unreached(const int64_t* ranges, T* px, T* py, const JointShape& d) {
  if (!ranges) return;  // cells outside every frame's range stay -inf
  const T minus_inf = store<T>(-std::numeric_limits<acc_t<T>>::infinity());
  std::fill(px, px + d.B * d.S * d.T, minus_inf);
  std::fill(py, py + d.B * (d.S + 1) * d.T, minus_inf);
}

}  // namespace

template <typename T>
void rnnt_joint_forward(const T* logits, const int64_t* symbols, const int64_t* ranges, T* px, T* py, acc_t<T>* lse,
                        const JointShape& d) {
  fill_unreached(ranges, px, py, d);
  if (d.C == 0) return;  // the binding rejects C = 0 (no termination symbol); nothing to read
  for_frames(JointForward<T>{logits, symbols, ranges, px, py, lse, d, 0}, d);
}

template <typename T>
void rnnt_joint_backward(const T* logits, const int64_t* symbols, const int64_t* ranges, const acc_t<T>* lse,
                         const T* px_grad, const T* py_grad, const T* scale, T* logits_grad, const JointShape& d) {
  if (d.C == 0) return;
  populate_for_write(logits_grad, sizeof(T) * d.B * d.T * d.R * d.C);
  for_frames(JointBackward<T>{logits, symbols, ranges, lse, px_grad, py_grad, scale, logits_grad, d, 0}, d);
}

// The fused joiner: the same row kernels on each block of joiner_blocks.h.
template <typename T>
void rnnt_joiner_forward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                         const int64_t* ranges, T* px, T* py, T* lse, const JointShape& d, const JoinerShape& j) {
  fill_unreached(ranges, px, py, d);
  if (d.C == 0) return;
  const joiner::Blocks<T> blocks(am, lm, weight, bias, j);
  blocks.forward([&](const T* z, index_t f0, index_t f1) {
    const JointForward<T> k{z, symbols, ranges, px, py, lse, d, f0 * d.R};
    parallel_for(f0, f1, blocks.frame_grain(), [&](index_t a, index_t b) { simd::dispatch(k, a, b); });
  });
}

template <typename T>
void rnnt_joiner_backward(const T* am, const T* lm, const T* weight, const T* bias, const int64_t* symbols,
                          const int64_t* ranges, const T* lse, const T* px_grad, const T* py_grad, const T* scale,
                          T* am_grad, T* lm_grad, T* weight_grad, T* bias_grad, const JointShape& d,
                          const JoinerShape& j) {
  const joiner::Blocks<T> blocks(am, lm, weight, bias, j);
  blocks.backward(
      [&](const T* z, T* dz, index_t f0, index_t f1) {
        const JointBackward<T> k{z, symbols, ranges, lse, px_grad, py_grad, scale, dz, d, f0 * d.R};
        parallel_for(f0, f1, blocks.frame_grain(), [&](index_t a, index_t b) { simd::dispatch(k, a, b); });
      },
      am_grad, lm_grad, weight_grad, bias_grad);
}

template <typename T>
void rnnt_prune_gather(const T* x, const int64_t* index, T* out, index_t B, index_t N, index_t M, index_t D) {
  if (D == 0) return;
  populate_for_write(out, sizeof(T) * B * M * D);
  parallel_for(0, B * M, row_grain(D), [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      const index_t b = r / M;
      std::memcpy(static_cast<void*>(out + r * D), x + (b * N + index[r]) * D, sizeof(T) * D);
    }
  });
}

template <typename T>
void rnnt_prune_gather_backward(const int64_t* index, const T* out_grad, T* x_grad, index_t B, index_t N, index_t M,
                                index_t D) {
  using A = acc_t<T>;
  constexpr bool kWide = !std::is_same<A, T>::value;  // half types: each grad row summed in float32, rounded once
  populate_for_write(x_grad, sizeof(T) * B * N * D);  // then the zero fill is not one thread's page faults
  std::memset(static_cast<void*>(x_grad), 0, sizeof(T) * B * N * D);
  if (D == 0 || M == 0) return;
  // Work items (b, column block): each owns its slice of x_grad[b], so no two threads add to one element.
  // Blocks of >= 64 columns; enough of them that every thread gets work when B is small.
  const index_t per_item = std::max<index_t>(1, (2 * max_threads() + B - 1) / std::max<index_t>(B, 1));
  const index_t blocks = std::max<index_t>(1, std::min<index_t>(per_item, D / 64));
  const index_t width = (D + blocks - 1) / blocks;
  const index_t grain = std::max<index_t>(1, (index_t(1) << 20) / std::max<index_t>(M * width, 1));
  parallel_for_dynamic(0, B * blocks, grain, [&](index_t i0, index_t i1) {
    ScratchVector<A> wide(kWide ? N * width : 0);  // [N, width]: this work item's columns of x_grad[b]
    for (index_t i = i0; i < i1; ++i) {
      const index_t b = i / blocks, c0 = (i % blocks) * width, c1 = std::min(D, c0 + width), w = c1 - c0;
      if constexpr (kWide) {
        std::fill(wide.begin(), wide.begin() + N * w, A(0));
        for (index_t m = 0; m < M; ++m) {
          const T* g = out_grad + (b * M + m) * D + c0;
          A* dx = wide.data() + index[b * M + m] * w;
          for (index_t c = 0; c < w; ++c) dx[c] += load(g[c]);
        }
        for (index_t k = 0; k < N; ++k)
          for (index_t c = 0; c < w; ++c) x_grad[(b * N + k) * D + c0 + c] = store<T>(wide[k * w + c]);
      } else {
        for (index_t m = 0; m < M; ++m) {
          const T* g = out_grad + (b * M + m) * D;
          T* dx = x_grad + (b * N + index[b * M + m]) * D;
          for (index_t c = c0; c < c1; ++c) dx[c] += g[c];
        }
      }
    }
  });
}

#define PE_INSTANTIATE(T)                                                                                        \
  template void rnnt_joint_forward<T>(const T*, const int64_t*, const int64_t*, T*, T*, acc_t<T>*,              \
                                      const JointShape&);                                                       \
  template void rnnt_joint_backward<T>(const T*, const int64_t*, const int64_t*, const acc_t<T>*, const T*,     \
                                       const T*, const T*, T*, const JointShape&);                              \
  template void rnnt_prune_gather<T>(const T*, const int64_t*, T*, index_t, index_t, index_t, index_t);         \
  template void rnnt_prune_gather_backward<T>(const int64_t*, const T*, T*, index_t, index_t, index_t, index_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

#define PE_INSTANTIATE(T)                                                                                       \
  template void rnnt_joiner_forward<T>(const T*, const T*, const T*, const T*, const int64_t*, const int64_t*,  \
                                       T*, T*, T*, const JointShape&, const JoinerShape&);                      \
  template void rnnt_joiner_backward<T>(const T*, const T*, const T*, const T*, const int64_t*, const int64_t*, \
                                        const T*, const T*, const T*, const T*, T*, T*, T*, T*,                 \
                                        const JointShape&, const JoinerShape&);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
