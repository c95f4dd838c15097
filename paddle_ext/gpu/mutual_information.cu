// CUDA mutual_information_recursion: for each direction a parallel pre-pass over every cell (many blocks),
// a serial walk per batch item with no transcendental on its chain, and a parallel post-pass.
// Walk: one block per batch item, one warp per band of 32 rows (lane = row), each warp walking its band
// skewed (lane i does column j - i at step j), so a lane's two inputs are its own previous cell and, by one
// __shfl_up, the lane below's: no block barrier per diagonal. Band w's bottom lane gets row 32w - 1 from
// warp w - 1 through a shared-memory ring (kRing columns), synchronised per chunk of kChunk steps with
// volatile produced/consumed counters (all warps of the block are resident, so spinning is safe; the ring
// holds >= 2 chunks, so no wait cycle). Boxes taller than 32 * kMaxWarps rows are walked in passes (the
// top row of a pass goes through global memory, one barrier between passes). The walk's workspaces are
// stored skewed (Skew), so each step's loads and stores are coalesced.
// Forward: the pre-pass stores exp(px), exp(py) in the extended range MIExt (mutual_information.h), the
// chain is a multiply-add per cell in that range (m * 2^k: no underflow or overflow), the post-pass takes
// logs (p in float64, as on the CPU). An item whose inputs leave that range (NaN, +inf, |x| > 1e6) or whose
// exponents grow too large is redone by a log-space anti-diagonal wavefront in the walk kernel's block.
// Backward (linear, as on the CPU): the pre-pass stores the edge weights w = exp(p + x - p_next), the chain
// is g = g_up * w1 + g_right * w2, the post-pass writes the px/py grads (g_next * w) and zeros elsewhere.
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/mutual_information.h"

