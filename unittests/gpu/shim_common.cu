// C ABI for the GPU runtime tests: device buffers and copies through the CUDA runtime, so the tests
// need neither CuPy nor a CUDA build of Paddle. Each op family adds shim_<family>.cu beside this.
#include <cuda_runtime.h>

#include <cstdint>

extern "C" {

// 1: every shim launch synchronizes (the tests); 0: launches stay asynchronous, for bench_gpu.py's event timing.
int pe_sync_after_launch = 1;
void pe_set_sync(int on) { pe_sync_after_launch = on; }

int pe_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
void* pe_malloc(int64_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes > 0 ? bytes : 1) == cudaSuccess ? p : nullptr;
}
int pe_free(void* p) { return (int)cudaFree(p); }
int pe_h2d(void* dst, const void* src, int64_t bytes) { return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice); }
int pe_d2h(void* dst, const void* src, int64_t bytes) { return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost); }
int pe_synchronize() { return (int)cudaDeviceSynchronize(); }
int pe_d2d(void* dst, const void* src, int64_t bytes) {
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
}
int pe_memset(void* dst, int byte, int64_t bytes) { return (int)cudaMemsetAsync(dst, byte, bytes, 0); }

// Event timer on the default stream, for bench_gpu.py: start, enqueue launches, stop returns milliseconds.
static cudaEvent_t timer_start_event, timer_stop_event;
int pe_timer_start() {
  if (!timer_start_event) {
    cudaEventCreate(&timer_start_event);
    cudaEventCreate(&timer_stop_event);
  }
  return (int)cudaEventRecord(timer_start_event, 0);
}
float pe_timer_stop() {
  float ms = -1.0f;
  cudaEventRecord(timer_stop_event, 0);
  cudaEventSynchronize(timer_stop_event);
  cudaEventElapsedTime(&ms, timer_start_event, timer_stop_event);
  return ms;
}
const char* pe_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
}
