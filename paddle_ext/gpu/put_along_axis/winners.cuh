// CUDA put_along_axis: assign's winner tables, shared by its forward and its grads.
#pragma once

#include "common.cuh"

namespace paddle_ext::gpu {
namespace {

// -------------------------------------------------------------------------- assign's winner tables
// Scratch (put_along_axis_winner_scratch bytes, uninitialised; the launchers prepare it):
//   flag      int32: set when some update row's indices are not all equal;
//   row_win   int64 [outer * n]: the largest j of the uniform update rows aimed at target row (o, k), -1 if none;
//   slot_win  uint64 [outer * n * inner]: the per-slot winners, only when the flag is set: key
//             ((j + 1) << shift) | low, 0 = none; one atomicMax per position keeps the largest j (the slot
//             fixes o and i, so the largest position). shift = 32 where j + 1 fits 32 bits, and then the
//             forward of a <= 4-byte type carries the value's bits in `low` (the winner's value comes
//             with its key: no second random read); else shift = 0, low = 0.

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

}  // namespace
}  // namespace paddle_ext::gpu
