// CUDA put_along_axis grads: per-slot statistics with atomics (counts, ties), assign's from its winner
// tables, mul's from the positions sorted by slot (exclusive prefix x suffix products).
#include "common.cuh"
#include "sort.cuh"
#include "winners.cuh"

namespace paddle_ext::gpu {
namespace {

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
  for_each_update_pack<VW>(sh, logG, [&](index_t o, index_t p0, index_t e) {
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
  });
}

// values' grads (add, mean, amin, amax); count/aux may be null where the mode reads none (add).
// add: a pack of 4 equal in-range indices copies 4 neighbouring grads at once.
template <Reduce R, typename T, typename A, typename Idx, int VW>
__global__ void __launch_bounds__(kThreads) values_grad_rows_kernel(const Idx* idx, const T* values, const T* out, const T* g, const int32_t* count,
                                        const int32_t* aux, T* values_grad, bool include_self, Rows sh, int logG) {
  for_each_update_pack<VW>(sh, logG, [&](index_t o, index_t p0, index_t e) {
    const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
    if constexpr (R == Reduce::Add && VW > 1) {
      if (uniform(ix) && index_in_range(static_cast<index_t>(ix.v[0]), sh.n)) {
        const index_t s = (o * sh.n + wrap_index(static_cast<index_t>(ix.v[0]), sh.n)) * sh.inner + e;
        store_pack<VW>(values_grad + p0 + e, load_pack<VW>(g + s));
        return;
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
  });
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

#define PE_INSTANTIATE_BWD(T, Idx)                                                                            \
  template void put_along_axis_backward<T, Idx>(Reduce, const T*, const Idx*, const T*, const T*, const T*,  \
                                                T*, T*, int64_t*, int32_t*, int32_t*, void*, size_t, index_t, \
                                                index_t, index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_FLOAT(T) PE_INSTANTIATE_BWD(T, int32_t) PE_INSTANTIATE_BWD(T, int64_t)
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE_FLOAT)
#undef PE_INSTANTIATE_FLOAT
#undef PE_INSTANTIATE_BWD

}  // namespace paddle_ext::gpu
