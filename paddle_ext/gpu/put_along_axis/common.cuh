// CUDA put_along_axis (shared by the files of this folder). Most passes walk the update rows (o, j) of `inner` positions: a group of G lanes
// per row (G a power of two <= 32, up to 256 when few rows would not fill the device; no division per
// element), each lane loading packs of 4 indices and 4 values (16-byte aligned vector loads) where
// inner % 4 == 0 and the pointers allow, else 1.
//   add / mean      atomicAdd per element (float32 accumulation for the half types, int64 for an integer
//                   mean), one float4 atomicAdd for a pack of 4 equal indices on sm_90; mean counts in
//                   the same pass, then a divide pass;
//   mul, amin, amax a compare-and-swap loop around the shared ReduceOp<R>::combine (NaN-aware), lanes
//                   on consecutive elements (coalesced atomics), 4 elements per lane in flight;
//   assign          deterministic, "the largest position wins" as on the CPU: a scan pass takes each
//                   update row's largest j per target row (o, k) with atomicMax into a small row table
//                   and raises a flag when a row's indices differ (the row pattern [E, 1] -> [E, C]
//                   broken); without the flag one pass per target row copies its winner's values row;
//                   with it (read on the device, no host sync) the per-slot passes run instead: one
//                   64-bit atomicMax per position of (position, value bits) per slot, then one pass
//                   over the slots writes the winners' values (8-byte types: the key holds the position
//                   alone, and the pass reads each winner's value at it);
//   include_self=False: a first pass sets every written slot to the reduction's identity;
//   deterministic add / mean: a stable radix sort of (slot, position), then one thread per slot folds
//                   its values in position order (the CPU's order, so the same bits).
// Grads: per-slot statistics with atomics (counts, ties), assign's from the same winner tables as its
// forward (per-slot keys: one pass over the slots gives arr's grads and scatters g to the winners into a
// zeroed values_grad), except mul's, which sort the positions by slot and take exclusive prefix x suffix products.
// Out-of-range indices are skipped by every pass (nothing outside arr is written, no host sync).
// The per-element math (combine, identities, mean rounding, the grad formulas) is in put_along_axis.h.
//
// Files: common.cuh (atomics, row groups and packs), winners.cuh (assign's winner tables), sort.cuh (the
// positions sorted by slot), forward.cu, sorted.cu (deterministic add / mean), backward.cu.
#pragma once

#include <cstring>
#include <unordered_map>

#include <cub/device/device_radix_sort.cuh>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/put_along_axis.h"

namespace paddle_ext::gpu {
namespace {

constexpr int kThreads = 256;

template <typename A, typename Bits>
__device__ inline A from_bits(Bits b) {
  A a;
  memcpy(&a, &b, sizeof(A));
  return a;
}
template <typename Bits, typename A>
__device__ inline Bits to_bits(A a) {
  Bits b;
  memcpy(&b, &a, sizeof(A));
  return b;
}

// *addr = f(*addr), atomically, for 4- and 8-byte types; stops early when f changes nothing.
template <typename A, typename F>
__device__ inline void atomic_update(A* addr, F f) {
  static_assert(sizeof(A) == 4 || sizeof(A) == 8, "atomic_update needs a 4- or 8-byte type");
  using Bits = typename std::conditional<sizeof(A) == 4, unsigned int, unsigned long long>::type;
  Bits* p = reinterpret_cast<Bits*>(addr);
  Bits old = *p, assumed;
  do {
    assumed = old;
    const Bits next = to_bits<Bits>(f(from_bits<A>(assumed)));
    if (next == assumed) return;
    old = atomicCAS(p, assumed, next);
  } while (old != assumed);
}

__device__ inline void atomic_add(float* a, float v) { atomicAdd(a, v); }
__device__ inline void atomic_add(double* a, double v) { atomicAdd(a, v); }
__device__ inline void atomic_add(int32_t* a, int32_t v) { atomicAdd(reinterpret_cast<int*>(a), (int)v); }
__device__ inline void atomic_add(int64_t* a, int64_t v) {  // two's complement: unsigned add is exact
  atomicAdd(reinterpret_cast<unsigned long long*>(a), (unsigned long long)v);
}

// Position p of indices/values -> its slot in arr, or -1 when the index is out of range.
template <typename Idx>
__device__ inline index_t slot_of(const Idx* idx, index_t p, index_t n, index_t m, index_t inner) {
  const index_t k = static_cast<index_t>(idx[p]);
  if (!index_in_range(k, n)) return -1;
  const index_t i = p % inner, o = p / (m * inner);
  return (o * n + wrap_index(k, n)) * inner + i;
}

inline void check_copy(cudaError_t err) {
  if (err != cudaSuccess) throw std::runtime_error(std::string("put_along_axis_grad: ") + cudaGetErrorString(err));
}

#define PE_GRID_LOOP(var, count) \
  for (index_t var = blockIdx.x * (index_t)blockDim.x + threadIdx.x; var < (count); var += (index_t)gridDim.x * blockDim.x)

// ------------------------------------------------------------------------------------ row passes
// Rows of `inner` positions: update rows r = o * m + j (indices, values) or target rows R = o * n + k
// (arr); lane `lane` of the row's group of 2^logG lanes takes the packs e = lane * VW, + G * VW, ...
struct Rows {
  index_t outer, n, m, inner;
};

struct Group {
  int lane;
  index_t first, stride;
  __device__ explicit Group(int logG) {
    const index_t t = blockIdx.x * (index_t)blockDim.x + threadIdx.x;
    lane = (int)(t & ((index_t(1) << logG) - 1));
    first = t >> logG;
    stride = ((index_t)gridDim.x * blockDim.x) >> logG;
  }
};

// f(o, p0, e) for each of this thread's packs of the update rows: row r (outer index o, first position p0 = r *
// inner) for r = the group's first, + its stride, ...; in it the packs e of the lane (see Rows).
template <int VW, typename F>
__device__ __forceinline__ void for_each_update_pack(const Rows& sh, int logG, F&& f) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) f(o, p0, e);
  }
}

