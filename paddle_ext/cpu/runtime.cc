// C entry points for facts about the library's runtime, read from Python with ctypes
// (paddle_ext._library.num_threads and output_cache_bytes, `paddle-ext info`).
#include "paddle_ext/memory.h"
#include "paddle_ext/parallel.h"

extern "C" __attribute__((visibility("default"))) int paddle_ext_num_threads() { return paddle_ext::max_threads(); }
extern "C" __attribute__((visibility("default"))) size_t paddle_ext_output_cache_bytes() {
  return paddle_ext::BlockCache::instance().cached_bytes();
}
