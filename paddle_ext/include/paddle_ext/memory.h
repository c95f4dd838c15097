// Big CPU buffers: BlockCache keeps large blocks mapped between calls (op outputs, binding/common.h's
// new_output, and put_along_axis's partition scratch); HugeScratch is kernel scratch on transparent huge
// pages; advise_huge asks for huge pages under a large output.
//
// Why a cache: Paddle's CPU allocator gets every block over glibc's mmap threshold (32 MiB) from a fresh
// mmap and unmaps it when freed, so an op called in a training loop would first-touch fault its large
// outputs in on every call (a page fault per 4 KiB). Huge pages cut the fault count, but on a VM with free
// page reporting a 2 MiB block that stayed free a moment has gone back to the host and costs more to fault
// in again than the 4 KiB pages it replaced.
//
// So big outputs come from this cache instead: a block the op library handed out and got back is kept,
// mapped and resident, for the next output of about its size (best fit within 1.5x). What it holds is
// bounded: PADDLE_EXT_OUTPUT_CACHE_MB (default 2048; 0 turns the cache off), the oldest blocks unmapped
// first, and blocks idle for kIdleSeconds unmapped at the next call that uses the cache. A kept block is
// marked MADV_FREE, so under memory pressure the kernel may take its pages back (a later reuse then
// faults them in again, as a fresh block would).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace paddle_ext {

class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{32} << 20;  // smaller blocks: glibc's heap reuses them already
  static constexpr size_t kGranule = size_t{2} << 20;
  static constexpr double kIdleSeconds = 10.0;

  // The process's cache; never destroyed (outputs may be freed during static destruction).
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache(limit_from_env());
    return *cache;
  }

  bool enabled() const { return limit_ > 0; }

  // A block of at least `bytes` (a cached one, else a fresh mapping), its size in *capacity; nullptr when
  // the cache is off or no mapping could be made (the caller allocates as usual).
  void* take(size_t bytes, size_t* capacity) {
#ifdef __linux__
    if (!enabled() || bytes < kMinBytes) return nullptr;
    const size_t want = (bytes + kGranule - 1) / kGranule * kGranule;
    std::vector<Block> idle;
    void* found = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = take_idle_locked(Clock::now());
      size_t best = blocks_.size();
      for (size_t i = 0; i < blocks_.size(); ++i) {
        const size_t cap = blocks_[i].capacity;
        if (cap >= want && cap - want <= want / 2 && (best == blocks_.size() || cap < blocks_[best].capacity)) best = i;
      }
      if (best < blocks_.size()) {
        found = blocks_[best].data;
        *capacity = blocks_[best].capacity;
        cached_ -= *capacity;
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(best));
      }
    }
    unmap(idle);
    if (found) return found;
    void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    *capacity = want;
    return p;
#else
    (void)bytes;
    (void)capacity;
    return nullptr;
#endif
  }

  // Give back a block from take(): kept for reuse within the limit, else unmapped.
  void give(void* data, size_t capacity) {
#ifdef __linux__
    std::vector<Block> out;
    if (capacity > limit_) {
      out.push_back({data, capacity, Clock::now()});
    } else {
      madvise(data, capacity, MADV_FREE);
      std::lock_guard<std::mutex> lock(mu_);
      out = take_idle_locked(Clock::now());
      blocks_.push_back({data, capacity, Clock::now()});
      cached_ += capacity;
      while (cached_ > limit_) {  // the oldest first
        out.push_back(blocks_.front());
        cached_ -= blocks_.front().capacity;
        blocks_.erase(blocks_.begin());
      }
    }
    unmap(out);
#else
    (void)data;
    (void)capacity;
#endif
  }

  // Bytes held now (tests, `paddle-ext info`).
  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Block {
    void* data;
    size_t capacity;
    Clock::time_point since;
  };

  explicit BlockCache(size_t limit) : limit_(limit) {}

  static size_t limit_from_env() {
    const char* s = std::getenv("PADDLE_EXT_OUTPUT_CACHE_MB");
    if (!s || !*s) return size_t{2048} << 20;  // holds a large put_along_axis forward + backward's buffers
    char* end = nullptr;
    const long long mb = std::strtoll(s, &end, 10);
    return end != s && mb > 0 ? static_cast<size_t>(mb) << 20 : 0;
  }

  std::vector<Block> take_idle_locked(Clock::time_point now) {
    std::vector<Block> idle;
    for (size_t i = 0; i < blocks_.size();) {
      if (std::chrono::duration<double>(now - blocks_[i].since).count() > kIdleSeconds) {
        idle.push_back(blocks_[i]);
        cached_ -= blocks_[i].capacity;
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    return idle;
  }

  static void unmap(const std::vector<Block>& blocks) {
#ifdef __linux__
    for (const Block& b : blocks) munmap(b.data, b.capacity);
#else
    (void)blocks;
#endif
  }

  const size_t limit_;
  std::mutex mu_;
  std::vector<Block> blocks_;  // oldest first
  size_t cached_ = 0;
};

// Kernel scratch; from 4 MiB on, its own mapping on transparent huge pages where the kernel offers them
// (madvise mode): a fresh 4 KiB-page buffer of hundreds of MiB costs more in page faults than a pass over
// it, and random accesses into it miss the TLB. Zeroed (fresh zero pages, faulted in where touched) unless
// `zeroed` is false: then a block of 32 MiB or more comes from BlockCache, resident from an earlier call
// (a fresh mapping's huge pages may have gone back to the VM host during a pause between calls).
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

}  // namespace paddle_ext
