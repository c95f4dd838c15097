// CPU adaptive_log_softmax kernels on raw pointers (no Paddle header): rows split across the cores,
// each row read twice for its lse (max, then sum of exp) and once more for an elementwise output.
// The formulas of adaptive_log_softmax.h run on vectors with vec_math.h's exps: float in float lanes,
// the other dtypes in double lanes (see Lanes); the kernels are templates on the SIMD width W, compiled
// for AVX-512/AVX2/SSE2 and picked at run time (simd::dispatch; PADDLE_EXT_SIMD caps it).
// The vector path needs a finite lse (a finite row maximum): then x - lse <= ~0 and NaN cannot occur. Rows
// with NaN or +inf, or of only -inf, take the scalar path (std::exp), with the header's exact semantics.
#include "paddle_ext/adaptive_log_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "paddle_ext/cpu_rows.h"
#include "paddle_ext/gemm.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors pass between always_inline functions (vec_math.h)

namespace paddle_ext {
namespace cpu {
namespace {

using namespace rows;  // NOLINT: the shared row helpers (cpu_rows.h)

// The header's elementwise formulas on lanes, as map_row functors.
template <typename L>
struct TargetGradLanes {  // a non-target element; the target one is fixed up after the row
  typename L::V lse, g;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t) const {
    return als_target_grad(x, lse, g, false, LaneExp<L>());
  }
};
template <typename L>
struct FullValueLanes {
  typename L::V lse, offset;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t) const { return als_full_value(x, lse, offset); }
};
template <typename L, typename T>
struct FullGradLanes {
  typename L::V lse, g_sum;
  const T* g;
  index_t k;
  PE_VINLINE typename L::V operator()(typename L::V x, index_t j) const {
    const typename L::V gj = j + L::N <= k ? L::load(g + j) : load_part<L>(g + j, k - j, 0.0);
    return als_full_grad(x, lse, gj, g_sum, LaneExp<L>());
  }
};

// Row r's log-sum-exp, kept in lse for the backward.
template <typename L, typename T>
PE_VINLINE double keep_row_lse(const T* x, index_t k, acc_t<T>* lse, index_t r) {
  const double l = row_lse<L>(x, k);
  lse[r] = static_cast<acc_t<T>>(l);
  return l;
}

template <typename T>
struct TargetForward {
  const T* logits;
  index_t k;
  const int64_t* target;
  T* out;
  acc_t<T>* lse;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const double l = keep_row_lse<Lanes<W, T>>(x, k, lse, r);
      const int64_t t = target[r];
      out[r] = store<T>(static_cast<acc_t<T>>(als_target_ok(t, k) ? load(x[t]) - l : std::nan("")));
    }
  }
};

// Columns [c0, c0 + cols) of each row's target grad: logits rows of stride ld, logits_grad rows of stride ldo
// (the whole row: c0 = 0, cols = ld = ldo = k; logits_grad may then be logits itself).
template <typename T>
struct TargetBackward {
  const T* logits;
  index_t ld;
  const int64_t* target;
  const acc_t<T>* lse;
  const T* out_grad;
  T* logits_grad;
  index_t ldo, c0, cols;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using A = acc_t<T>;
    using L = Lanes<W, T>;
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * ld + c0;
      T* dx = logits_grad + r * ldo;
      const A l = lse[r], g = load(out_grad[r]);
      const int64_t t = target[r];
      const bool in_block = als_target_ok(t, ld) && t >= c0 && t < c0 + cols;
      const A xt = in_block ? load(x[t - c0]) : A(0);  // read first: dx may be x itself (in place)
      if (finite(l)) {
        map_row<L>(x, dx, cols, -kInf, TargetGradLanes<L>{L::splat(l), L::splat(g)});
      } else {
        for (index_t j = 0; j < cols; ++j) dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, false));
      }
      if (in_block) dx[t - c0] = store<T>(als_target_grad<A>(xt, l, g, true));
    }
  }
};

template <typename T>
struct FullForward {
  const T* logits;
  const T* offset;
  T* out;
  acc_t<T>* lse;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using L = Lanes<W, T>;
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const double l = keep_row_lse<L>(x, k, lse, r);
      map_row<L>(x, out + r * k, k, 0.0, FullValueLanes<L>{L::splat(l), L::splat(load(offset[r]))});
    }
  }
};

