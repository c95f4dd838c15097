// CPU rnnt_simple_logprobs kernels on raw pointers (no Paddle header); the formulas are in
// rnnt_simple_logprobs.h. The three vocabulary contractions are one packed GEMM (6 x 2-vector register
// tiles, k blocks of 256, T accumulation as in any float GEMM) compiled for AVX-512/AVX2/SSE2 and picked
// at run time (simd::dispatch); the work is split over the threads in (batch item, column block) units.
// Each unit finishes its own tile at once (log + gathers for px/py, the exp factor for the grads), so
// nothing of size [B, S+1, T, C] exists and the [B, S+1, T] tiles are still in cache.
#include "paddle_ext/rnnt_simple_logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "paddle_ext/cpu_rows.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/vec_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors pass between always_inline functions (vec_math.h)

namespace paddle_ext {
namespace cpu {
namespace {

constexpr index_t kKC = 256;  // k block: a packed 6 x 256 A panel and 256 x 2V B panel stay in L1/L2
constexpr index_t kMC = 96;   // rows of A packed at once (multiple of MR)
constexpr index_t kNC = 192;  // columns per work unit (multiple of NR for every width)

// The packed GEMM C[M, N] = A[M, K] B[K, N] on strided operands A(i, k) = A[i rsa + k csa],
// B(k, j) = B[k rsb + j csb]; C row-major with leading dimension ldc, overwritten. Single-threaded:
// the callers hand each thread its own units. pack_a holds kMC * kKC, pack_b kKC * kNC values.
template <typename T, int W>
struct Gemm {
  static constexpr int V = sizeof(T) == 4 ? 2 * W : W;  // lanes per register: W doubles' width
  static constexpr int MR = 6, NR = 2 * V;
  typedef T vec __attribute__((vector_size(sizeof(T) * V)));

  PE_VINLINE static void pack_a(const T* A, index_t rsa, index_t csa, index_t m, index_t kc, T* out) {
    for (index_t i0 = 0; i0 < m; i0 += MR) {
      const index_t mr = std::min<index_t>(MR, m - i0);
      for (index_t k = 0; k < kc; ++k) {
        T* o = out + i0 * kc + k * MR;
        for (index_t i = 0; i < mr; ++i) o[i] = A[(i0 + i) * rsa + k * csa];
        for (index_t i = mr; i < MR; ++i) o[i] = T(0);
      }
    }
  }

  PE_VINLINE static void pack_b(const T* B, index_t rsb, index_t csb, index_t kc, index_t n, T* out) {
    for (index_t j0 = 0; j0 < n; j0 += NR) {
      const index_t nr = std::min<index_t>(NR, n - j0);
      T* o = out + j0 * kc;
      if (csb == 1) {
        for (index_t k = 0; k < kc; ++k) {
          for (index_t j = 0; j < nr; ++j) o[k * NR + j] = B[k * rsb + j0 + j];
          for (index_t j = nr; j < NR; ++j) o[k * NR + j] = T(0);
        }
      } else {  // k runs along memory: read each column once, write it strided
        for (index_t j = 0; j < nr; ++j) {
          const T* col = B + (j0 + j) * csb;
          for (index_t k = 0; k < kc; ++k) o[k * NR + j] = col[k * rsb];
        }
        for (index_t j = nr; j < NR; ++j)
          for (index_t k = 0; k < kc; ++k) o[k * NR + j] = T(0);
      }
    }
  }

