// Kernels with a planted bug next to their correct twin, for test_emulation_gpu.py: each entry point launches
// one (`bug` = 0: correct, 1: planted) and returns what the next synchronize reports. Emulated runtime only
// (device memory is host memory, so the pointers are the caller's arrays).
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

namespace {

constexpr int kBlock = 256;

// Hillis-Steele inclusive scan of one block; the planted bug drops the barrier between reading a
// neighbour's partial sum and overwriting one's own.
__global__ void hillis_steele_scan_kernel(const int* in, int* out, int bug) {
  __shared__ int buf[kBlock];
  const int t = threadIdx.x;
  buf[t] = in[t];
  __syncthreads();
  for (int offset = 1; offset < kBlock; offset *= 2) {
    const int v = t >= offset ? buf[t - offset] : 0;
    if (!bug) __syncthreads();
    buf[t] += v;
    __syncthreads();
  }
  out[t] = buf[t];
}

// Two cub block scans on one temp storage; the planted bug leaves out the barrier cub asks for between them.
__global__ void cub_scan_twice_kernel(const int* in, int* out, int bug) {
  using Scan = cub::BlockScan<int, kBlock>;
  __shared__ typename Scan::TempStorage temp;
  int v = in[threadIdx.x], total;
  Scan(temp).InclusiveSum(v, v, total);
  if (!bug) __syncthreads();
  Scan(temp).ExclusiveSum(v, v, total);
  out[threadIdx.x] = v;
}

// A warp sum by butterfly shuffles; bug 1 gives the shuffles a mask of half the warp (which leaves out
// the lanes 16..31 that call them), bug 2 lets only the lower half shuffle with a full mask, reading lanes that
// have returned.
__global__ void warp_sum_kernel(const int* in, int* out, int bug) {
  const int lane = threadIdx.x % 32;
  int v = in[threadIdx.x];
  if (bug == 2 && lane >= 16) return;
  const unsigned mask = bug == 1 ? 0x0000ffffu : 0xffffffffu;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o);
  out[threadIdx.x] = v;
}

// Lanes of one warp split between a shuffle and a block barrier: neither can complete.
__global__ void divergent_barrier_kernel(const int* in, int* out, int bug) {
  int v = in[threadIdx.x];
  if (!bug || threadIdx.x % 32 < 16) v = __shfl_sync(0xffffffffu, v, 0);
  __syncthreads();
  out[threadIdx.x] = v;
}

// A block-wide table of 64 entries indexed by thread: the planted launch has one thread more than entries.
__global__ void shared_table_kernel(const int* in, int* out, int) {
  __shared__ int table[64];
  table[threadIdx.x] = in[threadIdx.x] * 2;
  __syncthreads();
  out[threadIdx.x] = table[(threadIdx.x + 1) % blockDim.x];
}

// Thread 0 waits for a flag that thread 32 sets (bug: never).
__global__ void spin_kernel(const int* in, int* out, int bug) {
  __shared__ int flag;
  if (threadIdx.x == 32) *(volatile int*)&flag = bug ? 0 : 1;
  if (threadIdx.x == 0) {
    while (*(volatile int*)&flag != 1) PE_SPIN_YIELD();
    out[0] = in[0];
  }
}

// Threads that find a negative value set a block-wide flag, read after a barrier. Stores of one value by several
// warps leave the same flag in any order (no race); the planted bug stores each warp's index, so the value read
// depends on which warp stored last.
__global__ void shared_flag_kernel(const int* in, int* out, int bug) {
  __shared__ int flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  if (in[threadIdx.x] < 0) flag = bug ? 1 + (int)threadIdx.x / 32 : 1;
  __syncthreads();
  out[threadIdx.x] = flag;
}

template <typename Kernel>
int run(Kernel kernel, unsigned threads, const int* in, int* out, int bug) {
  kernel<<<1, threads>>>(in, out, bug);
  const cudaError_t launch = cudaGetLastError();
  return launch != cudaSuccess ? (int)launch : (int)cudaDeviceSynchronize();
}

}  // namespace

extern "C" {
int pe_planted_hillis_steele_scan(const int* in, int* out, int bug) {
  return run(hillis_steele_scan_kernel, kBlock, in, out, bug);
}
int pe_planted_cub_scan_twice(const int* in, int* out, int bug) { return run(cub_scan_twice_kernel, kBlock, in, out, bug); }
int pe_planted_warp_sum(const int* in, int* out, int bug) { return run(warp_sum_kernel, 64, in, out, bug); }
int pe_planted_divergent_barrier(const int* in, int* out, int bug) {
  return run(divergent_barrier_kernel, 64, in, out, bug);
}
int pe_planted_shared_table(const int* in, int* out, int bug) { return run(shared_table_kernel, bug ? 65 : 64, in, out, bug); }
int pe_planted_spin(const int* in, int* out, int bug) { return run(spin_kernel, 64, in, out, bug); }
int pe_planted_shared_flag(const int* in, int* out, int bug) { return run(shared_flag_kernel, kBlock, in, out, bug); }
// A launch after a faulting one, before any synchronize: reported with the fault, and not run (with `bug`).
int pe_planted_after_fault(const int* in, int* out, int bug) {
  hillis_steele_scan_kernel<<<1, kBlock>>>(in, out + kBlock, bug);
  hillis_steele_scan_kernel<<<1, kBlock>>>(in, out, 0);
  return (int)cudaDeviceSynchronize();
}
}
