// CUDA logcumsumexp: warp-level scans and vector I/O (the warp rows, rows.cu) and the float tiles' error
// bounds, look-back flags and coalesced tile I/O (tiles.cu, column_tiles.cu).
#pragma once

#include "scan.cuh"

namespace paddle_ext::gpu {
namespace {

// Many rows up to kWarpRowMax long: one warp per row, 32 lanes x kWarpItems positions per step, scanned
// with shuffles -- no block barrier, the carry in registers, 8 rows per block. The same linear/exact
// split as the tiles above; a lane's items are contiguous in memory, so they load and store as vectors,
// and the next step's items are loaded before this step is scanned (the walk is otherwise latency-bound).
constexpr int kWarpItems = 8;
constexpr index_t kWarpRowMax = 16384;
constexpr index_t kWarpRowsMin = 512;

template <typename T, int K>
struct alignas(sizeof(T) * K) ItemGroup {
  T v[K];
};

// Positions s .. s + K - 1 of the row at `base` (element s, or n - 1 - s when reversed); past n: -inf.
template <typename T, typename A, int K>
__device__ inline void load_group(const T* x, index_t base, index_t n, index_t s, bool reverse, A (&v)[K]) {
  const T* first = x + (reverse ? base + n - s - K : base + s);  // the group's lowest address
  if (s + K <= n && reinterpret_cast<uintptr_t>(first) % sizeof(ItemGroup<T, K>) == 0) {
    const ItemGroup<T, K> g = *reinterpret_cast<const ItemGroup<T, K>*>(first);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = static_cast<A>(load(g.v[reverse ? K - 1 - k : k]));
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = s + k < n ? static_cast<A>(load(x[base + (reverse ? n - 1 - (s + k) : s + k)])) : neg_inf<A>();
    }
  }
}
template <typename T, typename A, int K>
__device__ inline void store_group(T* out, index_t base, index_t n, index_t s, bool reverse, const A (&v)[K]) {
  T* first = out + (reverse ? base + n - s - K : base + s);
  if (s + K <= n && reinterpret_cast<uintptr_t>(first) % sizeof(ItemGroup<T, K>) == 0) {
    ItemGroup<T, K> g;
#pragma unroll
    for (int k = 0; k < K; ++k) g.v[reverse ? K - 1 - k : k] = store<T>(v[k]);
    *reinterpret_cast<ItemGroup<T, K>*>(first) = g;
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (s + k < n) out[base + (reverse ? n - 1 - (s + k) : s + k)] = store<T>(v[k]);
    }
  }
}

template <typename A, typename Op>
__device__ inline A warp_inclusive_scan(A v, Op op) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const A y = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v = op(y, v);
  }
  return v;
}
// The value of the lane before (`first` in lane 0): an exclusive scan from an inclusive one, exactly.
template <typename A>
__device__ inline A warp_shift_up(A v, A first) {
  const A y = __shfl_up_sync(0xffffffffu, v, 1);
  return (threadIdx.x & 31) == 0 ? first : y;
}
template <typename A, typename Op>
__device__ inline A warp_reduce(A v, Op op) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
template <typename A>
struct MaxOp {
  __device__ A operator()(A a, A b) const { return b > a ? b : a; }
};
template <typename A>
struct MinOp {
  __device__ A operator()(A a, A b) const { return b < a ? b : a; }
};
template <typename A>
struct PlusOp {
  __device__ A operator()(A a, A b) const { return a + b; }
};

