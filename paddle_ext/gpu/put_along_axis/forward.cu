// CUDA put_along_axis forward: the row passes (atomics and compare-and-swap), assign's winners, mean's divide.
#include "common.cuh"
#include "winners.cuh"

namespace paddle_ext::gpu {
namespace {

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
  for_each_update_pack<VW>(sh, logG, [&](index_t o, index_t p0, index_t e) {
    combine_pack<R, A>(acc, count, load_pack<VW>(idx + p0 + e), load_pack<VW>(values + p0 + e), o * sh.n, sh.n,
                       sh.inner, e);
  });
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
  for_each_update_pack<VW>(sh, logG, [&](index_t o, index_t p0, index_t e) {
    const Pack<Idx, VW> ix = load_pack<VW>(idx + p0 + e);
#pragma unroll
    for (int u = 0; u < VW; ++u) {
      const index_t k = static_cast<index_t>(ix.v[u]);
      if (index_in_range(k, sh.n)) acc[(o * sh.n + wrap_index(k, sh.n)) * sh.inner + e + u] = reduce_identity<R, A>();
    }
  });
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

#define PE_INSTANTIATE_FWD(T, A, Idx)                                                                    \
  template void put_along_axis_forward<T, A, Idx>(Reduce, A*, const T*, const Idx*, int32_t*, int64_t*, index_t, \
                                                  index_t, index_t, index_t, bool, cudaStream_t);
#define PE_INSTANTIATE_ACC(T, A) PE_INSTANTIATE_FWD(T, A, int32_t) PE_INSTANTIATE_FWD(T, A, int64_t)
PE_PUT_FOR_ACC_TYPES(PE_INSTANTIATE_ACC)
#undef PE_INSTANTIATE_ACC
#undef PE_INSTANTIATE_FWD

}  // namespace paddle_ext::gpu
