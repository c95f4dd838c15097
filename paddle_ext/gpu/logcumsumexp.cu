// CUDA logcumsumexp.
//   inner == 1 (scanned axis contiguous): one block per row, single pass, tiles of kRowThreads x kItems
//     with the carry held by every thread. A tile is scanned in linear form, as on the CPU: with M the
//     tile's max (and the carry's), out = M + log(carry + prefix sum of exp(x - M)) -- one exp and one
//     log per element and a plain-sum cub::BlockScan. The backward is the same in linear form,
//     dx = exp(x + M) * (signed prefix of g exp(-out - M)) -- two exps, no log. Tiles holding NaN/+inf
//     (or spanning too wide a range for exp(x - M)) take the exact log-add-exp BlockScan instead, so
//     the edge semantics are those of log_math.h. float32 accumulates in double, half types in float.
//     A few long rows are cut into chunks, one block each (chunk sums first, then each chunk scanned
//     from the sum of the chunks before it), so [16, 2^20] fills the device instead of 16 blocks.
//   inner  > 1 (strided axis): one thread per column, walking the axis with a LogSumAcc (one exp and one
//     log per element); neighbouring threads read neighbouring addresses, so every step is coalesced,
//     and no transpose buffer is needed. When there are few lines (e.g. axis 0 of [4096, 4096]), each
//     column's axis is split over 32 threads of a block (sum, combine the pieces, rescan), so the
//     device has enough warps.
// Forward float32/float16/bfloat16 on rows of >= 2048 and on strided axes of >= 256 steps x >= 32 columns
// take the float tiles instead (forward_tiles_kernel, forward_column_tiles_kernel below): float exps and
// sums, a float64 carry from a single-pass decoupled look-back, a per-output error bound with a float64
// redo. The kernels above stay for the other shapes, for float64, for the backward, and for float16/
// bfloat16 where they fill the device (see logcumsumexp_forward).
// The per-element math lives in paddle_ext/logcumsumexp.h and log_math.h, shared with the CPU.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <limits>
#include <type_traits>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/logcumsumexp.h"

namespace paddle_ext {
namespace gpu {
namespace {

template <typename A>
struct LogAddExpOp {
  __device__ A operator()(A a, A b) const { return log_add_exp(a, b); }
};

// Backward scan element: the positive and negative halves of log(g) - out, scanned independently.
template <typename A>
struct SignedLog {
  A pos, neg;
};
template <typename A>
struct SignedLogAddExpOp {
  __device__ SignedLog<A> operator()(const SignedLog<A>& a, const SignedLog<A>& b) const {
    return {log_add_exp(a.pos, b.pos), log_add_exp(a.neg, b.neg)};
  }
};

// Forward: element i contributes x[i] and receives out[i].
template <typename T, typename A>
struct ForwardIO {
  static constexpr bool kLinear = true;  // column pieces use LogSumAcc: one exp and one log per element
  using Value = A;
  using Op = LogAddExpOp<A>;
  const T* x;
  T* out;
  __device__ static Value identity() { return neg_inf<A>(); }
  __device__ Value read(index_t i) const { return static_cast<A>(load(x[i])); }
  __device__ void write(index_t i, const Value& scanned) const { out[i] = store<T>(scanned); }
};

// Backward: element i contributes log|g[i]| - out[i] and receives the grad of x[i].
template <typename T, typename A>
struct BackwardIO {
  static constexpr bool kLinear = false;
  using Value = SignedLog<A>;
  using Op = SignedLogAddExpOp<A>;
  const T *x, *out, *out_grad;
  T* x_grad;
  __device__ static Value identity() { return {neg_inf<A>(), neg_inf<A>()}; }
  __device__ Value read(index_t i) const {
    A term;
    bool negative;
    Value v = identity();
    if (logcumsumexp_grad_term<A>(static_cast<A>(load(out_grad[i])), static_cast<A>(load(out[i])), &term,
                                  &negative)) {
      (negative ? v.neg : v.pos) = term;
    }
    return v;
  }
  __device__ void write(index_t i, const Value& s) const {
    x_grad[i] = store<T>(logcumsumexp_grad_value<A>(static_cast<A>(load(x[i])), s.pos, s.neg));
  }
};

constexpr int kRowThreads = 256;
constexpr int kItems = 4;  // a 1024-element tile (8 per thread measured slower: 124 registers, 2 blocks/SM)
// A few long rows (fewer than kFewRows, longer than a chunk) are cut into chunks of kChunk scan positions,
// one block each: a first kernel writes each chunk's log-sum, the second scans each chunk from the log-sum
// of the chunks before it. [16, 2^20] gets 1024 blocks instead of 16.
constexpr index_t kChunk = 16384;
constexpr index_t kFewRows = 1024;

// Loads of a strided walk are issued kBatch steps at a time, ahead of the (serial) scan of those steps:
// with one outstanding load per thread the walk would be latency-bound.
constexpr int kBatch = 8;
template <typename IO>
__device__ inline void read_batch(const IO& io, typename IO::Value (&v)[kBatch], index_t base, index_t s,
                                  index_t s1, index_t n, index_t inner, bool reverse) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    v[j] = s + j < s1 ? io.read(base + (reverse ? n - 1 - (s + j) : s + j) * inner) : IO::identity();
  }
}

// Scans steps [s0, s1) of one strided line from the carry `acc` (the line starts at `base`). The forward
// walks with a LogSumAcc (one exp and one log per element), the backward with its log-add-exp op.
template <typename IO>
__device__ void scan_column_piece(const IO& io, const typename IO::Op& op, typename IO::Value acc, index_t base,
                                  index_t s0, index_t s1, index_t n, index_t inner, bool exclusive, bool reverse) {
  if constexpr (IO::kLinear) {
    auto sum = LogSumAcc<typename IO::Value>::from_log(acc);
    for (index_t s = s0; s < s1; s += kBatch) {
      typename IO::Value v[kBatch];
      read_batch(io, v, base, s, s1, n, inner, reverse);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (s + j >= s1) break;
        const index_t i = base + (reverse ? n - 1 - (s + j) : s + j) * inner;
        if (exclusive) io.write(i, sum.value());
        sum.add(v[j]);
        if (!exclusive) io.write(i, sum.value());
      }
    }
  } else {  // per element: batching the heavier signed terms measured slower (0.77 vs 0.58 ms on an H200)
    for (index_t s = s0; s < s1; ++s) {
      const index_t i = base + (reverse ? n - 1 - s : s) * inner;
      const typename IO::Value v = io.read(i);
      if (exclusive) {
        io.write(i, acc);
        acc = op(acc, v);
      } else {
        acc = op(acc, v);
        io.write(i, acc);
      }
    }
  }
}

// One thread per (outer, column) line of a strided axis.
template <typename IO>
__global__ void scan_columns_kernel(IO io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse) {
  const typename IO::Op op;
  const index_t lines = outer * inner;
  for (index_t line = blockIdx.x * (index_t)blockDim.x + threadIdx.x; line < lines;
       line += (index_t)gridDim.x * blockDim.x) {
    const index_t o = line / inner, c = line % inner;
    const index_t base = o * n * inner + c;
    scan_column_piece(io, op, IO::identity(), base, 0, n, n, inner, exclusive, reverse);
  }
}

