// put_along_axis / put_along_axis_: validation and CPU/GPU dispatch. Registered by
// build/generated/put_along_axis.ops.cc (generated from ops/put_along_axis.yaml), which includes this file.
// The Python API has broadcast indices (except size-1 dimensions after the axis) and values (except parts of
// the positions where they have size 1 throughout) already; the CPU kernels read those in place, the GPU
// binding expands them on the device. These checks are the last line of defence.
#include "paddle_ext/put_along_axis.h"

#include <algorithm>
#include <sstream>
#include <type_traits>

#include "paddle_ext/binding/common.h"
#include "paddle_ext/put_along_axis_gpu.h"

namespace paddle_ext {
namespace {

Reduce parse_reduce(const std::string& reduce) {
  if (reduce == "assign") return Reduce::Assign;
  if (reduce == "add") return Reduce::Add;
  if (reduce == "mul" || reduce == "multiply") return Reduce::Mul;
  if (reduce == "mean") return Reduce::Mean;
  if (reduce == "amin") return Reduce::Min;
  if (reduce == "amax") return Reduce::Max;
  PE_THROW("put_along_axis: reduce='", reduce, "' is not one of assign, add, mul, multiply, mean, amin, amax");
}

struct ScatterView {
  int64_t outer = 1, n = 1, m = 1, inner = 1, axis = 0;
  // indices have size 1 in every dimension after the axis (broadcast=True with indices [E, 1] against
  // values [E, C]): the CPU kernels read them as [outer, m, 1]; the GPU gets them expanded.
  bool idx_broadcast = false;
  // ValuesBroadcast bits: the parts of the positions (before the axis, the axis, after it) along which the
  // values have size 1 (read with a stride of 0 by the CPU kernels; the GPU gets them expanded).
  int values_broadcast = 0;
  std::vector<int64_t> positions;  // the positions' shape: arr's with indices' size along the axis
};

ScatterView scatter_view(const paddle::Tensor& arr, const paddle::Tensor& indices, const paddle::Tensor& values,
                         int axis, const char* op) {
  const auto& a = arr.shape();
  const auto& ix = indices.shape();
  const auto& vs = values.shape();
  PE_CHECK(ix.size() == a.size(), op, ": indices must have arr's rank ", a.size(), ", got ", ix.size());
  PE_CHECK(vs.size() == a.size(), op, ": values must have arr's rank ", a.size(), ", got ", vs.size());
  PE_CHECK(indices.dtype() == paddle::DataType::INT32 || indices.dtype() == paddle::DataType::INT64, op,
           ": indices must be int32 or int64");
  PE_CHECK(values.dtype() == arr.dtype(), op, ": values must have arr's dtype");
  ScatterView v;
  v.axis = normalize_axis(axis, (int64_t)a.size(), op);
  if (a.empty()) return v;  // 0-d: one slot, one position
  bool ones_after_axis = true;
  for (int64_t d = v.axis + 1; d < (int64_t)a.size(); ++d) ones_after_axis = ones_after_axis && ix[d] == 1;
  for (int64_t d = 0; d < (int64_t)a.size(); ++d) {
    if (d == v.axis) continue;
    PE_CHECK(ix[d] == a[d] || (d > v.axis && ones_after_axis), op, ": indices.shape[", d, "] = ", ix[d],
             " must equal arr.shape[", d, "] = ", a[d], " (or 1 in every dimension after the axis)");
    (d < v.axis ? v.outer : v.inner) *= a[d];
  }
  v.positions = a;
  v.positions[v.axis] = ix[v.axis];
  // values: in each part either the positions' sizes or 1 throughout
  const int64_t rank = (int64_t)a.size();
  const int64_t parts[3][3] = {{0, v.axis, kValuesOuter}, {v.axis, v.axis + 1, kValuesAxis},
                               {v.axis + 1, rank, kValuesInner}};
  for (const auto& part : parts) {
    bool ones = true, same = true;
    for (int64_t d = part[0]; d < part[1]; ++d) {
      ones = ones && vs[d] == 1;
      same = same && vs[d] == v.positions[d];
    }
    for (int64_t d = part[0]; d < part[1] && !ones && !same; ++d)
      PE_CHECK(vs[d] == v.positions[d], op, ": values.shape[", d, "] = ", vs[d], " must equal ",
               d == v.axis ? "indices.shape[" : "arr.shape[", d, "] = ", v.positions[d],
               d == v.axis ? "" : (d < v.axis ? " (or 1 in every dimension before the axis)"
                                                : " (or 1 in every dimension after the axis)"),
               d == v.axis ? " (or 1)" : "");
    if (!same) v.values_broadcast |= (int)part[2];
  }
  v.idx_broadcast = ones_after_axis && v.inner > 1;
  v.n = a[v.axis];
  v.m = ix[v.axis];
  return v;
}

// CPU: the first out-of-range index, reported with its position, before anything is written.
// The Python API turns this message into an IndexError.
template <typename Idx>
void check_cpu_indices(const paddle::Tensor& indices, const ScatterView& v, const char* op) {
  const BadIndex bad = cpu::check_indices<Idx>(ptr<Idx>(indices), indices.numel(), v.n);
  if (bad.position < 0) return;
  std::ostringstream pos;
  int64_t rest = bad.position;
  const auto& shape = indices.shape();
  std::vector<int64_t> coord(shape.size());
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    coord[d] = shape[d] > 0 ? rest % shape[d] : 0;
    rest = shape[d] > 0 ? rest / shape[d] : 0;
  }
  for (size_t d = 0; d < coord.size(); ++d) pos << (d ? ", " : "") << coord[d];
  PE_THROW_INDEX(op, ": index ", bad.value, " at indices[", pos.str(),
           "] is out of range for axis ", v.axis, " of size ", v.n, " (expected ", -v.n, " <= index < ", v.n, ")");
}

template <typename Fn>
void dispatch_index(const paddle::Tensor& indices, Fn&& fn) {
  if (indices.dtype() == paddle::DataType::INT32) return fn(TypeTag<int32_t>{});
  return fn(TypeTag<int64_t>{});
}

paddle::Tensor int_scratch(int64_t numel, paddle::DataType dtype, int64_t fill, const paddle::Place& place) {
  return paddle::full({numel}, fill, dtype, place);
}

bool is_half(paddle::DataType dtype) {
  return dtype == paddle::DataType::FLOAT16 || dtype == paddle::DataType::BFLOAT16;
}

// CPU: out = arr scattered (out may be arr: inplace, then the indices are checked before any write).
void run_cpu(const paddle::Tensor& arr, paddle::Tensor& out, const paddle::Tensor& indices,
             const paddle::Tensor& values, const ScatterView& v, Reduce reduce, bool include_self, bool inplace,
             const char* op, int32_t* counts = nullptr) {
  dispatch_floating_and_integral(arr.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(indices, [&](auto itag) {
      using Idx = typename decltype(itag)::type;
      if (inplace && v.outer * v.m * v.inner > 0) check_cpu_indices<Idx>(indices, v, op);
      const bool ok = cpu::put_along_axis_forward<T, Idx>(reduce, ptr<T>(arr), mutable_ptr<T>(out), ptr<T>(values),
                                                          ptr<Idx>(indices), v.outer, v.n, v.m, v.inner,
                                                          include_self, v.idx_broadcast, v.values_broadcast, counts);
      if (!ok) check_cpu_indices<Idx>(indices, v, op);  // a fresh buffer: report it, it is discarded
    });
  });
}