  // c[0:mr, 0:nr] (+)= the MR x NR product of packed panels a (kc x MR) and b (kc x NR).
  PE_VINLINE static void micro(index_t kc, const T* a, const T* b, T* c, index_t ldc, index_t mr, index_t nr,
                               bool accumulate) {
    vec acc[MR][2];
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vec{};
    for (index_t k = 0; k < kc; ++k) {
      vec b0, b1;
      std::memcpy(&b0, b + k * NR, sizeof(vec));
      std::memcpy(&b1, b + k * NR + V, sizeof(vec));
      for (int i = 0; i < MR; ++i) {
        const T ai = a[k * MR + i];
        acc[i][0] += ai * b0;
        acc[i][1] += ai * b1;
      }
    }
    if (mr == MR && nr == NR) {
      for (int i = 0; i < MR; ++i) {
        T* row = c + i * ldc;
        if (accumulate) {
          vec c0, c1;
          std::memcpy(&c0, row, sizeof(vec));
          std::memcpy(&c1, row + V, sizeof(vec));
          acc[i][0] += c0;
          acc[i][1] += c1;
        }
        std::memcpy(row, &acc[i][0], sizeof(vec));
        std::memcpy(row + V, &acc[i][1], sizeof(vec));
      }
      return;
    }
    T tile[MR][NR];
    std::memcpy(tile, acc, sizeof(tile));
    for (index_t i = 0; i < mr; ++i)
      for (index_t j = 0; j < nr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : T(0)) + tile[i][j];
  }

  // sum_k a[k] b[k] with V-lane partial sums (the GEMM's rounding class: T accumulation).
  PE_VINLINE static T dot(const T* a, const T* b, index_t K) {
    vec acc0{}, acc1{};
    index_t k = 0;
    for (; k + 2 * V <= K; k += 2 * V) {
      vec a0, a1, b0, b1;
      std::memcpy(&a0, a + k, sizeof(vec));
      std::memcpy(&a1, a + k + V, sizeof(vec));
      std::memcpy(&b0, b + k, sizeof(vec));
      std::memcpy(&b1, b + k + V, sizeof(vec));
      acc0 += a0 * b0;
      acc1 += a1 * b1;
    }
    acc0 += acc1;
    T sum = T(0);
    for (int i = 0; i < V; ++i) sum += acc0[i];
    for (; k < K; ++k) sum += a[k] * b[k];
    return sum;
  }

