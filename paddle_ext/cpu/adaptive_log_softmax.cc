// CPU adaptive_log_softmax kernels on raw pointers (no Paddle header): rows split across the cores,
// each row read twice for its lse (max, then sum of exp) and once more for an elementwise output.
// The bodies (adaptive_log_softmax_kernels.inc) are compiled for the baseline ISA and for AVX2+FMA;
// the AVX2 copy (8-wide exp) runs where the CPU has it — about 2x on the exp-bound loops.
// FP compares may not trap here, so GCC can turn the clamps/selects of als_expf_host into vector blends
// (with the default -ftrapping-math the exp loops stay scalar and branchy). No FP exceptions are used.
#pragma GCC optimize("no-trapping-math")

#include "paddle_ext/adaptive_log_softmax.h"

#include <algorithm>
#include <cstdlib>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {

namespace baseline {
#include "adaptive_log_softmax_kernels.inc"
}  // namespace baseline

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PE_ALS_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#include "adaptive_log_softmax_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace {
inline bool use_avx2() {
#ifdef PE_ALS_AVX2
  // PADDLE_EXT_NO_AVX2=1 forces the baseline copy (tests compare the two).
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          std::getenv("PADDLE_EXT_NO_AVX2") == nullptr;
  return yes;
#else
  return false;
#endif
}
}  // namespace

#ifdef PE_ALS_AVX2
#define PE_ALS_DISPATCH(fn, ...) (use_avx2() ? avx2::fn(__VA_ARGS__) : baseline::fn(__VA_ARGS__))
#else
#define PE_ALS_DISPATCH(fn, ...) baseline::fn(__VA_ARGS__)
#endif

template <typename T>
void als_target_forward(const T* logits, const int64_t* target, T* out, acc_t<T>* lse, index_t m, index_t k) {
  PE_ALS_DISPATCH(als_target_forward_impl<T>, logits, target, out, lse, m, k);
}

template <typename T>
void als_target_backward(const T* logits, const int64_t* target, const acc_t<T>* lse, const T* out_grad,
                         T* logits_grad, index_t m, index_t k) {
  PE_ALS_DISPATCH(als_target_backward_impl<T>, logits, target, lse, out_grad, logits_grad, m, k);
}

template <typename T>
void als_full_forward(const T* logits, const T* offset, T* out, acc_t<T>* lse, index_t m, index_t k) {
  PE_ALS_DISPATCH(als_full_forward_impl<T>, logits, offset, out, lse, m, k);
}

template <typename T>
void als_full_backward(const T* logits, const acc_t<T>* lse, const T* out_grad, T* logits_grad, T* offset_grad,
                       index_t m, index_t k) {
  PE_ALS_DISPATCH(als_full_backward_impl<T>, logits, lse, out_grad, logits_grad, offset_grad, m, k);
}

#define PE_INSTANTIATE(T)                                                                                     \
  template void als_target_forward<T>(const T*, const int64_t*, T*, acc_t<T>*, index_t, index_t);            \
  template void als_target_backward<T>(const T*, const int64_t*, const acc_t<T>*, const T*, T*, index_t,     \
                                       index_t);                                                             \
  template void als_full_forward<T>(const T*, const T*, T*, acc_t<T>*, index_t, index_t);                    \
  template void als_full_backward<T>(const T*, const acc_t<T>*, const T*, T*, T*, index_t, index_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
PE_INSTANTIATE(float16_t)
PE_INSTANTIATE(bfloat16_t)
#undef PE_INSTANTIATE

}  // namespace cpu
}  // namespace paddle_ext
