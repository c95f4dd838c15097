// CUDA adaptive_log_softmax. A row's lse comes from ONE read: each thread keeps a running (max, sum of
// exp(x - max)) over groups of elements loaded as 16-byte vectors (the sum rescaled by exp(old - new max),
// in double, when a group raises the max), and the block merges its threads' pairs. Long rows of a small
// batch are split into chunks, one block each, whose partial pairs a tiny kernel merges per row (enough
// blocks to fill the GPU). Every exp term is exp(x - max) in the accumulation type, summed in double for
// float rows as on the CPU; the per-element math lives in paddle_ext/adaptive_log_softmax.h, shared with cpu/.
// A target out of [0, K) yields NaN (out) / no target term (grad): checking it would cost a host sync.
#include <atomic>
#include <climits>
#include <cstdint>

#include "paddle_ext/adaptive_log_softmax.h"
#include "paddle_ext/gpu/cuda_utils.cuh"

namespace paddle_ext {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;                // 16-byte vectors in flight per thread in the main loops
constexpr index_t kMinChunk = 8192;       // a split row's chunks hold at least this many elements
constexpr index_t kMaxChunks = 256;       // and there are at most this many per row

using Sum = double;  // every exp term is summed in double (float rows as on the CPU; half rows too)

// Elements of T per 16-byte vector.
template <typename T>
struct Vec {
  static constexpr int N = 16 / (int)sizeof(T);
  union Raw {
    uint4 bits;
    T e[N];
  };
};

// Elements before the first 16-byte boundary of x (all n when x is not even T-aligned: no vectors then).
template <typename T>
__device__ inline index_t vector_head(const T* x, index_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(x);
  if (a % sizeof(T) != 0) return n;
  const index_t head = (index_t)((16 - a % 16) % 16 / sizeof(T));
  return head < n ? head : n;
}

// Running (max, sum of exp(x - max)) of a set of elements; NaN elements only set the flag (a row holding
// one has lse NaN), so max is never NaN. max -inf means no finite element yet (and sum is 0).
template <typename A>
struct Part {
  A max;
  Sum sum;
  int nan;

  __device__ static Part empty() { return {neg_inf<A>(), Sum(0), 0}; }

  // Adds n values: one rescale of the sum when they raise the max (exp(-inf) = 0 clears an empty sum).
  template <int n>
  __device__ __forceinline__ void add(const A (&v)[n]) {
    A hi = max;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      nan |= v[i] != v[i];
      hi = v[i] > hi ? v[i] : hi;
    }
    if (hi > max) {
      sum *= exp(static_cast<Sum>(max) - static_cast<Sum>(hi));
      max = hi;
    }
    A e[n];
#pragma unroll
    for (int i = 0; i < n; ++i) e[i] = als_exp_term<A>(v[i], max);
    // terms in fours, summed pairwise in A (<= 2 roundings of terms <= 1), then in double
    if constexpr (n % 4 == 0) {
#pragma unroll
      for (int i = 0; i < n; i += 4) sum += static_cast<Sum>((e[i] + e[i + 1]) + (e[i + 2] + e[i + 3]));
    } else {
#pragma unroll
      for (int i = 0; i < n; ++i) sum += static_cast<Sum>(e[i]);
    }
  }

  __device__ void add1(A x) {
    const A v[1] = {x};
    add(v);
  }

  // This part's sum relative to a larger max m (an empty part contributes 0, also when m is -inf).
  __device__ Sum sum_at(A m) const {
    return max == neg_inf<A>() ? Sum(0) : sum * exp(static_cast<Sum>(max) - static_cast<Sum>(m));
  }

  // lse of the row: NaN with a NaN; -inf for a row of -inf (or no element); NaN with +inf (als_lse).
  __device__ A lse() const { return nan ? A(NAN) : als_lse<A>(max, static_cast<A>(sum)); }
};

// op-reduction of v over the block, returned to every thread (deterministic order; smem reusable after).
template <typename V, typename Op>
__device__ V block_all_reduce(V v, Op op) {
  __shared__ V warp_result[kWarps];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) warp_result[threadIdx.x / 32] = v;
  __syncthreads();
  v = warp_result[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) v = op(v, warp_result[w]);
  __syncthreads();
  return v;
}

struct MaxOp {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a > b ? a : b;
  }
};
struct SumOp {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};

// The block's merged Part of x[0, n), returned to every thread; all threads of the block must call it.
template <typename T>
__device__ Part<acc_t<T>> block_part(const T* x, index_t n) {
  using A = acc_t<T>;
  constexpr int N = Vec<T>::N;
  using Raw = typename Vec<T>::Raw;
  Part<A> p = Part<A>::empty();
  const index_t head = vector_head(x, n);
  const index_t nvec = (n - head) / N;
  const uint4* body = reinterpret_cast<const uint4*>(x + head);
  for (index_t j = threadIdx.x; j < head; j += kThreads) p.add1(load(x[j]));
  index_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    Raw raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u].bits = __ldg(body + i + u * kThreads);
    A v[kUnroll * N];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < N; ++e) v[u * N + e] = load(raw[u].e[e]);
    p.add(v);
  }
  for (; i < nvec; i += kThreads) {
    Raw raw;
    raw.bits = __ldg(body + i);
    A v[N];
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = load(raw.e[e]);
    p.add(v);
  }
  for (index_t j = head + nvec * N + threadIdx.x; j < n; j += kThreads) p.add1(load(x[j]));
  // merge the threads' parts: the block max, then every sum taken to it
  Part<A> out;
  out.nan = __syncthreads_or(p.nan);
  out.max = block_all_reduce(p.max, MaxOp());
  out.sum = block_all_reduce(p.sum_at(out.max), SumOp());
  return out;
}

