// put_along_axis on a GPU: the calling contract of the launchers (put_along_axis.h) in one place, free of
// Paddle: the type a reduce accumulates in, and the scratch each launch takes, allocated through the
// caller's `alloc(bytes, zeroed)` (the binding: Paddle tensors; the GPU test shims: device buffers) and
// held by the caller until the launch has run on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "paddle_ext/put_along_axis.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace paddle_ext {
namespace gpu {

template <typename A>
struct AccTag {
  using type = A;
};

// fn(AccTag<A>{}) with A = reduce_acc_t<reduce, T>, what a launch on T values accumulates in: float32 for
// the half types, int64 for an int32 mean, else T (the caller hands the launchers arr's values in A).
template <typename T, typename Fn>
decltype(auto) with_reduce_acc(Reduce reduce, Fn&& fn) {
  if (reduce == Reduce::Mean) return fn(AccTag<reduce_acc_t<Reduce::Mean, T>>{});
  return fn(AccTag<acc_t<T>>{});
}

// acc (arr's values in A) scattered into: the sorted path for a deterministic add / mean, else the
// atomic passes with mean's zeroed counts or assign's winner tables.
template <typename T, typename A, typename Idx, typename Alloc>
void put_along_axis_scatter(Reduce reduce, A* acc, const T* values, const Idx* indices, index_t outer, index_t n,
                            index_t m, index_t inner, bool include_self, bool deterministic, Alloc&& alloc,
                            cudaStream_t stream) {
  const index_t slots = outer * n * inner, positions = outer * m * inner;
  if (deterministic && (reduce == Reduce::Add || reduce == Reduce::Mean)) {
    const size_t bytes = put_along_axis_sorted_workspace(positions, slots);
    put_along_axis_sorted<T, A, Idx>(reduce, acc, values, indices, alloc(bytes, false), bytes, outer, n, m, inner,
                                     include_self, stream);
    return;
  }
  int32_t* count = nullptr;
  int64_t* winner = nullptr;
  if (reduce == Reduce::Mean) count = static_cast<int32_t*>(alloc(sizeof(int32_t) * (size_t)slots, true));
  if (reduce == Reduce::Assign)
    winner = static_cast<int64_t*>(alloc(put_along_axis_winner_scratch(outer, n, inner), false));
  put_along_axis_forward<T, A, Idx>(reduce, acc, values, indices, count, winner, outer, n, m, inner, include_self,
                                    stream);
}

// The grads, with the scratch each mode reads: assign's winner tables; mul's positions sorted by slot; the
// zeroed per-slot counts of the others (add with include_self reads none: both grads are g), and amin /
// amax's tie counts.
template <typename T, typename Idx, typename Alloc>
void put_along_axis_grads(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                          const T* out_grad, T* arr_grad, T* values_grad, index_t outer, index_t n, index_t m,
                          index_t inner, bool include_self, Alloc&& alloc, cudaStream_t stream) {
  const index_t slots = outer * n * inner, positions = outer * m * inner;
  int64_t* winner = nullptr;
  int32_t *count = nullptr, *aux = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  if (reduce == Reduce::Assign) {
    winner = static_cast<int64_t*>(alloc(put_along_axis_winner_scratch(outer, n, inner), false));
  } else if (reduce == Reduce::Mul) {
    workspace_bytes = put_along_axis_sorted_workspace(positions, slots);
    workspace = alloc(workspace_bytes, false);
  } else if (!(reduce == Reduce::Add && include_self)) {
    count = static_cast<int32_t*>(alloc(sizeof(int32_t) * (size_t)slots, true));
  }
  if (reduce == Reduce::Min || reduce == Reduce::Max)
    aux = static_cast<int32_t*>(alloc(sizeof(int32_t) * (size_t)slots, true));
  put_along_axis_backward<T, Idx>(reduce, arr, indices, values, out, out_grad, arr_grad, values_grad, winner, count,
                                  aux, workspace, workspace_bytes, outer, n, m, inner, include_self, stream);
}

}  // namespace gpu
}  // namespace paddle_ext
#endif
