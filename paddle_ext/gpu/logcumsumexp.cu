// CUDA logcumsumexp.
//   inner == 1 (scanned axis contiguous): one block per row, single pass, tiles of kRowThreads x kItems
//     with the carry held by every thread. A tile is scanned in linear form, as on the CPU: with M the
//     tile's max (and the carry's), out = M + log(carry + prefix sum of exp(x - M)) -- one exp and one
//     log per element and a plain-sum cub::BlockScan. The backward is the same in linear form,
//     dx = exp(x + M) * (signed prefix of g exp(-out - M)) -- two exps, no log. Tiles holding NaN/+inf
//     (or spanning too wide a range for exp(x - M)) take the exact log-add-exp BlockScan instead, so
//     the edge semantics are those of log_math.h. float32 accumulates in double, half types in float.
//   inner  > 1 (strided axis): one thread per column, walking the axis; neighbouring threads read
//     neighbouring addresses, so every step is coalesced, and no transpose buffer is needed. When there
//     are few lines (e.g. axis 0 of [4096, 4096]), each column's axis is split over 32 threads of a block
//     (reduce, combine the pieces, rescan), so the device has enough warps.
// The per-element math lives in paddle_ext/logcumsumexp.h and log_math.h, shared with the CPU.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

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
constexpr int kItems = 4;

// Scans steps [s0, s1) of one strided line from the carry `acc` (the line starts at `base`).
template <typename IO>
__device__ void scan_column_piece(const IO& io, const typename IO::Op& op, typename IO::Value acc, index_t base,
                                  index_t s0, index_t s1, index_t n, index_t inner, bool exclusive, bool reverse) {
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

template <typename T>
__global__ void __launch_bounds__(kRowThreads) forward_rows_kernel(const T* x, T* out, index_t rows, index_t n,
                                                                  bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ A carry_shared;
  const LogAddExpOp<A> op;
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const index_t base = row * n;
    A carry = neg_inf<A>();  // log of the sum so far, the same in every thread
    for (index_t tile = 0; tile < n; tile += (index_t)kRowThreads * kItems) {
      A v[kItems];
      TileStats<A> mine{neg_inf<A>(), -neg_inf<A>(), neg_inf<A>(), 0};
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        v[k] = s < n ? static_cast<A>(load(x[base + (reverse ? n - 1 - s : s)])) : neg_inf<A>();
        if (nan_or_pos_inf(v[k])) {
          mine.bad = 1;
        } else if (v[k] != neg_inf<A>()) {
          mine.max = v[k] > mine.max ? v[k] : mine.max;
          mine.min = v[k] < mine.min ? v[k] : mine.min;
        }
      }
      const TileStats<A> st = block_stats<T, A>(temp, &stats_shared, mine);
      const A M = st.max > carry ? st.max : carry;
      const A low = carry == neg_inf<A>() || st.min < carry ? st.min : carry;
      const bool fast = !st.bad && !nan_or_pos_inf(carry) && (M == neg_inf<A>() || M - low <= linear_range<A>());
      A next;
      if (fast && M == neg_inf<A>()) {  // nothing but -inf so far
        for (int k = 0; k < kItems; ++k) {
          const index_t s = tile + (index_t)threadIdx.x * kItems + k;
          if (s < n) out[base + (reverse ? n - 1 - s : s)] = store<T>(neg_inf<A>());
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
          if (s < n) out[base + (reverse ? n - 1 - s : s)] = store<T>(M + std::log(c + e[k]));  // log 0 = -inf
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
          if (s < n) out[base + (reverse ? n - 1 - s : s)] = store<T>(op(carry, v[k]));
        }
        next = op(carry, total);
      }
      carry = broadcast(&carry_shared, next);
    }
  }
}

