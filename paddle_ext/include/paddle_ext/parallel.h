// Host-side parallel loop over [begin, end) in contiguous chunks, one per thread (OpenMP).
// Chunks are disjoint, so kernels that write only inside their chunk never race. An exception thrown in a
// chunk (OutOfMemory: memory.h) is rethrown on the calling thread once the region is over (RegionError).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#ifdef __linux__
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace paddle_ext {

// Positive leading integer of an OpenMP-style count ("4" or "4,2"), else 0.
inline int parse_thread_count(const char* s) {
  if (!s) return 0;
  char* end = nullptr;
  const long n = std::strtol(s, &end, 10);
  return end != s && n > 0 && n < 4096 ? static_cast<int>(n) : 0;
}

#ifdef __linux__
// OMP_NUM_THREADS as the process was started (/proc/self/environ), or 0 where it was unset.
inline int initial_omp_num_threads() {
  std::FILE* f = std::fopen("/proc/self/environ", "rb");
  if (!f) return 0;
  std::string env;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) env.append(buf, n);
  std::fclose(f);
  static const char kKey[] = "OMP_NUM_THREADS=";
  for (size_t at = 0; at < env.size();) {  // NUL-separated NAME=value entries
    if (env.compare(at, sizeof kKey - 1, kKey) == 0) return parse_thread_count(env.c_str() + at + sizeof kKey - 1);
    const size_t end = env.find('\0', at);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return 0;
}
#endif

// The thread count of our kernels, fixed at first use. Neither Paddle's OpenMP runtime nor the environment
// says what the user asked for: Paddle sets its runtime's count to FLAGS_paddle_num_threads (1) and, when
// OMP_NUM_THREADS is unset, writes 1 into it at import. So: PADDLE_EXT_NUM_THREADS; else OMP_NUM_THREADS as
// the process started, or as set before the import when it is not Paddle's "1"; else one per CPU this
// process may run on (what OpenMP itself would choose).
inline int detect_max_threads() {
  if (const int n = parse_thread_count(std::getenv("PADDLE_EXT_NUM_THREADS"))) return n;
  const char* now = std::getenv("OMP_NUM_THREADS");
#ifdef __linux__
  const int initial = initial_omp_num_threads();
  if (now && (initial > 0 || std::strcmp(now, "1") != 0)) {
    if (const int n = parse_thread_count(now)) return n;
  }
  if (initial > 0) return initial;
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 0) return CPU_COUNT(&cpus);
#else
  if (const int n = parse_thread_count(now)) return n;
#endif
#ifdef _OPENMP
  return omp_get_num_procs();
#else
  return 1;
#endif
}

inline int max_threads() {
#ifdef _OPENMP
  static const int n = detect_max_threads();
  return n;
#else
  return 1;
#endif
}

#ifdef _OPENMP
// Intel/LLVM OpenMP extensions (absent from libgomp: then null, and ShortSpin does nothing).
extern "C" int kmp_get_blocktime() __attribute__((weak));
extern "C" void kmp_set_blocktime(int msec) __attribute__((weak));
#endif

// Held around each of our parallel regions: its workers wait for the next region spinning for at most 1 ms
// (about libgomp's default), then sleep. Paddle's runtime (libiomp5) spins for 200 ms by default, which
// after every op call would burn a core the rest of the user's pipeline may need. The setting is the
// calling thread's and is restored at once, so Paddle's own regions keep theirs.
class ShortSpin {
 public:
  ShortSpin() {
#ifdef _OPENMP
    if (kmp_get_blocktime && kmp_set_blocktime) {
      saved_ = kmp_get_blocktime();
      if (saved_ > kSpinMs) kmp_set_blocktime(kSpinMs);
    }
#endif
  }
  ~ShortSpin() {
#ifdef _OPENMP
    if (saved_ > kSpinMs) kmp_set_blocktime(saved_);
#endif
  }
  ShortSpin(const ShortSpin&) = delete;
  ShortSpin& operator=(const ShortSpin&) = delete;

 private:
  static constexpr int kSpinMs = 1;
  int saved_ = -1;
};

