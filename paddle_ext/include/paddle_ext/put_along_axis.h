// put_along_axis: scatter `values` into `arr` along one axis with a reduction (docs/put_along_axis.md).
//
// Shapes, as the binding hands them over (the Python API has already broadcast or sliced):
//   arr, out        [outer, n, inner]
//   indices, values [outer, m, inner]          position p = (o, j, i)
//                   (on the CPU indices may be [outer, m, 1], broadcast along inner: idx_broadcast,
//                   and values may have size 1 along any of the three parts: values_broadcast)
//   slot(p)         = (o, wrap(indices[p]), i), wrap(k) = k < 0 ? k + n : k, valid for -n <= k < n.
// Contributions to one slot are applied in increasing j (the flat order of `indices`), so `assign`
// is "largest position wins" and every mode is deterministic on the CPU.
//
// The reduce mode is a compile-time parameter: one kernel body per layer, templated on a functor
// below. Half types accumulate in float32, an integer `mean` in int64 (reduce_acc_t).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "paddle_ext/common.h"

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace paddle_ext {

enum class Reduce : int { Assign = 0, Add = 1, Mul = 2, Mean = 3, Min = 4, Max = 5 };

// The launchers' run-time reduce -> the kernels' compile-time template parameter (host code).
template <typename Fn>
void dispatch_reduce(Reduce reduce, Fn&& fn) {
  switch (reduce) {
    case Reduce::Assign: return fn(std::integral_constant<Reduce, Reduce::Assign>{});
    case Reduce::Add: return fn(std::integral_constant<Reduce, Reduce::Add>{});
    case Reduce::Mul: return fn(std::integral_constant<Reduce, Reduce::Mul>{});
    case Reduce::Mean: return fn(std::integral_constant<Reduce, Reduce::Mean>{});
    case Reduce::Min: return fn(std::integral_constant<Reduce, Reduce::Min>{});
    case Reduce::Max: return fn(std::integral_constant<Reduce, Reduce::Max>{});
  }
}

// What a slot accumulates in: acc_t<T> (float32 for the half types), except that an integer `mean` sums
// in int64: the mean of T values always fits in T, their sum need not (counts are int32, so the sum of
// up to 32-bit values is exact in int64). `add` and `mul` keep T and wrap around in it, as in PyTorch.
template <Reduce R, typename T>
using reduce_acc_t = std::conditional_t<R == Reduce::Mean && std::is_integral<T>::value, int64_t, acc_t<T>>;

template <typename A>
PE_HOSTDEVICE inline bool is_nan(A v) {
  return v != v;  // false for every integer type
}

// Integer add and mul wrap around in A. Signed overflow is undefined (and nvcc has no -fwrapv), so they run in
// the unsigned type of A's promoted type, which wraps on every compiler, and convert back (modulo 2^bits).
template <typename A, bool = std::is_integral<A>::value>
struct WrapArith {
  using type = A;
};
template <typename A>
struct WrapArith<A, true> {
  using type = std::make_unsigned_t<decltype(A() + A())>;  // int16 * int16 in unsigned int, not uint16 -> int
};
template <typename A>
using wrap_arith_t = typename WrapArith<A>::type;

// combine(self, v): the value of a slot after one more contribution v.
template <Reduce R>
struct ReduceOp;
template <>
struct ReduceOp<Reduce::Assign> {
  template <typename A>
  PE_HOSTDEVICE static A combine(A, A v) { return v; }
};
template <>
struct ReduceOp<Reduce::Add> {
  template <typename A>
  PE_HOSTDEVICE static A combine(A s, A v) { return static_cast<A>(wrap_arith_t<A>(s) + wrap_arith_t<A>(v)); }
};
template <>
struct ReduceOp<Reduce::Mean> : ReduceOp<Reduce::Add> {};  // a sum; divided by the count at the end
template <>
struct ReduceOp<Reduce::Mul> {
  template <typename A>
  PE_HOSTDEVICE static A combine(A s, A v) { return static_cast<A>(wrap_arith_t<A>(s) * wrap_arith_t<A>(v)); }
};
template <>
struct ReduceOp<Reduce::Max> {  // a NaN on either side wins (PyTorch's rule; Paddle 3.3.1 drops it)
  template <typename A>
  PE_HOSTDEVICE static A combine(A s, A v) { return (is_nan(v) || v > s) ? v : s; }
};
template <>
struct ReduceOp<Reduce::Min> {
  template <typename A>
  PE_HOSTDEVICE static A combine(A s, A v) { return (is_nan(v) || v < s) ? v : s; }
};

PE_HOSTDEVICE inline index_t wrap_index(index_t k, index_t n) { return k < 0 ? k + n : k; }
PE_HOSTDEVICE inline bool index_in_range(index_t k, index_t n) { return k >= -n && k < n; }

// Integer mean rounds toward negative infinity (as Paddle and PyTorch do); floats divide.
template <typename A>
PE_HOSTDEVICE inline A mean_divide(A sum, index_t count) {
  if (count <= 1) return sum;
  if constexpr (std::numeric_limits<A>::is_integer) {
    const A c = static_cast<A>(count);
    A q = sum / c;
    if ((sum % c != 0) && ((sum < 0) != (c < 0))) --q;
    return q;
  } else {
    return sum / static_cast<A>(count);
  }
}

// c ? a : b. On the host a select on the bits: GCC compiles a data-dependent ?: in a row loop to a
// branch that mispredicts about half the time (and keeps the loop from vectorising). Any type of
// 1, 2, 4 or 8 bytes, the 16-bit float storage types included.
template <typename T>
PE_HOSTDEVICE inline T pick(bool c, T a, T b) {
#ifdef __CUDA_ARCH__
  return c ? a : b;
#else
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t,
            std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(T) == sizeof(U), "pick: unexpected size");
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  const U mask = U(0) - U(c);
  const U r = (ua & mask) | (ub & ~mask);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
#endif
}

