// CUDA logcumsumexp along a strided axis (inner > 1), forward and backward: one thread per (outer, column)
// line walking the axis (neighbouring threads read neighbouring addresses: every step coalesced), or, with
// few lines, each column's axis cut into kSegments pieces scanned by the threads of one block.
#include "launch.cuh"
#include "scan.cuh"

namespace paddle_ext::gpu {
namespace {

// One thread per (outer, column) line of a strided axis.
template <typename IO>
__global__ void scan_columns_kernel(IO io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse) {
  const typename IO::Op op;
  const index_t lines = outer * inner;
  for (index_t line = blockIdx.x * (index_t)blockDim.x + threadIdx.x; line < lines;
       line += (index_t)gridDim.x * blockDim.x) {
    const index_t o = line / inner, c = line % inner;
    const index_t base = o * n * inner + c;
    scan_column_piece(io, op, IO::identity(), base, 0, n, n, inner, exclusive, reverse);
  }
}

// A strided axis with many columns but few (outer, column) lines: the axis of each column is cut into
// kSegments pieces scanned by different threads of one block (32 neighbouring columns x kSegments), so
// the walk is kSegments times shorter and the device gets enough warps. Each thread reduces its piece,
// the block combines the pieces' totals, then each thread scans its piece again from its carry. Reads
// stay coalesced (a warp covers 32 neighbouring columns); the op and the semantics are those of the
// one-thread-per-column kernel.
constexpr int kSegments = 32;
template <typename IO>
__global__ void __launch_bounds__(32 * kSegments) scan_column_segments_kernel(IO io, index_t outer, index_t n,
                                                                             index_t inner, bool exclusive,
                                                                             bool reverse) {
  using V = typename IO::Value;
  const typename IO::Op op;
  __shared__ V totals[kSegments][32];
  const index_t groups = (inner + 31) / 32;
  const index_t piece = (n + kSegments - 1) / kSegments;
  const int lane = threadIdx.x % 32, segment = threadIdx.x / 32;
  for (index_t group = blockIdx.x; group < outer * groups; group += gridDim.x) {
    const index_t o = group / groups, c = (group % groups) * 32 + lane;
    const index_t s0 = std::min(n, segment * piece), s1 = std::min(n, s0 + piece);
    const index_t base = o * n * inner + c;
    V acc = IO::identity();
    if (c < inner) {
      if constexpr (IO::kLinear) {
        LogSumAcc<V> sum;
        for (index_t s = s0; s < s1; s += kBatch) {
          V v[kBatch];
          read_batch(io, v, base, s, s1, n, inner, reverse);
#pragma unroll
          for (int j = 0; j < kBatch; ++j) sum.add(v[j]);  // past s1: identity (-inf) adds nothing
        }
        acc = sum.value();
      } else {
        for (index_t s = s0; s < s1; ++s) acc = op(acc, io.read(base + (reverse ? n - 1 - s : s) * inner));
      }
    }
    totals[segment][lane] = acc;
    __syncthreads();
    acc = IO::identity();
    for (int q = 0; q < segment; ++q) acc = op(acc, totals[q][lane]);
    if (c < inner) scan_column_piece(io, op, acc, base, s0, s1, n, inner, exclusive, reverse);
    __syncthreads();  // totals is reused by the next group
  }
}

template <typename IO>
void launch_columns(const IO& io, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse,
                    cudaStream_t stream, const char* what) {
  constexpr int kThreads = 256;
  if (inner >= 32 && n >= 4 * kSegments && outer * inner < (index_t(1) << 17)) {
    const index_t groups = outer * ((inner + 31) / 32);
    scan_column_segments_kernel<IO><<<grid_size(groups, 1), 32 * kSegments, 0, stream>>>(io, outer, n, inner,
                                                                                        exclusive, reverse);
  } else {
    scan_columns_kernel<IO><<<grid_size(outer * inner, kThreads), kThreads, 0, stream>>>(io, outer, n, inner,
                                                                                          exclusive, reverse);
  }
  check_launch(what);
}

}  // namespace

namespace lse {

template <typename T>
void launch_forward_columns(const T* x, T* out, index_t outer, index_t n, index_t inner, bool exclusive, bool reverse,
                            cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  launch_columns(ForwardIO<T, A>{x, out}, outer, n, inner, exclusive, reverse, stream, "logcumsumexp");
}

template <typename T>
void launch_backward_columns(const T* x, const T* out, const T* out_grad, T* x_grad, index_t outer, index_t n,
                             index_t inner, bool exclusive, bool reverse, cudaStream_t stream) {
  using A = typename LogcumsumexpAcc<T>::type;
  launch_columns(BackwardIO<T, A>{x, out, out_grad, x_grad}, outer, n, inner, exclusive, reverse, stream,
                 "logcumsumexp_grad");
}

#define PE_INSTANTIATE(T)                                                                                      \
  template void launch_forward_columns<T>(const T*, T*, index_t, index_t, index_t, bool, bool, cudaStream_t);  \
  template void launch_backward_columns<T>(const T*, const T*, const T*, T*, index_t, index_t, index_t, bool, bool, \
                                           cudaStream_t);
PE_FOR_FLOAT_TYPES(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace lse
}  // namespace paddle_ext::gpu
