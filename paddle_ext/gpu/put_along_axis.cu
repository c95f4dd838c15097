// CUDA put_along_axis: one thread per position of `indices`, atomics into the accumulation buffer.
//   add / mean      atomicAdd (float32 accumulation for the half types, int64 for an integer mean),
//                   then a divide pass for mean;
//   mul, amin, amax a compare-and-swap loop around the shared ReduceOp<R>::combine (NaN-aware);
//   assign          two passes: atomicMax of the position per slot, then only the winner writes, so
//                   "the largest position wins" exactly as on the CPU, run to run;
//   include_self=False: a first pass sets every written slot to the reduction's identity;
//   deterministic add / mean: a stable radix sort of (slot, position), then one thread per slot folds
//                   its values in position order (the CPU's order, so the same bits).
// Grads: per-slot statistics with atomics (counts, winners, ties), except mul's, which sort the
// positions by slot the same way and take exclusive prefix x suffix products per slot.
// Out-of-range indices are skipped by every pass (nothing outside arr is written, no host sync).
// The per-element math (combine, identities, mean rounding, the grad formulas) is in put_along_axis.h.
#include <cstring>

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

template <Reduce R, typename A>
__device__ inline void atomic_combine(A* addr, A v) {
  if constexpr (R == Reduce::Add || R == Reduce::Mean) {
    atomic_add(addr, v);
  } else {
    atomic_update(addr, [v](A s) { return ReduceOp<R>::combine(s, v); });
  }
}

// Position p of indices/values -> its slot in arr, or -1 when the index is out of range.
template <typename Idx>
__device__ inline index_t slot_of(const Idx* idx, index_t p, index_t n, index_t m, index_t inner) {
  const index_t k = static_cast<index_t>(idx[p]);
  if (!index_in_range(k, n)) return -1;
  const index_t i = p % inner, o = p / (m * inner);
  return (o * n + wrap_index(k, n)) * inner + i;
}

#define PE_GRID_LOOP(var, count) \
  for (index_t var = blockIdx.x * (index_t)blockDim.x + threadIdx.x; var < (count); var += (index_t)gridDim.x * blockDim.x)

template <typename Idx>
__global__ void pick_winner_kernel(const Idx* idx, int64_t* winner, index_t positions, index_t n, index_t m,
                                   index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s >= 0) atomicMax(reinterpret_cast<long long*>(winner + s), (long long)p);
  }
}

template <typename T, typename A, typename Idx>
__global__ void assign_winner_kernel(A* acc, const T* values, const Idx* idx, const int64_t* winner,
                                     index_t positions, index_t n, index_t m, index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s >= 0 && winner[s] == p) acc[s] = static_cast<A>(load(values[p]));
  }
}

// include_self=False: written slots start from the identity (all writers store the same value);
// also counts contributions for mean.
template <Reduce R, typename A, typename Idx>
__global__ void init_slots_kernel(A* acc, int32_t* count, const Idx* idx, bool reset, index_t positions, index_t n,
                                  index_t m, index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s < 0) continue;
    if (reset) acc[s] = reduce_identity<R, A>();
    if (count) atomicAdd(count + s, 1);
  }
}

template <Reduce R, typename T, typename A, typename Idx>
__global__ void combine_kernel(A* acc, const T* values, const Idx* idx, index_t positions, index_t n, index_t m,
                               index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s >= 0) atomic_combine<R, A>(acc + s, static_cast<A>(load(values[p])));
  }
}

template <typename A>
__global__ void mean_divide_kernel(A* acc, const int32_t* count, int32_t self, index_t slots) {
  PE_GRID_LOOP(s, slots) {
    if (count[s] > 0) acc[s] = mean_divide<A>(acc[s], count[s] + self);
  }
}