// Per-tile statistics, reduced over the block: max and min of the finite terms, max of x (backward),
// and whether a NaN/+inf (or any other value the linear form cannot take) is present.
template <typename A>
struct TileStats {
  A max, min, xmax;
  int bad;
};
template <typename A>
struct TileStatsOp {
  __device__ TileStats<A> operator()(const TileStats<A>& a, const TileStats<A>& b) const {
    return {a.max > b.max ? a.max : b.max, a.min < b.min ? a.min : b.min, a.xmax > b.xmax ? a.xmax : b.xmax,
            a.bad | b.bad};
  }
};
// exp(v - M) must stay a normal number over a tile's range, and exp(x + M) must not overflow.
template <typename A>
__device__ constexpr A linear_range() {
  return sizeof(A) == 8 ? A(600) : A(80);
}
template <typename A>
__device__ constexpr A exp_limit() {
  return sizeof(A) == 8 ? A(700) : A(85);
}
template <typename A>
__device__ inline bool nan_or_pos_inf(A v) {
  return v != v || v == -neg_inf<A>();
}

template <typename T, typename A>
union RowTemp {
  typename cub::BlockScan<A, kRowThreads>::TempStorage scan;
  typename cub::BlockScan<SignedLog<A>, kRowThreads>::TempStorage signed_scan;
  typename cub::BlockReduce<TileStats<A>, kRowThreads>::TempStorage reduce;
  typename cub::BlockReduce<A, kRowThreads>::TempStorage log_reduce;
  typename cub::BlockReduce<SignedLog<A>, kRowThreads>::TempStorage signed_reduce;
};

// Reduces the stats over the block and hands the result to every thread.
template <typename T, typename A>
__device__ TileStats<A> block_stats(RowTemp<T, A>& temp, TileStats<A>* shared, const TileStats<A>& mine) {
  const TileStats<A> total = cub::BlockReduce<TileStats<A>, kRowThreads>(temp.reduce).Reduce(mine, TileStatsOp<A>());
  if (threadIdx.x == 0) *shared = total;
  __syncthreads();
  return *shared;
}

// Hands thread 0's value to every thread (a barrier on each side: `shared` and the temp storage are reused).
template <typename V>
__device__ V broadcast(V* shared, const V& value) {
  __syncthreads();
  if (threadIdx.x == 0) *shared = value;
  __syncthreads();
  return *shared;
}

// Scans positions [s_begin, s_end) of the contiguous row at `base` (position s is element s, or n - 1 - s
// when reversed), starting from `carry`, the log of the sum before s_begin (the same in every thread).
template <typename T, typename A>
__device__ void forward_row_span(const T* x, T* out, index_t base, index_t n, index_t s_begin, index_t s_end,
                                 A carry, bool exclusive, bool reverse, RowTemp<T, A>& temp,
                                 TileStats<A>* stats_shared, A* carry_shared) {
  const LogAddExpOp<A> op;
  for (index_t tile = s_begin; tile < s_end; tile += (index_t)kRowThreads * kItems) {
    A v[kItems];
    TileStats<A> mine{neg_inf<A>(), -neg_inf<A>(), neg_inf<A>(), 0};
    for (int k = 0; k < kItems; ++k) {
      const index_t s = tile + (index_t)threadIdx.x * kItems + k;
      v[k] = s < s_end ? static_cast<A>(load(x[base + (reverse ? n - 1 - s : s)])) : neg_inf<A>();
      if (nan_or_pos_inf(v[k])) {
        mine.bad = 1;
      } else if (v[k] != neg_inf<A>()) {
        mine.max = v[k] > mine.max ? v[k] : mine.max;
        mine.min = v[k] < mine.min ? v[k] : mine.min;
      }
    }
    const TileStats<A> st = block_stats<T, A>(temp, stats_shared, mine);
    const A M = st.max > carry ? st.max : carry;
    const A low = carry == neg_inf<A>() || st.min < carry ? st.min : carry;
    const bool fast = !st.bad && !nan_or_pos_inf(carry) && (M == neg_inf<A>() || M - low <= linear_range<A>());
    A next;
    if (fast && M == neg_inf<A>()) {  // nothing but -inf so far
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) out[base + (reverse ? n - 1 - s : s)] = store<T>(neg_inf<A>());
      }
      next = carry;
    } else if (fast) {
      A e[kItems], total;
      for (int k = 0; k < kItems; ++k) e[k] = std::exp(v[k] - M);  // -inf gives 0
      if (exclusive) {
        cub::BlockScan<A, kRowThreads>(temp.scan).ExclusiveSum(e, e, total);
      } else {
        cub::BlockScan<A, kRowThreads>(temp.scan).InclusiveSum(e, e, total);
      }
      const A c = carry == neg_inf<A>() ? A(0) : std::exp(carry - M);
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) out[base + (reverse ? n - 1 - s : s)] = store<T>(M + std::log(c + e[k]));  // log 0 = -inf
      }
      next = M + std::log(c + total);
    } else {  // exact: the log-add-exp scan
      A total;
      if (exclusive) {
        cub::BlockScan<A, kRowThreads>(temp.scan).ExclusiveScan(v, v, neg_inf<A>(), op, total);
      } else {
        cub::BlockScan<A, kRowThreads>(temp.scan).InclusiveScan(v, v, op, total);
      }
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) out[base + (reverse ? n - 1 - s : s)] = store<T>(op(carry, v[k]));
      }
      next = op(carry, total);
    }
    carry = broadcast(carry_shared, next);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_rows_kernel(const T* x, T* out, index_t rows, index_t n,
                                                                  bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ A carry_shared;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    forward_row_span<T, A>(x, out, row * n, n, 0, n, neg_inf<A>(), exclusive, reverse, temp, &stats_shared,
                           &carry_shared);
  }
}

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

template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_rows_warp_kernel(const T* x, T* out, index_t rows, index_t n,
                                                                       bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  constexpr int kWarps = kRowThreads / 32;
  const LogAddExpOp<A> op;
  const int lane = threadIdx.x & 31;
  for (index_t row = (index_t)blockIdx.x * kWarps + threadIdx.x / 32; row < rows; row += (index_t)gridDim.x * kWarps) {
    const index_t base = row * n;
    A carry = neg_inf<A>();  // warp-uniform
    A ahead[kWarpItems];
    load_group(x, base, n, (index_t)lane * kWarpItems, reverse, ahead);
    for (index_t step = 0; step < n; step += 32 * kWarpItems) {
      const index_t s = step + (index_t)lane * kWarpItems;
      A v[kWarpItems], o[kWarpItems];
#pragma unroll
      for (int k = 0; k < kWarpItems; ++k) v[k] = ahead[k];
      if (step + 32 * kWarpItems < n) load_group(x, base, n, s + 32 * kWarpItems, reverse, ahead);
      A mx = neg_inf<A>(), mn = -neg_inf<A>();
      bool bad = false;
#pragma unroll
      for (int k = 0; k < kWarpItems; ++k) {
        if (nan_or_pos_inf(v[k])) {
          bad = true;
        } else if (v[k] != neg_inf<A>()) {
          mx = v[k] > mx ? v[k] : mx;
          mn = v[k] < mn ? v[k] : mn;
        }
      }
      mx = warp_reduce(mx, MaxOp<A>());
      mn = warp_reduce(mn, MinOp<A>());
      bad = __any_sync(0xffffffffu, bad);
      const A M = mx > carry ? mx : carry;
      const A low = carry == neg_inf<A>() || mn < carry ? mn : carry;
      const bool fast = !bad && !nan_or_pos_inf(carry) && (M == neg_inf<A>() || M - low <= linear_range<A>());
      A next;
      if (fast && M == neg_inf<A>()) {  // nothing but -inf so far
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = neg_inf<A>();
        next = carry;
      } else if (fast) {
        A in_lane[kWarpItems], run = A(0);  // prefix sums of exp(v - M) within the lane
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) {
          const A before = run;
          run += std::exp(v[k] - M);  // -inf gives 0
          in_lane[k] = exclusive ? before : run;
        }
        const A lanes_incl = warp_inclusive_scan(run, PlusOp<A>());
        const A lanes_before = warp_shift_up(lanes_incl, A(0));
        const A c = carry == neg_inf<A>() ? A(0) : std::exp(carry - M);
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = M + std::log(c + lanes_before + in_lane[k]);  // log 0 = -inf
        next = M + std::log(c + __shfl_sync(0xffffffffu, lanes_incl, 31));
      } else {  // exact: the log-add-exp scan
        A in_lane[kWarpItems], run = neg_inf<A>();
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) {
          const A before = run;
          run = op(run, v[k]);
          in_lane[k] = exclusive ? before : run;
        }
        const A lanes_incl = warp_inclusive_scan(run, op);
        const A lanes_before = warp_shift_up(lanes_incl, neg_inf<A>());
#pragma unroll
        for (int k = 0; k < kWarpItems; ++k) o[k] = op(carry, op(lanes_before, in_lane[k]));
        next = op(carry, __shfl_sync(0xffffffffu, lanes_incl, 31));
      }
      store_group(out, base, n, s, reverse, o);
      carry = next;
    }
  }
}

