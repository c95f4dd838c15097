"""rnnt_joint_logprobs and the pruning gather: CUDA launchers on a real GPU against the float64 references
(the fuzz cases of fuzz_cases.rnnt_joint_cases plus realistic sizes; skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import fuzz_cases as fc
import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

GPU_RTOL = {k: 4 * v for k, v in fc.RTOL.items()}  # other summation orders than the CPU: 4x its tolerances
_i64 = ctypes.c_int64


def _f(buf):
    return ctypes.c_void_p(buf.ptr) if buf is not None else ctypes.c_void_p(0)


def _dev(x, dtype):
    return DeviceBuffer(host_array(x, dtype))


def _acc(dtype):
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _run(logits, symbols, ranges, term, px_grad, py_grad, dtype):
    """(px, py, logits_grad) from the launchers, as float64."""
    B, T, R, C = logits.shape
    S = symbols.shape[1]
    lib = library()
    code = DTYPE_CODES[dtype]
    x, sy = _dev(logits, dtype), DeviceBuffer(np.ascontiguousarray(symbols, np.int64))
    rg = None if ranges is None else DeviceBuffer(np.ascontiguousarray(ranges, np.int64))
    px, py = _dev(np.zeros((B, S, T)), dtype), _dev(np.zeros((B, S + 1, T)), dtype)
    lse = _dev(np.zeros((B, T, R, 2)), _acc(dtype))
    dims = [_i64(v) for v in (B, T, R, S, C, term)]
    check(lib.pe_rnnt_joint_forward(code, _f(x), _f(sy), _f(rg), _f(px), _f(py), _f(lse), *dims))
    dx = _dev(np.zeros(logits.shape), dtype)
    check(lib.pe_rnnt_joint_backward(code, _f(x), _f(sy), _f(rg), _f(lse), _f(_dev(px_grad, dtype)),
                                     _f(_dev(py_grad, dtype)), _f(None), _f(dx), *dims, ctypes.c_double(np.inf)))
    return [to_float64(b.get(), dtype) for b in (px, py, dx)]


def _check(c, rt=None):
    dtype = c["dtype"]
    rt = rt or GPU_RTOL[dtype]
    args = (c["logits"], c["symbols"], c["ranges"], c["termination_symbol"])
    px, py, dx = _run(*args, c["px_grad"], c["py_grad"], dtype)
    ref_px, ref_py = refs.rnnt_joint_logprobs(*args)
    scale = fc.finite_scale(c["logits"])
    fc.assert_matches(px, ref_px, dtype, scale, "px", rt)
    fc.assert_matches(py, ref_py, dtype, scale, "py", rt)
    with np.errstate(invalid="ignore", over="ignore"):
        ref_g = refs.rnnt_joint_logprobs_grad(*args, c["px_grad"], c["py_grad"])
    fc.assert_matches(dx, ref_g, dtype, fc.finite_scale(c["px_grad"], c["py_grad"]) * 2, "logits grad", rt)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in fc.rnnt_joint_cases()])
def test_fuzz_cases(case):
    _check(case)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("B,T,S,R,C", [(2, 30, 10, None, 500), (3, 40, 20, 5, 2000), (1, 3, 2, 2, 31)])
def test_realistic_sizes(dtype, B, T, S, R, C):
    rng = np.random.default_rng(B * T + C)
    R_ = S + 1 if R is None else R
    ranges = None
    if R is not None:
        starts = np.sort(rng.integers(0, S + 2 - R, size=(B, T)), axis=1)
        ranges = (starts[..., None] + np.arange(R)).astype(np.int64)
    case = dict(logits=fc.round_to(rng.normal(0, 8, size=(B, T, R_, C)), dtype),
                symbols=rng.integers(0, C, size=(B, S)).astype(np.int64), ranges=ranges, termination_symbol=0,
                px_grad=fc.round_to(rng.normal(size=(B, S, T)), dtype),
                py_grad=fc.round_to(rng.normal(size=(B, S + 1, T)), dtype), dtype=dtype)
    _check(case, rt=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_prune_gather(dtype):
    rng = np.random.default_rng(5)
    B, N, T, R, D = 3, 7, 11, 4, 130
    x = fc.round_to(rng.normal(size=(B, N, D)), dtype)
    index = rng.integers(0, N, size=(B, T, R)).astype(np.int64)
    g = fc.round_to(rng.normal(size=(B, T, R, D)), dtype)
    lib, code = library(), DTYPE_CODES[dtype]
    out, dx = _dev(np.zeros((B, T, R, D)), dtype), _dev(np.zeros((B, N, D)), dtype)
    idx = DeviceBuffer(index)
    dims = [_i64(v) for v in (B, N, T * R, D)]
    check(lib.pe_rnnt_prune_gather(code, _f(_dev(x, dtype)), _f(idx), _f(out), *dims))
    np.testing.assert_array_equal(to_float64(out.get(), dtype), refs.rnnt_prune_gather(x, index))
    check(lib.pe_rnnt_prune_gather_backward(code, _f(idx), _f(_dev(g, dtype)), _f(dx), *dims))
    fc.assert_matches(to_float64(dx.get(), dtype), refs.rnnt_prune_gather_grad(x.shape, index, g), dtype,
                      fc.finite_scale(g) * T * R, "gather grad", GPU_RTOL[dtype])
