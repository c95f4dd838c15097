// put_along_axis along the last axis (inner == 1) on the CPU: the forward.
//
// Every destination row [n] and index row [m] belong to one outer row, so a thread takes whole outer
// rows and keeps all per-slot bookkeeping (counts, tie counts, products) in row-sized scratch that
// stays in L1/L2: no per-slot buffers, no row-level indirection, and tight element loops (the
// generic visit's per-element callback costs ~3x more here). Same operations in the same order as
// the generic passes, so the results are bit-identical.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "counters.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {

inline bool flat_plan(const Geometry& g, const Plan& plan) { return g.inner == 1 && plan.kind != Plan::Narrow; }

// fn(o0, o1, scratch) over outer rows; `scratch` holds `per_row` bytes reused for each row.
template <typename Fn>
void for_outer_rows(const Geometry& g, const Plan& plan, size_t per_row, const Fn& fn) {
  auto run = [&](index_t o0, index_t o1) {
    const ScratchArray<char> scratch = scratch_array<char>(per_row, false);
    fn(o0, o1, scratch.get());
  };
  if (plan.kind == Plan::Single) return run(0, g.outer);
  dynamic_chunks((g.outer + plan.chunk - 1) / plan.chunk, plan.threads,
                 [&](index_t c) { run(c * plan.chunk, std::min(g.outer, (c + 1) * plan.chunk)); });
}

// A destination row's running values during flat_forward, by layout (the row loop is templated on it):
// - PlainRow: the values alone (every mode but mean), in out itself when A is T;
// - InterleavedRow: mean's sum and count of a slot side by side, the count in A: an update is one 2-lane
//   vector add on one line (two arrays cost two random accesses and twice the instructions per update).
// - SplitRow: mean's sums (in out when A is T) and int32 counts in two arrays, where a count could pass
//   what A holds exactly (2^24 contributions to one float slot).
// init(src) loads arr's row (counts 0), finish(dst, ...) writes the output row (divided, for mean).
template <typename T, typename A>
struct PlainRow {
  A* v;
  static size_t scratch_bytes(index_t n) { return std::is_same<A, T>::value ? 0 : n * sizeof(A); }
  PlainRow(T* out_row, char* scratch) : v(std::is_same<A, T>::value ? reinterpret_cast<A*>(out_row) : reinterpret_cast<A*>(scratch)) {}
  void set(index_t k, A x) const { v[k] = x; }
  template <Reduce R>
  void combine(index_t k, A x) const { v[k] = ReduceOp<R>::combine(v[k], x); }
  void init(const T* src, index_t n) const {
    if (static_cast<const void*>(v) != static_cast<const void*>(src))
      for (index_t k = 0; k < n; ++k) v[k] = static_cast<A>(load(src[k]));
  }
  void finish(T* dst, index_t n, int32_t, int32_t*) const {
    if (!std::is_same<A, T>::value)
      for (index_t k = 0; k < n; ++k) dst[k] = store<T>(v[k]);
  }
};

template <typename T, typename A>
struct SplitRow : PlainRow<T, A> {
  int32_t* c;
  static size_t scratch_bytes(index_t n) { return PlainRow<T, A>::scratch_bytes(n) + n * sizeof(int32_t); }
  SplitRow(T* out_row, char* scratch, index_t n)
      : PlainRow<T, A>(out_row, scratch), c(reinterpret_cast<int32_t*>(scratch + PlainRow<T, A>::scratch_bytes(n))) {}
  template <Reduce R>
  void combine(index_t k, A x) const {
    this->v[k] += x;
    ++c[k];
  }
  void init(const T* src, index_t n) const {
    PlainRow<T, A>::init(src, n);
    std::memset(c, 0, n * sizeof(int32_t));
  }
  void finish(T* dst, index_t n, int32_t self, int32_t* counts_out) const {
    A* const v = this->v;
    for (index_t k = 0; k < n; ++k) v[k] = divide_by_count<A>(v[k], c[k], self);
    PlainRow<T, A>::finish(dst, n, self, nullptr);
    if (counts_out) std::memcpy(counts_out, c, n * sizeof(int32_t));
  }
};

