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
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "paddle_ext/memory.h"
#include "plan.h"

namespace paddle_ext {
namespace cpu {
namespace put {


// The most blocks a part has (write streams of the partition); block, chunk and round sizes: tiles().
constexpr index_t kMaxBlocks = 1024;

constexpr index_t kLineBytes = 64;  // a cache line: the partition's unit of write

// p rounded up to a line boundary, as an E*.
template <typename E>
E* line_aligned(char* p) {
  return reinterpret_cast<E*>((reinterpret_cast<uintptr_t>(p) + kLineBytes - 1) / kLineBytes * kLineBytes);
}

template <typename T>
struct Entry {
  uint32_t off;  // (row in block) << lshift | column in part
  T v;
};

// One full cache line from an L1 buffer to `dst` (line-aligned), past the caches where the CPU can.
inline void stream_line(void* dst, const void* src) {
#if defined(__SSE2__)
  const __m128i* s = static_cast<const __m128i*>(src);
  __m128i* d = static_cast<__m128i*>(dst);
  for (int k = 0; k < int(kLineBytes / 16); ++k) _mm_stream_si128(d + k, _mm_load_si128(s + k));
#else
  std::memcpy(dst, src, kLineBytes);
#endif
}

inline void streams_done() {
#if defined(__SSE2__)
  _mm_sfence();  // the streamed lines are ordered before the apply pass reads them
#endif
}

inline int ceil_log2(index_t x) {
  int s = 0;
  while ((index_t(1) << s) < x) ++s;
  return s;
}

// A part's destination rows cut into blocks of 2^shift rows; an entry's offset packs (row in block, column).
struct Blocks {
  index_t rows, len;  // the part's destination rows, and its columns
  int lshift, shift;
  index_t count;
  Blocks(index_t rows_, index_t len_, index_t elem) : rows(rows_), len(len_), lshift(ceil_log2(len_)) {
    const Tiles& tl = tiles();
    shift = std::max(0, ceil_log2(std::max<index_t>(1, tl.block_bytes / (len * elem) + 1)) - 1);
    // Up to twice the block for at most 256 blocks: their line buffers then fill half of L1, not all of it.
    if (((rows - 1) >> shift) >= 256) ++shift;
    while ((rows >> shift) >= kMaxBlocks) ++shift;
    count = rows == 0 ? 0 : ((rows - 1) >> shift) + 1;
  }
  index_t rows_in(index_t b) const { return std::min(index_t(1) << shift, rows - (b << shift)); }
  uint32_t pack(index_t r, index_t t) const { return static_cast<uint32_t>(((r & ((index_t(1) << shift) - 1)) << lshift) | t); }
  index_t row_of(uint32_t off) const { return index_t(off >> lshift); }
  index_t column_of(uint32_t off) const { return index_t(off & ((uint32_t(1) << lshift) - 1)); }
};

// One round's entries: a list per destination block, in chunks of a pool (a block's chunks in order).
// Appends go through one cache line per block held in L1 (software write combining), each full line
// streamed to its list with non-temporal stores: hundreds of list tails are more write streams than the
// hardware tracks, and a plain store to each would first read its line from memory.
template <typename T>
class BlockLists {
 public:
  static constexpr index_t kLine = kLineBytes / index_t(sizeof(Entry<T>));  // entries per line
  static_assert(kLineBytes % sizeof(Entry<T>) == 0, "whole entries per line");
  static_assert(std::is_trivially_copyable<Entry<T>>::value, "entries live in raw scratch");

  // `entries`: the most a round appends.
  BlockLists(index_t blocks, index_t entries)
      : chunk_((tiles().chunk_entries + kLine - 1) / kLine * kLine),  // whole lines: chunks stay line-aligned
        scratch_((entries + blocks * chunk_) * sizeof(Entry<T>) + kLineBytes, /*zeroed=*/false),
        line_mem_(scratch_array<char>((blocks + 1) * kLineBytes, /*zeroed=*/false)),
        pool_(line_aligned<Entry<T>>(scratch_.as<char>())),
        lines_(line_aligned<Entry<T>>(line_mem_.get())),
        fill_(blocks, 0),
        chunks_(blocks),
        cur_(blocks),
        end_(blocks),
        read_(blocks),
        read_end_(blocks),
        taken_(blocks, 0) {}

  void reset() {
    next_ = 0;
    for (size_t b = 0; b < chunks_.size(); ++b) {
      chunks_[b].clear();
      cur_[b] = end_[b] = nullptr;
      fill_[b] = 0;
    }
  }

  void push(index_t b, const Entry<T>& e) {
    Entry<T>* const line = lines_ + b * kLine;
    const uint32_t f = fill_[b];
    line[f] = e;
    if (f + 1 < kLine) {
      fill_[b] = f + 1;
      return;
    }
    fill_[b] = 0;
    stream_line(tail(b, kLine), line);
  }

