// Host-side parallel loop over [begin, end) in contiguous chunks, one per thread (OpenMP).
// Chunks are disjoint, so kernels that write only inside their chunk never race.
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace paddle_ext {

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// fn(chunk_begin, chunk_end). `grain` is the smallest amount of work worth a thread.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(max_threads(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads((int)threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = begin + t * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  }
#else
  fn(begin, end);
#endif
}

}  // namespace paddle_ext
