// Kernel memory. The rule: scratch that kernel code allocates comes from the checked helpers here
// (scratch_array, ScratchVector, HugeScratch) or from the caller (Paddle tensors); never from a bare
// new / std::vector / malloc. A failure throws OutOfMemory with the bytes asked for, which the binding
// reports as a Python MemoryError naming the op (binding/common.h, Guarded); parallel regions carry it out
// to the calling thread (parallel.h).
//
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
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace paddle_ext {

// Kernel scratch that could not be allocated: `bytes` asked for. A std::bad_alloc, so that code catching
// that catches it too.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(size_t bytes) noexcept : bytes_(bytes) {}
  size_t bytes() const noexcept { return bytes_; }
  const char* what() const noexcept override { return "paddle_ext: out of memory"; }

 private:
  size_t bytes_;
};

// The one checked allocation: count * size bytes from malloc, or from calloc where `zeroed` (a large block
// is then fresh zero pages, faulted in where touched); OutOfMemory where there is no memory. Freed with free().
inline void* scratch_alloc(size_t count, size_t size, bool zeroed) {
  if (size != 0 && count > SIZE_MAX / size) throw OutOfMemory(SIZE_MAX);
  const size_t bytes = std::max<size_t>(count * size, 1);
  void* p = zeroed ? std::calloc(bytes, 1) : std::malloc(bytes);
  if (!p) throw OutOfMemory(bytes);
  return p;
}

struct FreeScratch {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <typename T>
using ScratchArray = std::unique_ptr<T[], FreeScratch>;

// n elements (at least one) of a trivial type: zeroed, or left as they come (as `new T[n]`).
template <typename T>
ScratchArray<T> scratch_array(size_t n, bool zeroed) {
  static_assert(std::is_trivial<T>::value && alignof(T) <= alignof(std::max_align_t), "raw scratch of a plain type");
  return ScratchArray<T>(static_cast<T*>(scratch_alloc(std::max<size_t>(n, 1), sizeof(T), zeroed)));
}

// std::vector's allocator for kernel scratch: scratch_alloc's check (elements constructed as std::vector's).
template <typename T>
struct ScratchAllocator {
  using value_type = T;
  static_assert(alignof(T) <= alignof(std::max_align_t), "malloc's alignment");
  ScratchAllocator() noexcept = default;
  template <typename U>
  ScratchAllocator(const ScratchAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(scratch_alloc(n, sizeof(T), false)); }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <typename U>
  bool operator==(const ScratchAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const ScratchAllocator<U>&) const noexcept { return false; }
};
template <typename T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{32} << 20;  // smaller blocks: glibc's heap reuses them already
  // GEMM outputs and scratch (the adaptive softmax's projections) are cached from this size on: written whole
  // at compute speed, a 16-32 MiB one that glibc's heap returned to the system between calls costs as much in
  // page faults as the product itself.
  static constexpr size_t kGemmMinBytes = size_t{4} << 20;
  static constexpr size_t kGranule = size_t{2} << 20;
  static constexpr double kIdleSeconds = 10.0;