namespace paddle_ext {
namespace gpu {
namespace {

using P = mi_acc_t;

// Calls cell(s, t) for every cell of the box, diagonal by diagonal (the forward's log-space redo).
template <typename Cell>
__device__ void wavefront(const MIBox& box, const Cell& cell) {
  const index_t ns = box.s_end - box.s_begin, nt = box.t_end - box.t_begin;
  for (index_t d = 0; d <= ns + nt; ++d) {
    const index_t lo = d > nt ? d - nt : 0, hi = d < ns ? d : ns;
    for (index_t k = lo + threadIdx.x; k <= hi; k += blockDim.x) cell(box.s_begin + k, box.t_begin + d - k);
    __syncthreads();
  }
}

template <typename T>
struct ForwardCell {
  const T *px, *py;  // this item's rows
  P* p;
  index_t T1, P1, s0, t0;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t s, index_t t) const {
    P v;
    if (s == s0 && t == t0) {
      v = P(0);
    } else {
      const P from_t = t > t0 ? p[s * P1 + t - 1] + static_cast<P>(load(py[s * (P1 - 1) + t - 1])) : neg_inf<P>();
      P from_s = neg_inf<P>();
      if (modified) {
        if (s > s0 && t > t0) from_s = p[(s - 1) * P1 + t - 1] + static_cast<P>(load(px[(s - 1) * T1 + t - 1]));
      } else if (s > s0) {
        from_s = p[(s - 1) * P1 + t] + static_cast<P>(load(px[(s - 1) * T1 + t]));
      }
      v = mi_forward_cell<P>(from_s, from_t);
    }
    p[s * P1 + t] = v;
  }
};

// ---- fast path: warp bands --------------------------------------------------------------------------
constexpr int kChunk = 16, kRing = 64, kMaxWarps = 16;
// Band kernels for up to 4 warps (S < 128: registers up to 255) and up to kMaxWarps (128 registers:
// chunks of 8 steps avoid spills).
constexpr int kSmallWarps = 4;
template <int W>
constexpr int chunk_steps() { return W <= kSmallWarps ? kChunk : kChunk / 2; }
static_assert(kRing >= 2 * kChunk && (kRing & (kRing - 1)) == 0,
              "the ring (a power of 2) must hold two chunks: then no two warps wait on each other");

__device__ inline double shfl_up(double v) { return __shfl_up_sync(0xffffffffu, v, 1); }
__device__ inline MIExt shfl_up(MIExt v) {
  return {__shfl_up_sync(0xffffffffu, v.m, 1), __shfl_up_sync(0xffffffffu, v.k, 1)};
}

// ring_m/ring_k[w] carry band w's top row (by column, modulo kRing) to warp w + 1; produced[w] counts
// the columns pushed, consumed[w] those warp w + 1 has read. Accessed through volatile pointers.
template <int W>
struct BandShared {
  double ring_m[W][kRing];
  int ring_k[W][kRing];
  long long produced[W], consumed[W];
  int ok;
};

template <int W>
__device__ inline void ring_put(BandShared<W>& sh, int w, int i, double v) { ((volatile double*)sh.ring_m[w])[i] = v; }
template <int W>
__device__ inline void ring_put(BandShared<W>& sh, int w, int i, MIExt v) {
  ((volatile double*)sh.ring_m[w])[i] = v.m;
  ((volatile int*)sh.ring_k[w])[i] = v.k;
}
template <int W>
__device__ inline void ring_get(BandShared<W>& sh, int w, int i, double& v) { v = ((volatile double*)sh.ring_m[w])[i]; }
template <int W>
__device__ inline void ring_get(BandShared<W>& sh, int w, int i, MIExt& v) {
  v.m = ((volatile double*)sh.ring_m[w])[i];
  v.k = ((volatile int*)sh.ring_k[w])[i];
}
__device__ inline long long vload(const long long& x) { return *(const volatile long long*)&x; }
__device__ inline void vstore(long long& x, long long v) { *(volatile long long*)&x = v; }

// Walks rows [r0, min(r0 + 32 W, nrows)) (one pass) of the box [0, nrows) x [0, ncols) in local coordinates
// (forward (s - s_begin, t - t_begin), backward (s_end - s, t_end - t)):
// v(r, c) = pol.step(v(r - 1, c - shift), v(r, c - 1), coef, r, c), shift = 1 in modified mode (its s-step
// also moves in t); values from outside the box are Pol::zero(). Warp w walks rows [r0 + 32w, r0 + 32w + 32),
// lane i doing column j - i at step j. A box taller than 32 W rows takes several passes (the caller
// separates them by a barrier): the last warp of a pass stores its top row (pol.row_put; slot = pass
// parity), and warp 0 of the next pass reads it back (pol.row_get), a chunk ahead, one column per lane,
// staged in ring W - 1 (which no warp of a pass feeds).
template <int W, typename Pol>
__device__ void band_walk(Pol& pol, BandShared<W>& sh, index_t r0, index_t nrows, index_t ncols, bool modified) {
  using V = typename Pol::Value;
  using Coef = typename Pol::Coef;
  constexpr int K = chunk_steps<W>();
  static_assert(K <= 32 && kRing >= 2 * K + 1, "one column per lane stages the previous pass's row");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const index_t nbands = std::min<index_t>(W, (nrows - r0 + 31) / 32);
  if (warp >= nbands) return;  // (warp-uniform)
  const int pass = int(r0 / (32 * W));
  const bool from_ring = warp > 0, from_row = warp == 0 && r0 > 0, down = from_ring || from_row;
  const bool up = warp + 1 < nbands, to_row = warp + 1 == nbands && r0 + 32 * nbands < nrows;
  const int below_ring = from_ring ? warp - 1 : W - 1;
  const index_t r = r0 + index_t(warp) * 32 + lane, shift = modified ? 1 : 0;
  V left = Pol::zero(), left2 = Pol::zero();  // v(r, c - 1), v(r, c - 2)
  V staged = Pol::zero();  // from_row: lane i < K holds column j0 + i of row r0 - 1 for the coming chunk
  if (from_row && lane < K && lane < ncols) staged = pol.row_get((pass - 1) & 1, r0 - 1, lane);
  Coef co[K];  // the pre-pass's coefficients of the next K cells: each loaded K steps before its use
#pragma unroll
  for (int i = 0; i < K; ++i) co[i] = pol.fetch(r, i - lane);
  for (index_t j0 = 0; j0 < ncols + 31; j0 += K) {
    // Lane 0 reads columns < j0 + K of the band below; lane 31 overwrites ring slots of the columns
    // <= j0 + K - 32 - kRing, which warp + 1 must have read.
    if (from_ring && lane == 0)
      while (vload(sh.produced[warp - 1]) < std::min<index_t>(j0 + K, ncols)) PE_SPIN_YIELD();
    if (up && lane == 31)
      while (vload(sh.consumed[warp]) < j0 + K - 31 - kRing) PE_SPIN_YIELD();
    if (from_row) {  // (warp-uniform) columns j0 .. j0 + K - 1 into ring slots the last chunk did not read
      if (lane < K && j0 + lane < ncols) ring_put(sh, W - 1, int((j0 + lane) & (kRing - 1)), staged);
      if (lane < K && j0 + K + lane < ncols) staged = pol.row_get((pass - 1) & 1, r0 - 1, j0 + K + lane);
    }
    __syncwarp();
    __threadfence_block();
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const index_t c = j0 + i - lane;
      // lane - 1 is one column ahead: its left is v(r - 1, c). Lane 0 reads the ring (every lane loads,
      // so the chunk stays one straight-line block the compiler can schedule across steps).
      const V up_v = shfl_up(modified ? left2 : left);
      const index_t cb = c - shift;
      V ring_v;
      ring_get(sh, below_ring, int(cb & (kRing - 1)), ring_v);  // (kRing: a power of 2)
      const V below = lane > 0 ? up_v : (down && cb >= 0 && cb < ncols) ? ring_v : Pol::zero();
      const bool active = r < nrows && c >= 0 && c < ncols;
      const V cur = active ? pol.step(below, left, co[i], r, c) : Pol::zero();
      co[i] = pol.fetch(r, c + K);  // (in flight during the next K steps)
      if (up && lane == 31 && active) ring_put(sh, warp, int(c & (kRing - 1)), cur);
      if (to_row && lane == 31 && active) pol.row_put(pass & 1, r, c, cur);
      pol.emit(r, c, cur, active);  // off the chain: overlaps the next steps
      left2 = left;
      left = cur;
    }
    __threadfence_block();  // this chunk's ring writes and reads before the counters that release them
    if (up && lane == 31) vstore(sh.produced[warp], std::max<index_t>(0, std::min<index_t>(j0 + K - 31, ncols)));
    if (from_ring && lane == 0) vstore(sh.consumed[warp - 1], std::min<index_t>(j0 + K, ncols));
  }
}

// ---- parallel passes around the walks (every cell of every item, many blocks) -------------------------
// The walks' workspaces are skewed: cell (r, c) of a box (local coordinates) sits at step j = c + r % 32 of
// band r / 32, so at each step a warp's 32 lanes touch 32 consecutive elements (coalesced; the natural
// layout would touch 32 rows). J = T + 32 steps per band, Z elements per item. The pre- and post-passes
// run in the same skewed order (their workspace side coalesced; a block's 32 steps x 32 rows cover whole
// sectors of the natural side, so those scattered accesses hit L1 or merge in L2). Their functors take
// (b, r, c) in box-local coordinates (forward (s - s_begin, t - t_begin), backward (s_end - s, t_end - t)),
// r < 32 * ceil((S+1)/32), c in (-32, T + 32), and act only inside the box; the host test calls them too.
struct Skew {
  index_t J;
  PE_HOSTDEVICE index_t operator()(index_t r, index_t c) const {
    const index_t l = r & 31;
    return ((r >> 5) * J + c + l) * 32 + l;
  }
};
PE_HOSTDEVICE inline index_t skew_item(index_t S, index_t T_) { return (S + 1 + 31) / 32 * (T_ + 32) * 32; }
PE_HOSTDEVICE inline bool in_box(const MIBox& box, index_t S, index_t T_, index_t r, index_t c) {
  return mi_box_valid(box, S, T_) && r <= box.s_end - box.s_begin && c >= 0 && c <= box.t_end - box.t_begin;
}

// Forward pre-pass: the exps of the two steps into cell (s, t) as MIExt (xm/xk: s-step, ym/yk: t-step;
// zero where no such edge), so the walk's chain does no exp. An input outside MIExt's range (NaN, +inf,
// |x| > 1e6) sets flag[b]: the walk kernel redoes the item.
template <typename T>
struct ForwardPre {
  const T *px, *py;
  const int64_t* boundary;
  double *xm, *ym;
  int *xk, *yk, *flag;
  index_t S, T_, Z;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t b, index_t r, index_t c) const {
    const MIBox box = mi_box(boundary, b, S, T_);
    if (!in_box(box, S, T_, r, c)) return;
    const index_t T1 = modified ? T_ : T_ + 1, s = box.s_begin + r, t = box.t_begin + c;
    const index_t i = b * Z + Skew{T_ + 32}(r, c);
    bool ok = true;
    MIExt ex{0.0, kMiExtZeroExp}, ey{0.0, kMiExtZeroExp};
    if (r > 0 && (!modified || c > 0))
      ex = mi_ext_exp(static_cast<P>(load(px[(b * S + s - 1) * T1 + t - (modified ? 1 : 0)])), ok);
    if (c > 0) ey = mi_ext_exp(static_cast<P>(load(py[(b * (S + 1) + s) * T_ + t - 1])), ok);
    xm[i] = ex.m, xk[i] = ex.k, ym[i] = ey.m, yk[i] = ey.k;
    if (!ok) flag[b] = 1;  // (every writer stores 1)
  }
};

