// put_along_axis's CPU grads for mul: each factor's grad is the product of the slot's other factors (backward.h).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "backward.h"

namespace paddle_ext {
namespace cpu {
namespace put {

template <>
template <typename T, typename Idx>
void Grads<Reduce::Mul>::run(const Backward<T, Idx>& b) {
  constexpr Reduce R = Reduce::Mul;
  using A = acc_t<T>;
  PE_BACKWARD_LOCALS(b);
  PE_FIX_UP_LOCALS(b);
  const ValuesAt<T> dense_values(values, geo);

  // Where a slot's result is a normal number (is_normal_value), none of its factors is 0, ±inf or
  // NaN, and out / f is the product of the other factors to rounding: the grads need no per-slot
  // scratch. Rows with another result (and every row for the half types, whose out was rounded)
  // are redone exactly, with products only.
  Visited seen;
  const bool want_vg = vg != nullptr;
  ScratchArray<T> vg_own;
  if (!want_vg) {  // not requested: written anyway, so that the loop below has no branch
    vg_own = scratch_array<T>(geo.positions(), false);
    vg = vg_own.get();
  }
  if (std::is_same<A, T>::value) {
    const Hints pf{g, out, int(sizeof(T)), false};
    if (buckets) {
      seen.scattered = true;
      bucket_gather<false>(idx, dense_values, vg, zero, geo, plan, 2 * sizeof(T),
                           [g, out, include_self, flagged, any](index_t s, T val, index_t r) {
                             const A v = static_cast<A>(load(val)), o = static_cast<A>(load(out[s]));
                             if (!is_normal_value(o)) {
                               flagged[r] = 1;
                               any->store(true, std::memory_order_relaxed);
                             }
                             return store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), v, o, 1, 0, o / v, include_self));
                           });
    } else
    seen = visit<false>(idx, geo, plan, pf, [vg, g, out, values, include_self, flagged, any](index_t s, index_t p, index_t len, index_t r, auto) {
      int32_t special = 0;  // not a bool: GCC does not vectorise a bool reduction
#pragma GCC ivdep
      for (index_t t = 0; t < len; ++t) {
        const A v = static_cast<A>(load(values[p + t])), o = static_cast<A>(load(out[s + t]));
        special |= int32_t(!is_normal_value(o));
        vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), v, o, 1, 0, o / v, include_self));
      }
      if (special) {
        flagged[r] = 1;
        any->store(true, std::memory_order_relaxed);
      }
    }, zero_bad);
    for_slots(geo, plan, [arr_grad, g, arr, out, cv, include_self, flagged, any](index_t s, index_t len, index_t r) {
      int32_t special = 0;
      const int32_t c0 = cv.base(r);
      if (include_self)  // the unwritten slots (out = arr): arr_grad = g * arr / arr
        for (index_t t = 0; t < len; ++t) special |= int32_t(!is_normal_value(static_cast<A>(load(out[s + t]))));
      if (arr_grad) {
#pragma GCC ivdep
        for (index_t t = 0; t < len; ++t) {
          const A o = static_cast<A>(load(out[s + t]));
          arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), cv.at(c0, s + t), 0,
                                                       o / static_cast<A>(load(arr[s + t])), include_self));
        }
      }
      if (special) {
        flagged[r] = 1;
        any->store(true, std::memory_order_relaxed);
      }
    });
  } else {
    std::memset(flagged, 1, fix.rows);
    fix.any = true;
    seen.scattered = true;  // unknown: no visit yet
  }
  if (!fix.any.load()) return;
  // Exact redo of the flagged rows (as flat_mul_row): a running product per slot, and per position
  // its prefix (in vg itself where it has the accumulation type), in buffers whose untouched pages
  // are never faulted in.
  const ScratchArray<A> run_buf = scratch_array<A>(geo.slots(), true);
  ScratchArray<A> pre_buf;
  A* pre = nullptr;
  if (want_vg) {
    if (std::is_same<A, T>::value) {
      pre = reinterpret_cast<A*>(vg);
    } else {
      pre_buf = scratch_array<A>(geo.positions(), true);
      pre = pre_buf.get();
    }
  }
  A* run = run_buf.get();
  Hints only;
  only.only = flagged;
  only.all_uniform = !seen.scattered;
  if (want_vg) {
    for_slots(geo, plan, [run, arr, include_self, flagged](index_t s, index_t len, index_t r) {
      if (!flagged[r]) return;
      for (index_t t = 0; t < len; ++t) run[s + t] = include_self ? static_cast<A>(load(arr[s + t])) : A(1);
    });
    visit(idx, geo, plan, only, [run, pre, values](index_t s, index_t p, index_t len, index_t, auto) {
      for (index_t t = 0; t < len; ++t) {
        pre[p + t] = run[s + t];
        run[s + t] *= static_cast<A>(load(values[p + t]));
      }
    });
  }
  for_slots(geo, plan, [run, flagged](index_t s, index_t len, index_t r) {
    if (!flagged[r]) return;
    for (index_t t = 0; t < len; ++t) run[s + t] = A(1);
  });
  visit<true>(idx, geo, plan, only, [run, pre, vg, g, values, include_self](index_t s, index_t p, index_t len, index_t, auto) {
    for (index_t t = 0; t < len; ++t) {
      if (pre)
        vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), 1, 0,
                                                  pre[p + t] * run[s + t], include_self));
      run[s + t] *= static_cast<A>(load(values[p + t]));
    }
  }, [](index_t) {});
  if (arr_grad)
    for_slots(geo, plan, [arr_grad, g, run, cv, include_self, flagged](index_t s, index_t len, index_t r) {
      if (!flagged[r]) return;
      const int32_t c0 = cv.base(r);
      for (index_t t = 0; t < len; ++t)
        arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), cv.at(c0, s + t), 0,
                                                     run[s + t], include_self));
    });
}

PE_PUT_GRADS_INSTANTIATE(Reduce::Mul)

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
