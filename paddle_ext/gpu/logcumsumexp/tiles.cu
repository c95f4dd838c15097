// CUDA logcumsumexp forward on contiguous float32/float16/bfloat16 rows of >= kTileRowMin: float tiles with
// a decoupled look-back (the scheme and its error bounds: tile_io.cuh).
#include "launch.cuh"
#include "scan.cuh"
#include "tile_io.cuh"

namespace paddle_ext::gpu {
namespace {

template <typename T>
__global__ void __launch_bounds__(kRowThreads, 4) forward_tiles_kernel(const T* x, T* out, index_t n,
                                                                   index_t tiles_per_row, TileScratch ws,
                                                                   bool exclusive, bool reverse) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr double kInfD = std::numeric_limits<double>::infinity();
  const LogAddExpOp<double> lae;
  __shared__ RowTemp<T, double> row_temp;  // the row rescan (forward_row_span)
  __shared__ TileStats<double> row_stats;
  __shared__ double row_carry;
  __shared__ float fscan[kWarps], wmax[kWarps], wmin[kWarps];
  __shared__ double dscan[kWarps];
  __shared__ unsigned tile_shared;
  __shared__ double carry_shared;
  __shared__ float scale_shared[3];  // B, c, r of the linear outputs
  __shared__ int exact_shared, last_fail_shared, hard_shared, last_shared;
  __shared__ float4 xpose[kWarps][kXposeChunks];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;

  if (threadIdx.x == 0) {
    tile_shared = atomicAdd(ws.counter, 1u);
    last_fail_shared = -1;
    hard_shared = 0;
  }
  __syncthreads();
  const index_t tile = tile_shared;
  const index_t row = tile / tiles_per_row, j = tile % tiles_per_row, first_tile = row * tiles_per_row;
  const index_t base = row * n;
  const int t0 = threadIdx.x * kTileItems;  // this thread's first position in the tile
  const index_t s = j * kTile + t0;
  const index_t warp_s = j * kTile + warp * (32 * kTileItems);  // the warp's first position
  float v[kTileItems];
  load_tile_striped(x, base, n, warp_s, reverse, xpose[warp], v);  // -inf past the row's end

  // Tile stats: max and min of the finite terms, NaN/+inf present.
  float mx, mn;
  int bad;
  finite_range(v, mx, mn, bad);
  mx = warp_reduce(mx, MaxOp<float>());
  mn = warp_reduce(mn, MinOp<float>());
  if (lane == 0) {
    wmax[warp] = mx;
    wmin[warp] = mn;
  }
  bad = __syncthreads_or(bad);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    mx = fmaxf(mx, wmax[w]);
    mn = fminf(mn, wmin[w]);
  }
  const bool all_ninf = mx == -kInf;  // the tile holds nothing but -inf (when !bad)
  const bool fast = !bad && (all_ninf || (mx - mn <= linear_range<float>() && fabsf(mx) < 1e30f));

