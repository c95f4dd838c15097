// CPU logcumsumexp along contiguous rows (inner == 1): a row cut into chunks of kChunk elements, each scanned
// in linear form from the carry of the chunks before it (scan.h); a single long row split over two threads.
#include "entries.h"
#include "scan.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors pass between always_inline functions (vec_math.h)

namespace paddle_ext::cpu {
namespace {

template <typename T>
struct ForwardRows {
  const T* x;
  T* out;
  index_t n;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13

  // Scans positions [s0, s1) (in scan order) of row r from `carry`.
  template <int W>
  PE_VINLINE void scan_range(index_t r, index_t s0, index_t s1, double carry) const {
    alignas(64) double buf[kChunk];
    for (index_t start = s0; start < s1; start += kChunk) {
      const index_t k = std::min(kChunk, s1 - start);
      prefetch_next(x + r * n, out + r * n, n, start + kChunk, reverse);
      const index_t kp = gather<W>(x + r * n, n, start, k, reverse, buf, -kInf);
      carry = exclusive ? scan_chunk<W, kFull, true>(buf, kp, carry) : scan_chunk<W, kFull, false>(buf, kp, carry);
      scatter<W>(buf, n, start, k, reverse, out + r * n);
    }
  }

  // The float-lane version (float32 and narrower): false when the float bound failed after float
  // rounding had entered the carry (`exact` false); then the caller rescans the line in double.
  template <int W>
  PE_VINLINE bool scan_range_f(index_t r, index_t s0, index_t s1, double carry, bool exact) const {
    alignas(64) float bx[kChunk], bo[kChunk];
    for (index_t start = s0; start < s1; start += kChunk) {
      const index_t k = std::min(kChunk, s1 - start);
      // float32 forward chunks of whole vectors are scanned in place, without the copies.
      const bool direct = std::is_same<T, float>::value && !reverse && k % (2 * W) == 0;
      const float* in = direct ? reinterpret_cast<const float*>(x + r * n + start) : bx;
      float* res = direct ? reinterpret_cast<float*>(out + r * n + start) : bo;
      const index_t kp = direct ? k : gather<W>(x + r * n, n, start, k, reverse, bx, -std::numeric_limits<float>::infinity());
      NextLines next;
      if (start + kChunk < s1) {
        const index_t first = reverse ? n - start - kChunk - std::min(kChunk, s1 - start - kChunk) : start + kChunk;
        next = {reinterpret_cast<const char*>(x + r * n + first), reinterpret_cast<char*>(out + r * n + first),
                static_cast<index_t>(2 * W * sizeof(T))};
      }
      const bool ok = exclusive ? scan_chunk_f<W, true>(in, res, kp, carry, exact, next)
                                : scan_chunk_f<W, false>(in, res, kp, carry, exact, next);
      if (!ok) return false;
      if (!direct) scatter<W>(bo, n, start, k, reverse, out + r * n);
    }
    return true;
  }

  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    for (index_t r = r0; r < r1; ++r) {
      if (kFull || !scan_range_f<W>(r, 0, n, -kInf, true)) scan_range<W>(r, 0, n, -kInf);
    }
  }

  // The total of positions [0, split) of the single row as a log value.
  template <int W>
  PE_VINLINE double reduce_range(index_t split, bool float_lanes) const {
    double carry = -kInf;
    if (float_lanes) {
      alignas(64) float bx[kChunk];
      index_t start = 0;
      for (; start < split; start += kChunk) {
        const index_t k = std::min(kChunk, split - start);
        if (!reduce_chunk_f<W>(bx, gather<W>(x, n, start, k, reverse, bx, -std::numeric_limits<float>::infinity()),
                               carry)) {
          break;
        }
      }
      if (start >= split) return carry;
      carry = -kInf;
    }
    alignas(64) double buf[kChunk];
    for (index_t start = 0; start < split; start += kChunk) {
      const index_t k = std::min(kChunk, split - start);
      carry = reduce_chunk<W, kFull>(buf, gather<W>(x, n, start, k, reverse, buf, -kInf), carry);
    }
    return carry;
  }

