// CUDA put_along_axis. Most passes walk the update rows (o, j) of `inner` positions: a group of G lanes
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
#include <cstring>
#include <unordered_map>

#include <cub/device/device_radix_sort.cuh>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/put_along_axis.h"

namespace paddle_ext {
namespace gpu {
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

// One contribution pack into acc (count: mean's per-slot counts, or null).
template <Reduce R, typename A, typename Idx, typename T, int VW>
__device__ inline void combine_pack(A* acc, int32_t* count, const Pack<Idx, VW>& ix, const Pack<T, VW>& vs,
                                    index_t srow, index_t n, index_t inner, index_t e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (VW == 4 && (R == Reduce::Add || R == Reduce::Mean) && std::is_same<A, float>::value) {
    if (uniform(ix) && index_in_range(ix.v[0], n)) {  // 4 neighbouring slots: one vector atomic
      const index_t s = (srow + wrap_index(ix.v[0], n)) * inner + e;
      atomicAdd(reinterpret_cast<float4*>(acc + s), make_float4(static_cast<float>(load(vs.v[0])), static_cast<float>(load(vs.v[1])),
                                                                static_cast<float>(load(vs.v[2])), static_cast<float>(load(vs.v[3]))));
      if (count) {  // two counts per 64-bit add (a count < 2^31 never carries into its neighbour)
        atomicAdd(reinterpret_cast<unsigned long long*>(count + s), 0x100000001ull);
        atomicAdd(reinterpret_cast<unsigned long long*>(count + s + 2), 0x100000001ull);
      }
      return;
    }
  }
#endif
  index_t slot[VW];
#pragma unroll
  for (int u = 0; u < VW; ++u) {
    const index_t k = static_cast<index_t>(ix.v[u]);
    slot[u] = index_in_range(k, n) ? (srow + wrap_index(k, n)) * inner + e + u : -1;
  }
  static_assert(R == Reduce::Add || R == Reduce::Mean, "mul/amin/amax combine in cas_rows_kernel");
  {
#pragma unroll
    for (int u = 0; u < VW; ++u) {
      if (slot[u] < 0) continue;
      atomic_add(acc + slot[u], static_cast<A>(load(vs.v[u])));
      if (count) atomicAdd(count + slot[u], 1);
    }
  }
}

template <Reduce R, typename T, typename A, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) combine_rows_kernel(A* acc, const T* values, const Idx* idx, int32_t* count, Rows sh, int logG) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step)
      combine_pack<R, A>(acc, count, load_pack<VW>(idx + p0 + e), load_pack<VW>(values + p0 + e), o * sh.n, sh.n,
                         sh.inner, e);
  }
}

// mul / amin / amax: compare-and-swap. Lane `lane` takes the elements lane + G * u (u < kCasSpan) of a
// chunk, so each of the warp's atomics covers consecutive words (packs of 4 neighbours per lane spread
// a warp's CAS over 4x the cache lines); the chunk's loads and first attempts are issued back to back
// (independent round trips in flight together), an attempt that lost a race retries alone. An
// attempt that would change nothing (amin/amax: the slot already wins) is not made.
constexpr int kCasSpan = 4;
template <Reduce R, typename T, typename A, typename Idx>
__global__ void __launch_bounds__(kThreads) cas_rows_kernel(A* acc, const T* values, const Idx* idx, Rows sh, int logG) {
  using Bits = typename std::conditional<sizeof(A) == 4, unsigned int, unsigned long long>::type;
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, G = index_t(1) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner, srow = o * sh.n;
    for (index_t e0 = gr.lane; e0 < sh.inner; e0 += G * kCasSpan) {
      index_t slot[kCasSpan];
      A v[kCasSpan];
#pragma unroll
      for (int u = 0; u < kCasSpan; ++u) {
        const index_t e = e0 + G * u;
        slot[u] = -1;
        v[u] = A(0);
        if (e < sh.inner) {
          const index_t k = static_cast<index_t>(idx[p0 + e]);
          v[u] = static_cast<A>(load(values[p0 + e]));
          if (index_in_range(k, sh.n)) slot[u] = (srow + wrap_index(k, sh.n)) * sh.inner + e;
        }
      }
      Bits old[kCasSpan];
      bool done[kCasSpan];
#pragma unroll
      for (int u = 0; u < kCasSpan; ++u) old[u] = slot[u] >= 0 ? *reinterpret_cast<const Bits*>(acc + slot[u]) : Bits(0);
#pragma unroll
      for (int u = 0; u < kCasSpan; ++u) {
        done[u] = true;
        if (slot[u] < 0) continue;
        const Bits next = to_bits<Bits>(ReduceOp<R>::combine(from_bits<A>(old[u]), v[u]));
        if (next != old[u]) done[u] = atomicCAS(reinterpret_cast<Bits*>(acc + slot[u]), old[u], next) == old[u];
      }
#pragma unroll
      for (int u = 0; u < kCasSpan; ++u) {
        if (done[u]) continue;
        const A x = v[u];
        atomic_update(acc + slot[u], [x](A y) { return ReduceOp<R>::combine(y, x); });
      }
    }
  }
}