// Forward post-pass: the walk left exp(p[s, t]) = m * 2^k in xm/xk; p becomes its log (float64) and ans
// comes from the end cell. Items the walk kernel redid (flag) or NaN'd (bad box) are skipped.
template <typename T>
struct ForwardPost {
  const int64_t* boundary;
  const double* xm;
  const int *xk, *flag;
  P* p;
  T* ans;
  index_t S, T_, Z;
  PE_HOSTDEVICE void operator()(index_t b, index_t r, index_t c) const {
    const MIBox box = mi_box(boundary, b, S, T_);
    if (!in_box(box, S, T_, r, c) || flag[b]) return;
    const index_t i = b * Z + Skew{T_ + 32}(r, c), s = box.s_begin + r, t = box.t_begin + c;
    const double m = xm[i], k = double(xk[i]);
    const double v = m == 0 ? neg_inf<P>() : std::fma(k, kMiLn2Hi, std::fma(k, kMiLn2Lo, std::log(m)));
    p[(b * (S + 1) + s) * (T_ + 1) + t] = v;
    if (s == box.s_end && t == box.t_end) ans[b] = store<T>(v);
  }
};

// p = -inf outside the box (natural order, f(b, s, t); launched only with a boundary); the walk kernel
// writes all of a redone or bad-box item itself.
struct ForwardFill {
  const int64_t* boundary;
  const int* flag;
  P* p;
  index_t S, T_;
  PE_HOSTDEVICE void operator()(index_t b, index_t s, index_t t) const {
    const MIBox box = mi_box(boundary, b, S, T_);
    if (flag[b] || !mi_box_valid(box, S, T_)) return;
    if (s < box.s_begin || s > box.s_end || t < box.t_begin || t > box.t_end)
      p[(b * (S + 1) + s) * (T_ + 1) + t] = neg_inf<P>();
  }
};