// Long rows, pass 1: the log-sum of each chunk (LogSumAcc per thread, then a log-add-exp block reduce).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_chunk_sums_kernel(const T* x,
                                                                        typename LogcumsumexpAcc<T>::type* sums,
                                                                        index_t rows, index_t n, index_t chunks) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, s0 = (b % chunks) * kChunk, s1 = std::min(n, s0 + kChunk);
    LogSumAcc<A> acc;  // the direction does not change a chunk's sum: read it forwards
    for (index_t s = s0 + threadIdx.x; s < s1; s += kRowThreads) acc.add(static_cast<A>(load(x[row * n + s])));
    const A total = cub::BlockReduce<A, kRowThreads>(temp.log_reduce).Reduce(acc.value(), LogAddExpOp<A>());
    if (threadIdx.x == 0) sums[b] = total;
    __syncthreads();  // temp is reused by the next chunk
  }
}

// Scan positions [s0, s1) of scan chunk q. Chunks are cut in element order; with `reverse` scan chunk q
// is element chunk chunks - 1 - q, so its positions are those of the element chunk, mirrored.
__device__ inline void chunk_positions(index_t q, index_t chunks, index_t n, bool reverse, index_t* s0,
                                       index_t* s1) {
  const index_t e0 = (reverse ? chunks - 1 - q : q) * kChunk, e1 = std::min(n, e0 + kChunk);
  *s0 = reverse ? n - e1 : e0;
  *s1 = reverse ? n - e0 : e1;
}

// The log-sum of the chunks of `row` before `chunk` in scan order (the carry into that chunk).
template <typename V, typename Op>
__device__ V chunk_carry(const V* sums, index_t row, index_t chunk, index_t chunks, bool reverse, V identity, Op op) {
  V carry = identity;
  for (index_t q = 0; q < chunk; ++q) carry = op(carry, sums[row * chunks + (reverse ? chunks - 1 - q : q)]);
  return carry;
}

// Long rows, pass 2: block b scans chunk b % chunks of its row (in scan order) from the chunks before it.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_chunks_kernel(const T* x, T* out,
                                                                    const typename LogcumsumexpAcc<T>::type* sums,
                                                                    index_t rows, index_t n, index_t chunks,
                                                                    bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ A carry_shared;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, q = b % chunks;
    index_t s0, s1;
    chunk_positions(q, chunks, n, reverse, &s0, &s1);
    const A carry = chunk_carry(sums, row, q, chunks, reverse, neg_inf<A>(), LogAddExpOp<A>());
    forward_row_span<T, A>(x, out, row * n, n, s0, s1, carry, exclusive, reverse, temp, &stats_shared,
                           &carry_shared);
    __syncthreads();
  }
}

// ---- Float tiles with a decoupled look-back: float32, float16 and bfloat16 rows of >= kTileRowMin ----
// A tile is kTile positions of one row (kTileItems contiguous ones per thread, loaded and stored
// coalesced through shared memory: load_tile_striped). Its terms
// are float exps of x - M (M the tile's max); a float prefix sum inside the thread, a float block scan
// across threads. The tile's log-sum (its aggregate, in double) is published at once; the carry (the
// log-sum of the row before the tile, in double) comes from a warp-wide look-back over the tiles before
// it: aggregates are log-add-exp'ed until a tile that already holds its inclusive prefix. Tile ids come
// from an atomic counter, so every tile a block waits for belongs to a block already running (no
// deadlock whatever the block scheduling). One read and one write per element, nothing else.
// Exactness, as on the CPU (cpu/logcumsumexp.cc, float_unsafe): each output o = B + l (l = log of the
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