  // The aggregate, and what the outputs need of it: p (the float prefix sums in the thread) and q0 (the
  // float sum of the threads before) for a linear tile, the log offset in double for an exact one.
  float q0 = 0.0f;
  double exact_off = neg_inf<double>(), aggregate;
  if (fast) {
    float p[kTileItems], run = 0.0f;
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) {
      const float e = all_ninf ? 0.0f : expf(v[k] - mx);  // -inf gives 0
      if (exclusive) {
        p[k] = run;
        run += e;
      } else {
        run += e;
        p[k] = run;
      }
    }
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) {  // each lane's loaded chunks were read above: no race
      own_chunk(xpose[warp], i) = make_float4(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
    }
    float total;
    q0 = block_exclusive_scan<false>(run, PlusOp<float>(), 0.0f, fscan, &total);  // fscan is not reused
    aggregate = all_ninf ? -kInfD : static_cast<double>(mx) + log(static_cast<double>(total));
  } else {
    exact_off = exact_thread_offset(x, base, n, s, reverse, dscan, &aggregate);
  }
  const int aggregate_bits = fast && !all_ninf ? kInexact : 0;

  // Publish the aggregate (the inclusive prefix for a row's first tile), then look back.
  if (threadIdx.x == 0) {
    if (j == 0) {
      ws.inclusive[tile] = aggregate;
      __threadfence();
      store_volatile(ws.flags + tile, kInclusive | aggregate_bits);
    } else {
      ws.aggregate[tile] = aggregate;
      __threadfence();
      store_volatile(ws.flags + tile, kAggregate | aggregate_bits);
    }
  }
  if (warp == 0) {
    double carry = -kInfD;
    int inexact = 0;
    if (j > 0) {
      for (index_t k = j - 1;; k -= 32) {  // lane l looks at tile k - l of the row
        const index_t q = k - lane;
        int flag = kInclusive;  // before the row: the empty prefix
        double value = -kInfD;
        if (q >= 0) {
          do {
            flag = load_volatile(ws.flags + first_tile + q);
            if (flag == 0) PE_SPIN_YIELD();
          } while (flag == 0);
          __threadfence();
          value = load_volatile((flag & kInclusive ? ws.inclusive : ws.aggregate) + first_tile + q);
        }
        const unsigned inclusive = __ballot_sync(0xffffffffu, flag & kInclusive);
        const int stop = __ffs(inclusive) - 1;  // the nearest tile with its inclusive prefix; -1: none
        const bool take = stop < 0 || lane <= stop;
        inexact |= __any_sync(0xffffffffu, take && (flag & kInexact));
        carry = lae(carry, warp_reduce(take ? value : -kInfD, lae));
        if (stop >= 0) break;
      }
      if (lane == 0) {
        ws.inclusive[tile] = lae(carry, aggregate);
        __threadfence();
        store_volatile(ws.flags + tile, kInclusive | (inexact ? kInexact : aggregate_bits));
      }
    }
    if (lane == 0) {
      carry_shared = carry;
      exact_shared = !inexact || carry == -kInfD;
      if (fast && !all_ninf) {  // the scale of the linear outputs (used only when they are linear)
        const double B = fmax(static_cast<double>(mx), carry);
        const float Bf = static_cast<float>(B);
        scale_shared[0] = Bf;
        scale_shared[1] = carry == -kInfD ? 0.0f : static_cast<float>(exp(carry - static_cast<double>(Bf)));
        scale_shared[2] = static_cast<float>(exp(static_cast<double>(mx) - static_cast<double>(Bf)));
      }
    }
  }
  __syncthreads();
  const double carry = carry_shared;
  const bool carry_exact = exact_shared;
  const bool carry_special = carry != carry || carry == kInfD;
  // Outputs: the prefix sum in own_chunk becomes the output of its position (as float). `hard`: an
  // output that neither float nor a double redo from this carry can certify (the row rescan).
  int fail = 0, hard = 0;
  bool written = false;  // the double paths store their outputs themselves
  if (fast && all_ninf) {  // every output is the carry
    const float cf = static_cast<float>(carry);
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) own_chunk(xpose[warp], i) = make_float4(cf, cf, cf, cf);
    hard = !carry_exact && fabs(carry) < kInfD && !(15.0 * fabs(carry) >= kCarrySlack);
  } else if (fast && !carry_special &&
             (carry == -kInfD || (fabs(carry) < 1e30 && static_cast<double>(mx) - carry <= linear_range<float>()))) {
    const float B = scale_shared[0], c = scale_shared[1], r = scale_shared[2];
    auto output = [&](float pk) {
      const float l = logf(fmaf(r, q0 + pk, c));  // an empty sum gives -inf
      const float o = B + l;
      if (fabsf(o) < kInf && !(15.0f * fabsf(o) >= kFloatSlack + 3.0f * fabsf(l))) {
        fail = 1;
        hard |= !carry_exact && !(15.0f * fabsf(o) >= kCarrySlack);
      }
      return o;
    };
#pragma unroll
    for (int i = 0; i < kTileItems / 4; ++i) {
      float4& f = own_chunk(xpose[warp], i);
      f = make_float4(output(f.x), output(f.y), output(f.z), output(f.w));
    }
    if (fail) atomicMax(&last_fail_shared, t0 + kTileItems - 1);
    if (hard) hard_shared = 1;
    if (__syncthreads_or(fail) && !hard_shared) {
      // Recompute positions [0, last] of the tile (whole threads' groups, up to the last failing output)
      // in double, e = exp(x - Md) with exact sums: the block takes kRowThreads consecutive positions
      // at a time, one each (one exp and one log per thread and step: a row's near-0 outputs are
      // usually within its first few dozen positions, so this is one step).
      const int last = last_fail_shared;
      const double Md = fmax(static_cast<double>(mx), carry);
      double acc = carry == -kInfD ? 0.0 : exp(carry - Md);  // the same in every thread
      for (int first = 0; first <= last; first += kRowThreads) {
        const int q = first + threadIdx.x;
        const index_t sq = j * kTile + q;
        const double e = q <= last ? exp(static_cast<double>(load_position(x, base, n, sq, reverse)) - Md) : 0.0;
        double total;
        const double before = acc + block_exclusive_scan(e, PlusOp<double>(), 0.0, dscan, &total);
        if (q <= last && sq < n) {
          out[base + (reverse ? n - 1 - sq : sq)] = store<T>(Md + log(exclusive ? before : before + e));
        }
        acc += total;
      }
      written = t0 <= last;  // those outputs were stored above
      hard = 0;
    }
  } else {  // exact: the log-add-exp scan in double from the carry
    if (fast) {
      double total;
      exact_off = exact_thread_offset(x, base, n, s, reverse, dscan, &total);
    }
    written = true;
    double run = lae(carry, exact_off);
#pragma unroll 1
    for (int k = 0; k < kTileItems && s + k < n; ++k) {
      const double vk = static_cast<double>(load_position(x, base, n, s + k, reverse));
      if (!exclusive) run = lae(run, vk);
      const double o = run;
      out[base + (reverse ? n - 1 - (s + k) : s + k)] = store<T>(o);
      hard |= !carry_exact && fabs(o) < kInfD && !(15.0 * fabs(o) >= kCarrySlack);
      if (exclusive) run = lae(run, vk);
    }
  }
  store_tile_striped(out, base, n, warp_s, reverse, xpose[warp], written);

  // The row's last tile to finish rescans it in double when some tile asked for it. The barrier, then
  // thread 0's fence before its atomic, order every thread's stores above before the rescan's (the
  // pattern of a cooperative-groups grid sync), so no thread needs a fence of its own.
  hard = __syncthreads_or(hard);
  if (threadIdx.x == 0) {
    if (hard) store_volatile(ws.redo + row, 1);
    __threadfence();
    const bool last = atomicAdd(ws.done + row, 1) == (int)tiles_per_row - 1;
    __threadfence();
    last_shared = last && load_volatile(ws.redo + row) != 0;
  }
  __syncthreads();
  if (last_shared) rescan_row(x, out, base, n, exclusive, reverse, row_temp, &row_stats, &row_carry);
}

}  // namespace

namespace lse {

template <typename T>
void launch_forward_tiles(const T* x, T* out, index_t outer, index_t n, index_t tiles_per_row, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  const index_t tiles = outer * tiles_per_row;
  const index_t ints = 1 + 2 * outer + tiles;  // counter, redo, done, flags: zeroed
  DeviceScratch<double> scratch(2 * tiles + (ints + 1) / 2, stream);
  TileScratch ws;
  ws.aggregate = scratch.ptr;
  ws.inclusive = scratch.ptr + tiles;
  int* zeroed = zeroed_ints(scratch.ptr + 2 * tiles, ints, stream);
  ws.counter = reinterpret_cast<unsigned*>(zeroed);
  ws.redo = zeroed + 1;
  ws.done = zeroed + 1 + outer;
  ws.flags = zeroed + 1 + 2 * outer;
  forward_tiles_kernel<T><<<(unsigned)tiles, kRowThreads, 0, stream>>>(x, out, n, tiles_per_row, ws, exclusive,
                                                                       reverse);
  check_launch("logcumsumexp");
}

#define PE_INSTANTIATE(T) \
  template void launch_forward_tiles<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace lse
}  // namespace paddle_ext::gpu
