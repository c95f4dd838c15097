// CUDA logcumsumexp: the dispatcher. Each strategy is a file of this folder (launch.cuh lists them):
//   inner == 1 (scanned axis contiguous): one block per row, single pass, tiles of kRowThreads x kItems
//     with the carry held by every thread (rows.cu). A tile is scanned in linear form, as on the CPU: with
//     M the tile's max (and the carry's), out = M + log(carry + prefix sum of exp(x - M)) -- one exp and one
//     log per element and a plain-sum cub::BlockScan. The backward is the same in linear form,
//     dx = exp(x + M) * (signed prefix of g exp(-out - M)) -- two exps, no log. Tiles holding NaN/+inf
//     (or spanning too wide a range for exp(x - M)) take the exact log-add-exp BlockScan instead, so
//     the edge semantics are those of log_math.h. float32 accumulates in double, half types in float.
//     Many short rows take one warp per row (rows.cu); a few long rows are cut into chunks, one block
//     each (chunks.cu), so that they fill the device.
//   inner  > 1 (strided axis): one thread per column, walking the axis with a LogSumAcc (one exp and one
//     log per element); neighbouring threads read neighbouring addresses, so every step is coalesced,
//     and no transpose buffer is needed. When there are few lines (e.g. axis 0 of [4096, 4096]), each
//     column's axis is split over 32 threads of a block (columns.cu).
// Forward float32/float16/bfloat16 on rows of >= 2048 and on strided axes of >= 256 steps x >= 32 columns
// take the float tiles instead (tiles.cu, column_tiles.cu): float exps and sums, a float64 carry from a
// single-pass decoupled look-back, a per-output error bound with a float64 redo. The kernels above stay
// for the other shapes, for float64, for the backward, and for float16/bfloat16 where they fill the
// device (see logcumsumexp_forward).
// The per-element math lives in paddle_ext/logcumsumexp.h and log_math.h, shared with the CPU.
#include <type_traits>

#include "launch.cuh"
#include "scan.cuh"
#include "tile_io.cuh"

namespace paddle_ext::gpu {
using namespace lse;  // NOLINT: this folder's launchers

template <typename T>
void logcumsumexp_forward(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  if (outer == 0 || n == 0 || inner == 0) return;
  const index_t chunks = (n + kChunk - 1) / kChunk;
  const index_t tiles_per_row = (n + kTile - 1) / kTile;
  if constexpr (!std::is_same<T, double>::value) {
    // float16/bfloat16 already accumulate in float in the older kernels; where those fill the device
    // (many rows of <= kWarpRowMax, or >= kHalfColumnLinesMin strided lines of <= kWarpRowMax steps, or
    // the chunks of a few long rows) they measured faster than the tiles, so they keep them.
    constexpr bool kHalf = !std::is_same<T, float>::value;
    const bool half_rows_old =
        kHalf && ((n <= kWarpRowMax && outer >= kWarpRowsMin) || (chunks > 1 && outer < kFewRows));
    const bool half_columns_old = kHalf && n <= kWarpRowMax && outer * inner >= kHalfColumnLinesMin;
    if (inner == 1 && n >= kTileRowMin && outer * tiles_per_row < (1 << 30) && !half_rows_old) {
      launch_forward_tiles(x, out, outer, n, tiles_per_row, exclusive, reverse, stream);
      return;
    }
    const index_t column_tiles = outer * ((inner + 31) / 32) * ((n + kColTile - 1) / kColTile);
    if (inner >= 32 && n >= kColTileMinSteps && column_tiles < (1 << 26) && outer * inner < (index_t(1) << 30) &&
        !half_columns_old) {
      launch_forward_column_tiles(x, out, outer, n, inner, exclusive, reverse, stream);
      return;
    }
  }
  if (inner == 1 && chunks > 1 && outer < kFewRows) {
    launch_forward_chunks(x, out, outer, n, chunks, exclusive, reverse, stream);
  } else if (inner == 1 && n <= kWarpRowMax && outer >= kWarpRowsMin) {
    launch_forward_rows_warp(x, out, outer, n, exclusive, reverse, stream);
  } else if (inner == 1) {
    launch_forward_rows(x, out, outer, n, exclusive, reverse, stream);
  } else {
    launch_forward_columns(x, out, outer, n, inner, exclusive, reverse, stream);
  }
}

template <typename T>
void logcumsumexp_backward(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                           index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
  if (outer == 0 || n == 0 || inner == 0) return;
  // The grad of x[j] gathers the outputs j fed: the same scan, run in the opposite direction.
  const index_t chunks = (n + kChunk - 1) / kChunk;
  if (inner == 1 && chunks > 1 && outer < kFewRows) {
    launch_backward_chunks(x, out, out_grad, x_grad, outer, n, chunks, exclusive, !reverse, stream);
  } else if (inner == 1) {
    launch_backward_rows(x, out, out_grad, x_grad, outer, n, exclusive, !reverse, stream);
  } else {
    launch_backward_columns(x, out, out_grad, x_grad, outer, n, inner, exclusive, !reverse, stream);
  }
}

#define PE_INSTANTIATE(T)                                                                                  \
  template void logcumsumexp_forward<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t); \
  template void logcumsumexp_backward<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool,  \
                                         bool, cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace paddle_ext::gpu