template <typename T>
__global__ void __launch_bounds__(kRowThreads, 4) forward_tiles_kernel(const T* x, T* out, index_t n,
                                                                   index_t tiles_per_row, TileScratch ws,
                                                                   bool exclusive, bool reverse) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kInfD = std::numeric_limits<double>::infinity();
  const LogAddExpOp<double> lae;
  __shared__ RowTemp<T, double> row_temp;  // the row rescan (forward_row_span)
  __shared__ TileStats<double> row_stats;
  __shared__ double row_carry;
  __shared__ float fscan[kWarps], wmax[kWarps], wmin[kWarps];
  __shared__ double dscan[kWarps];
  __shared__ unsigned tile_shared;
  __shared__ double carry_shared;
  __shared__ float scale_shared[3];  // B, c, r of the linear outputs
  __shared__ int exact_shared, last_fail_shared, hard_shared, last_shared;
  __shared__ float4 xpose[kWarps][kXposeChunks];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;

  if (threadIdx.x == 0) {
    tile_shared = atomicAdd(ws.counter, 1u);
    last_fail_shared = -1;
    hard_shared = 0;
  }
  __syncthreads();
  const index_t tile = tile_shared;
  const index_t row = tile / tiles_per_row, j = tile % tiles_per_row, first_tile = row * tiles_per_row;
  const index_t base = row * n;
  const int t0 = threadIdx.x * kTileItems;  // this thread's first position in the tile
  const index_t s = j * kTile + t0;
  const index_t warp_s = j * kTile + warp * (32 * kTileItems);  // the warp's first position
  float v[kTileItems];
  load_tile_striped(x, base, n, warp_s, reverse, xpose[warp], v);  // -inf past the row's end

  // Tile stats: max and min of the finite terms, NaN/+inf present.
  float mx = -kInf, mn = kInf;
  int bad = 0;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (nan_or_pos_inf(v[k])) {
      bad = 1;
    } else if (v[k] != -kInf) {
      mx = fmaxf(mx, v[k]);
      mn = fminf(mn, v[k]);
    }
  }
  mx = warp_reduce(mx, MaxOp<float>());
  mn = warp_reduce(mn, MinOp<float>());
  if (lane == 0) {
    wmax[warp] = mx;
    wmin[warp] = mn;
  }
  bad = __syncthreads_or(bad);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    mx = fmaxf(mx, wmax[w]);
    mn = fminf(mn, wmin[w]);
  }
  const bool all_ninf = mx == -kInf;  // the tile holds nothing but -inf (when !bad)
  const bool fast = !bad && (all_ninf || (mx - mn <= linear_range<float>() && fabsf(mx) < 1e30f));

  // The aggregate, and what the outputs need of it: p (the float prefix sums in the thread) and q0 (the
  // float sum of the threads before) for a linear tile, the log offset in double for an exact one.
  float q0 = 0.0f;
  double exact_off = neg_inf<double>(), aggregate;
  if (fast) {
    float p[kTileItems], run = 0.0f;
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float e = all_ninf ? 0.0f : expf(v[k] - mx);  // -inf gives 0
      if (exclusive) {
        p[k] = run;
        run += e;
      } else {
        run += e;
        p[k] = run;
      }
    }
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) {  // each lane's loaded chunks were read above: no race
      own_chunk(xpose[warp], i) = make_float4(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
    }
    float total;
    q0 = block_exclusive_scan<false>(run, PlusOp<float>(), 0.0f, fscan, &total);  // fscan is not reused
    aggregate = all_ninf ? -kInfD : static_cast<double>(mx) + log(static_cast<double>(total));
  } else {
    exact_off = exact_thread_offset(x, base, n, s, reverse, dscan, &aggregate);
  }
  const int aggregate_bits = fast && !all_ninf ? kInexact : 0;

  // Publish the aggregate (the inclusive prefix for a row's first tile), then look back.
  if (threadIdx.x == 0) {
    if (j == 0) {
      ws.inclusive[tile] = aggregate;
      __threadfence();
      store_volatile(ws.flags + tile, kInclusive | aggregate_bits);
    } else {
      ws.aggregate[tile] = aggregate;
      __threadfence();
      store_volatile(ws.flags + tile, kAggregate | aggregate_bits);
    }
  }
  if (warp == 0) {
    double carry = -kInfD;
    int inexact = 0;
    if (j > 0) {
      for (index_t k = j - 1;; k -= 32) {  // lane l looks at tile k - l of the row
        const index_t q = k - lane;
        int flag = kInclusive;  // before the row: the empty prefix
        double value = -kInfD;
        if (q >= 0) {
          do {
            flag = load_volatile(ws.flags + first_tile + q);
          } while (flag == 0);
          __threadfence();
          value = load_volatile((flag & kInclusive ? ws.inclusive : ws.aggregate) + first_tile + q);
        }
        const unsigned inclusive = __ballot_sync(0xffffffffu, flag & kInclusive);
        const int stop = __ffs(inclusive) - 1;  // the nearest tile with its inclusive prefix; -1: none
        const bool take = stop < 0 || lane <= stop;
        inexact |= __any_sync(0xffffffffu, take && (flag & kInexact));
        carry = lae(carry, warp_reduce(take ? value : -kInfD, lae));
        if (stop >= 0) break;
      }
      if (lane == 0) {
        ws.inclusive[tile] = lae(carry, aggregate);
        __threadfence();
        store_volatile(ws.flags + tile, kInclusive | (inexact ? kInexact : aggregate_bits));
      }
    }
    if (lane == 0) {
      carry_shared = carry;
      exact_shared = !inexact || carry == -kInfD;
      if (fast && !all_ninf) {  // the scale of the linear outputs (used only when they are linear)
        const double B = fmax(static_cast<double>(mx), carry);
        const float Bf = static_cast<float>(B);
        scale_shared[0] = Bf;
        scale_shared[1] = carry == -kInfD ? 0.0f : static_cast<float>(exp(carry - static_cast<double>(Bf)));
        scale_shared[2] = static_cast<float>(exp(static_cast<double>(mx) - static_cast<double>(Bf)));
      }
    }
  }
  __syncthreads();
  const double carry = carry_shared;
  const bool carry_exact = exact_shared;
  const bool carry_special = carry != carry || carry == kInfD;
  // Outputs: the prefix sum in own_chunk becomes the output of its position (as float). `hard`: an
  // output that neither float nor a double redo from this carry can certify (the row rescan).
  int fail = 0, hard = 0;
  bool written = false;  // the double paths store their outputs themselves
  if (fast && all_ninf) {  // every output is the carry
    const float cf = static_cast<float>(carry);
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) own_chunk(xpose[warp], i) = make_float4(cf, cf, cf, cf);
    hard = !carry_exact && fabs(carry) < kInfD && !(15.0 * fabs(carry) >= kCarrySlack);
  } else if (fast && !carry_special &&
             (carry == -kInfD || (fabs(carry) < 1e30 && static_cast<double>(mx) - carry <= linear_range<float>()))) {
    const float B = scale_shared[0], c = scale_shared[1], r = scale_shared[2];
    auto output = [&](float pk) {
      const float l = logf(fmaf(r, q0 + pk, c));  // an empty sum gives -inf
      const float o = B + l;
      if (fabsf(o) < kInf && !(15.0f * fabsf(o) >= kFloatSlack + 3.0f * fabsf(l))) {
        fail = 1;
        hard |= !carry_exact && !(15.0f * fabsf(o) >= kCarrySlack);
      }
      return o;
    };
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) {
      float4& f = own_chunk(xpose[warp], i);
      f = make_float4(output(f.x), output(f.y), output(f.z), output(f.w));
    }
    if (fail) atomicMax(&last_fail_shared, t0 + kTileItems - 1);
    if (hard) hard_shared = 1;
    if (__syncthreads_or(fail) && !hard_shared) {
      // Recompute positions [0, last] of the tile (whole threads' groups, up to the last failing output)
      // in double, e = exp(x - Md) with exact sums: the block takes kRowThreads consecutive positions
      // at a time, one each (one exp and one log per thread and step: a row's near-0 outputs are
      // usually within its first few dozen positions, so this is one step).
      const int last = last_fail_shared;
      const double Md = fmax(static_cast<double>(mx), carry);
      double acc = carry == -kInfD ? 0.0 : exp(carry - Md);  // the same in every thread
      for (int first = 0; first <= last; first += kRowThreads) {
        const int q = first + threadIdx.x;
        const index_t sq = j * kTile + q;
        const double e = q <= last ? exp(static_cast<double>(load_position(x, base, n, sq, reverse)) - Md) : 0.0;
        double total;
        const double before = acc + block_exclusive_scan(e, PlusOp<double>(), 0.0, dscan, &total);
        if (q <= last && sq < n) {
          out[base + (reverse ? n - 1 - sq : sq)] = store<T>(Md + log(exclusive ? before : before + e));
        }
        acc += total;
      }
      written = t0 <= last;  // those outputs were stored above
      hard = 0;
    }
  } else {  // exact: the log-add-exp scan in double from the carry
    if (fast) {
      double total;
      exact_off = exact_thread_offset(x, base, n, s, reverse, dscan, &total);
    }
    written = true;
    double run = lae(carry, exact_off);
#pragma unroll 1
    for (int k = 0; k < kTileItems && s + k < n; ++k) {
      const double vk = static_cast<double>(load_position(x, base, n, s + k, reverse));
      if (!exclusive) run = lae(run, vk);
      const double o = run;
      out[base + (reverse ? n - 1 - (s + k) : s + k)] = store<T>(o);
      hard |= !carry_exact && fabs(o) < kInfD && !(15.0 * fabs(o) >= kCarrySlack);
      if (exclusive) run = lae(run, vk);
    }
  }
  store_tile_striped(out, base, n, warp_s, reverse, xpose[warp], written);

  // The row's last tile to finish rescans it in double when some tile asked for it. The barrier, then
  // thread 0's fence before its atomic, order every thread's stores above before the rescan's (the
  // pattern of a cooperative-groups grid sync), so no thread needs a fence of its own.
  hard = __syncthreads_or(hard);
  if (threadIdx.x == 0) {
    if (hard) store_volatile(ws.redo + row, 1);
    __threadfence();
    const bool last = atomicAdd(ws.done + row, 1) == (int)tiles_per_row - 1;
    __threadfence();
    last_shared = last && load_volatile(ws.redo + row) != 0;
  }
  __syncthreads();
  if (last_shared) rescan_row(x, out, base, n, exclusive, reverse, row_temp, &row_stats, &row_carry);
}

