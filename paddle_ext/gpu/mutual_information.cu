// CUDA mutual_information_recursion: one block per batch item (up to 256 threads) walks the anti-diagonals of its box
// (cells with s + t = d depend only on diagonal d - 1, or d + 1 in the backward), all threads of the
// block sharing each diagonal, one __syncthreads per diagonal. The forward and backward are the same
// wavefront driver with a different cell functor; the cell math is in paddle_ext/mutual_information.h,
// shared with the CPU kernels. p and the backward's p_grad are float64 (as on the CPU).
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/mutual_information.h"

namespace paddle_ext {
namespace gpu {
namespace {

using P = mi_acc_t;

// A diagonal holds at most min(S, T) + 1 cells: no more threads than that (whole warps, 32..256).
inline int block_threads(index_t S, index_t T_) {
  const index_t cells = std::min(S, T_) + 1;
  return (int)std::min<index_t>(256, std::max<index_t>(32, (cells + 31) / 32 * 32));
}

// Calls cell(s, t) for every cell of the box, diagonal by diagonal (reversed for the backward).
template <bool kReverse, typename Cell>
__device__ void wavefront(const MIBox& box, const Cell& cell) {
  const index_t ns = box.s_end - box.s_begin, nt = box.t_end - box.t_begin;
  for (index_t i = 0; i <= ns + nt; ++i) {
    const index_t d = kReverse ? ns + nt - i : i;
    const index_t lo = d > nt ? d - nt : 0, hi = d < ns ? d : ns;
    for (index_t k = lo + threadIdx.x; k <= hi; k += blockDim.x) cell(box.s_begin + k, box.t_begin + d - k);
    __syncthreads();
  }
}

template <typename T>
struct ForwardCell {
  const T *px, *py;  // this item's rows
  P* p;
  index_t T1, P1, s0, t0;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t s, index_t t) const {
    P v;
    if (s == s0 && t == t0) {
      v = P(0);
    } else {
      const P from_t = t > t0 ? p[s * P1 + t - 1] + static_cast<P>(load(py[s * (P1 - 1) + t - 1])) : neg_inf<P>();
      P from_s = neg_inf<P>();
      if (modified) {
        if (s > s0 && t > t0) from_s = p[(s - 1) * P1 + t - 1] + static_cast<P>(load(px[(s - 1) * T1 + t - 1]));
      } else if (s > s0) {
        from_s = p[(s - 1) * P1 + t] + static_cast<P>(load(px[(s - 1) * T1 + t]));
      }
      v = mi_forward_cell<P>(from_s, from_t);
    }
    p[s * P1 + t] = v;
  }
};

template <typename T>
__global__ void forward_kernel(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t S,
                               index_t T_, bool modified) {
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  P* pb = p + b * (S + 1) * P1;
  if (!mi_box_valid(box, S, T_)) {  // the binding checks CPU boundaries; never index out of bounds here
    if (threadIdx.x == 0) ans[b] = store<T>(std::numeric_limits<P>::quiet_NaN());
    return;
  }
  for (index_t i = threadIdx.x; i < (S + 1) * P1; i += blockDim.x) {  // -inf outside the box
    const index_t s = i / P1, t = i % P1;
    if (s < box.s_begin || s > box.s_end || t < box.t_begin || t > box.t_end) pb[i] = neg_inf<P>();
  }
  const ForwardCell<T> cell{px + b * S * T1, py + b * (S + 1) * T_, pb, T1, P1, box.s_begin, box.t_begin, modified};
  wavefront<false>(box, cell);
  if (threadIdx.x == 0) ans[b] = store<T>(pb[box.s_end * P1 + box.t_end]);
}

template <typename T>
struct BackwardCell {
  const T *px, *py;
  const P* p;
  P* g;  // p_grad of this item, [S+1, T+1]
  T *px_grad, *py_grad;
  index_t T1, P1, s1, t1;
  P ans_grad;
  bool modified;
  PE_HOSTDEVICE void operator()(index_t s, index_t t) const {
    if (s == s1 && t == t1) {
      g[s * P1 + t] = ans_grad;
      return;
    }
    const P here = p[s * P1 + t];
    P total = P(0);
    if (s < s1 && (!modified || t < t1)) {
      const index_t next = modified ? (s + 1) * P1 + t + 1 : (s + 1) * P1 + t;
      const P xg = g[next] * mi_edge_weight<P>(here, static_cast<P>(load(px[s * T1 + t])), p[next]);
      px_grad[s * T1 + t] = store<T>(xg);
      total += xg;
    }
    if (t < t1) {
      const P yg = g[s * P1 + t + 1] *
                   mi_edge_weight<P>(here, static_cast<P>(load(py[s * (P1 - 1) + t])), p[s * P1 + t + 1]);
      py_grad[s * (P1 - 1) + t] = store<T>(yg);
      total += yg;
    }
    g[s * P1 + t] = total;
  }
};

template <typename T>
__global__ void backward_kernel(const T* px, const T* py, const int64_t* boundary, const P* p, const T* ans_grad,
                                P* g, T* px_grad, T* py_grad, index_t S, index_t T_, bool modified) {
  const index_t b = blockIdx.x, P1 = T_ + 1, T1 = modified ? T_ : T_ + 1;
  const MIBox box = mi_box(boundary, b, S, T_);
  if (!mi_box_valid(box, S, T_)) return;  // grads stay 0 (zeroed by the launcher)
  const P ag = ans_grad == nullptr ? P(1) : static_cast<P>(load(ans_grad[b]));
  const BackwardCell<T> cell{px + b * S * T1, py + b * (S + 1) * T_, p + b * (S + 1) * P1, g + b * (S + 1) * P1,
                             px_grad + b * S * T1, py_grad + b * (S + 1) * T_, T1, P1, box.s_end, box.t_end,
                             ag, modified};
  wavefront<true>(box, cell);
}

}  // namespace

template <typename T>
void mutual_information_forward(const T* px, const T* py, const int64_t* boundary, P* p, T* ans, index_t B,
                                index_t S, index_t T_, bool modified, cudaStream_t stream) {
  if (B == 0) return;
  forward_kernel<T><<<(unsigned)B, block_threads(S, T_), 0, stream>>>(px, py, boundary, p, ans, S, T_, modified);
  check_launch("mutual_information_forward");
}

template <typename T>
void mutual_information_backward(const T* px, const T* py, const int64_t* boundary, const P* p, const T* ans_grad,
                                 T* px_grad, T* py_grad, index_t B, index_t S, index_t T_, bool modified,
                                 cudaStream_t stream) {
  const index_t T1 = modified ? T_ : T_ + 1;
  if (B * S * T1 > 0) cudaMemsetAsync(px_grad, 0, sizeof(T) * B * S * T1, stream);  // 0.0 is all-zero bits
  if (B * (S + 1) * T_ > 0) cudaMemsetAsync(py_grad, 0, sizeof(T) * B * (S + 1) * T_, stream);
  if (B == 0) return;
  P* g = nullptr;
  const size_t g_bytes = sizeof(P) * B * (S + 1) * (T_ + 1);
  if (cudaMallocAsync(reinterpret_cast<void**>(&g), g_bytes, stream) != cudaSuccess) {
    check_launch("mutual_information_backward: workspace");
    throw std::runtime_error("mutual_information_backward: cannot allocate the p_grad workspace");
  }
  backward_kernel<T><<<(unsigned)B, block_threads(S, T_), 0, stream>>>(px, py, boundary, p, ans_grad, g, px_grad,
                                                                        py_grad, S, T_, modified);
  check_launch("mutual_information_backward");
  cudaFreeAsync(g, stream);
}

#define PE_INSTANTIATE(T)                                                                                      \
  template void mutual_information_forward<T>(const T*, const T*, const int64_t*, P*, T*, index_t, index_t,    \
                                              index_t, bool, cudaStream_t);                                    \
  template void mutual_information_backward<T>(const T*, const T*, const int64_t*, const P*, const T*, T*, T*,  \
                                               index_t, index_t, index_t, bool, cudaStream_t);
PE_INSTANTIATE(float)
PE_INSTANTIATE(double)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
