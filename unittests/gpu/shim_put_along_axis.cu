// C ABI over the put_along_axis launchers for unittests/gpu (dtype codes: see gpu_runtime.py).
// `acc` is arr's values in the accumulation type (reduce_acc_t: float32 for the half types, int64 for an
// integer mean); scratch buffers are allocated and prepared by the caller as the launchers' contract
// says (null where unused).
#include "paddle_ext/put_along_axis.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

template <typename Fn>
static int with_index(int index_dtype, Fn&& fn) {
  if (index_dtype == 4) return fn(ShimTag<int32_t>{});
  if (index_dtype == 5) return fn(ShimTag<int64_t>{});
  return -2;
}

// fn(ShimTag<A>{}) with reduce_acc_t<reduce, T> for the run-time reduce.
template <typename T, typename Fn>
static void with_acc(int reduce, Fn&& fn) {
  if ((Reduce)reduce == Reduce::Mean) fn(ShimTag<reduce_acc_t<Reduce::Mean, T>>{});
  else fn(ShimTag<acc_t<T>>{});
}

extern "C" int pe_put_along_axis_forward(int dtype, int index_dtype, int reduce, void* acc, const void* values,
                                         const void* indices, void* count, void* winner, int64_t outer, int64_t n,
                                         int64_t m, int64_t inner, int include_self) {
  return with_index(index_dtype, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    return shim_dispatch_all(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_acc<T>(reduce, [&](auto atag) {
        using A = typename decltype(atag)::type;
        gpu::put_along_axis_forward<T, A, Idx>((Reduce)reduce, (A*)acc, (const T*)values, (const Idx*)indices,
                                               (int32_t*)count, (int64_t*)winner, outer, n, m, inner,
                                               include_self != 0, 0);
      });
    });
  });
}

extern "C" int pe_put_along_axis_backward(int dtype, int index_dtype, int reduce, const void* arr,
                                          const void* indices, const void* values, const void* out,
                                          const void* out_grad, void* arr_grad, void* values_grad, void* winner,
                                          void* count, void* aux, void* workspace, int64_t workspace_bytes,
                                          int64_t outer, int64_t n, int64_t m, int64_t inner, int include_self) {
  return with_index(index_dtype, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    return shim_dispatch_floating(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      gpu::put_along_axis_backward<T, Idx>((Reduce)reduce, (const T*)arr, (const Idx*)indices, (const T*)values,
                                           (const T*)out, (const T*)out_grad, (T*)arr_grad, (T*)values_grad,
                                           (int64_t*)winner, (int32_t*)count, (int32_t*)aux, workspace,
                                           (size_t)workspace_bytes, outer, n, m, inner, include_self != 0, 0);
    });
  });
}

// assign's `winner` scratch (forward and backward): bytes, handed over uninitialised.
extern "C" int64_t pe_put_along_axis_winner_scratch(int64_t outer, int64_t n, int64_t inner) {
  return (int64_t)gpu::put_along_axis_winner_scratch(outer, n, inner);
}

extern "C" int64_t pe_put_along_axis_sorted_workspace(int64_t positions, int64_t slots) {
  return (int64_t)gpu::put_along_axis_sorted_workspace(positions, slots);
}

extern "C" int pe_put_along_axis_sorted(int dtype, int index_dtype, int reduce, void* acc, const void* values,
                                        const void* indices, void* workspace, int64_t workspace_bytes,
                                        int64_t outer, int64_t n, int64_t m, int64_t inner, int include_self) {
  return with_index(index_dtype, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    return shim_dispatch_all(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_acc<T>(reduce, [&](auto atag) {
        using A = typename decltype(atag)::type;
        gpu::put_along_axis_sorted<T, A, Idx>((Reduce)reduce, (A*)acc, (const T*)values, (const Idx*)indices,
                                              workspace, (size_t)workspace_bytes, outer, n, m, inner,
                                              include_self != 0, 0);
      });
    });
  });
}