template <Reduce R, typename T, typename A, typename Idx>
void forward_impl(A* acc, const T* values, const Idx* idx, int32_t* count, int64_t* winner, index_t outer,
                  index_t n, index_t m, index_t inner, bool include_self, cudaStream_t stream) {
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (positions == 0 || n == 0) return;
  const unsigned grid = grid_size(positions, kThreads);
  if constexpr (R == Reduce::Assign) {
    pick_winner_kernel<Idx><<<grid, kThreads, 0, stream>>>(idx, winner, positions, n, m, inner);
    assign_winner_kernel<T, A, Idx><<<grid, kThreads, 0, stream>>>(acc, values, idx, winner, positions, n, m, inner);
    check_launch("put_along_axis assign");
    return;
  } else {
    int32_t* mean_count = R == Reduce::Mean ? count : nullptr;
    if (!include_self || mean_count)
      init_slots_kernel<R, A, Idx><<<grid, kThreads, 0, stream>>>(acc, mean_count, idx, !include_self, positions, n,
                                                                 m, inner);
    combine_kernel<R, T, A, Idx><<<grid, kThreads, 0, stream>>>(acc, values, idx, positions, n, m, inner);
    if (mean_count)
      mean_divide_kernel<A><<<grid_size(slots, kThreads), kThreads, 0, stream>>>(acc, mean_count,
                                                                                  include_self ? 1 : 0, slots);
    check_launch("put_along_axis");
  }
}

// ------------------------------------------------------------------------- deterministic add / mean
template <typename Idx>
__global__ void sort_keys_kernel(const Idx* idx, int64_t* keys, int64_t* order, index_t positions, index_t n,
                                 index_t m, index_t inner, index_t slots) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    keys[p] = s >= 0 ? s : slots;  // out of range: sorted past every slot and skipped
    order[p] = p;
  }
}

// Thread q starts a segment when its key differs from the previous one and folds the segment.
template <Reduce R, typename T, typename A>
__global__ void fold_segments_kernel(A* acc, const T* values, const int64_t* keys, const int64_t* order,
                                     index_t positions, index_t slots, bool include_self) {
  PE_GRID_LOOP(q, positions) {
    const int64_t key = keys[q];
    if (key >= slots || (q > 0 && keys[q - 1] == key)) continue;
    A s = include_self ? acc[key] : static_cast<A>(load(values[order[q]]));
    int32_t count = include_self ? 1 : 0;
    for (index_t r = q + (include_self ? 0 : 1); r < positions && keys[r] == key; ++r) {
      s = ReduceOp<Reduce::Add>::combine(s, static_cast<A>(load(values[order[r]])));
      ++count;
    }
    if (!include_self) ++count;
    acc[key] = R == Reduce::Mean ? mean_divide<A>(s, count) : s;
  }
}

struct SortedWorkspace {
  int64_t *keys_in, *keys_out, *order_in, *order_out;
  void* temp;
  size_t temp_bytes;
};

inline int key_bits(index_t slots) {
  int bits = 1;
  while (bits < 63 && (index_t(1) << bits) <= slots) ++bits;
  return bits;
}

inline size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

inline SortedWorkspace carve(void* base, index_t positions, size_t temp_bytes) {
  char* p = static_cast<char*>(base);
  const size_t arr = align_up(sizeof(int64_t) * (size_t)positions);
  SortedWorkspace w;
  w.keys_in = reinterpret_cast<int64_t*>(p);
  w.keys_out = reinterpret_cast<int64_t*>(p + arr);
  w.order_in = reinterpret_cast<int64_t*>(p + 2 * arr);
  w.order_out = reinterpret_cast<int64_t*>(p + 3 * arr);
  w.temp = p + 4 * arr;
  w.temp_bytes = temp_bytes;
  return w;
}

inline size_t cub_sort_bytes(index_t positions, index_t slots) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int64_t*)nullptr, (int64_t*)nullptr,
                                  (const int64_t*)nullptr, (int64_t*)nullptr, (int)positions, 0,
                                  key_bits(slots));
  return bytes;
}

