// CPU mutual_information_recursion on raw pointers (no Paddle header).
// Batch items run in parallel (parallel.h); with fewer items than threads, each item's rows are split
// into bands pipelined over column chunks (banded_wavefront). Inside a band the recursion goes row by
// row, so every access is contiguous: the forward keeps p[s,t-1] in a register and reads row s-1, the
// backward first computes the row's symbol-edge grads (independent exps), then one serial pass along py.
#include "paddle_ext/mutual_information.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

using P = mi_acc_t;

// One batch item: its rows of px, py, p and grads, and its box.
template <typename T>
struct Item {
  const T *px, *py;
  const P* p_in;  // the backward reads p
  P* p;           // the forward writes it
  T *px_grad, *py_grad;
  MIBox box;
  index_t T_, T1, P1;
  bool modified;
};

constexpr index_t kBlock = 16;
// The block form is exact when (1) its partial sums z never lose a term to underflow: z is monotone,
// so it suffices that the first nonzero one, exp(first - r) with `first` the first finite term, is
// far above the subnormals (e^-700 > 2^-1009: a flushed or subnormal later term is then below 2^-60
// of z); (2) c + r does not cancel: |C| below kMaxRunningSum keeps its rounding (and C's own) within
// ulps of 1e3, as the cell-by-cell p + y rounds. Blocks outside either take the cell-by-cell path.
constexpr mi_acc_t kMaxFirstGap = 700;
constexpr mi_acc_t kMaxRunningSum = 1024;

// p[t] = log_add(a[t], p[t-1] + y[t-1]) for t in [t, e) of one row, given v = p[t-1].
// The per-cell form has exp + log1p on the serial chain (~50 ns a cell). Written as
// p[t] = C[t] + q[t] with C the running sum of y, q is a log-cum-sum-exp of b = a - C; with one
// reference r = max(v, b) per block, z = exp(v - r) + sum exp(b - r) and p = C + r + log(z): only
// exp(v - r) and the block's last log are serial, the other exps and logs are independent.
// Non-finite y, NaN or +inf a, a NaN/+inf v, or a block outside the bounds above fall back to the
// cell-by-cell recursion.
template <typename T, typename FromS>
P scan_block(P* cur, const T* pyr, const FromS& from_s, P v, index_t t, index_t e) {
  const index_t n = e - t;
  P a[kBlock], c[kBlock];
  P C = P(0), r = v;
  bool ok = v == v && v != -neg_inf<P>();
  for (index_t i = 0; i < n; ++i) {
    C += static_cast<P>(load(pyr[t + i - 1]));
    c[i] = C;
    a[i] = from_s(t + i);
    ok &= (std::fabs(C) < kMaxRunningSum) & (a[i] == a[i]) & (a[i] != -neg_inf<P>());  // (false for NaN C)
    r = std::max(r, a[i] - C);
  }
  P first = v;  // the first finite term (v, as a rule)
  for (index_t i = 0; first == neg_inf<P>() && i < n; ++i) first = a[i] - c[i];
  if (!ok || r - first > kMaxFirstGap) {  // (-inf - -inf: NaN, not above: nothing reaches the block)
    for (index_t i = 0; i < n; ++i) cur[t + i] = v = mi_forward_cell<P>(a[i], v + static_cast<P>(load(pyr[t + i - 1])));
    return v;
  }
  if (r == neg_inf<P>()) {  // nothing reaches this block
    for (index_t i = 0; i < n; ++i) cur[t + i] = neg_inf<P>();
    return neg_inf<P>();
  }
  P z = std::exp(v - r);
  for (index_t i = 0; i < n; ++i) {
    z += std::exp(a[i] - c[i] - r);
    cur[t + i] = c[i] + r + std::log(z);
  }
  return cur[e - 1];
}