// ---- Float tiles with a decoupled look-back: float32, float16 and bfloat16 rows of >= kTileRowMin ----
// A tile is kTile positions of one row (kTileItems contiguous ones per thread, loaded and stored
// coalesced through shared memory: load_tile_striped). Its terms
// are float exps of x - M (M the tile's max); a float prefix sum inside the thread, a float block scan
// across threads. The tile's log-sum (its aggregate, in double) is published at once; the carry (the
// log-sum of the row before the tile, in double) comes from a warp-wide look-back over the tiles before
// it: aggregates are log-add-exp'ed until a tile that already holds its inclusive prefix. Tile ids come
// from an atomic counter, so every tile a block waits for belongs to a block already running (no
// deadlock whatever the block scheduling). One read and one write per element, nothing else.
// Exactness, as on the CPU (cpu/logcumsumexp/scan.h, float_unsafe): each output o = B + l (l = log of the
// scaled running sum) carries a bound on its float error (see kFloatSlack); an output it cannot certify
// to 1e-6 |o| is recomputed in double. While no float rounding has entered the carry (the row's first
// tiles), that redo (positions up to the last failing one) is exact. After that the carry itself is
// within kCarrySlack u; outputs too close to 0 for that mark the row, and the last tile of the row to
// finish rescans it in double with the exact tile scan (forward_row_span). Tiles holding NaN/+inf, or a
// range exp(x - M) cannot span in float, or a carry far below them, take the exact log-add-exp scan
// in double.
constexpr int kTileItems = 16;
constexpr index_t kTile = (index_t)kRowThreads * kTileItems;  // 4096 positions
constexpr index_t kTileRowMin = 2048;                          // shorter rows keep the kernels above
constexpr int kWarps = kRowThreads / 32;
// The float error bound (u = 2^-24): exp within 2 ulp (4u), the roundings of the prefix sums (at most
// 15 in the thread, 5 in the warp, 7 across warps, 2 to combine: 29u), of x - M weighted by the terms
// (u (log 4096 + max(0, -l))), of c + r q (fma) and of c and r (3u): the scaled sum within
// (45.3 + max(0, -l)) u; the carry's share is within kCarrySlack u (below). log within 1 ulp (2u |l|),
// o = B + l rounded (u |o|). So |o - exact| <= u (45.3 + 3 |l| + |o|), within 1e-6 |o| = 16.78 u |o|
// when 15 |o| >= kFloatSlack + 3 |l|.
constexpr float kFloatSlack = 48.0f;
// A carry made of float tiles: each aggregate within (4 + 27 + 8.32) u of its exact log-sum (the
// log-add-exp of aggregates in double adds nothing visible); an output recomputed in double from such a
// carry is within u (39.3 + |o|), below 1e-6 |o| when 15 |o| >= kCarrySlack.
constexpr float kCarrySlack = 44.0f;
// Tile status flags: 0 nothing yet; kAggregate: aggregate[] holds the tile's log-sum; kInclusive:
// inclusive[] holds the log-sum of the row up to and including the tile; kInexact: float rounding
// entered that value.
constexpr int kAggregate = 1, kInclusive = 2, kInexact = 4;

struct TileScratch {
  double* aggregate;  // [tiles]
  double* inclusive;  // [tiles]
  unsigned* counter;  // the next tile id; these ints start at zero (one memset)
  int* redo;          // [rows] the row needs the double rescan
  int* done;          // [rows] tiles of the row finished
  int* flags;         // [tiles]
};

template <typename V>
__device__ inline V load_volatile(const V* p) {
  return *reinterpret_cast<const volatile V*>(p);
}
template <typename V>
__device__ inline void store_volatile(V* p, V v) {
  *reinterpret_cast<volatile V*>(p) = v;
}

// Exclusive scan of one value per thread over the block (`shared`: kWarps slots, reusable after the
// call when kReuse: a barrier at the end); *total gets the op of all of them. Called by every thread.
template <bool kReuse = true, typename V, typename Op>
__device__ inline V block_exclusive_scan(V v, Op op, V identity, V* shared, V* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const V inclusive = warp_inclusive_scan(v, op);
  if (lane == 31) shared[warp] = inclusive;
  __syncthreads();
  V before = identity, all = identity;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) before = all;
    all = op(all, shared[w]);
  }
  if (kReuse) __syncthreads();
  *total = all;
  return op(before, warp_shift_up(inclusive, identity));
}

// Coalesced tile I/O. The scan wants kTileItems contiguous positions per thread, but loading those
// directly puts a warp's 16-byte vectors 64 bytes apart (half of every sector fetched is wasted).
// So a warp loads its 32 * kTileItems positions warp-striped (lane l takes vectors l, l + 32, ...:
// consecutive lanes on consecutive 16 bytes) and exchanges them through a per-warp shared buffer of
// 16-byte chunks (as floats); the store runs the other way. Chunk c sits at c ^ ((c >> 3) & 7), so
// both the striped and the per-thread accesses hit 8 distinct 16-byte bank groups per quarter warp.
constexpr int kXposeChunks = 32 * kTileItems / 4;  // float4 chunks per warp
__device__ inline int xpose_slot(int c) { return c ^ ((c >> 3) & 7); }