// Backward pre-pass: the edge weights out of cell (s, t), w1 = exp(p + px - p_next) (s-step) and
// w2 = exp(p + py - p[s, t+1]) (t-step), 0 where no such edge or not finite.
template <typename T>
struct BackwardPre {
  const T *px, *py;
  const int64_t* boundary;
  const P* p;
  double *w1, *w2;
  index_t S, T_, Z;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t b, index_t r, index_t c) const {
    const MIBox box = mi_box(boundary, b, S, T_);
    if (!in_box(box, S, T_, r, c)) return;
    const index_t P1 = T_ + 1, T1 = modified ? T_ : T_ + 1, s = box.s_end - r, t = box.t_end - c;
    const index_t n = (b * (S + 1) + s) * P1 + t;
    const P here = p[n];
    P a = P(0), e = P(0);
    if (r > 0 && (!modified || c > 0))
      a = mi_edge_weight<P>(here, static_cast<P>(load(px[(b * S + s) * T1 + t])), p[n + P1 + (modified ? 1 : 0)]);
    if (c > 0) e = mi_edge_weight<P>(here, static_cast<P>(load(py[(b * (S + 1) + s) * T_ + t])), p[n + 1]);
    const index_t i = b * Z + Skew{T_ + 32}(r, c);
    w1[i] = a, w2[i] = e;
  }
};

// Backward post-pass: px_grad[s, t] = g(next) * w1, py_grad[s, t] = g[s, t+1] * w2 from the walk's g (the
// products the chain summed), 0 where no such edge; grads outside the boxes are zeroed by the launcher
// (without a boundary every grad element is some box cell's).
template <typename T>
struct BackwardPost {
  const int64_t* boundary;
  const double *w1, *w2, *g;
  T *px_grad, *py_grad;
  index_t S, T_, Z;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t b, index_t r, index_t c) const {
    const MIBox box = mi_box(boundary, b, S, T_);
    if (!in_box(box, S, T_, r, c)) return;
    const index_t T1 = modified ? T_ : T_ + 1, s = box.s_end - r, t = box.t_end - c;
    const Skew sk{T_ + 32};
    const index_t i = b * Z + sk(r, c);
    if (s < S && t < T1) {
      const bool edge = r > 0 && (!modified || c > 0);
      px_grad[(b * S + s) * T1 + t] = store<T>(edge ? g[b * Z + sk(r - 1, c - (modified ? 1 : 0))] * w1[i] : P(0));
    }
    if (t < T_) py_grad[(b * (S + 1) + s) * T_ + t] = store<T>(c > 0 ? g[b * Z + sk(r, c - 1)] * w2[i] : P(0));
  }
};