// include_self=False: written slots start from the identity (all writers store the same value).
template <Reduce R, typename A, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) reset_rows_kernel(A* acc, const Idx* idx, Rows sh, int logG) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) {
      const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
#pragma unroll
      for (int u = 0; u < VW; ++u) {
        const index_t k = static_cast<index_t>(ix.v[u]);
        if (index_in_range(k, sh.n)) acc[(o * sh.n + wrap_index(k, sh.n)) * sh.inner + e + u] = reduce_identity<R, A>();
      }
    }
  }
}

// -------------------------------------------------------------------------- assign's winner tables
// Scratch (put_along_axis_winner_scratch bytes, uninitialised; the launchers prepare it):
//   flag      int32: set when some update row's indices are not all equal;
//   row_win   int64 [outer * n]: the largest j of the uniform update rows aimed at target row (o, k), -1 if none;
//   slot_win  uint64 [outer * n * inner]: the per-slot winners, only when the flag is set: key
//             ((j + 1) << shift) | low, 0 = none; one atomicMax per position keeps the largest j (the slot
//             fixes o and i, so the largest position). shift = 32 where j + 1 fits 32 bits, and then the
//             forward of a <= 4-byte type carries the value's bits in `low` (the winner's value comes
//             with its key: no second random read); else shift = 0, low = 0.
inline size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

struct WinnerScratch {
  int* flag;
  int64_t* row_win;
  unsigned long long* slot_win;
  int shift;
};

inline WinnerScratch carve_winners(void* base, index_t outer, index_t n, index_t m) {
  char* p = static_cast<char*>(base);
  WinnerScratch w;
  w.flag = reinterpret_cast<int*>(p);
  w.row_win = reinterpret_cast<int64_t*>(p + 256);
  w.slot_win = reinterpret_cast<unsigned long long*>(p + 256 + align_up(sizeof(int64_t) * (size_t)(outer * n)));
  w.shift = m < (index_t)UINT32_MAX ? 32 : 0;
  return w;
}

__global__ void winner_init_kernel(int* flag, int64_t* row_win, index_t targets) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 0;
  PE_GRID_LOOP(t, targets) { row_win[t] = -1; }
}

template <typename T>
__global__ void fill_kernel(T* dst, T value, index_t count, const int* flag) {
  if (skip(flag, true)) return;
  PE_GRID_LOOP(i, count) { dst[i] = value; }
}

// Each update row: its indices all equal (else the flag), and if so its j into row_win at its target.
// Once the flag is up the rest of the scan is moot (the per-slot passes rerun): groups poll it.
template <typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) winner_scan_rows_kernel(const Idx* idx, int64_t* row_win, int* flag, Rows sh, int logG) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  unsigned polls = 0;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    if ((polls++ & 15u) == 0 && *reinterpret_cast<volatile int*>(flag)) return;
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, j = r - o * sh.m, p0 = r * sh.inner;
    const Idx first = idx[p0];
    bool mixed = false;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) {
      const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
#pragma unroll
      for (int u = 0; u < VW; ++u) mixed |= ix.v[u] != first;
    }
    if (mixed) *reinterpret_cast<volatile int*>(flag) = 1;
    else if (gr.lane == 0 && index_in_range(static_cast<index_t>(first), sh.n))
      atomicMax(reinterpret_cast<long long*>(row_win + o * sh.n + wrap_index(static_cast<index_t>(first), sh.n)), (long long)j);
  }
}

// Flag up (some update row's indices differ): the per-slot winner keys (see WinnerScratch); `values`
// (forward, shift 32, <= 4-byte T) puts each position's value bits under its key, else null.
template <typename T, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) slot_winner_rows_kernel(const Idx* idx, const T* values, unsigned long long* slot_win,
                                                                    const int* flag, Rows sh, int shift, int logG) {
  if (skip(flag, true)) return;
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, j = r - o * sh.m, p0 = r * sh.inner;
    const unsigned long long key = (unsigned long long)(j + 1) << shift;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) {
      const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
      Pack<T, VW> vs;
      if constexpr (sizeof(T) <= 4) {
        if (values) vs = load_pack<VW>(values + p0 + e);
      }
#pragma unroll
      for (int u = 0; u < VW; ++u) {
        const index_t k = static_cast<index_t>(ix.v[u]);
        if (!index_in_range(k, sh.n)) continue;
        unsigned long long low = 0;
        if constexpr (sizeof(T) <= 4) {
          if (values) {
            unsigned int b = 0;
            memcpy(&b, &vs.v[u], sizeof(T));
            low = b;
          }
        }
        atomicMax(slot_win + (o * sh.n + wrap_index(k, sh.n)) * sh.inner + e + u, key | low);
      }
    }
  }
}

