// CPU put_along_axis kernels on raw pointers (no Paddle header).
//
// Every pass is a visit of (slot, position) pairs by visit(), which partitions the *destination*
// among the threads so that no two threads ever touch one slot (no atomics, no locks,
// deterministic): by outer block, by inner column block (rows scattered along axis 0 whose indices
// disagree, or a destination that fits in cache; the graph case's agreeing rows take one thread, see
// choose_plan), or, when both are too narrow, by ranges of the scattered axis itself. Each
// position belongs to exactly one slot, so the same visit also partitions the positions for the
// gathers of the backward. Within a slot, contributions arrive in increasing flat position (or
// decreasing, for the reverse visit of assign's backward), as in a sequential loop.
//
// Speed (docs/put_along_axis.md): the passes are memory-bound. A row of indices whose entries over
// the thread's column block all agree (the graph case, and every row when inner == 1) is handled as
// one contiguous, vectorised row operation, with the destination row of a later index row
// prefetched (random rows otherwise stall on memory latency). Per-slot bookkeeping (counts for
// mean, winners for assign) is kept per destination *row* for such rows, inner times smaller than
// per slot, with a per-slot array (calloc'd: untouched pages are never faulted in) only for rows
// that do not agree. Scratch that must be per slot reuses the arr_grad output where it can: large
// fresh allocations cost a page fault per 4 KiB on this kind of machine. When the scatter axis is
// the last one (inner == 1) the flat kernels below take whole outer rows instead, with row-sized
// scratch.
#include "paddle_ext/put_along_axis.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "paddle_ext/block_cache.h"
#include "paddle_ext/parallel.h"
#include "paddle_ext/vec_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace paddle_ext {
namespace cpu {
namespace {

#ifndef PE_PUT_ALONG_AXIS_GRAIN  // smaller in the kernels' own multi-thread tests
#define PE_PUT_ALONG_AXIS_GRAIN (1 << 20)
#endif

// Sizes of the passes. PADDLE_EXT_PUT_TILE=small (a test knob, read once per process) shrinks them so that
// the fuzz suite's small shapes take the destination-partitioned paths (bucket_part: several blocks,
// list chunks and rounds) on one and two threads.
struct Tiles {
  index_t grain;          // elements worth a second thread: large on purpose (the passes are memory-bound,
                          // and on a shared machine a fork-join can wait milliseconds for a thread that
                          // lost its core, more than a few-million-element pass costs on one thread)
  index_t block_bytes;    // destination bytes per partition block: half of L2, which holds it with the entries
                          // streaming through (independent assign: 393 ms with 256 KiB blocks, 344 with 512,
                          // 333 with 1 MiB, 399 with 2 MiB; add 505, 486, 550, 676)
  index_t chunk_entries;  // entries per list chunk of a block
  index_t round_entries;  // updates partitioned per round: bounds the scratch per thread
  index_t far_bytes;      // a thread's destination from this size on is "past L2" (see misses_l2)
  index_t paired_m;       // flat mean keeps a slot's count next to its sum for index rows shorter than this
                          // (InterleavedRow; also bounded by what its accumulator counts exactly)
};

const Tiles& tiles() {
  static const Tiles t = [] {
    const char* knob = std::getenv("PADDLE_EXT_PUT_TILE");
    if (knob && std::strcmp(knob, "small") == 0) return Tiles{16, 64, 4, 40, 512, 16};
    return Tiles{PE_PUT_ALONG_AXIS_GRAIN, 512 << 10, 512, index_t(1) << 24, 2 << 20,
                 std::numeric_limits<index_t>::max()};
  }();
  return t;
}
// Index rows looked ahead to prefetch a destination row (a few hundred ns of memory latency over
// ~20-50 ns of work per row).
constexpr index_t kHintsAhead = 8;
// Index rows looked ahead to prefetch the slots of a row whose indices disagree (its elements' slots).
constexpr index_t kEachAhead = 2;

// Scratch; from 4 MiB on, its own mapping on transparent huge pages where the kernel offers them (madvise
// mode): a fresh 4 KiB-page buffer of hundreds of MiB costs more in page faults than a pass over it, and
// random accesses into it miss the TLB. Zeroed (fresh zero pages, faulted in where touched) unless
// `zeroed` is false: then a block of 32 MiB or more comes from BlockCache, resident from an earlier call
// (a fresh huge-page mapping per call was fast back to back, but after a pause its 2 MiB blocks had gone
// back to the VM host through free page reporting: independent `add` 513-544 ms back to back, 783-910
// with a 3 s pause before each call; with the scratch from the cache, 500-545 either way).
class HugeScratch {
 public:
  explicit HugeScratch(size_t bytes, bool zeroed = true) : bytes_(std::max<size_t>(bytes, 1)) {
#ifdef __linux__
    if (!zeroed && (ptr_ = BlockCache::instance().take(bytes_, &cached_))) {
      madvise(ptr_, cached_, MADV_HUGEPAGE);  // a fresh block: huge pages from its first touch on
      return;
    }
    mapped_ = bytes_ >= (size_t(4) << 20);
    if (mapped_) {
      ptr_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (ptr_ == MAP_FAILED) throw std::bad_alloc();
      madvise(ptr_, bytes_, MADV_HUGEPAGE);
      return;
    }
#else
    (void)zeroed;
#endif
    ptr_ = std::calloc(bytes_, 1);
    if (!ptr_) throw std::bad_alloc();
  }
  ~HugeScratch() {
#ifdef __linux__
    if (cached_) {
      BlockCache::instance().give(ptr_, cached_);
      return;
    }
    if (mapped_) {
      munmap(ptr_, bytes_);
      return;
    }
#endif
    std::free(ptr_);
  }
  HugeScratch(const HugeScratch&) = delete;
  HugeScratch& operator=(const HugeScratch&) = delete;
  template <typename U>
  U* as() const { return static_cast<U*>(ptr_); }

