// mutual_information_recursion (k2 / fast_rnnt semantics): the cell updates shared by cpu/ and gpu/,
// and the launcher declarations.
//
// Shapes: px [B, S, T1] with T1 = T + 1 (regular) or T1 = T (modified), py [B, S+1, T],
// p [B, S+1, T+1] (float64), boundary [B, 4] rows (s_begin, t_begin, s_end, t_end) or null for (0, 0, S, T).
//   forward   p[s_begin, t_begin] = 0
//             regular   p[s,t] = log_add(p[s-1,t]   + px[s-1,t],   p[s,t-1] + py[s,t-1])
//             modified  p[s,t] = log_add(p[s-1,t-1] + px[s-1,t-1], p[s,t-1] + py[s,t-1])
//             terms from outside the box are -inf; ans[b] = p[s_end, t_end]; p outside the box = -inf.
//   backward  g[s_end, t_end] = ans_grad[b] (1 when ans_grad is null: the occupation probabilities)
//             px_grad[s,t] = g[s+1,t] (modified: g[s+1,t+1]) * exp(p[s,t] + px[s,t] - p[next])
//             py_grad[s,t] = g[s,t+1] * exp(p[s,t] + py[s,t] - p[s,t+1])
//             g[s,t] = px_grad[s,t] + py_grad[s,t]; a non-finite exp term counts as 0, so an
//             unreachable end (ans = -inf) gives exactly zero grads; grads outside the box are 0.
#pragma once

#include "paddle_ext/common.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

// p and every cell update are float64 for float32 inputs too: with values of a few hundred (long
// lattices, large offsets) float32 p loses ~1e-5 absolute per cell, and the backward's
// exp(p[s,t] + px - p[s+1,t]) turns that into 1e-3 relative error in the grads.
using mi_acc_t = double;

// log(exp(a) + exp(b)) with one NaN test: lo - hi is NaN only for (-inf, -inf) (gives -inf),
// (+inf, +inf) (gives +inf) or a NaN input (propagates); lo = -inf gives hi + log1p(0) = hi.
template <typename A>
PE_HOSTDEVICE inline A mi_log_add(A a, A b) {
  const A hi = a > b ? a : b;
  const A d = (a > b ? b : a) - hi;
  if (d != d) return a + b;
  return hi + std::log1p(std::exp(d));
}

// exp(p_from + x - p_to), the share of p_to that came through this edge; 0 where not finite
// (p_to = -inf: unreachable cell, whose grad must not become inf * 0 = NaN).
template <typename A>
PE_HOSTDEVICE inline A mi_edge_weight(A p_from, A x, A p_to) {
  const A e = std::exp(p_from + x - p_to);
  return (e == e && e != -neg_inf<A>()) ? e : A(0);
}

// One forward cell: from_s = p[s-1,t] + px[s-1,t] (modified: p[s-1,t-1] + px[s-1,t-1]),
// from_t = p[s,t-1] + py[s,t-1]; either is -inf when it comes from outside the box.
template <typename A>
PE_HOSTDEVICE inline A mi_forward_cell(A from_s, A from_t) {
  return mi_log_add(from_s, from_t);
}

// Extended-range linear value m * 2^k (the CUDA forward's chain, where a log_add per cell would put an
// exp and a log1p on the serial path; a parallel pre-pass computes the exps, a post-pass the logs):
// m in [1, 2), or m = 0 for -inf. With exp(x) split as exp(r) * 2^kx (|r| <= ln2/2), a product is a
// multiply and an exponent add, a sum aligns the smaller term (one below 2^-64 of the larger cannot
// change its rounding), so every finite p is kept to ulps of the log-space recursion with no underflow
// or overflow. Callers keep |x| <= kMiExtMaxInput (|kx| < 2^21: kx * kMiLn2Hi exact) and
// |k| <= kMiExtMaxExp (no int overflow); outside, log space.
struct MIExt {
  double m;
  int k;
};
constexpr int kMiExtZeroExp = -(1 << 29);
constexpr int kMiExtMaxExp = 1 << 28;
constexpr double kMiExtMaxInput = 1e6;
constexpr double kMiLn2Hi = 6.93147180369123816490e-01, kMiLn2Lo = 1.90821492927058770002e-10;

PE_HOSTDEVICE inline uint64_t mi_bits(double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  return u;
}
PE_HOSTDEVICE inline double mi_from_bits(uint64_t u) {
  double v;
  memcpy(&v, &u, 8);
  return v;
}

// The MIExt helpers are straight-line code (selects, no branches), so the walk's chain has no branch.