// assign's last pass, over the target rows (o, k) (one launch for either state of the flag):
// flag down: each target row with a winner takes that update row's values (packs of VW);
// flag up: each slot's key (coalesced); a written slot takes its winner's value: the key's low bits
// where they carry it (Keyed), else values at the winner's position (o, j, i), one random read.
template <typename T, typename A, int VW, bool Keyed>
__global__ void __launch_bounds__(kThreads) assign_write_rows_kernel(A* acc, const T* values, const int64_t* row_win,
                                                                     const unsigned long long* slot_win, const int* flag,
                                                                     Rows sh, int shift, int logG) {
  const bool per_slot = *flag != 0;
  const Group gr(logG);
  const index_t targets = sh.outer * sh.n;
  for (index_t t = gr.first; t < targets; t += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : t / sh.n;
    A* dst = acc + t * sh.inner;
    if (!per_slot) {
      const int64_t w = row_win[t];
      if (w < 0) continue;
      const T* src = values + (o * sh.m + w) * sh.inner;
      for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += index_t(VW) << logG) {
        const Pack<T, VW> v = load_pack<VW>(src + e);
        Pack<A, VW> a;
#pragma unroll
        for (int u = 0; u < VW; ++u) a.v[u] = static_cast<A>(load(v.v[u]));
        store_pack<VW>(dst + e, a);
      }
    } else {
      for (index_t e = gr.lane; e < sh.inner; e += index_t(1) << logG) {
        const unsigned long long key = slot_win[t * sh.inner + e];
        if (key == 0) continue;
        if constexpr (Keyed)
          dst[e] = static_cast<A>(load(from_bits<T>(static_cast<unsigned int>(key))));
        else
          dst[e] = static_cast<A>(load(values[(o * sh.m + (index_t)(key >> shift) - 1) * sh.inner + e]));
      }
    }
  }
}

template <typename A>
__global__ void mean_divide_kernel(A* acc, const int32_t* count, int32_t self, index_t slots) {
  PE_GRID_LOOP(s, slots) {
    if (count[s] > 0) acc[s] = mean_divide<A>(acc[s], count[s] + self);
  }
}

// Assign's winner tables for both passes (forward and grads): init, the row scan, and with the flag up
// the per-slot winners (those passes exit at once while the flag is down).
// `values`: the forward's, where the keys can carry them (w.shift == 32, sizeof(T) <= 4), else null.
template <typename T, typename Idx>
WinnerScratch pick_winners(const Idx* idx, const T* values, void* scratch, const Rows& sh, cudaStream_t stream) {
  const index_t targets = sh.outer * sh.n, slots = targets * sh.inner;
  const WinnerScratch w = carve_winners(scratch, sh.outer, sh.n, sh.m);
  winner_init_kernel<<<grid_size(targets, kThreads), kThreads, 0, stream>>>(w.flag, w.row_win, targets);
  const RowPlan plan = row_plan(sh.outer * sh.m, sh.inner, aligned4(idx, sizeof(Idx)));
  if (sh.outer * sh.m * sh.inner > 0)  // (inner == 0: no row has a first index to read)
    with_pack(plan, [&](auto vw) {
      const auto kernel = winner_scan_rows_kernel<Idx, decltype(vw)::value>;
      kernel<<<std::min(plan.grid, resident_grid(kernel)), kThreads, 0, stream>>>(idx, w.row_win, w.flag, sh,
                                                                                             plan.logG);
    });
  using U64 = unsigned long long;
  fill_kernel<U64><<<resident_grid(fill_kernel<U64>), kThreads, 0, stream>>>(w.slot_win, U64(0), slots, w.flag);
  const RowPlan key_plan = row_plan(sh.outer * sh.m, sh.inner, aligned4(idx, sizeof(Idx)) && aligned4(values, sizeof(T)));
  with_pack(key_plan, [&](auto vw) {
    const auto kernel = slot_winner_rows_kernel<T, Idx, decltype(vw)::value>;
    kernel<<<resident_grid(kernel), kThreads, 0, stream>>>(idx, values, w.slot_win, w.flag, sh, w.shift, key_plan.logG);
  });
  return w;
}

template <Reduce R, typename T, typename A, typename Idx>
void forward_impl(A* acc, const T* values, const Idx* idx, int32_t* count, void* winner, index_t outer,
                  index_t n, index_t m, index_t inner, bool include_self, cudaStream_t stream) {
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (positions == 0 || n == 0) return;
  const Rows sh{outer, n, m, inner};
  if constexpr (R == Reduce::Assign) {
    const bool keyed_values = sizeof(T) <= 4 && m < (index_t)UINT32_MAX;  // carve_winners' shift == 32
    const WinnerScratch w = pick_winners(idx, keyed_values ? values : nullptr, winner, sh, stream);
    const RowPlan plan = row_plan(outer * n, inner, aligned4(values, sizeof(T)) && aligned4(acc, sizeof(A)));
    auto write = [&](auto keyed) {
      with_pack(plan, [&](auto vw) {
        assign_write_rows_kernel<T, A, decltype(vw)::value, decltype(keyed)::value><<<plan.grid, kThreads, 0, stream>>>(
            acc, values, w.row_win, w.slot_win, w.flag, sh, w.shift, plan.logG);
      });
    };
    if constexpr (sizeof(T) <= 4) {
      if (keyed_values) write(std::true_type{});
      else write(std::false_type{});
    } else {
      write(std::false_type{});
    }
    check_launch("put_along_axis assign");
  } else {
    int32_t* mean_count = R == Reduce::Mean ? count : nullptr;
    const RowPlan plan = row_plan(outer * m, inner, aligned4(idx, sizeof(Idx)) && aligned4(values, sizeof(T)) &&
                                                        aligned4(acc, sizeof(A)) && aligned4(mean_count, sizeof(int32_t)));
    with_pack(plan, [&](auto vw) {
      constexpr int VW = decltype(vw)::value;
      if (!include_self) reset_rows_kernel<R, A, Idx, VW><<<plan.grid, kThreads, 0, stream>>>(acc, idx, sh, plan.logG);
      if constexpr (R == Reduce::Add || R == Reduce::Mean)
        combine_rows_kernel<R, T, A, Idx, VW><<<plan.grid, kThreads, 0, stream>>>(acc, values, idx, mean_count, sh, plan.logG);
    });
    if constexpr (R != Reduce::Add && R != Reduce::Mean) {
      // one element per lane and chunk slot: the plan without packs (inner elements per row)
      const RowPlan cas_plan = row_plan(outer * m, (inner + kCasSpan - 1) / kCasSpan, false);
      cas_rows_kernel<R, T, A, Idx><<<cas_plan.grid, kThreads, 0, stream>>>(acc, values, idx, sh, cas_plan.logG);
    }
    if (mean_count)
      mean_divide_kernel<A><<<grid_size(slots, kThreads), kThreads, 0, stream>>>(acc, mean_count, include_self ? 1 : 0,
                                                                                  slots);
    check_launch("put_along_axis");
  }
}