// Broadcast values at the positions' shape (a copy): the CUDA kernels, and the CPU grad kernels of the modes
// that read the values (mul, amin, amax).
paddle::Tensor expanded_values(const paddle::Tensor& values, const ScatterView& v) {
  return v.values_broadcast ? paddle::experimental::expand(values, v.positions) : values;
}

#ifdef PADDLE_EXT_WITH_CUDA
// The CUDA kernels take indices of the positions' shape: broadcast ones are expanded on the device.
paddle::Tensor gpu_indices(const paddle::Tensor& indices, const ScatterView& v) {
  return v.idx_broadcast ? paddle::experimental::expand(indices, v.positions) : indices;
}

// Device scratch for the launchers' set-up (put_along_axis_gpu.h): int64 words on `place`, zeroed or left
// as they are, kept alive with this object (the launches run on the tensors' stream, in order).
struct ScratchTensors {
  paddle::Place place;
  std::vector<paddle::Tensor> held;
  void* operator()(size_t bytes, bool zeroed) {
    const int64_t words = std::max<int64_t>(1, static_cast<int64_t>((bytes + 7) / 8));
    held.push_back(zeroed ? int_scratch(words, paddle::DataType::INT64, 0, place)
                          : new_output({words}, paddle::DataType::INT64, place));
    return held.back().data();
  }
};

