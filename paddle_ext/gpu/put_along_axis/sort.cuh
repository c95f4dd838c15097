// CUDA put_along_axis: the positions sorted by slot (a stable radix sort), for deterministic add / mean and
// mul's grads.
#pragma once

#include "common.cuh"

namespace paddle_ext::gpu {
namespace {

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

}  // namespace
}  // namespace paddle_ext::gpu
