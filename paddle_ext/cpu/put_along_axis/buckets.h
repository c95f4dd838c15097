// Destination-bucketed passes of the CPU put_along_axis kernels (independent indices into a large destination).
//
// Where the indices of a row disagree, every update is a cache miss into the destination (a random
// line of a table far larger than the caches: ~3x the time of a row-pattern update). Instead a part
// partitions its updates by destination block (one pass over indices and values, appending
// (offset, value) entries to per-block lists: sequential writes), then applies block by block while
// the block sits in L2. The partition is stable: a slot's contributions keep their increasing
// position order, so every combine happens in the same order as in visit() (bit-identical).
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "paddle_ext/memory.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {


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
  ScratchVector<ScratchVector<uint32_t>> chunks(blocks);  // chunk numbers in the pool, per block
  ScratchVector<Entry<T>*> cur(blocks), end(blocks);
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
        if (cc + 1 < nc) {  // the next chunk is elsewhere in the pool: start its stream early
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
      ScratchVector<index_t> taken(blocks, 0);
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

}  // namespace put
}  // namespace cpu
}  // namespace paddle_ext
