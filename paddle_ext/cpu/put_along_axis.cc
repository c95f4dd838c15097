// CPU put_along_axis kernels on raw pointers (no Paddle header).
//
// Every pass is a visit of (slot, position) pairs by scatter_visit(), which partitions the
// *destination* among the threads so that no two threads ever touch one slot (no atomics, no locks,
// deterministic): by outer block, by inner column range (the graph case: rows scattered along axis 0
// with 64 features), or, when both are too narrow, by ranges of the scattered axis itself.
// Within a slot, contributions always arrive in increasing flat position, as in a sequential loop.
#include "paddle_ext/put_along_axis.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <limits>
#include <memory>
#include <vector>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

// Elements worth a second thread. Large on purpose: these passes are memory-bound, and on a shared
// machine a fork-join can wait milliseconds for a thread that lost its core, more than a
// few-million-element pass costs on one thread.
constexpr index_t kGrain = 1 << 20;

// fn(chunk) for chunk in [0, chunks), handed out one at a time: on a shared machine a thread that
// loses its core does not hold the others back, as a static half-and-half split would.
template <typename Fn>
void dynamic_chunks(index_t chunks, int threads, const Fn& fn) {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
#endif
  for (index_t c = 0; c < chunks; ++c) fn(c);
}

// fn(slot, position) for every in-range index, slot-disjoint across threads. Out-of-range indices
// are skipped (never written); returns false if there was one.
template <typename Idx, typename Fn>
bool scatter_visit(const Idx* idx, index_t outer, index_t n, index_t m, index_t inner, const Fn& fn) {
  const index_t total = outer * m * inner;
  if (total == 0) return true;
  const int threads = total < 2 * kGrain ? 1 : max_threads();
  bool bad_seen = false;  // written only as `true`: a benign flag for the caller
  auto run = [&](index_t o0, index_t o1, index_t i0, index_t i1, index_t k0, index_t k1) {
    bool bad = false;
    for (index_t o = o0; o < o1; ++o) {
      for (index_t j = 0; j < m; ++j) {
        const index_t row = (o * m + j) * inner;
        for (index_t i = i0; i < i1; ++i) {
          const index_t k = static_cast<index_t>(idx[row + i]);
          if (!index_in_range(k, n)) {
            bad = true;
            continue;
          }
          const index_t kk = wrap_index(k, n);
          if (kk < k0 || kk >= k1) continue;
          fn((o * n + kk) * inner + i, row + i);
        }
      }
    }
    if (bad) {
#pragma omp atomic write
      bad_seen = true;
    }
  };
  if (threads <= 1) {
    run(0, outer, 0, inner, 0, n);
  } else if (outer >= threads) {
    const index_t chunk = std::max<index_t>(1, outer / (8 * threads));
    dynamic_chunks((outer + chunk - 1) / chunk, threads, [&](index_t c) {
      run(c * chunk, std::min(outer, (c + 1) * chunk), 0, inner, 0, n);
    });
  } else if (inner >= 8 * threads) {
    // One column block per thread (multiples of 8: whole cache lines of int64 indices). Each block is a
    // full pass over the scattered rows, so more blocks would multiply the random row accesses.
    const index_t block = (inner / threads + 7) / 8 * 8;
    dynamic_chunks((inner + block - 1) / block, threads,
                   [&](index_t c) { run(0, outer, c * block, std::min(inner, (c + 1) * block), 0, n); });
  } else {  // narrow: each thread scans every index and applies the ones aimed at its slot range
    parallel_for(0, std::max<index_t>(n, 1), 1, [&](index_t b, index_t e) { run(0, outer, 0, inner, b, e); });
  }
  return !bad_seen;
}

template <typename Fn>
void elementwise(index_t count, const Fn& fn) {
  parallel_for(0, count, kGrain, [&](index_t b, index_t e) {
    for (index_t s = b; s < e; ++s) fn(s);
  });
}

