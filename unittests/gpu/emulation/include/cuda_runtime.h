// The CUDA subset the kernels and the GPU suite's shims use, executed on the CPU (see
// docs/gpu_emulation.md): each block runs on one OS thread, its threads as fibers (glibc's ucontext) that
// switch at __syncthreads, at warp-synchronous intrinsics (which wait for the lanes of their own warp
// only) and at spin-wait yields. Blocks run one after another, so __shared__ variables are function statics
// (emulate.py registers each with shared_var, which poisons it for every block). Device memory is host memory;
// streams execute at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>  // before __noinline__ is defined: libstdc++ spells the attribute so
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static
// A spin-wait's body: lets the other fibers of the block run (compiles to nothing under nvcc).
#define PE_SPIN_YIELD() ::pe_emu::spin_yield()

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) double2 {
  double x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorIllegalInstruction = 715,
};
using cudaError = cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMultiProcessorCount = 16 };
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t);
cudaError_t cudaFree(void* p);
cudaError_t cudaFreeAsync(void* p, cudaStream_t);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);

namespace pe_emu {

constexpr int kWarpSize = 32;
constexpr int kMultiProcessors = 8;
constexpr int kMaxThreadsPerMultiProcessor = 2048;

// The running fiber's thread and its block.
struct Thread {
  uint3 idx;
  int linear, lane, warp;
};
struct Block {
  uint3 idx;
  dim3 dim, grid;
};
extern Thread* current_thread;
extern Block current_block;

// Warp-synchronous exchange: every lane of `mask` that has not exited must arrive with the same kind and mask;
// each lane deposits `value` (up to 16 bytes) and gets back the value of lane `src` (shuffles) or the ballot
// of the participating lanes' `pred` (votes, __syncwarp).
enum WarpOp { kShfl, kVote, kSyncWarp };
struct WarpResult {
  unsigned char bytes[16];
  unsigned ballot, participants;
};
WarpResult warp_exchange(WarpOp op, unsigned mask, const void* value, int size, int src, int pred, const char* what,
                         const char* file, int line);
// Block barrier with a predicate: returns the number of threads whose predicate was non-zero.
int block_barrier(int pred, const char* file, int line);
void spin_yield();
// A __shared__ variable reached by a thread: the first thread of a block to reach it sets all its bits (CUDA's
// shared memory starts undefined; stale values of the previous block must not pass for results).
void shared_var(void* p, size_t bytes, const char* name, const char* file = __builtin_FILE(), int line = __builtin_LINE());
// Stops the launch with an error (the shims' next synchronize returns it); never returns inside a kernel.
[[noreturn]] void kernel_fault(cudaError_t code, const char* message);

using Thunk = void (*)(void* closure);
cudaError_t launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, Thunk thunk, void* closure);

template <typename T>
inline T shfl(const char* what, unsigned mask, T v, int src, const char* file, int line) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable<T>::value, "shuffle of an unsupported type");
  const WarpResult r = warp_exchange(kShfl, mask, &v, sizeof(T), src, 0, what, file, line);
  T out;
  std::memcpy(&out, r.bytes, sizeof(T));
  return out;
}
inline int segment_base(int width) { return current_thread->lane & ~(width - 1); }

// A launch: the arguments evaluated once (as the host does), then `call` (which calls the kernel with them, so
// that a kernel template deduces its parameters as under nvcc) run by every thread of every block.
template <typename F, typename... A>
struct Closure {
  F call;
  std::tuple<A...> args;
  static void run(void* self) {
    auto* c = static_cast<Closure*>(self);
    std::apply(c->call, c->args);
  }
};
struct Config {
  dim3 grid, block;
  size_t shared_bytes;
};
inline Config config(dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t = nullptr) {
  return {grid, block, shared_bytes};
}
template <typename F, typename... A>
inline void launch_kernel(const char* name, Config cfg, F call, A&&... args) {
  Closure<F, std::decay_t<A>...> closure{call, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
  launch(name, cfg.grid, cfg.block, cfg.shared_bytes, &Closure<F, std::decay_t<A>...>::run, &closure);
}

}  // namespace pe_emu

#define threadIdx (::pe_emu::current_thread->idx)
#define blockIdx (::pe_emu::current_block.idx)
#define blockDim (::pe_emu::current_block.dim)
#define gridDim (::pe_emu::current_block.grid)
#define warpSize 32

#define PE_EMU_HERE const char *file = __builtin_FILE(), int line = __builtin_LINE()

inline void __syncthreads(PE_EMU_HERE) { ::pe_emu::block_barrier(0, file, line); }
inline int __syncthreads_count(int pred, PE_EMU_HERE) { return ::pe_emu::block_barrier(pred != 0, file, line); }
inline int __syncthreads_or(int pred, PE_EMU_HERE) { return ::pe_emu::block_barrier(pred != 0, file, line) != 0; }
inline int __syncthreads_and(int pred, PE_EMU_HERE) {
  return ::pe_emu::block_barrier(pred != 0, file, line) == (int)(blockDim.x * blockDim.y * blockDim.z);
}
// Each fiber runs uninterrupted between switches, so fences order nothing more than program order does.
inline void __threadfence() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

