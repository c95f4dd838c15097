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
// (the whole row: c0 = 0, cols = ld = ldo = k).
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
      if (finite(l)) {
        map_row<L>(x, dx, cols, -kInf, TargetGradLanes<L>{L::splat(l), L::splat(g)});
      } else {
        for (index_t j = 0; j < cols; ++j) dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, false));
      }
      const int64_t t = target[r];
      if (als_target_ok(t, ld) && t >= c0 && t < c0 + cols) {
        dx[t - c0] = store<T>(als_target_grad<A>(load(x[t - c0]), l, g, true));
      }
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

void als_linear_target_backward(const float* x, const float* w, const int64_t* target, const float* logits,
                                const float* lse, const float* out_grad, float* x_grad, float* w_grad, index_t m,
                                index_t n_in, index_t k) {
  if (k == 0 || m == 0) {  // no block below: empty sums
    std::fill(x_grad, x_grad + m * n_in, 0.f);
    std::fill(w_grad, w_grad + n_in * k, 0.f);
    return;
  }
  // From n_in = 128 on (the head, most tails) both GEMMs are compute-bound and fastest whole: one block. Below
  // they are memory-bound (a tail of [2048, 32] x [32, 140000]): blocks of ~4 MiB of logits grad (a multiple of
  // 16 columns), which stay in cache between the pass that writes them and the two GEMMs that read them.
  // The scratch comes resident from the output cache (memory.h).
  const bool whole = n_in >= 128;
  const index_t cols = whole ? k : std::min<index_t>(k, std::max<index_t>(16, ((index_t(1) << 20) / m) & ~index_t(15)));
  const HugeScratch block_scratch(sizeof(float) * size_t(m) * cols, false, BlockCache::kGemmMinBytes);
  // x_grad's GEMM reads w transposed (a B of row stride k), which oneDNN runs slower than the plain layout for
  // n_in < 1024; copying w transposed repays itself where the GEMM has m >= 512 rows to spread it over.
  const bool transpose_w = n_in < 1024 && m >= 512;
  const HugeScratch w_scratch(transpose_w ? sizeof(float) * size_t(cols) * n_in : 1, false, BlockCache::kGemmMinBytes);
  float* const block = block_scratch.as<float>();
  float* const w_block = w_scratch.as<float>();
  for (index_t c0 = 0; c0 < k; c0 += cols) {
    const index_t c = std::min(cols, k - c0);
    const TargetBackward<float> grad{logits, k, target, lse, out_grad, block, c, c0, c};
    parallel_for(0, m, std::max<index_t>(1, (index_t(1) << 16) / c),
                 [&](index_t r0, index_t r1) { simd::dispatch(grad, r0, r1); });
    // w_grad[:, c0:c0+c] = x^T @ block
    sgemm(true, false, n_in, c, m, x, n_in, block, c, 0.f, w_grad + c0, k);
    // x_grad (+)= block @ w[:, c0:c0+c]^T, that slice of w copied transposed first where transpose_w (64
    // columns at a time, so that the rows written stay in L1).
    if (!transpose_w) {
      sgemm(false, true, m, n_in, c, block, c, w + c0, k, c0 == 0 ? 0.f : 1.f, x_grad, n_in);
      continue;
    }
    parallel_for(0, (c + 63) / 64, 1, [&](index_t b0, index_t b1) {
      for (index_t j0 = b0 * 64; j0 < std::min(c, b1 * 64); j0 += 64) {
        const index_t j1 = std::min(c, j0 + 64);
        for (index_t i = 0; i < n_in; ++i) {
          const float* wi = w + i * k + c0;
          for (index_t j = j0; j < j1; ++j) w_block[j * n_in + i] = wi[j];
        }
      }
    });
    sgemm(false, false, m, n_in, c, block, c, w_block, n_in, c0 == 0 ? 0.f : 1.f, x_grad, n_in);
  }
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
