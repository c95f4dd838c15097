// CUDA rnnt_simple_logprobs (formulas in paddle_ext/rnnt_simple_logprobs.h, shared with the CPU kernels):
// a row kernel for the shifted exps and maxima, a batched 32 x 32 shared-memory GEMM (T accumulation, as on
// the CPU) for the three vocabulary contractions, and one thread per cell / row for everything elementwise.
// The fallback cells' exact grad shares are added with atomics, after the GEMM terms (stream order).
// Symbols outside [0, C) are clamped (the CPU binding raises instead; a GPU check would synchronise).
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/rnnt_simple_logprobs.h"

namespace paddle_ext {
namespace gpu {
namespace {

constexpr int kRowThreads = 256;
constexpr int kTile = 32, kTileRows = 8;

// out[r, c] = exp(x[r, c] - max), row_max[r] = max (NaN when the row holds a NaN).
template <typename T>
__global__ void exp_rows_kernel(const T* x, T* out, T* row_max, index_t C) {
  __shared__ T smax[kRowThreads];
  __shared__ int snan[kRowThreads];
  const index_t r = blockIdx.x;
  const T* xr = x + r * C;
  T m = neg_inf<T>();
  int nan = 0;
  for (index_t c = threadIdx.x; c < C; c += blockDim.x) {
    const T v = xr[c];
    m = v > m ? v : m;
    nan |= v != v;
  }
  smax[threadIdx.x] = m;
  snan[threadIdx.x] = nan;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if ((int)threadIdx.x < step) {
      const T o = smax[threadIdx.x + step];
      smax[threadIdx.x] = o > smax[threadIdx.x] ? o : smax[threadIdx.x];
      snan[threadIdx.x] |= snan[threadIdx.x + step];
    }
    __syncthreads();
  }
  const T rm = snan[0] ? T(NAN) : smax[0];
  if (threadIdx.x == 0) row_max[r] = rm;
  for (index_t c = threadIdx.x; c < C; c += blockDim.x) out[r * C + c] = exp(xr[c] - rm);
}

// Batched C[b](i, j) = sum_k A(b, i, k) B(b, k, j), A(b, i, k) = A[b sa + i rsa + k csa], likewise B;
// C[b] row-major (ldc), overwritten. Block: a 32 x 32 tile of C, 32 x 8 threads, 4 rows each.
template <typename T>
__global__ void gemm_kernel(index_t M, index_t N, index_t K, const T* A, index_t sa, index_t rsa, index_t csa,
                            const T* B, index_t sb, index_t rsb, index_t csb, T* C, index_t sc, index_t ldc) {
  __shared__ T as[kTile][kTile + 1];
  __shared__ T bs[kTile][kTile + 1];
  const index_t b = blockIdx.z, i0 = (index_t)blockIdx.y * kTile, j0 = (index_t)blockIdx.x * kTile;
  A += b * sa;
  B += b * sb;
  const int tx = threadIdx.x, ty = threadIdx.y;
  T acc[kTile / kTileRows];
  for (int r = 0; r < kTile / kTileRows; ++r) acc[r] = T(0);
  for (index_t k0 = 0; k0 < K; k0 += kTile) {
    for (int r = ty; r < kTile; r += kTileRows) {
      const index_t i = i0 + r, k = k0 + tx;  // as[r][tx] = A(i0 + r, k0 + tx)
      as[r][tx] = (i < M && k < K) ? A[i * rsa + k * csa] : T(0);
      const index_t kk = k0 + r, j = j0 + tx;  // bs[r][tx] = B(k0 + r, j0 + tx)
      bs[r][tx] = (kk < K && j < N) ? B[kk * rsb + j * csb] : T(0);
    }
    __syncthreads();
    for (int k = 0; k < kTile; ++k) {
      const T bv = bs[k][tx];
      for (int r = 0; r < kTile / kTileRows; ++r) acc[r] += as[ty + r * kTileRows][k] * bv;
    }
    __syncthreads();
  }
  for (int r = 0; r < kTile / kTileRows; ++r) {
    const index_t i = i0 + ty + r * kTileRows, j = j0 + tx;
    if (i < M && j < N) C[b * sc + i * ldc + j] = acc[r];
  }
}

template <typename T>
void gemm(index_t batch, index_t M, index_t N, index_t K, const T* A, index_t sa, index_t rsa, index_t csa,
          const T* B, index_t sb, index_t rsb, index_t csb, T* C, index_t sc, index_t ldc, cudaStream_t stream) {
  if (batch == 0 || M == 0 || N == 0) return;
  const dim3 grid((unsigned)((N + kTile - 1) / kTile), (unsigned)((M + kTile - 1) / kTile), (unsigned)batch);
  gemm_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(M, N, K, A, sa, rsa, csa, B, sb, rsb, csb, C, sc, ldc);
}

__device__ inline int64_t clamp_symbol(int64_t s, index_t C) { return s < 0 ? 0 : (s >= C ? C - 1 : s); }

// One thread per cell (b, s, t), t in [0, T]: px / py from approx; t = T writes regular px's -inf column.
template <typename T>
__global__ void forward_cells_kernel(const T* lm, const T* am, const int64_t* symbols, const T* lm_max,
                                     const T* am_max, const T* approx, T* px, T* py, index_t B, index_t S,
                                     index_t L, index_t T_, index_t C, int64_t term, bool modified) {
  const index_t S1 = S + 1, T1 = modified ? T_ : T_ + 1;
  const index_t n = B * S1 * (T_ + 1);
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x) {
    const index_t t = i % (T_ + 1), s = (i / (T_ + 1)) % S1, b = i / ((T_ + 1) * S1);
    if (t == T_) {
      if (!modified && s < S) px[(b * S + s) * T1 + T_] = neg_inf<T>();
      continue;
    }
    const index_t row = L == 1 ? 0 : s;
    const T* lm_row = lm + (b * L + row) * C;
    const T* am_row = am + (b * T_ + t) * C;
    const T bound = rnnt_fallback_bound<T>(C);
    const double nrm = rnnt_normalizer<T>(approx[(b * L + row) * T_ + t],
                                          static_cast<double>(lm_max[b * L + row]) + am_max[b * T_ + t], bound,
                                          lm_row, am_row, C);
    py[(b * S1 + s) * T_ + t] = static_cast<T>(static_cast<double>(am_row[term]) + lm_row[term] - nrm);
    if (s < S) {
      const int64_t sym = clamp_symbol(symbols[b * S + s], C);
      px[(b * S + s) * T1 + t] = static_cast<T>(static_cast<double>(am_row[sym]) + lm_row[sym] - nrm);
    }
  }
}

// G[row, t]: the grad of the normaliser of lm row `row` on frame t, summed over the s that use the row.
template <typename T>
__device__ inline T cell_grad(const T* px_grad, const T* py_grad, index_t b, index_t row, index_t t, index_t S,
                              index_t L, index_t T_, index_t T1) {
  T g = T(0);
  for (index_t s = L == 1 ? 0 : row; s < (L == 1 ? S + 1 : row + 1); ++s) {
    g += py_grad[(b * (S + 1) + s) * T_ + t];
    if (s < S) g += px_grad[(b * S + s) * T1 + t];
  }
  return g;
}

// w = G / approx, 0 for the fallback cells.
template <typename T>
__global__ void weights_kernel(const T* approx, const T* px_grad, const T* py_grad, T* w, index_t B, index_t S,
                               index_t L, index_t T_, index_t C, bool modified) {
  const index_t T1 = modified ? T_ : T_ + 1, n = B * L * T_;
  const T bound = rnnt_fallback_bound<T>(C);
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x) {
    const index_t t = i % T_, row = (i / T_) % L, b = i / (T_ * L);
    const T a = approx[i];
    w[i] = a < bound ? T(0) : cell_grad(px_grad, py_grad, b, row, t, S, L, T_, T1) / a;
  }
}

