// The host-side driver for scans along one axis of a tensor viewed as [outer, n, inner].
// Each (outer, inner) line is scanned in order (or reversed); lines are independent, so they are
// split across threads. For a strided axis (inner > 1) a block of neighbouring lines is advanced
// together so that every step reads contiguous memory.
#pragma once

#include <algorithm>
#include <vector>

#include "paddle_ext/common.h"
#include "paddle_ext/parallel.h"

namespace paddle_ext {

// step(state, offset) is called for each element of a line in scan order; offset is the flat index.
template <typename State, typename Step>
void scan_lines(index_t outer, index_t n, index_t inner, bool reverse, const State& init,
                const Step& step) {
  if (outer == 0 || n == 0 || inner == 0) return;
  constexpr index_t kBlock = 64;
  const index_t blocks_per_outer = (inner + kBlock - 1) / kBlock;
  const index_t tasks = outer * blocks_per_outer;
  const index_t work_per_task = n * std::min(inner, kBlock);
  const index_t grain = std::max<index_t>(1, (1 << 15) / std::max<index_t>(work_per_task, 1));
  parallel_for(0, tasks, grain, [&](index_t t0, index_t t1) {
    std::vector<State> states(std::min(inner, kBlock));
    for (index_t t = t0; t < t1; ++t) {
      const index_t o = t / blocks_per_outer;
      const index_t c0 = (t % blocks_per_outer) * kBlock;
      const index_t c1 = std::min(inner, c0 + kBlock);
      std::fill(states.begin(), states.begin() + (c1 - c0), init);
      const index_t base = o * n * inner;
      for (index_t s = 0; s < n; ++s) {
        const index_t k = reverse ? n - 1 - s : s;
        const index_t row = base + k * inner;
        for (index_t c = c0; c < c1; ++c) step(states[c - c0], row + c);
      }
    }
  });
}

}  // namespace paddle_ext
