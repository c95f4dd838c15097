// CUDA logcumsumexp: one host launcher per strategy (defined in the file named beside it), called by the
// dispatcher (logcumsumexp.cu). T is float, double, float16_t or bfloat16_t; `reverse` is the scan direction.
#pragma once

#include <cuda_runtime.h>

#include "paddle_ext/common.h"

namespace paddle_ext::gpu::lse {

// rows.cu: one block per contiguous row; the warp kernel: one warp per row (many rows up to kWarpRowMax).
template <typename T>
void launch_forward_rows(const T* x, T* out, index_t rows, index_t n, bool exclusive, bool reverse, cudaStream_t stream);
template <typename T>
void launch_forward_rows_warp(const T* x, T* out, index_t rows, index_t n, bool exclusive, bool reverse,
                              cudaStream_t stream);
template <typename T>
void launch_backward_rows(const T* x, const T* out, const T* out_grad, T* x_grad, index_t rows, index_t n,
                          bool exclusive, bool reverse, cudaStream_t stream);
// chunks.cu: a few long rows cut into chunks of kChunk positions, one block each.
template <typename T>
void launch_forward_chunks(const T* x, T* out, index_t rows, index_t n, index_t chunks, bool exclusive, bool reverse,
                           cudaStream_t stream);
template <typename T>
void launch_backward_chunks(const T* x, const T* out, const T* out_grad, T* x_grad, index_t rows, index_t n,
                            index_t chunks, bool exclusive, bool reverse, cudaStream_t stream);
// tiles.cu: float tiles with a decoupled look-back along contiguous rows.
template <typename T>
void launch_forward_tiles(const T* x, T* out, index_t outer, index_t n, index_t tiles_per_row, bool exclusive,
                          bool reverse, cudaStream_t stream);
// columns.cu: a strided axis, one thread per column (or its axis cut into segments).
template <typename T>
void launch_forward_columns(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse,
                            cudaStream_t stream);
template <typename T>
void launch_backward_columns(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                             index_t inner, bool exclusive, bool reverse, cudaStream_t stream);
// column_tiles.cu: float tiles on a strided axis, 32 columns x kColTile steps a tile.
template <typename T>
void launch_forward_column_tiles(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive,
                                 bool reverse, cudaStream_t stream);


}  // namespace paddle_ext::gpu::lse