 private:
  size_t bytes_;
  size_t cached_ = 0;  // capacity of a BlockCache block, else 0
  bool mapped_ = false;
  void* ptr_ = nullptr;
};

// Transparent huge pages for a large output about to be faulted in (THP in madvise mode): random
// updates into hundreds of MiB otherwise miss the TLB on nearly every access, and the faults are
// 512x fewer.
inline void advise_huge(void* data, size_t bytes) {
#ifdef __linux__
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (bytes < 16 * kHuge) return;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

struct Geometry {
  index_t outer, n, m, inner;
  // indices [outer, m, 1] read as broadcast along inner (broadcast=True with indices [E, 1] against
  // values [E, C]): every index row agrees, one entry per (o, j); never materialised as [outer, m, inner].
  bool idx_broadcast = false;
  int values_broadcast = 0;  // ValuesBroadcast bits: values read through ValuesAt
  index_t slots() const { return outer * n * inner; }
  index_t positions() const { return outer * m * inner; }
};

// Values read through strides: position (o, j, i) of [outer, m, inner] reads data[o * so + j * sm + i * si],
// a stride of 0 along each broadcast part (Geometry::values_broadcast); values without one are the
// positions' own layout (so = m * inner, sm = inner, si = 1).
template <typename T>
struct ValuesAt {
  const T* data = nullptr;
  bool dense = true;
  index_t stride[3] = {0, 0, 1};  // so, sm, si
  ValuesAt() = default;
  ValuesAt(const T* v, const Geometry& g) : data(v), dense(g.values_broadcast == 0) {
    const int b = g.values_broadcast;
    const index_t vi = (b & kValuesInner) ? 1 : g.inner, vm = (b & kValuesAxis) ? 1 : g.m;
    stride[2] = (b & kValuesInner) ? 0 : 1;
    stride[1] = (b & kValuesAxis) ? 0 : vi;
    stride[0] = (b & kValuesOuter) ? 0 : vm * vi;
  }
  // A run of positions along inner reads a run of values (else one value for the whole run).
  bool along_inner() const { return stride[2] != 0; }
  const T* at(index_t o, index_t j, index_t i) const { return data + o * stride[0] + j * stride[1] + i * stride[2]; }
};

// How the destination is split among threads (see the file comment). A column block is the unit of
// row-level bookkeeping: stat row r = block * outer * n + o * n + k.
struct Plan {
  enum Kind { Single, Outer, Columns, Narrow } kind = Single;
  int threads = 1;
  index_t block = 1;    // columns per block
  index_t nblocks = 1;  // blocks (> 1 only for Columns)
  index_t chunk = 1;    // outer rows per dynamic chunk (Outer)
};

// One part on the calling thread: every column in one block.
Plan single_plan(const Geometry& g) {
  Plan p;
  p.block = std::max<index_t>(g.inner, 1);
  return p;
}

Plan make_plan(const Geometry& g) {
  Plan p = single_plan(g);
  const int threads = g.positions() < 2 * tiles().grain ? 1 : max_threads();
  if (threads <= 1) return p;
  p.threads = threads;
  if (g.outer >= threads) {
    p.kind = Plan::Outer;
    p.chunk = std::max<index_t>(1, g.outer / (8 * threads));
  } else if (g.inner >= 8 * threads) {
    // One column block per thread (multiples of 8: whole cache lines of int64 indices). Each block is
    // a full pass over the scattered rows, so more blocks would multiply the random row accesses.
    p.kind = Plan::Columns;
    p.block = (g.inner / threads + 7) / 8 * 8;
    p.nblocks = (g.inner + p.block - 1) / p.block;
  } else {
    p.kind = Plan::Narrow;
  }
  return p;
}

// fn(chunk) for chunk in [0, chunks), handed out one at a time: on a shared machine a thread that
// loses its core does not hold the others back, as a static half-and-half split would.
template <typename Fn>
void dynamic_chunks(index_t chunks, int threads, const Fn& fn) {
  parallel_blocks(0, chunks, 1, threads, [&fn](index_t c, index_t) { fn(c); });
}

// What a visit may use: destination rows to prefetch (up to two arrays indexed by slot), and a filter
// that restricts it to the stat rows flagged in `only` (a fix-up after a full visit; with
// `all_uniform`, known from that visit, an index row is skipped after reading its first entry).
struct Hints {
  const void* a = nullptr;
  const void* b = nullptr;
  int elem_size = 0;
  bool write = false;
  // Per stat row bookkeeping that fn updates (mean's row counts), a byte per row, prefetched with the
  // destination row (mean's row-pattern forward spent ~25 ms on these misses).
  const uint8_t* stat = nullptr;
  const uint8_t* only = nullptr;
  bool all_uniform = false;
  // {so, sm, si} (ValuesAt::stride): fn gets the values offset o * so + j * sm + i * si of a position in
  // place of the position itself (broadcast values read in place, no division per call).
  const index_t* values_stride = nullptr;
};

// Always inlined: GCC finds a call whose only effect is a prefetch free of side effects (pure) and
// deletes it, which left the row and per-element paths with no prefetch at all at -O3.
__attribute__((always_inline)) inline void prefetch_row(const Hints& pf, index_t s, index_t len) {
  const index_t bytes = len * pf.elem_size;
  for (const void* base : {pf.a, pf.b}) {
    if (!base) continue;
    const char* p = static_cast<const char*>(base) + s * pf.elem_size;
    for (index_t off = 0; off < bytes; off += 64) {
      if (pf.write) __builtin_prefetch(p + off, 1, 3);
      else __builtin_prefetch(p + off, 0, 3);
    }
  }
}

// The outcome of a visit: every index in range, and whether some index row did not agree.
struct Visited {
  bool ok = true;
  bool scattered = false;
};

using Uniform = std::true_type;
using Scattered = std::false_type;

// One part of a visit: outer rows [o0, o1), columns [i0, i1) (column block b), destination range
// [k0, k1) along the axis. fn(slot, position, len, stat_row, Uniform|Scattered): for Uniform, the
// len contiguous slots and positions of an index row that agree; for Scattered, one element
// (len == 1). bad(position) for an out-of-range index (only the part owning k = 0 reports it).
template <bool Reverse, bool Unit, typename Idx, typename Fn, typename Bad>
Visited visit_part(const Idx* idx, const Geometry& g, index_t o0, index_t o1, index_t i0, index_t i1, index_t b,
                index_t k0, index_t k1, const Hints& pf, const Fn& fn, const Bad& bad_fn) {
  const index_t n = g.n, m = g.m, inner = g.inner, len = i1 - i0;
  const bool bcast = g.idx_broadcast;
  const index_t istride = bcast ? 1 : inner;  // between index rows
  const index_t* vs = pf.values_stride;  // what fn gets as its position (see Hints)
  const index_t vso = vs ? vs[0] : m * inner, vsm = vs ? vs[1] : inner, vsi = vs ? vs[2] : 1;
  const index_t rbase = b * g.outer * n;
  const bool do_prefetch = !Unit && (pf.a || pf.b) && len * pf.elem_size >= 64;
  const bool report = k0 == 0;
  const uint8_t* only = pf.only;
  const bool skip_fast = only && (Unit || pf.all_uniform);
  const bool prefetch_each = !Unit && (pf.a || pf.b);
  bool bad = false, scattered = false, last_scattered = false;
  for (index_t o = o0; o < o1; ++o) {
    const Idx* ib = idx + o * m * istride + (bcast ? 0 : i0);
    const index_t pbase = o * m * inner + i0, sbase = o * n * inner + i0, rrow = rbase + o * n;
    const index_t vbase = o * vso + i0 * vsi;
    for (index_t jj = 0; jj < m; ++jj) {
      const index_t j = Reverse ? m - 1 - jj : jj;
      if (last_scattered && prefetch_each && jj + kEachAhead < m) {
        // rows that disagree: each element's slot, a row or two ahead (a few dozen lines in flight)
        const Idx* ahead = ib + (Reverse ? j - kEachAhead : j + kEachAhead) * istride;
        for (index_t t = 0; t < len; ++t) {
          const index_t kp = static_cast<index_t>(ahead[t]);
          if (index_in_range(kp, n)) prefetch_row(pf, sbase + wrap_index(kp, n) * inner + t, 1);
        }
      } else if (do_prefetch && jj + kHintsAhead < m) {
        const index_t jp = Reverse ? j - kHintsAhead : j + kHintsAhead;
        const index_t kp = static_cast<index_t>(ib[jp * istride]);
        if (index_in_range(kp, n)) {
          const index_t kw = wrap_index(kp, n);
          prefetch_row(pf, sbase + kw * inner, len);
          if (pf.stat) __builtin_prefetch(pf.stat + rrow + kw, 1, 3);
        }
      }
      const Idx* row = ib + j * istride;
      const index_t p = pbase + j * inner, vp = vbase + j * vsm;
      const Idx first = row[0];
      if (skip_fast) {
        const index_t k = static_cast<index_t>(first);
        if (!index_in_range(k, n) || !only[rrow + wrap_index(k, n)]) continue;
      }
      bool uniform = true;
      if (!Unit && !bcast) {
        Idx diff = 0;
        for (index_t t = 1; t < len; ++t) diff |= row[t] ^ first;
        uniform = diff == 0;
        last_scattered = !uniform;
      }
      if (uniform) {
        const index_t k = static_cast<index_t>(first);
        if (!index_in_range(k, n)) {
          bad = true;
          if (report)
            for (index_t t = 0; t < len; ++t) bad_fn(p + t);
          continue;
        }
        const index_t kk = wrap_index(k, n);
        if (kk < k0 || kk >= k1 || (only && !only[rrow + kk])) continue;
        fn(sbase + kk * inner, vp, Unit ? index_t(1) : len, rrow + kk, Uniform{});
      } else {
        scattered = true;
        for (index_t t = 0; t < len; ++t) {
          const index_t k = static_cast<index_t>(row[t]);
          if (!index_in_range(k, n)) {
            bad = true;
            if (report) bad_fn(p + t);
            continue;
          }
          const index_t kk = wrap_index(k, n);
          if (kk < k0 || kk >= k1 || (only && !only[rrow + kk])) continue;
          fn(sbase + kk * inner + t, vp + t * vsi, index_t(1), rrow + kk, Scattered{});
        }
      }
    }
  }
  return Visited{!bad, scattered};
}

// Destination bytes of one part of the plan (the slots one thread owns at a time).
inline index_t part_bytes(const Geometry& g, const Plan& plan, index_t elem) {
  switch (plan.kind) {
    case Plan::Single: return g.slots() * elem;
    case Plan::Outer: return plan.chunk * g.n * g.inner * elem;
    case Plan::Columns: return g.outer * g.n * plan.block * elem;
    default: return 0;
  }
}

// Whether the destination a thread updates at a time is past L2 (2 MiB): where the partitioned
// paths pay, and where a destination prefetch does (on a cache-resident one it is pure overhead: a
// [1000, 64] scatter took 2.2x as long with it).
inline bool misses_l2(const Geometry& g, const Plan& plan, index_t elem) {
  const index_t bytes = plan.kind == Plan::Narrow ? g.slots() * elem / std::max(plan.threads, 1) : part_bytes(g, plan, elem);
  return bytes >= tiles().far_bytes;
}

template <bool Reverse, typename Idx, typename Fn, typename Bad>
Visited visit(const Idx* idx, const Geometry& g, const Plan& plan, const Hints& pf, const Fn& fn, const Bad& bad_fn) {
  if (g.positions() == 0) return Visited{};
  Hints hints = pf;
  if (!misses_l2(g, plan, pf.elem_size)) {
    hints.a = hints.b = nullptr;
    hints.stat = nullptr;
  }
  std::atomic<bool> ok{true}, scattered{false};
  auto part = [&](index_t o0, index_t o1, index_t i0, index_t i1, index_t b, index_t k0, index_t k1) {
    const Visited v = i1 - i0 == 1
                          ? visit_part<Reverse, true>(idx, g, o0, o1, i0, i1, b, k0, k1, hints, fn, bad_fn)
                          : visit_part<Reverse, false>(idx, g, o0, o1, i0, i1, b, k0, k1, hints, fn, bad_fn);
    if (!v.ok) ok.store(false, std::memory_order_relaxed);
    if (v.scattered) scattered.store(true, std::memory_order_relaxed);
  };
  switch (plan.kind) {
    case Plan::Single:
      part(0, g.outer, 0, g.inner, 0, 0, g.n);
      break;
    case Plan::Outer:
      dynamic_chunks((g.outer + plan.chunk - 1) / plan.chunk, plan.threads, [&](index_t c) {
        part(c * plan.chunk, std::min(g.outer, (c + 1) * plan.chunk), 0, g.inner, 0, 0, g.n);
      });
      break;
    case Plan::Columns:
      dynamic_chunks(plan.nblocks, plan.threads, [&](index_t c) {
        part(0, g.outer, c * plan.block, std::min(g.inner, (c + 1) * plan.block), c, 0, g.n);
      });
      break;
    case Plan::Narrow:  // each thread scans every index and applies the ones aimed at its slot range
      parallel_for(0, std::max<index_t>(g.n, 1), 1,
                   [&](index_t k0, index_t k1) { part(0, g.outer, 0, g.inner, 0, k0, k1); });
      break;
  }
  return Visited{ok.load(), scattered.load()};
}

template <typename Idx, typename Fn>
Visited visit(const Idx* idx, const Geometry& g, const Plan& plan, const Hints& pf, const Fn& fn) {
  return visit<false>(idx, g, plan, pf, fn, [](index_t) {});
}

// fn(slot, len, stat_row) over every slot, a column block of one destination row at a time.
template <typename Fn>
void for_slots(const Geometry& g, const Plan& plan, const Fn& fn) {
  const index_t rows = g.outer * g.n, inner = g.inner;
  if (rows * inner == 0) return;
  parallel_for(0, rows, std::max<index_t>(1, tiles().grain / std::max<index_t>(inner, 1)), [&](index_t b0, index_t b1) {
    for (index_t r = b0; r < b1; ++r)
      for (index_t b = 0; b < plan.nblocks; ++b) {
        const index_t i0 = b * plan.block, i1 = std::min(inner, i0 + plan.block);
        fn(r * inner + i0, i1 - i0, b * rows + r);
      }
  });
}

template <typename Dst, typename Src>
void convert(const Src* in, Dst* out, index_t count) {
  if (static_cast<const void*>(in) == static_cast<const void*>(out)) return;
  parallel_for(0, count, tiles().grain, [&](index_t b, index_t e) {
    if (std::is_same<Src, Dst>::value) {
      std::memcpy(out + b, in + b, (e - b) * sizeof(Dst));
    } else {
      for (index_t s = b; s < e; ++s) out[s] = store<Dst>(load(in[s]));
    }
  });
}

// Contributions per slot: per stat row for index rows that agree, per slot (lazily touched) for the
// rest. count(s) = row[stat_row(s)] + slot[s].
struct Counter {
  std::unique_ptr<int32_t[]> row;
  std::unique_ptr<HugeScratch> slot_mem;  // zero pages, faulted in where touched
  int32_t* slot = nullptr;
  std::atomic<bool> slot_used{false};
  // Without `rows` only the slot counts exist (mean's forward keeps its row counts in RowBytes).
  Counter(const Geometry& g, const Plan& plan, bool rows = true)
      : row(rows ? new int32_t[plan.nblocks * g.outer * g.n]() : nullptr) {
    if (g.inner > 1 && g.slots() > 0) {
      slot_mem.reset(new HugeScratch(g.slots() * sizeof(int32_t)));
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
  std::unique_ptr<uint8_t[]> low;
  HugeScratch high_mem;  // zero pages, faulted in where touched
  int32_t* high;
  std::atomic<bool> carried{false};
  explicit RowBytes(index_t rows)
      : low(new uint8_t[std::max<index_t>(rows, 1)]()), high_mem(rows * sizeof(int32_t)), high(high_mem.as<int32_t>()) {}
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

// ---- Destination-bucketed scatter (independent indices into a large destination) --------------
// Where the indices of a row disagree, every update is a cache miss into the destination (a random
// line of a table far larger than the caches: ~3x the time of a row-pattern update). Instead a part
// partitions its updates by destination block (one pass over indices and values, appending
// (offset, value) entries to per-block lists: sequential writes), then applies block by block while
// the block sits in L2. The partition is stable: a slot's contributions keep their increasing
// position order, so every combine happens in the same order as in visit() (bit-identical).

// The most blocks a part has (write streams of the partition); block, chunk and round sizes: tiles().
constexpr index_t kMaxBlocks = 1024;

template <typename T>
struct Entry {
  uint32_t off;  // (row in block) << lshift | column in part
  T v;
};

inline int ceil_log2(index_t x) {
  int s = 0;
  while ((index_t(1) << s) < x) ++s;
  return s;
}

// Whether most sampled index rows disagree over the first column block (then the partition pays).
template <typename Idx>
bool mostly_scattered(const Idx* idx, const Geometry& g, const Plan& plan) {
  const index_t rows = g.outer * g.m, len = std::min(plan.block, g.inner);
  if (rows == 0 || len < 2 || g.idx_broadcast) return false;
  const index_t samples = std::min<index_t>(rows, 64);
  index_t scattered = 0;
  for (index_t q = 0; q < samples; ++q) {
    const Idx* row = idx + (q * rows / samples) * g.inner;
    Idx diff = 0;
    for (index_t t = 1; t < len; ++t) diff |= row[t] ^ row[0];
    scattered += diff != 0;
  }
  return 2 * scattered > samples;
}

// The partitioned pass over one part (outer rows [o0, o1), columns [i0, i1); stat rows from rb, as
// visit_part's), round by round. A round appends an (offset, value) entry per in-range position to its
// destination block's list, then applies the lists block by block while the block sits in L2:
// - scatter (!Gather): fn(slot, value, stat_row) per entry, each slot's in increasing position;
// - gather: the entry's value becomes fn(slot, value, stat_row) (Reverse: rounds, lists and entries
//   walked backwards, so each slot's positions arrive in decreasing order, as in visit<true>), then
//   a walk of the round's positions in order reads each block's list with a cursor and writes
//   out[p] (zero for an out-of-range index): every write sequential, no random read of a large table.
// - scatter: hooks.begin(slot, rows, columns, stat_row) for each block before the first round's apply, and
//   hooks.end(...) after the last round's (its first slot, rows `inner` slots apart, and first stat row),
//   while the block is in L2. Every slot of the part lies in exactly one block: per-slot scratch that
//   begin() clears needs no zeroed memory.
// Returns false on an out-of-range index.
template <bool Gather, bool Reverse, typename T, typename Idx, typename Fn, typename Hooks>
bool bucket_part(const Idx* idx, const ValuesAt<T>& values, T* out, T zero, const Geometry& g, index_t o0, index_t o1,
                 index_t i0, index_t i1, index_t rb, index_t elem, const Fn& fn_in, const Hooks& hooks) {
  // A local copy: its captures can live in registers (mean's byte stores may alias any memory, so captures
  // read through a reference are reloaded after each one).
  const Fn fn = fn_in;
  const Tiles& tl = tiles();
  const index_t n = g.n, m = g.m, inner = g.inner, len = i1 - i0, rows = (o1 - o0) * n, chunk = tl.chunk_entries;
  if (len == 0) return true;
  if (rows == 0) {  // n == 0: every index is out of range
    if (Gather)
      for (index_t o = o0; o < o1; ++o)
        for (index_t j = 0; j < m; ++j)
          for (index_t t = 0; t < len; ++t) out[(o * m + j) * inner + i0 + t] = zero;
    return o1 == o0;
  }
  const int lshift = ceil_log2(len);
  int shift = std::max(0, ceil_log2(std::max<index_t>(1, tl.block_bytes / (len * elem) + 1)) - 1);  // rows per block
  while ((rows >> shift) >= kMaxBlocks) ++shift;
  const index_t blocks = ((rows - 1) >> shift) + 1;
  const index_t round_rows = std::max<index_t>(1, tl.round_entries / len);  // index rows per round
  const index_t total_rows = (o1 - o0) * m, rounds = std::max<index_t>(1, (total_rows + round_rows - 1) / round_rows);
  const index_t cap = std::min(total_rows, round_rows) * len + blocks * chunk;
  static_assert(std::is_trivially_copyable<Entry<T>>::value, "entries live in raw scratch");
  HugeScratch scratch(cap * sizeof(Entry<T>), /*zeroed=*/false);
  Entry<T>* const pool = scratch.as<Entry<T>>();
  // Gather: each position's block (kNoBlock: index out of range), so that the un-partition reads 2 bytes
  // a position instead of the index again.
  static_assert(kMaxBlocks < 0xffff, "block numbers fit 16 bits");
  constexpr uint16_t kNoBlock = 0xffff;
  HugeScratch block_of_mem(Gather ? std::min(total_rows, round_rows) * len * sizeof(uint16_t) : 1, /*zeroed=*/false);
  uint16_t* const block_of = block_of_mem.as<uint16_t>();
  std::vector<std::vector<uint32_t>> chunks(blocks);  // chunk numbers in the pool, per block
  std::vector<Entry<T>*> cur(blocks), end(blocks);
  const index_t lmask = (index_t(1) << lshift) - 1;
  const index_t vstep = values.stride[2];  // (a local: the entry stores below could alias `values`)
  bool bad = false;
  for (index_t rr = 0; rr < rounds; ++rr) {
    const index_t q0 = (Reverse ? rounds - 1 - rr : rr) * round_rows, q1 = std::min(total_rows, q0 + round_rows);
    index_t next = 0;  // next free chunk
    for (index_t b = 0; b < blocks; ++b) {
      chunks[b].clear();
      cur[b] = end[b] = nullptr;
    }
    for (index_t q = q0; q < q1; ++q) {  // partition: q = (o - o0) * m + j
      const index_t o = o0 + q / m, j = q % m;
      const index_t p = (o * m + j) * inner + i0;
      const Idx* row = idx + p;
      const T* vrow = values.data ? values.at(o, j, i0) : nullptr;
      const index_t rbase = (o - o0) * n;
      uint16_t* const brow = block_of + (q - q0) * len;
      for (index_t t = 0; t < len; ++t) {
        const index_t k = static_cast<index_t>(row[t]);
        if (!index_in_range(k, n)) {
          bad = true;
          if (Gather) brow[t] = kNoBlock;
          continue;
        }
        const index_t r = rbase + wrap_index(k, n), b = r >> shift;
        if (Gather) brow[t] = static_cast<uint16_t>(b);
        if (cur[b] == end[b]) {
          chunks[b].push_back(static_cast<uint32_t>(next));
          cur[b] = pool + next * chunk;
          end[b] = cur[b] + chunk;
          ++next;
        }
        *cur[b]++ = Entry<T>{static_cast<uint32_t>(((r & ((index_t(1) << shift) - 1)) << lshift) | t), vrow ? vrow[t * vstep] : T()};
      }
    }
    for (index_t b = 0; b < blocks; ++b) {  // apply, block by block
      const index_t base = (o0 * n + (b << shift)) * inner + i0, rbase = rb + (b << shift);
      const index_t block_rows = std::min(index_t(1) << shift, rows - (b << shift));
      if (!Gather && rr == 0) hooks.begin(base, block_rows, len, rbase);
      const index_t nc = static_cast<index_t>(chunks[b].size());
      for (index_t cc = 0; cc < nc; ++cc) {
        const index_t c = chunks[b][Reverse ? nc - 1 - cc : cc];
        Entry<T>* const first = pool + c * chunk;
        if (cc + 1 < nc) {  // the next chunk is elsewhere in the pool: start its stream early (-4% time)
          const char* next_chunk = reinterpret_cast<const char*>(pool + index_t(chunks[b][Reverse ? nc - 2 - cc : cc + 1]) * chunk);
          for (int line = 0; line < 4; ++line) __builtin_prefetch(next_chunk + 64 * line);
        }
        Entry<T>* const stop = cc == (Reverse ? 0 : nc - 1) ? cur[b] : first + chunk;
        for (index_t u = 0, count = stop - first; u < count; ++u) {
          Entry<T>* const e = Reverse ? stop - 1 - u : first + u;
          const index_t s = base + index_t(e->off >> lshift) * inner + index_t(e->off & lmask);
          const index_t r = rbase + index_t(e->off >> lshift);
          if constexpr (Gather) e->v = fn(s, e->v, r);
          else fn(s, e->v, r);
        }
      }
      if (!Gather && rr == rounds - 1) hooks.end(base, block_rows, len, rbase);
    }
    if constexpr (Gather) {  // un-partition: the positions in order, each block's list read by a cursor
      std::vector<index_t> taken(blocks, 0);
      for (index_t b = 0; b < blocks; ++b) cur[b] = end[b] = nullptr;
      for (index_t q = q0; q < q1; ++q) {
        const index_t o = o0 + q / m, j = q % m;
        T* orow = out + (o * m + j) * inner + i0;
        const uint16_t* brow = block_of + (q - q0) * len;
        for (index_t t = 0; t < len; ++t) {
          const index_t b = brow[t];
          if (b == kNoBlock) {
            orow[t] = zero;
            continue;
          }
          if (cur[b] == end[b]) {
            cur[b] = pool + index_t(chunks[b][taken[b]++]) * chunk;
            end[b] = cur[b] + chunk;
          }
          orow[t] = (cur[b]++)->v;
        }
      }
    }
  }
  return !bad;
}

// The partitioned pass over the whole plan (same parts as visit(); not for Plan::Narrow).
template <bool Gather, bool Reverse, typename T, typename Idx, typename Fn, typename Hooks>
bool bucket_run(const Idx* idx, const ValuesAt<T>& values, T* out, T zero, const Geometry& g, const Plan& plan,
                index_t elem, const Fn& fn, const Hooks& hooks) {
  std::atomic<bool> ok{true};
  auto part = [&](index_t o0, index_t o1, index_t i0, index_t i1, index_t rb) {
    if (!bucket_part<Gather, Reverse>(idx, values, out, zero, g, o0, o1, i0, i1, rb, elem, fn, hooks))
      ok.store(false, std::memory_order_relaxed);
  };
  switch (plan.kind) {
    case Plan::Outer:
      dynamic_chunks((g.outer + plan.chunk - 1) / plan.chunk, plan.threads, [&](index_t c) {
        const index_t o0 = c * plan.chunk;
        part(o0, std::min(g.outer, o0 + plan.chunk), 0, g.inner, o0 * g.n);
      });
      break;
    case Plan::Columns:
      dynamic_chunks(plan.nblocks, plan.threads, [&](index_t c) {
        part(0, g.outer, c * plan.block, std::min(g.inner, (c + 1) * plan.block), c * g.outer * g.n);
      });
      break;
    default:
      part(0, g.outer, 0, g.inner, 0);
      break;
  }
  return ok.load();
}

struct NoHooks {
  void begin(index_t, index_t, index_t, index_t) const {}
  void end(index_t, index_t, index_t, index_t) const {}
};
template <typename Begin, typename End>
struct BlockHooks {
  Begin begin_fn;
  End end_fn;
  void begin(index_t s, index_t rows, index_t len, index_t r) const { begin_fn(s, rows, len, r); }
  void end(index_t s, index_t rows, index_t len, index_t r) const { end_fn(s, rows, len, r); }
};
template <typename Begin, typename End>
BlockHooks<Begin, End> block_hooks(Begin begin, End end) {
  return BlockHooks<Begin, End>{begin, end};
}

// fn(slot, value, stat_row) for every in-range position, in destination-block order (each slot's in
// increasing position); hooks.begin / end per block around them (see bucket_part). `values.data` may be null
// (fn then gets T()).
template <typename T, typename Idx, typename Fn, typename Hooks = NoHooks>
bool bucket_scatter(const Idx* idx, const ValuesAt<T>& values, const Geometry& g, const Plan& plan, index_t elem,
                    const Fn& fn, const Hooks& hooks = Hooks()) {
  return bucket_run<false, false>(idx, values, static_cast<T*>(nullptr), T(), g, plan, elem, fn, hooks);
}

// out[p] = fn(slot, values[p], stat_row) for every position (zero where its index is out of range);
// the calls for a slot come in increasing position (Reverse: decreasing).
template <bool Reverse, typename T, typename Idx, typename Fn>
bool bucket_gather(const Idx* idx, const ValuesAt<T>& values, T* out, T zero, const Geometry& g, const Plan& plan, index_t elem,
                   const Fn& fn) {
  return bucket_run<true, Reverse>(idx, values, out, zero, g, plan, elem, fn, NoHooks());
}

// Partition when most index rows disagree and a part's destination is well beyond L2.
template <typename Idx>
bool use_buckets(const Idx* idx, const Geometry& g, const Plan& plan, index_t elem) {
  return plan.kind != Plan::Narrow && misses_l2(g, plan, elem) && mostly_scattered(idx, g, plan);
}

// make_plan's split, except where its column blocks would split index rows that agree, into a destination
// past L2 (the graph case [1e6, 64] <- [2e6, 64], and indices [E, 1] read as broadcast). There a pass is
// bound by the latency of its random destination rows, one per index row: column blocks halve the bytes
// a thread moves but not the rows it waits on, so two threads gain little over one (80 against 85 ms),
// and where the index rows start on 256-byte boundaries (as Paddle's large tensors do) the two threads' halves
// of each row made both slower (154 ms). One thread over whole rows, Paddle tensors, AMD EPYC: add forward
// 159 -> 81 ms, mean 176 -> 89, add forward + backward 333 -> 256, broadcast [E, 1] add 87 -> 63. Rows
// that disagree keep the column blocks: their partitioned passes are compute-bound (independent add 520 ms
// on two threads, 1133 on one).
template <typename Idx>
Plan choose_plan(const Idx* idx, const Geometry& g, index_t elem) {
  const Plan p = make_plan(g);
  if (p.kind == Plan::Columns && misses_l2(g, p, elem) && !mostly_scattered(idx, g, p)) return single_plan(g);
  return p;
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
  std::unique_ptr<uint8_t[]> wrapped;
  index_t inner;
  ByteCounts(const Geometry& g, const Plan& plan)
      : low_mem(g.slots(), /*zeroed=*/false), high_mem(g.slots() * sizeof(int32_t)), low(low_mem.as<uint8_t>()),
        high(high_mem.as<int32_t>()), wrapped(new uint8_t[plan.nblocks * g.outer * g.n]()), inner(g.inner) {}
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

// The hot lambdas capture pointers by value: by-reference captures are reloaded on every element.
template <Reduce R, typename T, typename Idx>
bool forward_impl(reduce_acc_t<R, T>* acc, const ValuesAt<T>& values, const Idx* idx, const Geometry& g,
                  const Plan& plan, bool include_self, int32_t* counts_out) {
  using A = reduce_acc_t<R, T>;
  // No destination prefetch for assign: its stores do not wait on the line (add's loads do: -10% time on the
  // row pattern with it), and the prefetch only made assign's time vary (143-178 ms against 147-158).
  Hints pf{R == Reduce::Assign ? nullptr : acc, nullptr, int(sizeof(A)), true};
  if (!include_self && R != Reduce::Assign) {
    // Written slots first take the reduction's identity (a write-only pass, no per-slot flags), so
    // arr takes no part in them; slots nobody writes keep arr's value.
    const A identity = reduce_identity<R, A>();
    visit(idx, g, plan, pf, [acc, identity](index_t s, index_t, index_t len, index_t, auto) {
      for (index_t t = 0; t < len; ++t) acc[s + t] = identity;
    });
  }
  if (!values.dense) pf.values_stride = values.stride;  // combine's p: the values offset
  const T* vals = values.data;
  const bool along_inner = values.along_inner();
  auto combine = [acc, vals, along_inner](index_t s, index_t p, index_t len) {
    if (along_inner) {
#pragma GCC ivdep
      for (index_t t = 0; t < len; ++t) acc[s + t] = ReduceOp<R>::combine(acc[s + t], static_cast<A>(load(vals[p + t])));
      return;
    }
    const A x = static_cast<A>(load(vals[p]));  // one value for the run (broadcast along inner)
#pragma GCC ivdep
    for (index_t t = 0; t < len; ++t) acc[s + t] = ReduceOp<R>::combine(acc[s + t], x);
  };
  const bool buckets = use_buckets(idx, g, plan, sizeof(A));
  if (R != Reduce::Mean) {
    if (buckets)
      return bucket_scatter(idx, values, g, plan, sizeof(A), [acc](index_t s, T v, index_t) {
        acc[s] = ReduceOp<R>::combine(acc[s], static_cast<A>(load(v)));
      });
    return visit(idx, g, plan, pf, [combine](index_t s, index_t p, index_t len, index_t, auto) { combine(s, p, len); }).ok;
  }

  const int32_t self = include_self ? 1 : 0;
  if (buckets) {  // each block divided right after its last round's apply, while it is in L2
    ByteCounts counts(g, plan);
    ByteCounts* c = &counts;
    const index_t inner = g.inner;
    return bucket_scatter(
        idx, values, g, plan, sizeof(A) + 1,
        [acc, c, low = c->low](index_t s, T v, index_t r) {
          acc[s] = ReduceOp<R>::combine(acc[s], static_cast<A>(load(v)));
          if (__builtin_expect(++low[s] == 0, 0)) c->carry(s, r);
        },
        block_hooks([c](index_t s0, index_t rows, index_t len, index_t) { c->clear(s0, rows, len); },
                    [acc, c, self, inner, counts_out](index_t s0, index_t rows, index_t len, index_t r0) {
                      c->for_rows(s0, rows, r0, [=](index_t i, auto count_of) {
                        A* const a = acc + s0 + i * inner;
                        for (index_t t = 0; t < len; ++t) a[t] = divide_by_count<A>(a[t], count_of(t), self);
                        if (counts_out)
                          for (index_t t = 0; t < len; ++t) counts_out[s0 + i * inner + t] = count_of(t);
                      });
                    }));
  }
  Counter cnt(g, plan, /*rows=*/false);
  Counter* c = &cnt;
  RowBytes rows(plan.nblocks * g.outer * g.n);
  RowBytes* rb = &rows;
  pf.stat = rows.low.get();
  const bool ok = visit(idx, g, plan, pf, [combine, c, rb, low = rows.low.get()](index_t s, index_t p, index_t len,
                                                                                 index_t r, auto u) {
                    combine(s, p, len);
                    if constexpr (decltype(u)::value) {
                      if (__builtin_expect(++low[r] == 0, 0)) rb->carry(r);
                    } else {
                      c->add(s, r, u);
                    }
                  }).ok;
  const bool scattered = cnt.scattered(), wide = rows.carried.load();
  for_slots(g, plan, [acc, c, rb, wide, self, scattered, counts_out](index_t s, index_t len, index_t r) {
    const int32_t rc = rb->at(r, wide);
    if (counts_out)
      for (index_t t = 0; t < len; ++t) counts_out[s + t] = rc + (scattered ? c->slot[s + t] : 0);
    if (!scattered) {
      if (rc == 0) return;  // untouched row: nothing to divide
      for (index_t t = 0; t < len; ++t) acc[s + t] = mean_divide<A>(acc[s + t], rc + self);
      return;
    }
    for (index_t t = 0; t < len; ++t) {
      const int32_t n = rc + c->slot[s + t];
      if (n > 0) acc[s + t] = mean_divide<A>(acc[s + t], n + self);
    }
  });
  return ok;
}

// ---- Scatter along the last axis (inner == 1) --------------------------------------------------
// Every destination row [n] and index row [m] belong to one outer row, so a thread takes whole outer
// rows and keeps all per-slot bookkeeping (counts, tie counts, products) in row-sized scratch that
// stays in L1/L2: no per-slot buffers, no row-level indirection, and tight element loops (the
// generic visit's per-element callback costs ~3x more here). Same operations in the same order as
// the generic passes, so the results are bit-identical.

bool flat_plan(const Geometry& g, const Plan& plan) { return g.inner == 1 && plan.kind != Plan::Narrow; }

// fn(o0, o1, scratch) over outer rows; `scratch` holds `per_row` bytes reused for each row.
template <typename Fn>
void for_outer_rows(const Geometry& g, const Plan& plan, size_t per_row, const Fn& fn) {
  auto run = [&](index_t o0, index_t o1) {
    std::unique_ptr<char[]> scratch(new char[std::max<size_t>(per_row, 1)]);
    fn(o0, o1, scratch.get());
  };
  if (plan.kind == Plan::Single) return run(0, g.outer);
  dynamic_chunks((g.outer + plan.chunk - 1) / plan.chunk, plan.threads,
                 [&](index_t c) { run(c * plan.chunk, std::min(g.outer, (c + 1) * plan.chunk)); });
}

// A destination row's running values during flat_forward, by layout (the row loop is templated on it):
// - PlainRow: the values alone (every mode but mean), in out itself when A is T;
// - InterleavedRow: mean's sum and count of a slot side by side, the count in A: an update is one 2-lane
//   vector add on one line. Two arrays (SplitRow) cost two random accesses and twice the instructions per
//   update: mean took 2.4x add's time at [64, 1e6] <- [64, 2e6], 1.2-1.5x on short rows; now 0.9-1.2x.
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

template <Reduce R, typename T, typename Idx>
bool flat_forward(const T* arr, T* out, const ValuesAt<T>& values, const Idx* idx, const Geometry& g, const Plan& plan,
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

// Grads for every mode from per-row statistics: count (contributions; Assign: taken by a later
// position) and aux (Min/Max: contributors matching the result); mul by exclusive products
// (flat_mul_row). The formulas and their arguments are those of backward_impl.
// out[j] = row[wrap(idx[j])], 0 for an index out of range: `add`'s values_grad along the last axis.
// float32 with int64 indices uses AVX-512's masked gathers where the CPU has them (the scalar loop
// costs ~9 instructions per element; this path is what makes [1024, 1024] forward+backward `add`
// faster than single-threaded torch).
template <typename T, typename Idx>
void gather_row(const T* row, const Idx* idx, T* out, index_t m, index_t n, T zero);

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void gather_row_avx512(const float* row, const int64_t* idx, float* out,
                                                           index_t m, index_t n) {
  const __m512i vn = _mm512_set1_epi64(n), vneg = _mm512_set1_epi64(-n), vzero = _mm512_setzero_si512();
  index_t j = 0;
  for (; j + 8 <= m; j += 8) {
    __m512i k = _mm512_loadu_si512(idx + j);
    const __mmask8 ok = _mm512_cmpge_epi64_mask(k, vneg) & _mm512_cmplt_epi64_mask(k, vn);
    k = _mm512_mask_add_epi64(k, _mm512_cmplt_epi64_mask(k, vzero), k, vn);
    _mm256_storeu_ps(out + j, _mm512_mask_i64gather_ps(_mm256_setzero_ps(), ok, k, row, 4));
  }
  for (; j < m; ++j) out[j] = index_in_range(idx[j], n) ? row[wrap_index(idx[j], n)] : 0.0f;
}
#endif

template <typename T, typename Idx>
void gather_row(const T* row, const Idx* idx, T* out, index_t m, index_t n, T zero) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same<T, float>::value && std::is_same<Idx, int64_t>::value) {
    if (simd::simd_level() == 2) return gather_row_avx512(row, idx, out, m, n);
  }
#endif
  for (index_t j = 0; j < m; ++j) {
    const index_t k = static_cast<index_t>(idx[j]);
    out[j] = index_in_range(k, n) ? row[wrap_index(k, n)] : zero;
  }
}

// mul's grads on one row: the product of a slot's other factors is the product of the factors before
// (prefix, arr's value first with include_self) times those after (suffix), multiplications only, so
// exact at zeros and non-finite values. `run` [n] holds the running prefix, then the running suffix
// (in the end: the product of all values, arr's grad factor); `pre` [m] each position's prefix.
template <typename T, typename Idx>
void flat_mul_row(const T* arr, const Idx* ir, const T* vr, const T* g, T* ag, T* vg, int32_t* cnt, acc_t<T>* run,
                  acc_t<T>* pre, index_t n, index_t m, bool include_self) {
  using A = acc_t<T>;
  const bool count = !include_self && ag;  // arr_grad then needs to know the written slots
  if (vg) {
    for (index_t k = 0; k < n; ++k) run[k] = include_self ? static_cast<A>(load(arr[k])) : A(1);
    for (index_t j = 0; j < m; ++j) {
      const index_t k = static_cast<index_t>(ir[j]);
      if (!index_in_range(k, n)) continue;
      const index_t kk = wrap_index(k, n);
      pre[j] = run[kk];
      run[kk] *= static_cast<A>(load(vr[j]));
    }
  }
  for (index_t k = 0; k < n; ++k) run[k] = A(1);
  if (count) std::memset(cnt, 0, n * sizeof(int32_t));
  for (index_t jj = 0; jj < m; ++jj) {
    const index_t j = m - 1 - jj, k = static_cast<index_t>(ir[j]);
    if (!index_in_range(k, n)) {
      if (vg) vg[j] = store<T>(A(0));
      continue;
    }
    const index_t kk = wrap_index(k, n);
    if (vg)
      vg[j] = store<T>(values_grad_of<Reduce::Mul, A>(static_cast<A>(load(g[kk])), A(0), A(0), 1, 0, pre[j] * run[kk],
                                                      include_self));
    run[kk] *= static_cast<A>(load(vr[j]));
    if (count) ++cnt[kk];
  }
  if (!ag) return;
  for (index_t k = 0; k < n; ++k)
    ag[k] = store<T>(arr_grad_of<Reduce::Mul, A>(static_cast<A>(load(g[k])), A(0), A(0), count ? cnt[k] : 1, 0, run[k],
                                                 include_self));
}

template <Reduce R, typename T, typename Idx>
void flat_backward(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad, T* vg,
                   const Geometry& geo, const Plan& plan, bool include_self, const int32_t* counts) {
  using A = acc_t<T>;
  constexpr bool kMul = R == Reduce::Mul, kMinMax = R == Reduce::Min || R == Reduce::Max;
  constexpr bool kMean = R == Reduce::Mean;
  // Counts where backward_impl keeps them (without them every count reads as 1); mean's from the forward
  // when it kept them.
  const bool need_count = R == Reduce::Assign || R == Reduce::Mean || !include_self;
  const index_t n = geo.n, m = geo.m;
  const size_t per_row = n * 2 * sizeof(int32_t) + (kMul ? (n + m) * sizeof(A) : 0) + (kMean ? n * sizeof(T) : 0);
  const T zero = store<T>(A(0));
  for_outer_rows(geo, plan, per_row, [&](index_t o0, index_t o1, char* scratch) {
    int32_t* const own_cnt = reinterpret_cast<int32_t*>(scratch);
    int32_t* const aux = own_cnt + n;
    A* const run = reinterpret_cast<A*>(aux + n);
    T* const q = reinterpret_cast<T*>(aux + n);  // mean: a slot's values_grad (run is mul's)
    for (index_t o = o0; o < o1; ++o) {
      const index_t s0 = o * n, p0 = o * m;
      const Idx* ir = idx + p0;
      const T* vr = values + p0;
      if constexpr (kMul) {
        flat_mul_row<T, Idx>(arr + s0, ir, vr, g + s0, arr_grad ? arr_grad + s0 : nullptr, vg ? vg + p0 : nullptr, own_cnt,
                             run, run + n, n, m, include_self);
        continue;
      }
      const bool counted = kMean && counts;  // the forward's counts: no count pass
      int32_t* const cnt = counted ? const_cast<int32_t*>(counts + s0) : own_cnt;
      if (need_count && !counted) std::memset(cnt, 0, n * sizeof(int32_t));
      int32_t nan_result = 0;  // some slot of the row is NaN: only then is same_value needed below
      if (kMinMax)
        for (index_t k = 0; k < n; ++k) nan_result |= int32_t(is_nan(load(out[s0 + k])));
      // The rest of the row, with `matches` = same_value where the row has a NaN result and a plain
      // == where it has none (cheaper in these loops). By-value captures: by reference they would be
      // reloaded on every element.
      auto rest = [=](auto nan_aware) {
        constexpr bool kNan = decltype(nan_aware)::value;
        if (kMinMax)
          for (index_t k = 0; k < n; ++k)
            aux[k] = int32_t(include_self) & int32_t(matches<kNan>(load(arr[s0 + k]), load(out[s0 + k])));
        // Statistics: Assign visits in reverse, so that a slot's first visitor is its winner and
        // counts then say whether a later position took the slot.
        if (R == Reduce::Assign) {
          for (index_t jj = 0; jj < m; ++jj) {
            const index_t j = m - 1 - jj, k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) {
              if (vg) vg[p0 + j] = zero;
              continue;
            }
            const index_t kk = wrap_index(k, n);
            if (vg) vg[p0 + j] = pick(cnt[kk] > 0, zero, g[s0 + kk]);
            ++cnt[kk];
          }
        } else if ((need_count && !counted) || kMinMax) {
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) continue;
            const index_t kk = wrap_index(k, n);
            if (need_count && !counted) ++cnt[kk];
            if (kMinMax) aux[kk] += int32_t(matches<kNan>(load(vr[j]), load(out[s0 + kk])));
          }
        }
        if (vg && R == Reduce::Add) {
          gather_row<T, Idx>(g + s0, ir, vg + p0, m, n, zero);
        } else if (vg && kMean) {  // a slot's share once per slot, then add's gather of it
          for (index_t k = 0; k < n; ++k)
            q[k] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s0 + k])), A(0), A(0), cnt[k], 0, A(1),
                                                 include_self));
          gather_row<T, Idx>(q, ir, vg + p0, m, n, zero);
        } else if (vg && R != Reduce::Assign)
          for (index_t j = 0; j < m; ++j) {
            const index_t k = static_cast<index_t>(ir[j]);
            if (!index_in_range(k, n)) {
              vg[p0 + j] = zero;
              continue;
            }
            const index_t s = s0 + wrap_index(k, n), kk = s - s0;
            const T gs = g[s];
            if (kMinMax) {  // a single contributor takes the grad undivided, as backward_impl
              vg[p0 + j] = aux[kk] > 1 ? store<T>(values_grad_of<R, A, kNan>(static_cast<A>(load(gs)), static_cast<A>(load(vr[j])),
                                                                             static_cast<A>(load(out[s])), 1, aux[kk], A(1), include_self))
                                       : pick(matches<kNan>(load(vr[j]), load(out[s])), gs, zero);
            } else {
              vg[p0 + j] = store<T>(values_grad_of<R, A>(static_cast<A>(load(gs)), A(0), A(0),
                                                         R == Reduce::Mean ? cnt[kk] : 1, 0, A(1), include_self));
            }
          }
        if (!arr_grad) return;
        T* ag = arr_grad + s0;
        const T* gr = g + s0;
        if (R == Reduce::Assign) {
          for (index_t k = 0; k < n; ++k) ag[k] = pick(cnt[k] > 0, zero, gr[k]);
        } else if (R == Reduce::Add && include_self) {
          std::memcpy(ag, gr, n * sizeof(T));
        } else {
#pragma GCC ivdep
          for (index_t k = 0; k < n; ++k) {
            ag[k] = store<T>(arr_grad_of<R, A, kNan>(static_cast<A>(load(gr[k])), kMinMax ? static_cast<A>(load(arr[s0 + k])) : A(0),
                                                     kMinMax ? static_cast<A>(load(out[s0 + k])) : A(0), need_count ? cnt[k] : 1,
                                                     kMinMax ? aux[k] : 0, A(1), include_self));
          }
        }
      };
      if (nan_result) rest(std::true_type{});
      else rest(std::false_type{});
    }
  });
}