// The backward of contiguous rows; `reverse` is the backward's scan direction. The carry is the pair of
// log sums (positive, negative) of logcumsumexp.h; a linear tile folds it into one signed sum.
// Scans positions [s_begin, s_end) of the row at `base` from `carry`, as forward_row_span does.
template <typename T, typename A>
__device__ void backward_row_span(const T* x, const T* out, const T* out_grad, T* x_grad, index_t base, index_t n,
                                  index_t s_begin, index_t s_end, SignedLog<A> carry, bool exclusive, bool reverse,
                                  RowTemp<T, A>& temp, TileStats<A>* stats_shared, SignedLog<A>* carry_shared) {
  using V = SignedLog<A>;
  const SignedLogAddExpOp<A> op;
  const BackwardIO<T, A> io{x, out, out_grad, x_grad};
  for (index_t tile = s_begin; tile < s_end; tile += (index_t)kRowThreads * kItems) {
    A xs[kItems], gs[kItems], vs[kItems];  // vs: -out where the element contributes, else -inf
    TileStats<A> mine{neg_inf<A>(), -neg_inf<A>(), neg_inf<A>(), 0};
    for (int k = 0; k < kItems; ++k) {
      const index_t s = tile + (index_t)threadIdx.x * kItems + k;
      const index_t i = base + (reverse ? n - 1 - s : s);
      xs[k] = s < s_end ? static_cast<A>(load(x[i])) : neg_inf<A>();
      gs[k] = s < s_end ? static_cast<A>(load(out_grad[i])) : A(0);
      const A o = s < s_end ? static_cast<A>(load(out[i])) : neg_inf<A>();
      if (nan_or_pos_inf(xs[k]) || nan_or_pos_inf(o) || !(gs[k] - gs[k] == A(0))) mine.bad = 1;
      const bool live = gs[k] != A(0) && o > neg_inf<A>();
      vs[k] = live ? -o : neg_inf<A>();
      if (live) {
        mine.max = vs[k] > mine.max ? vs[k] : mine.max;
        mine.min = vs[k] < mine.min ? vs[k] : mine.min;
      }
      mine.xmax = xs[k] > mine.xmax ? xs[k] : mine.xmax;
    }
    const TileStats<A> st = block_stats<T, A>(temp, stats_shared, mine);
    const A cmax = carry.pos > carry.neg ? carry.pos : carry.neg;
    const A cmin = carry.pos == neg_inf<A>() ? carry.neg : carry.neg == neg_inf<A>() ? carry.pos
                   : carry.pos < carry.neg                  ? carry.pos
                                                            : carry.neg;
    const A M = st.max > cmax ? st.max : cmax;
    const A low = cmin == neg_inf<A>() || st.min < cmin ? st.min : cmin;
    const bool fast = !st.bad && !nan_or_pos_inf(carry.pos) && !nan_or_pos_inf(carry.neg) &&
                      (M == neg_inf<A>() || (M - low <= linear_range<A>() && st.xmax + M <= exp_limit<A>()));
    V next;
    if (fast && M == neg_inf<A>()) {  // nothing contributes yet: every grad is 0
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) x_grad[base + (reverse ? n - 1 - s : s)] = store<T>(A(0));
      }
      next = carry;
    } else if (fast) {
      A e[kItems], total;
      for (int k = 0; k < kItems; ++k) e[k] = vs[k] == neg_inf<A>() ? A(0) : gs[k] * std::exp(vs[k] - M);
      if (exclusive) {
        cub::BlockScan<A, kRowThreads>(temp.scan).ExclusiveSum(e, e, total);
      } else {
        cub::BlockScan<A, kRowThreads>(temp.scan).InclusiveSum(e, e, total);
      }
      const A c = (carry.pos == neg_inf<A>() ? A(0) : std::exp(carry.pos - M)) -
                  (carry.neg == neg_inf<A>() ? A(0) : std::exp(carry.neg - M));
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) x_grad[base + (reverse ? n - 1 - s : s)] = store<T>(std::exp(xs[k] + M) * (c + e[k]));
      }
      const A sum = c + total;
      next.pos = sum > A(0) ? M + std::log(sum) : neg_inf<A>();
      next.neg = sum < A(0) ? M + std::log(-sum) : neg_inf<A>();
    } else {  // exact: the log-add-exp scan of logcumsumexp.h
      V items[kItems], total;
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        items[k] = s < s_end ? io.read(base + (reverse ? n - 1 - s : s)) : BackwardIO<T, A>::identity();
      }
      if (exclusive) {
        cub::BlockScan<V, kRowThreads>(temp.signed_scan).ExclusiveScan(items, items, BackwardIO<T, A>::identity(),
                                                                        op, total);
      } else {
        cub::BlockScan<V, kRowThreads>(temp.signed_scan).InclusiveScan(items, items, op, total);
      }
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        if (s < s_end) io.write(base + (reverse ? n - 1 - s : s), op(carry, items[k]));
      }
      next = op(carry, total);
    }
    carry = broadcast(carry_shared, next);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_rows_kernel(const T* x, const T* out, const T* out_grad,
                                                                   T* x_grad, index_t rows, index_t n,
                                                                   bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ SignedLog<A> carry_shared;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    backward_row_span<T, A>(x, out, out_grad, x_grad, row * n, n, 0, n, BackwardIO<T, A>::identity(), exclusive,
                            reverse, temp, &stats_shared, &carry_shared);
  }
}

// Long rows of the backward, pass 1: each chunk's (positive, negative) log sums of the grad terms.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_chunk_sums_kernel(
    const T* out, const T* out_grad, SignedLog<typename LogcumsumexpAcc<T>::type>* sums, index_t rows, index_t n,
    index_t chunks) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, s0 = (b % chunks) * kChunk, s1 = std::min(n, s0 + kChunk);
    LogSumAcc<A> pos, neg;
    for (index_t s = s0 + threadIdx.x; s < s1; s += kRowThreads) {
      A term;
      bool negative;
      const index_t i = row * n + s;
      if (logcumsumexp_grad_term<A>(static_cast<A>(load(out_grad[i])), static_cast<A>(load(out[i])), &term,
                                    &negative)) {
        (negative ? neg : pos).add(term);
      }
    }
    const SignedLog<A> total = cub::BlockReduce<SignedLog<A>, kRowThreads>(temp.signed_reduce)
                                   .Reduce(SignedLog<A>{pos.value(), neg.value()}, SignedLogAddExpOp<A>());
    if (threadIdx.x == 0) sums[b] = total;
    __syncthreads();
  }
}

// Long rows of the backward, pass 2 (chunk order as in forward_chunks_kernel).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_chunks_kernel(
    const T* x, const T* out, const T* out_grad, T* x_grad, const SignedLog<typename LogcumsumexpAcc<T>::type>* sums,
    index_t rows, index_t n, index_t chunks, bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ SignedLog<A> carry_shared;
  for (index_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const index_t row = b / chunks, q = b % chunks;
    index_t s0, s1;
    chunk_positions(q, chunks, n, reverse, &s0, &s1);
    const SignedLog<A> carry =
        chunk_carry(sums, row, q, chunks, reverse, BackwardIO<T, A>::identity(), SignedLogAddExpOp<A>());
    backward_row_span<T, A>(x, out, out_grad, x_grad, row * n, n, s0, s1, carry, exclusive, reverse, temp,
                            &stats_shared, &carry_shared);
    __syncthreads();
  }
}

