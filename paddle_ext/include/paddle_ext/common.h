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
#else
#define PE_HOSTDEVICE
#define PE_DEVICE
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

PE_HOSTDEVICE inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t f;
  if (exp == 0x1fu) {
    f = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    f = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    f = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    f = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

// Round to nearest even, like __float2half_rn.
PE_HOSTDEVICE inline uint16_t float_to_half_bits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflows to inf after rounding
  if (abs < 0x38800000u) {                         // result is subnormal or zero
    if (abs < 0x33000000u) return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t half_man = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return sign | (uint16_t)half_man;
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | (uint16_t)h;
}

PE_HOSTDEVICE inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t f = (uint32_t)b << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

PE_HOSTDEVICE inline uint16_t float_to_bf16_bits(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40u);  // quiet nan
  f += 0x7fffu + ((f >> 16) & 1u);  // round to nearest even
  return (uint16_t)(f >> 16);
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