template <Reduce R, typename T, typename Idx>
bool forward_of(const T* arr, T* out, const T* values_ptr, const Idx* idx, const Geometry& g, bool include_self,
                int32_t* counts) {
  using A = reduce_acc_t<R, T>;
  const Plan plan = choose_plan(idx, g, sizeof(A));
  const ValuesAt<T> values(values_ptr, g);
  if (R != Reduce::Mean) counts = nullptr;
  if (counts && g.slots() > 0 && g.positions() == 0) std::memset(counts, 0, g.slots() * sizeof(int32_t));
  if (flat_plan(g, plan)) return flat_forward<R, T, Idx>(arr, out, values, idx, g, plan, include_self, counts);
  if (std::is_same<A, T>::value) {  // reduce in out itself (arr == out for the inplace op)
    convert(arr, out, g.slots());
    return forward_impl<R, T, Idx>(reinterpret_cast<A*>(out), values, idx, g, plan, include_self, counts);
  }
  // half types (float32) and integer means (int64): accumulate wider, round once
  std::unique_ptr<A[]> acc(new A[std::max<index_t>(g.slots(), 1)]);
  convert(arr, acc.get(), g.slots());
  const bool ok = forward_impl<R, T, Idx>(acc.get(), values, idx, g, plan, include_self, counts);
  convert(acc.get(), out, g.slots());
  return ok;
}