// A strided axis with many columns but few (outer, column) lines: the axis of each column is cut into
// kSegments pieces scanned by different threads of one block (32 neighbouring columns x kSegments), so
// the walk is kSegments times shorter and the device gets enough warps. Each thread reduces its piece,
// the block combines the pieces' totals, then each thread scans its piece again from its carry. Reads
// stay coalesced (a warp covers 32 neighbouring columns); the op and the semantics are those of the
// one-thread-per-column kernel.
constexpr int kSegments = 32;
template <typename IO>
__global__ void __launch_bounds__(32 * kSegments) scan_column_segments_kernel(IO io, index_t outer, index_t n,
                                                                             index_t inner, bool exclusive,
                                                                             bool reverse) {
  using V = typename IO::Value;
  const typename IO::Op op;
  __shared__ V totals[kSegments][32];
  const index_t groups = (inner + 31) / 32;
  const index_t piece = (n + kSegments - 1) / kSegments;
  const int lane = threadIdx.x % 32, segment = threadIdx.x / 32;
  for (index_t group = blockIdx.x; group < outer * groups; group += gridDim.x) {
    const index_t o = group / groups, c = (group % groups) * 32 + lane;
    const index_t s0 = std::min(n, segment * piece), s1 = std::min(n, s0 + piece);
    const index_t base = o * n * inner + c;
    V acc = IO::identity();
    if (c < inner) {
      if constexpr (IO::kLinear) {
        LogSumAcc<V> sum;
        for (index_t s = s0; s < s1; s += kBatch) {
          V v[kBatch];
          read_batch(io, v, base, s, s1, n, inner, reverse);
#pragma unroll
          for (int j = 0; j < kBatch; ++j) sum.add(v[j]);  // past s1: identity (-inf) adds nothing
        }
        acc = sum.value();
      } else {
        for (index_t s = s0; s < s1; ++s) acc = op(acc, io.read(base + (reverse ? n - 1 - s : s) * inner));
      }
    }
    totals[segment][lane] = acc;
    __syncthreads();
    acc = IO::identity();
    for (int q = 0; q < segment; ++q) acc = op(acc, totals[q][lane]);
    if (c < inner) scan_column_piece(io, op, acc, base, s0, s1, n, inner, exclusive, reverse);
    __syncthreads();  // totals is reused by the next group
  }
}

template <typename IO>
void launch_columns(const IO& io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse,
                    cudaStream_t stream, const char* what) {
  constexpr int kThreads = 256;
  if (inner >= 32 && n >= 4 * kSegments && outer * inner < (index_t(1) << 17)) {
    const index_t groups = outer * ((inner + 31) / 32);
    scan_column_segments_kernel<IO><<<grid_size(groups, 1), 32 * kSegments, 0, stream>>>(io, outer, n, inner,
                                                                                        exclusive, reverse);
  } else {
    scan_columns_kernel<IO><<<grid_size(outer * inner, kThreads), kThreads, 0, stream>>>(io, outer, n, inner,
                                                                                          exclusive, reverse);
  }
  check_launch(what);
}

// ---- Float tiles on a strided axis (inner >= 32): the same scheme, 32 columns x kColTile steps a tile ----
// Lane l of every warp holds column l of the tile; warp w holds steps w * kTileItems .. + kTileItems - 1
// (each load: 32 neighbouring columns, coalesced). The warps' partial sums meet in shared memory; the
// carry is one log value per column. Tiles are numbered step-tile-major (tile j of every column group
// before tile j + 1), so the tile a look-back waits for was claimed about one column-group count
// earlier and is usually complete: the look-back walks one tile at a time. Every decision (linear or
// exact, the redo, the rescan) is per column, with the error bounds of the row tiles (the float sums here
// are shallower: 15 in the thread, 7 across warps, 2 to combine).
constexpr index_t kColTile = (index_t)kWarps * kTileItems;  // 128 steps
constexpr index_t kColTileMinSteps = 256;                    // shorter axes keep the column kernels above
constexpr index_t kHalfColumnLinesMin = 4096;  // float16/bfloat16: see logcumsumexp_forward

struct ColumnScratch {
  double* aggregate;  // [tiles][32]
  double* inclusive;  // [tiles][32]
  unsigned* counter;  // zeroed from here on
  int* redo;          // [outer * inner] the column needs the double rescan
  int* done;          // [outer * groups] tiles of the column group finished
  int* flags;         // [tiles]
};