template <Reduce R, typename T, typename A, typename Idx>
void sorted_impl(A* acc, const T* values, const Idx* idx, void* workspace, size_t workspace_bytes,
                 index_t outer, index_t n, index_t m, index_t inner, bool include_self, cudaStream_t stream) {
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (positions == 0 || n == 0) return;
  if (positions > (index_t)INT32_MAX) throw std::runtime_error("put_along_axis: deterministic path needs < 2^31 indices");
  const size_t temp = cub_sort_bytes(positions, slots);
  if (workspace_bytes < put_along_axis_sorted_workspace(positions, slots))
    throw std::runtime_error("put_along_axis: deterministic workspace too small");
  SortedWorkspace w = carve(workspace, positions, temp);
  const unsigned grid = grid_size(positions, kThreads);
  sort_keys_kernel<Idx><<<grid, kThreads, 0, stream>>>(idx, w.keys_in, w.order_in, positions, n, m, inner, slots);
  size_t temp_bytes = w.temp_bytes;
  cub::DeviceRadixSort::SortPairs(w.temp, temp_bytes, w.keys_in, w.keys_out, w.order_in, w.order_out, (int)positions,
                                  0, key_bits(slots), stream);
  fold_segments_kernel<R, T, A><<<grid, kThreads, 0, stream>>>(acc, values, w.keys_out, w.order_out, positions,
                                                               slots, include_self);
  check_launch("put_along_axis deterministic");
}

// ---------------------------------------------------------------------------------------- backward
template <typename T, typename Idx>
__global__ void assign_grad_kernel(const Idx* idx, const T* g, const int64_t* winner, T* values_grad,
                                   index_t positions, index_t n, index_t m, index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    values_grad[p] = (s >= 0 && winner[s] == p) ? g[s] : store<T>(0.0f);
  }
}

template <typename T>
__global__ void assign_arr_grad_kernel(const T* g, const int64_t* winner, T* arr_grad, index_t slots) {
  PE_GRID_LOOP(s, slots) { arr_grad[s] = winner[s] >= 0 ? store<T>(0.0f) : g[s]; }
}

// Per-slot statistics (Min/Max): aux starts from arr's part (include_self), count from 0.
template <Reduce R, typename T, typename A>
__global__ void stats_init_kernel(const T* arr, const T* out, int32_t* aux, bool include_self, index_t slots) {
  PE_GRID_LOOP(s, slots) {
    aux[s] = (include_self && same_value(static_cast<A>(load(arr[s])), static_cast<A>(load(out[s])))) ? 1 : 0;
  }
}

template <Reduce R, typename T, typename A, typename Idx>
__global__ void stats_kernel(const Idx* idx, const T* values, const T* out, int32_t* count, int32_t* aux,
                             index_t positions, index_t n, index_t m, index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s < 0) continue;
    atomicAdd(count + s, 1);
    if constexpr (R == Reduce::Min || R == Reduce::Max) {
      if (same_value(static_cast<A>(load(values[p])), static_cast<A>(load(out[s])))) atomicAdd(aux + s, 1);
    }
  }
}