// amin/amax: x is the slot's result `r`: equal to it, or NaN where the result is NaN (a NaN
// contributor wins, so the NaN contributors are the result, and they share its grad).
template <typename A>
PE_HOSTDEVICE inline bool same_value(A x, A r) {
  return (x == r) | (is_nan(x) & is_nan(r));  // bitwise: no branch in the row loops
}

// same_value, or a plain == where the caller knows that the result is not NaN (cheaper in row loops).
template <bool NanAware, typename A>
PE_HOSTDEVICE inline bool matches(A x, A r) {
  if constexpr (NanAware) return same_value(x, r);
  else return x == r;
}

// A normal number: finite, nonzero, not subnormal. Where every factor of a `mul` slot and its result
// are, out / f is the product of the other factors to rounding; elsewhere (zeros, ±inf, NaN,
// underflow, overflow) only a product of the others is (exclusive prefix x suffix products).
template <typename A>
PE_HOSTDEVICE inline bool is_normal_value(A x) {
  // On the bits: the exponent field is neither 0 (zero, subnormal) nor all ones (inf, NaN). Integer
  // ops only (the float compares of |x| cost a third of the mul backward's fast pass on 2 threads).
  static_assert(sizeof(A) == 4 || sizeof(A) == 8, "is_normal_value: float or double");
  using U = std::conditional_t<sizeof(A) == 8, uint64_t, uint32_t>;
  constexpr int kMant = std::numeric_limits<A>::digits - 1;
  constexpr U kExp = (U(1) << (sizeof(A) * 8 - 1 - kMant)) - 1;
  U b;
  std::memcpy(&b, &x, sizeof(A));
  return ((b >> kMant) & kExp) - U(1) < kExp - U(1);
}