// Calls f(b, s, t) for every cell of p [B, S+1, T+1]: x over t, y over the rows b * (S+1) + s.
constexpr int kPassThreads = 128;
template <typename F>
__global__ void __launch_bounds__(kPassThreads) cells_kernel(F f, index_t rows, index_t S1, index_t P1) {
  const index_t t = index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= P1) return;
  for (index_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const index_t b = row / S1;
    f(b, row - b * S1, t);
  }
}
template <typename F>
void launch_cells(const F& f, index_t B, index_t S, index_t T_, cudaStream_t stream) {
  const index_t rows = B * (S + 1), P1 = T_ + 1;
  const dim3 grid((unsigned)((P1 + kPassThreads - 1) / kPassThreads), (unsigned)std::min<index_t>(rows, 65535));
  cells_kernel<<<grid, kPassThreads, 0, stream>>>(f, rows, S + 1, P1);
}

// Calls f(b, r, c) in skewed order: y over (item, band), x over blocks of 32 steps; warp = one step's 32 lanes.
template <typename F>
__global__ void __launch_bounds__(kPassThreads) skew_cells_kernel(F f, index_t rows, index_t nb, index_t J) {
  const int lane = threadIdx.x & 31;
  for (index_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const index_t b = row / nb, r = (row - b * nb) * 32 + lane;
    const index_t j0 = index_t(blockIdx.x) * 32, j1 = std::min<index_t>(J, j0 + 32);
    for (index_t j = j0 + (threadIdx.x >> 5); j < j1; j += kPassThreads / 32) f(b, r, j - lane);
  }
}
template <typename F>
void launch_skew_cells(const F& f, index_t B, index_t S, index_t T_, cudaStream_t stream) {
  const index_t nb = (S + 1 + 31) / 32, rows = B * nb, J = T_ + 32;
  const dim3 grid((unsigned)((J + 31) / 32), (unsigned)std::min<index_t>(rows, 65535));
  skew_cells_kernel<<<grid, kPassThreads, 0, stream>>>(f, rows, nb, J);
}

// Forward walk: v = exp(p[s, t]) as MIExt, a cell = mi_ext_fma2 of the pre-pass's exps (no exp or log on
// the chain); emit overwrites the cell's (already loaded) s-step exp xm/xk with v for the post-pass and the
// next pass; ok turns false if |k| leaves the range.
struct ForwardBand {
  using Value = MIExt;
  struct Coef {
    MIExt x, y;  // exp of the s-step and the t-step into this cell (zero where no such edge)
  };
  double* xm;  // this item's, skewed
  const double* ym;
  int* xk;
  const int* yk;
  Skew sk;
  index_t nrows, ncols;
  bool ok;
  PE_HOSTDEVICE static MIExt zero() { return {0.0, kMiExtZeroExp}; }
  PE_HOSTDEVICE Coef fetch(index_t r, index_t c) const {
    Coef co{zero(), zero()};
    if (r < nrows && c >= 0 && c < ncols) {
      const index_t i = sk(r, c);
      co = {{xm[i], xk[i]}, {ym[i], yk[i]}};
    }
    return co;
  }
  PE_HOSTDEVICE MIExt step(MIExt below, MIExt left, const Coef& co, index_t r, index_t c) const {
    if (r == 0 && c == 0) return {1.0, 0};
    return mi_ext_fma2(below, co.x, left, co.y);
  }
  PE_HOSTDEVICE MIExt row_get(int, index_t r, index_t c) const {
    const index_t i = sk(r, c);
    return {xm[i], xk[i]};
  }
  PE_HOSTDEVICE void row_put(int, index_t, index_t, MIExt) const {}  // (emit stored it)
  PE_HOSTDEVICE void emit(index_t r, index_t c, MIExt v, bool active) {
    if (active) {
      ok &= v.m == 0 || (v.k <= kMiExtMaxExp && v.k >= -kMiExtMaxExp);
      const index_t i = sk(r, c);
      xm[i] = v.m;
      xk[i] = v.k;
    }
  }
};