// Per-slot int32 scratch in arr_grad's own memory when it is at least as wide (then every pass reads
// a slot's scratch before it writes that slot's grad), else a fresh buffer. The stride is a
// compile-time constant so that the loops over it vectorise.
template <typename T>
struct SlotScratch {
  static constexpr index_t stride = sizeof(T) >= sizeof(int32_t) ? sizeof(T) / sizeof(int32_t) : 1;
  std::unique_ptr<int32_t[]> own;
  int32_t* ptr;
  SlotScratch(T* arr_grad, index_t slots) {
    if (arr_grad && sizeof(T) >= sizeof(int32_t) && alignof(T) >= alignof(int32_t)) {
      ptr = reinterpret_cast<int32_t*>(arr_grad);
    } else {
      own.reset(new int32_t[std::max<index_t>(slots, 1) * stride]);
      ptr = own.get();
    }
  }
};

// Read side of a Counter for the grad loops: base(r) once per row segment, plus slot[s] when
// some row did not agree. Without a Counter every count reads as 1 (see backward_impl).
struct Counts {
  const int32_t* row = nullptr;
  const int32_t* slot = nullptr;
  int32_t base(index_t r) const { return row ? row[r] : 1; }
  // The count of slot s in a row segment whose base(r) is c0.
  int32_t at(int32_t c0, index_t s) const { return slot ? c0 + slot[s] : c0; }
};

