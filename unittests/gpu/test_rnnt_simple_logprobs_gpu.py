"""rnnt_simple_logprobs CUDA launchers on a real GPU, against the float64 NumPy reference (outputs) and the
CPU kernels through paddle_ext where Paddle is installed; grads against refs.rnnt_simple_logprobs_grad too.
Sizes around the 32 x 32 GEMM tiles, and logits x 1e3 for the exact fallback cells (skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import refs

try:
    import paddle

    from paddle_ext import _library
except ImportError:
    paddle = _library = None
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, library

TERM = 0
CASES = [(1, 0, 1, 1), (2, 3, 4, 5), (2, 31, 33, 64), (1, 32, 65, 500), (3, 7, 200, 33)]


def _inputs(B, S, T, C, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(B, S + 1, C)) * scale, rng.normal(size=(B, T, C)) * scale,
            rng.integers(0, C, size=(B, S)).astype(np.int64))


def _grads_in(B, S, T, modified, seed):
    rng = np.random.default_rng(seed + 1)
    return rng.normal(size=(B, S, T if modified else T + 1)), rng.normal(size=(B, S + 1, T))


def _gpu(lm, am, symbols, gx, gy, dtype, modified):
    lib = library()
    B, L, C = lm.shape
    S, T = symbols.shape[1], am.shape[1]
    code, i64 = DTYPE_CODES[dtype], ctypes.c_int64
    dlm, dam, dsym = DeviceBuffer(lm.astype(dtype)), DeviceBuffer(am.astype(dtype)), DeviceBuffer(symbols)
    dpx = DeviceBuffer.empty((B, S, T if modified else T + 1), dtype)
    dpy, dapprox = DeviceBuffer.empty((B, S + 1, T), dtype), DeviceBuffer.empty((B, L, T), dtype)
    p = lambda buf: ctypes.c_void_p(buf.ptr)  # noqa: E731
    dims = (i64(B), i64(S), i64(L), i64(T), i64(C), i64(TERM), int(modified))
    check(lib.pe_rnnt_simple_logprobs_forward(code, p(dlm), p(dam), p(dsym), p(dpx), p(dpy), p(dapprox), *dims))
    dgx, dgy = DeviceBuffer(gx.astype(dtype)), DeviceBuffer(gy.astype(dtype))
    dlg, dag = DeviceBuffer.empty(lm.shape, dtype), DeviceBuffer.empty(am.shape, dtype)
    check(lib.pe_rnnt_simple_logprobs_backward(code, p(dlm), p(dam), p(dsym), p(dapprox), p(dgx), p(dgy), p(dlg),
                                               p(dag), *dims))
    return [a.astype(np.float64) for a in (dpx.get(), dpy.get(), dlg.get(), dag.get())]


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("B,S,T,C", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale", [1.0, 1e3])
@pytest.mark.parametrize("shared_row", [False, True])
def test_gpu_matches_reference(shared_row, scale, dtype, B, S, T, C, modified):
    """shared_row: lm [B, 1, C], one row for every s (the reference repeats it; its grad sums over s)."""
    lm, am, symbols = _inputs(B, S, T, C, seed=B + S + T + C, scale=scale)
    lm = lm[:, :1] if shared_row else lm
    gx, gy = _grads_in(B, S, T, modified, seed=S)
    px, py, lg, ag = _gpu(lm, am, symbols, gx, gy, dtype, modified)
    lm_r, am_r = lm.astype(dtype).astype(np.float64), am.astype(dtype).astype(np.float64)
    lm_full = np.repeat(lm_r, S + 1, axis=1) if shared_row else lm_r
    ref_px, ref_py = refs.rnnt_simple_logprobs(lm_full, am_r, symbols, TERM, modified)
    tol = dict(rtol=1e-5, atol=1e-5 * scale) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10 * scale)
    np.testing.assert_array_equal(np.isinf(px), np.isinf(ref_px))
    fin = np.isfinite(ref_px)
    np.testing.assert_allclose(px[fin], ref_px[fin], **tol)
    np.testing.assert_allclose(py, ref_py, **tol)
    ref_lg, ref_ag = refs.rnnt_simple_logprobs_grad(lm_full, am_r, symbols, TERM, gx.astype(dtype), gy.astype(dtype),
                                                    modified)
    ref_lg = ref_lg.sum(1, keepdims=True) if shared_row else ref_lg
    gtol = dict(rtol=1e-4, atol=1e-4 * (S + T + 1)) if dtype == "float32" else dict(rtol=1e-9, atol=1e-9 * (S + T + 1))
    np.testing.assert_allclose(lg, ref_lg, **gtol)
    np.testing.assert_allclose(ag, ref_ag, **gtol)
    if paddle is not None:  # the CPU kernels give the same grads
        args = [paddle.to_tensor(x) for x in (lm.astype(dtype), am.astype(dtype), symbols)]
        for x in args[:2]:
            x.stop_gradient = False
        cpx, cpy, _ = _library.ops().pe_rnnt_simple_logprobs(*args, TERM, modified)
        paddle.autograd.backward([cpx, cpy], [paddle.to_tensor(gx.astype(dtype)), paddle.to_tensor(gy.astype(dtype))])
        np.testing.assert_allclose(lg, args[0].grad.numpy(), **gtol)
        np.testing.assert_allclose(ag, args[1].grad.numpy(), **gtol)