  // After a round's appends: the partly filled lines to their lists, all ordered before any read.
  void finish() {
    for (size_t b = 0; b < chunks_.size(); ++b) {
      if (fill_[b]) std::memcpy(static_cast<void*>(tail(b, fill_[b])), lines_ + b * kLine, fill_[b] * sizeof(Entry<T>));
      fill_[b] = 0;
    }
    streams_done();
  }

  // f(entry) for block b's entries in list order (Reverse: backwards).
  template <bool Reverse, typename F>
  void each(index_t b, const F& f) {
    const ScratchVector<uint32_t>& ch = chunks_[b];
    const index_t nc = static_cast<index_t>(ch.size());
    for (index_t cc = 0; cc < nc; ++cc) {
      Entry<T>* const first = pool_ + index_t(ch[Reverse ? nc - 1 - cc : cc]) * chunk_;
      if (cc + 1 < nc) {  // the next chunk is elsewhere in the pool: start its stream early
        const char* next_chunk = reinterpret_cast<const char*>(pool_ + index_t(ch[Reverse ? nc - 2 - cc : cc + 1]) * chunk_);
        for (int line = 0; line < 4; ++line) __builtin_prefetch(next_chunk + 64 * line);
      }
      Entry<T>* const stop = cc == (Reverse ? 0 : nc - 1) ? cur_[b] : first + chunk_;
      for (index_t u = 0, count = stop - first; u < count; ++u) f(*(Reverse ? stop - 1 - u : first + u));
    }
  }

  // Reading the lists back in order: rewind(), then next(b) for each of block b's entries in turn.
  void rewind() {
    for (size_t b = 0; b < chunks_.size(); ++b) {
      read_[b] = read_end_[b] = nullptr;
      taken_[b] = 0;
    }
  }
  const Entry<T>& next(index_t b) {
    if (read_[b] == read_end_[b]) {
      read_[b] = pool_ + index_t(chunks_[b][taken_[b]++]) * chunk_;
      read_end_[b] = read_[b] + chunk_;
    }
    return *read_[b]++;
  }

 private:
  // Room for `count` more entries at the end of block b's list (a new chunk where the last is full;
  // chunks hold whole lines, so a full line never straddles two).
  Entry<T>* tail(index_t b, index_t count) {
    if (cur_[b] == end_[b]) {
      chunks_[b].push_back(static_cast<uint32_t>(next_));
      cur_[b] = pool_ + next_ * chunk_;
      end_[b] = cur_[b] + chunk_;
      ++next_;
    }
    Entry<T>* const at = cur_[b];
    cur_[b] += count;
    return at;
  }