template <typename T>
struct FullBackward {
  const T* logits;
  const acc_t<T>* lse;
  const T* out_grad;
  T* logits_grad;
  T* offset_grad;
  index_t k;
  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    using L = Lanes<W, T>;
    using A = acc_t<T>;
    for (index_t r = r0; r < r1; ++r) {
      const T* x = logits + r * k;
      const T* g = out_grad + r * k;
      T* dx = logits_grad + r * k;
      const double s = sum_row<L>(g, k, 0.0, Identity<L>());
      const A l = lse[r];
      if (finite(l)) {
        map_row<L>(x, dx, k, -kInf, FullGradLanes<L, T>{L::splat(l), L::splat(s), g, k});
      } else {
        for (index_t j = 0; j < k; ++j) dx[j] = store<T>(als_full_grad<A>(load(x[j]), l, load(g[j]), static_cast<A>(s)));
      }
      offset_grad[r] = store<T>(static_cast<A>(s));
    }
  }
};

// Rows [0, m) in chunks over the threads, each chunk through the widest SIMD the CPU has.
template <typename K>
void for_rows(const K& kernel, index_t m, index_t k) {
  parallel_for(0, m, row_grain(k), [&](index_t begin, index_t end) { simd::dispatch(kernel, begin, end); });
}

}  // namespace

template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k) {
  for_rows(TargetForward<T>{logits, k, target, out, lse}, m, k);
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k) {
  for_rows(TargetBackward<T>{logits, k, target, lse, out_grad, logits_grad, k, 0, k}, m, k);
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k) {
  for_rows(FullForward<T>{logits, offset, out, lse, k}, m, k);
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k) {
  for_rows(FullBackward<T>{logits, lse, out_grad, logits_grad, offset_grad, k}, m, k);
}

namespace {

// How a block of rows' logits grad meets the two GEMMs of its projection. From n_in = 128 on (the head, most
// tails) the GEMMs are compute-bound and fastest on the block whole: the grad overwrites the block's logits.
// Below they are memory-bound (a tail of [m, 32] x [32, 140000]): passes over ~4 MiB of logits grad columns (a
// multiple of 16), which stay in cache between the pass that writes them and the two GEMMs that read them.
// x_grad's GEMM reads w transposed (a B of row stride k), which oneDNN runs slower than the plain layout for
// n_in < 1024: w is copied transposed once per call where there are 512 rows or more to spread the copy over.
struct GradPlan {
  index_t cols;
  bool transpose_w;
  GradPlan(index_t rows, index_t n_in, index_t k, index_t m)
      : cols(n_in >= 128 ? k : std::min<index_t>(k, std::max<index_t>(16, ((index_t(1) << 20) / rows) & ~index_t(15)))),
        transpose_w(n_in < 1024 && m >= 512) {}
  bool whole(index_t k) const { return cols == k; }
};

// Rows of the logits block per step: ~32 MiB of logits (at least 16 rows, so that the GEMMs keep their speed).
constexpr index_t kBlockFloats = index_t(8) << 20;
index_t block_rows(index_t m, index_t k) {
  return std::max<index_t>(1, std::min(m, std::max<index_t>(16, kBlockFloats / std::max<index_t>(k, 1))));
}

// oneDNN's sgemm mallocs its work buffers on every call; once the process has freed a large block, glibc's
// dynamic mmap threshold puts those of up to 32 MiB on the heap, which a long run of blocks' GEMMs grows by
// hundreds of MiB (fragments it cannot reuse). Handing the heap's free pages back every few blocks keeps a
// step's memory flat, at a few ms each time.
constexpr index_t kTrimBlocks = 4;
void release_free_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// w [n_in, k] copied transposed into wt [k, n_in], 64 columns at a time so that the rows written stay in L1.
void copy_transposed(const float* w, index_t n_in, index_t k, float* wt) {
  parallel_for(0, (k + 63) / 64, std::max<index_t>(1, (index_t(1) << 14) / std::max<index_t>(n_in, 1)),
               [&](index_t b0, index_t b1) {
    for (index_t j0 = b0 * 64; j0 < std::min(k, b1 * 64); j0 += 64) {
      const index_t j1 = std::min(k, j0 + 64);
      for (index_t i = 0; i < n_in; ++i) {
        const float* wi = w + i * k;
        for (index_t j = j0; j < j1; ++j) wt[j * n_in + i] = wi[j];
      }
    }
  });
}

// The grads of one block of b rows (x, target, lse, out_grad, x_grad at the block's first row) from its logits
// [b, k]: w_grad = w_beta * w_grad + x^T @ dlogits, x_grad = dlogits @ w^T (wt: w transposed, or nullptr).
// dlogits goes into the logits themselves (whole plan) or pass by pass into `pass` [b, plan.cols].
void block_grads(const GradPlan& plan, const float* x, const float* w, const float* wt, const int64_t* target,
                 float* logits, const float* lse, const float* out_grad, float* pass, float* x_grad, float* w_grad,
                 float w_beta, index_t b, index_t n_in, index_t k) {
  for (index_t c0 = 0; c0 < k; c0 += plan.cols) {
    const index_t c = std::min(plan.cols, k - c0);
    float* const d = plan.whole(k) ? logits : pass;
    const TargetBackward<float> grad{logits, k, target, lse, out_grad, d, c, c0, c};
    parallel_for(0, b, std::max<index_t>(1, (index_t(1) << 16) / c),
                 [&](index_t r0, index_t r1) { simd::dispatch(grad, r0, r1); });
    sgemm(true, false, n_in, c, b, x, n_in, d, c, w_beta, w_grad + c0, k);  // w_grad[:, c0:c0+c] (+)= x^T @ d
    const float x_beta = c0 == 0 ? 0.f : 1.f;                                // x_grad (+)= d @ w[:, c0:c0+c]^T
    if (wt) {
      sgemm(false, false, b, n_in, c, d, c, wt + c0 * n_in, n_in, x_beta, x_grad, n_in);
    } else {
      sgemm(false, true, b, n_in, c, d, c, w + c0, k, x_beta, x_grad, n_in);
    }
  }
}

}  // namespace

