// put_along_axis's CPU grads for add and mean: a gather of each slot's grad, divided by its count for mean
// (backward.h).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>

#include "backward.h"

namespace paddle_ext {
namespace cpu {
namespace put {

// Mean with its counts at hand (the forward's) or on the partitioned paths: every slot's grads from its count.
template <typename T, typename Idx>
void mean_grads_by_slot(const Backward<T, Idx>& b) {
  constexpr Reduce R = Reduce::Mean;
  using A = acc_t<T>;
  PE_BACKWARD_LOCALS(b);
  const ValuesAt<T> no_values;
  // Every slot's grads from its count: arr_grad, and q = g / (count + self), the values_grad of every
  // position aimed at the slot; values_grad is then add's gather of q. With include_self, arr_grad is q
  // on every written slot (the only ones gathered from), and serves as q. The counts are the forward's
  // (the dygraph API keeps them: one pass over the slots), else one partitioned byte-count pass whose end
  // hook writes each block's grads while it is in L2 (no division at each position).
  std::optional<HugeScratch> q_mem;
  T* q = nullptr;
  if (vg && !(include_self && arr_grad)) {
    q_mem.emplace(geo.slots() * sizeof(T), /*zeroed=*/false);
    q = q_mem->as<T>();
  }
  auto write_grads = [q, ag = arr_grad, g, include_self](index_t s, index_t len, auto count_of) {
    if (q)
      for (index_t t = 0; t < len; ++t)
        q[s + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), count_of(t), 0, A(1),
                                                 include_self));
    if (ag)
      for (index_t t = 0; t < len; ++t)
        ag[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), count_of(t), 0, A(1),
                                               include_self));
  };
  if (counts) {
    parallel_for(0, geo.slots(), tiles().grain, [=](index_t b, index_t e) {
      write_grads(b, e - b, [c = counts + b](index_t t) { return c[t]; });
    });
  } else {
    ByteCounts byte_counts(geo, plan);
    ByteCounts* c = &byte_counts;
    const index_t inner = geo.inner;
    bucket_scatter(idx, no_values, geo, plan, 1,
                   [c, low = c->low](index_t s, T, index_t r) {
                     if (__builtin_expect(++low[s] == 0, 0)) c->carry(s, r);
                   },
                   block_hooks([c](index_t s0, index_t rows, index_t len, index_t) { c->clear(s0, rows, len); },
                               [c, inner, write_grads](index_t s0, index_t rows, index_t len, index_t r0) {
                                 c->for_rows(s0, rows, r0, [=](index_t i, auto count_of) {
                                   write_grads(s0 + i * inner, len, count_of);
                                 });
                               }));
  }
  if (!vg) return;
  const T* const from = q ? q : arr_grad;
  if (buckets)
    bucket_gather<false>(idx, no_values, vg, zero, geo, plan, sizeof(T), [from](index_t s, T, index_t) { return from[s]; });
  else
    visit<false>(idx, geo, plan, Hints{from, nullptr, int(sizeof(T)), false},
                 [vg, from](index_t s, index_t p, index_t len, index_t, auto) { std::memcpy(vg + p, from + s, len * sizeof(T)); },
                 zero_bad);
}

// Add, and mean without the counts: a gather of g (divided by the slot's count for mean).
template <Reduce R, typename T, typename Idx>
void sum_grads(const Backward<T, Idx>& b) {
  using A = acc_t<T>;
  PE_BACKWARD_LOCALS(b);
  const Hints pf_g{g, nullptr, int(sizeof(T)), false};
  const ValuesAt<T> no_values;
  const std::unique_ptr<Counter> counter = count_written(b, R == Reduce::Mean || !include_self);
  const Counts cv = counts_of(counter.get());
  if (vg && buckets)
    bucket_gather<false>(idx, no_values, vg, zero, geo, plan, sizeof(T) + (cv.slot ? sizeof(int32_t) : 0),
                         [g, cv, include_self](index_t s, T, index_t r) {
                           if constexpr (R == Reduce::Add) return g[s];
                           return store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), A(0), A(0),
                                                                cv.at(cv.base(r), s), 0, A(1), include_self));
                         });
  else if (vg)
    visit<false>(idx, geo, plan, pf_g, [vg, g, cv, include_self](index_t s, index_t p, index_t len, index_t r, auto) {
      if constexpr (R == Reduce::Add) {
        std::memcpy(vg + p, g + s, len * sizeof(T));
      } else {
        const int32_t c0 = cv.base(r);
#pragma GCC ivdep
        for (index_t t = 0; t < len; ++t)
          vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0),
                                                    cv.at(c0, s + t), 0, A(1), include_self));
      }
    }, zero_bad);
  if (arr_grad) {
    if (R == Reduce::Add && include_self) {
      convert(g, arr_grad, geo.slots());
    } else {
      for_slots(geo, plan, [arr_grad, g, cv, include_self](index_t s, index_t len, index_t r) {
        const int32_t c0 = cv.base(r);
#pragma GCC ivdep
        for (index_t t = 0; t < len; ++t)
          arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0),
                                                       cv.at(c0, s + t), 0, A(1), include_self));
      });
    }
  }
}

template <>
template <typename T, typename Idx>
void Grads<Reduce::Add>::run(const Backward<T, Idx>& b) {
  sum_grads<Reduce::Add>(b);
}

template <>
template <typename T, typename Idx>
void Grads<Reduce::Mean>::run(const Backward<T, Idx>& b) {
  if (b.counts || b.buckets) mean_grads_by_slot(b);
  else sum_grads<Reduce::Mean>(b);
}

PE_PUT_GRADS_INSTANTIATE(Reduce::Add)
PE_PUT_GRADS_INSTANTIATE(Reduce::Mean)

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