// out = -factor * out, elementwise.
template <typename T>
__global__ void scale_kernel(T* out, const T* factor, index_t n) {
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x)
    out[i] = -factor[i] * out[i];
}

// One thread per context (b, s): its gathered symbol and blank terms into lm_grad's row of s (atomics: with
// L = 1 every s adds to the same row).
template <typename T>
__global__ void lm_terms_kernel(const int64_t* symbols, const T* px_grad, const T* py_grad, T* lm_grad, index_t B,
                                index_t S, index_t L, index_t T_, index_t C, int64_t term, bool modified) {
  const index_t S1 = S + 1, T1 = modified ? T_ : T_ + 1;
  for (index_t r = blockIdx.x * (index_t)blockDim.x + threadIdx.x; r < B * S1; r += (index_t)gridDim.x * blockDim.x) {
    const index_t b = r / S1, s = r % S1;
    double sx = 0, sy = 0;
    for (index_t t = 0; t < T_; ++t) {
      if (s < S) sx += px_grad[(b * S + s) * T1 + t];
      sy += py_grad[r * T_ + t];
    }
    T* lg_row = lm_grad + (b * L + (L == 1 ? 0 : s)) * C;
    if (s < S) atomicAdd(lg_row + clamp_symbol(symbols[b * S + s], C), static_cast<T>(sx));
    atomicAdd(lg_row + term, static_cast<T>(sy));
  }
}