// The double rescan of one column (a thread). Out of line, as rescan_row: inlined, the column tile
// kernel spilled 24 bytes at 64 registers; out of line, 8-12 bytes remain (the registers saved around
// this rare call, by ptxas's report).
template <typename T>
__device__ __noinline__ void rescan_column(const T* x, T* out, index_t base, index_t n, index_t inner,
                                           bool exclusive, bool reverse) {
  const ForwardIO<T, double> io{x, out};
  scan_column_piece(io, LogAddExpOp<double>(), neg_inf<double>(), base, 0, n, n, inner, exclusive, reverse);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads, 4) forward_column_tiles_kernel(const T* x, T* out, index_t outer,
                                                                          index_t n, index_t inner,
                                                                          index_t step_tiles, ColumnScratch ws,
                                                                          bool exclusive, bool reverse) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kInfD = std::numeric_limits<double>::infinity();
  const LogAddExpOp<double> lae;
  __shared__ float smax[kWarps][32], smin[kWarps][32], ssum[kWarps][32];
  __shared__ int sbad[kWarps][32];
  __shared__ float park[kTileItems][kWarps][32];
  __shared__ double sd[kWarps][32];
  __shared__ double carry_sh[32];
  __shared__ float scale_sh[3][32];
  __shared__ int exact_sh[32], last_fail_sh[32], hard_sh[32];
  __shared__ unsigned tile_shared;
  __shared__ int last_shared;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;

  if (threadIdx.x == 0) tile_shared = atomicAdd(ws.counter, 1u);
  if (threadIdx.x < 32) {
    last_fail_sh[lane] = -1;
    hard_sh[lane] = 0;
  }
  __syncthreads();
  const index_t groups = (inner + 31) / 32, lines = outer * groups;  // lines: (outer, column group) pairs
  const index_t tile = tile_shared;
  const index_t j = tile / lines, g = tile % lines, o = g / groups, c = (g % groups) * 32 + lane;
  const bool live = c < inner;
  const index_t base = o * n * inner + (live ? c : 0);
  const int t0 = warp * kTileItems;  // this thread's first step in the tile
  const index_t s = j * kColTile + t0;
  auto at = [&](index_t step) { return base + (reverse ? n - 1 - step : step) * inner; };
  float v[kTileItems];
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) v[k] = live && s + k < n ? static_cast<float>(load(x[at(s + k)])) : -kInf;

  // Column stats over the tile.
  float mx = -kInf, mn = kInf;
  int bad = 0;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (nan_or_pos_inf(v[k])) {
      bad = 1;
    } else if (v[k] != -kInf) {
      mx = fmaxf(mx, v[k]);
      mn = fminf(mn, v[k]);
    }
  }
  smax[warp][lane] = mx;
  smin[warp][lane] = mn;
  sbad[warp][lane] = bad;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    mx = fmaxf(mx, smax[w][lane]);
    mn = fminf(mn, smin[w][lane]);
    bad |= sbad[w][lane];
  }
  const bool all_ninf = mx == -kInf;
  const bool fast = !bad && (all_ninf || (mx - mn <= linear_range<float>() && fabsf(mx) < 1e30f));

  // Partial sums: float for a linear column, the log-add-exp in double for an exact one.
  // p[k][warp][lane]: the thread's float prefix sums, then its outputs, parked in shared memory (not 16
  // registers) across the look-back and the barriers: the kernel fits 64 registers (4 blocks/SM).
  auto p = [&](int k) -> float& { return park[k][warp][lane]; };
  float run = 0.0f;
  double log_run = -kInfD;
  if (fast) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float e = all_ninf ? 0.0f : expf(v[k] - mx);
      if (exclusive) {
        p(k) = run;
        run += e;
      } else {
        run += e;
        p(k) = run;
      }
    }
  } else {
#pragma unroll 1
    for (int k = 0; k < kTileItems; ++k) {
      log_run = lae(log_run, live && s + k < n ? static_cast<double>(load(x[at(s + k)])) : -kInfD);
    }
  }
  ssum[warp][lane] = run;
  sd[warp][lane] = log_run;
  __syncthreads();
  float q0 = 0.0f;  // the column's float sum over the warps before
  for (int w = 0; w < warp; ++w) q0 += ssum[w][lane];
  if (warp == 0) {
    double aggregate;
    if (fast) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += ssum[w][lane];
      aggregate = all_ninf ? -kInfD : static_cast<double>(mx) + log(static_cast<double>(total));
    } else {
      aggregate = -kInfD;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) aggregate = lae(aggregate, sd[w][lane]);
    }
    const bool aggregate_inexact = fast && !all_ninf;
    const int bits = __any_sync(0xffffffffu, aggregate_inexact) ? kInexact : 0;
    (j == 0 ? ws.inclusive : ws.aggregate)[tile * 32 + lane] = aggregate;
    __threadfence();
    __syncwarp();
    if (lane == 0) {
      __threadfence();
      store_volatile(ws.flags + tile, (j == 0 ? kInclusive : kAggregate) | bits);
    }
    // Look back one tile at a time (the same column group, the step tiles before).
    double carry = -kInfD;
    int inexact = 0;
    for (index_t k = j - 1; k >= 0; --k) {
      const index_t before = k * lines + g;
      int flag;
      do {
        flag = load_volatile(ws.flags + before);
      } while (flag == 0);
      __threadfence();
      carry = lae(load_volatile((flag & kInclusive ? ws.inclusive : ws.aggregate) + before * 32 + lane), carry);
      inexact |= flag & kInexact;
      if (flag & kInclusive) break;
    }
    __syncwarp();
    if (j > 0) {
      const int incl_bits = __any_sync(0xffffffffu, inexact || aggregate_inexact) ? kInexact : 0;
      ws.inclusive[tile * 32 + lane] = lae(carry, aggregate);
      __threadfence();
      __syncwarp();
      if (lane == 0) {
        __threadfence();
        store_volatile(ws.flags + tile, kInclusive | incl_bits);
      }
    }
    carry_sh[lane] = carry;
    exact_sh[lane] = !inexact || carry == -kInfD;  // the tile flags are per tile; an empty carry is exact
    if (fast && !all_ninf) {
      const float Bf = static_cast<float>(fmax(static_cast<double>(mx), carry));
      scale_sh[0][lane] = Bf;
      scale_sh[1][lane] = carry == -kInfD ? 0.0f : static_cast<float>(exp(carry - static_cast<double>(Bf)));
      scale_sh[2][lane] = static_cast<float>(exp(static_cast<double>(mx) - static_cast<double>(Bf)));
    }
  }
  __syncthreads();
  const double carry = carry_sh[lane];
  const bool carry_exact = exact_sh[lane];
  const bool carry_special = carry != carry || carry == kInfD;
  const bool linear = fast && !all_ninf && !carry_special &&
                      (carry == -kInfD || (fabs(carry) < 1e30 && static_cast<double>(mx) - carry <= linear_range<float>()));
  const bool exact = !(fast && all_ninf) && !linear;
  int fail = 0, hard = 0;
  bool written = false;
  if (fast && all_ninf) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) p(k) = static_cast<float>(carry);
    hard = !carry_exact && fabs(carry) < kInfD && !(15.0 * fabs(carry) >= kCarrySlack);
  } else if (linear) {
    const float B = scale_sh[0][lane], cs = scale_sh[1][lane], r = scale_sh[2][lane];
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float l = logf(fmaf(r, q0 + p(k), cs));
      const float out_k = B + l;
      p(k) = out_k;
      if (fabsf(out_k) < kInf && !(15.0f * fabsf(out_k) >= kFloatSlack + 3.0f * fabsf(l))) {
        fail = 1;
        hard |= !carry_exact && !(15.0f * fabsf(out_k) >= kCarrySlack);
      }
    }
    if (fail) atomicMax(&last_fail_sh[lane], t0 + kTileItems - 1);
  }
  if (hard) atomicOr(&hard_sh[lane], 1);
  // Redo in double the failing columns' steps up to their last failing one (columns the carry cannot
  // certify are rescanned below instead).
  if (__syncthreads_or(fail)) {
    const int last = last_fail_sh[lane];
    const bool mine = linear && last >= 0 && !hard_sh[lane] && t0 <= last;
    const double Md = fmax(static_cast<double>(mx), carry);
    double dsum = 0.0;
    if (mine) {
#pragma unroll 1
      for (int k = 0; k < kTileItems; ++k) {
        dsum += s + k < n ? exp(static_cast<double>(load(x[at(s + k)])) - Md) : 0.0;
      }
    }
    sd[warp][lane] = dsum;
    __syncthreads();
    if (mine) {
      double acc = carry == -kInfD ? 0.0 : exp(carry - Md);
      for (int w = 0; w < warp; ++w) acc += sd[w][lane];
      written = true;
#pragma unroll 1
      for (int k = 0; k < kTileItems && s + k < n; ++k) {
        const double e = exp(static_cast<double>(load(x[at(s + k)])) - Md);
        if (!exclusive) acc += e;
        out[at(s + k)] = store<T>(Md + log(acc));
        if (exclusive) acc += e;
      }
    }
    __syncthreads();  // sd is reused below
  }
  // Exact columns: the log-add-exp scan in double from the carry.
  if (__syncthreads_or(exact && live)) {
    if (exact && fast) {  // no log partial sums yet
      log_run = -kInfD;
#pragma unroll 1
      for (int k = 0; k < kTileItems; ++k) {
        log_run = lae(log_run, live && s + k < n ? static_cast<double>(load(x[at(s + k)])) : -kInfD);
      }
    }
    sd[warp][lane] = log_run;
    __syncthreads();
    if (exact && live) {
      double acc = carry;
      for (int w = 0; w < warp; ++w) acc = lae(acc, sd[w][lane]);
      written = true;
#pragma unroll 1
      for (int k = 0; k < kTileItems && s + k < n; ++k) {
        const double vk = static_cast<double>(load(x[at(s + k)]));
        if (!exclusive) acc = lae(acc, vk);
        out[at(s + k)] = store<T>(acc);
        hard |= !carry_exact && fabs(acc) < kInfD && !(15.0 * fabs(acc) >= kCarrySlack);
        if (exclusive) acc = lae(acc, vk);
      }
    }
    if (hard) atomicOr(&hard_sh[lane], 1);
  }
  if (live && !written) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      if (s + k < n) out[at(s + k)] = store<T>(p(k));
    }
  }

  // The last tile of a column group to finish rescans its columns that asked for it, a thread each.
  // (The barriers and thread 0's fences order every thread's stores before the rescan's, as in the rows.)
  __syncthreads();
  if (warp == 0 && hard_sh[lane] && live) store_volatile(ws.redo + o * inner + c, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const bool last = atomicAdd(ws.done + g, 1) == (int)step_tiles - 1;
    __threadfence();
    last_shared = last;
  }
  __syncthreads();
  if (last_shared && warp == 0 && live && load_volatile(ws.redo + o * inner + c) != 0) {
    rescan_column(x, out, o * n * inner + c, n, inner, exclusive, reverse);
  }
}