inline void __syncwarp(unsigned mask = 0xffffffffu, PE_EMU_HERE) {
  ::pe_emu::warp_exchange(::pe_emu::kSyncWarp, mask, nullptr, 0, 0, 0, "__syncwarp", file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, PE_EMU_HERE) {
  return ::pe_emu::warp_exchange(::pe_emu::kVote, mask, nullptr, 0, 0, pred != 0, "__ballot_sync", file, line).ballot;
}
inline int __any_sync(unsigned mask, int pred, PE_EMU_HERE) {
  return ::pe_emu::warp_exchange(::pe_emu::kVote, mask, nullptr, 0, 0, pred != 0, "__any_sync", file, line).ballot != 0;
}
inline int __all_sync(unsigned mask, int pred, PE_EMU_HERE) {
  const auto r = ::pe_emu::warp_exchange(::pe_emu::kVote, mask, nullptr, 0, 0, pred != 0, "__all_sync", file, line);
  return r.ballot == r.participants;
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, PE_EMU_HERE) {
  return ::pe_emu::shfl("__shfl_sync", mask, v, ::pe_emu::segment_base(width) + (src & (width - 1)), file, line);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, PE_EMU_HERE) {
  const int lane = ::pe_emu::current_thread->lane, base = ::pe_emu::segment_base(width);
  return ::pe_emu::shfl("__shfl_up_sync", mask, v, lane - base >= (int)delta ? lane - (int)delta : lane, file, line);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, PE_EMU_HERE) {
  const int lane = ::pe_emu::current_thread->lane, base = ::pe_emu::segment_base(width);
  return ::pe_emu::shfl("__shfl_down_sync", mask, v, lane - base + (int)delta < width ? lane + (int)delta : lane, file,
                        line);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, PE_EMU_HERE) {
  const int lane = ::pe_emu::current_thread->lane, src = lane ^ lane_mask;
  // A lane of a later segment is out of reach: the caller keeps its own value.
  return ::pe_emu::shfl("__shfl_xor_sync", mask, v, src >= ::pe_emu::segment_base(width) + width ? lane : src, file,
                        line);
}

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline long long __double_as_longlong(double d) {
  long long v;
  std::memcpy(&v, &d, 8);
  return v;
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline int __float_as_int(float f) {
  int v;
  std::memcpy(&v, &f, 4);
  return v;
}
inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline unsigned __float_as_uint(float f) { return (unsigned)__float_as_int(f); }
inline float __uint_as_float(unsigned v) { return __int_as_float((int)v); }

// CUDA's global min/max of integers and floats.
#define PE_EMU_MINMAX(T)                          \
  inline T max(T a, T b) { return a < b ? b : a; } \
  inline T min(T a, T b) { return b < a ? b : a; }
PE_EMU_MINMAX(int)
PE_EMU_MINMAX(unsigned)
PE_EMU_MINMAX(long)
PE_EMU_MINMAX(unsigned long)
PE_EMU_MINMAX(long long)
PE_EMU_MINMAX(unsigned long long)
#undef PE_EMU_MINMAX

// Atomics: a fiber is never switched out inside one, so a plain read-modify-write is atomic here. Not
// instrumented by the shared-memory race check (they are the sanctioned way to share a word).
#define PE_EMU_ATOMIC(NAME, NEW)                                     \
  template <typename T, typename U>                                  \
  __attribute__((no_sanitize_thread)) inline T NAME(T* p, U operand) { \
    const T old = *p, v = static_cast<T>(operand);                   \
    *p = NEW;                                                        \
    return old;                                                      \
  }
PE_EMU_ATOMIC(atomicAdd, old + v)
PE_EMU_ATOMIC(atomicSub, old - v)
PE_EMU_ATOMIC(atomicMax, old < v ? v : old)
PE_EMU_ATOMIC(atomicMin, v < old ? v : old)
PE_EMU_ATOMIC(atomicOr, old | v)
PE_EMU_ATOMIC(atomicAnd, old & v)
PE_EMU_ATOMIC(atomicExch, v)
#undef PE_EMU_ATOMIC
template <typename T, typename U, typename V>
__attribute__((no_sanitize_thread)) inline T atomicCAS(T* p, U compare, V v) {
  const T old = *p;
  if (old == static_cast<T>(compare)) *p = static_cast<T>(v);
  return old;
}

// Launch configuration queries: a fixed device of kMultiProcessors.
template <typename Kernel>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int block_size, size_t) {
  *blocks = block_size > 0 ? std::max(1, std::min(32, pe_emu::kMaxThreadsPerMultiProcessor / block_size)) : 0;
  return block_size > 0 && block_size <= 1024 ? cudaSuccess : cudaErrorInvalidValue;
}
