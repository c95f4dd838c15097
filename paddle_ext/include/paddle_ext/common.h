// Shared by every layer: host/device qualifiers, index type, the 16-bit float storage types used by
// the Paddle-free CPU kernels, and the accumulation type rule (half types accumulate in float32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define PE_HOSTDEVICE __host__ __device__
#define PE_DEVICE __device__
#define PE_FORCEINLINE __forceinline__
#else
#define PE_HOSTDEVICE
#define PE_DEVICE
#define PE_FORCEINLINE __attribute__((always_inline)) inline
#endif

namespace paddle_ext {

using index_t = int64_t;

// Bit-compatible with phi::dtype::float16 / __half and phi::dtype::bfloat16 / __nv_bfloat16.
// The binding reinterprets Paddle's pointers as these; cpu/ never sees a Paddle type.
struct float16_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

// The 16-bit float conversions, on the bits and branch-free (so that loops over them vectorize; Vec16 in
// vec_math.h is the same on vector lanes). Round to nearest even, like __float2half_rn / __float2bfloat16_rn.
PE_HOSTDEVICE PE_FORCEINLINE float half_bits_to_float(uint32_t h) {
  const uint32_t magnitude = (h & 0x7fffu) << 13;  // exponent and mantissa in float position
  float f;
  uint32_t bits = magnitude;
  std::memcpy(&f, &bits, 4);
  f *= 5.192296858534828e+33f;  // 2^112 rebiases the exponent (and normalises subnormals)
  std::memcpy(&bits, &f, 4);
  bits = (h & 0x7c00u) == 0x7c00u ? (magnitude | 0x7f800000u) : bits;  // inf / nan
  bits |= (h & 0x8000u) << 16;
  std::memcpy(&f, &bits, 4);
  return f;
}

PE_HOSTDEVICE PE_FORCEINLINE uint16_t float_to_half_bits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  // Subnormal results: adding 0.5f rounds at the half's subnormal step (2^-24), to nearest even.
  float sub;
  std::memcpy(&sub, &f, 4);
  sub += 0.5f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  const uint32_t subnormal = sub_bits - 0x3f000000u;
  // Normal results: rebias, round the 13 dropped bits to nearest even (a carry may reach inf: right).
  const uint32_t normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
  uint32_t o = f < 0x38800000u ? subnormal : normal;
  o = f >= 0x47800000u ? (f > 0x7f800000u ? 0x7e00u : 0x7c00u) : o;
  return static_cast<uint16_t>(o | (sign >> 16));
}

PE_HOSTDEVICE PE_FORCEINLINE float bf16_bits_to_float(uint32_t b) {
  const uint32_t f = b << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

PE_HOSTDEVICE PE_FORCEINLINE uint16_t float_to_bf16_bits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  const uint32_t nan = (f >> 16) | 0x40u;  // quiet nan
  return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// M(T) for each floating type the kernels take: their explicit instantiations.
#define PE_FOR_FLOAT_TYPES(M) M(float) M(double) M(float16_t) M(bfloat16_t)

// Accumulation type: float for the 16-bit types, the type itself otherwise.
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<float16_t> {
  using type = float;
};
template <>
struct Acc<bfloat16_t> {
  using type = float;
};
template <typename T>
using acc_t = typename Acc<T>::type;

// Load/store through the accumulation type, on host and device alike (CUDA intrinsics on device).
template <typename T>
PE_HOSTDEVICE inline acc_t<T> load(const T& v) {
  return v;
}
PE_HOSTDEVICE inline float load(const float16_t& v) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(v.bits));
#else
  return half_bits_to_float(v.bits);
#endif
}
PE_HOSTDEVICE inline float load(const bfloat16_t& v) {
#ifdef __CUDA_ARCH__
  return __bfloat162float(__ushort_as_bfloat16(v.bits));
#else
  return bf16_bits_to_float(v.bits);
#endif
}

template <typename T, typename A>
struct Store {
  PE_HOSTDEVICE static T apply(A v) { return static_cast<T>(v); }
};
template <typename A>
struct Store<float16_t, A> {
  PE_HOSTDEVICE static float16_t apply(A v) {
#ifdef __CUDA_ARCH__
    return float16_t{__half_as_ushort(__float2half_rn(static_cast<float>(v)))};
#else
    return float16_t{float_to_half_bits(static_cast<float>(v))};
#endif
  }
};
template <typename A>
struct Store<bfloat16_t, A> {
  PE_HOSTDEVICE static bfloat16_t apply(A v) {
#ifdef __CUDA_ARCH__
    return bfloat16_t{__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)))};
#else
    return bfloat16_t{float_to_bf16_bits(static_cast<float>(v))};
#endif
  }
};
// store<T>(v): v (any accumulation type) rounded once to T.
template <typename T, typename A>
PE_HOSTDEVICE inline T store(A v) {
  return Store<T, A>::apply(v);
}

template <typename T>
PE_HOSTDEVICE constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

}  // namespace paddle_ext