// The grad of broadcast values from the positions' grads, summed on the device (in float32 for the half types).
paddle::Tensor gpu_sum_to_values(const paddle::Tensor& grad, const paddle::Tensor& values, const ScatterView& v) {
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < (int64_t)v.positions.size(); ++d)
    if (values.shape()[d] == 1 && v.positions[d] != 1) axes.push_back(d);
  const bool half = is_half(grad.dtype());
  paddle::Tensor sum = paddle::experimental::sum(half ? grad.cast(paddle::DataType::FLOAT32) : grad, axes,
                                                 paddle::DataType::UNDEFINED, true);
  return half ? sum.cast(grad.dtype()) : sum;
}

template <typename A>
paddle::DataType dtype_of(paddle::DataType same) {
  if constexpr (std::is_same<A, float>::value) return paddle::DataType::FLOAT32;
  else if constexpr (std::is_same<A, double>::value) return paddle::DataType::FLOAT64;
  else if constexpr (std::is_same<A, int64_t>::value) return paddle::DataType::INT64;
  else if constexpr (std::is_same<A, int32_t>::value) return paddle::DataType::INT32;
  else return same;
}

// The dtype a GPU reduction accumulates in (gpu::with_reduce_acc).
paddle::DataType gpu_acc_dtype(paddle::DataType dtype, Reduce reduce, const char* op) {
  paddle::DataType acc = dtype;
  dispatch_floating_and_integral(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu::with_reduce_acc<T>(reduce, [&](auto atag) { acc = dtype_of<typename decltype(atag)::type>(dtype); });
  });
  return acc;
}

// GPU: scatters into `acc` (arr's values in gpu_acc_dtype(dtype, reduce)).
void run_gpu(paddle::Tensor& acc, const paddle::Tensor& indices, const paddle::Tensor& values,
             paddle::DataType dtype, const ScatterView& v, Reduce reduce, bool include_self, bool deterministic,
             const char* op) {
  dispatch_floating_and_integral(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (sizeof(T) < 4 && std::is_integral<T>::value) {
      PE_THROW(op, ": int16 and uint8 tensors are supported on the CPU only");
    } else {
      gpu::with_reduce_acc<T>(reduce, [&](auto atag) {
        using A = typename decltype(atag)::type;
        dispatch_index(indices, [&](auto itag) {
          using Idx = typename decltype(itag)::type;
          gpu::put_along_axis_scatter<T, A, Idx>(reduce, mutable_ptr<A>(acc), ptr<T>(values), ptr<Idx>(indices),
                                                 v.outer, v.n, v.m, v.inner, include_self, deterministic,
                                                 ScratchTensors{acc.place(), {}}, acc.stream());
        });
      });
    }
  });
}
#endif

// The functional result on a GPU: a copy of arr (in gpu_acc_dtype) scattered into, rounded back to its dtype.
paddle::Tensor gpu_forward(const paddle::Tensor& arr, const paddle::Tensor& indices, const paddle::Tensor& values,
                           const ScatterView& v, Reduce reduce, bool include_self, bool deterministic,
                           const char* op) {
#ifdef PADDLE_EXT_WITH_CUDA
  const paddle::DataType acc_dtype = gpu_acc_dtype(arr.dtype(), reduce, op);
  const bool wider = acc_dtype != arr.dtype();
  paddle::Tensor acc = wider ? arr.cast(acc_dtype) : arr.copy_to(arr.place(), false);
  run_gpu(acc, indices, values, arr.dtype(), v, reduce, include_self, deterministic, op);
  return wider ? acc.cast(arr.dtype()) : acc;
#else
  throw_no_cuda(op);
#endif
}

}  // namespace

std::vector<paddle::Tensor> PutAlongAxisKernel(const paddle::Tensor& arr_in, const paddle::Tensor& indices_in,
                                               const paddle::Tensor& values_in, int axis, const std::string& reduce,
                                               bool include_self, bool deterministic) {
  const char* op = "put_along_axis";
  const paddle::Tensor arr = dense(arr_in), indices = dense(indices_in), values = dense(values_in);
  check_same_place(arr, indices, op, "arr", "indices");
  check_same_place(arr, values, op, "arr", "values");
  const ScatterView v = scatter_view(arr, indices, values, axis, op);
  const Reduce r = parse_reduce(reduce);
  // The CPU kernels are deterministic in every mode; `deterministic` only changes the GPU path.
  if (!arr.is_cpu()) {
#ifdef PADDLE_EXT_WITH_CUDA
    return {gpu_forward(arr, gpu_indices(indices, v), expanded_values(values, v), v, r, include_self, deterministic,
                        op)};
#else
    throw_no_cuda(op);
#endif
  }
  paddle::Tensor out = new_output(arr.shape(), arr.dtype(), arr.place());
  run_cpu(arr, out, indices, values, v, r, include_self, false, op);
  return {out};
}