// Forward cells t in [tb, te) of row s. p[s, tb-1] (when tb > t_begin) and row s-1 are done.
// Blocks are aligned to t_begin, so every split of a row into segments gives the same bits.
template <typename T>
void forward_segment(const Item<T>& it, index_t s, index_t tb, index_t te) {
  const index_t s0 = it.box.s_begin, t0 = it.box.t_begin;
  P* cur = it.p + s * it.P1;
  const T* pyr = it.py + s * it.T_;
  const P* prev = it.p + (s - 1) * it.P1;
  const T* pxr = it.px + (s - 1) * it.T1;
  index_t t = tb;
  P v;
  if (t == t0) {  // the box's first column: only the s direction (modified: unreachable for s > s_begin)
    v = s == s0 ? P(0) : it.modified ? neg_inf<P>() : prev[t0] + static_cast<P>(load(pxr[t0]));
    cur[t++] = v;
  } else {
    v = cur[t - 1];
  }
  if (s == s0) {  // the box's first row: only py moves
    for (; t < te; ++t) cur[t] = v = v + static_cast<P>(load(pyr[t - 1]));
    return;
  }
  auto regular = [&](index_t u) { return prev[u] + static_cast<P>(load(pxr[u])); };
  auto modified = [&](index_t u) { return prev[u - 1] + static_cast<P>(load(pxr[u - 1])); };
  while (t < te) {
    const index_t e = std::min(te, t0 + ((t - t0) / kBlock + 1) * kBlock);
    v = it.modified ? scan_block(cur, pyr, modified, v, t, e) : scan_block(cur, pyr, regular, v, t, e);
    t = e;
  }
}

// Backward cells t in [tb, te) of row s: gc is p's grad on row s (gc[te] done when te <= t_end),
// gn on row s+1 (done). The px edges are independent exps; then one serial pass along py from the right.
template <typename T>
void backward_segment(const Item<T>& it, P ans_grad, P* gc, const P* gn, index_t s, index_t tb, index_t te) {
  const index_t s1 = it.box.s_end, t1 = it.box.t_end, P1 = it.P1;
  const P* pr = it.p_in + s * P1;
  const T* pyr = it.py + s * it.T_;
  T* ygr = it.py_grad + s * it.T_;
  if (s < s1) {
    const P* pn = pr + P1;
    const T* pxr = it.px + s * it.T1;
    T* xgr = it.px_grad + s * it.T1;
    const index_t xe = it.modified ? std::min(te, t1) : te;  // modified: no symbol edge from column t_end
    for (index_t t = tb; t < xe; ++t) {
      const index_t nx = it.modified ? t + 1 : t;
      const P xg = gn[nx] * mi_edge_weight<P>(pr[t], static_cast<P>(load(pxr[t])), pn[nx]);
      xgr[t] = store<T>(xg);
      gc[t] = xg;
    }
    for (index_t t = xe; t < te; ++t) gc[t] = P(0);
  } else {
    for (index_t t = tb; t < te; ++t) gc[t] = P(0);
  }
  index_t t = te - 1;
  if (t == t1) {  // no py edge leaves the last column
    if (s == s1) gc[t] = ans_grad;
    --t;
  }
  P right = gc[t + 1];
  for (; t >= tb; --t) {
    const P yg = right * mi_edge_weight<P>(pr[t], static_cast<P>(load(pyr[t])), pr[t + 1]);
    ygr[t] = store<T>(yg);
    gc[t] = right = gc[t] + yg;
  }
}

template <typename T>
void forward_item(const Item<T>& it, index_t S, T* ans) {
  const MIBox& x = it.box;
  if (!(x.s_begin == 0 && x.t_begin == 0 && x.s_end == S && x.t_end == it.T_))
    std::fill(it.p, it.p + (S + 1) * it.P1, neg_inf<P>());
  for (index_t s = x.s_begin; s <= x.s_end; ++s) forward_segment(it, s, x.t_begin, x.t_end + 1);
  *ans = store<T>(it.p[x.s_end * it.P1 + x.t_end]);
}

template <typename T>
void zero_grads(const Item<T>& it, index_t S) {
  std::fill(it.px_grad, it.px_grad + S * it.T1, store<T>(P(0)));
  std::fill(it.py_grad, it.py_grad + (S + 1) * it.T_, store<T>(P(0)));
}

// rows: 2 * P1 scratch (p's grad on rows s and s+1).
template <typename T>
void backward_item(const Item<T>& it, index_t S, P ans_grad, P* rows) {
  zero_grads(it, S);
  const MIBox& x = it.box;
  for (index_t s = x.s_end; s >= x.s_begin; --s)
    backward_segment(it, ans_grad, rows + (s & 1) * it.P1, rows + ((s + 1) & 1) * it.P1, s, x.t_begin, x.t_end + 1);
}

