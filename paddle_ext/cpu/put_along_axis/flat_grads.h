// put_along_axis along the last axis (inner == 1) on the CPU: the grads of every reduce, a whole outer row
// at a time (see flat.h).
#pragma once

#include <cstring>
#include <type_traits>

#include "flat.h"
#include "paddle_ext/vec_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace paddle_ext {
namespace cpu {
namespace put {

// Grads for every mode from per-row statistics: count (contributions; Assign: taken by a later
// position) and aux (Min/Max: contributors matching the result); mul by exclusive products
// (flat_mul_row). The formulas and their arguments are those of the generic grads (backward.h).

// out[j] = row[wrap(idx[j])], 0 for an index out of range: `add`'s values_grad along the last axis.
// float32 with int64 indices uses AVX-512's masked gathers where the CPU has them (the scalar loop
// costs ~9 instructions per element).
template <typename T, typename Idx>
void gather_row(const T* row, const Idx* idx, T* out, index_t m, index_t n, T zero);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) inline void gather_row_avx512(const float* row, const int64_t* idx, float* out,
                                                           index_t m, index_t n) {
  const __m512i vn = _mm512_set1_epi64(n), vneg = _mm512_set1_epi64(-n), vzero = _mm512_setzero_si512();
  index_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m512i k = _mm512_loadu_si512(idx + j);
    const __mmask8 ok = _mm512_cmpge_epi64_mask(k, vneg) & _mm512_cmplt_epi64_mask(k, vn);
    k = _mm512_mask_add_epi64(k, _mm512_cmplt_epi64_mask(k, vzero), k, vn);
    _mm256_storeu_ps(out + j, _mm512_mask_i64gather_ps(_mm256_setzero_ps(), ok, k, row, 4));
  }
  for (; j < m; ++j) out[j] = index_in_range(idx[j], n) ? row[wrap_index(idx[j], n)] : 0.0f;
}
#endif

template <typename T, typename Idx>
void gather_row(const T* row, const Idx* idx, T* out, index_t m, index_t n, T zero) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same<T, float>::value && std::is_same<Idx, int64_t>::value) {
    if (simd::simd_level() == 2) return gather_row_avx512(row, idx, out, m, n);
  }
#endif
  for (index_t j = 0; j < m; ++j) {
    const index_t k = static_cast<index_t>(idx[j]);
    out[j] = index_in_range(k, n) ? row[wrap_index(k, n)] : zero;
  }
}

// mul's grads on one row: the product of a slot's other factors is the product of the factors before
// (prefix, arr's value first with include_self) times those after (suffix), multiplications only, so
// exact at zeros and non-finite values. `run` [n] holds the running prefix, then the running suffix
// (in the end: the product of all values, arr's grad factor); `pre` [m] each position's prefix.
template <typename T, typename Idx>
void flat_mul_row(const T* arr, const Idx* ir, const T* vr, const T* g, T* ag, T* vg, int32_t* cnt, acc_t<T>* run,
                  acc_t<T>* pre, index_t n, index_t m, bool include_self) {
  using A = acc_t<T>;
  const bool count = !include_self && ag;  // arr_grad then needs to know the written slots
  if (vg) {
    for (index_t k = 0; k < n; ++k) run[k] = include_self ? static_cast<A>(load(arr[k])) : A(1);
    for (index_t j = 0; j < m; ++j) {
      const index_t k = static_cast<index_t>(ir[j]);
      if (!index_in_range(k, n)) continue;
      const index_t kk = wrap_index(k, n);
      pre[j] = run[kk];
      run[kk] *= static_cast<A>(load(vr[j]));
    }
  }
  for (index_t k = 0; k < n; ++k) run[k] = A(1);
  if (count) std::memset(cnt, 0, n * sizeof(int32_t));
  for (index_t jj = 0; jj < m; ++jj) {
    const index_t j = m - 1 - jj, k = static_cast<index_t>(ir[j]);
    if (!index_in_range(k, n)) {
      if (vg) vg[j] = store<T>(A(0));
      continue;
    }
    const index_t kk = wrap_index(k, n);
    if (vg)
      vg[j] = store<T>(values_grad_of<Reduce::Mul, A>(static_cast<A>(load(g[kk])), A(0), A(0), 1, 0, pre[j] * run[kk],
                                                      include_self));
    run[kk] *= static_cast<A>(load(vr[j]));
    if (count) ++cnt[kk];
  }
  if (!ag) return;
  for (index_t k = 0; k < n; ++k)
    ag[k] = store<T>(arr_grad_of<Reduce::Mul, A>(static_cast<A>(load(g[k])), A(0), A(0), count ? cnt[k] : 1, 0, run[k],
                                                 include_self));
}

