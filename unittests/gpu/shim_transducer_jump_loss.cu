// C ABI over the transducer_jump_loss launchers for unittests/gpu (dtype codes: see gpu_runtime.py; only
// 0 = float32 and 1 = float64: the Python API computes 16-bit types in float32). lattice holds the TDT
// durations (multiblank = 0) or the big blanks' durations (multiblank = 1); boundary may be null; clamp is the
// grad clamp's bound (+inf: off).
#include "paddle_ext/transducer_jump_loss.h"
#include "paddle_ext/gpu/cuda_utils.cuh"
#include "shim_dispatch.cuh"

using namespace paddle_ext;

static JumpLattice shim_lattice(int64_t B, int64_t T, int64_t S, int64_t X, int multiblank, const int64_t* lattice,
                                int n, int64_t blank, double sigma, double fastemit_lambda, double clamp) {
  JumpLattice L{};
  L.B = B, L.T = T, L.S = S, L.D = multiblank ? 0 : n, L.C = X - L.D, L.sigma = sigma;
  L.fastemit_lambda = fastemit_lambda, L.clamp = clamp;
  L.arcs = multiblank ? multiblank_arcs(lattice, n, blank) : tdt_arcs(lattice, n, blank);
  return L;
}

template <typename Fn>
static int jump_dispatch(int dtype, Fn&& fn) {
  switch (dtype) {
    case 0: return shim_run([&] { fn(ShimTag<float>{}); });
    case 1: return shim_run([&] { fn(ShimTag<double>{}); });
    default: return -2;
  }
}

// lse [B, T, S+1, 4], alpha and beta [B, T+1, S+1] float64 (device); loss [B] and logits_grad in dtype.
extern "C" int pe_transducer_jump_loss(int dtype, const void* logits, const void* symbols, const void* boundary,
                                       const void* loss_grad, void* lse, void* alpha, void* beta, void* loss,
                                       void* logits_grad, int64_t B, int64_t T, int64_t S, int64_t X, int multiblank,
                                       const int64_t* lattice_host, int n, int64_t blank, double sigma,
                                       double fastemit_lambda, double clamp) {
  const JumpLattice L = shim_lattice(B, T, S, X, multiblank, lattice_host, n, blank, sigma, fastemit_lambda, clamp);
  return jump_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    gpu::transducer_jump_forward<V>((const V*)logits, (const int64_t*)symbols, (const int64_t*)boundary,
                                    (double*)lse, (double*)alpha, (double*)beta, (V*)loss, L, 0);
    gpu::transducer_jump_backward<V>((const V*)logits, (const int64_t*)symbols, (const int64_t*)boundary,
                                     (const double*)lse, (const double*)alpha, (const double*)beta,
                                     (const V*)loss_grad, (V*)logits_grad, L, 0);
  });
}

// The loss in two steps (the arc weights of all the nodes, then the loss on them), forward and backward:
// loss [B] float64 (device); item_grad_host [B] the weights loss's grad (the items' upstream grads, or ones with
// the clamp on), scale_grad [B] in dtype (device; read with the clamp on).
extern "C" int pe_transducer_jump_loss_two_steps(int dtype, const void* logits, const void* symbols,
                                                 const void* boundary, const double* item_grad_host,
                                                 const void* scale_grad, void* loss, void* logits_grad, int64_t B,
                                                 int64_t T, int64_t S, int64_t X, int multiblank,
                                                 const int64_t* lattice_host, int n, int64_t blank, double sigma,
                                                 double fastemit_lambda, double clamp) {
  const JumpLattice L = shim_lattice(B, T, S, X, multiblank, lattice_host, n, blank, sigma, fastemit_lambda, clamp);
  return jump_dispatch(dtype, [&](auto tag) {
    using V = typename decltype(tag)::type;
    const index_t nodes = B * T * (S + 1), lattice = B * (T + 1) * (S + 1);
    gpu::DeviceScratch<double> lse(nodes * 4, 0), weights(nodes * L.arcs.count, 0),
        weights_grad(nodes * L.arcs.count, 0), alpha(lattice, 0), beta(lattice, 0), item_grad(B, 0);
    gpu::jump_arc_weights_forward<V>((const V*)logits, (const int64_t*)symbols, lse.ptr, weights.ptr, L, 0);
    gpu::jump_weights_loss_forward(weights.ptr, (const int64_t*)boundary, alpha.ptr, beta.ptr, (double*)loss, L, 0);
    cudaMemcpy(item_grad.ptr, item_grad_host, sizeof(double) * B, cudaMemcpyHostToDevice);
    gpu::jump_weights_loss_backward(weights.ptr, (const int64_t*)boundary, alpha.ptr, beta.ptr, item_grad.ptr,
                                    weights_grad.ptr, L, 0);
    gpu::jump_arc_weights_backward<V>((const V*)logits, (const int64_t*)symbols, lse.ptr, weights_grad.ptr,
                                      (const V*)scale_grad, (V*)logits_grad, L, 0);
  });
}