// m * 2^k for m >= 0 finite and normal (or 0), brought to m in [1, 2).
PE_HOSTDEVICE inline MIExt mi_ext_normalize(double m, int k) {
  const uint64_t u = mi_bits(m);
  const MIExt n{mi_from_bits((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull), k + int((u >> 52) & 0x7ff) - 1023};
  return m > 0 ? n : MIExt{0.0, kMiExtZeroExp};
}

// exp(r) for |r| <= 0.35 (a reduced argument): Taylor to r^13 (the rest is below 1e-17 relative).
PE_HOSTDEVICE inline double mi_exp_reduced(double r) {
  double e = 1.6059043836821613e-10;  // 1/13!
  e = std::fma(e, r, 2.08767569878681e-09);
  e = std::fma(e, r, 2.505210838544172e-08);
  e = std::fma(e, r, 2.755731922398589e-07);
  e = std::fma(e, r, 2.7557319223985893e-06);
  e = std::fma(e, r, 2.48015873015873e-05);
  e = std::fma(e, r, 1.984126984126984e-04);
  e = std::fma(e, r, 1.388888888888889e-03);
  e = std::fma(e, r, 8.333333333333333e-03);
  e = std::fma(e, r, 4.1666666666666664e-02);
  e = std::fma(e, r, 0.16666666666666666);
  e = std::fma(e, r, 0.5);
  e = std::fma(e, r, 1.0);
  return std::fma(e, r, 1.0);
}

// exp(x) for x <= kMiExtMaxInput in magnitude or -inf (0); clears ok for NaN, +inf or a larger |x|.
PE_HOSTDEVICE inline MIExt mi_ext_exp(double x, bool& ok) {
  const bool in = std::fabs(x) <= kMiExtMaxInput;
  ok &= in || x == neg_inf<double>();
  const double xc = in ? x : 0.0;
  const double kd = std::rint(xc * 1.4426950408889634);
  const double r = std::fma(-kd, kMiLn2Lo, std::fma(-kd, kMiLn2Hi, xc));
  const MIExt e = mi_ext_normalize(mi_exp_reduced(r), int(kd));
  return in ? e : MIExt{0.0, kMiExtZeroExp};
}

// a * x + b * y for normalized a, b, x, y (products in [1, 4), or 0), normalized.
PE_HOSTDEVICE inline MIExt mi_ext_fma2(MIExt a, MIExt x, MIExt b, MIExt y) {
  const double am = a.m * x.m, bm = b.m * y.m;
  const int ak = a.k + x.k, bk = b.k + y.k;
  const bool a_hi = bm == 0 || (am != 0 && ak >= bk);
  const double hm = a_hi ? am : bm, lm = a_hi ? bm : am;
  const int hk = a_hi ? ak : bk, d = (a_hi ? bk : ak) - hk;  // d <= 0 when lm != 0
  const bool add = lm != 0 && d >= -64;
  const double s = std::fma(lm, mi_from_bits(uint64_t((add ? d : 0) + 1023) << 52), hm);
  return mi_ext_normalize(add ? s : hm, hk);
}

struct MIBox {
  index_t s_begin, t_begin, s_end, t_end;
};

// The box of batch item b (boundary may be null).
PE_HOSTDEVICE inline MIBox mi_box(const int64_t* boundary, index_t b, index_t S, index_t T) {
  if (boundary == nullptr) return {0, 0, S, T};
  const int64_t* r = boundary + 4 * b;
  return {r[0], r[1], r[2], r[3]};
}

PE_HOSTDEVICE inline bool mi_box_valid(const MIBox& x, index_t S, index_t T) {
  return 0 <= x.s_begin && x.s_begin <= x.s_end && x.s_end <= S && 0 <= x.t_begin && x.t_begin <= x.t_end &&
         x.t_end <= T;
}

// joint_mutual_information_recursion, N terms stacked: px [N, B, S, T1], py [N, B, S+1, T]. The recursion
// runs on their sums (summed in mi_acc_t); with occ_x, occ_y its occupations (backward with ans_grad null),
//   out[n, b] = sum over the cells of joint_term(px[n], occ_x) + joint_term(py[n], occ_y), in mi_acc_t,
//   out[0, b] += ans[b] - sum_n out[n, b]   (the rows sum to ans),
//   px_grad[n, b] = out_grad[n, b] * occ_x[b], 0 where occ_x is   (occ held constant, as k2 does; likewise py).
// A cell with zero occupation counts 0 even where its term is -inf (0 * -inf would be NaN).
template <typename T>
PE_HOSTDEVICE inline mi_acc_t joint_term(T term, T occ) {
  return occ != T(0) ? mi_acc_t(term) * mi_acc_t(occ) : mi_acc_t(0);
}

namespace cpu {
// Returns the index of the first invalid boundary row, or -1.
index_t mutual_information_check_boundary(const int64_t* boundary, index_t B, index_t S, index_t T);

template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, mi_acc_t* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified);
// ans_grad may be null (all ones).
template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const mi_acc_t* p,
                                 const T* ans_grad, T* px_grad, T* py_grad, index_t B, index_t S, index_t T_,
                                 bool modified);

// total[i] = sum over n < N of terms[n * size + i] (accumulated in mi_acc_t).
template <typename T>
void joint_mutual_information_sum(const T* terms, T* total, index_t N, index_t size);
// out [N, B] from the stacked terms, the occupations ([B, cells_x], [B, cells_y]) and ans [B].
template <typename T>
void joint_mutual_information_rows(const T* px, const T* py, const T* occ_x, const T* occ_y, const T* ans, T* out,
                                   index_t N, index_t B, index_t cells_x, index_t cells_y);
// grad [N, B, cells] = out_grad[n, b] * occ[b].
template <typename T>
void joint_mutual_information_grad(const T* occ, const T* out_grad, T* grad, index_t N, index_t B, index_t cells);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/mutual_information.cu; T is float or double
template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, mi_acc_t* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified, cudaStream_t stream);
template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const mi_acc_t* p,
                                 const T* ans_grad, T* px_grad, T* py_grad, index_t B, index_t S, index_t T_,
                                 bool modified, cudaStream_t stream);
template <typename T>
void joint_mutual_information_sum(const T* terms, T* total, index_t N, index_t size, cudaStream_t stream);
template <typename T>
void joint_mutual_information_rows(const T* px, const T* py, const T* occ_x, const T* occ_y, const T* ans, T* out,
                                   index_t N, index_t B, index_t cells_x, index_t cells_y, cudaStream_t stream);
template <typename T>
void joint_mutual_information_grad(const T* occ, const T* out_grad, T* grad, index_t N, index_t B, index_t cells,
                                   cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
