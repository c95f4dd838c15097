// CUDA logcumsumexp forward on a strided float32/float16/bfloat16 axis (inner >= 32, >= kColTileMinSteps
// steps): the float tiles of tiles.cu, 32 columns x kColTile steps a tile.
#include "launch.cuh"
#include "scan.cuh"
#include "tile_io.cuh"

namespace paddle_ext::gpu {
namespace {

// ---- Float tiles on a strided axis (inner >= 32): the same scheme, 32 columns x kColTile steps a tile ----
// Lane l of every warp holds column l of the tile; warp w holds steps w * kTileItems .. + kTileItems - 1
// (each load: 32 neighbouring columns, coalesced). The warps' partial sums meet in shared memory; the
// carry is one log value per column. Tiles are numbered step-tile-major (tile j of every column group
// before tile j + 1), so the tile a look-back waits for was claimed about one column-group count
// earlier and is usually complete: the look-back walks one tile at a time. Every decision (linear or
// exact, the redo, the rescan) is per column, with the error bounds of the row tiles (the float sums here
// are shallower: 15 in the thread, 7 across warps, 2 to combine).

struct ColumnScratch {
  double* aggregate;  // [tiles][32]
  double* inclusive;  // [tiles][32]
  unsigned* counter;  // zeroed from here on
  int* redo;          // [outer * inner] the column needs the double rescan
  int* done;          // [outer * groups] tiles of the column group finished
  int* flags;         // [tiles]
};

// The double rescan of one column (a thread). Out of line, as rescan_row: inlined, the column tile
// kernel spilled 24 bytes at 64 registers; out of line, 8-12 bytes remain (the registers saved around
// this rare call, by ptxas's report).
template <typename T>
__device__ __noinline__ void rescan_column(const T* x, T* out, index_t base, index_t n, index_t inner,
                                           bool exclusive, bool reverse) {
  const ForwardIO<T, double> io{x, out};
  scan_column_piece(io, LogAddExpOp<double>(), neg_inf<double>(), base, 0, n, n, inner, exclusive, reverse);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads, 4) forward_column_tiles_kernel(const T* x, T* out, index_t outer,
                                                                          index_t n, index_t inner,
                                                                          index_t step_tiles, ColumnScratch ws,
                                                                          bool exclusive, bool reverse) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kInfD = std::numeric_limits<double>::infinity();
  const LogAddExpOp<double> lae;
  __shared__ float smax[kWarps][32], smin[kWarps][32], ssum[kWarps][32];
  __shared__ int sbad[kWarps][32];
  __shared__ float park[kTileItems][kWarps][32];
  __shared__ double sd[kWarps][32];
  __shared__ double carry_sh[32];
  __shared__ float scale_sh[3][32];
  __shared__ int exact_sh[32], last_fail_sh[32], hard_sh[32];
  __shared__ unsigned tile_shared;
  __shared__ int last_shared;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;

  if (threadIdx.x == 0) tile_shared = atomicAdd(ws.counter, 1u);
  if (threadIdx.x < 32) {
    last_fail_sh[lane] = -1;
    hard_sh[lane] = 0;
  }
  __syncthreads();
  const index_t groups = (inner + 31) / 32, lines = outer * groups;  // lines: (outer, column group) pairs
  const index_t tile = tile_shared;
  const index_t j = tile / lines, g = tile % lines, o = g / groups, c = (g % groups) * 32 + lane;
  const bool live = c < inner;
  const index_t base = o * n * inner + (live ? c : 0);
  const int t0 = warp * kTileItems;  // this thread's first step in the tile
  const index_t s = j * kColTile + t0;
  auto at = [&](index_t step) { return base + (reverse ? n - 1 - step : step) * inner; };
  float v[kTileItems];
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) v[k] = live && s + k < n ? static_cast<float>(load(x[at(s + k)])) : -kInf;

