// The CPU put_along_axis backward on the generic passes, one reduce per file (grads_*.cc), chosen at compile
// time through the Grads<R> policy (put_along_axis.cc dispatches; flat_grads.h handles inner == 1):
//   grads_assign.cc  the largest position of a slot takes its grad (a reverse visit: first visitor wins);
//   grads_sum.cc     add / mean: a gather of each slot's grad (divided by its count for mean);
//   grads_mul.cc     out / factor where the slot's result is a normal number, exact products elsewhere;
//   grads_minmax.cc  the grad split evenly among the contributors matching the result.
// Where most index rows disagree and the destination is past L2 (Backward::buckets), the passes that read or
// update per-slot data at each position go through the destination-partitioned bucket_gather /
// bucket_scatter instead of visit() (a cache and TLB miss per position otherwise); the per-slot order of the
// calls is the same, so the grads are bit-identical either way.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "buckets.h"
#include "counters.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {

// What every reduce's grads read. out_grad/arr/out/arr_grad: [outer, n, inner]; values/values_grad: [outer,
// m, inner]; either grad may be null (not requested).
template <typename T, typename Idx>
struct Backward {
  const T* arr;
  const Idx* idx;
  const T* values;
  const T* out;
  const T* g;  // out_grad
  T* arr_grad;
  T* values_grad;
  Geometry geo;
  Plan plan;
  bool include_self;
  const int32_t* counts;  // the forward's (mean only, may be null)
  bool buckets;           // use_buckets: the destination-partitioned passes
  T zero;
  // The visits' bad_fn: the values grad of a position with an out-of-range index is zero.
  auto zero_bad() const {
    return [vg = values_grad, zero = zero](index_t p) {
      if (vg) vg[p] = zero;
    };
  }
};

// The fields of `b` as locals, which the passes' lambdas capture by value (captures read through a
// reference would be reloaded on every element).
#define PE_BACKWARD_LOCALS(b)                                                                  \
  [[maybe_unused]] const T *arr = (b).arr, *values = (b).values, *out = (b).out, *g = (b).g;  \
  [[maybe_unused]] const Idx* idx = (b).idx;                                                  \
  [[maybe_unused]] T *arr_grad = (b).arr_grad, *vg = (b).values_grad;                         \
  [[maybe_unused]] const Geometry& geo = (b).geo;                                             \
  [[maybe_unused]] const Plan& plan = (b).plan;                                               \
  [[maybe_unused]] const bool include_self = (b).include_self, buckets = (b).buckets;         \
  [[maybe_unused]] const int32_t* counts = (b).counts;                                        \
  [[maybe_unused]] const T zero = (b).zero;                                                   \
  [[maybe_unused]] const auto zero_bad = (b).zero_bad()

// Grads<R>::run(b): the grads of reduce R (one specialisation per file; instantiated there for the float
// types and both index types).
template <Reduce R>
struct Grads {
  template <typename T, typename Idx>
  static void run(const Backward<T, Idx>& b);
};
template <> template <typename T, typename Idx> void Grads<Reduce::Assign>::run(const Backward<T, Idx>&);
template <> template <typename T, typename Idx> void Grads<Reduce::Add>::run(const Backward<T, Idx>&);
template <> template <typename T, typename Idx> void Grads<Reduce::Mean>::run(const Backward<T, Idx>&);
template <> template <typename T, typename Idx> void Grads<Reduce::Mul>::run(const Backward<T, Idx>&);
template <> template <typename T, typename Idx> void Grads<Reduce::Min>::run(const Backward<T, Idx>&);
template <> template <typename T, typename Idx> void Grads<Reduce::Max>::run(const Backward<T, Idx>&);

#define PE_PUT_GRADS_INSTANTIATE_T(R, T)                                       \
  template void Grads<R>::run<T, int32_t>(const Backward<T, int32_t>&); \
  template void Grads<R>::run<T, int64_t>(const Backward<T, int64_t>&);
#define PE_PUT_GRADS_INSTANTIATE(R)                                                                  \
  PE_PUT_GRADS_INSTANTIATE_T(R, float) PE_PUT_GRADS_INSTANTIATE_T(R, double)                        \
  PE_PUT_GRADS_INSTANTIATE_T(R, float16_t) PE_PUT_GRADS_INSTANTIATE_T(R, bfloat16_t)

// Written slots, for the grads that differ there: the mean's divisor, and arr_grad without include_self.
// With include_self the other modes' formulas give an unwritten slot its grad unchanged by themselves, so
// they run without a Counter (every count reads as 1: Counts).
template <typename T, typename Idx>
std::unique_ptr<Counter> count_written(const Backward<T, Idx>& b, bool need_count) {
  std::unique_ptr<Counter> counter;
  if (!need_count) return counter;
  counter.reset(new Counter(b.geo, b.plan));
  if (b.buckets) {
    Counter* c = counter.get();
    bucket_scatter(b.idx, ValuesAt<T>(), b.geo, b.plan, sizeof(int32_t), [c](index_t s, T, index_t) { c->add(s, 0, Scattered{}); });
  } else {
    count_contributions(b.idx, b.geo, b.plan, *counter);
  }
  return counter;
}

inline Counts counts_of(const Counter* counter) {
  Counts cv;
  if (counter) {
    cv.row = counter->row.get();
    cv.slot = counter->scattered() ? counter->slot : nullptr;
  }
  return cv;
}

// What mul's and amin/amax's grads keep besides b: the written slots' counts (without include_self), and
// the stat rows (destination rows of a column block) that a fix-up visit must redo exactly.
template <typename T, typename Idx>
struct FixUp {
  std::unique_ptr<Counter> counter;
  index_t rows;
  ScratchArray<uint8_t> flags;
  std::atomic<bool> any{false};
  explicit FixUp(const Backward<T, Idx>& b)
      : counter(count_written(b, !b.include_self)),
        rows(b.plan.nblocks * b.geo.outer * b.geo.n),
        flags(scratch_array<uint8_t>(rows, true)) {}
};
#define PE_FIX_UP_LOCALS(b)                     \
  FixUp<T, Idx> fix(b);                         \
  const Counts cv = counts_of(fix.counter.get()); \
  uint8_t* flagged = fix.flags.get();           \
  std::atomic<bool>* any = &fix.any

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