template <Reduce R, typename T, typename Idx>
void backward_impl(const T* arr, const Idx* idx, const T* values, const T* out, const T* g, T* arr_grad,
                   T* values_grad, const Geometry& geo, bool include_self, const int32_t* counts) {
  using A = acc_t<T>;
  // amin/amax keep the column split: their grads read g, out and the values and count the ties per
  // element, enough work that one thread over whole rows was slower (graph case fwd+bwd 575 -> 667 ms).
  const Plan plan = R == Reduce::Min || R == Reduce::Max ? make_plan(geo) : choose_plan(idx, geo, sizeof(T));
  if (flat_plan(geo, plan))
    return flat_backward<R, T, Idx>(arr, idx, values, out, g, arr_grad, values_grad, geo, plan, include_self, counts);
  const T zero = store<T>(A(0));
  const Hints pf_g{g, nullptr, int(sizeof(T)), false};
  T* vg = values_grad;
  auto zero_bad = [vg, zero](index_t p) {
    if (vg) vg[p] = zero;
  };
  // Independent indices into a large destination: the passes that read or update per-slot data at each
  // position go through the destination-partitioned bucket_gather / bucket_scatter instead of visit()
  // (a cache and TLB miss per position otherwise). Same per-slot order of the calls: bit-identical.
  const bool buckets = use_buckets(idx, geo, plan, sizeof(T));
  const ValuesAt<T> no_values, dense_values(values, geo);

  if (R == Reduce::Assign) {
    // The largest position of a slot wins: visited in reverse, a slot's first visitor is its winner.
    if (buckets) {  // a byte per slot: taken by a later position (a quarter of a Counter's pages to fault in)
      HugeScratch taken_mem(geo.slots());
      uint8_t* const taken = taken_mem.as<uint8_t>();
      if (vg)
        bucket_gather<true>(idx, no_values, vg, zero, geo, plan, sizeof(T) + 1, [taken, g, zero](index_t s, T, index_t) {
          const bool won = taken[s] == 0;
          taken[s] = 1;
          return won ? g[s] : zero;
        });
      else
        bucket_scatter(idx, no_values, geo, plan, 1, [taken](index_t s, T, index_t) { taken[s] = 1; });
      if (arr_grad)
        for_slots(geo, plan, [taken, arr_grad, g, zero](index_t s, index_t len, index_t) {
          for (index_t t = 0; t < len; ++t) arr_grad[s + t] = taken[s + t] ? zero : g[s + t];
        });
      return;
    }
    Counter hits(geo, plan);
    Counter* h = &hits;
    visit<true>(idx, geo, plan, pf_g, [h, vg, g, zero](index_t s, index_t p, index_t len, index_t r, auto u) {
      if (vg) {
        if (h->row[r] > 0) {  // a later row of the same destination won every slot
          for (index_t t = 0; t < len; ++t) vg[p + t] = zero;
        } else if (!h->scattered()) {
          std::memcpy(vg + p, g + s, len * sizeof(T));
        } else {
          for (index_t t = 0; t < len; ++t) vg[p + t] = h->slot[s + t] == 0 ? g[s + t] : zero;
        }
      }
      h->add(s, r, u);
    }, zero_bad);
    if (arr_grad)
      for_slots(geo, plan, [h, arr_grad, g, zero](index_t s, index_t len, index_t r) {
        const int32_t rc = h->row[r];
        if (rc > 0) {
          for (index_t t = 0; t < len; ++t) arr_grad[s + t] = zero;
        } else if (!h->scattered()) {
          std::memcpy(arr_grad + s, g + s, len * sizeof(T));
        } else {
          for (index_t t = 0; t < len; ++t) arr_grad[s + t] = h->slot[s + t] > 0 ? zero : g[s + t];
        }
      });
    return;
  }

  if (R == Reduce::Mean && (counts || buckets)) {
    // Every slot's grads from its count: arr_grad, and q = g / (count + self), the values_grad of every
    // position aimed at the slot; values_grad is then add's gather of q. With include_self, arr_grad is q
    // on every written slot (the only ones gathered from), and serves as q. The counts are the forward's
    // (the dygraph API keeps them: one pass over the slots), else one partitioned byte-count pass whose end
    // hook writes each block's grads while it is in L2. (Was an int32 count pass, then a gather that divided
    // at each position: independent mean's backward took 2.1x add's.)
    std::unique_ptr<HugeScratch> q_mem;
    T* q = nullptr;
    if (vg && !(include_self && arr_grad)) {
      q_mem.reset(new HugeScratch(geo.slots() * sizeof(T), /*zeroed=*/false));
      q = q_mem->as<T>();
    }
    auto write_grads = [q, ag = arr_grad, g, include_self](index_t s, index_t len, auto count_of) {
      if (q)
        for (index_t t = 0; t < len; ++t)
          q[s + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), count_of(t), 0, A(1),
                                                   include_self));
      if (ag)
        for (index_t t = 0; t < len; ++t)
          ag[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), count_of(t), 0, A(1),
                                                 include_self));
    };
    if (counts) {
      parallel_for(0, geo.slots(), tiles().grain, [=](index_t b, index_t e) {
        write_grads(b, e - b, [c = counts + b](index_t t) { return c[t]; });
      });
    } else {
      ByteCounts byte_counts(geo, plan);
      ByteCounts* c = &byte_counts;
      const index_t inner = geo.inner;
      bucket_scatter(idx, no_values, geo, plan, 1,
                     [c, low = c->low](index_t s, T, index_t r) {
                       if (__builtin_expect(++low[s] == 0, 0)) c->carry(s, r);
                     },
                     block_hooks([c](index_t s0, index_t rows, index_t len, index_t) { c->clear(s0, rows, len); },
                                 [c, inner, write_grads](index_t s0, index_t rows, index_t len, index_t r0) {
                                   c->for_rows(s0, rows, r0, [=](index_t i, auto count_of) {
                                     write_grads(s0 + i * inner, len, count_of);
                                   });
                                 }));
    }
    if (!vg) return;
    const T* const from = q ? q : arr_grad;
    if (buckets)
      bucket_gather<false>(idx, no_values, vg, zero, geo, plan, sizeof(T), [from](index_t s, T, index_t) { return from[s]; });
    else
      visit<false>(idx, geo, plan, Hints{from, nullptr, int(sizeof(T)), false},
                   [vg, from](index_t s, index_t p, index_t len, index_t, auto) { std::memcpy(vg + p, from + s, len * sizeof(T)); },
                   zero_bad);
    return;
  }

  // Written slots, for the grads that differ there: the mean's divisor, and arr_grad without
  // include_self. With include_self the other modes' formulas give an unwritten slot its grad
  // unchanged by themselves, so they run with count = 1.
  const bool need_count = R == Reduce::Mean || !include_self;
  std::unique_ptr<Counter> counter;
  if (need_count) {
    counter.reset(new Counter(geo, plan));
    if (buckets) {
      Counter* c = counter.get();
      bucket_scatter(idx, no_values, geo, plan, sizeof(int32_t), [c](index_t s, T, index_t) { c->add(s, 0, Scattered{}); });
    } else {
      count_contributions(idx, geo, plan, *counter);
    }
  }
  Counts cv;
  if (counter) {
    cv.row = counter->row.get();
    cv.slot = counter->scattered() ? counter->slot : nullptr;
  }

  if (R == Reduce::Add || R == Reduce::Mean) {  // a gather (scaled by the count for mean)
    if (vg && buckets)
      bucket_gather<false>(idx, no_values, vg, zero, geo, plan, sizeof(T) + (cv.slot ? sizeof(int32_t) : 0),
                           [g, cv, include_self](index_t s, T, index_t r) {
                             if (R == Reduce::Add) return g[s];
                             return store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), A(0), A(0),
                                                                  cv.at(cv.base(r), s), 0, A(1), include_self));
                           });
    else if (vg)
      visit<false>(idx, geo, plan, pf_g, [vg, g, cv, include_self](index_t s, index_t p, index_t len, index_t r, auto) {
        if (R == Reduce::Add) {
          std::memcpy(vg + p, g + s, len * sizeof(T));
        } else {
          const int32_t c0 = cv.base(r);
#pragma GCC ivdep
          for (index_t t = 0; t < len; ++t)
            vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0),
                                                      cv.at(c0, s + t), 0, A(1), include_self));
        }
      }, zero_bad);
    if (arr_grad) {
      if (R == Reduce::Add && include_self) {
        convert(g, arr_grad, geo.slots());
      } else {
        for_slots(geo, plan, [arr_grad, g, cv, include_self](index_t s, index_t len, index_t r) {
          const int32_t c0 = cv.base(r);
#pragma GCC ivdep
          for (index_t t = 0; t < len; ++t)
            arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0),
                                                         cv.at(c0, s + t), 0, A(1), include_self));
        });
      }
    }
    return;
  }

  const index_t stat_rows = plan.nblocks * geo.outer * geo.n;
  // Stat rows (destination rows of a column block) that a fix-up visit must redo exactly.
  std::unique_ptr<uint8_t[]> flag_buf(new uint8_t[std::max<index_t>(stat_rows, 1)]());
  uint8_t* flagged = flag_buf.get();
  std::atomic<bool> any_flag{false};
  std::atomic<bool>* any = &any_flag;

  if (R == Reduce::Mul) {
    // Where a slot's result is a normal number (is_normal_value), none of its factors is 0, ±inf or
    // NaN, and out / f is the product of the other factors to rounding: the grads need no per-slot
    // scratch. Rows with another result (and every row for the half types, whose out was rounded)
    // are redone exactly, with products only.
    Visited seen;
    const bool want_vg = vg != nullptr;
    std::unique_ptr<T[]> vg_own;
    if (!want_vg) {  // not requested: written anyway, so that the loop below has no branch
      vg_own.reset(new T[std::max<index_t>(geo.positions(), 1)]);
      vg = vg_own.get();
    }
    if (std::is_same<A, T>::value) {
      const Hints pf{g, out, int(sizeof(T)), false};
      if (buckets) {
        seen.scattered = true;
        bucket_gather<false>(idx, dense_values, vg, zero, geo, plan, 2 * sizeof(T),
                             [g, out, include_self, flagged, any](index_t s, T val, index_t r) {
                               const A v = static_cast<A>(load(val)), o = static_cast<A>(load(out[s]));
                               if (!is_normal_value(o)) {
                                 flagged[r] = 1;
                                 any->store(true, std::memory_order_relaxed);
                               }
                               return store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s])), v, o, 1, 0, o / v, include_self));
                             });
      } else
      seen = visit<false>(idx, geo, plan, pf, [vg, g, out, values, include_self, flagged, any](index_t s, index_t p, index_t len, index_t r, auto) {
        int32_t special = 0;  // not a bool: GCC does not vectorise a bool reduction
#pragma GCC ivdep
        for (index_t t = 0; t < len; ++t) {
          const A v = static_cast<A>(load(values[p + t])), o = static_cast<A>(load(out[s + t]));
          special |= int32_t(!is_normal_value(o));
          vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), v, o, 1, 0, o / v, include_self));
        }
        if (special) {
          flagged[r] = 1;
          any->store(true, std::memory_order_relaxed);
        }
      }, zero_bad);
      for_slots(geo, plan, [arr_grad, g, arr, out, cv, include_self, flagged, any](index_t s, index_t len, index_t r) {
        int32_t special = 0;
        const int32_t c0 = cv.base(r);
        if (include_self)  // the unwritten slots (out = arr): arr_grad = g * arr / arr
          for (index_t t = 0; t < len; ++t) special |= int32_t(!is_normal_value(static_cast<A>(load(out[s + t]))));
        if (arr_grad) {
#pragma GCC ivdep
          for (index_t t = 0; t < len; ++t) {
            const A o = static_cast<A>(load(out[s + t]));
            arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), cv.at(c0, s + t), 0,
                                                         o / static_cast<A>(load(arr[s + t])), include_self));
          }
        }
        if (special) {
          flagged[r] = 1;
          any->store(true, std::memory_order_relaxed);
        }
      });
    } else {
      std::memset(flagged, 1, stat_rows);
      any_flag = true;
      seen.scattered = true;  // unknown: no visit yet
    }
    if (!any_flag.load()) return;
    // Exact redo of the flagged rows (as flat_mul_row): a running product per slot, and per position
    // its prefix (in vg itself where it has the accumulation type), in buffers whose untouched pages
    // are never faulted in.
    const index_t slots = std::max<index_t>(geo.slots(), 1);
    std::unique_ptr<A, decltype(&std::free)> run_buf(static_cast<A*>(std::calloc(slots, sizeof(A))), &std::free);
    std::unique_ptr<A, decltype(&std::free)> pre_buf(nullptr, &std::free);
    A* pre = nullptr;
    if (want_vg) {
      if (std::is_same<A, T>::value) {
        pre = reinterpret_cast<A*>(vg);
      } else {
        pre_buf.reset(static_cast<A*>(std::calloc(std::max<index_t>(geo.positions(), 1), sizeof(A))));
        pre = pre_buf.get();
      }
    }
    if (!run_buf || (want_vg && !pre)) throw std::bad_alloc();
    A* run = run_buf.get();
    Hints only;
    only.only = flagged;
    only.all_uniform = !seen.scattered;
    if (want_vg) {
      for_slots(geo, plan, [run, arr, include_self, flagged](index_t s, index_t len, index_t r) {
        if (!flagged[r]) return;
        for (index_t t = 0; t < len; ++t) run[s + t] = include_self ? static_cast<A>(load(arr[s + t])) : A(1);
      });
      visit(idx, geo, plan, only, [run, pre, values](index_t s, index_t p, index_t len, index_t, auto) {
        for (index_t t = 0; t < len; ++t) {
          pre[p + t] = run[s + t];
          run[s + t] *= static_cast<A>(load(values[p + t]));
        }
      });
    }
    for_slots(geo, plan, [run, flagged](index_t s, index_t len, index_t r) {
      if (!flagged[r]) return;
      for (index_t t = 0; t < len; ++t) run[s + t] = A(1);
    });
    visit<true>(idx, geo, plan, only, [run, pre, vg, g, values, include_self](index_t s, index_t p, index_t len, index_t, auto) {
      for (index_t t = 0; t < len; ++t) {
        if (pre)
          vg[p + t] = store<T>(values_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), 1, 0,
                                                    pre[p + t] * run[s + t], include_self));
        run[s + t] *= static_cast<A>(load(values[p + t]));
      }
    }, [](index_t) {});
    if (arr_grad)
      for_slots(geo, plan, [arr_grad, g, run, cv, include_self, flagged](index_t s, index_t len, index_t r) {
        if (!flagged[r]) return;
        const int32_t c0 = cv.base(r);
        for (index_t t = 0; t < len; ++t)
          arr_grad[s + t] = store<T>(arr_grad_of<R, A>(static_cast<A>(load(g[s + t])), A(0), A(0), cv.at(c0, s + t), 0,
                                                       run[s + t], include_self));
      });
    return;
  }

  // Min / Max: a grad is split evenly among the contributors matching the result (`ties`, arr
  // included when it took part; same_value: the NaNs of a NaN result). One visit hands each matching value the whole grad, which is
  // exact unless its slot has ties; only rows with a tie are then visited again to divide.
  std::unique_ptr<T[]> vg_own;
  const bool want_vg = vg != nullptr;
  if (!want_vg) {  // not requested: written anyway, so that the loop below has no branch
    vg_own.reset(new T[std::max<index_t>(geo.positions(), 1)]);
    vg = vg_own.get();
  }
  SlotScratch<T> ties(arr_grad, geo.slots());
  int32_t* tp = ties.ptr;
  constexpr index_t ts = SlotScratch<T>::stride;
  std::atomic<bool> nan_flag{false};  // some result is NaN: only then is same_value needed below
  std::atomic<bool>* has_nan = &nan_flag;
  for_slots(geo, plan, [tp, arr, out, include_self, has_nan](index_t s, index_t len, index_t) {
    int32_t nan = 0;
    for (index_t t = 0; t < len; ++t) {
      const auto r = load(out[s + t]);
      tp[(s + t) * ts] = int32_t(include_self) & int32_t(same_value(load(arr[s + t]), r));
      nan |= int32_t(is_nan(r));
    }
    if (nan) has_nan->store(true, std::memory_order_relaxed);
  });
  // The passes below with `matches` = same_value where some result is NaN, else a plain == (the
  // float compares of same_value cost ~25% of this backward on 2 threads).
  auto rest = [&](auto nan_aware) {
    constexpr bool kNan = decltype(nan_aware)::value;
    Hints pf_ties{out, g, int(sizeof(T)), false};
    Visited seen;
    if (buckets) {
      seen.scattered = true;
      bucket_gather<false>(idx, dense_values, vg, zero, geo, plan, 3 * sizeof(T),
                           [tp, g, out, zero, flagged, any](index_t s, T val, index_t r) {
                             const bool match = matches<kNan>(load(val), load(out[s]));
                             const int32_t n = tp[s * ts] + (match ? 1 : 0);
                             tp[s * ts] = n;
                             if (match && n > 1) {
                               flagged[r] = 1;
                               any->store(true, std::memory_order_relaxed);
                             }
                             return pick(match, g[s], zero);
                           });
    } else
    seen = visit<false>(idx, geo, plan, pf_ties,
                 [tp, vg, g, out, values, zero, flagged, any](index_t s, index_t p, index_t len, index_t r, auto) {
                   int32_t most = 0;
#pragma GCC ivdep
                   for (index_t t = 0; t < len; ++t) {
                     const bool match = matches<kNan>(load(values[p + t]), load(out[s + t]));
                     const T gv = g[s + t];
                     vg[p + t] = pick(match, gv, zero);
                     const int32_t n = tp[(s + t) * ts] + (match ? 1 : 0);
                     tp[(s + t) * ts] = n;
                     most = std::max(most, match ? n : 0);
                   }
                   if (most > 1) {
                     flagged[r] = 1;
                     any->store(true, std::memory_order_relaxed);
                   }
                 }, zero_bad);
    if (want_vg && any_flag.load()) {
      Hints only;
      only.only = flagged;
      only.all_uniform = !seen.scattered;
      visit<false>(idx, geo, plan, only, [tp, vg, g, out, values, include_self](index_t s, index_t p, index_t len, index_t, auto) {
        for (index_t t = 0; t < len; ++t) {
          const int32_t n = tp[(s + t) * ts];
          if (n > 1)
            vg[p + t] = store<T>(values_grad_of<R, A, kNan>(static_cast<A>(load(g[s + t])), static_cast<A>(load(values[p + t])),
                                                            static_cast<A>(load(out[s + t])), 1, n, A(1), include_self));
        }
      }, [](index_t) {});
    }
    if (arr_grad)  // reads a slot's tie count, then overwrites it with the slot's grad
      for_slots(geo, plan, [tp, arr_grad, g, arr, out, cv, include_self](index_t s, index_t len, index_t r) {
        const int32_t c0 = cv.base(r);
        for (index_t t = 0; t < len; ++t) {
          const int32_t n = tp[(s + t) * ts];
          arr_grad[s + t] = store<T>(arr_grad_of<R, A, kNan>(static_cast<A>(load(g[s + t])), static_cast<A>(load(arr[s + t])),
                                                             static_cast<A>(load(out[s + t])), cv.at(c0, s + t), n, A(1),
                                                             include_self));
        }
      });
  };
  if (nan_flag.load()) rest(std::true_type{});
  else rest(std::false_type{});
}

}  // namespace

