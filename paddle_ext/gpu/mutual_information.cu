// CUDA mutual_information_recursion.
// Fast path (box rows <= 32 * kMaxWarps): one block per batch item, one warp per band of 32 rows (lane =
// row), each warp walking its band skewed (lane i does column j - i at step j), so a lane's two inputs
// are its own previous cell and, by one __shfl_up, the lane below's: no block barrier per diagonal.
// Band w's bottom lane gets row 32w - 1 from warp w - 1 through a shared-memory ring (kRing columns),
// synchronised per chunk of kChunk steps with volatile produced/consumed counters (all warps of the
// block are resident, so spinning is safe; the ring holds >= 2 chunks, so no wait cycle). Per chunk a
// lane first computes its cells' exps (independent), then runs the serial chain (the forward's logs
// of finished cells interleave with it).
// The forward chain is linear in the extended range MIExt (mutual_information.h): a multiply-add per
// cell instead of exp + log1p; an item whose inputs leave that range (NaN, +inf, |x| > 1e6) is redone by
// the log-space wavefront below. The backward is linear anyway (as on the CPU): g = g_up * w1 + g_right * w2
// with the edge weights w = exp(p + x - p_next) computed ahead of the chain.
// Fallback (more rows): one block per item walks the anti-diagonals of its box (up to 256 threads, one
// __syncthreads per diagonal), with the cell functors below. p and p's grad are float64 (as on the CPU).
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/mutual_information.h"

