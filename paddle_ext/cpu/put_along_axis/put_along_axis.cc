// CPU put_along_axis on raw pointers (no Paddle header): the dispatcher. It picks the reduce (a compile-time
// parameter from here on), the plan (plan.h) and the strategy: forward.h for the forward, flat_grads.h for
// the grads along the last axis, Grads<R> (backward.h, one file per reduce) for the others.
#include "paddle_ext/put_along_axis.h"

#include <algorithm>

#include "backward.h"
#include "flat_grads.h"
#include "forward.h"
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace put {

template <Reduce R, typename T, typename Idx>
void backward_of(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad, T* values_grad,
                 const Geometry& geo, bool include_self, const int32_t* counts) {
  // amin/amax keep the column split: their grads read g, out and the values and count the ties per
  // element, enough work that one thread over whole rows was slower.
  const Plan plan = R == Reduce::Min || R == Reduce::Max ? make_plan(geo) : choose_plan(idx, geo, sizeof(T));
  if (flat_plan(geo, plan))
    return flat_backward<R, T, Idx>(arr, idx, values, out, g, arr_grad, values_grad, geo, plan, include_self, counts);
  const Backward<T, Idx> b{arr,  idx,          values, out,    g,
                           arr_grad, values_grad, geo,    plan,   include_self,
                           counts,   use_buckets(idx, geo, plan, sizeof(T)), store<T>(acc_t<T>(0))};
  Grads<R>::run(b);
}

}  // namespace put

using namespace put;  // NOLINT: the kernels' own namespace

template <typename Idx>
BadIndex check_indices(const Idx* indices, index_t count, index_t n) {
  const int threads = count < 2 * tiles().grain ? 1 : max_threads();
  ScratchVector<index_t> first(std::max(threads, 1), -1);
  const index_t chunk = (count + threads - 1) / std::max(threads, 1);
  parallel_for(0, threads, 1, [&](index_t tb, index_t te) {
    for (index_t t = tb; t < te; ++t) {
      const index_t b = t * chunk, e = std::min(count, b + chunk);
      for (index_t p = b; p < e; ++p) {
        if (!index_in_range(static_cast<index_t>(indices[p]), n)) {
          first[t] = p;
          break;
        }
      }
    }
  });
  BadIndex bad;
  for (index_t p : first) {
    if (p >= 0) {
      bad.position = p;
      bad.value = static_cast<index_t>(indices[p]);
      break;
    }
  }
  return bad;
}

template <typename T, typename Idx>
bool put_along_axis_forward(Reduce reduce, const T* arr, T* out, const T* values, const Idx* indices, index_t outer,
                            index_t n, index_t m, index_t inner, bool include_self, bool idx_broadcast,
                            int values_broadcast, int32_t* counts) {
  bool ok = true;
  advise_huge(out, outer * n * inner * sizeof(T));
  populate_for_write(out, outer * n * inner * sizeof(T));  // fresh pages: faulted in on every thread at once
  dispatch_reduce(reduce, [&](auto r) {
    const Geometry g{outer, n, m, inner, idx_broadcast && inner > 1, values_broadcast};
    ok = forward_of<decltype(r)::value, T, Idx>(arr, out, values, indices, g, include_self, counts);
  });
  return ok;
}

template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self, bool idx_broadcast, const int32_t* counts) {
  // Fresh grads, written in full: faulted in up front, in bulk and on every thread (the forward's out
  // gets the same in put_along_axis_forward).
  if (arr_grad) {
    advise_huge(arr_grad, outer * n * inner * sizeof(T));
    populate_for_write(arr_grad, outer * n * inner * sizeof(T));
  }
  if (values_grad) {
    advise_huge(values_grad, outer * m * inner * sizeof(T));
    populate_for_write(values_grad, outer * m * inner * sizeof(T));
  }
  dispatch_reduce(reduce, [&](auto r) {
    backward_of<decltype(r)::value, T, Idx>(arr, indices, values, out, out_grad, arr_grad, values_grad,
                                            Geometry{outer, n, m, inner, idx_broadcast && inner > 1}, include_self,
                                            counts);
  });
}

#define PE_INSTANTIATE_FWD(T, Idx)                                                                    \
  template bool put_along_axis_forward<T, Idx>(Reduce, const T*, T*, const T*, const Idx*, index_t, index_t, \
                                               index_t, index_t, bool, bool, int, int32_t*);
#define PE_INSTANTIATE_BWD(T, Idx)                                                                           \
  template void put_along_axis_backward<T, Idx>(Reduce, const T*, const Idx*, const T*, const T*, const T*, \
                                                T*, T*, index_t, index_t, index_t, index_t, bool, bool, \
                                                const int32_t*);
#define PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_FWD(T, int32_t) PE_INSTANTIATE_FWD(T, int64_t)
#define PE_INSTANTIATE_FLOAT(T) PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_BWD(T, int32_t) PE_INSTANTIATE_BWD(T, int64_t)
PE_INSTANTIATE_FLOAT(float)
PE_INSTANTIATE_FLOAT(double)
PE_INSTANTIATE_FLOAT(float16_t)
PE_INSTANTIATE_FLOAT(bfloat16_t)
PE_INSTANTIATE_ALL(int32_t)
PE_INSTANTIATE_ALL(int64_t)
PE_INSTANTIATE_ALL(int16_t)
PE_INSTANTIATE_ALL(uint8_t)
template BadIndex check_indices<int32_t>(const int32_t*, index_t, index_t);
template BadIndex check_indices<int64_t>(const int64_t*, index_t, index_t);
#undef PE_INSTANTIATE_FWD
#undef PE_INSTANTIATE_BWD
#undef PE_INSTANTIATE_ALL
#undef PE_INSTANTIATE_FLOAT

}  // namespace cpu
}  // namespace paddle_ext