// Gather-style pass: fn(slot or -1, position) for every position; each position is written by one
// thread only, so this one partitions the positions, not the slots.
template <typename Idx, typename Fn>
void gather_visit(const Idx* idx, index_t outer, index_t n, index_t m, index_t inner, const Fn& fn) {
  parallel_for(0, outer * m, std::max<index_t>(1, kGrain / std::max<index_t>(inner, 1)), [&](index_t b, index_t e) {
    for (index_t r = b; r < e; ++r) {
      const index_t o = r / m, row = r * inner, base = o * n * inner;
      for (index_t i = 0; i < inner; ++i) {
        const index_t k = static_cast<index_t>(idx[row + i]);
        fn(index_in_range(k, n) ? base + wrap_index(k, n) * inner + i : index_t(-1), row + i);
      }
    }
  });
}

template <typename Dst, typename Src>
void convert(const Src* in, Dst* out, index_t count) {
  if (static_cast<const void*>(in) == static_cast<const void*>(out)) return;
  parallel_for(0, count, kGrain, [&](index_t b, index_t e) {
    if (std::is_same<Src, Dst>::value) {
      std::memcpy(out + b, in + b, (e - b) * sizeof(Dst));
    } else {
      for (index_t s = b; s < e; ++s) out[s] = store<Dst>(load(in[s]));
    }
  });
}

// The hot lambdas capture pointers by value: by-reference captures are reloaded on every element.
template <Reduce R, typename T, typename Idx>
bool forward_impl(acc_t<T>* acc, const T* values, const Idx* idx, index_t outer, index_t n, index_t m,
                  index_t inner, bool include_self) {
  using A = acc_t<T>;
  const index_t slots = outer * n * inner;
  if (!include_self && R != Reduce::Assign) {
    // Written slots first take the reduction's identity (a write-only pass, no per-slot flags), so
    // arr takes no part in them; slots nobody writes keep arr's value.
    const A identity = reduce_identity<R, A>();
    scatter_visit(idx, outer, n, m, inner, [acc, identity](index_t s, index_t) { acc[s] = identity; });
  }
  if (R != Reduce::Mean) {
    return scatter_visit(idx, outer, n, m, inner, [acc, values](index_t s, index_t p) {
      acc[s] = ReduceOp<R>::combine(acc[s], static_cast<A>(load(values[p])));
    });
  }
  std::unique_ptr<int32_t[]> count_buf(new int32_t[slots]);  // contributions per slot, for the divisor
  int32_t* count = count_buf.get();
  elementwise(slots, [count](index_t s) { count[s] = 0; });
  const bool ok = scatter_visit(idx, outer, n, m, inner, [acc, values, count](index_t s, index_t p) {
    acc[s] += static_cast<A>(load(values[p]));
    ++count[s];
  });
  const int32_t self = include_self ? 1 : 0;
  if constexpr (std::numeric_limits<A>::is_integer) {
    elementwise(slots, [acc, count, self](index_t s) {
      if (count[s] > 0) acc[s] = mean_divide<A>(acc[s], count[s] + self);
    });
  } else {  // branch-free, so it vectorises: unwritten slots divide by 1 (exact)
    elementwise(slots, [acc, count, self](index_t s) {
      const int32_t c = count[s];
      acc[s] = acc[s] / static_cast<A>(c > 0 ? c + self : 1);
    });
  }
  return ok;
}

