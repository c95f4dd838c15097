// C ABI for the GPU runtime tests: device buffers and copies through the CUDA runtime, so the tests
// need neither CuPy nor a CUDA build of Paddle. Each op family adds shim_<family>.cu beside this.
#include <cuda_runtime.h>

#include <cstdint>

extern "C" {

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
const char* pe_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
}