namespace paddle_ext {
namespace gpu {
namespace {

using P = mi_acc_t;

// A diagonal holds at most min(S, T) + 1 cells: no more threads than that (whole warps, 32..256).
inline int block_threads(index_t S, index_t T_) {
  const index_t cells = std::min(S, T_) + 1;
  return (int)std::min<index_t>(256, std::max<index_t>(32, (cells + 31) / 32 * 32));
}

// Calls cell(s, t) for every cell of the box, diagonal by diagonal (reversed for the backward).
template <bool kReverse, typename Cell>
__device__ void wavefront(const MIBox& box, const Cell& cell) {
  const index_t ns = box.s_end - box.s_begin, nt = box.t_end - box.t_begin;
  for (index_t i = 0; i <= ns + nt; ++i) {
    const index_t d = kReverse ? ns + nt - i : i;
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

template <typename T>
__global__ void forward_kernel(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t S,
                               index_t T_, bool modified) {
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  P* pb = p + b * (S + 1) * P1;
  if (!mi_box_valid(box, S, T_)) {  // the binding checks CPU boundaries; never index out of bounds here
    if (threadIdx.x == 0) ans[b] = store<T>(std::numeric_limits<P>::quiet_NaN());
    return;
  }
  for (index_t i = threadIdx.x; i < (S + 1) * P1; i += blockDim.x) {  // -inf outside the box
    const index_t s = i / P1, t = i % P1;
    if (s < box.s_begin || s > box.s_end || t < box.t_begin || t > box.t_end) pb[i] = neg_inf<P>();
  }
  const ForwardCell<T> cell{px + b * S * T1, py + b * (S + 1) * T_, pb, T1, P1, box.s_begin, box.t_begin, modified};
  wavefront<false>(box, cell);
  if (threadIdx.x == 0) ans[b] = store<T>(pb[box.s_end * P1 + box.t_end]);
}

template <typename T>
struct BackwardCell {
  const T *px, *py;
  const P* p;
  P* g;  // p_grad of this item, [S+1, T+1]
  T *px_grad, *py_grad;
  index_t T1, P1, s1, t1;
  P ans_grad;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t s, index_t t) const {
    if (s == s1 && t == t1) {
      g[s * P1 + t] = ans_grad;
      return;
    }
    const P here = p[s * P1 + t];
    P total = P(0);
    if (s < s1 && (!modified || t < t1)) {
      const index_t next = modified ? (s + 1) * P1 + t + 1 : (s + 1) * P1 + t;
      const P xg = g[next] * mi_edge_weight<P>(here, static_cast<P>(load(px[s * T1 + t])), p[next]);
      px_grad[s * T1 + t] = store<T>(xg);
      total += xg;
    }
    if (t < t1) {
      const P yg = g[s * P1 + t + 1] *
                   mi_edge_weight<P>(here, static_cast<P>(load(py[s * (P1 - 1) + t])), p[s * P1 + t + 1]);
      py_grad[s * (P1 - 1) + t] = store<T>(yg);
      total += yg;
    }
    g[s * P1 + t] = total;
  }
};

template <typename T>
__global__ void backward_kernel(const T* px, const T* py, const int64_t* boundary, const P* p, const T* ans_grad,
                                P* g, T* px_grad, T* py_grad, index_t S, index_t T_, bool modified) {
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  if (!mi_box_valid(box, S, T_)) return;  // grads stay 0 (zeroed by the launcher)
  const P ag = ans_grad == nullptr ? P(1) : static_cast<P>(load(ans_grad[b]));
  const BackwardCell<T> cell{px + b * S * T1, py + b * (S + 1) * T_, p + b * (S + 1) * P1, g + b * (S + 1) * P1,
                             px_grad + b * S * T1, py_grad + b * (S + 1) * T_, T1, P1, box.s_end, box.t_end,
                             ag, modified};
  wavefront<true>(box, cell);
}

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

// Walks the box [0, nrows) x [0, ncols) in local coordinates (forward (s - s_begin, t - t_begin),
// backward (s_end - s, t_end - t)): v(r, c) = pol.step(v(r - 1, c - shift), v(r, c - 1), coef, r, c),
// shift = 1 in modified mode (its s-step also moves in t); values from outside the box are Pol::zero().
// Warp w walks rows [32w, 32w + 32), lane i doing column j - i at step j. Needs nrows <= 32 * warps.
template <int W, typename Pol>
__device__ void band_walk(Pol& pol, BandShared<W>& sh, index_t nrows, index_t ncols, bool modified) {
  using V = typename Pol::Value;
  using Coef = typename Pol::Coef;
  constexpr int K = chunk_steps<W>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const index_t nbands = (nrows + 31) / 32;
  if (warp >= nbands) return;  // (warp-uniform)
  const bool down = warp > 0, up = warp + 1 < nbands;
  const index_t r = index_t(warp) * 32 + lane, shift = modified ? 1 : 0;
  V left = Pol::zero(), left2 = Pol::zero();  // v(r, c - 1), v(r, c - 2)
  typename Pol::Raw raw[K];  // loads (backward: edge weights) of the chunk, fetched during the one before
#pragma unroll
  for (int i = 0; i < K; ++i) raw[i] = pol.fetch(r, i - lane);
  for (index_t j0 = 0; j0 < ncols + 31; j0 += K) {
    // Lane 0 reads columns < j0 + K of the band below; lane 31 overwrites ring slots of the columns
    // <= j0 + K - 32 - kRing, which warp + 1 must have read.
    if (down && lane == 0)
      while (vload(sh.produced[warp - 1]) < std::min<index_t>(j0 + K, ncols)) {
      }
    if (up && lane == 31)
      while (vload(sh.consumed[warp]) < j0 + K - 31 - kRing) {
      }
    __syncwarp();
    __threadfence_block();
    Coef co[K];  // the chunk's independent work (exps) ahead of its serial chain
#pragma unroll
    for (int i = 0; i < K; ++i) co[i] = pol.coef(raw[i], r, j0 + i - lane);
#pragma unroll
    for (int i = 0; i < K; ++i) raw[i] = pol.fetch(r, j0 + K + i - lane);  // in flight during this chain
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const index_t c = j0 + i - lane;
      // lane - 1 is one column ahead: its left is v(r - 1, c). Lane 0 reads the ring (every lane loads,
      // so the chunk stays one straight-line block the compiler can schedule across steps).
      const V up_v = shfl_up(modified ? left2 : left);
      const index_t cb = c - shift;
      V ring_v;
      ring_get(sh, down ? warp - 1 : 0, int(cb & (kRing - 1)), ring_v);  // (kRing: a power of 2)
      const V below = lane > 0 ? up_v : (down && cb >= 0 && cb < ncols) ? ring_v : Pol::zero();
      const bool active = r < nrows && c >= 0 && c < ncols;
      const V cur = active ? pol.step(below, left, co[i], r, c) : Pol::zero();
      if (up && lane == 31 && active) ring_put(sh, warp, int(c & (kRing - 1)), cur);
      pol.emit(r, c, cur, active);  // off the chain: overlaps the next steps
      left2 = left;
      left = cur;
    }
    __threadfence_block();  // this chunk's ring writes and reads before the counters that release them
    if (up && lane == 31) vstore(sh.produced[warp], std::max<index_t>(0, std::min<index_t>(j0 + K - 31, ncols)));
    if (down && lane == 0) vstore(sh.consumed[warp - 1], std::min<index_t>(j0 + K, ncols));
  }
}

// Forward in the extended range: v = exp(p[s, t]) as MIExt; ok turns false where that range is left.
template <typename T>
struct ForwardBand {
  using Value = MIExt;
  struct Coef {
    MIExt x, y;  // exp of the s-step's px and the t-step's py into this cell (0 where no such edge)
  };
  const T *px, *py;
  P* p;
  index_t T1, P1, s0, t0, nrows, ncols;
  bool modified, ok;
  struct Raw {
    T x, y;  // the loaded px, py (0 where no such edge)
  };
  PE_HOSTDEVICE static MIExt zero() { return {0.0, kMiExtZeroExp}; }
  PE_HOSTDEVICE bool in_box(index_t r, index_t c) const { return r < nrows && c >= 0 && c < ncols; }
  PE_HOSTDEVICE bool has_s(index_t r, index_t c) const { return r > 0 && (!modified || c > 0); }
  PE_HOSTDEVICE Raw fetch(index_t r, index_t c) const {
    Raw raw{T(0), T(0)};
    if (in_box(r, c)) {
      const index_t s = s0 + r, t = t0 + c;
      if (has_s(r, c)) raw.x = px[(s - 1) * T1 + t - (modified ? 1 : 0)];
      if (c > 0) raw.y = py[s * (P1 - 1) + t - 1];
    }
    return raw;
  }
  PE_HOSTDEVICE Coef coef(const Raw& raw, index_t r, index_t c) {
    const MIExt ex = mi_ext_exp(static_cast<P>(load(raw.x)), ok), ey = mi_ext_exp(static_cast<P>(load(raw.y)), ok);
    const bool in = in_box(r, c);
    return {in && has_s(r, c) ? ex : zero(), in && c > 0 ? ey : zero()};
  }
  PE_HOSTDEVICE MIExt step(MIExt below, MIExt left, const Coef& co, index_t r, index_t c) const {
    if (r == 0 && c == 0) return {1.0, 0};
    return mi_ext_fma2(below, co.x, left, co.y);
  }
  PE_HOSTDEVICE void emit(index_t r, index_t c, MIExt v, bool active) {
    const double lp = mi_ext_log(v);
    if (active) {
      ok &= v.m == 0 || (v.k <= kMiExtMaxExp && v.k >= -kMiExtMaxExp);
      p[(s0 + r) * P1 + t0 + c] = lp;
    }
  }
};

// Backward: v = p's grad, linear as on the CPU; coef holds the edge weights out of the cell.
template <typename T>
struct BackwardBand {
  using Value = P;
  struct Coef {
    P w1, w2;  // exp(p + px - p_next) of the s-step and exp(p + py - p[s, t+1]) of the t-step out of this cell
  };
  const T *px, *py;
  const P* p;
  T *px_grad, *py_grad;
  index_t T1, P1, s1, t1, nrows, ncols;
  P ans_grad;
  bool modified;
  PE_HOSTDEVICE static P zero() { return P(0); }
  PE_HOSTDEVICE bool has_s(index_t r, index_t c) const { return r > 0 && (!modified || c > 0); }
  using Raw = Coef;  // the weights are computed a chunk ahead
  PE_HOSTDEVICE Coef coef(const Raw& raw, index_t, index_t) const { return raw; }
  PE_HOSTDEVICE Raw fetch(index_t r, index_t c) const {
    Coef co{P(0), P(0)};
    if (r < nrows && c >= 0 && c < ncols) {
      const index_t s = s1 - r, t = t1 - c;
      const P here = p[s * P1 + t];
      if (has_s(r, c))
        co.w1 = mi_edge_weight_straight(here, static_cast<P>(load(px[s * T1 + t])), p[(s + 1) * P1 + t + (modified ? 1 : 0)]);
      if (c > 0) co.w2 = mi_edge_weight_straight(here, static_cast<P>(load(py[s * (P1 - 1) + t])), p[s * P1 + t + 1]);
    }
    return co;
  }
  PE_HOSTDEVICE P step(P below, P left, const Coef& co, index_t r, index_t c) const {
    if (r == 0 && c == 0) return ans_grad;
    const index_t s = s1 - r, t = t1 - c;
    const bool vs = has_s(r, c), vt = c > 0;
    const P xg = vs ? below * co.w1 : P(0), yg = vt ? left * co.w2 : P(0);
    if (vs) px_grad[s * T1 + t] = store<T>(xg);
    if (vt) py_grad[s * (P1 - 1) + t] = store<T>(yg);
    return xg + yg;
  }
  PE_HOSTDEVICE void emit(index_t, index_t, P, bool) const {}
};

template <int W>
__device__ inline void band_shared_init(BandShared<W>& sh) {
  for (int i = threadIdx.x; i < W; i += blockDim.x) sh.produced[i] = sh.consumed[i] = 0;
  if (threadIdx.x == 0) sh.ok = 1;
  __syncthreads();
}

template <typename T, int W>
__global__ void __launch_bounds__(32 * W) forward_band_kernel(const T* px, const T* py,
                                                                       const int64_t* boundary, P* p, T* ans,
                                                                       index_t S, index_t T_, bool modified) {
  __shared__ BandShared<W> sh;
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  P* pb = p + b * (S + 1) * P1;
  if (!mi_box_valid(box, S, T_)) {  // (block-uniform)
    if (threadIdx.x == 0) ans[b] = store<T>(std::numeric_limits<P>::quiet_NaN());
    return;
  }
  if (!(box.s_begin == 0 && box.t_begin == 0 && box.s_end == S && box.t_end == T_))  // -inf outside the box
    for (index_t s = 0; s <= S; ++s)
      for (index_t t = threadIdx.x; t < P1; t += blockDim.x)
        if (s < box.s_begin || s > box.s_end || t < box.t_begin || t > box.t_end) pb[s * P1 + t] = neg_inf<P>();
  band_shared_init(sh);
  const T *pxb = px + b * S * T1, *pyb = py + b * (S + 1) * T_;
  ForwardBand<T> pol{pxb, pyb, pb, T1, P1, box.s_begin, box.t_begin, box.s_end - box.s_begin + 1,
                     box.t_end - box.t_begin + 1, modified, true};
  band_walk(pol, sh, pol.nrows, pol.ncols, modified);
  if (!pol.ok) atomicAnd(&sh.ok, 0);
  __syncthreads();
  if (!sh.ok) {  // (block-uniform) NaN, +inf or huge inputs: the log-space wavefront redoes the box
    const ForwardCell<T> cell{pxb, pyb, pb, T1, P1, box.s_begin, box.t_begin, modified};
    wavefront<false>(box, cell);
  }
  if (threadIdx.x == 0) ans[b] = store<T>(pb[box.s_end * P1 + box.t_end]);
}

template <typename T, int W>
__global__ void __launch_bounds__(32 * W) backward_band_kernel(const T* px, const T* py,
                                                                        const int64_t* boundary, const P* p,
                                                                        const T* ans_grad, T* px_grad, T* py_grad,
                                                                        index_t S, index_t T_, bool modified) {
  __shared__ BandShared<W> sh;
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  if (!mi_box_valid(box, S, T_)) return;  // grads stay 0 (zeroed by the launcher)
  band_shared_init(sh);
  const P ag = ans_grad == nullptr ? P(1) : static_cast<P>(load(ans_grad[b]));
  BackwardBand<T> pol{px + b * S * T1, py + b * (S + 1) * T_, p + b * (S + 1) * P1, px_grad + b * S * T1,
                      py_grad + b * (S + 1) * T_, T1, P1, box.s_end, box.t_end, box.s_end - box.s_begin + 1,
                      box.t_end - box.t_begin + 1, ag, modified};
  band_walk(pol, sh, pol.nrows, pol.ncols, modified);
}

// The band kernels take boxes of up to 32 * kMaxWarps rows; one warp per 32 rows of S + 1.
inline bool use_bands(index_t S) { return S + 1 <= 32 * kMaxWarps; }
inline bool small_bands(index_t S) { return S + 1 <= 32 * kSmallWarps; }
inline int band_threads(index_t S) { return int((S + 1 + 31) / 32 * 32); }

}  // namespace

template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified, cudaStream_t stream) {
  if (B == 0) return;
  if (small_bands(S))
    forward_band_kernel<T, kSmallWarps>
        <<<(unsigned)B, band_threads(S), 0, stream>>>(px, py, boundary, p, ans, S, T_, modified);
  else if (use_bands(S))
    forward_band_kernel<T, kMaxWarps>
        <<<(unsigned)B, band_threads(S), 0, stream>>>(px, py, boundary, p, ans, S, T_, modified);
  else
    forward_kernel<T><<<(unsigned)B, block_threads(S, T_), 0, stream>>>(px, py, boundary, p, ans, S, T_, modified);
  check_launch("mutual_information_forward");
}

template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const P* p, const T* ans_grad,
                                 T* px_grad, T* py_grad, index_t B, index_t S, index_t T_, bool modified,
                                 cudaStream_t stream) {
  const index_t T1 = modified ? T_ : T_ + 1;
  // Grads outside a box stay 0; without boundary the band kernel writes every px/py grad itself.
  if (boundary != nullptr || !use_bands(S)) {
    if (B * S * T1 > 0) cudaMemsetAsync(px_grad, 0, sizeof(T) * B * S * T1, stream);  // 0.0 is all-zero bits
    if (B * (S + 1) * T_ > 0) cudaMemsetAsync(py_grad, 0, sizeof(T) * B * (S + 1) * T_, stream);
  }
  if (B == 0) return;
  if (use_bands(S)) {
    if (small_bands(S))
      backward_band_kernel<T, kSmallWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
          px, py, boundary, p, ans_grad, px_grad, py_grad, S, T_, modified);
    else
      backward_band_kernel<T, kMaxWarps><<<(unsigned)B, band_threads(S), 0, stream>>>(
          px, py, boundary, p, ans_grad, px_grad, py_grad, S, T_, modified);
    check_launch("mutual_information_backward");
    return;
  }
  P* g = nullptr;
  const size_t g_bytes = sizeof(P) * B * (S + 1) * (T_ + 1);
  if (cudaMallocAsync(reinterpret_cast<void**>(&g), g_bytes, stream) != cudaSuccess) {
    check_launch("mutual_information_backward: workspace");
    throw std::runtime_error("mutual_information_backward: cannot allocate the p_grad workspace");
  }
  backward_kernel<T><<<(unsigned)B, block_threads(S, T_), 0, stream>>>(px, py, boundary, p, ans_grad, g, px_grad,
                                                                        py_grad, S, T_, modified);
  check_launch("mutual_information_backward");
  cudaFreeAsync(g, stream);
}

#define PE_INSTANTIATE(T)                                                                                      \
  template void mutual_information_forward<T>(const T*, const T*, const int64_t*, P*, T*, index_t, index_t,    \
                                              index_t, bool, cudaStream_t);                                    \
  template void mutual_information_backward<T>(const T*, const T*, const int64_t*, const P*, const T*, T*, T*,  \
                                               index_t, index_t, index_t, bool, cudaStream_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
