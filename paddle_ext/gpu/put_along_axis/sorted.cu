// CUDA put_along_axis, deterministic add / mean: the positions sorted by slot, then one thread per slot folds
// its values in position order (the CPU's order, so the same bits).
#include "common.cuh"
#include "sort.cuh"

namespace paddle_ext::gpu {
namespace {

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

}  // namespace

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

#define PE_INSTANTIATE_SORTED(T, A, Idx)                                                                   \
  template void put_along_axis_sorted<T, A, Idx>(Reduce, A*, const T*, const Idx*, void*, size_t, index_t, index_t, \
                                                 index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_ACC(T, A) PE_INSTANTIATE_SORTED(T, A, int32_t) PE_INSTANTIATE_SORTED(T, A, int64_t)
PE_PUT_FOR_ACC_TYPES(PE_INSTANTIATE_ACC)
#undef PE_INSTANTIATE_ACC
#undef PE_INSTANTIATE_SORTED

}  // namespace paddle_ext::gpu
