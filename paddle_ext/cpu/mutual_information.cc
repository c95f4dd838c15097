// CPU mutual_information_recursion on raw pointers (no Paddle header).
// Batch items run in parallel (parallel.h); inside one item the recursion goes row by row, so every
// access is contiguous: the forward keeps p[s,t-1] in a register and reads row s-1, the backward
// first computes a whole row of edge weights (independent exps), then one serial multiply-add pass.
#include "paddle_ext/mutual_information.h"

#include <algorithm>
#include <vector>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

using P = mi_acc_t;

template <typename T>
void forward_item(const T* px, const T* py, P* p, const MIBox& box, index_t S, index_t T_, bool modified,
                  T* ans) {
  using A = P;
  const index_t T1 = modified ? T_ : T_ + 1, P1 = T_ + 1;
  const index_t s0 = box.s_begin, t0 = box.t_begin, s1 = box.s_end, t1 = box.t_end;
  if (!(s0 == 0 && t0 == 0 && s1 == S && t1 == T_)) std::fill(p, p + (S + 1) * P1, neg_inf<A>());
  {  // first row: only py moves
    P* cur = p + s0 * P1;
    const T* pyr = py + s0 * T_;
    A v = A(0);
    cur[t0] = v;
    for (index_t t = t0 + 1; t <= t1; ++t) {
      v = v + static_cast<A>(load(pyr[t - 1]));
      cur[t] = v;
    }
  }
  for (index_t s = s0 + 1; s <= s1; ++s) {
    const P* prev = p + (s - 1) * P1;
    const T* pxr = px + (s - 1) * T1;
    const T* pyr = py + s * T_;
    P* cur = p + s * P1;
    A v;
    if (modified) {  // (s, t_begin) with s > s_begin is unreachable: every symbol takes a frame
      v = neg_inf<A>();
      cur[t0] = v;
      for (index_t t = t0 + 1; t <= t1; ++t) {
        v = mi_forward_cell<A>(prev[t - 1] + static_cast<A>(load(pxr[t - 1])),
                               v + static_cast<A>(load(pyr[t - 1])));
        cur[t] = v;
      }
    } else {
      v = prev[t0] + static_cast<A>(load(pxr[t0]));
      cur[t0] = v;
      for (index_t t = t0 + 1; t <= t1; ++t) {
        v = mi_forward_cell<A>(prev[t] + static_cast<A>(static_cast<A>(load(pxr[t]))),
                               v + static_cast<A>(load(pyr[t - 1])));
        cur[t] = v;
      }
    }
  }
  *ans = store<T>(p[s1 * P1 + t1]);
}

// g and g_next are scratch rows of length T+2 (p's grad on rows s and s+1).
template <typename T>
void backward_item(const T* px, const T* py, const P* p, const MIBox& box, index_t S, index_t T_, bool modified,
                   P ans_grad, T* px_grad, T* py_grad, P* g, P* g_next) {
  using A = P;
  const index_t T1 = modified ? T_ : T_ + 1, P1 = T_ + 1;
  const index_t s0 = box.s_begin, t0 = box.t_begin, s1 = box.s_end, t1 = box.t_end;
  std::fill(px_grad, px_grad + S * T1, store<T>(A(0)));
  std::fill(py_grad, py_grad + (S + 1) * T_, store<T>(A(0)));
  // last row: only py moves
  {
    const P* pr = p + s1 * P1;
    const T* pyr = py + s1 * T_;
    T* ygr = py_grad + s1 * T_;
    g[t1] = ans_grad;
    for (index_t t = t1 - 1; t >= t0; --t) {
      const A yg = g[t + 1] * mi_edge_weight<A>(pr[t], static_cast<A>(load(pyr[t])), pr[t + 1]);
      ygr[t] = store<T>(yg);
      g[t] = yg;
    }
  }
  for (index_t s = s1 - 1; s >= s0; --s) {
    std::swap(g, g_next);
    const P* pr = p + s * P1;
    const P* pn = p + (s + 1) * P1;
    const T* pxr = px + s * T1;
    const T* pyr = py + s * T_;
    T* xgr = px_grad + s * T1;
    T* ygr = py_grad + s * T_;
    // independent per t: the px edges (into row s+1) and the py edge weights, kept in g for now
    if (modified) {
      for (index_t t = t0; t < t1; ++t)
        xgr[t] = store<T>(g_next[t + 1] * mi_edge_weight<A>(pr[t], static_cast<A>(load(pxr[t])), pn[t + 1]));
    } else {
      for (index_t t = t0; t <= t1; ++t)
        xgr[t] = store<T>(g_next[t] * mi_edge_weight<A>(pr[t], static_cast<A>(load(pxr[t])), pn[t]));
    }
    for (index_t t = t0; t < t1; ++t) g[t] = mi_edge_weight<A>(pr[t], static_cast<A>(load(pyr[t])), pr[t + 1]);
    // serial: g[t] = px_grad[s,t] + weight * g[t+1]
    A right = modified ? A(0) : static_cast<A>(load(xgr[t1]));
    g[t1] = right;
    for (index_t t = t1 - 1; t >= t0; --t) {
      const A yg = g[t] * right;
      ygr[t] = store<T>(yg);
      right = static_cast<A>(load(xgr[t])) + yg;
      g[t] = right;
    }
  }
}

// Batch items per thread at least: a thread is worth starting for ~64k cells (a few hundred µs);
// below that the fork/join (and, on a loaded machine, waiting for a descheduled thread) costs more.
inline index_t item_grain(index_t S, index_t T_) {
  return std::max<index_t>(1, (index_t(1) << 16) / ((S + 1) * (T_ + 1)));
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
  const index_t T1 = modified ? T_ : T_ + 1;
  parallel_for(0, B, item_grain(S, T_), [&](index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b) {
      const MIBox box = mi_box(boundary, b, S, T_);
      forward_item<T>(px + b * S * T1, py + b * (S + 1) * T_, p + b * (S + 1) * (T_ + 1), box, S, T_, modified,
                      ans + b);
    }
  });
}

template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const P* p,
                                 const T* ans_grad, T* px_grad, T* py_grad, index_t B, index_t S, index_t T_,
                                 bool modified) {
  using A = P;
  const index_t T1 = modified ? T_ : T_ + 1;
  parallel_for(0, B, item_grain(S, T_), [&](index_t b0, index_t b1) {
    std::vector<A> rows(2 * (T_ + 2));
    for (index_t b = b0; b < b1; ++b) {
      const MIBox box = mi_box(boundary, b, S, T_);
      const A ag = ans_grad == nullptr ? A(1) : static_cast<A>(load(ans_grad[b]));
      backward_item<T>(px + b * S * T1, py + b * (S + 1) * T_, p + b * (S + 1) * (T_ + 1), box, S, T_, modified,
                       ag, px_grad + b * S * T1, py_grad + b * (S + 1) * T_, rows.data(), rows.data() + T_ + 2);
    }
  });
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void mutual_information_forward<T>(const T*, const T*, const int64_t*, P*, T*, index_t, index_t,   \
                                              index_t, bool);                                                 \
  template void mutual_information_backward<T>(const T*, const T*, const int64_t*, const P*, const T*, T*, T*, \
                                               index_t, index_t, index_t, bool);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
