// Stable log-space arithmetic, written once for CPU and CUDA.
#pragma once

#include "paddle_ext/common.h"

namespace paddle_ext {

// log(exp(a) + exp(b)) = max + std::log1p(std::exp(min - max)).
// -inf with -inf gives -inf (not NaN from -inf - -inf); +inf wins; NaN propagates.
template <typename A>
PE_HOSTDEVICE inline A log_add_exp(A a, A b) {
  if (a != a || b != b) return a + b;  // NaN
  const A hi = a > b ? a : b;
  const A lo = a > b ? b : a;
  if (lo == neg_inf<A>() || hi == -neg_inf<A>()) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

// A log-domain running sum kept as (max, sum of std::exp(v - max)): one exp per added term, a log
// only when the value is read. Used by the scans; exact semantics of log_add_exp above.
template <typename A>
struct LogSumAcc {
  A max = neg_inf<A>();
  A sum = A(0);  // sum of std::exp(v - max) over the terms added; 0 while max is -inf

  PE_HOSTDEVICE inline void add(A v) {
    if (v != v || max != max) {  // NaN sticks
      max = v + max;
      sum = A(1);
      return;
    }
    if (v == neg_inf<A>()) return;
    if (v <= max) {
      if (max != -neg_inf<A>()) sum += std::exp(v - max);
    } else {
      sum = (max == neg_inf<A>() || v == -neg_inf<A>()) ? A(1) : sum * std::exp(max - v) + A(1);
      max = v;
    }
  }
  // The accumulator holding one term, `log_value` (the carry into a scan piece).
  PE_HOSTDEVICE static inline LogSumAcc from_log(A log_value) {
    LogSumAcc acc;
    acc.add(log_value);
    return acc;
  }
  PE_HOSTDEVICE inline A value() const {
    if (max == neg_inf<A>() || max != max || max == -neg_inf<A>()) return max;
    return max + std::log(sum);
  }
};

}  // namespace paddle_ext