// ------------------------------------------------------------------------- deterministic add / mean
// Keys (slot, or `slots` for an out-of-range index) and positions sort as K: uint32 where both fit
// (half the bytes through the radix sort), else int64.
template <typename Idx, typename K>
__global__ void sort_keys_kernel(const Idx* idx, K* keys, K* order, index_t positions, index_t n, index_t m,
                                 index_t inner, index_t slots) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    keys[p] = static_cast<K>(s >= 0 ? s : slots);  // out of range: sorted past every slot and skipped
    order[p] = static_cast<K>(p);
  }
}

// Thread q starts a segment when its key differs from the previous one and folds the segment.
template <Reduce R, typename T, typename A, typename K>
__global__ void fold_segments_kernel(A* acc, const T* values, const K* keys, const K* order, index_t positions,
                                     index_t slots, bool include_self) {
  PE_GRID_LOOP(q, positions) {
    const index_t key = static_cast<index_t>(keys[q]);
    if (key >= slots || (q > 0 && keys[q - 1] == keys[q])) continue;
    A s = include_self ? acc[key] : static_cast<A>(load(values[order[q]]));
    int32_t count = include_self ? 1 : 0;
    for (index_t r = q + (include_self ? 0 : 1); r < positions && keys[r] == keys[q]; ++r) {
      s = ReduceOp<Reduce::Add>::combine(s, static_cast<A>(load(values[order[r]])));
      ++count;
    }
    if (!include_self) ++count;
    acc[key] = R == Reduce::Mean ? mean_divide<A>(s, count) : s;
  }
}

// keys/order in and out, each positions x K; `prefix`: 8 bytes per position (mul's grads); cub's temp.
template <typename K>
struct SortedWorkspace {
  K *keys_in, *keys_out, *order_in, *order_out;
  void* prefix;
  void* temp;
  size_t temp_bytes;
};

inline int key_bits(index_t slots) {
  int bits = 1;
  while (bits < 63 && (index_t(1) << bits) <= slots) ++bits;
  return bits;
}

template <typename K>
size_t cub_sort_bytes(index_t positions, index_t slots) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const K*)nullptr, (K*)nullptr, (const K*)nullptr, (K*)nullptr,
                                  (int)positions, 0, key_bits(slots));
  return bytes;
}

template <typename K>
size_t sorted_bytes(index_t positions, index_t slots) {
  return 4 * align_up(sizeof(K) * (size_t)positions) + align_up(8 * (size_t)positions) +
         cub_sort_bytes<K>(positions, slots);
}

template <typename K>
SortedWorkspace<K> carve(void* base, index_t positions, index_t slots) {
  char* p = static_cast<char*>(base);
  const size_t arr = align_up(sizeof(K) * (size_t)positions);
  SortedWorkspace<K> w;
  w.keys_in = reinterpret_cast<K*>(p);
  w.keys_out = reinterpret_cast<K*>(p + arr);
  w.order_in = reinterpret_cast<K*>(p + 2 * arr);
  w.order_out = reinterpret_cast<K*>(p + 3 * arr);
  w.prefix = p + 4 * arr;
  w.temp = p + 4 * arr + align_up(8 * (size_t)positions);
  w.temp_bytes = cub_sort_bytes<K>(positions, slots);
  return w;
}

inline bool narrow_keys(index_t positions, index_t slots) {
  return positions <= (index_t)INT32_MAX && slots < (index_t)UINT32_MAX;
}

// fn(SortedWorkspace<K>) with the positions sorted by slot (stable: each slot's in position order).
template <typename Idx, typename Fn>
void sort_by_slot(const Idx* idx, void* workspace, size_t workspace_bytes, index_t outer, index_t n, index_t m,
                  index_t inner, cudaStream_t stream, const char* what, Fn&& fn) {
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (positions > (index_t)INT32_MAX) throw std::runtime_error(std::string(what) + " needs < 2^31 indices");
  if (workspace_bytes < put_along_axis_sorted_workspace(positions, slots))
    throw std::runtime_error(std::string(what) + ": workspace too small");
  auto run = [&](auto ktag) {
    using K = decltype(ktag);
    SortedWorkspace<K> w = carve<K>(workspace, positions, slots);
    sort_keys_kernel<Idx, K><<<grid_size(positions, kThreads), kThreads, 0, stream>>>(idx, w.keys_in, w.order_in,
                                                                                      positions, n, m, inner, slots);
    size_t temp_bytes = w.temp_bytes;
    cub::DeviceRadixSort::SortPairs(w.temp, temp_bytes, w.keys_in, w.keys_out, w.order_in, w.order_out,
                                    (int)positions, 0, key_bits(slots), stream);
    fn(w);
  };
  if (narrow_keys(positions, slots)) run(uint32_t{});
  else run(int64_t{});
}