// The backward of contiguous rows; `reverse` is the backward's scan direction. The carry is the pair of
// log sums (positive, negative) of logcumsumexp.h; a linear tile folds it into one signed sum.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) backward_rows_kernel(const T* x, const T* out, const T* out_grad,
                                                                   T* x_grad, index_t rows, index_t n,
                                                                   bool exclusive, bool reverse) {
  using A = typename LogcumsumexpAcc<T>::type;
  using V = SignedLog<A>;
  __shared__ RowTemp<T, A> temp;
  __shared__ TileStats<A> stats_shared;
  __shared__ V carry_shared;
  const SignedLogAddExpOp<A> op;
  const BackwardIO<T, A> io{x, out, out_grad, x_grad};
  for (index_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const index_t base = row * n;
    V carry{neg_inf<A>(), neg_inf<A>()};
    for (index_t tile = 0; tile < n; tile += (index_t)kRowThreads * kItems) {
      A xs[kItems], gs[kItems], vs[kItems];  // vs: -out where the element contributes, else -inf
      TileStats<A> mine{neg_inf<A>(), -neg_inf<A>(), neg_inf<A>(), 0};
      for (int k = 0; k < kItems; ++k) {
        const index_t s = tile + (index_t)threadIdx.x * kItems + k;
        const index_t i = base + (reverse ? n - 1 - s : s);
        xs[k] = s < n ? static_cast<A>(load(x[i])) : neg_inf<A>();
        gs[k] = s < n ? static_cast<A>(load(out_grad[i])) : A(0);
        const A o = s < n ? static_cast<A>(load(out[i])) : neg_inf<A>();
        if (nan_or_pos_inf(xs[k]) || nan_or_pos_inf(o) || !(gs[k] - gs[k] == A(0))) mine.bad = 1;
        const bool live = gs[k] != A(0) && o > neg_inf<A>();
        vs[k] = live ? -o : neg_inf<A>();
        if (live) {
          mine.max = vs[k] > mine.max ? vs[k] : mine.max;
          mine.min = vs[k] < mine.min ? vs[k] : mine.min;
        }
        mine.xmax = xs[k] > mine.xmax ? xs[k] : mine.xmax;
      }
      const TileStats<A> st = block_stats<T, A>(temp, &stats_shared, mine);
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
          if (s < n) x_grad[base + (reverse ? n - 1 - s : s)] = store<T>(A(0));
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
          if (s < n) x_grad[base + (reverse ? n - 1 - s : s)] = store<T>(std::exp(xs[k] + M) * (c + e[k]));
        }
        const A sum = c + total;
        next.pos = sum > A(0) ? M + std::log(sum) : neg_inf<A>();
        next.neg = sum < A(0) ? M + std::log(-sum) : neg_inf<A>();
      } else {  // exact: the log-add-exp scan of logcumsumexp.h
        V items[kItems], total;
        for (int k = 0; k < kItems; ++k) {
          const index_t s = tile + (index_t)threadIdx.x * kItems + k;
          items[k] = s < n ? io.read(base + (reverse ? n - 1 - s : s)) : BackwardIO<T, A>::identity();
        }
        if (exclusive) {
          cub::BlockScan<V, kRowThreads>(temp.signed_scan).ExclusiveScan(items, items, BackwardIO<T, A>::identity(),
                                                                          op, total);
        } else {
          cub::BlockScan<V, kRowThreads>(temp.signed_scan).InclusiveScan(items, items, op, total);
        }
        for (int k = 0; k < kItems; ++k) {
          const index_t s = tile + (index_t)threadIdx.x * kItems + k;
          if (s < n) io.write(base + (reverse ? n - 1 - s : s), op(carry, items[k]));
        }
        next = op(carry, total);
      }
      carry = broadcast(&carry_shared, next);
    }
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
      for (index_t s = s0; s < s1; ++s) acc = op(acc, io.read(base + (reverse ? n - 1 - s : s) * inner));
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

}  // namespace

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  if (outer == 0 || n == 0 || inner == 0) return;
  if (inner == 1) {
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
  if (inner == 1) {
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
