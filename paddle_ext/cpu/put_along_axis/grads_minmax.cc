// put_along_axis's CPU grads for amin and amax: a slot's grad split evenly among the contributors matching
// its result (backward.h).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "backward.h"

namespace paddle_ext {
namespace cpu {
namespace put {

template <Reduce R, typename T, typename Idx>
void min_max_grads(const Backward<T, Idx>& b) {
  using A = acc_t<T>;
  PE_BACKWARD_LOCALS(b);
  PE_FIX_UP_LOCALS(b);
  const ValuesAt<T> dense_values(values, geo);

  // Min / Max: a grad is split evenly among the contributors matching the result (`ties`, arr
  // included when it took part; same_value: the NaNs of a NaN result). One visit hands each matching value the whole grad, which is
  // exact unless its slot has ties; only rows with a tie are then visited again to divide.
  ScratchArray<T> vg_own;
  const bool want_vg = vg != nullptr;
  if (!want_vg) {  // not requested: written anyway, so that the loop below has no branch
    vg_own = scratch_array<T>(geo.positions(), false);
    vg = vg_own.get();
  }
  SlotScratch<T> ties(arr_grad, geo.slots());
  int32_t* tp = ties.ptr;
  constexpr index_t ts = SlotScratch<T>::stride;
  std::atomic<bool> nan_flag{false};  // some result is NaN: only then is same_value needed below
  std::atomic<bool>* has_nan = &nan_flag;
  for_slots(geo, plan, [tp, arr, out, include_self, has_nan](index_t s, index_t len, index_t) {
    int32_t nan = 0;
    for (index_t t = 0; t < len; ++t) {
      const auto r = load(out[s + t]);
      tp[(s + t) * ts] = int32_t(include_self) & int32_t(same_value(load(arr[s + t]), r));
      nan |= int32_t(is_nan(r));
    }
    if (nan) has_nan->store(true, std::memory_order_relaxed);
  });
  // The passes below with `matches` = same_value where some result is NaN, else a plain == (same_value's
  // float compares are a large part of this backward).
  auto rest = [&](auto nan_aware) {
    constexpr bool kNan = decltype(nan_aware)::value;
    Hints pf_ties{out, g, int(sizeof(T)), false};
    Visited seen;
    if (buckets) {
      seen.scattered = true;
      bucket_gather<false>(idx, dense_values, vg, zero, geo, plan, 3 * sizeof(T),
                           [tp, g, out, zero, flagged, any](index_t s, T val, index_t r) {
                             const bool match = matches<kNan>(load(val), load(out[s]));
                             const int32_t n = tp[s * ts] + (match ? 1 : 0);
                             tp[s * ts] = n;
                             if (match && n > 1) {
                               flagged[r] = 1;
                               any->store(true, std::memory_order_relaxed);
                             }
                             return pick(match, g[s], zero);
                           });
    } else
    seen = visit<false>(idx, geo, plan, pf_ties,
                 [tp, vg, g, out, values, zero, flagged, any](index_t s, index_t p, index_t len, index_t r, auto) {
                   int32_t most = 0;
#pragma GCC ivdep
                   for (index_t t = 0; t < len; ++t) {
                     const bool match = matches<kNan>(load(values[p + t]), load(out[s + t]));
                     const T gv = g[s + t];
                     vg[p + t] = pick(match, gv, zero);
                     const int32_t n = tp[(s + t) * ts] + (match ? 1 : 0);
                     tp[(s + t) * ts] = n;
                     most = std::max(most, match ? n : 0);
                   }
                   if (most > 1) {
                     flagged[r] = 1;
                     any->store(true, std::memory_order_relaxed);
                   }
                 }, zero_bad);
    if (want_vg && fix.any.load()) {
      Hints only;
      only.only = flagged;
      only.all_uniform = !seen.scattered;
      visit<false>(idx, geo, plan, only, [tp, vg, g, out, values, include_self](index_t s, index_t p, index_t len, index_t, auto) {
        for (index_t t = 0; t < len; ++t) {
          const int32_t n = tp[(s + t) * ts];
          if (n > 1)
            vg[p + t] = store<T>(values_grad_of<R, A, kNan>(static_cast<A>(load(g[s + t])), static_cast<A>(load(values[p + t])),
                                                            static_cast<A>(load(out[s + t])), 1, n, A(1), include_self));
        }
      }, [](index_t) {});
    }
    if (arr_grad)  // reads a slot's tie count, then overwrites it with the slot's grad
      for_slots(geo, plan, [tp, arr_grad, g, arr, out, cv, include_self](index_t s, index_t len, index_t r) {
        const int32_t c0 = cv.base(r);
        for (index_t t = 0; t < len; ++t) {
          const int32_t n = tp[(s + t) * ts];
          arr_grad[s + t] = store<T>(arr_grad_of<R, A, kNan>(static_cast<A>(load(g[s + t])), static_cast<A>(load(arr[s + t])),
                                                             static_cast<A>(load(out[s + t])), cv.at(c0, s + t), n, A(1),
                                                             include_self));
        }
      });
  };
  if (nan_flag.load()) rest(std::true_type{});
  else rest(std::false_type{});
}

template <>
template <typename T, typename Idx>
void Grads<Reduce::Min>::run(const Backward<T, Idx>& b) {
  min_max_grads<Reduce::Min>(b);
}

template <>
template <typename T, typename Idx>
void Grads<Reduce::Max>::run(const Backward<T, Idx>& b) {
  min_max_grads<Reduce::Max>(b);
}

PE_PUT_GRADS_INSTANTIATE(Reduce::Min)
PE_PUT_GRADS_INSTANTIATE(Reduce::Max)

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