template <Reduce R, typename T, typename A, typename Idx>
void sorted_impl(A* acc, const T* values, const Idx* idx, void* workspace, size_t workspace_bytes,
                 index_t outer, index_t n, index_t m, index_t inner, bool include_self, cudaStream_t stream) {
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (positions == 0 || n == 0) return;
  sort_by_slot(idx, workspace, workspace_bytes, outer, n, m, inner, stream, "put_along_axis: deterministic path",
               [&](const auto& w) {
                 fold_segments_kernel<R, T, A><<<grid_size(positions, kThreads), kThreads, 0, stream>>>(
                     acc, values, w.keys_out, w.order_out, positions, slots, include_self);
               });
  check_launch("put_along_axis deterministic");
}

// ---------------------------------------------------------------------------------------- backward
// assign's values' grads, over the update rows (one launch for either state of the flag): flag down,
// an update row's grads are g's target row where it won, zeros elsewhere (its first index is its only
// one); flag up, zeros (assign_grads_rows_kernel then writes g to each slot's winner).
template <typename T, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) assign_values_grad_rows_kernel(const Idx* idx, const T* g, const int64_t* row_win,
                                                                           const int* flag, T* values_grad, Rows sh, int logG) {
  const bool per_slot = *flag != 0;
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  Pack<T, VW> zero;
#pragma unroll
  for (int u = 0; u < VW; ++u) zero.v[u] = store<T>(0.0f);
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, j = r - o * sh.m, p0 = r * sh.inner;
    bool won = false;
    index_t t = -1;
    if (!per_slot) {
      const index_t k = static_cast<index_t>(idx[p0]);
      t = index_in_range(k, sh.n) ? o * sh.n + wrap_index(k, sh.n) : -1;
      won = t >= 0 && row_win[t] == j;
    }
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step)
      store_pack<VW>(values_grad + p0 + e, won ? load_pack<VW>(g + t * sh.inner + e) : zero);
  }
}

// assign's arr grads, over the target rows (one launch for either state of the flag): flag down, a
// target row that some update row won has a zero grad, the others pass g through (packs of VW); flag
// up, per slot: a written slot's grad is 0 and its winner (o, j, i), from the key, takes g (one random
// write per written slot into the values' grads zeroed before); an unwritten slot passes g through.
template <typename T, int VW>
__global__ void __launch_bounds__(kThreads) assign_grads_rows_kernel(const T* g, const int64_t* row_win,
                                                                     const unsigned long long* slot_win, const int* flag,
                                                                     T* arr_grad, T* values_grad, Rows sh, int shift,
                                                                     int logG) {
  const bool per_slot = *flag != 0;
  const Group gr(logG);
  const index_t targets = sh.outer * sh.n;
  Pack<T, VW> zero;
#pragma unroll
  for (int u = 0; u < VW; ++u) zero.v[u] = store<T>(0.0f);
  for (index_t t = gr.first; t < targets; t += gr.stride) {
    if (!per_slot) {
      if (!arr_grad) break;
      const bool written = row_win[t] >= 0;
      for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += index_t(VW) << logG)
        store_pack<VW>(arr_grad + t * sh.inner + e, written ? zero : load_pack<VW>(g + t * sh.inner + e));
    } else {
      const index_t o = sh.outer == 1 ? 0 : t / sh.n;
      for (index_t e = gr.lane; e < sh.inner; e += index_t(1) << logG) {
        const index_t s = t * sh.inner + e;
        const unsigned long long key = slot_win[s];
        const T gs = g[s];
        if (arr_grad) arr_grad[s] = key != 0 ? store<T>(0.0f) : gs;
        if (values_grad && key != 0) values_grad[(o * sh.m + (index_t)(key >> shift) - 1) * sh.inner + e] = gs;
      }
    }
  }
}

// Per-slot statistics over the contributions (count; aux for Min/Max: contributors matching out).
// Min/Max with `mark` (values_grad): each position's mark, 1 where its value equals its slot's result,
// else 0 (out of range too), so that the values' grad pass reads g and the ties for those alone and
// never the result again.
template <Reduce R, typename T, typename A, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) stats_rows_kernel(const Idx* idx, const T* values, const T* out, int32_t* count, int32_t* aux,
                                  T* mark, Rows sh, int logG) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) {
      const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
      Pack<T, VW> mk;
#pragma unroll
      for (int u = 0; u < VW; ++u) {
        mk.v[u] = store<T>(A(0));
        const index_t k = static_cast<index_t>(ix.v[u]);
        if (!index_in_range(k, sh.n)) continue;
        const index_t s = (o * sh.n + wrap_index(k, sh.n)) * sh.inner + e + u;
        atomicAdd(count + s, 1);
        if constexpr (R == Reduce::Min || R == Reduce::Max) {
          if (same_value(static_cast<A>(load(values[p0 + e + u])), static_cast<A>(load(out[s])))) {
            atomicAdd(aux + s, 1);
            mk.v[u] = store<T>(A(1));
          }
        }
      }
      if constexpr (R == Reduce::Min || R == Reduce::Max) {
        if (mark) store_pack<VW>(mark + p0 + e, mk);
      }
    }
  }
}