template <typename T>
__device__ void finish_target(const T* x_row, int64_t t, index_t k, acc_t<T> l, T* out, acc_t<T>* lse) {
  using A = acc_t<T>;
  *lse = l;
  *out = store<T>(als_target_ok(t, k) ? static_cast<A>(load(x_row[t])) - l : A(NAN));
}

// Block item -> (row, chunk of `chunk` elements); with one chunk per row the block finishes the row,
// else it stores its Part for target_merge_kernel.
template <typename T>
__global__ void __launch_bounds__(kThreads) target_forward_kernel(const T* logits, const int64_t* target, T* out,
                                                                  acc_t<T>* lse, Part<acc_t<T>>* parts, index_t m,
                                                                  index_t k, index_t chunk, index_t chunks) {
  for (index_t item = blockIdx.x; item < m * chunks; item += gridDim.x) {
    const index_t r = item / chunks, j0 = (item % chunks) * chunk;
    const T* x = logits + r * k;
    const auto p = block_part(x + j0, k - j0 < chunk ? k - j0 : chunk);
    if (threadIdx.x == 0) {
      if (chunks == 1) {
        finish_target(x, target[r], k, p.lse(), out + r, lse + r);
      } else {
        parts[item] = p;
      }
    }
  }
}

// One thread per split row: merges its chunks' Parts (the max first, then the sums at it).
template <typename T>
__global__ void target_merge_kernel(const T* logits, const int64_t* target, const Part<acc_t<T>>* parts, T* out,
                                    acc_t<T>* lse, index_t m, index_t k, index_t chunks) {
  using A = acc_t<T>;
  const index_t r = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= m) return;
  const Part<A>* p = parts + r * chunks;
  Part<A> row = Part<A>::empty();
  for (index_t c = 0; c < chunks; ++c) {
    row.nan |= p[c].nan;
    row.max = p[c].max > row.max ? p[c].max : row.max;
  }
  for (index_t c = 0; c < chunks; ++c) row.sum += p[c].sum_at(row.max);
  finish_target(logits + r * k, target[r], k, row.lse(), out + r, lse + r);
}

// Block item -> (row, tile of `tile` elements): grad = ([j == t] - exp(x - lse)) * g in one streaming pass,
// 16-byte vectors where x and the grad share their alignment (`vec`).
template <typename T>
__global__ void __launch_bounds__(kThreads) target_backward_kernel(const T* logits, const int64_t* target,
                                                                   const acc_t<T>* lse, const T* out_grad,
                                                                   T* logits_grad, index_t m, index_t k, index_t tile,
                                                                   index_t tiles, bool vec) {
  using A = acc_t<T>;
  constexpr int N = Vec<T>::N;
  using Raw = typename Vec<T>::Raw;
  for (index_t item = blockIdx.x; item < m * tiles; item += gridDim.x) {
    const index_t r = item / tiles, j0 = (item % tiles) * tile;
    const index_t n = k - j0 < tile ? k - j0 : tile;
    const T* x = logits + r * k + j0;
    T* dx = logits_grad + r * k + j0;
    const A l = lse[r], g = load(out_grad[r]);
    const int64_t target_r = target[r];
    const index_t t = target_r >= j0 && target_r < j0 + n ? target_r - j0 : -1;  // the target's index in the tile
    const index_t head = vec ? vector_head(x, n) : n;
    const index_t nvec = (n - head) / N;
    for (index_t j = threadIdx.x; j < head; j += kThreads) dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, j == t));
    const uint4* xv = reinterpret_cast<const uint4*>(x + head);
    uint4* dxv = reinterpret_cast<uint4*>(dx + head);
    index_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
      Raw raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) raw[u].bits = __ldg(xv + i + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const index_t j = head + (i + u * kThreads) * N;
#pragma unroll
        for (int e = 0; e < N; ++e) raw[u].e[e] = store<T>(als_target_grad<A>(load(raw[u].e[e]), l, g, j + e == t));
        dxv[i + u * kThreads] = raw[u].bits;
      }
    }
    for (; i < nvec; i += kThreads) {
      Raw raw;
      raw.bits = __ldg(xv + i);
      const index_t j = head + i * N;
#pragma unroll
      for (int e = 0; e < N; ++e) raw.e[e] = store<T>(als_target_grad<A>(load(raw.e[e]), l, g, j + e == t));
      dxv[i] = raw.bits;
    }
    for (index_t j = head + nvec * N + threadIdx.x; j < n; j += kThreads) {
      dx[j] = store<T>(als_target_grad<A>(load(x[j]), l, g, j == t));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) full_forward_kernel(const T* logits, const T* offset, T* out,
                                                                acc_t<T>* lse, index_t m, index_t k) {
  using A = acc_t<T>;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    T* y = out + r * k;
    const A l = block_part(x, k).lse(), off = load(offset[r]);
    if (threadIdx.x == 0) lse[r] = l;
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) y[j] = store<T>(als_full_value<A>(load(x[j]), l, off));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) full_backward_kernel(const T* logits, const acc_t<T>* lse,
                                                                 const T* out_grad, T* logits_grad, T* offset_grad,
                                                                 index_t m, index_t k) {
  using A = acc_t<T>;
  for (index_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* x = logits + r * k;
    const T* g = out_grad + r * k;
    T* dx = logits_grad + r * k;
    Sum partial = 0;
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) partial += load(g[j]);
    const A s = static_cast<A>(block_all_reduce(partial, SumOp()));
    const A l = lse[r];
    for (index_t j = threadIdx.x; j < k; j += blockDim.x) dx[j] = store<T>(als_full_grad<A>(load(x[j]), l, load(g[j]), s));
    if (threadIdx.x == 0) offset_grad[r] = store<T>(s);
  }
}