// Backward walk: v = p's grad, linear as on the CPU, with the pre-pass's edge weights out of the cell;
// emit stores g for the post-pass and the next pass.
struct BackwardBand {
  using Value = P;
  struct Coef {
    P w1, w2;  // exp(p + px - p_next) of the s-step and exp(p + py - p[s, t+1]) of the t-step out of this cell
  };
  const double *w1, *w2;  // this item's, skewed
  P* g;
  Skew sk;
  index_t nrows, ncols;
  P ans_grad;
  bool modified;
  PE_HOSTDEVICE static P zero() { return P(0); }
  PE_HOSTDEVICE Coef fetch(index_t r, index_t c) const {
    Coef co{P(0), P(0)};
    if (r < nrows && c >= 0 && c < ncols) {
      const index_t i = sk(r, c);
      co = {w1[i], w2[i]};
    }
    return co;
  }
  PE_HOSTDEVICE P step(P below, P left, const Coef& co, index_t r, index_t c) const {
    if (r == 0 && c == 0) return ans_grad;
    const P xg = r > 0 && (!modified || c > 0) ? below * co.w1 : P(0), yg = c > 0 ? left * co.w2 : P(0);
    return xg + yg;
  }
  PE_HOSTDEVICE P row_get(int, index_t r, index_t c) const { return g[sk(r, c)]; }
  PE_HOSTDEVICE void row_put(int, index_t, index_t, P) const {}  // (emit stored it)
  PE_HOSTDEVICE void emit(index_t r, index_t c, P v, bool active) const {
    if (active) g[sk(r, c)] = v;
  }
};

template <int W>
__device__ inline void band_shared_init(BandShared<W>& sh) {
  for (int i = threadIdx.x; i < W; i += blockDim.x) sh.produced[i] = sh.consumed[i] = 0;
  __syncthreads();
}

// The forward walk of item b (between ForwardPre and ForwardPost). An item the pre-pass flagged, or whose
// exponents left the range, is redone here by the log-space wavefront (which writes all of its p and ans)
// and flagged for the post-pass to skip.
template <typename T, int W>
__global__ void __launch_bounds__(32 * W) forward_band_kernel(const T* px, const T* py, const int64_t* boundary,
                                                              double* xm, int* xk, const double* ym, const int* yk,
                                                              int* flag, P* p, T* ans, index_t S, index_t T_,
                                                              bool modified) {
  __shared__ BandShared<W> sh;
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1, Z = skew_item(S, T_);
  const MIBox box = mi_box(boundary, b, S, T_);
  P* pb = p + b * (S + 1) * P1;
  if (!mi_box_valid(box, S, T_)) {  // (block-uniform; the post-pass skips it too)
    if (threadIdx.x == 0) ans[b] = store<T>(std::numeric_limits<P>::quiet_NaN());
    return;
  }
  const bool bad = flag[b] != 0;  // (block-uniform: written by the pre-pass; this block writes it after a barrier)
  if (threadIdx.x == 0) sh.ok = 1;
  ForwardBand pol{xm + b * Z, ym + b * Z, xk + b * Z, yk + b * Z, Skew{T_ + 32}, box.s_end - box.s_begin + 1,
                  box.t_end - box.t_begin + 1, true};
  if (!bad)
    for (index_t r0 = 0; r0 < pol.nrows; r0 += 32 * W) {
      if (r0 > 0) __syncthreads();  // the last pass's walk (counters, its top row) is done
      band_shared_init(sh);
      band_walk(pol, sh, r0, pol.nrows, pol.ncols, modified);
    }
  if (!pol.ok) atomicAnd(&sh.ok, 0);
  __syncthreads();
  if (bad || !sh.ok) {  // (block-uniform) NaN, +inf or huge inputs: the log-space wavefront redoes the box
    if (!(box.s_begin == 0 && box.t_begin == 0 && box.s_end == S && box.t_end == T_))  // -inf outside the box
      for (index_t s = 0; s <= S; ++s)
        for (index_t t = threadIdx.x; t < P1; t += blockDim.x)
          if (s < box.s_begin || s > box.s_end || t < box.t_begin || t > box.t_end) pb[s * P1 + t] = neg_inf<P>();
    const ForwardCell<T> cell{px + b * S * T1, py + b * (S + 1) * T_, pb, T1, P1, box.s_begin, box.t_begin, modified};
    wavefront(box, cell);
    if (threadIdx.x == 0) {
      ans[b] = store<T>(pb[box.s_end * P1 + box.t_end]);
      flag[b] = 1;
    }
  }
}