template <Reduce R, typename T, typename Idx>
void backward_impl(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad,
                   T* values_grad, index_t outer, index_t n, index_t m, index_t inner, bool include_self) {
  using A = acc_t<T>;
  const index_t slots = outer * n * inner;
  auto G = [&](index_t s) { return static_cast<A>(load(g[s])); };
  auto V = [&](index_t p) { return static_cast<A>(load(values[p])); };
  auto O = [&](index_t s) { return static_cast<A>(load(out[s])); };
  const T zero = store<T>(A(0));

  if (R == Reduce::Assign) {  // the largest position of a slot wins; the others and arr get nothing
    auto run = [&](auto* winner) {  // int32 positions when they fit: half the per-slot memory
      using W = std::remove_pointer_t<decltype(winner)>;
      elementwise(slots, [winner](index_t s) { winner[s] = W(-1); });
      scatter_visit(idx, outer, n, m, inner, [winner](index_t s, index_t p) { winner[s] = static_cast<W>(p); });
      if (values_grad)
        gather_visit(idx, outer, n, m, inner, [winner, values_grad, g, zero](index_t s, index_t p) {
          values_grad[p] = (s >= 0 && winner[s] == static_cast<W>(p)) ? g[s] : zero;
        });
      if (arr_grad)
        elementwise(slots, [winner, arr_grad, g, zero](index_t s) { arr_grad[s] = winner[s] >= 0 ? zero : g[s]; });
    };
    if (outer * m * inner < (index_t)INT32_MAX) {
      std::unique_ptr<int32_t[]> winner(new int32_t[slots]);
      run(winner.get());
    } else {
      std::unique_ptr<index_t[]> winner(new index_t[slots]);
      run(winner.get());
    }
    return;
  }
  if (R == Reduce::Add) {  // a copy and a gather, plus zeros at written slots without include_self
    if (values_grad)
      gather_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) { values_grad[p] = s >= 0 ? g[s] : zero; });
    if (arr_grad) {
      convert(g, arr_grad, slots);
      if (!include_self) scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t) { arr_grad[s] = zero; });
    }
    return;
  }

  // Per-slot statistics (see arr_grad_of / values_grad_of). Counts are needed for the mean's divisor
  // and to tell written slots without include_self; with include_self the other modes' formulas give
  // an unwritten slot its grad unchanged by themselves, so they run with count = 1.
  const bool need_count = R == Reduce::Mean || !include_self;
  std::unique_ptr<int32_t[]> count(need_count ? new int32_t[slots] : nullptr);
  std::unique_ptr<int32_t[]> aux(R == Reduce::Mean ? nullptr : new int32_t[slots]);
  std::unique_ptr<A[]> prod(R == Reduce::Mul ? new A[slots] : nullptr);
  elementwise(slots, [&](index_t s) {
    if (need_count) count[s] = 0;
    const A a = static_cast<A>(load(arr[s]));
    if (R == Reduce::Mul) {
      aux[s] = (include_self && a == A(0)) ? 1 : 0;
      prod[s] = (include_self && a != A(0)) ? a : A(1);
    } else if (R == Reduce::Min || R == Reduce::Max) {
      aux[s] = (include_self && a == O(s)) ? 1 : 0;
    }
  });
  scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
    if (need_count) ++count[s];
    if (R == Reduce::Mul) {
      const A v = V(p);
      if (v == A(0)) ++aux[s]; else prod[s] *= v;
    } else if (R == Reduce::Min || R == Reduce::Max) {
      if (V(p) == O(s)) ++aux[s];
    }
  });
  auto C = [&](index_t s) { return need_count ? count[s] : int32_t(1); };
  auto X = [&](index_t s) { return R == Reduce::Mean ? int32_t(0) : aux[s]; };
  auto P = [&](index_t s) { return R == Reduce::Mul ? prod[s] : A(1); };
  if (values_grad) {
    gather_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
      values_grad[p] =
          s < 0 ? zero : store<T>(values_grad_of<R, A>(G(s), V(p), O(s), C(s), X(s), P(s), include_self));
    });
  }
  if (arr_grad) {
    elementwise(slots, [&](index_t s) {
      arr_grad[s] = store<T>(
          arr_grad_of<R, A>(G(s), static_cast<A>(load(arr[s])), O(s), C(s), X(s), P(s), include_self));
    });
  }
}

}  // namespace