template <typename T>
void launch_forward_column_tiles(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                                 bool reverse, cudaStream_t stream) {
  const index_t step_tiles = (n + kColTile - 1) / kColTile, groups = outer * ((inner + 31) / 32);
  const index_t tiles = step_tiles * groups;
  const index_t ints = 1 + outer * inner + groups + tiles;  // counter, redo, done, flags: zeroed
  DeviceScratch<double> scratch(2 * 32 * tiles + (ints + 1) / 2, stream);
  ColumnScratch ws;
  ws.aggregate = scratch.ptr;
  ws.inclusive = scratch.ptr + 32 * tiles;
  int* zeroed = reinterpret_cast<int*>(scratch.ptr + 2 * 32 * tiles);
  const cudaError_t err = cudaMemsetAsync(zeroed, 0, sizeof(int) * ints, stream);
  if (err != cudaSuccess) throw std::runtime_error(std::string("logcumsumexp: ") + cudaGetErrorString(err));
  ws.counter = reinterpret_cast<unsigned*>(zeroed);
  ws.redo = zeroed + 1;
  ws.done = zeroed + 1 + outer * inner;
  ws.flags = zeroed + 1 + outer * inner + groups;
  forward_column_tiles_kernel<T><<<(unsigned)tiles, kRowThreads, 0, stream>>>(x, out, outer, n, inner, step_tiles,
                                                                              ws, exclusive, reverse);
  check_launch("logcumsumexp");
}

template <typename T>
void launch_forward_tiles(const T* x, T* out, index_t outer, index_t n, index_t tiles_per_row, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  const index_t tiles = outer * tiles_per_row;
  const index_t ints = 1 + 2 * outer + tiles;  // counter, redo, done, flags: zeroed
  DeviceScratch<double> scratch(2 * tiles + (ints + 1) / 2, stream);
  TileScratch ws;
  ws.aggregate = scratch.ptr;
  ws.inclusive = scratch.ptr + tiles;
  int* zeroed = reinterpret_cast<int*>(scratch.ptr + 2 * tiles);
  const cudaError_t err = cudaMemsetAsync(zeroed, 0, sizeof(int) * ints, stream);
  if (err != cudaSuccess) throw std::runtime_error(std::string("logcumsumexp: ") + cudaGetErrorString(err));
  ws.counter = reinterpret_cast<unsigned*>(zeroed);
  ws.redo = zeroed + 1;
  ws.done = zeroed + 1 + outer;
  ws.flags = zeroed + 1 + 2 * outer;
  forward_tiles_kernel<T><<<(unsigned)tiles, kRowThreads, 0, stream>>>(x, out, n, tiles_per_row, ws, exclusive,
                                                                       reverse);
  check_launch("logcumsumexp");
}

}  // namespace

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  if (outer == 0 || n == 0 || inner == 0) return;
  const index_t chunks = (n + kChunk - 1) / kChunk;
  const index_t tiles_per_row = (n + kTile - 1) / kTile;
  if constexpr (!std::is_same<T, double>::value) {
    // float16/bfloat16 already accumulate in float in the older kernels; where those fill the device
    // (many rows of <= kWarpRowMax, or >= kHalfColumnLinesMin strided lines of <= kWarpRowMax steps) they
    // measured faster than the tiles (H100, [4096, 4096] float16: 0.064 vs 0.102 ms along axis -1, 0.111
    // vs 0.147 ms along axis 0), and so did the chunked rows on few long rows ([16, 2^20]: 0.162 vs
    // 0.176 ms), so they keep them.
    constexpr bool kHalf = !std::is_same<T, float>::value;
    const bool half_rows_old =
        kHalf && ((n <= kWarpRowMax && outer >= kWarpRowsMin) || (chunks > 1 && outer < kFewRows));
    const bool half_columns_old = kHalf && n <= kWarpRowMax && outer * inner >= kHalfColumnLinesMin;
    if (inner == 1 && n >= kTileRowMin && outer * tiles_per_row < (1 << 30) && !half_rows_old) {
      launch_forward_tiles(x, out, outer, n, tiles_per_row, exclusive, reverse, stream);
      return;
    }
    const index_t column_tiles = outer * ((inner + 31) / 32) * ((n + kColTile - 1) / kColTile);
    if (inner >= 32 && n >= kColTileMinSteps && column_tiles < (1 << 26) && outer * inner < (index_t(1) << 30) &&
        !half_columns_old) {
      launch_forward_column_tiles(x, out, outer, n, inner, exclusive, reverse, stream);
      return;
    }
  }
  if (inner == 1 && chunks > 1 && outer < kFewRows) {
    DeviceScratch<A> sums(outer * chunks, stream);
    forward_chunk_sums_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(x, sums.ptr, outer, n,
                                                                                          chunks);
    forward_chunks_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(x, out, sums.ptr, outer, n,
                                                                                      chunks, exclusive, reverse);
    check_launch("logcumsumexp");
  } else if (inner == 1 && n <= kWarpRowMax && outer >= kWarpRowsMin) {
    forward_rows_warp_kernel<T><<<grid_size(outer, kRowThreads / 32), kRowThreads, 0, stream>>>(x, out, outer, n,
                                                                                             exclusive, reverse);
    check_launch("logcumsumexp");
  } else if (inner == 1) {
    forward_rows_kernel<T><<<grid_size(outer, 1), kRowThreads, 0, stream>>>(x, out, outer, n, exclusive, reverse);
    check_launch("logcumsumexp");
  } else {
    launch_columns(ForwardIO<T, A>{x, out}, outer, n, inner, exclusive, reverse, stream, "logcumsumexp");
  }
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                           index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  if (outer == 0 || n == 0 || inner == 0) return;
  // The grad of x[j] gathers the outputs j fed: the same scan, run in the opposite direction.
  const index_t chunks = (n + kChunk - 1) / kChunk;
  if (inner == 1 && chunks > 1 && outer < kFewRows) {
    DeviceScratch<SignedLog<A>> sums(outer * chunks, stream);
    backward_chunk_sums_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(out, out_grad, sums.ptr,
                                                                                           outer, n, chunks);
    backward_chunks_kernel<T><<<grid_size(outer * chunks, 1), kRowThreads, 0, stream>>>(
        x, out, out_grad, x_grad, sums.ptr, outer, n, chunks, exclusive, !reverse);
    check_launch("logcumsumexp_grad");
  } else if (inner == 1) {
    backward_rows_kernel<T><<<grid_size(outer, 1), kRowThreads, 0, stream>>>(x, out, out_grad, x_grad, outer, n,
                                                                              exclusive, !reverse);
    check_launch("logcumsumexp_grad");
  } else {
    launch_columns(BackwardIO<T, A>{x, out, out_grad, x_grad}, outer, n, inner, exclusive, !reverse, stream,
                   "logcumsumexp_grad");
  }
}

#define PE_INSTANTIATE(T)                                                                                  \
  template void logcumsumexp_forward<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t); \
  template void logcumsumexp_backward<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool,  \
                                         bool, cudaStream_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