template <typename Idx>
BadIndex check_indices(const Idx* indices, index_t count, index_t n) {
  const int threads = count < 2 * tiles().grain ? 1 : max_threads();
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
                            index_t n, index_t m, index_t inner, bool include_self, bool idx_broadcast,
                            int values_broadcast, int32_t* counts) {
  bool ok = true;
  advise_huge(out, outer * n * inner * sizeof(T));
  populate_for_write(out, outer * n * inner * sizeof(T));  // [1024, 1024]: 666 fresh pages after a torch call
  dispatch_reduce(reduce, [&](auto r) {
    const Geometry g{outer, n, m, inner, idx_broadcast && inner > 1, values_broadcast};
    ok = forward_of<decltype(r)::value, T, Idx>(arr, out, values, indices, g, include_self, counts);
  });
  return ok;
}

template <typename T, typename Idx>
void put_along_axis_backward(Reduce reduce, const T* arr, const Idx* indices, const T* values, const T* out,
                             const T* out_grad, T* arr_grad, T* values_grad, index_t outer, index_t n,
                             index_t m, index_t inner, bool include_self, bool idx_broadcast, const int32_t* counts) {
  // Fresh grads, written in full: faulted in up front, in bulk and on every thread (-15% of the graph
  // case's forward + backward; the forward's out needs no such help: its first pass, the copy of arr,
  // already runs on every thread).
  if (arr_grad) {
    advise_huge(arr_grad, outer * n * inner * sizeof(T));
    populate_for_write(arr_grad, outer * n * inner * sizeof(T));
  }
  if (values_grad) {
    advise_huge(values_grad, outer * m * inner * sizeof(T));
    populate_for_write(values_grad, outer * m * inner * sizeof(T));
  }
  dispatch_reduce(reduce, [&](auto r) {
    backward_impl<decltype(r)::value, T, Idx>(arr, indices, values, out, out_grad, arr_grad, values_grad,
                                              Geometry{outer, n, m, inner, idx_broadcast && inner > 1}, include_self,
                                              counts);
  });
}