  index_t chunk_, next_ = 0;
  HugeScratch scratch_;
  ScratchArray<char> line_mem_;
  Entry<T>* pool_;
  Entry<T>* lines_;
  ScratchVector<uint32_t> fill_;                  // entries in each block's line
  ScratchVector<ScratchVector<uint32_t>> chunks_;  // chunk numbers in the pool, per block
  ScratchVector<Entry<T>*> cur_, end_;            // each list's tail and the end of its last chunk
  ScratchVector<Entry<T>*> read_, read_end_;     // read back: each list's cursor and its chunk's end
  ScratchVector<index_t> taken_;                  // and the chunks of each list taken
};

// Gather: each position's block (kNoBlock: index out of range), so that the un-partition reads 2 bytes a
// position instead of the index again.
static_assert(kMaxBlocks < 0xffff, "block numbers fit 16 bits");
constexpr uint16_t kNoBlock = 0xffff;

// Appends an entry per in-range position of index rows [q0, q1) of a part (row q: outer o0 + q / m, axis
// position q % m; columns [i0, i0 + bl.len)) to its destination block's list. Gather: each position's block
// also goes to block_of (row q at (q - q0) * len). Returns false on an out-of-range index.
template <bool Gather, typename T, typename Idx>
bool partition(const Idx* idx, const ValuesAt<T>& values, const Geometry& g, const Blocks& bl, index_t o0, index_t i0,
               index_t q0, index_t q1, BlockLists<T>& lists, uint16_t* block_of) {
  const index_t n = g.n, m = g.m, inner = g.inner, len = bl.len, shift = bl.shift;
  const index_t vstep = values.stride[2];  // (a local: the entry stores below could alias `values`)
  bool bad = false;
  for (index_t q = q0; q < q1; ++q) {
    const index_t o = o0 + q / m, j = q % m;
    const Idx* row = idx + (o * m + j) * inner + i0;
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
      lists.push(b, Entry<T>{bl.pack(r, t), vrow ? vrow[t * vstep] : T()});
    }
  }
  return !bad;
}

// Gather: out[p] for the positions of index rows [q0, q1) of a part, each block's list read in order (zero
// for an out-of-range index): every write sequential, no random read of a large table.
template <typename T>
void unpartition(BlockLists<T>& lists, const uint16_t* block_of, const Geometry& g, index_t len, index_t o0,
                 index_t i0, index_t q0, index_t q1, T* out, T zero) {
  lists.rewind();
  for (index_t q = q0; q < q1; ++q) {
    const index_t o = o0 + q / g.m, j = q % g.m;
    T* const orow = out + (o * g.m + j) * g.inner + i0;
    const uint16_t* const brow = block_of + (q - q0) * len;
    for (index_t t = 0; t < len; ++t) orow[t] = brow[t] == kNoBlock ? zero : lists.next(brow[t]).v;
  }
}

// Gather with n == 0 (every index out of range): zeros.
template <typename T>
void zero_rows(const Geometry& g, index_t o0, index_t o1, index_t i0, index_t i1, T* out, T zero) {
  for (index_t o = o0; o < o1; ++o)
    for (index_t j = 0; j < g.m; ++j)
      for (index_t t = i0; t < i1; ++t) out[(o * g.m + j) * g.inner + t] = zero;
}

// Applies block b's entries: each entry's (slot, stat row) from at(offset); a scatter calls fn(slot, value,
// stat_row), a gather stores its result back into the entry (for the un-partition).
template <bool Gather, bool Reverse, typename T, typename Fn, typename At>
void apply_block(BlockLists<T>& lists, index_t b, const Fn& fn, const At& at) {
  lists.template each<Reverse>(b, [&](Entry<T>& e) {
    const auto [s, r] = at(e.off);
    if constexpr (Gather) e.v = fn(s, e.v, r);
    else fn(s, e.v, r);
  });
}

// The partitioned pass over one part (outer rows [o0, o1), columns [i0, i1); stat rows from rb, as
// visit_part's), round by round. A round appends an (offset, value) entry per in-range position to its
// destination block's list, then applies the lists block by block while the block sits in L2:
// - scatter (!Gather): fn(slot, value, stat_row) per entry, each slot's in increasing position;
// - gather: the entry's value becomes fn(slot, value, stat_row) (Reverse: rounds, lists and entries
//   walked backwards, so each slot's positions arrive in decreasing order, as in visit<true>), then
//   the un-partition writes out[p] for the round's positions in order.
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
  const index_t m = g.m, inner = g.inner, len = i1 - i0, rows = (o1 - o0) * g.n;
  if (len == 0) return true;
  if (rows == 0) {  // n == 0: every index is out of range
    if (Gather) zero_rows(g, o0, o1, i0, i1, out, zero);
    return o1 == o0;
  }
  const Blocks bl(rows, len, elem);
  const index_t round_rows = std::max<index_t>(1, tiles().round_entries / len);  // index rows per round
  const index_t total_rows = (o1 - o0) * m, rounds = std::max<index_t>(1, (total_rows + round_rows - 1) / round_rows);
  BlockLists<T> lists(bl.count, std::min(total_rows, round_rows) * len);
  HugeScratch block_of_mem(Gather ? std::min(total_rows, round_rows) * len * sizeof(uint16_t) : 1, /*zeroed=*/false);
  uint16_t* const block_of = block_of_mem.as<uint16_t>();
  bool ok = true;
  for (index_t rr = 0; rr < rounds; ++rr) {
    const index_t q0 = (Reverse ? rounds - 1 - rr : rr) * round_rows, q1 = std::min(total_rows, q0 + round_rows);
    lists.reset();
    ok &= partition<Gather>(idx, values, g, bl, o0, i0, q0, q1, lists, block_of);
    lists.finish();
    for (index_t b = 0; b < bl.count; ++b) {  // apply, block by block
      const index_t base = (o0 * g.n + (b << bl.shift)) * inner + i0, rbase = rb + (b << bl.shift);
      if (!Gather && rr == 0) hooks.begin(base, bl.rows_in(b), len, rbase);
      apply_block<Gather, Reverse>(lists, b, fn, [&](uint32_t off) {
        return std::pair<index_t, index_t>(base + bl.row_of(off) * inner + bl.column_of(off), rbase + bl.row_of(off));
      });
      if (!Gather && rr == rounds - 1) hooks.end(base, bl.rows_in(b), len, rbase);
    }
    if constexpr (Gather) unpartition(lists, block_of, g, len, o0, i0, q0, q1, out, zero);
  }
  return ok;
}

// The partitioned pass of a Plan::Columns plan split by index rows instead: a thread partitioning half
// the columns of each index row still reads whole lines of both halves (the hardware fetches the
// adjacent line), so here each thread partitions whole rows of its share of a round into its own lists,
// and then the threads apply blocks of all columns, each block's lists in thread order (so a slot's
// positions still arrive in increasing order; Reverse: all backwards). Stat rows, slots and hooks as in
// the column parts' bucket_part: a block's hooks run per column part, with that part's columns and
// stat rows.
template <bool Gather, bool Reverse, typename T, typename Idx, typename Fn, typename Hooks>
bool bucket_rows(const Idx* idx, const ValuesAt<T>& values, T* out, T zero, const Geometry& g, const Plan& plan,
                 index_t elem, const Fn& fn, const Hooks& hooks) {
  const index_t inner = g.inner, rows = g.outer * g.n, total_rows = g.outer * g.m, parts = plan.nblocks;
  const index_t cols = plan.block;  // a column part's columns; its stat rows are `rows`
  const int threads = plan.threads;
  if (rows == 0) {
    if (Gather) zero_rows(g, 0, g.outer, 0, inner, out, zero);
    return g.outer == 0;
  }
  const Blocks bl(rows, inner, elem);
  const index_t share = std::max<index_t>(1, tiles().round_entries / inner);  // index rows per thread and round
  const index_t round_rows = share * threads, rounds = std::max<index_t>(1, (total_rows + round_rows - 1) / round_rows);
  const index_t cap = std::min(total_rows, share);
  ScratchVector<std::unique_ptr<BlockLists<T>>> lists(threads);
  ScratchVector<std::unique_ptr<HugeScratch>> block_of(threads);
  for (int k = 0; k < threads; ++k) {
    lists[k].reset(new BlockLists<T>(bl.count, cap * inner));
    block_of[k].reset(new HugeScratch(Gather ? cap * inner * sizeof(uint16_t) : 1, /*zeroed=*/false));
  }
  auto parts_of_block = [&](index_t b, auto&& f) {  // f(first slot, columns, first stat row) per column part
    for (index_t c = 0; c < parts; ++c)
      f((b << bl.shift) * inner + c * cols, std::min(inner, (c + 1) * cols) - c * cols, c * rows + (b << bl.shift));
  };
  std::atomic<bool> ok{true};
  for (index_t rr = 0; rr < rounds; ++rr) {
    const index_t q0 = (Reverse ? rounds - 1 - rr : rr) * round_rows, q1 = std::min(total_rows, q0 + round_rows);
    auto rows_of = [&](index_t k, index_t* a, index_t* e) {
      *a = std::min(q1, q0 + k * share);
      *e = std::min(q1, *a + share);
    };
    dynamic_chunks(threads, threads, [&](index_t k) {
      index_t a, e;
      rows_of(k, &a, &e);
      lists[k]->reset();
      if (!partition<Gather>(idx, values, g, bl, 0, 0, a, e, *lists[k], block_of[k]->template as<uint16_t>()))
        ok.store(false, std::memory_order_relaxed);
      lists[k]->finish();
    });
    dynamic_chunks(bl.count, threads, [&](index_t b) {
      // Copies on this thread's stack, which stay in registers: read through the closure, each would be
      // reloaded after every byte store of mean's counts (a byte store may alias any memory).
      const Fn local_fn = fn;
      const Blocks blocks = bl;
      const index_t base = (b << bl.shift) * inner, row_base = b << bl.shift, width = inner, part_cols = cols,
                    stat_rows = rows;
      if (!Gather && rr == 0)
        parts_of_block(b, [&](index_t s, index_t len, index_t r) { hooks.begin(s, bl.rows_in(b), len, r); });
      for (int kk = 0; kk < threads; ++kk)
        apply_block<Gather, Reverse>(*lists[Reverse ? threads - 1 - kk : kk], b, local_fn, [&](uint32_t off) {
          const index_t col = blocks.column_of(off), row = blocks.row_of(off);
          return std::pair<index_t, index_t>(base + row * width + col, (col / part_cols) * stat_rows + row_base + row);
        });
      if (!Gather && rr == rounds - 1)
        parts_of_block(b, [&](index_t s, index_t len, index_t r) { hooks.end(s, bl.rows_in(b), len, r); });
    });
    if constexpr (Gather)
      dynamic_chunks(threads, threads, [&](index_t k) {
        index_t a, e;
        rows_of(k, &a, &e);
        unpartition(*lists[k], block_of[k]->template as<uint16_t>(), g, inner, 0, 0, a, e, out, zero);
      });
  }
  return ok.load();
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
      return bucket_rows<Gather, Reverse>(idx, values, out, zero, g, plan, elem, fn, hooks);
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