template <typename T, typename A>
struct InterleavedRow {
  // q[2k] = sum, q[2k + 1] = count of slot k; an update adds {v, 1} to both as one 2-lane vector (one load,
  // one add, one store). The count is exact in A while it stays below max_count() (flat_forward checks m).
  typedef A Pair __attribute__((vector_size(2 * sizeof(A))));
  A* q;
  static size_t scratch_bytes(index_t n) { return 2 * n * sizeof(A); }
  explicit InterleavedRow(char* scratch) : q(reinterpret_cast<A*>(scratch)) {}
  static constexpr index_t max_count() {
    return std::numeric_limits<A>::is_integer ? std::numeric_limits<int32_t>::max()
                                              : index_t{1} << std::min(std::numeric_limits<A>::digits, 31);
  }
  void set(index_t k, A v) const { q[2 * k] = v; }
  template <Reduce R>
  void combine(index_t k, A v) const {
    Pair x;
    std::memcpy(&x, q + 2 * k, sizeof(x));
    x = sum_first(x, Pair{v, A(1)});
    std::memcpy(q + 2 * k, &x, sizeof(x));
  }
  // x + y with the NaN a NaN + NaN takes fixed as the scalar loops of the other layouts have it (the sum's for
  // float and double, the value's for the 16-bit types, whose value is converted in a register). The
  // compiler swaps a commutative vector add's operands to fold a load, which changed a NaN's sign bit.
  static Pair sum_first(Pair x, Pair y) {
#if defined(__x86_64__) && defined(__GNUC__)
    constexpr bool keep_sum = std::is_same<A, T>::value;
    if constexpr (std::is_same<A, float>::value) {
      if (keep_sum) asm("addps %1, %0" : "+x"(x) : "x"(y));
      else asm("addps %1, %0" : "+x"(y) : "x"(x));
      return keep_sum ? x : y;
    } else if constexpr (std::is_same<A, double>::value) {
      if (keep_sum) asm("addpd %1, %0" : "+x"(x) : "x"(y));
      else asm("addpd %1, %0" : "+x"(y) : "x"(x));
      return keep_sum ? x : y;
    }
#endif
    return x + y;
  }
  void init(const T* src, index_t n) const {
    for (index_t k = 0; k < n; ++k) {
      q[2 * k] = static_cast<A>(load(src[k]));
      q[2 * k + 1] = A(0);
    }
  }
  void finish(T* dst, index_t n, int32_t self, int32_t* counts_out) const {
    if constexpr (std::numeric_limits<A>::is_integer) {
      for (index_t k = 0; k < n; ++k)
        dst[k] = store<T>(divide_by_count<A>(q[2 * k], static_cast<int32_t>(q[2 * k + 1]), self));
    } else {  // divide_by_count in A (the count is exact in it), branch-free so that the loop vectorises
      const A with_self = A(self);
      for (index_t k = 0; k < n; ++k) {
        const A sum = q[2 * k], count = q[2 * k + 1];
        const A c = count + pick(count > A(0), with_self, A(0));
        const bool divide = c > A(1);
        dst[k] = store<T>(pick(divide, sum / pick(divide, c, A(1)), sum));
      }
    }
    if (counts_out)
      for (index_t k = 0; k < n; ++k) counts_out[k] = static_cast<int32_t>(q[2 * k + 1]);
  }
};

// noinline: inlined into the dispatcher's many cases, the scatter loop loses its registers (the row pointer,
// the bound and the bad flag go to the stack).
template <Reduce R, typename T, typename Idx>
__attribute__((noinline)) bool flat_forward(const T* arr, T* out, const ValuesAt<T>& values, const Idx* idx, const Geometry& g, const Plan& plan,
                  bool include_self, int32_t* counts_out) {
  using A = reduce_acc_t<R, T>;
  constexpr bool kMean = R == Reduce::Mean;
  const index_t n = g.n, m = g.m;
  // mean: interleaved unless a count could pass what A holds exactly (2^24 contributions for float)
  const bool interleaved = kMean && m < std::min(InterleavedRow<T, A>::max_count(), tiles().paired_m);
  const size_t per_row = !kMean      ? PlainRow<T, A>::scratch_bytes(n)
                         : interleaved ? InterleavedRow<T, A>::scratch_bytes(n)
                                       : SplitRow<T, A>::scratch_bytes(n);
  // Values along an index row: one per position, or one for the row (broadcast along the axis).
  const bool per_position = values.dense || values.stride[1] != 0;
  const int32_t self = include_self ? 1 : 0;
  std::atomic<bool> ok{true};
  for_outer_rows(g, plan, per_row, [&](index_t o0, index_t o1, char* scratch) {
    bool bad = false;
    auto rows = [&](auto make_row) {
      for (index_t o = o0; o < o1; ++o) {
        const Idx* ir = idx + o * m;
        const T* vr = values.at(o, 0, 0);
        const auto row = make_row(out + o * n);
        row.init(arr + o * n, n);
        if (!include_self && R != Reduce::Assign) {
          const A identity = reduce_identity<R, A>();
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (index_in_range(k, n)) row.set(wrap_index(k, n), identity);
          }
        }
        auto scatter = [&](auto value) {
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) {
              bad = true;
              continue;
            }
            const index_t kk = wrap_index(k, n);
            row.template combine<R>(kk, value(j));
          }
        };
        if (per_position) {
          scatter([vr](index_t j) { return static_cast<A>(load(vr[j])); });
        } else {
          const A v = static_cast<A>(load(vr[0]));
          scatter([v](index_t) { return v; });
        }
        row.finish(out + o * n, n, self, counts_out ? counts_out + o * n : nullptr);
      }
    };
    if constexpr (!kMean) {
      rows([scratch](T* out_row) { return PlainRow<T, A>(out_row, scratch); });
    } else if (interleaved) {
      rows([scratch](T*) { return InterleavedRow<T, A>(scratch); });
    } else {
      rows([scratch, n](T* out_row) { return SplitRow<T, A>(out_row, scratch, n); });
    }
    if (bad) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