// One thread per row (b, t) of am_grad.
template <typename T>
__global__ void am_terms_kernel(const int64_t* symbols, const T* px_grad, const T* py_grad, T* am_grad, index_t B,
                                index_t S, index_t T_, index_t C, int64_t term, bool modified) {
  const index_t S1 = S + 1, T1 = modified ? T_ : T_ + 1;
  for (index_t r = blockIdx.x * (index_t)blockDim.x + threadIdx.x; r < B * T_; r += (index_t)gridDim.x * blockDim.x) {
    const index_t b = r / T_, t = r % T_;
    double sy = 0;
    for (index_t s = 0; s < S1; ++s) {
      if (s < S) am_grad[r * C + clamp_symbol(symbols[b * S + s], C)] += px_grad[(b * S + s) * T1 + t];
      sy += py_grad[(b * S1 + s) * T_ + t];
    }
    am_grad[r * C + term] += static_cast<T>(sy);
  }
}

// One thread per cell: a fallback cell's exact share of G P.
template <typename T>
__global__ void fallback_grad_kernel(const T* lm, const T* am, const T* approx, const T* px_grad, const T* py_grad,
                                     T* lm_grad, T* am_grad, index_t B, index_t S, index_t L, index_t T_,
                                     index_t C, bool modified) {
  const index_t T1 = modified ? T_ : T_ + 1, n = B * L * T_;
  const T bound = rnnt_fallback_bound<T>(C);
  for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < n; i += (index_t)gridDim.x * blockDim.x) {
    if (!(approx[i] < bound)) continue;
    const index_t t = i % T_, row = (i / T_) % L, b = i / (T_ * L);
    const T g = cell_grad(px_grad, py_grad, b, row, t, S, L, T_, T1);
    const T* lm_row = lm + (b * L + row) * C;
    const T* am_row = am + (b * T_ + t) * C;
    const double nrm = rnnt_exact_lse(lm_row, am_row, C);
    for (index_t c = 0; c < C; ++c) {
      const double p = exp(static_cast<double>(lm_row[c]) + static_cast<double>(am_row[c]) - nrm);
      const T share = static_cast<T>(p == p ? static_cast<double>(g) * p : 0.0);
      atomicAdd(lm_grad + (b * L + row) * C + c, -share);
      atomicAdd(am_grad + (b * T_ + t) * C + c, -share);
    }
  }
}

template <typename T>
void exp_rows(const T* x, T* out, T* row_max, index_t rows, index_t C, cudaStream_t stream) {
  if (rows == 0) return;
  exp_rows_kernel<T><<<(unsigned)rows, kRowThreads, 0, stream>>>(x, out, row_max, C);
}

}  // namespace

template <typename T>
void rnnt_simple_logprobs_forward(const T* lm, const T* am, const int64_t* symbols, T* px, T* py, T* approx,
                                  index_t B, index_t S, index_t L, index_t T_, index_t C, int64_t termination_symbol,
                                  bool modified, cudaStream_t stream) {
  DeviceScratch<T> lp(B * L * C, stream), ap(B * T_ * C, stream), lm_max(B * L, stream), am_max(B * T_, stream);
  exp_rows(lm, lp.ptr, lm_max.ptr, B * L, C, stream);
  exp_rows(am, ap.ptr, am_max.ptr, B * T_, C, stream);
  // approx[b](row, t) = sum_c lp[b](row, c) ap[b](t, c)
  gemm<T>(B, L, T_, C, lp.ptr, L * C, C, 1, ap.ptr, T_ * C, 1, C, approx, L * T_, T_, stream);
  const index_t cells = B * (S + 1) * (T_ + 1);
  if (cells > 0) {
    forward_cells_kernel<T><<<grid_size(cells, 256), 256, 0, stream>>>(lm, am, symbols, lm_max.ptr, am_max.ptr,
                                                                       approx, px, py, B, S, L, T_, C,
                                                                       termination_symbol, modified);
  }
  check_launch("rnnt_simple_logprobs_forward");
}

