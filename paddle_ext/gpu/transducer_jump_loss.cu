// CUDA transducer_jump_loss: one warp per logits row reduces its token and duration heads to (max, log_sum)
// and writes its node's arc weights to a scratch [B, T, S+1, K] (or, in two steps, to an output); one block per item runs alpha and then beta over the anti-diagonals t + s (every arc raises t + s, so a
// diagonal's nodes only read earlier ones: a __syncthreads between diagonals); the backward gives each row a
// block that finds the node's arc occupancies once and writes the row's grad in one coalesced pass. The
// lattice math is transducer_jump_loss.h's, shared with cpu/. Symbols and boundaries are read as given (the
// CPU binding checks them; a GPU one does not synchronise to).
#include <limits>

#include "paddle_ext/gpu/cuda_utils.cuh"
#include "paddle_ext/transducer_jump_loss.h"

namespace paddle_ext {
namespace gpu {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kLatticeThreads = 256;
constexpr int kGradThreads = 128;

template <typename T>
__global__ void heads_kernel(const T* logits, const int64_t* symbols, double* lse, double* weights, JumpLattice L) {
  const int lane = threadIdx.x % kWarp;
  const index_t rows = L.B * L.T * (L.S + 1);
  const index_t stride = (index_t)gridDim.x * kRowsPerBlock;
  for (index_t r = (index_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp; r < rows; r += stride) {
    const T* x = logits + r * L.X();
    // Each head's (max, log_sum) with the CPU's rules: NaN anywhere gives (NaN, 0), an infinite max (+inf, or
    // a head of only -inf) gives (max, 0).
    const RowLse<double> tok = warp_row_lse<double>(x, L.C, lane);
    RowLse<double> dur = {0.0, 0.0};
    if (L.D > 0) dur = warp_row_lse<double>(x + L.C, L.D, lane);
    if (lane != 0) continue;
    double* h = lse + 4 * r;
    h[0] = tok.max, h[1] = tok.log_sum, h[2] = dur.max, h[3] = dur.log_sum;
    const index_t s = r % (L.S + 1), b = r / ((L.S + 1) * L.T);
    jump_node_weights(L, x, h, jump_symbol(symbols, L, b, s), weights + r * L.arcs.count);
  }
}

template <typename T>
__global__ void lattice_kernel(const double* weights, const int64_t* boundary, double* alpha, double* beta, T* loss,
                               JumpLattice L) {
  const index_t b = blockIdx.x, per_item = (L.T + 1) * (L.S + 1);
  for (index_t i = threadIdx.x; i < per_item; i += blockDim.x) {
    alpha[b * per_item + i] = neg_inf<double>();
    beta[b * per_item + i] = neg_inf<double>();
  }
  __syncthreads();
  const JumpBox box = jump_box(boundary, b, L);
  const index_t first = box.t0 + box.s0, last = box.t1 + box.s1;
  for (index_t n = first; n <= last; ++n) {  // alpha, diagonal by diagonal
    const index_t t_lo = max(box.t0, n - box.s1), t_hi = min(box.t1, n - box.s0);
    for (index_t t = t_lo + threadIdx.x; t <= t_hi; t += blockDim.x) {
      double v[kMaxJumpArcs];
      const index_t s = n - t;
      double value = 0.0;
      if (t != box.t0 || s != box.s0) {
        jump_alpha_terms(L, weights, alpha, b, t, s, box, v);
        value = jump_log_sum(v, L.arcs.count);
      }
      alpha[L.lattice(b, t, s)] = value;
    }
    __syncthreads();
  }
  for (index_t n = last; n >= first; --n) {  // beta, backwards
    const index_t t_lo = max(box.t0, n - box.s1), t_hi = min(box.t1, n - box.s0);
    for (index_t t = t_lo + threadIdx.x; t <= t_hi; t += blockDim.x) {
      double v[kMaxJumpArcs];
      const index_t s = n - t;
      double value = s == box.s1 ? 0.0 : neg_inf<double>();
      if (t < box.t1) {
        jump_beta_terms(L, weights, beta, b, t, s, box, v);
        value = jump_log_sum(v, L.arcs.count);
      }
      beta[L.lattice(b, t, s)] = value;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[b] = store<T>(static_cast<acc_t<T>>(-beta[L.lattice(b, box.t0, box.s0)]));
}

// A row's arc occupancies (into gamma; returns their sum) and its item's loss grad (into g), on thread 0.
template <typename T>
struct LatticeOccupancy {  // the one-step loss: from alpha and beta
  const int64_t* symbols;
  const int64_t* boundary;
  const double* lse;
  const double* alpha;
  const double* beta;
  const T* loss_grad;
  __device__ double operator()(const JumpLattice& L, const T* logits, index_t r, double* g, double* gamma) const {
    const index_t s = r % (L.S + 1), t = (r / (L.S + 1)) % L.T, b = r / ((L.S + 1) * L.T);
    *g = static_cast<double>(load(loss_grad[b]));
    return jump_occupancy(L, logits, symbols, lse, alpha, beta, b, t, s, jump_box(boundary, b, L), jump_fold(L, *g),
                          gamma);
  }
};

template <typename T>
struct WeightsGradOccupancy {  // the arc-weights step: as weights_grad holds them (clamp on: scale_grad's g)
  const double* weights_grad;
  const T* scale_grad;
  __device__ double operator()(const JumpLattice& L, const T*, index_t r, double* g, double* gamma) const {
    const index_t b = r / ((L.S + 1) * L.T);
    *g = clamp_on(L.clamp) ? static_cast<double>(load(scale_grad[b])) : 1.0;
    double total = 0.0;
    for (int k = 0; k < L.arcs.count; ++k) total += gamma[k] = *g == 0.0 ? 0.0 : weights_grad[r * L.arcs.count + k];
    return total;
  }
};

template <typename T, typename Occupancy>
__global__ void backward_kernel(const T* logits, const int64_t* symbols, const double* lse, T* logits_grad,
                                JumpLattice L, Occupancy occupancy_of) {
  __shared__ double gamma[kMaxJumpArcs];
  __shared__ double n_out, g_row;
  const index_t rows = L.B * L.T * (L.S + 1);
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const index_t s = r % (L.S + 1), b = r / ((L.S + 1) * L.T);
    if (threadIdx.x == 0) n_out = occupancy_of(L, logits, r, &g_row, gamma);
    __syncthreads();
    const T* x = logits + r * L.X();
    T* dx = logits_grad + r * L.X();
    const double* h = lse + 4 * r;
    const double occupancy = n_out, g = g_row;
    for (index_t c = threadIdx.x; c < L.X(); c += blockDim.x) {
      const bool token = c < L.C;
      const double v = occupancy == 0.0 ? 0.0
                                        : jump_finish(L, joint_grad<double>(load(x[c]), token ? h[0] : h[2],
                                                                            token ? h[1] : h[3], 0.0, -occupancy),
                                                      g, token);
      dx[c] = store<T>(static_cast<acc_t<T>>(v));
    }
    __syncthreads();
    if (threadIdx.x == 0 && occupancy != 0.0)  // the units the node's arcs emit: softmax * N - E
      jump_emitted_grads(L, x, dx, h, jump_symbol(symbols, L, b, s), gamma, occupancy, g);
    __syncthreads();
  }
}

// The loss-on-weights step's grad: one thread a node, its arcs' occupancies times the loss grad.
__global__ void weights_loss_backward_kernel(const double* weights, const int64_t* boundary, const double* alpha,
                                             const double* beta, const double* loss_grad, double* weights_grad,
                                             JumpLattice L) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  const int K = L.arcs.count;
  for (index_t r = (index_t)blockIdx.x * blockDim.x + threadIdx.x; r < nodes; r += (index_t)gridDim.x * blockDim.x) {
    const index_t s = r % (L.S + 1), t = (r / (L.S + 1)) % L.T, b = r / ((L.S + 1) * L.T);
    const double g = loss_grad[b];
    double e[kMaxJumpArcs];
    const bool any = g != 0.0 && jump_weight_occupancy_exponents(L, weights + r * K, alpha, beta, b, t, s,
                                                                 jump_box(boundary, b, L), e);
    for (int k = 0; k < K; ++k) weights_grad[r * K + k] = any ? jump_arc_scale(L, k, g) * exp(e[k]) : 0.0;
  }
}

}  // namespace

template <typename T>
void transducer_jump_forward(const T* logits, const int64_t* symbols, const int64_t* boundary, double* lse,
                             double* alpha, double* beta, T* loss, const JumpLattice& L, cudaStream_t stream) {
  if (L.B == 0) return;
  DeviceScratch<double> weights(L.B * L.T * (L.S + 1) * L.arcs.count, stream);  // the recursions' only reads
  jump_arc_weights_forward(logits, symbols, lse, weights.ptr, L, stream);
  lattice_kernel<T><<<(unsigned)L.B, kLatticeThreads, 0, stream>>>(weights.ptr, boundary, alpha, beta, loss, L);
  check_launch("transducer_jump_loss lattice");
}

template <typename T>
void transducer_jump_backward(const T* logits, const int64_t* symbols, const int64_t* boundary, const double* lse,
                              const double* alpha, const double* beta, const T* loss_grad, T* logits_grad,
                              const JumpLattice& L, cudaStream_t stream) {
  const index_t rows = L.B * L.T * (L.S + 1);
  if (rows == 0 || L.X() == 0) return;
  const LatticeOccupancy<T> occupancy{symbols, boundary, lse, alpha, beta, loss_grad};
  backward_kernel<<<grid_size(rows, 1), kGradThreads, 0, stream>>>(logits, symbols, lse, logits_grad, L, occupancy);
  check_launch("transducer_jump_loss backward");
}

template <typename T>
void jump_arc_weights_forward(const T* logits, const int64_t* symbols, double* lse, double* weights,
                              const JumpLattice& L, cudaStream_t stream) {
  const index_t rows = L.B * L.T * (L.S + 1);
  if (rows == 0 || L.X() == 0) return;
  heads_kernel<T><<<grid_size(rows, kRowsPerBlock), kRowsPerBlock * kWarp, 0, stream>>>(logits, symbols, lse,
                                                                                       weights, L);
  check_launch("transducer_jump_loss heads");
}

template <typename T>
void jump_arc_weights_backward(const T* logits, const int64_t* symbols, const double* lse,
                               const double* weights_grad, const T* scale_grad, T* logits_grad, const JumpLattice& L,
                               cudaStream_t stream) {
  const index_t rows = L.B * L.T * (L.S + 1);
  if (rows == 0 || L.X() == 0) return;
  const WeightsGradOccupancy<T> occupancy{weights_grad, scale_grad};
  backward_kernel<<<grid_size(rows, 1), kGradThreads, 0, stream>>>(logits, symbols, lse, logits_grad, L, occupancy);
  check_launch("transducer_jump_loss arc weights backward");
}

void jump_weights_loss_forward(const double* weights, const int64_t* boundary, double* alpha, double* beta,
                               double* loss, const JumpLattice& L, cudaStream_t stream) {
  if (L.B == 0) return;
  lattice_kernel<double><<<(unsigned)L.B, kLatticeThreads, 0, stream>>>(weights, boundary, alpha, beta, loss, L);
  check_launch("transducer_jump_loss weights lattice");
}

void jump_weights_loss_backward(const double* weights, const int64_t* boundary, const double* alpha,
                                const double* beta, const double* loss_grad, double* weights_grad,
                                const JumpLattice& L, cudaStream_t stream) {
  const index_t nodes = L.B * L.T * (L.S + 1);
  if (nodes == 0 || L.arcs.count == 0) return;
  weights_loss_backward_kernel<<<grid_size(nodes, kLatticeThreads), kLatticeThreads, 0, stream>>>(
      weights, boundary, alpha, beta, loss_grad, weights_grad, L);
  check_launch("transducer_jump_loss weights backward");
}

#define PE_INSTANTIATE(T)                                                                                       \
  template void transducer_jump_forward<T>(const T*, const int64_t*, const int64_t*, double*, double*, double*, \
                                           T*, const JumpLattice&, cudaStream_t);                              \
  template void transducer_jump_backward<T>(const T*, const int64_t*, const int64_t*, const double*,           \
                                            const double*, const double*, const T*, T*, const JumpLattice&,    \
                                            cudaStream_t);                                              \
  template void jump_arc_weights_forward<T>(const T*, const int64_t*, double*, double*, const JumpLattice&,     \
                                            cudaStream_t);                                                     \
  template void jump_arc_weights_backward<T>(const T*, const int64_t*, const double*, const double*, const T*,  \
                                             T*, const JumpLattice&, cudaStream_t);
PE_FOR_FLOAT32_64(PE_INSTANTIATE)
#undef PE_INSTANTIATE

}  // namespace gpu
}  // namespace paddle_ext
