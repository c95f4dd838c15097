// CPU put_along_axis kernels on raw pointers (no Paddle header).
//
// Every pass is a visit of (slot, position) pairs by scatter_visit(), which partitions the
// *destination* among the threads so that no two threads ever touch one slot (no atomics, no locks,
// deterministic): by outer block, by inner column range (the graph case: rows scattered along axis 0
// with 64 features), or, when both are too narrow, by ranges of the scattered axis itself.
// Within a slot, contributions always arrive in increasing flat position, as in a sequential loop.
#include "paddle_ext/put_along_axis.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "paddle_ext/parallel.h"

namespace paddle_ext {
namespace cpu {
namespace {

constexpr index_t kGrain = 1 << 15;  // elements worth a thread

// fn(slot, position) for every in-range index, slot-disjoint across threads.
template <typename Idx, typename Fn>
void scatter_visit(const Idx* idx, index_t outer, index_t n, index_t m, index_t inner, const Fn& fn) {
  const index_t total = outer * m * inner;
  if (total == 0 || n == 0) return;
  const int threads = total < 2 * kGrain ? 1 : max_threads();
  auto run = [&](index_t o0, index_t o1, index_t i0, index_t i1, index_t k0, index_t k1) {
    for (index_t o = o0; o < o1; ++o) {
      for (index_t j = 0; j < m; ++j) {
        const index_t row = (o * m + j) * inner;
        for (index_t i = i0; i < i1; ++i) {
          const index_t k = static_cast<index_t>(idx[row + i]);
          if (!index_in_range(k, n)) continue;  // reported by check_indices; never written
          const index_t kk = wrap_index(k, n);
          if (kk < k0 || kk >= k1) continue;
          fn((o * n + kk) * inner + i, row + i);
        }
      }
    }
  };
  if (threads <= 1) {
    run(0, outer, 0, inner, 0, n);
  } else if (outer >= threads) {
    parallel_for(0, outer, 1, [&](index_t b, index_t e) { run(b, e, 0, inner, 0, n); });
  } else if (inner >= 8 * threads) {
    parallel_for(0, inner, 8, [&](index_t b, index_t e) { run(0, outer, b, e, 0, n); });
  } else {  // narrow: each thread scans every index and applies the ones aimed at its slot range
    parallel_for(0, n, 1, [&](index_t b, index_t e) { run(0, outer, 0, inner, b, e); });
  }
}

template <typename Fn>
void elementwise(index_t count, const Fn& fn) {
  parallel_for(0, count, kGrain, [&](index_t b, index_t e) {
    for (index_t s = b; s < e; ++s) fn(s);
  });
}

template <Reduce R, typename T, typename Idx>
void forward_impl(acc_t<T>* acc, const T* values, const Idx* idx, int32_t* count, index_t outer, index_t n,
                  index_t m, index_t inner, bool include_self) {
  using A = acc_t<T>;
  using Op = ReduceOp<R>;
  if (count == nullptr) {
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
      acc[s] = Op::combine(acc[s], static_cast<A>(load(values[p])));
    });
    return;
  }
  // The first contribution replaces arr's value when arr takes no part (include_self=False).
  scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
    const A v = static_cast<A>(load(values[p]));
    acc[s] = (count[s]++ == 0 && !include_self) ? v : Op::combine(acc[s], v);
  });
  if (R == Reduce::Mean) {
    const int32_t self = include_self ? 1 : 0;
    elementwise(outer * n * inner, [&](index_t s) {
      if (count[s] > 0) acc[s] = mean_divide<A>(acc[s], count[s] + self);
    });
  }
}

template <Reduce R, typename T, typename Idx>
void backward_impl(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad,
                   T* values_grad, index_t outer, index_t n, index_t m, index_t inner, bool include_self) {
  using A = acc_t<T>;
  const index_t slots = outer * n * inner, positions = outer * m * inner;
  auto G = [&](index_t s) { return static_cast<A>(load(g[s])); };
  auto V = [&](index_t p) { return static_cast<A>(load(values[p])); };
  // Positions aimed out of range (only possible if the caller skipped the check) get zero grad.
  if (values_grad) elementwise(positions, [&](index_t p) { values_grad[p] = store<T>(A(0)); });

  if (R == Reduce::Assign) {  // the largest position of a slot wins; the others and arr get nothing
    std::unique_ptr<index_t[]> winner(new index_t[slots]);
    elementwise(slots, [&](index_t s) { winner[s] = -1; });
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) { winner[s] = p; });
    if (values_grad)
      scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
        if (winner[s] == p) values_grad[p] = g[s];
      });
    if (arr_grad) elementwise(slots, [&](index_t s) { arr_grad[s] = winner[s] >= 0 ? store<T>(A(0)) : g[s]; });
    return;
  }

  // Per-slot statistics: contributions, and per mode the divisor / zero count / nonzero product.
  std::unique_ptr<int32_t[]> count(new int32_t[slots]);
  std::unique_ptr<int32_t[]> aux;
  std::unique_ptr<A[]> prod;
  elementwise(slots, [&](index_t s) { count[s] = 0; });
  if (R == Reduce::Mul) {
    aux.reset(new int32_t[slots]);
    prod.reset(new A[slots]);
    elementwise(slots, [&](index_t s) {
      const A a = static_cast<A>(load(arr[s]));
      aux[s] = (include_self && a == A(0)) ? 1 : 0;
      prod[s] = (include_self && a != A(0)) ? a : A(1);
    });
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
      const A v = V(p);
      ++count[s];
      if (v == A(0)) ++aux[s]; else prod[s] *= v;
    });
  } else if (R == Reduce::Min || R == Reduce::Max) {  // aux = contributors equal to the result
    aux.reset(new int32_t[slots]);
    elementwise(slots, [&](index_t s) { aux[s] = (include_self && load(arr[s]) == load(out[s])) ? 1 : 0; });
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
      ++count[s];
      if (V(p) == static_cast<A>(load(out[s]))) ++aux[s];
    });
  } else {
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t) { ++count[s]; });
  }

  const A one(1);
  auto P = [&](index_t s) { return R == Reduce::Mul ? prod[s] : one; };
  auto X = [&](index_t s) { return aux ? aux[s] : 0; };
  auto O = [&](index_t s) { return static_cast<A>(load(out[s])); };
  if (values_grad) {
    scatter_visit(idx, outer, n, m, inner, [&](index_t s, index_t p) {
      values_grad[p] = store<T>(values_grad_of<R, A>(G(s), V(p), O(s), count[s], X(s), P(s), include_self));
    });
  }
  if (arr_grad) {
    elementwise(slots, [&](index_t s) {
      arr_grad[s] = store<T>(
          arr_grad_of<R, A>(G(s), static_cast<A>(load(arr[s])), O(s), count[s], X(s), P(s), include_self));
    });
  }
}

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
void put_along_axis_forward(Reduce reduce, acc_t<T>* acc, const T* values, const Idx* indices, int32_t* count,
                            index_t outer, index_t n, index_t m, index_t inner, bool include_self) {
  dispatch_reduce(reduce, [&](auto r) {
    forward_impl<decltype(r)::value, T, Idx>(acc, values, indices, count, outer, n, m, inner, include_self);
  });
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

#define PE_INSTANTIATE_FWD(T, Idx)                                                                            \
  template void put_along_axis_forward<T, Idx>(Reduce, acc_t<T>*, const T*, const Idx*, int32_t*, index_t, \
                                               index_t, index_t, index_t, bool);
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
