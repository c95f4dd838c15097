// Row-major float32 GEMM for the adaptive softmax's projections, on the oneDNN that the user's Paddle
// already loaded (no Paddle header, nothing bundled): dnnl_sgemm is looked up at run time in the
// libdnnl.so.3 that libpaddle.so mapped (dlopen with RTLD_NOLOAD), and called on paddle_ext's thread
// count (max_threads(), parallel.h). Where no oneDNN is loaded (a Paddle built without it), a plain
// blocked loop computes the same product, correctly but slowly: the Python API then keeps Paddle's matmul
// (gemm_backend() says which one runs).
#pragma once

#include <cstdint>

namespace paddle_ext {
namespace cpu {

// "onednn" when dnnl_sgemm was found, else "reference".
const char* gemm_backend();

// C[m, n] = op(A) @ op(B) + beta * C, row-major; op(A) is [m, k] (A is [k, m] when trans_a), op(B) is
// [k, n] (B is [n, k] when trans_b); lda, ldb, ldc are the row strides of A, B, C as stored.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same in float64 (the fused joiner's exact path): the blocked loop, oneDNN has no dgemm.
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
           const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  dgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cpu
}  // namespace paddle_ext