// One item on all threads: rows split into one band per thread, each band sweeping column chunks;
// band k starts chunk c once band k-1 (the rows it depends on) has finished it: a pipelined wavefront.
// fn(r, a, b) runs row r (in dependency order) on columns [a, b) (in sweep order); it allocates nothing and
// must not throw (the next band would wait for it forever).
template <typename Fn>
void banded_wavefront(index_t nrows, index_t ncols, const Fn& fn) {
  constexpr index_t kChunk = 128;
  const index_t nchunks = (ncols + kChunk - 1) / kChunk;
#ifdef _OPENMP
  ScratchVector<std::atomic<index_t>> done(max_threads());
  for (auto& d : done) d.store(0);
  const ShortSpin spin;
#pragma omp parallel num_threads(max_threads())
  {
    const index_t nb = omp_get_num_threads(), k = omp_get_thread_num();
    const index_t r0 = nrows * k / nb, r1 = nrows * (k + 1) / nb;
    for (index_t c = 0; c < nchunks; ++c) {
      if (k > 0)
        while (done[k - 1].load(std::memory_order_acquire) <= c) std::this_thread::yield();
      for (index_t r = r0; r < r1; ++r) fn(r, c * kChunk, std::min(ncols, (c + 1) * kChunk));
      done[k].store(c + 1, std::memory_order_release);
    }
  }
#else
  for (index_t r = 0; r < nrows; ++r) fn(r, 0, ncols);
#endif
}

// Batch items per thread at least: a thread is worth starting for ~64k cells (a few hundred µs);
// below that the fork/join (and, on a loaded machine, waiting for a descheduled thread) costs more.
inline index_t item_grain(index_t S, index_t T_) {
  return std::max<index_t>(1, (index_t(1) << 16) / ((S + 1) * (T_ + 1)));
}

// Fewer items than threads and a big enough lattice: parallelise inside each item instead.
inline bool use_bands(index_t B, const MIBox& x) {
  const index_t rows = x.s_end - x.s_begin + 1, cols = x.t_end - x.t_begin + 1;
  return B < max_threads() && rows >= 8 * max_threads() && rows * cols >= (index_t(1) << 17);
}

template <typename T>
Item<T> make_item(const T* px, const T* py, const P* p_in, P* p, T* px_grad, T* py_grad, const int64_t* boundary,
                  index_t b, index_t S, index_t T_, bool modified) {
  const index_t T1 = modified ? T_ : T_ + 1, P1 = T_ + 1;
  return {px + b * S * T1,
          py + b * (S + 1) * T_,
          p_in == nullptr ? nullptr : p_in + b * (S + 1) * P1,
          p == nullptr ? nullptr : p + b * (S + 1) * P1,
          px_grad == nullptr ? nullptr : px_grad + b * S * T1,
          py_grad == nullptr ? nullptr : py_grad + b * (S + 1) * T_,
          mi_box(boundary, b, S, T_),
          T_,
          T1,
          P1,
          modified};
}

}  // namespace

index_t mutual_information_check_boundary(const int64_t* boundary, index_t B, index_t S, index_t T_) {
  if (boundary == nullptr) return -1;
  for (index_t b = 0; b < B; ++b)
    if (!mi_box_valid(mi_box(boundary, b, S, T_), S, T_)) return b;
  return -1;
}

template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified) {
  auto item = [&](index_t b) {
    return make_item<T>(px, py, nullptr, p, nullptr, nullptr, boundary, b, S, T_, modified);
  };
  if (B > 0 && use_bands(B, item(0).box)) {
    for (index_t b = 0; b < B; ++b) {
      const Item<T> it = item(b);
      const MIBox& x = it.box;
      if (!use_bands(B, x)) {
        forward_item(it, S, ans + b);
        continue;
      }
      if (!(x.s_begin == 0 && x.t_begin == 0 && x.s_end == S && x.t_end == T_))
        std::fill(it.p, it.p + (S + 1) * it.P1, neg_inf<P>());
      banded_wavefront(x.s_end - x.s_begin + 1, x.t_end - x.t_begin + 1, [&](index_t r, index_t a, index_t e) {
        forward_segment(it, x.s_begin + r, x.t_begin + a, x.t_begin + e);
      });
      ans[b] = store<T>(it.p[x.s_end * it.P1 + x.t_end]);
    }
    return;
  }
  parallel_for(0, B, item_grain(S, T_), [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) forward_item(item(b), S, ans + b);
  });
}

