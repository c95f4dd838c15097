// sgemm through the oneDNN of the user's Paddle (gemm.h).
#include "paddle_ext/gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

// oneDNN's C API (dnnl.h): dnnl_dim_t is int64_t, dnnl_status_t an enum whose dnnl_success is 0. The
// prototype is declared here rather than included, so that nothing of oneDNN is needed to build.
using DnnlSgemm = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

DnnlSgemm find_dnnl_sgemm() {
  if (const char* off = std::getenv("PADDLE_EXT_DISABLE_ONEDNN_GEMM"); off && *off && std::strcmp(off, "0") != 0)
    return nullptr;
  // Only a oneDNN already in the process (Paddle's CPU wheels load paddle/libs/libdnnl.so.3 with
  // libpaddle.so): RTLD_NOLOAD never maps a second copy.
  for (const char* soname : {"libdnnl.so.3", "libdnnl.so"}) {
    if (void* lib = dlopen(soname, RTLD_NOLOAD | RTLD_LAZY)) {
      if (void* fn = dlsym(lib, "dnnl_sgemm")) return reinterpret_cast<DnnlSgemm>(fn);
    }
  }
  return nullptr;
}

DnnlSgemm dnnl_sgemm() {
  static const DnnlSgemm fn = find_dnnl_sgemm();
  return fn;
}

// The fallback: rows of C split over the threads; per row, C[i, :] += op(A)[i, p] * op(B)[p, :] (the inner
// loop runs along a row of B when it is stored [k, n], else a dot product). Double accumulation is not
// needed for the bound the docs give (k float32 products summed in float32).
template <typename T>
void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                    const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  parallel_for(0, m, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, n * k)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T* ci = c + i * ldc;
      if (beta == T(0)) {
        std::fill(ci, ci + n, T(0));
      } else if (beta != T(1)) {
        for (int64_t j = 0; j < n; ++j) ci[j] *= beta;
      }
      for (int64_t p = 0; p < k; ++p) {
        const T aip = trans_a ? a[p * lda + i] : a[i * lda + p];
        if (!trans_b) {
          const T* bp = b + p * ldb;
          for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
        } else {
          for (int64_t j = 0; j < n; ++j) ci[j] += aip * b[j * ldb + p];
        }
      }
    }
  });
}

#ifdef _OPENMP
// oneDNN (built on the same OpenMP runtime, Paddle's libiomp5) runs on the calling thread's OpenMP count,
// which Paddle sets to FLAGS_paddle_num_threads (1): for the call it is ours, then restored.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }

 private:
  int saved_;
};
#endif

// C = beta * C where k = 0 (an empty sum); false where there is a product to compute.
template <typename T>
bool empty_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k > 0) return false;
  for (int64_t i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];
  }
  return true;
}

}  // namespace

const char* gemm_backend() { return dnnl_sgemm() ? "onednn" : "reference"; }

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  if (DnnlSgemm fn = dnnl_sgemm()) {
#ifdef _OPENMP
    const ShortSpin spin;
    const OmpThreads threads(max_threads());
#endif
    const int status = fn(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
    if (status == 0) return;
    // (an argument oneDNN rejects: the reference path computes it, or reports nothing worse)
  }
  reference_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
           const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  reference_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cpu
}  // namespace paddle_ext

extern "C" __attribute__((visibility("default"))) const char* paddle_ext_gemm_backend() {
  return paddle_ext::cpu::gemm_backend();
}
