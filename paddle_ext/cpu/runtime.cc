// C entry points for facts about the library's runtime, read from Python with ctypes
// (paddle_ext._library.num_threads and output_cache_bytes, `paddle-ext info`), and the start of the kernels'
// threads under an address-space cap (_library.load).
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

#ifdef __linux__
#include <sys/resource.h>
#endif

extern "C" __attribute__((visibility("default"))) int paddle_ext_num_threads() { return paddle_ext::max_threads(); }
extern "C" __attribute__((visibility("default"))) size_t paddle_ext_output_cache_bytes() {
  return paddle_ext::BlockCache::instance().cached_bytes();
}

// Where the process's address space is capped (RLIMIT_AS, `ulimit -v`), starts the kernels' OpenMP threads now,
// at import, and returns their count (else 0, and they start at the first parallel region as usual). The
// OpenMP runtime aborts the process when it cannot start a thread (no exception to catch), and under a cap
// the first parallel region may come when the address space is nearly used up; the threads it starts here
// are reused by every later region.
extern "C" __attribute__((visibility("default"))) int paddle_ext_start_threads_if_capped() {
#ifdef __linux__
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  const int threads = paddle_ext::max_threads();
  paddle_ext::parallel_for(0, threads, 1, [](int64_t, int64_t) {});
  return threads;
#else
  return 0;
#endif
}