template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const P* p,
                                 const T* ans_grad, T* px_grad, T* py_grad, index_t B, index_t S, index_t T_,
                                 bool modified) {
  auto item = [&](index_t b) {
    return make_item<T>(px, py, p, nullptr, px_grad, py_grad, boundary, b, S, T_, modified);
  };
  auto grad_of = [&](index_t b) { return ans_grad == nullptr ? P(1) : static_cast<P>(load(ans_grad[b])); };
  if (B > 0 && use_bands(B, item(0).box)) {
    ScratchVector<P> g((S + 2) * (T_ + 1));  // p's grad on every row: bands hand rows to each other
    for (index_t b = 0; b < B; ++b) {
      const Item<T> it = item(b);
      const MIBox& x = it.box;
      if (!use_bands(B, x)) {
        backward_item(it, S, grad_of(b), g.data());
        continue;
      }
      zero_grads(it, S);
      const P ag = grad_of(b);
      const index_t end = x.t_end + 1;
      banded_wavefront(x.s_end - x.s_begin + 1, end - x.t_begin, [&](index_t r, index_t a, index_t e) {
        const index_t s = x.s_end - r;
        backward_segment(it, ag, g.data() + s * it.P1, g.data() + (s + 1) * it.P1, s, end - e, end - a);
      });
    }
    return;
  }
  parallel_for(0, B, item_grain(S, T_), [&](index_t b0, index_t b1) {
    ScratchVector<P> rows(2 * (T_ + 1));
    for (index_t b = b0; b < b1; ++b) backward_item(item(b), S, grad_of(b), rows.data());
  });
}

template <typename T>
void joint_mutual_information_sum(const T* terms, T* total, index_t N, index_t size) {
  parallel_for(0, size, index_t(1) << 14, [&](index_t i0, index_t i1) {
    for (index_t i = i0; i < i1; ++i) {
      P acc = 0;
      for (index_t n = 0; n < N; ++n) acc += terms[n * size + i];
      total[i] = static_cast<T>(acc);
    }
  });
}

template <typename T>
void joint_mutual_information_rows(const T* px, const T* py, const T* occ_x, const T* occ_y, const T* ans, T* out,
                                   index_t N, index_t B, index_t cells_x, index_t cells_y) {
  parallel_for(0, B, std::max<index_t>(1, (index_t(1) << 14) / std::max<index_t>(1, N * (cells_x + cells_y))),
               [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) {
      const T *ox = occ_x + b * cells_x, *oy = occ_y + b * cells_y;
      P rows_sum = 0, first = 0;
      for (index_t n = 0; n < N; ++n) {
        const T *x = px + (n * B + b) * cells_x, *y = py + (n * B + b) * cells_y;
        P dot = 0;
        for (index_t c = 0; c < cells_x; ++c) dot += joint_term(x[c], ox[c]);
        for (index_t c = 0; c < cells_y; ++c) dot += joint_term(y[c], oy[c]);
        rows_sum += dot;
        if (n == 0) first = dot;
        else out[n * B + b] = static_cast<T>(dot);
      }
      out[b] = static_cast<T>(first + (P(ans[b]) - rows_sum));
    }
  });
}

template <typename T>
void joint_mutual_information_grad(const T* occ, const T* out_grad, T* grad, index_t N, index_t B, index_t cells) {
  parallel_for(0, N * B, std::max<index_t>(1, (index_t(1) << 14) / std::max<index_t>(1, cells)),
               [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      const T g = out_grad[r];
      const T* o = occ + (r % B) * cells;
      T* d = grad + r * cells;
      for (index_t c = 0; c < cells; ++c) d[c] = o[c] != T(0) ? g * o[c] : T(0);  // (a NaN out_grad: 0 off the path)
    }
  });
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void joint_mutual_information_sum<T>(const T*, T*, index_t, index_t);                             \
  template void joint_mutual_information_rows<T>(const T*, const T*, const T*, const T*, const T*, T*, index_t, \
                                                 index_t, index_t, index_t);                                  \
  template void joint_mutual_information_grad<T>(const T*, const T*, T*, index_t, index_t, index_t);         \
  template void mutual_information_forward<T>(const T*, const T*, const int64_t*, P*, T*, index_t, index_t,   \
                                              index_t, bool);                                                 \
  template void mutual_information_backward<T>(const T*, const T*, const int64_t*, const P*, const T*, T*, T*, \
                                               index_t, index_t, index_t, bool);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
