// Glue shared by every binding: the only place (with binding/*.cc) that sees Paddle's headers.
// Maps Paddle dtypes to the storage types the raw-pointer kernels take, checks places, and views
// a tensor around one axis as [outer, n, inner].
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "paddle/common/enforce.h"
#include "paddle/extension.h"
// phi's DenseTensor header also includes cuBLAS's headers in a CUDA build of Paddle (through enforce.h),
// which a CUDA toolkit has; without them (a syntax check of the CUDA glue) the zero-size fix-up below is left out.
#if !defined(PADDLE_WITH_CUDA) || __has_include(<cublas_v2.h>)
#include "paddle/phi/core/dense_tensor.h"
#define PADDLE_EXT_HAS_DENSE_TENSOR 1
#endif
#include "paddle_ext/memory.h"
#include "paddle_ext/common.h"
#include "paddle_ext/grad_clamp.h"

#ifdef PADDLE_EXT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

// Errors raised by the kernels, as Paddle's own typed errors: every executor (dygraph, to_static,
// Executor, paddle.inference) carries them to Python with their message, PE_CHECK / PE_THROW as a
// ValueError (InvalidArgument) and PE_THROW_INDEX as an IndexError (OutOfRange). PD_CHECK/PD_THROW
// throw a plain exception that static executors reduce to "RuntimeError: std::exception" or abort on.
#define PE_THROW_CODE(CODE, ...)                                                                         \
  throw ::common::enforce::EnforceNotMet(                                                                 \
      ::common::ErrorSummary(CODE, ::common::ErrorMessage(__VA_ARGS__).to_string()), __FILE__, __LINE__)
#define PE_THROW(...) PE_THROW_CODE(::common::ErrorCode::INVALID_ARGUMENT, __VA_ARGS__)
#define PE_THROW_INDEX(...) PE_THROW_CODE(::common::ErrorCode::OUT_OF_RANGE, __VA_ARGS__)
#define PE_CHECK(COND, ...)                          \
  do {                                               \
    if (PD_UNLIKELY(!(COND))) PE_THROW(__VA_ARGS__); \
  } while (0)

// "1.5 GiB (1610612736 bytes)"
inline std::string format_bytes(size_t bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " bytes";
  char text[64];
  std::snprintf(text, sizeof text, "%.1f %s (%zu bytes)", value, units[unit], bytes);
  return text;
}

// The one place where the kernels' failures become Paddle's typed errors: every registered kernel runs as
// Guarded<&Kernel, name>::run (the generated registration wraps each one; opgen.py). Paddle carries only its
// own error types to Python: another exception (a std::bad_alloc, a runtime_error) ends the process in
// dygraph (std::terminate in its error translation), and static executors lose its type. So:
// - OutOfMemory (memory.h: kernel scratch, checked allocation; the CUDA launchers' workspace), any other
//   std::bad_alloc, and Paddle's own ResourceExhausted (an output or a Paddle op inside the kernel) become
//   ResourceExhausted naming the op: a Python MemoryError that says memory ran out, which op, and the bytes;
// - a std::runtime_error (a CUDA error in a launcher) becomes External (a Python OSError) naming the op;
// - Paddle's other errors (PE_CHECK & co., its GPU allocator's BadAlloc) pass unchanged.
template <auto Kernel, const char* Op>
struct Guarded;
template <typename R, typename... Args, R (*Kernel)(Args...), const char* Op>
struct Guarded<Kernel, Op> {
  static R run(Args... args) {
    try {
      return Kernel(std::forward<Args>(args)...);
    } catch (const OutOfMemory& e) {
      PE_THROW_CODE(::common::ErrorCode::RESOURCE_EXHAUSTED, Op, ": out of memory: ", format_bytes(e.bytes()),
                    " of scratch could not be allocated");
    } catch (const std::bad_alloc& e) {
      PE_THROW_CODE(::common::ErrorCode::RESOURCE_EXHAUSTED, Op, ": out of memory (", e.what(), ")");
    } catch (const ::common::enforce::EnforceNotMet& e) {
      if (e.code() != ::common::ErrorCode::RESOURCE_EXHAUSTED) throw;
      PE_THROW_CODE(::common::ErrorCode::RESOURCE_EXHAUSTED, Op, ": out of memory: ",
                    first_line(e.simple_error_str()));
    } catch (const std::runtime_error& e) {
      PE_THROW_CODE(::common::ErrorCode::EXTERNAL, Op, ": ", e.what());
    }
  }