  // Column stats over the tile.
  float mx, mn;
  int bad;
  finite_range(v, mx, mn, bad);
  smax[warp][lane] = mx;
  smin[warp][lane] = mn;
  sbad[warp][lane] = bad;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    mx = fmaxf(mx, smax[w][lane]);
    mn = fminf(mn, smin[w][lane]);
    bad |= sbad[w][lane];
  }
  const bool all_ninf = mx == -kInf;
  const bool fast = !bad && (all_ninf || (mx - mn <= linear_range<float>() && fabsf(mx) < 1e30f));

  // Partial sums: float for a linear column, the log-add-exp in double for an exact one.
  // p[k][warp][lane]: the thread's float prefix sums, then its outputs, parked in shared memory (not 16
  // registers) across the look-back and the barriers: the kernel fits 64 registers (4 blocks/SM).
  auto p = [&](int k) -> float& { return park[k][warp][lane]; };
  float run = 0.0f;
  double log_run = -kInfD;
  if (fast) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float e = all_ninf ? 0.0f : expf(v[k] - mx);
      if (exclusive) {
        p(k) = run;
        run += e;
      } else {
        run += e;
        p(k) = run;
      }
    }
  } else {
#pragma unroll 1
    for (int k = 0; k < kTileItems; ++k) {
      log_run = lae(log_run, live && s + k < n ? static_cast<double>(load(x[at(s + k)])) : -kInfD);
    }
  }
  ssum[warp][lane] = run;
  sd[warp][lane] = log_run;
  __syncthreads();
  float q0 = 0.0f;  // the column's float sum over the warps before
  for (int w = 0; w < warp; ++w) q0 += ssum[w][lane];
  if (warp == 0) {
    double aggregate;
    if (fast) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += ssum[w][lane];
      aggregate = all_ninf ? -kInfD : static_cast<double>(mx) + log(static_cast<double>(total));
    } else {
      aggregate = -kInfD;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) aggregate = lae(aggregate, sd[w][lane]);
    }
    const bool aggregate_inexact = fast && !all_ninf;
    const int bits = __any_sync(0xffffffffu, aggregate_inexact) ? kInexact : 0;
    (j == 0 ? ws.inclusive : ws.aggregate)[tile * 32 + lane] = aggregate;
    __threadfence();
    __syncwarp();
    if (lane == 0) {
      __threadfence();
      store_volatile(ws.flags + tile, (j == 0 ? kInclusive : kAggregate) | bits);
    }
    // Look back one tile at a time (the same column group, the step tiles before).
    double carry = -kInfD;
    int inexact = 0;
    for (index_t k = j - 1; k >= 0; --k) {
      const index_t before = k * lines + g;
      int flag;
      do {
        flag = load_volatile(ws.flags + before);
        if (flag == 0) PE_SPIN_YIELD();
      } while (flag == 0);
      __threadfence();
      carry = lae(load_volatile((flag & kInclusive ? ws.inclusive : ws.aggregate) + before * 32 + lane), carry);
      inexact |= flag & kInexact;
      if (flag & kInclusive) break;
    }
    __syncwarp();
    if (j > 0) {
      const int incl_bits = __any_sync(0xffffffffu, inexact || aggregate_inexact) ? kInexact : 0;
      ws.inclusive[tile * 32 + lane] = lae(carry, aggregate);
      __threadfence();
      __syncwarp();
      if (lane == 0) {
        __threadfence();
        store_volatile(ws.flags + tile, kInclusive | incl_bits);
      }
    }
    carry_sh[lane] = carry;
    exact_sh[lane] = !inexact || carry == -kInfD;  // the tile flags are per tile; an empty carry is exact
    if (fast && !all_ninf) {
      const float Bf = static_cast<float>(fmax(static_cast<double>(mx), carry));
      scale_sh[0][lane] = Bf;
      scale_sh[1][lane] = carry == -kInfD ? 0.0f : static_cast<float>(exp(carry - static_cast<double>(Bf)));
      scale_sh[2][lane] = static_cast<float>(exp(static_cast<double>(mx) - static_cast<double>(Bf)));
    }
  }
  __syncthreads();
  const double carry = carry_sh[lane];
  const bool carry_exact = exact_sh[lane];
  const bool carry_special = carry != carry || carry == kInfD;
  const bool linear = fast && !all_ninf && !carry_special &&
                      (carry == -kInfD || (fabs(carry) < 1e30 && static_cast<double>(mx) - carry <= linear_range<float>()));
  const bool exact = !(fast && all_ninf) && !linear;
  int fail = 0, hard = 0;
  bool written = false;
  if (fast && all_ninf) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) p(k) = static_cast<float>(carry);
    hard = !carry_exact && fabs(carry) < kInfD && !(15.0 * fabs(carry) >= kCarrySlack);
  } else if (linear) {
    const float B = scale_sh[0][lane], cs = scale_sh[1][lane], r = scale_sh[2][lane];
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float l = logf(fmaf(r, q0 + p(k), cs));
      const float out_k = B + l;
      p(k) = out_k;
      if (fabsf(out_k) < kInf && !(15.0f * fabsf(out_k) >= kFloatSlack + 3.0f * fabsf(l))) {
        fail = 1;
        hard |= !carry_exact && !(15.0f * fabsf(out_k) >= kCarrySlack);
      }
    }
    if (fail) atomicMax(&last_fail_sh[lane], t0 + kTileItems - 1);
  }
  if (hard) atomicOr(&hard_sh[lane], 1);
  // Redo in double the failing columns' steps up to their last failing one (columns the carry cannot
  // certify are rescanned below instead).
  if (__syncthreads_or(fail)) {
    const int last = last_fail_sh[lane];
    const bool mine = linear && last >= 0 && !hard_sh[lane] && t0 <= last;
    const double Md = fmax(static_cast<double>(mx), carry);
    double dsum = 0.0;
    if (mine) {
#pragma unroll 1
      for (int k = 0; k < kTileItems; ++k) {
        dsum += s + k < n ? exp(static_cast<double>(load(x[at(s + k)])) - Md) : 0.0;
      }
    }
    sd[warp][lane] = dsum;
    __syncthreads();
    if (mine) {
      double acc = carry == -kInfD ? 0.0 : exp(carry - Md);
      for (int w = 0; w < warp; ++w) acc += sd[w][lane];
      written = true;
#pragma unroll 1
      for (int k = 0; k < kTileItems && s + k < n; ++k) {
        const double e = exp(static_cast<double>(load(x[at(s + k)])) - Md);
        if (!exclusive) acc += e;
        out[at(s + k)] = store<T>(Md + log(acc));
        if (exclusive) acc += e;
      }
    }
    __syncthreads();  // sd is reused below
  }
  // Exact columns: the log-add-exp scan in double from the carry.
  if (__syncthreads_or(exact && live)) {
    if (exact && fast) {  // no log partial sums yet
      log_run = -kInfD;
#pragma unroll 1
      for (int k = 0; k < kTileItems; ++k) {
        log_run = lae(log_run, live && s + k < n ? static_cast<double>(load(x[at(s + k)])) : -kInfD);
      }
    }
    sd[warp][lane] = log_run;
    __syncthreads();
    if (exact && live) {
      double acc = carry;
      for (int w = 0; w < warp; ++w) acc = lae(acc, sd[w][lane]);
      written = true;
#pragma unroll 1
      for (int k = 0; k < kTileItems && s + k < n; ++k) {
        const double vk = static_cast<double>(load(x[at(s + k)]));
        if (!exclusive) acc = lae(acc, vk);
        out[at(s + k)] = store<T>(acc);
        hard |= !carry_exact && fabs(acc) < kInfD && !(15.0 * fabs(acc) >= kCarrySlack);
        if (exclusive) acc = lae(acc, vk);
      }
    }
    if (hard) atomicOr(&hard_sh[lane], 1);
  }
  if (live && !written) {
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      if (s + k < n) out[at(s + k)] = store<T>(p(k));
    }
  }

  // The last tile of a column group to finish rescans its columns that asked for it, a thread each.
  // (The barriers and thread 0's fences order every thread's stores before the rescan's, as in the rows.)
  __syncthreads();
  if (warp == 0 && hard_sh[lane] && live) store_volatile(ws.redo + o * inner + c, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const bool last = atomicAdd(ws.done + g, 1) == (int)step_tiles - 1;
    __threadfence();
    last_shared = last;
  }
  __syncthreads();
  if (last_shared && warp == 0 && live && load_volatile(ws.redo + o * inner + c) != 0) {
    rescan_column(x, out, o * n * inner + c, n, inner, exclusive, reverse);
  }
}


}  // namespace

