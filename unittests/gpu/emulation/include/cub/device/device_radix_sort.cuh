// cub::DeviceRadixSort::SortPairs for the emulated CUDA runtime: device memory is host memory, so a stable
// sort on the host by the key bits [begin_bit, end_bit), as cub's LSD radix sort orders them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int n, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 256;
      return cudaSuccess;
    }
    static_assert(std::is_unsigned<K>::value || std::is_integral<K>::value, "integral keys only");
    using U = std::make_unsigned_t<K>;
    const int bits = end_bit - begin_bit;
    const U field = bits >= (int)sizeof(U) * 8 ? U(~U(0)) : U((U(1) << bits) - 1);
    // cub orders signed keys by their two's-complement value: flip the sign bit of the field's top.
    auto key = [&](int i) {
      U u = static_cast<U>(keys_in[i]);
      if (std::is_signed<K>::value) u ^= U(1) << (sizeof(U) * 8 - 1);
      return (u >> begin_bit) & field;
    };
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
    std::vector<K> keys(n);
    std::vector<V> values(n);
    for (int i = 0; i < n; ++i) {
      keys[i] = keys_in[order[i]];
      values[i] = values_in[order[i]];
    }
    std::copy(keys.begin(), keys.end(), keys_out);
    std::copy(values.begin(), values.end(), values_out);
    return cudaSuccess;
  }
};

}  // namespace cub