void PutAlongAxisInplaceKernel(paddle::Tensor& arr, const paddle::Tensor& indices_in, const paddle::Tensor& values_in,
                               int axis, const std::string& reduce, bool include_self, bool deterministic) {
  const char* op = "put_along_axis_";
  PE_CHECK(arr.is_contiguous(), op, ": arr must be contiguous to be written in place");
  const paddle::Tensor indices = dense(indices_in), values = dense(values_in);
  check_same_place(arr, indices, op, "arr", "indices");
  check_same_place(arr, values, op, "arr", "values");
  const ScatterView v = scatter_view(arr, indices, values, axis, op);
  const Reduce r = parse_reduce(reduce);
  if (arr.is_cpu()) {
    run_cpu(arr, arr, indices, values, v, r, include_self, true, op);
    return;
  }
#ifdef PADDLE_EXT_WITH_CUDA
  const paddle::Tensor full = gpu_indices(indices, v), full_values = expanded_values(values, v);
  if (gpu_acc_dtype(arr.dtype(), r, op) == arr.dtype()) {
    run_gpu(arr, full, full_values, arr.dtype(), v, r, include_self, deterministic, op);
    return;
  }
  paddle::Tensor result = gpu_forward(arr, full, full_values, v, r, include_self, deterministic, op);
  arr.copy_(result, arr.place(), false);
#else
  throw_no_cuda(op);
#endif
}

// mean's forward with each slot's contribution count (int32, arr's shape), which the dygraph API keeps for
// PutAlongAxisCountedVjpKernel: its backward then needs no counting pass over the indices. CPU only.
std::vector<paddle::Tensor> PutAlongAxisCountedKernel(const paddle::Tensor& arr_in, const paddle::Tensor& indices_in,
                                                      const paddle::Tensor& values_in, int axis, bool include_self) {
  const char* op = "put_along_axis";
  PE_CHECK(arr_in.is_cpu(), op, ": the counted mean is a CPU op (the API calls it only for CPU tensors)");
  const paddle::Tensor arr = dense(arr_in), indices = dense(indices_in), values = dense(values_in);
  check_same_place(arr, indices, op, "arr", "indices");
  check_same_place(arr, values, op, "arr", "values");
  const ScatterView v = scatter_view(arr, indices, values, axis, op);
  paddle::Tensor out = new_output(arr.shape(), arr.dtype(), arr.place());
  paddle::Tensor counts = new_output(arr.shape(), paddle::DataType::INT32, arr.place());
  run_cpu(arr, out, indices, values, v, Reduce::Mean, include_self, false, op, mutable_ptr<int32_t>(counts));
  return {out, counts};
}

std::vector<std::vector<int64_t>> PutAlongAxisCountedInferShape(const std::vector<int64_t>& arr,
                                                                const std::vector<int64_t>&,
                                                                const std::vector<int64_t>&) {
  return {arr, arr};
}

std::vector<paddle::DataType> PutAlongAxisCountedInferDtype(const paddle::DataType& arr, const paddle::DataType&,
                                                            const paddle::DataType&) {
  return {arr, paddle::DataType::INT32};
}