namespace lse {

template <typename T>
void launch_forward_column_tiles(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                                 bool reverse, cudaStream_t stream) {
  const index_t step_tiles = (n + kColTile - 1) / kColTile, groups = outer * ((inner + 31) / 32);
  const index_t tiles = step_tiles * groups;
  const index_t ints = 1 + outer * inner + groups + tiles;  // counter, redo, done, flags: zeroed
  DeviceScratch<double> scratch(2 * 32 * tiles + (ints + 1) / 2, stream);
  ColumnScratch ws;
  ws.aggregate = scratch.ptr;
  ws.inclusive = scratch.ptr + 32 * tiles;
  int* zeroed = zeroed_ints(scratch.ptr + 2 * 32 * tiles, ints, stream);
  ws.counter = reinterpret_cast<unsigned*>(zeroed);
  ws.redo = zeroed + 1;
  ws.done = zeroed + 1 + outer * inner;
  ws.flags = zeroed + 1 + outer * inner + groups;
  forward_column_tiles_kernel<T><<<(unsigned)tiles, kRowThreads, 0, stream>>>(x, out, outer, n, inner, step_tiles,
                                                                              ws, exclusive, reverse);
  check_launch("logcumsumexp");
}

#define PE_INSTANTIATE(T) \
  template void launch_forward_column_tiles<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace lse
}  // namespace paddle_ext::gpu