namespace {
// The sums of broadcast values' grads: double for float32 (sums of many grads stay close to the exact sum),
// float32 for the half types.
template <typename T>
using grad_sum_t = std::conditional_t<std::is_same<T, float>::value, double, acc_t<T>>;

// Independent partial sums over a row (one chain of adds is latency-bound): element i goes to lane i % 8
// of the row. A null row adds +0.0 where a row of zeros would.
constexpr int kLanes = 8;
template <typename T, typename S>
inline void add_row_to_lanes(S* lane, const T* r, index_t len) {
  if (!r) {
    for (int l = 0; l < kLanes && l < len; ++l) lane[l] += S(0);
    return;
  }
  index_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<S>(load(r[i + l]));
  for (int l = 0; i + l < len; ++l) lane[l] += static_cast<S>(load(r[i + l]));
}
template <typename S>
inline S total_of_lanes(const S* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

template <typename T>
void sum_broadcast_grad(const T* grad, T* values_grad, index_t outer, index_t m, index_t inner, int values_broadcast) {
  using S = grad_sum_t<T>;
  const bool bo = values_broadcast & kValuesOuter, bm = values_broadcast & kValuesAxis;
  const bool bi = values_broadcast & kValuesInner;
  const index_t vo_count = bo ? 1 : outer, vm_count = bm ? 1 : m, vi_count = bi ? 1 : inner;
  const index_t rows = vo_count * vm_count;  // values rows (of vi_count values)
  const index_t summed = outer * m * inner / std::max<index_t>(rows * vi_count, 1);  // terms per value
  if (rows * vi_count == 0) return;
  // Sums start from -0.0, the identity of + on every value (a single -0.0 term stays -0.0).
  auto source = [=](index_t q, index_t o, index_t j) {  // row (o, j) of grad, o/j ranging only when broadcast
    return grad + ((bo ? o : q / vm_count) * m + (bm ? j : q % vm_count)) * inner;
  };
  const index_t ob = bo ? outer : 1, mb = bm ? m : 1;
  if (bi) {  // one value per values row: the whole inner row of each of its broadcast rows
    parallel_for(0, rows, std::max<index_t>(1, tiles().grain / std::max<index_t>(summed, 1)), [&](index_t b, index_t e) {
      for (index_t q = b; q < e; ++q) {
        S lane[kLanes];
        for (int l = 0; l < kLanes; ++l) lane[l] = S(-0.0);
        for (index_t o = 0; o < ob; ++o)
          for (index_t j = 0; j < mb; ++j) add_row_to_lanes(lane, source(q, o, j), inner);
        values_grad[q] = store<T>(static_cast<acc_t<T>>(total_of_lanes(lane)));
      }
    });
    return;
  }
  // A values row is the element-wise sum of its broadcast rows: a column block at a time (in a stack buffer).
  constexpr index_t kBlock = 256;
  const index_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(0, rows * blocks, std::max<index_t>(1, tiles().grain / std::max<index_t>(summed * kBlock, 1)),
               [&](index_t b, index_t e) {
    S sum[kBlock];
    for (index_t u = b; u < e; ++u) {
      const index_t q = u / blocks, i0 = u % blocks * kBlock, len = std::min(kBlock, inner - i0);
      for (index_t t = 0; t < len; ++t) sum[t] = S(-0.0);
      for (index_t o = 0; o < ob; ++o)
        for (index_t j = 0; j < mb; ++j) {
          const T* r = source(q, o, j) + i0;
          for (index_t t = 0; t < len; ++t) sum[t] += static_cast<S>(load(r[t]));
        }
      for (index_t t = 0; t < len; ++t) values_grad[q * inner + i0 + t] = store<T>(static_cast<acc_t<T>>(sum[t]));
    }
  });
}

template <typename T, typename Idx>
void add_row_values_grad(const T* out_grad, const Idx* indices, T* values_grad, index_t outer, index_t n, index_t m,
                         index_t inner, int values_broadcast) {
  using S = grad_sum_t<T>;
  const bool bo = values_broadcast & kValuesOuter, bm = values_broadcast & kValuesAxis;
  const index_t vm_count = bm ? 1 : m, rows = (bo ? 1 : outer) * vm_count;
  const index_t ob = bo ? outer : 1, mb = bm ? m : 1;
  const index_t summed = std::max<index_t>(ob * mb * inner, 1);
  parallel_for(0, rows, std::max<index_t>(1, tiles().grain / summed), [&](index_t b, index_t e) {
    for (index_t q = b; q < e; ++q) {
      if (ob * mb == 1 && q + kHintsAhead < e) {  // one index row per value: prefetch a later row's grads
        const index_t qa = q + kHintsAhead, oa = qa / vm_count, k = static_cast<index_t>(indices[oa * m + qa % vm_count]);
        if (index_in_range(k, n))
          for (index_t off = 0; off < inner * index_t(sizeof(T)); off += 64)
            __builtin_prefetch(reinterpret_cast<const char*>(out_grad + (oa * n + wrap_index(k, n)) * inner) + off, 0, 3);
      }
      S lane[kLanes];
      for (int l = 0; l < kLanes; ++l) lane[l] = S(-0.0);
      for (index_t o = 0; o < ob; ++o)
        for (index_t j = 0; j < mb; ++j) {
          const index_t oo = bo ? o : q / vm_count, jj = bm ? j : q % vm_count;
          const index_t k = static_cast<index_t>(indices[oo * m + jj]);  // the index row's destination row
          add_row_to_lanes(lane, index_in_range(k, n) ? out_grad + (oo * n + wrap_index(k, n)) * inner
                                                      : static_cast<const T*>(nullptr), inner);
        }
      values_grad[q] = store<T>(static_cast<acc_t<T>>(total_of_lanes(lane)));
    }
  });
}

#define PE_INSTANTIATE_FWD(T, Idx)                                                                    \
  template bool put_along_axis_forward<T, Idx>(Reduce, const T*, T*, const T*, const Idx*, index_t, index_t, \
                                               index_t, index_t, bool, bool, int, int32_t*);
#define PE_INSTANTIATE_BWD(T, Idx)                                                                           \
  template void put_along_axis_backward<T, Idx>(Reduce, const T*, const Idx*, const T*, const T*, const T*, \
                                                T*, T*, index_t, index_t, index_t, index_t, bool, bool, \
                                                const int32_t*);
#define PE_INSTANTIATE_ALL(T) \
  PE_INSTANTIATE_FWD(T, int32_t) PE_INSTANTIATE_FWD(T, int64_t)
#define PE_INSTANTIATE_ROWS(T, Idx) \
  template void add_row_values_grad<T, Idx>(const T*, const Idx*, T*, index_t, index_t, index_t, index_t, int);
#define PE_INSTANTIATE_FLOAT(T) \
  PE_INSTANTIATE_ALL(T) PE_INSTANTIATE_BWD(T, int32_t) PE_INSTANTIATE_BWD(T, int64_t) \
  PE_INSTANTIATE_ROWS(T, int32_t) PE_INSTANTIATE_ROWS(T, int64_t) \
  template void sum_broadcast_grad<T>(const T*, T*, index_t, index_t, index_t, int);
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
#undef PE_INSTANTIATE_ROWS

}  // namespace cpu
}  // namespace paddle_ext