// values' grads (add, mean, amin, amax); count/aux may be null where the mode reads none (add).
// add: a pack of 4 equal in-range indices copies 4 neighbouring grads at once.
template <Reduce R, typename T, typename A, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) values_grad_rows_kernel(const Idx* idx, const T* values, const T* out, const T* g, const int32_t* count,
                                        const int32_t* aux, T* values_grad, bool include_self, Rows sh, int logG) {
  const Group gr(logG);
  const index_t rows = sh.outer * sh.m, step = index_t(VW) << logG;
  for (index_t r = gr.first; r < rows; r += gr.stride) {
    const index_t o = sh.outer == 1 ? 0 : r / sh.m, p0 = r * sh.inner;
    for (index_t e = (index_t)gr.lane * VW; e < sh.inner; e += step) {
      const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
      if constexpr (R == Reduce::Add && VW > 1) {
        if (uniform(ix) && index_in_range(static_cast<index_t>(ix.v[0]), sh.n)) {
          const index_t s = (o * sh.n + wrap_index(static_cast<index_t>(ix.v[0]), sh.n)) * sh.inner + e;
          store_pack<VW>(values_grad + p0 + e, load_pack<VW>(g + s));
          continue;
        }
      }
      Pack<T, VW> vg;
      bool mk[VW];  // Min/Max: the stats pass's marks (in values_grad)
      if constexpr (R == Reduce::Min || R == Reduce::Max) {
        const Pack<T, VW> m = load_pack<VW>(values_grad + p0 + e);
#pragma unroll
        for (int u = 0; u < VW; ++u) mk[u] = static_cast<A>(load(m.v[u])) != A(0);
      }
#pragma unroll
      for (int u = 0; u < VW; ++u) {
        const index_t k = static_cast<index_t>(ix.v[u]), p = p0 + e + u;
        if (!index_in_range(k, sh.n)) {
          vg.v[u] = store<T>(A(0));
          continue;
        }
        const index_t s = (o * sh.n + wrap_index(k, sh.n)) * sh.inner + e + u;
        if constexpr (R == Reduce::Add) {
          vg.v[u] = g[s];
        } else if constexpr (R == Reduce::Min || R == Reduce::Max) {
          // only a value equal to its slot's result (marked by the stats pass) has a grad, its share of
          // g (matches: v and out stand in as equal); g and the ties are read for those alone
          vg.v[u] = store<T>(mk[u] ? values_grad_of<R, A>(static_cast<A>(load(g[s])), A(0), A(0), 0, aux[s], A(1),
                                                            include_self)
                                     : A(0));
        } else {
          vg.v[u] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), static_cast<A>(load(values[p])),
                                                  static_cast<A>(load(out[s])), count[s], aux ? aux[s] : 0, A(1),
                                                  include_self));
        }
      }
      store_pack<VW>(values_grad + p0 + e, vg);
    }
  }
}

// Per-slot statistics (Min/Max): aux starts from arr's part (include_self), count from 0.
template <Reduce R, typename T, typename A>
__global__ void stats_init_kernel(const T* arr, const T* out, int32_t* aux, bool include_self, index_t slots) {
  PE_GRID_LOOP(s, slots) {
    aux[s] = (include_self && same_value(static_cast<A>(load(arr[s])), static_cast<A>(load(out[s])))) ? 1 : 0;
  }
}

template <Reduce R, typename T, typename A>
__global__ void arr_grad_kernel(const T* arr, const T* out, const T* g, const int32_t* count, const int32_t* aux,
                                T* arr_grad, bool include_self, index_t slots) {
  PE_GRID_LOOP(s, slots) {
    arr_grad[s] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s])), static_cast<A>(load(arr[s])),
                                             static_cast<A>(load(out[s])), count[s], aux ? aux[s] : 0, A(1),
                                             include_self));
  }
}

// mul: thread q starts a segment of the positions sorted by slot (each slot's in position order) and
// gives every factor the product of the others, prefix x suffix with multiplications only (exact at
// zeros and non-finite values, as the CPU's exact path); `prefix` holds each position's prefix.
// Written slots get arr's grad here, unwritten ones keep the g that copy_grad_kernel put there.
template <typename T, typename A, typename K>
__global__ void mul_grad_segments_kernel(const T* arr, const T* values, const T* g, const K* keys, const K* order, A* prefix, T* arr_grad, T* values_grad,
                                         index_t positions, index_t slots, bool include_self) {
  PE_GRID_LOOP(q, positions) {
    const index_t key = static_cast<index_t>(keys[q]);
    if (key >= slots) {  // out of range
      if (values_grad) values_grad[order[q]] = store<T>(A(0));
      continue;
    }
    if (q > 0 && keys[q - 1] == keys[q]) continue;
    index_t end = q + 1;
    while (end < positions && keys[end] == keys[q]) ++end;
    const A gs = static_cast<A>(load(g[key]));
    if (values_grad) {
      A run = include_self ? static_cast<A>(load(arr[key])) : A(1);
      for (index_t r = q; r < end; ++r) {
        prefix[r] = run;
        run *= static_cast<A>(load(values[order[r]]));
      }
    }
    A run = A(1);
    for (index_t r = end; r-- > q;) {
      const index_t p = static_cast<index_t>(order[r]);
      if (values_grad)
        values_grad[p] = store<T>(values_grad_of<Reduce::Mul, A>(gs, A(0), A(0), 1, 0, prefix[r] * run, include_self));
      run *= static_cast<A>(load(values[p]));
    }
    if (arr_grad)
      arr_grad[key] = store<T>(arr_grad_of<Reduce::Mul, A>(gs, A(0), A(0), int32_t(end - q), 0, run, include_self));
  }
}

