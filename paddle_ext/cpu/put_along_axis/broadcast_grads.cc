// The grads of broadcast values of put_along_axis on the CPU: sums over the broadcast parts, in a fixed order.
#include <algorithm>
#include <type_traits>

#include "paddle_ext/parallel.h"
#include "paddle_ext/put_along_axis.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
using put::kHintsAhead;
using put::tiles;

namespace {
// The sums of broadcast values' grads: double for float32 (sums of many grads stay close to the exact sum),
// float32 for the half types.
template <typename T>
using grad_sum_t = std::conditional_t<std::is_same<T, float>::value, double, acc_t<T>>;

// Independent partial sums over a row (one chain of adds is latency-bound): element i goes to lane i % 8
// of the row. A null row adds +0.0 where a row of zeros would.
constexpr int kLanes = 8;
template <typename T, typename S>
inline void add_row_to_lanes(S* lane, const T* r, index_t len) {
  if (!r) {
    for (int l = 0; l < kLanes && l < len; ++l) lane[l] += S(0);
    return;
  }
  index_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<S>(load(r[i + l]));
  for (int l = 0; i + l < len; ++l) lane[l] += static_cast<S>(load(r[i + l]));
}
template <typename S>
inline S total_of_lanes(const S* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

template <typename T>
void sum_broadcast_grad(const T* grad, T* values_grad, index_t outer, index_t m, index_t inner, int values_broadcast) {
  using S = grad_sum_t<T>;
  const bool bo = values_broadcast & kValuesOuter, bm = values_broadcast & kValuesAxis;
  const bool bi = values_broadcast & kValuesInner;
  const index_t vo_count = bo ? 1 : outer, vm_count = bm ? 1 : m, vi_count = bi ? 1 : inner;
  const index_t rows = vo_count * vm_count;  // values rows (of vi_count values)
  const index_t summed = outer * m * inner / std::max<index_t>(rows * vi_count, 1);  // terms per value
  if (rows * vi_count == 0) return;
  // Sums start from -0.0, the identity of + on every value (a single -0.0 term stays -0.0).
  auto source = [=](index_t q, index_t o, index_t j) {  // row (o, j) of grad, o/j ranging only when broadcast
    return grad + ((bo ? o : q / vm_count) * m + (bm ? j : q % vm_count)) * inner;
  };
  const index_t ob = bo ? outer : 1, mb = bm ? m : 1;
  if (bi) {  // one value per values row: the whole inner row of each of its broadcast rows
    parallel_for(0, rows, std::max<index_t>(1, tiles().grain / std::max<index_t>(summed, 1)), [&](index_t b, index_t e) {
      for (index_t q = b; q < e; ++q) {
        S lane[kLanes];
        for (int l = 0; l < kLanes; ++l) lane[l] = S(-0.0);
        for (index_t o = 0; o < ob; ++o)
          for (index_t j = 0; j < mb; ++j) add_row_to_lanes(lane, source(q, o, j), inner);
        values_grad[q] = store<T>(static_cast<acc_t<T>>(total_of_lanes(lane)));
      }
    });
    return;
  }
  // A values row is the element-wise sum of its broadcast rows: a column block at a time (in a stack buffer).
  constexpr index_t kBlock = 256;
  const index_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(0, rows * blocks, std::max<index_t>(1, tiles().grain / std::max<index_t>(summed * kBlock, 1)),
               [&](index_t b, index_t e) {
    S sum[kBlock];
    for (index_t u = b; u < e; ++u) {
      const index_t q = u / blocks, i0 = u % blocks * kBlock, len = std::min(kBlock, inner - i0);
      for (index_t t = 0; t < len; ++t) sum[t] = S(-0.0);
      for (index_t o = 0; o < ob; ++o)
        for (index_t j = 0; j < mb; ++j) {
          const T* r = source(q, o, j) + i0;
          for (index_t t = 0; t < len; ++t) sum[t] += static_cast<S>(load(r[t]));
        }
      for (index_t t = 0; t < len; ++t) values_grad[q * inner + i0 + t] = store<T>(static_cast<acc_t<T>>(sum[t]));
    }
  });
}

template <typename T, typename Idx>
void add_row_values_grad(const T* out_grad, const Idx* indices, T* values_grad, index_t outer, index_t n, index_t m,
                         index_t inner, int values_broadcast) {
  using S = grad_sum_t<T>;
  const bool bo = values_broadcast & kValuesOuter, bm = values_broadcast & kValuesAxis;
  const index_t vm_count = bm ? 1 : m, rows = (bo ? 1 : outer) * vm_count;
  const index_t ob = bo ? outer : 1, mb = bm ? m : 1;
  const index_t summed = std::max<index_t>(ob * mb * inner, 1);
  parallel_for(0, rows, std::max<index_t>(1, tiles().grain / summed), [&](index_t b, index_t e) {
    for (index_t q = b; q < e; ++q) {
      if (ob * mb == 1 && q + kHintsAhead < e) {  // one index row per value: prefetch a later row's grads
        const index_t qa = q + kHintsAhead, oa = qa / vm_count, k = static_cast<index_t>(indices[oa * m + qa % vm_count]);
        if (index_in_range(k, n))
          for (index_t off = 0; off < inner * index_t(sizeof(T)); off += 64)
            __builtin_prefetch(reinterpret_cast<const char*>(out_grad + (oa * n + wrap_index(k, n)) * inner) + off, 0, 3);
      }
      S lane[kLanes];
      for (int l = 0; l < kLanes; ++l) lane[l] = S(-0.0);
      for (index_t o = 0; o < ob; ++o)
        for (index_t j = 0; j < mb; ++j) {
          const index_t oo = bo ? o : q / vm_count, jj = bm ? j : q % vm_count;
          const index_t k = static_cast<index_t>(indices[oo * m + jj]);  // the index row's destination row
          add_row_to_lanes(lane, index_in_range(k, n) ? out_grad + (oo * n + wrap_index(k, n)) * inner
                                                      : static_cast<const T*>(nullptr), inner);
        }
      values_grad[q] = store<T>(static_cast<acc_t<T>>(total_of_lanes(lane)));
    }
  });
}

#define PE_INSTANTIATE_ROWS(T, Idx) \
  template void add_row_values_grad<T, Idx>(const T*, const Idx*, T*, index_t, index_t, index_t, index_t, int);
#define PE_INSTANTIATE_SUMS(T)                                         \
  PE_INSTANTIATE_ROWS(T, int32_t) PE_INSTANTIATE_ROWS(T, int64_t) \
  template void sum_broadcast_grad<T>(const T*, T*, index_t, index_t, index_t, int);
PE_INSTANTIATE_SUMS(float)
PE_INSTANTIATE_SUMS(double)
PE_INSTANTIATE_SUMS(float16_t)
PE_INSTANTIATE_SUMS(bfloat16_t)
#undef PE_INSTANTIATE_ROWS
#undef PE_INSTANTIATE_SUMS

}  // namespace cpu
}  // namespace paddle_ext