inline unsigned row_blocks(index_t m) { return (unsigned)std::max<index_t>(1, std::min<index_t>(m, 65535LL * 16)); }

inline unsigned item_blocks(index_t items) { return (unsigned)std::max<index_t>(1, std::min<index_t>(items, INT_MAX)); }

// Blocks of `kernel` resident on the current device at once (SMs x blocks per SM), cached per device.
template <typename Kernel>
index_t resident_blocks(Kernel kernel) {
  static std::atomic<int> cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  int blocks = cache[dev].load(std::memory_order_relaxed);
  if (blocks == 0) {
    int sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    blocks = std::max(1, sms * per_sm);
    cache[dev].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

}  // namespace

// Rows >= the resident blocks (or short): one block per row. Fewer, long rows: chunks of >= kMinChunk
// elements so that about one resident wave of blocks reads at once, then the merge kernel.
template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k,
                        cudaStream_t stream) {
  using A = acc_t<T>;
  if (m == 0) return;
  const auto kernel = target_forward_kernel<T>;
  const index_t resident = resident_blocks(kernel);
  const index_t split = std::min({(resident + m - 1) / m, k / kMinChunk, kMaxChunks});
  const index_t chunk = split > 1 ? ((k + split - 1) / split + 255) / 256 * 256 : k;  // whole 1 KiB+ pieces
  const index_t chunks = split > 1 ? (k + chunk - 1) / chunk : 1;
  if (chunks == 1) {
    kernel<<<item_blocks(m), kThreads, 0, stream>>>(logits, target, out, lse, nullptr, m, k, k, 1);
    check_launch("adaptive_log_softmax_target");
    return;
  }
  DeviceScratch<Part<A>> parts(m * chunks, stream);
  kernel<<<item_blocks(m * chunks), kThreads, 0, stream>>>(logits, target, out, lse, parts.ptr, m, k, chunk, chunks);
  check_launch("adaptive_log_softmax_target");
  target_merge_kernel<T><<<(unsigned)((m + 127) / 128), 128, 0, stream>>>(logits, target, parts.ptr, out, lse, m, k,
                                                                          chunks);
  check_launch("adaptive_log_softmax_target_merge");
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k, cudaStream_t stream) {
  if (m == 0 || k == 0) return;
  const index_t tile = (index_t)kThreads * kUnroll * Vec<T>::N * 2;  // two unrolled steps per thread
  const index_t tiles = (k + tile - 1) / tile;
  const bool vec = (reinterpret_cast<uintptr_t>(logits) - reinterpret_cast<uintptr_t>(logits_grad)) % 16 == 0;
  target_backward_kernel<T><<<item_blocks(m * tiles), kThreads, 0, stream>>>(logits, target, lse, out_grad,
                                                                             logits_grad, m, k, tile, tiles, vec);
  check_launch("adaptive_log_softmax_target_grad");
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k,
                      cudaStream_t stream) {
  if (m == 0) return;
  full_forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, offset, out, lse, m, k);
  check_launch("adaptive_log_softmax_full");
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k, cudaStream_t stream) {
  if (m == 0) return;
  full_backward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(logits, lse, out_grad, logits_grad, offset_grad, m,
                                                                  k);
  check_launch("adaptive_log_softmax_full_grad");
}

#define PE_INSTANTIATE(T)                                                                                          \
  template void als_target_forward<T>(const T*, const int64_t*, T*, acc_t<T>*, index_t, index_t, cudaStream_t);  \
  template void als_target_backward<T>(const T*, const int64_t*, const acc_t<T>*, const T*, T*, index_t, index_t, \
                                       cudaStream_t);                                                             \
  template void als_full_forward<T>(const T*, const T*, T*, acc_t<T>*, index_t, index_t, cudaStream_t);          \
  template void als_full_backward<T>(const T*, const acc_t<T>*, const T*, T*, T*, index_t, index_t, cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
