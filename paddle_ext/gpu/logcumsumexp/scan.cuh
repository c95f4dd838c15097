// CUDA logcumsumexp: the scan operators, element I/O, and the row and column scan pieces the strategies
// (rows.cu, chunks.cu, tiles.cu, columns.cu, column_tiles.cu) build on. Included by each of them: the
// device code lives in an anonymous namespace, one copy per file.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <limits>
#include <type_traits>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/logcumsumexp.h"

namespace paddle_ext::gpu {
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
  } else {  // per element: batching the heavier signed terms measured slower on H100/H200
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
// A thread's items in a tile: the max and min of the finite ones, and whether one is NaN or +inf (-inf is
// an empty term).
template <int N>
__device__ __forceinline__ void finite_range(const float (&v)[N], float& mx, float& mn, int& bad) {
  mx = neg_inf<float>(), mn = -neg_inf<float>(), bad = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (nan_or_pos_inf(v[k])) {
      bad = 1;
    } else if (v[k] != neg_inf<float>()) {
      mx = fmaxf(mx, v[k]);
      mn = fminf(mn, v[k]);
    }
  }
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

}  // namespace
}  // namespace paddle_ext::gpu