namespace {
// The grads; `out` may be null where the mode does not read it (mean), `counts` (mean, CPU) the forward's.
std::vector<paddle::Tensor> grad_kernel(const paddle::Tensor& arr_in, const paddle::Tensor& indices_in,
                                        const paddle::Tensor& values_in, const paddle::Tensor* out_in,
                                        const paddle::Tensor& out_grad_in, int axis, Reduce r, bool include_self,
                                        const paddle::Tensor* counts_in) {
  const paddle::Tensor arr = dense(arr_in), indices = dense(indices_in), values = dense(values_in),
                       out = out_in ? dense(*out_in) : paddle::Tensor(), out_grad = dense(out_grad_in);
  const ScatterView v = scatter_view(arr, indices, values, axis, "put_along_axis_grad");
  paddle::Tensor counts;
  if (counts_in) {
    counts = dense(*counts_in);
    PE_CHECK(r == Reduce::Mean && arr.is_cpu() && counts.is_cpu() && counts.dtype() == paddle::DataType::INT32 &&
                 counts.shape() == arr.shape(),
             "put_along_axis_grad: counts must be the CPU mean forward's int32 counts of arr's shape");
  }
  paddle::Tensor arr_grad = new_output(arr.shape(), arr.dtype(), arr.place());
  paddle::Tensor values_grad = new_output(values.shape(), values.dtype(), values.place());
  // Broadcast values: the kernels write the grad of every position, summed into values_grad below; the
  // modes that read the values (and every GPU kernel) get them expanded.
  // `add` with row indices and values broadcast along inner sums the grad rows directly (add_row_values_grad).
  const bool reads_values = r == Reduce::Mul || r == Reduce::Min || r == Reduce::Max || !arr.is_cpu();
  const bool row_sums = arr.is_cpu() && r == Reduce::Add && v.idx_broadcast && (v.values_broadcast & kValuesInner);
  const paddle::Tensor values_read = reads_values ? expanded_values(values, v) : values;
  paddle::Tensor grad_at = v.values_broadcast && !row_sums ? new_output(v.positions, values.dtype(), values.place())
                                                           : values_grad;
  dispatch_floating(arr.dtype(), "put_along_axis_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(indices, [&](auto itag) {
      using Idx = typename decltype(itag)::type;
      if (arr.is_cpu()) {
        cpu::put_along_axis_backward<T, Idx>(r, ptr<T>(arr), ptr<Idx>(indices), ptr<T>(values_read),
                                             out_in ? ptr<T>(out) : nullptr, ptr<T>(out_grad), mutable_ptr<T>(arr_grad),
                                             row_sums ? nullptr : mutable_ptr<T>(grad_at), v.outer, v.n, v.m, v.inner,
                                             include_self, v.idx_broadcast,
                                             counts_in ? ptr<int32_t>(counts) : nullptr);
        if (row_sums)
          cpu::add_row_values_grad<T, Idx>(ptr<T>(out_grad), ptr<Idx>(indices), mutable_ptr<T>(values_grad), v.outer,
                                           v.n, v.m, v.inner, v.values_broadcast);
        else if (v.values_broadcast)
          cpu::sum_broadcast_grad<T>(ptr<T>(grad_at), mutable_ptr<T>(values_grad), v.outer, v.m, v.inner,
                                     v.values_broadcast);
      } else {
#ifdef PADDLE_EXT_WITH_CUDA
        const paddle::Tensor full = gpu_indices(indices, v);
        gpu::put_along_axis_grads<T, Idx>(r, ptr<T>(arr), ptr<Idx>(full), ptr<T>(values_read),
                                          out_in ? ptr<T>(out) : nullptr, ptr<T>(out_grad), mutable_ptr<T>(arr_grad),
                                          mutable_ptr<T>(grad_at), v.outer, v.n, v.m, v.inner, include_self,
                                          ScratchTensors{arr.place(), {}}, arr.stream());
#else
        throw_no_cuda("put_along_axis_grad");
#endif
      }
    });
  });
#ifdef PADDLE_EXT_WITH_CUDA
  if (v.values_broadcast && !arr.is_cpu()) values_grad = gpu_sum_to_values(grad_at, values, v);
#endif
  return {arr_grad, values_grad};
}
}  // namespace

std::vector<paddle::Tensor> PutAlongAxisGradKernel(const paddle::Tensor& arr, const paddle::Tensor& indices,
                                                   const paddle::Tensor& values, const paddle::Tensor& out,
                                                   const paddle::Tensor& out_grad, int axis,
                                                   const std::string& reduce, bool include_self) {
  return grad_kernel(arr, indices, values, &out, out_grad, axis, parse_reduce(reduce), include_self, nullptr);
}

std::vector<paddle::Tensor> PutAlongAxisCountedVjpKernel(const paddle::Tensor& arr, const paddle::Tensor& indices,
                                                         const paddle::Tensor& values, const paddle::Tensor& out_grad,
                                                         const paddle::Tensor& counts, int axis, bool include_self) {
  return grad_kernel(arr, indices, values, nullptr, out_grad, axis, Reduce::Mean, include_self, &counts);
}

}  // namespace paddle_ext
