// C ABI over the put_along_axis launchers for unittests/gpu (dtype codes: see gpu_runtime.py).
// pe_put_along_axis_scatter / _grads run the binding's own set-up (put_along_axis_gpu.h: accumulator type,
// scratch, workspace) with device buffers for its scratch; the raw launchers below take the caller's
// scratch (the tests of the launchers' contract, bench_gpu.py). `acc` is arr's values in the accumulation
// type (pe_put_along_axis_acc_dtype).
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "paddle_ext/put_along_axis.h"
#include "paddle_ext/put_along_axis_gpu.h"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

template <typename Fn>
static int with_index(int index_dtype, Fn&& fn) {
  if (index_dtype == 4) return fn(ShimTag<int32_t>{});
  if (index_dtype == 5) return fn(ShimTag<int64_t>{});
  return -2;
}

// fn(tag) with tag::type the accumulator of T values for the run-time reduce (the binding's rule).
template <typename T, typename Fn>
static void with_acc(int reduce, Fn&& fn) {
  gpu::with_reduce_acc<T>((Reduce)reduce, fn);
}

// fn(value tag, accumulator tag, index tag) for a scatter's run-time dtype, reduce and index dtype.
template <typename Fn>
static int with_scatter_types(int dtype, int index_dtype, int reduce, Fn&& fn) {
  return with_index(index_dtype, [&](auto itag) {
    return shim_dispatch_all(dtype, [&](auto tag) {
      with_acc<typename decltype(tag)::type>(reduce, [&](auto atag) { fn(tag, atag, itag); });
    });
  });
}

template <typename A>
static int dtype_code() {
  if (std::is_same<A, float>::value) return 0;
  if (std::is_same<A, double>::value) return 1;
  if (std::is_same<A, int32_t>::value) return 4;
  if (std::is_same<A, int64_t>::value) return 5;
  return -2;
}

// The set-up's scratch as device buffers, freed after the launch: zeroed where asked, else filled with junk
// that the launchers must not trust (as the binding's uninitialised tensors).
struct ShimScratch {
  std::vector<void*> held;
  void* operator()(size_t bytes, bool zeroed) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) throw std::runtime_error("pe_put_along_axis: cudaMalloc");
    held.push_back(p);
    cudaMemsetAsync(p, zeroed ? 0 : 0x5A, bytes, 0);
    return p;
  }
  ~ShimScratch() {
    cudaDeviceSynchronize();
    for (void* p : held) cudaFree(p);
  }
};

// The dtype code of what a scatter of `dtype` values with `reduce` accumulates in.
extern "C" int pe_put_along_axis_acc_dtype(int dtype, int reduce) {
  int code = -2;
  shim_dispatch_all(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_acc<T>(reduce, [&](auto atag) { code = dtype_code<typename decltype(atag)::type>(); });
  });
  return code;
}

extern "C" int pe_put_along_axis_scatter(int dtype, int index_dtype, int reduce, void* acc, const void* values,
                                         const void* indices, int64_t outer, int64_t n, int64_t m, int64_t inner,
                                         int include_self, int deterministic) {
  return with_scatter_types(dtype, index_dtype, reduce, [&](auto tag, auto atag, auto itag) {
    using T = typename decltype(tag)::type;
    using A = typename decltype(atag)::type;
    using Idx = typename decltype(itag)::type;
    gpu::put_along_axis_scatter<T, A, Idx>((Reduce)reduce, (A*)acc, (const T*)values, (const Idx*)indices, outer,
                                           n, m, inner, include_self != 0, deterministic != 0, ShimScratch{}, 0);
  });
}

extern "C" int pe_put_along_axis_grads(int dtype, int index_dtype, int reduce, const void* arr, const void* indices,
                                       const void* values, const void* out, const void* out_grad, void* arr_grad,
                                       void* values_grad, int64_t outer, int64_t n, int64_t m, int64_t inner,
                                       int include_self) {
  return with_index(index_dtype, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    return shim_dispatch_floating(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      gpu::put_along_axis_grads<T, Idx>((Reduce)reduce, (const T*)arr, (const Idx*)indices, (const T*)values,
                                        (const T*)out, (const T*)out_grad, (T*)arr_grad, (T*)values_grad, outer, n, m,
                                        inner, include_self != 0, ShimScratch{}, 0);
    });
  });
}

extern "C" int pe_put_along_axis_forward(int dtype, int index_dtype, int reduce, void* acc, const void* values,
                                         const void* indices, void* count, void* winner, int64_t outer, int64_t n,
                                         int64_t m, int64_t inner, int include_self) {
  return with_scatter_types(dtype, index_dtype, reduce, [&](auto tag, auto atag, auto itag) {
    using T = typename decltype(tag)::type;
    using A = typename decltype(atag)::type;
    using Idx = typename decltype(itag)::type;
    gpu::put_along_axis_forward<T, A, Idx>((Reduce)reduce, (A*)acc, (const T*)values, (const Idx*)indices,
                                           (int32_t*)count, (int64_t*)winner, outer, n, m, inner,
                                           include_self != 0, 0);
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
  return with_scatter_types(dtype, index_dtype, reduce, [&](auto tag, auto atag, auto itag) {
    using T = typename decltype(tag)::type;
    using A = typename decltype(atag)::type;
    using Idx = typename decltype(itag)::type;
    gpu::put_along_axis_sorted<T, A, Idx>((Reduce)reduce, (A*)acc, (const T*)values, (const Idx*)indices,
                                          workspace, (size_t)workspace_bytes, outer, n, m, inner,
                                          include_self != 0, 0);
  });
}
