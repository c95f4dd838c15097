// C entry points for facts about the library's runtime, read from Python with ctypes
// (paddle_ext._library.num_threads, `paddle-ext info`).
#include "paddle_ext/parallel.h"

extern "C" __attribute__((visibility("default"))) int paddle_ext_num_threads() { return paddle_ext::max_threads(); }