template <typename Idx>
BadIndex check_indices(const Idx* indices, index_t count, index_t n) {
  const int threads = count < 2 * kGrain ? 1 : max_threads();
  std::vector<index_t> first(std::max(threads, 1), -1);
  const index_t chunk = (count + threads - 1) / std::max(threads, 1);
  parallel_for(0, threads, 1, [&](index_t tb, index_t te) {
    for (index_t t = tb; t < te; ++t) {
      const index_t b = t * chunk, e = std::min(count, b + chunk);
      for (index_t p = b; p < e; ++p) {
        if (!index_in_range(static_cast<index_t>(indices[p]), n)) {
          first[t] = p;
          break;
        }
      }
    }
  });
  BadIndex bad;
  for (index_t p : first) {
    if (p >= 0) {
      bad.position = p;
      bad.value = static_cast<index_t>(indices[p]);
      break;
    }
  }
  return bad;
}

template <typename T, typename Idx>
bool put_along_axis_forward(Reduce reduce, const T* arr, T* out, const T* values, const Idx* indices, index_t outer,
                            index_t n, index_t m, index_t inner, bool include_self) {
  using A = acc_t<T>;
  const index_t slots = outer * n * inner;
  bool ok = true;
  dispatch_reduce(reduce, [&](auto r) {
    if (std::is_same<A, T>::value) {  // reduce in out itself (arr == out for the inplace op)
      convert(arr, out, slots);
      ok = forward_impl<decltype(r)::value, T, Idx>(reinterpret_cast<A*>(out), values, indices, outer, n, m, inner,
                                                    include_self);
    } else {  // half types: accumulate in float32, round once
      std::unique_ptr<A[]> acc(new A[slots]);
      convert(arr, acc.get(), slots);
      ok = forward_impl<decltype(r)::value, T, Idx>(acc.get(), values, indices, outer, n, m, inner, include_self);
      convert(acc.get(), out, slots);
    }
  });
  return ok;
}

template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self) {
  dispatch_reduce(reduce, [&](auto r) {
    backward_impl<decltype(r)::value, T, Idx>(arr, indices, values, out, out_grad, arr_grad, values_grad, outer,
                                              n, m, inner, include_self);
  });
}

#define PE_INSTANTIATE_FWD(T, Idx)                                                                    \
  template bool put_along_axis_forward<T, Idx>(Reduce, const T*, T*, const T*, const Idx*, index_t, index_t, \
                                               index_t, index_t, bool);
#define PE_INSTANTIATE_BWD(T, Idx)                                                                           \
  template void put_along_axis_backward<T, Idx>(Reduce, const T*, const Idx*, const T*, const T*, const T*, \
                                                T*, T*, index_t, index_t, index_t, index_t, bool);
#define PE_INSTANTIATE_ALL(T) \
  PE_INSTANTIATE_FWD(T, int32_t) PE_INSTANTIATE_FWD(T, int64_t)
#define PE_INSTANTIATE_FLOAT(T) \
  PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_BWD(T, int32_t) PE_INSTANTIATE_BWD(T, int64_t)
PE_INSTANTIATE_FLOAT(float)
PE_INSTANTIATE_FLOAT(double)
PE_INSTANTIATE_FLOAT(float16_t)
PE_INSTANTIATE_FLOAT(bfloat16_t)
PE_INSTANTIATE_ALL(int32_t)
PE_INSTANTIATE_ALL(int64_t)
PE_INSTANTIATE_ALL(int16_t)
PE_INSTANTIATE_ALL(uint8_t)
template BadIndex check_indices<int32_t>(const int32_t*, index_t, index_t);
template BadIndex check_indices<int64_t>(const int64_t*, index_t, index_t);
#undef PE_INSTANTIATE_FWD
#undef PE_INSTANTIATE_BWD
#undef PE_INSTANTIATE_ALL
#undef PE_INSTANTIATE_FLOAT

}  // namespace cpu
}  // namespace paddle_ext