template <Reduce R, typename T, typename A, typename Idx>
__global__ void values_grad_kernel(const Idx* idx, const T* values, const T* out, const T* g, const int32_t* count,
                                   const int32_t* aux, T* values_grad, bool include_self, index_t positions, index_t n,
                                   index_t m, index_t inner) {
  PE_GRID_LOOP(p, positions) {
    const index_t s = slot_of(idx, p, n, m, inner);
    if (s < 0) {
      values_grad[p] = store<T>(A(0));
      continue;
    }
    values_grad[p] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), static_cast<A>(load(values[p])),
                                                   static_cast<A>(load(out[s])), count[s], aux ? aux[s] : 0, A(1),
                                                   include_self));
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
template <typename T, typename A>
__global__ void mul_grad_segments_kernel(const T* arr, const T* values, const T* g, const int64_t* keys,
                                         const int64_t* order, A* prefix, T* arr_grad, T* values_grad,
                                         index_t positions, index_t slots, bool include_self) {
  PE_GRID_LOOP(q, positions) {
    const int64_t key = keys[q];
    if (key >= slots) {  // out of range
      if (values_grad) values_grad[order[q]] = store<T>(A(0));
      continue;
    }
    if (q > 0 && keys[q - 1] == key) continue;
    index_t end = q + 1;
    while (end < positions && keys[end] == key) ++end;
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
      const int64_t p = order[r];
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
  static_assert(sizeof(A) <= sizeof(int64_t), "prefix products live in the workspace's int64 keys");
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  if (arr_grad && slots > 0) copy_grad_kernel<T><<<grid_size(slots, kThreads), kThreads, 0, stream>>>(g, arr_grad, slots);
  if (positions == 0 || n == 0) return;
  if (positions > (index_t)INT32_MAX) throw std::runtime_error("put_along_axis: mul grads need < 2^31 indices");
  if (workspace_bytes < put_along_axis_sorted_workspace(positions, slots))
    throw std::runtime_error("put_along_axis: mul grad workspace too small");
  SortedWorkspace w = carve(workspace, positions, cub_sort_bytes(positions, slots));
  const unsigned grid = grid_size(positions, kThreads);
  sort_keys_kernel<Idx><<<grid, kThreads, 0, stream>>>(idx, w.keys_in, w.order_in, positions, n, m, inner, slots);
  size_t temp_bytes = w.temp_bytes;
  cub::DeviceRadixSort::SortPairs(w.temp, temp_bytes, w.keys_in, w.keys_out, w.order_in, w.order_out, (int)positions,
                                  0, key_bits(slots), stream);
  // keys_in is free once sorted: it holds the prefixes
  mul_grad_segments_kernel<T, A><<<grid, kThreads, 0, stream>>>(arr, values, g, w.keys_out, w.order_out,
                                                                reinterpret_cast<A*>(w.keys_in), arr_grad,
                                                                values_grad, positions, slots, include_self);
}

template <Reduce R, typename T, typename Idx>
void backward_impl(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad,
                   T* values_grad, int64_t* winner, int32_t* count, int32_t* aux, void* workspace,
                   size_t workspace_bytes, index_t outer, index_t n, index_t m, index_t inner, bool include_self,
                   cudaStream_t stream) {
  using A = acc_t<T>;
  const index_t positions = outer * m * inner, slots = outer * n * inner;
  const unsigned pgrid = grid_size(positions, kThreads), sgrid = grid_size(slots, kThreads);
  if constexpr (R == Reduce::Assign) {
    if (positions > 0 && n > 0) pick_winner_kernel<Idx><<<pgrid, kThreads, 0, stream>>>(idx, winner, positions, n, m, inner);
    if (values_grad && positions > 0)
      assign_grad_kernel<T, Idx><<<pgrid, kThreads, 0, stream>>>(idx, g, winner, values_grad, positions, n, m, inner);
    if (arr_grad && slots > 0) assign_arr_grad_kernel<T><<<sgrid, kThreads, 0, stream>>>(g, winner, arr_grad, slots);
  } else if constexpr (R == Reduce::Mul) {
    mul_backward<T, Idx>(arr, idx, values, g, arr_grad, values_grad, workspace, workspace_bytes, outer, n, m, inner,
                         include_self, stream);
  } else {
    if (slots > 0 && (R == Reduce::Min || R == Reduce::Max))
      stats_init_kernel<R, T, A><<<sgrid, kThreads, 0, stream>>>(arr, out, aux, include_self, slots);
    // add with include_self needs no statistics: both grads are g (gathered for values)
    const bool needs_stats = !(R == Reduce::Add && include_self);
    if (positions > 0 && n > 0 && needs_stats)
      stats_kernel<R, T, A, Idx><<<pgrid, kThreads, 0, stream>>>(idx, values, out, count, aux, positions, n, m, inner);
    if (values_grad && positions > 0)
      values_grad_kernel<R, T, A, Idx><<<pgrid, kThreads, 0, stream>>>(idx, values, out, g, count, aux, values_grad,
                                                                       include_self, positions, n, m, inner);
    if (arr_grad && slots > 0)
      arr_grad_kernel<R, T, A><<<sgrid, kThreads, 0, stream>>>(arr, out, g, count, aux, arr_grad, include_self, slots);
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

size_t put_along_axis_sorted_workspace(index_t positions, index_t slots) {
  return 4 * align_up(sizeof(int64_t) * (size_t)positions) + cub_sort_bytes(positions, slots);
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