// v[k] = position warp_s + lane * kTileItems + k (-inf past n). Called by every lane of the warp.
template <typename T>
__device__ inline void load_tile_striped(const T* x, index_t base, index_t n, index_t warp_s, bool reverse,
                                         float4* buf, float (&v)[kTileItems]) {
  constexpr int kVec = 16 / sizeof(T), kVecs = kTileItems / kVec;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < kVecs; ++m) {
    const int vi = m * 32 + lane;
    float w[kVec];
    load_group(x, base, n, warp_s + (index_t)vi * kVec, reverse, w);
#pragma unroll
    for (int h = 0; h < kVec / 4; ++h) {
      buf[xpose_slot(vi * (kVec / 4) + h)] = make_float4(w[4 * h], w[4 * h + 1], w[4 * h + 2], w[4 * h + 3]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kTileItems / 4; ++i) {
    const float4 f = buf[xpose_slot(lane * (kTileItems / 4) + i)];
    v[4 * i] = f.x;
    v[4 * i + 1] = f.y;
    v[4 * i + 2] = f.z;
    v[4 * i + 3] = f.w;
  }
}

// Chunk i of the lane's own kTileItems values (positions lane * kTileItems + 4i ..) in the buffer. The
// kernel parks the thread's prefix sums there across the look-back (16 registers fewer) and turns them
// into outputs in place.
__device__ inline float4& own_chunk(float4* buf, int i) {
  return buf[xpose_slot((threadIdx.x & 31) * (kTileItems / 4) + i)];
}

// Stores the lanes' own values in buf (own_chunk) at positions warp_s + lane * kTileItems + k (not past
// n), except those of lanes with `skip` (their outputs are already stored). Called by every lane.
template <typename T>
__device__ inline void store_tile_striped(T* out, index_t base, index_t n, index_t warp_s, bool reverse,
                                          float4* buf, bool skip) {
  constexpr int kVec = 16 / sizeof(T), kVecs = kTileItems / kVec;
  const int lane = threadIdx.x & 31;
  __syncwarp();  // every lane's own chunks are written
#pragma unroll
  for (int m = 0; m < kVecs; ++m) {
    const int vi = m * 32 + lane;
    const bool owner_skips = __shfl_sync(0xffffffffu, skip, vi * kVec / kTileItems);  // the lane that owns it
    float w[kVec];
#pragma unroll
    for (int h = 0; h < kVec / 4; ++h) {
      const float4 f = buf[xpose_slot(vi * (kVec / 4) + h)];
      w[4 * h] = f.x;
      w[4 * h + 1] = f.y;
      w[4 * h + 2] = f.z;
      w[4 * h + 3] = f.w;
    }
    if (!owner_skips) store_group(out, base, n, warp_s + (index_t)vi * kVec, reverse, w);
  }
}

// Position s of the row at `base` as float (-inf past n). The rare double paths below re-read their
// inputs through this (an L2 hit) rather than index the register array with a loop variable.
template <typename T>
__device__ inline float load_position(const T* x, index_t base, index_t n, index_t s, bool reverse) {
  return s < n ? static_cast<float>(load(x[base + (reverse ? n - 1 - s : s)])) : neg_inf<float>();
}

// The exact log-add-exp scan in double over positions [s, s + kTileItems): the log-sum of the tile's
// positions before this thread's (returned) and of the whole tile (*total). Called by every thread.
template <typename T>
__device__ inline double exact_thread_offset(const T* x, index_t base, index_t n, index_t s, bool reverse,
                                             double* shared, double* total) {
  const LogAddExpOp<double> op;
  double run = neg_inf<double>();
#pragma unroll 1
  for (int k = 0; k < kTileItems; ++k) run = op(run, static_cast<double>(load_position(x, base, n, s + k, reverse)));
  return block_exclusive_scan(run, op, neg_inf<double>(), shared, total);
}

// The double rescan of a row (every thread of the block calls it). Out of line: it is rare, and inlined,
// its double block scan made the tile kernel spill at 64 registers (__launch_bounds__(kRowThreads, 4)).
template <typename T>
__device__ __noinline__ void rescan_row(const T* x, T* out, index_t base, index_t n, bool exclusive, bool reverse,
                                        RowTemp<T, double>& temp, TileStats<double>* stats, double* carry) {
  forward_row_span<T, double>(x, out, base, n, 0, n, neg_inf<double>(), exclusive, reverse, temp, stats, carry);
}

// The column tiles (column_tiles.cu): 32 columns x kColTile steps a tile.
constexpr index_t kColTile = (index_t)kWarps * kTileItems;  // 128 steps
constexpr index_t kColTileMinSteps = 256;                    // shorter axes keep the column kernels above
constexpr index_t kHalfColumnLinesMin = 4096;  // float16/bfloat16: see logcumsumexp_forward

// The zeroed ints of a float-tile launch's scratch (counter, redo, done, flags), at `at`.
inline int* zeroed_ints(double* at, index_t ints, cudaStream_t stream) {
  int* zeroed = reinterpret_cast<int*>(at);
  const cudaError_t err = cudaMemsetAsync(zeroed, 0, sizeof(int) * ints, stream);
  if (err != cudaSuccess) throw std::runtime_error(std::string("logcumsumexp: ") + cudaGetErrorString(err));
  return zeroed;
}

}  // namespace
}  // namespace paddle_ext::gpu