template <typename T>
__global__ void copy_grad_kernel(const T* g, T* arr_grad, index_t slots) {
  PE_GRID_LOOP(s, slots) { arr_grad[s] = g[s]; }
}

template <typename T, typename Idx>
void mul_backward(const T* arr, const Idx* idx, const T* values, const T* g, T* arr_grad, T* values_grad,
                  void* workspace, size_t workspace_bytes, index_t outer, index_t n, index_t m, index_t inner,
                  bool include_self, cudaStream_t stream) {
  using A = acc_t<T>;
  static_assert(sizeof(A) <= 8, "prefix products take 8 bytes per position in the workspace");
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (arr_grad && slots > 0) copy_grad_kernel<T><<<grid_size(slots, kThreads), kThreads, 0, stream>>>(g, arr_grad, slots);
  if (positions == 0 || n == 0) {
    // every index out of range (n == 0): no contribution, zero grads
    if (values_grad && positions > 0) check_copy(cudaMemsetAsync(values_grad, 0, sizeof(T) * (size_t)positions, stream));
    return;
  }
  sort_by_slot(idx, workspace, workspace_bytes, outer, n, m, inner, stream, "put_along_axis: mul grads",
               [&](const auto& w) {
                 using K = std::remove_pointer_t<decltype(w.keys_out)>;
                 mul_grad_segments_kernel<T, A, K><<<grid_size(positions, kThreads), kThreads, 0, stream>>>(
                     arr, values, g, w.keys_out, w.order_out, static_cast<A*>(w.prefix), arr_grad, values_grad,
                     positions, slots, include_self);
               });
}

template <Reduce R, typename T, typename Idx>
void backward_impl(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad,
                   T* values_grad, void* winner, int32_t* count, int32_t* aux, void* workspace,
                   size_t workspace_bytes, index_t outer, index_t n, index_t m, index_t inner, bool include_self,
                   cudaStream_t stream) {
  using A = acc_t<T>;
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  const unsigned sgrid = grid_size(slots, kThreads);
  const Rows sh{outer, n, m, inner};
  if constexpr (R == Reduce::Assign) {
    const WinnerScratch w = pick_winners(idx, static_cast<const T*>(nullptr), winner, sh, stream);
    if (values_grad && positions > 0) {
      const RowPlan plan = row_plan(outer * m, inner, aligned4(idx, sizeof(Idx)) && aligned4(g, sizeof(T)) &&
                                                          aligned4(values_grad, sizeof(T)));
      with_pack(plan, [&](auto vw) {
        assign_values_grad_rows_kernel<T, Idx, decltype(vw)::value><<<plan.grid, kThreads, 0, stream>>>(
            idx, g, w.row_win, w.flag, values_grad, sh, plan.logG);
      });
    }
    if (slots > 0 && (arr_grad || (values_grad && positions > 0))) {
      const RowPlan plan = row_plan(outer * n, inner, aligned4(g, sizeof(T)) && aligned4(arr_grad, sizeof(T)));
      with_pack(plan, [&](auto vw) {
        assign_grads_rows_kernel<T, decltype(vw)::value><<<plan.grid, kThreads, 0, stream>>>(
            g, w.row_win, w.slot_win, w.flag, arr_grad, positions > 0 ? values_grad : nullptr, sh, w.shift, plan.logG);
      });
    }
  } else if constexpr (R == Reduce::Mul) {
    mul_backward<T, Idx>(arr, idx, values, g, arr_grad, values_grad, workspace, workspace_bytes, outer, n, m, inner,
                         include_self, stream);
  } else {
    if (slots > 0 && (R == Reduce::Min || R == Reduce::Max))
      stats_init_kernel<R, T, A><<<sgrid, kThreads, 0, stream>>>(arr, out, aux, include_self, slots);
    // add with include_self needs no statistics: both grads are g (gathered for values)
    const bool needs_stats = !(R == Reduce::Add && include_self);
    const RowPlan plan = row_plan(outer * m, inner, aligned4(idx, sizeof(Idx)) && aligned4(g, sizeof(T)) &&
                                                        aligned4(values_grad, sizeof(T)));
    with_pack(plan, [&](auto vw) {
      constexpr int VW = decltype(vw)::value;
      // (Min/Max: also with n == 0, where it marks every value's grad 0 for the values' grad pass)
      constexpr bool marks = R == Reduce::Min || R == Reduce::Max;
      if (positions > 0 && (n > 0 || (marks && values_grad)) && needs_stats)
        stats_rows_kernel<R, T, A, Idx, VW><<<plan.grid, kThreads, 0, stream>>>(idx, values, out, count, aux,
                                                                                marks ? values_grad : nullptr, sh,
                                                                                plan.logG);
      if (values_grad && positions > 0)
        values_grad_rows_kernel<R, T, A, Idx, VW><<<plan.grid, kThreads, 0, stream>>>(idx, values, out, g, count, aux,
                                                                                      values_grad, include_self, sh,
                                                                                      plan.logG);
    });
    if (arr_grad && slots > 0) {
      if (!needs_stats)
        check_copy(cudaMemcpyAsync(arr_grad, g, sizeof(T) * (size_t)slots, cudaMemcpyDeviceToDevice, stream));
      else
        arr_grad_kernel<R, T, A><<<sgrid, kThreads, 0, stream>>>(arr, out, g, count, aux, arr_grad, include_self, slots);
    }
  }
  check_launch("put_along_axis_grad");
}

}  // namespace