// An exception must not leave an OpenMP region (the runtime would call std::terminate): run() catches each
// thread's, the first is kept (the others' work is skipped where it can be: failed()), and rethrow() raises
// it on the calling thread after the region.
class RegionError {
 public:
  template <typename Fn>
  void run(const Fn& fn) noexcept {
    try {
      fn();
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
  bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// Threads worth using for n items when `grain` is the smallest amount of work worth a thread.
inline int64_t threads_for(int64_t n, int64_t grain) {
  return std::min<int64_t>(max_threads(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
}

// The threads worth using for [begin, end) at `grain`, or 0 after running fn(begin, end) itself where one
// thread does (or the range is empty).
template <typename Fn>
int64_t threads_or_run(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return 0;
  const int64_t threads = threads_for(n, grain);
  if (threads > 1) return threads;
  fn(begin, end);
  return 0;
}

// fn(chunk_begin, chunk_end). `grain` is the smallest amount of work worth a thread.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t threads = threads_or_run(begin, end, grain, fn);
  if (threads == 0) return;
#ifdef _OPENMP
  const ShortSpin spin;
  RegionError error;
#pragma omp parallel num_threads((int)threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = (end - begin + nt - 1) / nt;
    const int64_t b = begin + t * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) error.run([&] { fn(b, e); });
  }
  error.rethrow();
#else
  fn(begin, end);
#endif
}

// fn(b, e) for the blocks [begin + k * block, ...) of [begin, end), handed out in turn to `threads` threads
// by a counter, so a thread that the OS descheduled (the machines here are shared) does not hold up the
// call. (A counter, not schedule(dynamic): GCC lowers that to GOMP 4.5 entry points that the OpenMP runtime
// Paddle ships, which we run on, lacks.)
template <typename Fn>
void parallel_blocks(int64_t begin, int64_t end, int64_t block, int threads, const Fn& fn) {
  if (end <= begin) return;
#ifdef _OPENMP
  if (threads > 1 && end - begin > block) {
    std::atomic<int64_t> next{begin};
    const ShortSpin spin;
    RegionError error;
#pragma omp parallel num_threads(threads)
    error.run([&] {
      for (int64_t b = next.fetch_add(block); b < end && !error.failed(); b = next.fetch_add(block))
        fn(b, std::min(end, b + block));
    });
    error.rethrow();
    return;
  }
#endif
  for (int64_t b = begin; b < end; b += block) fn(b, std::min(end, b + block));
}

// Like parallel_for, but the threads take blocks of about (end - begin) / (16 threads) in turn
// (parallel_blocks): fn only ever sees disjoint [b, e) ranges, in no particular order.
template <typename Fn>
void parallel_for_dynamic(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
  const int64_t threads = threads_or_run(begin, end, grain, fn);
  if (threads == 0) return;
  parallel_blocks(begin, end, std::max<int64_t>(1, (end - begin) / (16 * threads)), static_cast<int>(threads), fn);
}

// Fault in a freshly allocated output before a kernel writes all of it. Allocations over 32 MiB are a
// fresh mmap per call where they do not come from BlockCache (memory.h), and smaller ones land on fresh pages whenever glibc has trimmed its heap (e.g.
// after another library freed a big block); first-touch faults cost ~1.2-1.5 us per 4 KiB page on this
// machine type, and madvise(MADV_POPULATE_WRITE), split over the threads, faults the same pages in
// ~60% of the time. Memory that is already resident (a reused allocation: its first page is) is left
// alone, and on a kernel without MADV_POPULATE_WRITE (< 5.14) this does nothing.
inline void populate_for_write(void* data, size_t bytes) {
#ifdef __linux__
  constexpr size_t kMinBytes = size_t{1} << 20;
  constexpr uintptr_t kBlock = uintptr_t{2} << 20;  // the unit of work per thread
  if (bytes < kMinBytes) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (hi <= lo) return;
  unsigned char resident = 0;
  if (mincore(reinterpret_cast<void*>(lo), page, &resident) != 0 || (resident & 1)) return;
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  // 2 MiB-aligned blocks, so that no huge page is split between two threads
  const int64_t first = static_cast<int64_t>(lo / kBlock), last = static_cast<int64_t>((hi - 1) / kBlock);
  parallel_for(first, last + 1, 1, [&](int64_t b0, int64_t b1) {
    const uintptr_t p0 = std::max(lo, static_cast<uintptr_t>(b0) * kBlock);
    const uintptr_t p1 = std::min(hi, static_cast<uintptr_t>(b1) * kBlock);
    madvise(reinterpret_cast<void*>(p0), p1 - p0, MADV_POPULATE_WRITE);
  });
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace paddle_ext