void als_linear_target_blocked(const float* x, const float* w, const int64_t* target, const float* out_grad,
                               float* out, float* x_grad, float* w_grad, index_t m, index_t n_in, index_t k) {
  const bool grads = x_grad && w_grad;
  if (grads && (k == 0 || m == 0)) {  // no block below: empty sums
    std::fill(x_grad, x_grad + m * n_in, 0.f);
    std::fill(w_grad, w_grad + n_in * k, 0.f);
  }
  if (m == 0) return;
  const index_t rows = block_rows(m, k);
  const GradPlan plan(rows, n_in, k, m);
  // The logits block is the same size in every call (a multiple of rows * k up to ~32 MiB), so it is one
  // resident block of the output cache, reused by every step and projection.
  size_t block_bytes = sizeof(float) * size_t(rows) * k;
  if (block_bytes >= BlockCache::kGemmMinBytes) block_bytes = std::max(block_bytes, sizeof(float) * size_t(kBlockFloats));
  const HugeScratch logits_scratch(block_bytes, false, BlockCache::kGemmMinBytes);
  ScratchArray<float> lse = scratch_array<float>(rows, false);
  ScratchArray<float> ones = scratch_array<float>(grads && !out_grad ? rows : 1, false);
  std::fill(ones.get(), ones.get() + (grads && !out_grad ? rows : 1), 1.f);
  // The pass buffer and w transposed are mapped for the call only (zeroed: not kept by the output cache, which
  // would hold them resident for the rest of the step).
  const bool passes = grads && !plan.whole(k);
  const HugeScratch pass_scratch(passes ? sizeof(float) * size_t(rows) * plan.cols : 1);
  const bool transpose = grads && plan.transpose_w && k > 0;
  const HugeScratch wt_scratch(transpose ? sizeof(float) * size_t(k) * n_in : 1);
  if (transpose) copy_transposed(w, n_in, k, wt_scratch.as<float>());
  float* const logits = logits_scratch.as<float>();
  for (index_t r0 = 0; r0 < m; r0 += rows) {
    if (r0 > 0 && (r0 / rows) % kTrimBlocks == 0) release_free_heap();
    const index_t b = std::min(rows, m - r0);
    sgemm(false, false, b, k, n_in, x + r0 * n_in, n_in, w, k, 0.f, logits, k);
    for_rows(TargetForward<float>{logits, k, target + r0, out + r0, lse.get()}, b, k);
    if (!grads || k == 0) continue;
    block_grads(plan, x + r0 * n_in, w, transpose ? wt_scratch.as<float>() : nullptr, target + r0, logits, lse.get(),
                out_grad ? out_grad + r0 : ones.get(), pass_scratch.as<float>(), x_grad + r0 * n_in, w_grad,
                r0 == 0 ? 0.f : 1.f, b, n_in, k);
  }
  if (m > rows) release_free_heap();
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void als_target_forward<T>(const T*, const int64_t*, T*, acc_t<T>*, index_t, index_t);            \
  template void als_target_backward<T>(const T*, const int64_t*, const acc_t<T>*, const T*, T*, index_t,     \
                                       index_t);                                                             \
  template void als_full_forward<T>(const T*, const T*, T*, acc_t<T>*, index_t, index_t);                    \
  template void als_full_backward<T>(const T*, const acc_t<T>*, const T*, T*, T*, index_t, index_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