template <typename T>
void rnnt_simple_logprobs_backward(const T* lm, const T* am, const int64_t* symbols, const T* approx,
                                   const T* px_grad, const T* py_grad, T* lm_grad, T* am_grad, index_t B, index_t S,
                                   index_t L, index_t T_, index_t C, int64_t termination_symbol, bool modified,
                                   cudaStream_t stream) {
  if (T_ == 0 || C == 0) {
    cudaMemsetAsync(lm_grad, 0, sizeof(T) * B * L * C, stream);
    cudaMemsetAsync(am_grad, 0, sizeof(T) * B * T_ * C, stream);
    check_launch("rnnt_simple_logprobs_backward");
    return;
  }
  DeviceScratch<T> lp(B * L * C, stream), ap(B * T_ * C, stream), lm_max(B * L, stream), am_max(B * T_, stream);
  DeviceScratch<T> w(B * L * T_, stream);
  exp_rows(lm, lp.ptr, lm_max.ptr, B * L, C, stream);
  exp_rows(am, ap.ptr, am_max.ptr, B * T_, C, stream);
  const index_t cells = B * L * T_;
  if (cells > 0) {
    weights_kernel<T><<<grid_size(cells, 256), 256, 0, stream>>>(approx, px_grad, py_grad, w.ptr, B, S, L, T_, C,
                                                                 modified);
  }
  // lm_grad[b](row, c) = sum_t w(row, t) ap(t, c);  am_grad[b](t, c) = sum_row w(row, t) lp(row, c)
  gemm<T>(B, L, C, T_, w.ptr, L * T_, T_, 1, ap.ptr, T_ * C, C, 1, lm_grad, L * C, C, stream);
  gemm<T>(B, T_, C, L, w.ptr, L * T_, 1, T_, lp.ptr, L * C, C, 1, am_grad, T_ * C, C, stream);
  if (B * L * C > 0) scale_kernel<T><<<grid_size(B * L * C, 256), 256, 0, stream>>>(lm_grad, lp.ptr, B * L * C);
  if (B * T_ * C > 0) scale_kernel<T><<<grid_size(B * T_ * C, 256), 256, 0, stream>>>(am_grad, ap.ptr, B * T_ * C);
  const index_t S1 = S + 1;
  if (B * S1 > 0) {
    lm_terms_kernel<T><<<grid_size(B * S1, 128), 128, 0, stream>>>(symbols, px_grad, py_grad, lm_grad, B, S, L, T_, C,
                                                                   termination_symbol, modified);
  }
  if (B * T_ > 0) {
    am_terms_kernel<T><<<grid_size(B * T_, 128), 128, 0, stream>>>(symbols, px_grad, py_grad, am_grad, B, S, T_, C,
                                                                   termination_symbol, modified);
  }
  if (cells > 0) {
    fallback_grad_kernel<T><<<grid_size(cells, 256), 256, 0, stream>>>(lm, am, approx, px_grad, py_grad, lm_grad,
                                                                       am_grad, B, S, L, T_, C, modified);
  }
  check_launch("rnnt_simple_logprobs_backward");
}

#define PE_INSTANTIATE(T)                                                                                          \
  template void rnnt_simple_logprobs_forward<T>(const T*, const T*, const int64_t*, T*, T*, T*, index_t, index_t, \
                                                index_t, index_t, index_t, int64_t, bool, cudaStream_t);           \
  template void rnnt_simple_logprobs_backward<T>(const T*, const T*, const int64_t*, const T*, const T*, const T*, \
                                                 T*, T*, index_t, index_t, index_t, index_t, index_t, int64_t, bool, \
                                                 cudaStream_t);
PE_FOR_FLOAT32_64(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