template <typename T, typename A, typename Idx>
void put_along_axis_forward(Reduce reduce, A* acc, const T* values, const Idx* indices, int32_t* count,
                            int64_t* winner, index_t outer, index_t n, index_t m, index_t inner,
                            bool include_self, cudaStream_t stream) {
  dispatch_reduce(reduce, [&](auto r) {
    forward_impl<decltype(r)::value, T, A, Idx>(acc, values, indices, count, winner, outer, n, m, inner,
                                                       include_self, stream);
  });
}

size_t put_along_axis_winner_scratch(index_t outer, index_t n, index_t inner) {
  return 256 + align_up(sizeof(int64_t) * (size_t)(outer * n)) + sizeof(int64_t) * (size_t)(outer * n * inner);
}

size_t put_along_axis_sorted_workspace(index_t positions, index_t slots) {
  return narrow_keys(positions, slots) ? sorted_bytes<uint32_t>(positions, slots) : sorted_bytes<int64_t>(positions, slots);
}

template <typename T, typename A, typename Idx>
void put_along_axis_sorted(Reduce reduce, A* acc, const T* values, const Idx* indices, void* workspace,
                           size_t workspace_bytes, index_t outer, index_t n, index_t m, index_t inner,
                           bool include_self, cudaStream_t stream) {
  if (reduce == Reduce::Mean)
    sorted_impl<Reduce::Mean, T, A, Idx>(acc, values, indices, workspace, workspace_bytes, outer, n, m, inner,
                                      include_self, stream);
  else if (reduce == Reduce::Add)
    sorted_impl<Reduce::Add, T, A, Idx>(acc, values, indices, workspace, workspace_bytes, outer, n, m, inner,
                                     include_self, stream);
  else
    throw std::runtime_error("put_along_axis: the sorted path is for add and mean");
}

template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, int64_t* winner, int32_t* count,
                             int32_t* aux, void* workspace, size_t workspace_bytes, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self, cudaStream_t stream) {
  dispatch_reduce(reduce, [&](auto r) {
    backward_impl<decltype(r)::value, T, Idx>(arr, indices, values, out, out_grad, arr_grad, values_grad, winner,
                                              count, aux, workspace, workspace_bytes, outer, n, m, inner,
                                              include_self, stream);
  });
}

#define PE_INSTANTIATE_FWD(T, A, Idx)                                                                    \
  template void put_along_axis_forward<T, A, Idx>(Reduce, A*, const T*, const Idx*, int32_t*, int64_t*, index_t, \
                                                  index_t, index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_BWD(T, Idx)                                                                            \
  template void put_along_axis_backward<T, Idx>(Reduce, const T*, const Idx*, const T*, const T*, const T*,  \
                                                T*, T*, int64_t*, int32_t*, int32_t*, void*, size_t, index_t, \
                                                index_t, index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_SORTED(T, A, Idx)                                                                   \
  template void put_along_axis_sorted<T, A, Idx>(Reduce, A*, const T*, const Idx*, void*, size_t, index_t, index_t, \
                                                 index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_ACC(T, A)                                                                      \
  PE_INSTANTIATE_FWD(T, A, int32_t) PE_INSTANTIATE_FWD(T, A, int64_t) PE_INSTANTIATE_SORTED(T, A, int32_t) \
  PE_INSTANTIATE_SORTED(T, A, int64_t)
#define PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_ACC(T, acc_t<T>)
#define PE_INSTANTIATE_FLOAT(T) PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_BWD(T, int32_t) PE_INSTANTIATE_BWD(T, int64_t)
PE_INSTANTIATE_FLOAT(float)
PE_INSTANTIATE_FLOAT(double)
PE_INSTANTIATE_FLOAT(float16_t)
PE_INSTANTIATE_FLOAT(bfloat16_t)
PE_INSTANTIATE_ALL(int32_t)
PE_INSTANTIATE_ACC(int32_t, int64_t)  // an int32 mean sums in int64 (reduce_acc_t)
PE_INSTANTIATE_ALL(int64_t)
#undef PE_INSTANTIATE_ACC
#undef PE_INSTANTIATE_FWD
#undef PE_INSTANTIATE_BWD
#undef PE_INSTANTIATE_ALL
#undef PE_INSTANTIATE_SORTED
#undef PE_INSTANTIATE_FLOAT

}  // namespace gpu
}  // namespace paddle_ext