template <Reduce R, typename T, typename Idx>
void flat_backward(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad, T* vg,
                   const Geometry& geo, const Plan& plan, bool include_self, const int32_t* counts) {
  using A = acc_t<T>;
  constexpr bool kMul = R == Reduce::Mul, kMinMax = R == Reduce::Min || R == Reduce::Max;
  constexpr bool kMean = R == Reduce::Mean;
  // Counts where the generic grads keep them (without them every count reads as 1); mean's from the forward
  // when it kept them.
  const bool need_count = R == Reduce::Assign || R == Reduce::Mean || !include_self;
  const index_t n = geo.n, m = geo.m;
  const size_t per_row = n * 2 * sizeof(int32_t) + (kMul ? (n + m) * sizeof(A) : 0) + (kMean ? n * sizeof(T) : 0);
  const T zero = store<T>(A(0));
  for_outer_rows(geo, plan, per_row, [&](index_t o0, index_t o1, char* scratch) {
    int32_t* const own_cnt = reinterpret_cast<int32_t*>(scratch);
    int32_t* const aux = own_cnt + n;
    A* const run = reinterpret_cast<A*>(aux + n);
    T* const q = reinterpret_cast<T*>(aux + n);  // mean: a slot's values_grad (run is mul's)
    for (index_t o = o0; o < o1; ++o) {
      const index_t s0 = o * n, p0 = o * m;
      const Idx* ir = idx + p0;
      const T* vr = values + p0;
      if constexpr (kMul) {
        flat_mul_row<T, Idx>(arr + s0, ir, vr, g + s0, arr_grad ? arr_grad + s0 : nullptr, vg ? vg + p0 : nullptr, own_cnt,
                             run, run + n, n, m, include_self);
        continue;
      }
      const bool counted = kMean && counts;  // the forward's counts: no count pass
      int32_t* const cnt = counted ? const_cast<int32_t*>(counts + s0) : own_cnt;
      if (need_count && !counted) std::memset(cnt, 0, n * sizeof(int32_t));
      int32_t nan_result = 0;  // some slot of the row is NaN: only then is same_value needed below
      if (kMinMax)
        for (index_t k = 0; k < n; ++k) nan_result |= int32_t(is_nan(load(out[s0 + k])));
      // The rest of the row, with `matches` = same_value where the row has a NaN result and a plain
      // == where it has none (cheaper in these loops). By-value captures: by reference they would be
      // reloaded on every element.
      auto rest = [=](auto nan_aware) {
        constexpr bool kNan = decltype(nan_aware)::value;
        if (kMinMax)
          for (index_t k = 0; k < n; ++k)
            aux[k] = int32_t(include_self) & int32_t(matches<kNan>(load(arr[s0 + k]), load(out[s0 + k])));
        // Statistics: Assign visits in reverse, so that a slot's first visitor is its winner and
        // counts then say whether a later position took the slot.
        if (R == Reduce::Assign) {
          for (index_t jj = 0; jj < m; ++jj) {
            const index_t j = m - 1 - jj, k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) {
              if (vg) vg[p0 + j] = zero;
              continue;
            }
            const index_t kk = wrap_index(k, n);
            if (vg) vg[p0 + j] = pick(cnt[kk] > 0, zero, g[s0 + kk]);
            ++cnt[kk];
          }
        } else if ((need_count && !counted) || kMinMax) {
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) continue;
            const index_t kk = wrap_index(k, n);
            if (need_count && !counted) ++cnt[kk];
            if (kMinMax) aux[kk] += int32_t(matches<kNan>(load(vr[j]), load(out[s0 + kk])));
          }
        }
        if (vg && R == Reduce::Add) {
          gather_row<T, Idx>(g + s0, ir, vg + p0, m, n, zero);
        } else if (vg && kMean) {  // a slot's share once per slot, then add's gather of it
          for (index_t k = 0; k < n; ++k)
            q[k] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s0 + k])), A(0), A(0), cnt[k], 0, A(1),
                                                 include_self));
          gather_row<T, Idx>(q, ir, vg + p0, m, n, zero);
        } else if (vg && R != Reduce::Assign)
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) {
              vg[p0 + j] = zero;
              continue;
            }
            const index_t s = s0 + wrap_index(k, n), kk = s - s0;
            const T gs = g[s];
            if (kMinMax) {  // a single contributor takes the grad undivided, as the generic grads do
              vg[p0 + j] = aux[kk] > 1 ? store<T>(values_grad_of<R, A, kNan>(static_cast<A>(load(gs)), static_cast<A>(load(vr[j])),
                                                                             static_cast<A>(load(out[s])), 1, aux[kk], A(1), include_self))
                                       : pick(matches<kNan>(load(vr[j]), load(out[s])), gs, zero);
            } else {
              vg[p0 + j] = store<T>(values_grad_of<R, A>(static_cast<A>(load(gs)), A(0), A(0),
                                                         R == Reduce::Mean ? cnt[kk] : 1, 0, A(1), include_self));
            }
          }
        if (!arr_grad) return;
        T* ag = arr_grad + s0;
        const T* gr = g + s0;
        if (R == Reduce::Assign) {
          for (index_t k = 0; k < n; ++k) ag[k] = pick(cnt[k] > 0, zero, gr[k]);
        } else if (R == Reduce::Add && include_self) {
          std::memcpy(ag, gr, n * sizeof(T));
        } else {
#pragma GCC ivdep
          for (index_t k = 0; k < n; ++k) {
            ag[k] = store<T>(arr_grad_of<R, A, kNan>(static_cast<A>(load(gr[k])), kMinMax ? static_cast<A>(load(arr[s0 + k])) : A(0),
                                                     kMinMax ? static_cast<A>(load(out[s0 + k])) : A(0), need_count ? cnt[k] : 1,
                                                     kMinMax ? aux[k] : 0, A(1), include_self));
          }
        }
      };
      if (nan_result) rest(std::true_type{});
      else rest(std::false_type{});
    }
  });
}

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