template <typename T, int W>
__global__ void __launch_bounds__(32 * W) backward_band_kernel(const int64_t* boundary, const double* w1,
                                                               const double* w2, P* g, const T* ans_grad,
                                                               index_t S, index_t T_, bool modified) {
  __shared__ BandShared<W> sh;
  const index_t b = blockIdx.x, Z = skew_item(S, T_);
  const MIBox box = mi_box(boundary, b, S, T_);
  if (!mi_box_valid(box, S, T_)) return;  // (the post-pass writes its grads as 0)
  const P ag = ans_grad == nullptr ? P(1) : static_cast<P>(load(ans_grad[b]));
  BackwardBand pol{w1 + b * Z, w2 + b * Z, g + b * Z, Skew{T_ + 32}, box.s_end - box.s_begin + 1,
                   box.t_end - box.t_begin + 1, ag, modified};
  for (index_t r0 = 0; r0 < pol.nrows; r0 += 32 * W) {
    if (r0 > 0) __syncthreads();  // the last pass's walk (counters, its top row) is done
    band_shared_init(sh);
    band_walk(pol, sh, r0, pol.nrows, pol.ncols, modified);
  }
}

// One warp per 32 rows of S + 1: up to 4 warps (S + 1 <= 128), else up to kMaxWarps, in passes of 32 * kMaxWarps rows.
inline bool small_bands(index_t S) { return S + 1 <= 32 * kSmallWarps; }
inline int band_threads(index_t S) { return int(std::min<index_t>(32 * kMaxWarps, (S + 1 + 31) / 32 * 32)); }

}  // namespace

template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified, cudaStream_t stream) {
  if (B == 0) return;
  // Workspace (stream-ordered cudaMallocAsync, DeviceScratch), skewed: the pre-pass's exps xm/ym (double)
  // and xk/yk (int) (xm/xk then hold the walk's values), and the per-item redo flags.
  const index_t Z = skew_item(S, T_), n = B * Z;
  DeviceScratch<double> ws(2 * n + (2 * n + B + 1) / 2, stream);
  double *xm = ws.ptr, *ym = xm + n;
  int *xk = reinterpret_cast<int*>(ym + n), *yk = xk + n, *flag = yk + n;
  cudaMemsetAsync(flag, 0, sizeof(int) * B, stream);
  launch_skew_cells(ForwardPre<T>{px, py, boundary, xm, ym, xk, yk, flag, S, T_, Z, modified}, B, S, T_, stream);
  if (small_bands(S))
    forward_band_kernel<T, kSmallWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
        px, py, boundary, xm, xk, ym, yk, flag, p, ans, S, T_, modified);
  else
    forward_band_kernel<T, kMaxWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
        px, py, boundary, xm, xk, ym, yk, flag, p, ans, S, T_, modified);
  launch_skew_cells(ForwardPost<T>{boundary, xm, xk, flag, p, ans, S, T_, Z}, B, S, T_, stream);
  if (boundary != nullptr) launch_cells(ForwardFill{boundary, flag, p, S, T_}, B, S, T_, stream);
  check_launch("mutual_information_forward");
}

template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const P* p, const T* ans_grad,
                                 T* px_grad, T* py_grad, index_t B, index_t S, index_t T_, bool modified,
                                 cudaStream_t stream) {
  if (B == 0) return;
  const index_t T1 = modified ? T_ : T_ + 1;
  if (boundary != nullptr) {  // grads outside the boxes; without boundary the post-pass writes every element
    if (B * S * T1 > 0) cudaMemsetAsync(px_grad, 0, sizeof(T) * B * S * T1, stream);  // 0.0 is all-zero bits
    if (B * (S + 1) * T_ > 0) cudaMemsetAsync(py_grad, 0, sizeof(T) * B * (S + 1) * T_, stream);
  }
  // Workspace (stream-ordered cudaMallocAsync, DeviceScratch), skewed: the pre-pass's edge weights w1, w2
  // and the walk's g (double).
  const index_t Z = skew_item(S, T_), n = B * Z;
  DeviceScratch<double> ws(3 * n, stream);
  double *w1 = ws.ptr, *w2 = w1 + n, *g = w2 + n;
  launch_skew_cells(BackwardPre<T>{px, py, boundary, p, w1, w2, S, T_, Z, modified}, B, S, T_, stream);
  if (small_bands(S))
    backward_band_kernel<T, kSmallWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
        boundary, w1, w2, g, ans_grad, S, T_, modified);
  else
    backward_band_kernel<T, kMaxWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
        boundary, w1, w2, g, ans_grad, S, T_, modified);
  launch_skew_cells(BackwardPost<T>{boundary, w1, w2, g, px_grad, py_grad, S, T_, Z, modified}, B, S, T_, stream);
  check_launch("mutual_information_backward");
}