  // One long row on two threads: part 0 scans [0, split); part 1 first reduces [0, split) to its total
  // (an exp per element, about a third of a scan's cost), then scans [split, n) from it.
  template <int W>
  PE_VINLINE void run_split(index_t part, index_t split) const {
    if (part == 0) {
      if (kFull || !scan_range_f<W>(0, 0, split, -kInf, true)) scan_range<W>(0, 0, split, -kInf);
      return;
    }
    if (kFull || !scan_range_f<W>(0, split, n, reduce_range<W>(split, !kFull), false)) {
      scan_range<W>(0, split, n, reduce_range<W>(split, false));
    }
  }
};

template <typename T>
struct ForwardSplitRow {
  ForwardRows<T> rows;
  index_t split;
  template <int W>
  PE_VINLINE void run(index_t part) const {
    rows.template run_split<W>(part, split);
  }
};

// The grad of a contiguous row, scanned from the end of the forward's order (`reverse` here is the
// backward's scan direction).
template <typename T>
struct BackwardRows {
  const T *x, *out, *out_grad;
  T* x_grad;
  index_t n;
  bool exclusive, reverse;

  static constexpr bool kFull = sizeof(T) == 8;  // double: full precision; narrower outputs: ~1e-13

  template <int W>
  PE_VINLINE void run(index_t r0, index_t r1) const {
    alignas(64) double bx[kChunk], bg[kChunk], bo[kChunk], bv[kChunk];
    for (index_t r = r0; r < r1; ++r) {
      LinearCarry carry;
      bool scalar = false;  // the state went NaN/+inf: stay on the scalar path
      LogSumAcc<double> pos, neg;
      for (index_t start = 0; start < n; start += kChunk) {
        const index_t k = std::min(kChunk, n - start);
        const index_t kp = gather<W>(x + r * n, n, start, k, reverse, bx, -kInf);
        gather<W>(out_grad + r * n, n, start, k, reverse, bg, 0.0);
        gather<W>(out + r * n, n, start, k, reverse, bo, -kInf);
        bool done = false;
        if (!scalar) {
          done = exclusive ? backward_chunk<W, kFull, true>(bx, bg, bo, bv, kp, carry)
                           : backward_chunk<W, kFull, false>(bx, bg, bo, bv, kp, carry);
          if (!done) carry_to_accs(carry, pos, neg);
        }
        if (!done) {
          for (index_t j = 0; j < k; ++j) bx[j] = backward_step(bx[j], bg[j], bo[j], pos, neg, exclusive);
          scalar = !accs_to_carry(pos, neg, carry);
        }
        scatter<W>(bx, n, start, k, reverse, x_grad + r * n);
      }
    }
  }
};

}  // namespace

template <typename T>
void forward_rows(const T* x, T* out, index_t outer, index_t n, bool exclusive, bool reverse) {
  if (outer == 1 && n >= (index_t(1) << 16) && max_threads() >= 2) {
    // Split so that both threads finish together: the reducing thread's first part costs ~0.45 scans
    // in double lanes, ~0.6 in float lanes (its exps are float, but summed in double).
    const ForwardSplitRow<T> k{{x, out, n, exclusive, reverse}, sizeof(T) == 8 ? n * 11 / 16 : n * 5 / 8};
    parallel_for(0, 2, 1, [&](index_t p0, index_t p1) {
      for (index_t p = p0; p < p1; ++p) simd::dispatch(k, p);
    });
  } else {
    const ForwardRows<T> k{x, out, n, exclusive, reverse};
    parallel_for_dynamic(0, outer, grain_for(n), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
  }
}

template <typename T>
void backward_rows(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n, bool exclusive,
                   bool reverse) {
  const BackwardRows<T> k{x, out, out_grad, x_grad, n, exclusive, reverse};
  parallel_for_dynamic(0, outer, grain_for(n), [&](index_t r0, index_t r1) { simd::dispatch(k, r0, r1); });
}

#define PE_INSTANTIATE(T)                                                                                 \
  template void forward_rows<T>(const T*, T*, index_t, index_t, bool, bool);                              \
  template void backward_rows<T>(const T*, const T*, const T*, T*, index_t, index_t, bool, bool);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace paddle_ext::cpu