// The value a slot starts from when arr takes no part in its reduction (GPU: include_self=False).
template <Reduce R, typename A>
PE_HOSTDEVICE inline A reduce_identity() {
  using L = std::numeric_limits<A>;
  if constexpr (R == Reduce::Mul) return A(1);
  else if constexpr (R == Reduce::Min) return L::has_infinity ? L::infinity() : L::max();
  else if constexpr (R == Reduce::Max) return L::has_infinity ? -L::infinity() : L::lowest();
  else return A(0);
}

// Backward, from per-slot statistics gathered over the contributions of the slot:
//   count   contributions; aux: contributors matching the result (Min/Max, same_value, arr included
//   when it took part); others: the product of the slot's other factors, of this factor (Mul).
// PyTorch's scatter_reduce rules, with mul's grads products (never quotients) of the other factors
// and min/max ties split evenly. NanAware=false: the caller knows that `out` is not NaN.
template <Reduce R, typename A, bool NanAware = true>
PE_HOSTDEVICE inline A values_grad_of(A g, A v, A out, int32_t count, int32_t aux, A others, bool include_self) {
  if constexpr (R == Reduce::Add) return g;
  else if constexpr (R == Reduce::Mean) return g / static_cast<A>(count + (include_self ? 1 : 0));
  else if constexpr (R == Reduce::Mul) return g * others;
  else {
    const A share = g / static_cast<A>(aux + int32_t(aux <= 0));  // aux >= 0
    return pick(matches<NanAware>(v, out) && aux > 0, share, A(0));
  }
}
template <Reduce R, typename A, bool NanAware = true>
PE_HOSTDEVICE inline A arr_grad_of(A g, A a, A out, int32_t count, int32_t aux, A others, bool include_self) {
  A taken;  // the grad of a written slot that arr took part in
  if constexpr (R == Reduce::Mean) {
    taken = g / static_cast<A>(count + 1);
  } else if constexpr (R == Reduce::Mul) {
    taken = g * others;
  } else if constexpr (R == Reduce::Min || R == Reduce::Max) {
    const A share = g / static_cast<A>(aux + int32_t(aux <= 0));  // aux >= 1 whenever a matches out
    taken = pick(matches<NanAware>(a, out), share, A(0));
  } else {
    taken = g;
  }
  return pick(count == 0, g, pick(include_self, taken, A(0)));  // an unwritten slot passes its grad through
}

// Parts of the positions [outer, m, inner] along which the values have size 1 (broadcast=True with values
// that need broadcasting: a scalar, one value per index row [E, 1] against [E, C], one row [1, C] for
// every index row). The CPU kernels read them with a stride of 0 there; they are never materialised.
enum ValuesBroadcast : int { kValuesOuter = 1, kValuesAxis = 2, kValuesInner = 4 };

// Python-visible error contract: the binding reports the first bad position of `indices`.
struct BadIndex {
  index_t position = -1;  // flat position in indices, -1 when all are valid
  index_t value = 0;
};

