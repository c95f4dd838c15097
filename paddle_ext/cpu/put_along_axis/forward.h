// The CPU put_along_axis forward: the generic visit (plan.h), the partitioned passes for independent indices
// (buckets.h), or whole rows along the last axis (flat.h). Mean divides by the counts it gathers.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>
#include <type_traits>

#include "buckets.h"
#include "counters.h"
#include "flat.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {

// The hot lambdas capture pointers by value: by-reference captures are reloaded on every element.
template <Reduce R, typename T, typename Idx>
bool forward_impl(reduce_acc_t<R, T>* acc, const ValuesAt<T>& values, const Idx* idx, const Geometry& g,
                  const Plan& plan, bool include_self, int32_t* counts_out) {
  using A = reduce_acc_t<R, T>;
  // No destination prefetch for assign: its stores do not wait on the line (add's loads do), and the
  // prefetch only made assign's time vary.
  Hints pf{R == Reduce::Assign ? nullptr : acc, nullptr, int(sizeof(A)), true};
  if (!include_self && R != Reduce::Assign) {
    // Written slots first take the reduction's identity (a write-only pass, no per-slot flags), so
    // arr takes no part in them; slots nobody writes keep arr's value.
    const A identity = reduce_identity<R, A>();
    visit(idx, g, plan, pf, [acc, identity](index_t s, index_t, index_t len, index_t, auto) {
      for (index_t t = 0; t < len; ++t) acc[s + t] = identity;
    });
  }
  if (!values.dense) pf.values_stride = values.stride;  // combine's p: the values offset
  const T* vals = values.data;
  const bool along_inner = values.along_inner();
  auto combine = [acc, vals, along_inner](index_t s, index_t p, index_t len) {
    if (along_inner) {
#pragma GCC ivdep
      for (index_t t = 0; t < len; ++t) acc[s + t] = ReduceOp<R>::combine(acc[s + t], static_cast<A>(load(vals[p + t])));
      return;
    }
    const A x = static_cast<A>(load(vals[p]));  // one value for the run (broadcast along inner)
#pragma GCC ivdep
    for (index_t t = 0; t < len; ++t) acc[s + t] = ReduceOp<R>::combine(acc[s + t], x);
  };
  const bool buckets = use_buckets(idx, g, plan, sizeof(A));
  if (R != Reduce::Mean) {
    if (buckets)
      return bucket_scatter(idx, values, g, plan, sizeof(A), [acc](index_t s, T v, index_t) {
        acc[s] = ReduceOp<R>::combine(acc[s], static_cast<A>(load(v)));
      });
    return visit(idx, g, plan, pf, [combine](index_t s, index_t p, index_t len, index_t, auto) { combine(s, p, len); }).ok;
  }

  const int32_t self = include_self ? 1 : 0;
  if (buckets) {  // each block divided right after its last round's apply, while it is in L2
    ByteCounts counts(g, plan);
    ByteCounts* c = &counts;
    const index_t inner = g.inner;
    return bucket_scatter(
        idx, values, g, plan, sizeof(A) + 1,
        [acc, c, low = c->low](index_t s, T v, index_t r) {
          acc[s] = ReduceOp<R>::combine(acc[s], static_cast<A>(load(v)));
          if (__builtin_expect(++low[s] == 0, 0)) c->carry(s, r);
        },
        block_hooks([c](index_t s0, index_t rows, index_t len, index_t) { c->clear(s0, rows, len); },
                    [acc, c, self, inner, counts_out](index_t s0, index_t rows, index_t len, index_t r0) {
                      c->for_rows(s0, rows, r0, [=](index_t i, auto count_of) {
                        A* const a = acc + s0 + i * inner;
                        for (index_t t = 0; t < len; ++t) a[t] = divide_by_count<A>(a[t], count_of(t), self);
                        if (counts_out)
                          for (index_t t = 0; t < len; ++t) counts_out[s0 + i * inner + t] = count_of(t);
                      });
                    }));
  }
  Counter cnt(g, plan, /*rows=*/false);
  Counter* c = &cnt;
  RowBytes rows(plan.nblocks * g.outer * g.n);
  RowBytes* rb = &rows;
  pf.stat = rows.low.get();
  const bool ok = visit(idx, g, plan, pf, [combine, c, rb, low = rows.low.get()](index_t s, index_t p, index_t len,
                                                                                 index_t r, auto u) {
                    combine(s, p, len);
                    if constexpr (decltype(u)::value) {
                      if (__builtin_expect(++low[r] == 0, 0)) rb->carry(r);
                    } else {
                      c->add(s, r, u);
                    }
                  }).ok;
  const bool scattered = cnt.scattered(), wide = rows.carried.load();
  for_slots(g, plan, [acc, c, rb, wide, self, scattered, counts_out](index_t s, index_t len, index_t r) {
    const int32_t rc = rb->at(r, wide);
    if (counts_out)
      for (index_t t = 0; t < len; ++t) counts_out[s + t] = rc + (scattered ? c->slot[s + t] : 0);
    if (!scattered) {
      if (rc == 0) return;  // untouched row: nothing to divide
      for (index_t t = 0; t < len; ++t) acc[s + t] = mean_divide<A>(acc[s + t], rc + self);
      return;
    }
    for (index_t t = 0; t < len; ++t) {
      const int32_t n = rc + c->slot[s + t];
      if (n > 0) acc[s + t] = mean_divide<A>(acc[s + t], n + self);
    }
  });
  return ok;
}

template <Reduce R, typename T, typename Idx>
bool forward_of(const T* arr, T* out, const T* values_ptr, const Idx* idx, const Geometry& g, bool include_self,
                int32_t* counts) {
  using A = reduce_acc_t<R, T>;
  const Plan plan = choose_plan(idx, g, sizeof(A));
  const ValuesAt<T> values(values_ptr, g);
  if (R != Reduce::Mean) counts = nullptr;
  if (counts && g.slots() > 0 && g.positions() == 0) std::memset(counts, 0, g.slots() * sizeof(int32_t));
  if (flat_plan(g, plan)) return flat_forward<R, T, Idx>(arr, out, values, idx, g, plan, include_self, counts);
  if (std::is_same<A, T>::value) {  // reduce in out itself (arr == out for the inplace op)
    convert(arr, out, g.slots());
    return forward_impl<R, T, Idx>(reinterpret_cast<A*>(out), values, idx, g, plan, include_self, counts);
  }
  // half types (float32) and integer means (int64): accumulate wider, round once
  const ScratchArray<A> acc = scratch_array<A>(g.slots(), false);
  convert(arr, acc.get(), g.slots());
  const bool ok = forward_impl<R, T, Idx>(acc.get(), values, idx, g, plan, include_self, counts);
  convert(acc.get(), out, g.slots());
  return ok;
}

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