  // The process's cache; never destroyed (outputs may be freed during static destruction).
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache(limit_from_env());
    return *cache;
  }

  bool enabled() const { return limit_ > 0; }

  // A block of at least `bytes` (a cached one, else a fresh mapping), its size in *capacity; nullptr when
  // the cache is off, `bytes` is under `min_bytes`, or no mapping could be made (the caller allocates as usual).
  void* take(size_t bytes, size_t* capacity, size_t min_bytes = kMinBytes) noexcept {
#ifdef __linux__
    if (!enabled() || bytes < min_bytes) return nullptr;
    const size_t want = (bytes + kGranule - 1) / kGranule * kGranule;
    std::vector<Block> idle;
    if (!reserve(idle)) return nullptr;
    void* found = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      take_idle_locked(Clock::now(), idle);
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
    void* p = map(want);
    if (p) *capacity = want;
    return p;
#else
    (void)bytes;
    (void)capacity;
    (void)min_bytes;
    return nullptr;
#endif
  }

  // Give back a block from take(): kept for reuse within the limit, else unmapped. Never throws (it runs in
  // the deleters of outputs and in HugeScratch's destructor): the lists it fills have their room before
  // the lock is taken.
  void give(void* data, size_t capacity) noexcept {
#ifdef __linux__
    std::vector<Block> out;
    if (capacity > limit_ || !reserve(out)) {
      munmap(data, capacity);
      return;
    }
    madvise(data, capacity, MADV_FREE);
    {
      std::lock_guard<std::mutex> lock(mu_);
      take_idle_locked(Clock::now(), out);
      blocks_.push_back({data, capacity, Clock::now()});
      cached_ += capacity;
      while (cached_ > limit_ || blocks_.size() > max_blocks()) {  // the oldest first
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

#ifdef __linux__
  // A fresh anonymous mapping of `bytes`. Where none can be made, the cached blocks are unmapped (the address
  // space they hold may be what is missing) and it is tried once more; nullptr where that fails too.
  void* map(size_t bytes) noexcept {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      drop();
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    return p == MAP_FAILED ? nullptr : p;
  }
#endif

  // Unmaps every cached block.
  void drop() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    unmap(blocks_);
    blocks_.clear();
    cached_ = 0;
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

  explicit BlockCache(size_t limit) : limit_(limit) { blocks_.reserve(max_blocks() + 1); }

  // The most blocks kept: each has kMinBytes or more, and a count bound keeps the lists small whatever the
  // limit. blocks_ has room for one more (give() adds before it evicts), and so has each list of blocks
  // taken out of it (reserve()): the bookkeeping under the lock never allocates.
  size_t max_blocks() const { return std::min<size_t>(limit_ / kMinBytes, 512); }
  bool reserve(std::vector<Block>& list) const noexcept {
    try {
      list.reserve(max_blocks() + 1);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  }

  static size_t limit_from_env() {
    const char* s = std::getenv("PADDLE_EXT_OUTPUT_CACHE_MB");
    if (!s || !*s) return size_t{2048} << 20;  // holds a large put_along_axis forward + backward's buffers
    char* end = nullptr;
    const long long mb = std::strtoll(s, &end, 10);
    return end != s && mb > 0 ? static_cast<size_t>(mb) << 20 : 0;
  }

  // Moves the blocks idle for kIdleSeconds into `idle` (reserved: no allocation).
  void take_idle_locked(Clock::time_point now, std::vector<Block>& idle) {
    for (size_t i = 0; i < blocks_.size();) {
      if (std::chrono::duration<double>(now - blocks_[i].since).count() > kIdleSeconds) {
        idle.push_back(blocks_[i]);
        cached_ -= blocks_[i].capacity;
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  static void unmap(const std::vector<Block>& blocks) noexcept {
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
// `zeroed` is false: then a block of `cache_from` bytes (32 MiB) or more comes from BlockCache, resident from an
// earlier call (a fresh mapping's huge pages may have gone back to the VM host during a pause between calls).
// Throws OutOfMemory where there is no memory.
class HugeScratch {
 public:
  explicit HugeScratch(size_t bytes, bool zeroed = true, size_t cache_from = BlockCache::kMinBytes)
      : bytes_(std::max<size_t>(bytes, 1)) {
#ifdef __linux__
    if (!zeroed && (ptr_ = BlockCache::instance().take(bytes_, &cached_, cache_from))) {
      madvise(ptr_, cached_, MADV_HUGEPAGE);  // a fresh block: huge pages from its first touch on
      return;
    }
    mapped_ = bytes_ >= (size_t(4) << 20);
    if (mapped_) {
      ptr_ = BlockCache::instance().map(bytes_);
      if (!ptr_) throw OutOfMemory(bytes_);
      madvise(ptr_, bytes_, MADV_HUGEPAGE);
      return;
    }
#else
    (void)zeroed;
    (void)cache_from;
#endif
    ptr_ = scratch_alloc(bytes_, 1, true);
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