namespace cpu {
// Returns the first (lowest flat position) out-of-range index, if any; writes nothing.
template <typename Idx>
BadIndex check_indices(const Idx* indices, index_t count, index_t n);

// out = arr with values scattered in (out may be arr itself: the inplace op). Where reduce_acc_t is wider
// than T (half types, integer means) they accumulate in a buffer of it and are rounded once. Out-of-range indices are skipped (never written); returns
// false if there was one, so a caller writing a fresh buffer needs no separate check pass (inplace
// callers run check_indices first).
// idx_broadcast: `indices` is [outer, m, 1], one index for the whole inner row of position (o, j, :)
// (broadcast=True with indices [E, 1] against values [E, C], read without materialising it).
// values_broadcast: ValuesBroadcast bits, values [outer or 1, m or 1, inner or 1] read with strides of 0.
// counts (Mean only, may be null): each slot's number of in-range contributions, int32 [outer, n, inner],
// for put_along_axis_backward to reuse.
template <typename T, typename Idx>
bool put_along_axis_forward(Reduce reduce, const T* arr, T* out, const T* values, const Idx* indices,
                            index_t outer, index_t n, index_t m, index_t inner, bool include_self,
                            bool idx_broadcast = false, int values_broadcast = 0, int32_t* counts = nullptr);

// The grad of broadcast values: values_grad [outer or 1, m or 1, inner or 1] (ValuesBroadcast bits) is
// grad [outer, m, inner] summed over the broadcast parts, in a fixed order (deterministic), in double for
// float32/float64 and float32 for the half types, rounded once.
template <typename T>
void sum_broadcast_grad(const T* grad, T* values_grad, index_t outer, index_t m, index_t inner, int values_broadcast);

// `add`'s grad of values broadcast along inner (kValuesInner set) with indices [outer, m, 1] (idx_broadcast):
// each value sums the out_grad rows its index rows point at, without the positions' grads in between;
// the same sums, in the same order, as sum_broadcast_grad over them (an out-of-range index adds zeros).
template <typename T, typename Idx>
void add_row_values_grad(const T* out_grad, const Idx* indices, T* values_grad, index_t outer, index_t n, index_t m,
                         index_t inner, int values_broadcast);

// Grads for every mode. out_grad/arr/out: [outer, n, inner]; values/values_grad: [outer, m, inner].
// Either grad pointer may be null (not requested). Scratch buffers are allocated inside.
// counts: the forward's (Mean only, may be null); with them the grads need no counting pass.
template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self, bool idx_broadcast = false,
                             const int32_t* counts = nullptr);
}  // namespace cpu

#if defined(PADDLE_EXT_WITH_CUDA) || defined(__CUDACC__)
namespace gpu {  // launchers in gpu/put_along_axis/
// Same contract as cpu::put_along_axis_forward, on `acc`: arr's values in reduce_acc_t<reduce, T>
// (float32 for the half types, int64 for an integer mean; the caller rounds back to T). Device scratch
// comes from the caller: count int32 [outer*n*inner], zeroed, for Mean (else null); for Assign `winner`,
// put_along_axis_winner_scratch() bytes, uninitialised (the launcher prepares what it reads).
// Out-of-range indices are skipped: nothing outside arr is ever written, and no host sync is needed.
template <typename T, typename A, typename Idx>
void put_along_axis_forward(Reduce reduce, A* acc, const T* values, const Idx* indices, int32_t* count,
                            int64_t* winner, index_t outer, index_t n, index_t m, index_t inner,
                            bool include_self, cudaStream_t stream);
size_t put_along_axis_winner_scratch(index_t outer, index_t n, index_t inner);
// deterministic=True for Add/Mean: sort (slot, position) pairs with a stable radix sort, then one
// thread per slot folds its values in position order, exactly like the CPU: bit-identical run to run
// and to the CPU for float32/float64. `workspace` holds put_along_axis_sorted_workspace() bytes.
size_t put_along_axis_sorted_workspace(index_t positions, index_t slots);
template <typename T, typename A, typename Idx>
void put_along_axis_sorted(Reduce reduce, A* acc, const T* values, const Idx* indices, void* workspace,
                           size_t workspace_bytes, index_t outer, index_t n, index_t m, index_t inner,
                           bool include_self, cudaStream_t stream);
// Scratch: winner (Assign) as in the forward, put_along_axis_winner_scratch() bytes, uninitialised;
// per slot, zeroed by the caller: count (Mean, Min, Max, Add without include_self), aux (Min, Max);
// Mul takes `workspace` instead, put_along_axis_sorted_workspace() bytes: its grads are exclusive
// prefix x suffix products over the positions sorted by slot. Null where the mode does not need it.
template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, int64_t* winner, int32_t* count,
                             int32_t* aux, void* workspace, size_t workspace_bytes, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self, cudaStream_t stream);
}  // namespace gpu
#endif

}  // namespace paddle_ext