namespace {

// joint_mutual_information_recursion's passes (mutual_information.h): the sum over the terms, one thread per
// cell; the rows, one warp per batch item (its N dot products, then row 0's offset); the grad, one thread
// per element.
template <typename T>
__global__ void joint_sum_kernel(const T* terms, T* total, index_t N, index_t size) {
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < size; i += (index_t)gridDim.x * blockDim.x) {
    P acc = 0;
    for (index_t n = 0; n < N; ++n) acc += terms[n * size + i];
    total[i] = static_cast<T>(acc);
  }
}

template <typename T>
__global__ void joint_rows_kernel(const T* px, const T* py, const T* occ_x, const T* occ_y, const T* ans, T* out,
                                  index_t N, index_t B, index_t cells_x, index_t cells_y) {
  const int lane = threadIdx.x % kWarp;
  const index_t b = blockIdx.x * (index_t)(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= B) return;
  const T *ox = occ_x + b * cells_x, *oy = occ_y + b * cells_y;
  P rows_sum = 0, first = 0;
  for (index_t n = 0; n < N; ++n) {
    const T *x = px + (n * B + b) * cells_x, *y = py + (n * B + b) * cells_y;
    P dot = 0;
    for (index_t c = lane; c < cells_x; c += kWarp) dot += joint_term(x[c], ox[c]);
    for (index_t c = lane; c < cells_y; c += kWarp) dot += joint_term(y[c], oy[c]);
    dot = warp_sum(dot);
    rows_sum += dot;
    if (n == 0) first = dot;
    else if (lane == 0) out[n * B + b] = static_cast<T>(dot);
  }
  if (lane == 0) out[b] = static_cast<T>(first + (P(ans[b]) - rows_sum));
}

template <typename T>
__global__ void joint_grad_kernel(const T* occ, const T* out_grad, T* grad, index_t N, index_t B, index_t cells) {
  const index_t size = N * B * cells;
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < size; i += (index_t)gridDim.x * blockDim.x) {
    const index_t r = i / cells;
    const T o = occ[(r % B) * cells + i % cells];
    grad[i] = o != T(0) ? out_grad[r] * o : T(0);
  }
}

}  // namespace

template <typename T>
void joint_mutual_information_sum(const T* terms, T* total, index_t N, index_t size, cudaStream_t stream) {
  if (size == 0) return;
  joint_sum_kernel<T><<<grid_size(size, kPassThreads), kPassThreads, 0, stream>>>(terms, total, N, size);
  check_launch("joint_mutual_information_sum");
}

template <typename T>
void joint_mutual_information_rows(const T* px, const T* py, const T* occ_x, const T* occ_y, const T* ans, T* out,
                                   index_t N, index_t B, index_t cells_x, index_t cells_y, cudaStream_t stream) {
  if (B == 0) return;
  constexpr int kWarpsPerBlock = 4;
  joint_rows_kernel<T><<<(unsigned)((B + kWarpsPerBlock - 1) / kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, stream>>>(
      px, py, occ_x, occ_y, ans, out, N, B, cells_x, cells_y);
  check_launch("joint_mutual_information_rows");
}

template <typename T>
void joint_mutual_information_grad(const T* occ, const T* out_grad, T* grad, index_t N, index_t B, index_t cells,
                                   cudaStream_t stream) {
  if (N * B * cells == 0) return;
  joint_grad_kernel<T><<<grid_size(N * B * cells, kPassThreads), kPassThreads, 0, stream>>>(occ, out_grad, grad, N, B,
                                                                                            cells);
  check_launch("joint_mutual_information_grad");
}

#define PE_INSTANTIATE(T)                                                                                      \
  template void joint_mutual_information_sum<T>(const T*, T*, index_t, index_t, cudaStream_t);                \
  template void joint_mutual_information_rows<T>(const T*, const T*, const T*, const T*, const T*, T*, index_t, \
                                                 index_t, index_t, index_t, cudaStream_t);                     \
  template void joint_mutual_information_grad<T>(const T*, const T*, T*, index_t, index_t, index_t, cudaStream_t); \
  template void mutual_information_forward<T>(const T*, const T*, const int64_t*, P*, T*, index_t, index_t,    \
                                              index_t, bool, cudaStream_t);                                    \
  template void mutual_information_backward<T>(const T*, const T*, const int64_t*, const P*, const T*, T*, T*,  \
                                               index_t, index_t, index_t, bool, cudaStream_t);
PE_FOR_FLOAT32_64(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
