// The plan shared by the CPU put_along_axis kernels (put_along_axis.cc is their dispatcher).
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
// The passes are memory-bound. A row of indices whose entries over the thread's column block all agree
// (the graph case, and every row when inner == 1) is handled as one contiguous, vectorised row
// operation, with the destination row of a later index row prefetched (random rows otherwise stall on
// memory latency). The other strategies build on this: counters.h (per-slot bookkeeping), buckets.h
// (destination-partitioned passes for independent indices), flat.h and flat_grads.h (the scatter axis
// is the last one), forward.h, and the backward of each reduce (backward.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "paddle_ext/parallel.h"
#include "paddle_ext/put_along_axis.h"

namespace paddle_ext {
namespace cpu {
namespace put {

// Sizes of the passes. PADDLE_EXT_PUT_TILE=small (a test knob, read once per process) shrinks them so that
// the fuzz suite's small shapes take the destination-partitioned paths (bucket_part: several blocks,
// list chunks and rounds) on one and two threads.
struct Tiles {
  index_t grain;          // elements worth a second thread: large on purpose (the passes are memory-bound,
                          // and on a shared machine a fork-join can wait milliseconds for a thread that
                          // lost its core, more than a few-million-element pass costs on one thread)
  index_t block_bytes;    // destination bytes per partition block: half of L2, which holds it with the entries
                          // streaming through
  index_t chunk_entries;  // entries per list chunk of a block
  index_t round_entries;  // updates partitioned per round: bounds the scratch per thread
  index_t far_bytes;      // a thread's destination from this size on is "past L2" (see misses_l2)
  index_t paired_m;       // flat mean keeps a slot's count next to its sum for index rows shorter than this
                          // (InterleavedRow; also bounded by what its accumulator counts exactly)
};

inline const Tiles& tiles() {
  static const Tiles t = [] {
    const char* knob = std::getenv("PADDLE_EXT_PUT_TILE");
    if (knob && std::strcmp(knob, "small") == 0) return Tiles{16, 64, 4, 40, 512, 16};
    return Tiles{index_t(1) << 20, 512 << 10, 512, index_t(1) << 24, 2 << 20,
                 std::numeric_limits<index_t>::max()};
  }();
  return t;
}
// Index rows looked ahead to prefetch a destination row (a few hundred ns of memory latency over
// ~20-50 ns of work per row).
constexpr index_t kHintsAhead = 8;
// Index rows looked ahead to prefetch the slots of a row whose indices disagree (its elements' slots).
constexpr index_t kEachAhead = 2;


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
inline Plan single_plan(const Geometry& g) {
  Plan p;
  p.block = std::max<index_t>(g.inner, 1);
  return p;
}

inline Plan make_plan(const Geometry& g) {
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
  // destination row (its misses would otherwise stall the row-pattern forward).
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
// paths pay, and where a destination prefetch does (on a cache-resident one it is pure overhead).
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

// make_plan's split, except where its column blocks would split index rows that agree, into a destination
// past L2 (the graph case [1e6, 64] <- [2e6, 64], and indices [E, 1] read as broadcast). There a pass is
// bound by the latency of its random destination rows, one per index row: column blocks halve the bytes
// a thread moves but not the rows it waits on, and two threads sharing each row's cache lines slow each
// other down, so one thread takes whole rows. Rows that disagree keep the column blocks: their
// partitioned passes are compute-bound.
template <typename Idx>
Plan choose_plan(const Idx* idx, const Geometry& g, index_t elem) {
  const Plan p = make_plan(g);
  if (p.kind == Plan::Columns && misses_l2(g, p, elem) && !mostly_scattered(idx, g, p)) return single_plan(g);
  return p;
}

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