 private:
  // "(ResourceExhausted) Fail to alloc memory of 33554432 size, ...\n  [Hint: ...]" -> "Fail to alloc memory of ..."
  static std::string first_line(const std::string& text) {
    const std::string kind = "(ResourceExhausted) ";
    const size_t from = text.compare(0, kind.size(), kind) == 0 ? kind.size() : 0;
    return text.substr(from, text.find('\n') - from);
  }
};

template <typename T>
struct TypeTag {
  using type = T;
};

// fn(TypeTag<T>{}) for the storage type of a floating dtype (float16/bfloat16 as 16-bit structs).
template <typename Fn>
void dispatch_floating(paddle::DataType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case paddle::DataType::FLOAT32: return fn(TypeTag<float>{});
    case paddle::DataType::FLOAT64: return fn(TypeTag<double>{});
    case paddle::DataType::FLOAT16: return fn(TypeTag<float16_t>{});
    case paddle::DataType::BFLOAT16: return fn(TypeTag<bfloat16_t>{});
    default:
      PE_THROW(op, ": unsupported dtype ", phi::DataTypeToString(dtype),
               "; expected float16, bfloat16, float32 or float64");
  }
}

// float32/float64 only: ops whose Python API computes float16/bfloat16 in float32 (the lattice ops).
template <typename Fn>
void dispatch_float_double(paddle::DataType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case paddle::DataType::FLOAT32: return fn(TypeTag<float>{});
    case paddle::DataType::FLOAT64: return fn(TypeTag<double>{});
    default:
      PE_THROW(op, ": unsupported dtype ", phi::DataTypeToString(dtype),
               "; expected float32 or float64 (the Python API computes 16-bit types in float32)");
  }
}

// Floating types plus the integer types the scatter-style ops take.
template <typename Fn>
void dispatch_floating_and_integral(paddle::DataType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case paddle::DataType::INT32: return fn(TypeTag<int32_t>{});
    case paddle::DataType::INT64: return fn(TypeTag<int64_t>{});
    case paddle::DataType::INT16: return fn(TypeTag<int16_t>{});
    case paddle::DataType::UINT8: return fn(TypeTag<uint8_t>{});
    default: return dispatch_floating(dtype, op, std::forward<Fn>(fn));
  }
}

template <typename T>
const T* ptr(const paddle::Tensor& t) {
  return reinterpret_cast<const T*>(t.data());
}
template <typename T>
T* mutable_ptr(paddle::Tensor& t) {
  return reinterpret_cast<T*>(t.data());
}

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;  // unknown in a static graph
    n *= d;
  }
  return n;
}

// An output tensor (contents unset, as paddle::empty's). A CPU one of `cache_from` bytes (BlockCache::kMinBytes)
// or more comes from BlockCache (see there: no first-touch page faults on every call), returned to it when Paddle frees it.
inline paddle::Tensor new_output(const std::vector<int64_t>& shape, paddle::DataType dtype, const paddle::Place& place,
                                 size_t cache_from = BlockCache::kMinBytes) {
#ifdef PADDLE_EXT_HAS_DENSE_TENSOR
  if (numel_of(shape) == 0) {
    // Paddle 3.0's custom-op runner rejects an output without memory ("not initialized"), as
    // paddle::empty makes a zero-size one: give it one element's worth and the zero-size shape.
    paddle::Tensor out = paddle::empty({1}, dtype, place);
    std::static_pointer_cast<phi::DenseTensor>(out.impl())->Resize(common::make_ddim(shape));
    return out;
  }
#endif
  if (place.GetType() == phi::AllocationType::CPU) {
    const size_t bytes = static_cast<size_t>(numel_of(shape)) * phi::SizeOf(dtype);
    size_t capacity = 0;
    if (void* block = BlockCache::instance().take(bytes, &capacity, cache_from))
      return paddle::from_blob(block, shape, dtype, phi::DataLayout::NCHW, place,
                               [capacity](void* data) { BlockCache::instance().give(data, capacity); });
  }
  return paddle::empty(shape, dtype, place);
}