  PE_VINLINE static void run(index_t M, index_t N, index_t K, const T* A, index_t rsa, index_t csa, const T* B,
                             index_t rsb, index_t csb, T* C, index_t ldc, T* pack_a_buf, T* pack_b_buf) {
    if (K == 0) {
      for (index_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
      return;
    }
    for (index_t pc = 0; pc < K; pc += kKC) {
      const index_t kc = std::min(kKC, K - pc);
      pack_b(B + pc * rsb, rsb, csb, kc, N, pack_b_buf);
      for (index_t ic = 0; ic < M; ic += kMC) {
        const index_t mc = std::min(kMC, M - ic);
        pack_a(A + ic * rsa + pc * csa, rsa, csa, mc, kc, pack_a_buf);
        for (index_t j0 = 0; j0 < N; j0 += NR) {
          for (index_t i0 = 0; i0 < mc; i0 += MR) {
            micro(kc, pack_a_buf + i0 * kc, pack_b_buf + j0 * kc, C + (ic + i0) * ldc + j0, ldc,
                  std::min<index_t>(MR, mc - i0), std::min<index_t>(NR, N - j0), pc > 0);
          }
        }
      }
    }
  }
};

constexpr index_t kTC = 16;  // frames per chunk of the elementwise passes: their am / am_grad rows stay in L1

// Scratch arrays every element of which is written before it is read: no zero fill (std::vector would
// clear tens of MB per call).
template <typename T>
ScratchArray<T> scratch(index_t n) {
  return scratch_array<T>(n, false);
}

template <typename T>
struct PackBuffers {
  ScratchVector<T> a = ScratchVector<T>(kMC * kKC), b = ScratchVector<T>(kKC * kNC);
  ScratchVector<T> gathered;  // the forward's am[t, symbols[s]] for a chunk of frames, [S, kTC]
};

// out[r, c] = exp(x[r, c] - max_c x[r, :]) and row_max[r], for `rows` rows of C. Rows with a NaN or a
// non-finite maximum take std::exp (giving the NaNs of the unfused formula).
struct ExpShifted {
  template <int W, typename T>
  PE_VINLINE void run(const T* x, T* out, T* row_max, index_t r0, index_t r1, index_t C) const {
    for (index_t r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T* o = out + r * C;
      // the maximum and a NaN flag in vector lanes (a scalar scan here was 60% of this pass)
      using L = rows::Lanes<W, T>;
      typename L::V hi = L::splat(-rows::kInf);
      typename L::Mask nan_lanes{};
      index_t c = 0;
      for (; c + L::N <= C; c += L::N) {
        const typename L::V v = L::load(xr + c);
        hi = v > hi ? v : hi;
        nan_lanes |= v != v;
      }
      T m = static_cast<T>(L::hmax(hi));
      bool nan = L::any(nan_lanes);
      for (; c < C; ++c) {
        m = xr[c] > m ? xr[c] : m;
        nan |= xr[c] != xr[c];
      }
      row_max[r] = nan ? std::numeric_limits<T>::quiet_NaN() : m;
      c = 0;
      if (!nan && std::isfinite(m)) {
        if constexpr (std::is_same<T, float>::value) {
          constexpr int F = 2 * W;
          for (; c + F <= C; c += F) {
            simd::vf<F> v;
            std::memcpy(&v, xr + c, sizeof(v));
            v = simd::vexpf<F>(v - m);
            std::memcpy(o + c, &v, sizeof(v));
          }
        } else {
          for (; c + W <= C; c += W) simd::storeu<W>(o + c, simd::vexp<W>(simd::loadu<W>(xr + c) - m));
        }
      }
      for (; c < C; ++c) o[c] = std::exp(xr[c] - m);
    }
  }
};

template <typename T>
void exp_shifted(const T* x, T* out, T* row_max, index_t rows, index_t C) {
  parallel_for(0, rows, std::max<index_t>(1, (index_t(1) << 16) / std::max<index_t>(C, 1)),
               [&](index_t r0, index_t r1) { simd::dispatch(ExpShifted{}, x, out, row_max, r0, r1, C); });
}

// Forward unit (b, t block): approx tile by GEMM over lm's L rows, then, kTC frames at a time (their am
// rows in L1): the gathered am[t, symbols[s]] and am[t, term], per lm row its normalisers N (vector logs; a
// group of lanes with a fallback cell or a NaN takes rnnt_normalizer), and px / py of the contexts s that
// use the row (s itself, or every s when L = 1).
struct ForwardUnit {
  template <int W, typename T>
  PE_VINLINE void run(const T* lm, const T* am, const int64_t* symbols, const T* lp, const T* ap, const T* lm_max,
                      const T* am_max, T* px, T* py, T* approx, index_t b, index_t t0, index_t t1, index_t S,
                      index_t L, index_t T_, index_t C, int64_t term, bool modified, PackBuffers<T>* buf) const {
    constexpr bool kFull = std::is_same<T, double>::value;
    const index_t S1 = S + 1, T1 = modified ? T_ : T_ + 1, nt = t1 - t0;
    T* ap_tile = approx + b * L * T_ + t0;
    if (L == 1) {  // one lm row: dot products of contiguous rows, no packing
      for (index_t j = 0; j < nt; ++j) ap_tile[j] = Gemm<T, W>::dot(lp + b * C, ap + (b * T_ + t0 + j) * C, C);
    } else {
      Gemm<T, W>::run(L, nt, C, lp + b * L * C, C, 1, ap + (b * T_ + t0) * C, 1, C, ap_tile, T_, buf->a.data(),
                      buf->b.data());
    }
    const T bound = rnnt_fallback_bound<T>(C);
    const int64_t* sym = symbols + b * S;
    buf->gathered.resize(S * kTC);
    T* g = buf->gathered.data();
    T g_term[kTC];
    double n[kTC];
    for (index_t j0 = 0; j0 < nt; j0 += kTC) {
      const index_t nj = std::min(kTC, nt - j0), t = t0 + j0;
      const T* am_t = am + (b * T_ + t) * C;
      for (index_t j = 0; j < nj; ++j) {
        const T* am_row = am_t + j * C;
        g_term[j] = am_row[term];
        for (index_t s = 0; s < S; ++s) g[s * kTC + j] = am_row[sym[s]];
      }
      for (index_t row = 0; row < L; ++row) {
        const T* lm_row = lm + (b * L + row) * C;
        const T* a = ap_tile + row * T_ + j0;
        const T* amx = am_max + b * T_ + t;
        const double lmx = lm_max[b * L + row];
        index_t i = 0;
        for (; i + W <= nj; i += W) {
          simd::vd<W> av, shift;
          for (int k = 0; k < W; ++k) {
            av[k] = a[i + k];
            shift[k] = lmx + static_cast<double>(amx[i + k]);
          }
          if (simd::any<W>(!(av >= static_cast<double>(bound)))) break;  // fallback cell or NaN: scalar below
          simd::storeu<W>(n + i, simd::vlog<W, kFull>(av) + shift);
        }
        for (; i < nj; ++i) n[i] = rnnt_normalizer<T>(a[i], lmx + amx[i], bound, lm_row, am_t + i * C, C);
        for (index_t s = L == 1 ? 0 : row; s < (L == 1 ? S1 : row + 1); ++s) {
          const double lm_term = lm_row[term];
          T* py_row = py + (b * S1 + s) * T_ + t;
          for (index_t j = 0; j < nj; ++j) py_row[j] = static_cast<T>(g_term[j] + lm_term - n[j]);
          if (s == S) continue;
          const double lm_sym = lm_row[sym[s]];
          T* px_row = px + (b * S + s) * T1 + t;
          for (index_t j = 0; j < nj; ++j) px_row[j] = static_cast<T>(g[s * kTC + j] + lm_sym - n[j]);
        }
      }
    }
    if (!modified && t1 == T_)
      for (index_t s = 0; s < S; ++s) px[(b * S + s) * T1 + T_] = neg_inf<T>();
  }
};

// Grad GEMM unit (b, c block) of one of the two contractions with the weights w = G / approx [S+1, T]:
// transposed = false: lm_grad[s, c] = -lp[s, c] sum_t w[s, t] ap[t, c]   (M = S+1, K = T)
// transposed = true:  am_grad[t, c] = -ap[t, c] sum_s w[s, t] lp[s, c]   (M = T,   K = S+1)
struct GradUnit {
  template <int W, typename T>
  PE_VINLINE void run(const T* w, const T* factor, const T* other, T* out, index_t M, index_t K, index_t c0,
                      index_t c1, index_t C, bool transposed, PackBuffers<T>* buf) const {
    if (transposed && K == 1) {  // one lm row: am_grad[t, c] = -ap[t, c] w[t] lp[c], elementwise
      for (index_t i = 0; i < M; ++i) {
        T* o = out + i * C;
        const T* f = factor + i * C;
        for (index_t c = c0; c < c1; ++c) o[c] = -f[c] * (w[i] * other[c]);
      }
      return;
    }
    if (!transposed && M == 1) {  // one lm row: lm_grad[c] = -lp[c] sum_t w[t] ap[t, c], row by row
      std::fill(out + c0, out + c1, T(0));
      for (index_t k = 0; k < K; ++k) {
        const T* row = other + k * C;
        for (index_t c = c0; c < c1; ++c) out[c] += w[k] * row[c];
      }
    } else {  // A(i, k) = w[i, k] (rows s) or w[k, i] (rows t); B(k, j) = other[k, c0 + j]
      Gemm<T, W>::run(M, c1 - c0, K, w, transposed ? 1 : K, transposed ? M : 1, other + c0, C, 1, out + c0, C,
                      buf->a.data(), buf->b.data());
    }
    for (index_t i = 0; i < M; ++i) {
      T* o = out + i * C;
      const T* f = factor + i * C;
      for (index_t c = c0; c < c1; ++c) o[c] = -f[c] * o[c];
    }
  }
};

}  // namespace

template <typename T>
void rnnt_simple_logprobs_forward(const T* lm, const T* am, const int64_t* symbols, T* px, T* py, T* approx,
                                  index_t B, index_t S, index_t L, index_t T_, index_t C, int64_t termination_symbol,
                                  bool modified) {
  if (B == 0 || T_ == 0) {  // only regular px's column T remains
    if (!modified)
      for (index_t i = 0; i < B * S; ++i) px[i * (T_ + 1) + T_] = neg_inf<T>();
    return;
  }
  auto lp = scratch<T>(B * L * C), ap = scratch<T>(B * T_ * C), lm_max = scratch<T>(B * L),
       am_max = scratch<T>(B * T_);
  exp_shifted(lm, lp.get(), lm_max.get(), B * L, C);
  exp_shifted(am, ap.get(), am_max.get(), B * T_, C);
  const index_t blocks = (T_ + kNC - 1) / kNC;
  parallel_for_dynamic(0, B * blocks, 1, [&](index_t u0, index_t u1) {
    PackBuffers<T> buf;
    for (index_t u = u0; u < u1; ++u) {
      const index_t b = u / blocks, t0 = (u % blocks) * kNC;
      simd::dispatch(ForwardUnit{}, lm, am, symbols, lp.get(), ap.get(), lm_max.get(), am_max.get(), px, py,
                     approx, b, t0, std::min(T_, t0 + kNC), S, L, T_, C, termination_symbol, modified, &buf);
    }
  });
}

template <typename T>
void rnnt_simple_logprobs_backward(const T* lm, const T* am, const int64_t* symbols, const T* approx,
                                   const T* px_grad, const T* py_grad, T* lm_grad, T* am_grad, index_t B, index_t S,
                                   index_t L, index_t T_, index_t C, int64_t termination_symbol, bool modified) {
  const index_t S1 = S + 1, T1 = modified ? T_ : T_ + 1;
  if (T_ == 0 || C == 0) {  // no cell: nothing reaches lm or am
    std::fill(lm_grad, lm_grad + B * L * C, T(0));
    std::fill(am_grad, am_grad + B * T_ * C, T(0));
    return;
  }
  auto lp = scratch<T>(B * L * C), ap = scratch<T>(B * T_ * C), lm_max = scratch<T>(B * L),
       am_max = scratch<T>(B * T_), w = scratch<T>(B * L * T_);
  exp_shifted(lm, lp.get(), lm_max.get(), B * L, C);
  exp_shifted(am, ap.get(), am_max.get(), B * T_, C);
  const T bound = rnnt_fallback_bound<T>(C);
  // G[row, t]: the grad of the normaliser of lm row `row` on frame t, summed over the s that use the row
  auto cell_grad = [&](index_t b, index_t row, index_t t) {
    T g = T(0);
    for (index_t s = L == 1 ? 0 : row; s < (L == 1 ? S1 : row + 1); ++s) {
      g += py_grad[(b * S1 + s) * T_ + t];
      if (s < S) g += px_grad[(b * S + s) * T1 + t];
    }
    return g;
  };
  // the GEMM weights G / approx (rows of G summed over their contexts s, in order along t); fallback cells
  // get 0 here and their exact share below
  parallel_for(0, B * L, std::max<index_t>(1, 4096 / (T_ * (L == 1 ? S1 : 1))), [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      const index_t b = r / L, row = r % L;
      T* w_row = w.get() + r * T_;
      std::fill(w_row, w_row + T_, T(0));
      for (index_t s = L == 1 ? 0 : row; s < (L == 1 ? S1 : row + 1); ++s) {
        const T* gy = py_grad + (b * S1 + s) * T_;
        for (index_t t = 0; t < T_; ++t) w_row[t] += gy[t];
        if (s == S) continue;
        const T* gx = px_grad + (b * S + s) * T1;
        for (index_t t = 0; t < T_; ++t) w_row[t] += gx[t];
      }
      const T* a = approx + r * T_;
      for (index_t t = 0; t < T_; ++t) w_row[t] = a[t] < bound ? T(0) : w_row[t] / a[t];
    }
  });
  const index_t blocks = (C + kNC - 1) / kNC;
  parallel_for_dynamic(0, 2 * B * blocks, 1, [&](index_t u0, index_t u1) {
    PackBuffers<T> buf;
    for (index_t u = u0; u < u1; ++u) {
      const bool for_am = u >= B * blocks;
      const index_t v = u % (B * blocks), b = v / blocks, c0 = (v % blocks) * kNC, c1 = std::min(C, c0 + kNC);
      if (for_am) {
        T* ag = am_grad + b * T_ * C;
        simd::dispatch(GradUnit{}, w.get() + b * L * T_, ap.get() + b * T_ * C, lp.get() + b * L * C, ag, T_, L,
                       c0, c1, C, true, &buf);
        // the gathered terms of these columns while they are in cache (a later pass over am_grad read it all
        // back from memory): px_grad at each symbol's column, in s order, then py_grad summed over s at the
        // termination column
        const int64_t* sym = symbols + b * S;
        for (index_t s = 0; s < S; ++s) {
          if (sym[s] < c0 || sym[s] >= c1) continue;
          const T* gx = px_grad + (b * S + s) * T1;
          T* col = ag + sym[s];
          for (index_t t = 0; t < T_; ++t) col[t * C] += gx[t];
        }
        if (termination_symbol >= c0 && termination_symbol < c1) {
          ScratchVector<double> sy(T_, 0.0);
          for (index_t s = 0; s < S1; ++s) {
            const T* gy = py_grad + (b * S1 + s) * T_;
            for (index_t t = 0; t < T_; ++t) sy[t] += gy[t];
          }
          for (index_t t = 0; t < T_; ++t) ag[t * C + termination_symbol] += static_cast<T>(sy[t]);
        }
      } else {
        simd::dispatch(GradUnit{}, w.get() + b * L * T_, lp.get() + b * L * C, ap.get() + b * T_ * C,
                       lm_grad + b * L * C, L, T_, c0, c1, C, false, &buf);
      }
    }
  });
  // lm_grad's gathered terms, and the fallback cells' exact share, one batch item per thread
  parallel_for(0, B, 1, [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) {
      const int64_t* sym = symbols + b * S;
      T* lg = lm_grad + b * L * C;
      T* ag = am_grad + b * T_ * C;
      for (index_t s = 0; s < S1; ++s) {
        double sx = 0, sy = 0;
        for (index_t t = 0; t < T_; ++t) {
          if (s < S) sx += px_grad[(b * S + s) * T1 + t];
          sy += py_grad[(b * S1 + s) * T_ + t];
        }
        T* lg_row = lg + (L == 1 ? 0 : s) * C;
        if (s < S) lg_row[sym[s]] += static_cast<T>(sx);
        lg_row[termination_symbol] += static_cast<T>(sy);
      }
      for (index_t row = 0; row < L; ++row) {
        for (index_t t = 0; t < T_; ++t) {
          if (!(approx[(b * L + row) * T_ + t] < bound)) continue;
          const T g = cell_grad(b, row, t);
          const T* lm_row = lm + (b * L + row) * C;
          const T* am_row = am + (b * T_ + t) * C;
          const double n = rnnt_exact_lse(lm_row, am_row, C);
          for (index_t c = 0; c < C; ++c) {
            const double p = std::exp(static_cast<double>(lm_row[c]) + static_cast<double>(am_row[c]) - n);
            const double share = p == p ? static_cast<double>(g) * p : 0.0;
            lg[row * C + c] -= static_cast<T>(share);
            ag[t * C + c] -= static_cast<T>(share);
          }
        }
      }
    }
  });
}

#define PE_INSTANTIATE(T)                                                                                          \
  template void rnnt_simple_logprobs_forward<T>(const T*, const T*, const int64_t*, T*, T*, T*, index_t, index_t, \
                                                index_t, index_t, index_t, int64_t, bool);                         \
  template void rnnt_simple_logprobs_backward<T>(const T*, const T*, const int64_t*, const T*, const T*, const T*, \
                                                 T*, T*, index_t, index_t, index_t, index_t, index_t, int64_t, bool);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
