// Per-slot bookkeeping of the CPU put_along_axis kernels: contribution counts (per stat row for index rows
// that agree, per slot for the rest; mean's in bytes with int32 carries) and grad scratch.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "paddle_ext/memory.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {

// Contributions per slot: per stat row for index rows that agree, per slot (lazily touched) for the
// rest. count(s) = row[stat_row(s)] + slot[s].
struct Counter {
  ScratchArray<int32_t> row;
  std::optional<HugeScratch> slot_mem;  // zero pages, faulted in where touched
  int32_t* slot = nullptr;
  std::atomic<bool> slot_used{false};
  // Without `rows` only the slot counts exist (mean's forward keeps its row counts in RowBytes).
  Counter(const Geometry& g, const Plan& plan, bool rows = true)
      : row(rows ? scratch_array<int32_t>(plan.nblocks * g.outer * g.n, true) : nullptr) {
    if (g.inner > 1 && g.slots() > 0) {
      slot_mem.emplace(g.slots() * sizeof(int32_t));
      slot = slot_mem->as<int32_t>();
    }
  }
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;
  // Slot-level counts exist: read them. (Relaxed: a thread's own writes are visible to itself, and
  // another thread's flag only concerns that thread's slots, which are zero here.)
  bool scattered() const { return slot_used.load(std::memory_order_relaxed); }
  void mark_scattered() {
    if (!scattered()) slot_used.store(true, std::memory_order_relaxed);
  }
  template <typename U>
  void add(index_t s, index_t r, U) {
    if constexpr (U::value) {
      ++row[r];
    } else {
      mark_scattered();
      ++slot[s];
    }
  }
  int32_t at(index_t s, index_t r) const { return row[r] + (scattered() ? slot[s] : 0); }
};

// mean's forward counts per stat row: a byte per row (1 MiB in the graph case, in L2; int32s were
// 4 MiB, twice L2, and each increment waited on memory), its carries in an int32 per row whose pages are
// touched only where some row reaches 256 contributions. count(r) = low[r] + 256 * high[r]. A stat row
// belongs to one thread, as with Counter.
struct RowBytes {
  ScratchArray<uint8_t> low;
  HugeScratch high_mem;  // zero pages, faulted in where touched
  int32_t* high;
  std::atomic<bool> carried{false};
  explicit RowBytes(index_t rows)
      : low(scratch_array<uint8_t>(rows, true)), high_mem(rows * sizeof(int32_t)), high(high_mem.as<int32_t>()) {}
  // Counting is `if (++low[r] == 0) carry(r)` at the call site, `low` captured by value (see ByteCounts).
  void carry(index_t r) {
    ++high[r];
    if (!carried.load(std::memory_order_relaxed)) carried.store(true, std::memory_order_relaxed);
  }
  int32_t at(index_t r, bool wide) const { return int32_t(low[r]) + (wide ? high[r] << 8 : 0); }
};

// Counts of every slot, one visit.
template <typename Idx>
void count_contributions(const Idx* idx, const Geometry& g, const Plan& plan, Counter& cnt) {
  visit(idx, g, plan, Hints{}, [&cnt](index_t s, index_t, index_t, index_t r, auto u) { cnt.add(s, r, u); });
}

// mean_divide(sum, count) for a slot with `count` contributions (a slot with none keeps its value),
// branch-free for floats (x / 1 is exact, and the select keeps the bits of an undivided value).
template <typename A>
inline A divide_by_count(A sum, int32_t count, int32_t self) {
  // Masks, not `count > 0 ? .. : ..`: GCC does not if-convert that here, and the loop would not vectorise.
  const int32_t c = std::max<int32_t>(count + (self & -int32_t(count > 0)), 1);
  if constexpr (std::numeric_limits<A>::is_integer) return mean_divide<A>(sum, c);
  else return pick(c > 1, sum / static_cast<A>(c), sum);
}

// mean's counts on the partitioned paths: a byte per slot (an int32 per slot added 8 bytes of memory
// traffic per slot to every round's apply), its carries in an int32 per slot whose pages are touched
// only where some slot reaches 256 contributions (flagged per stat row). count(s) = low[s] + 256 * high[s].
// `low` is reused memory, not zeroed: each partition block clears its rows in hooks.begin (clear()), in L2.
struct ByteCounts {
  HugeScratch low_mem, high_mem;  // high: zero pages, faulted in where touched
  uint8_t* low;
  int32_t* high;
  ScratchArray<uint8_t> wrapped;
  index_t inner;
  ByteCounts(const Geometry& g, const Plan& plan)
      : low_mem(g.slots(), /*zeroed=*/false), high_mem(g.slots() * sizeof(int32_t)), low(low_mem.as<uint8_t>()),
        high(high_mem.as<int32_t>()), wrapped(scratch_array<uint8_t>(plan.nblocks * g.outer * g.n, true)), inner(g.inner) {}
  ByteCounts(const ByteCounts&) = delete;
  ByteCounts& operator=(const ByteCounts&) = delete;
  void clear(index_t s0, index_t rows, index_t len) {
    for (index_t i = 0; i < rows; ++i) std::memset(low + s0 + i * inner, 0, len);
  }
  // Counting is `if (++low[s] == 0) carry(s, r)` at the call sites, with `low` captured by value (in a
  // register: a byte store may alias any memory, so `c->low` would be reloaded after each one).
  void carry(index_t s, index_t r) {
    ++high[s];
    wrapped[r] = 1;
  }
  // fn(i, count_of) for the rows of a partition block (first slot s0, first stat row r0): count_of(t) is the
  // count of column t of row i. Two instances of fn, so that the common one (no slot of the row past 255)
  // vectorises.
  template <typename Fn>
  void for_rows(index_t s0, index_t rows, index_t r0, const Fn& fn) const {
    for (index_t i = 0; i < rows; ++i) {
      const uint8_t* const lo = low + s0 + i * inner;
      if (wrapped[r0 + i]) {
        const int32_t* const hi = high + s0 + i * inner;
        fn(i, [lo, hi](index_t t) { return int32_t(lo[t]) + (hi[t] << 8); });
      } else {
        fn(i, [lo](index_t t) { return int32_t(lo[t]); });
      }
    }
  }
};

// Per-slot int32 scratch in arr_grad's own memory when it is at least as wide (then every pass reads
// a slot's scratch before it writes that slot's grad), else a fresh buffer. The stride is a
// compile-time constant so that the loops over it vectorise.
template <typename T>
struct SlotScratch {
  static constexpr index_t stride = sizeof(T) >= sizeof(int32_t) ? sizeof(T) / sizeof(int32_t) : 1;
  ScratchArray<int32_t> own;
  int32_t* ptr;
  SlotScratch(T* arr_grad, index_t slots) {
    if (arr_grad && sizeof(T) >= sizeof(int32_t) && alignof(T) >= alignof(int32_t)) {
      ptr = reinterpret_cast<int32_t*>(arr_grad);
    } else {
      own = scratch_array<int32_t>(slots * stride, false);
      ptr = own.get();
    }
  }
};

// Read side of a Counter for the grad loops: base(r) once per row segment, plus slot[s] when
// some row did not agree. Without a Counter every count reads as 1 (see backward.h).
struct Counts {
  const int32_t* row = nullptr;
  const int32_t* slot = nullptr;
  int32_t base(index_t r) const { return row ? row[r] : 1; }
  // The count of slot s in a row segment whose base(r) is c0.
  int32_t at(int32_t c0, index_t s) const { return slot ? c0 + slot[s] : c0; }
};

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