// Kernels index raw memory: hand them dense, plainly laid out tensors. In a paddle.inference
// predictor with oneDNN on (the CPU default), an input produced by a oneDNN kernel can arrive in a
// blocked ONEDNN layout that Paddle does not convert for custom ops; `assign` goes through Paddle's
// data transform, which reorders it to the plain layout.
inline paddle::Tensor dense(const paddle::Tensor& t) {
  // Paddle 3.0 hands a zero-size input without memory, whose data() and place() throw: give it an
  // allocation, on the CPU (its place is unknown; a CUDA kernel never reads a zero-size input).
  if (t.numel() == 0 && !t.initialized()) return new_output(t.shape(), t.dtype(), paddle::CPUPlace());
  if (t.layout() == phi::DataLayout::ONEDNN) return paddle::experimental::assign(t);
  if (t.is_contiguous()) return t;
  paddle::Tensor view = t;  // Paddle 3.0's Tensor::contiguous() is not const (it returns a new tensor all the same)
  return view.contiguous();
}

// The grad of an output that nothing downstream used (paddle.grad w.r.t. one of px and py): Paddle hands the
// grad kernel an undefined tensor there, which counts as zeros of the output's shape.
inline paddle::Tensor grad_or_zeros(const paddle::Tensor& grad, const std::vector<int64_t>& shape, phi::DataType dtype,
                                    const phi::Place& place) {
  if (grad.defined() && (grad.initialized() || grad.numel() == 0)) return dense(grad);
  return paddle::experimental::full(shape, 0, dtype, place);
}

// The grad clamp's plumbing (grad_clamp.h): an op's zero output `scale` [B], which the API adds to the loss
// with the clamp on, so that its grad brings each item's upstream grad to the op's backward.
inline paddle::Tensor zero_scale(int64_t B, paddle::DataType dtype, const paddle::Place& place) {
  return B == 0 ? new_output({0}, dtype, place) : paddle::experimental::full({B}, 0, dtype, place);
}

// scale's grad where the clamp (bound `clamp`) is on (absent: zeros); undefined where it is off (the kernels do
// not read it).
inline paddle::Tensor clamp_scale_grad(double clamp, int64_t B, const paddle::Tensor& scale_grad,
                                       paddle::DataType dtype, const paddle::Place& place, const char* op) {
  if (!clamp_on(clamp)) return paddle::Tensor();
  paddle::Tensor g = grad_or_zeros(scale_grad, {B}, dtype, place);
  PE_CHECK(g.numel() == B, op, ": scale_grad must be [B] = [", B, "]");
  return g;
}

template <typename T>
const T* scale_ptr(const paddle::Tensor& scale_grad) {
  return scale_grad.defined() ? ptr<T>(scale_grad) : nullptr;
}

// The last line of defence: the Python API has already validated the axis with a clear error.
inline int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  const int64_t r = rank == 0 ? 1 : rank;  // a 0-d tensor has one axis of length 1 here
  PE_CHECK(axis >= -r && axis < r, op, ": axis ", axis, " is out of range for a tensor of rank ", rank);
  return axis < 0 ? axis + r : axis;
}

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

inline AxisView axis_view(const std::vector<int64_t>& shape, int64_t axis, bool flatten, const char* op) {
  AxisView v;
  if (flatten || shape.empty()) {
    v.n = numel_of(shape);
    return v;
  }
  const int64_t a = normalize_axis(axis, (int64_t)shape.size(), op);
  for (int64_t i = 0; i < a; ++i) v.outer *= shape[i];
  v.n = shape[a];
  for (size_t i = a + 1; i < shape.size(); ++i) v.inner *= shape[i];
  return v;
}

inline void check_same_place(const paddle::Tensor& a, const paddle::Tensor& b, const char* op,
                             const char* name_a, const char* name_b) {
  PE_CHECK(a.place() == b.place(), op, ": ", name_a, " and ", name_b, " must be on the same place");
}

[[noreturn]] inline void throw_no_cuda(const char* op) {
  PE_THROW(op, ": the tensor is on a GPU, but paddle_ext was built without CUDA kernels "
               "(reinstall with a CUDA build of Paddle, or set PADDLE_EXT_WITH_CUDA=1)");
}

}  // namespace paddle_ext