template <typename V, int N>
struct alignas(sizeof(V) * N) Pack {
  V v[N];
};
template <int N, typename V>
__device__ inline Pack<V, N> load_pack(const V* p) {
  return *reinterpret_cast<const Pack<V, N>*>(p);
}
template <int N, typename V>
__device__ inline void store_pack(V* p, const Pack<V, N>& x) {
  *reinterpret_cast<Pack<V, N>*>(p) = x;
}
template <typename Idx, int N>
__device__ inline bool uniform(const Pack<Idx, N>& ix) {
  bool same = true;
#pragma unroll
  for (int u = 1; u < N; ++u) same &= ix.v[u] == ix.v[0];
  return same;
}

inline int sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        n <= 0) {
      cudaGetLastError();
      n = 132;
    }
    return n;
  }();
  return sms;
}
// Host: the pack width (4 where inner % 4 == 0 and every pointer is aligned to 4 elements) and the group size.
struct RowPlan {
  bool vec;
  int logG;
  unsigned grid;
};
inline bool aligned4(const void* p, size_t elem) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % (4 * elem) == 0; }
inline RowPlan row_plan(index_t rows, index_t inner, bool pointers_aligned) {
  RowPlan plan;
  plan.vec = pointers_aligned && inner % 4 == 0;
  const index_t packs = plan.vec ? inner / 4 : inner;
  plan.logG = 0;
  while (plan.logG < 5 && (index_t(1) << plan.logG) < packs) ++plan.logG;
  // Few long rows: more lanes per row (up to a block) until the grid fills the device once, so each
  // lane has a few packs in flight rather than a serial chain of them.
  const index_t fill = (index_t)sm_count() * 2048;
  while (plan.logG < 8 && (index_t(1) << plan.logG) < packs && (std::max<index_t>(rows, 1) << plan.logG) < fill) ++plan.logG;
  plan.grid = grid_size(std::max<index_t>(rows, 1) << plan.logG, kThreads);
  return plan;
}
// fn(std::integral_constant<int, VW>) for the plan's pack width.
template <typename Fn>
inline void with_pack(const RowPlan& plan, Fn&& fn) {
  if (plan.vec) fn(std::integral_constant<int, 4>{});
  else fn(std::integral_constant<int, 1>{});
}

// One full wave of resident blocks for `kernel` (grid-stride loops do the rest): the size for kernels
// that run or not depending on a flag the device set (no host sync), whose blocks then exit at once,
// and for the scan, whose groups poll that flag between rows.
template <typename Kernel>
unsigned resident_grid(Kernel kernel) {
  static thread_local std::unordered_map<const void*, unsigned> cache;  // per kernel: no query per launch
  const void* key = reinterpret_cast<const void*>(kernel);
  const auto hit = cache.find(key);
  if (hit != cache.end()) return hit->second;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0) != cudaSuccess || blocks <= 0) {
    cudaGetLastError();  // not a launch error: fall back to a safe size
    blocks = 4;
  }
  return cache[key] = (unsigned)(sm_count() * blocks);
}
__device__ inline bool skip(const int* flag, bool when_set) { return flag && ((*flag != 0) != when_set); }

// Scratch carved into 256-byte aligned parts.
inline size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

// M(T, A) for each value type and accumulator the scatter launchers take (reduce_acc_t; an int32 mean sums
// in int64).
#define PE_PUT_FOR_ACC_TYPES(M)                                                                              \
  M(float, float) M(double, double) M(float16_t, float) M(bfloat16_t, float) M(int32_t, int32_t) M(int32_t, int64_t) \
  M(int64_t, int64_t)

}  // namespace
}  // namespace paddle_ext::gpu
