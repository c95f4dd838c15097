"""adaptive_log_softmax CUDA launchers on a real GPU, against the NumPy reference (skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-2, "bfloat16": 1.5e-1}
SHAPES = [(1, 1), (4, 1), (3, 5), (7, 257), (2, 40000), (1, 140000), (300, 33), (0, 5)]


def _lse_dtype(dtype):
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _f(x):
    return ctypes.c_void_p(x.ptr)


def _dev(x, dtype):
    return DeviceBuffer(host_array(x, dtype))


def _target_forward(x, t, dtype):
    m, k = x.shape
    out, lse = _dev(np.zeros(m), dtype), _dev(np.zeros(m), _lse_dtype(dtype))
    check(library().pe_als_target_forward(DTYPE_CODES[dtype], _f(_dev(x, dtype)), _f(DeviceBuffer(t)), _f(out), _f(lse),
                                          ctypes.c_int64(m), ctypes.c_int64(k)))
    return to_float64(out.get(), dtype), to_float64(lse.get(), _lse_dtype(dtype))


def _inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, size=shape)
    t = rng.integers(0, max(shape[1], 1), size=shape[0]).astype(np.int64)
    return x, t


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", SHAPES)
def test_target_forward(dtype, shape):
    x, t = _inputs(shape)
    x64 = to_float64(host_array(x, dtype), dtype)
    out, lse = _target_forward(x, t, dtype)
    np.testing.assert_allclose(out, refs.adaptive_log_softmax_target(x64, t), rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(lse, refs.logsumexp_rows(x64), rtol=max(TOL[dtype] / 10, 1e-12))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_target_backward(dtype, shape):
    x, t = _inputs(shape, seed=1)
    m, k = shape
    g = np.random.default_rng(2).normal(size=m)
    lse = _dev(refs.logsumexp_rows(x) if m else np.zeros(0), dtype)
    dx = _dev(np.zeros(shape), dtype)
    check(library().pe_als_target_backward(DTYPE_CODES[dtype], _f(_dev(x, dtype)), _f(DeviceBuffer(t)), _f(lse),
                                           _f(_dev(g, dtype)), _f(dx), ctypes.c_int64(m), ctypes.c_int64(k)))
    ref = refs.adaptive_log_softmax_target_grad(x, t, g)
    np.testing.assert_allclose(to_float64(dx.get(), dtype), ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", SHAPES)
def test_full_forward_and_backward(dtype, shape):
    x, _ = _inputs(shape, seed=3)
    m, k = shape
    rng = np.random.default_rng(4)
    off, g = rng.normal(size=m), rng.normal(size=shape)
    x64, off64, g64 = (to_float64(host_array(a, dtype), dtype) for a in (x, off, g))
    out, lse = _dev(np.zeros(shape), dtype), _dev(np.zeros(m), _lse_dtype(dtype))
    xd = _dev(x, dtype)
    check(library().pe_als_full_forward(DTYPE_CODES[dtype], _f(xd), _f(_dev(off, dtype)), _f(out), _f(lse),
                                        ctypes.c_int64(m), ctypes.c_int64(k)))
    np.testing.assert_allclose(to_float64(out.get(), dtype), refs.adaptive_log_softmax_full(x64, off64),
                               rtol=TOL[dtype], atol=TOL[dtype] * 4)
    dx, doff = _dev(np.zeros(shape), dtype), _dev(np.zeros(m), dtype)
    check(library().pe_als_full_backward(DTYPE_CODES[dtype], _f(xd), _f(lse), _f(_dev(g, dtype)), _f(dx), _f(doff),
                                         ctypes.c_int64(m), ctypes.c_int64(k)))
    with np.errstate(invalid="ignore"):
        soft = np.exp(x64 - refs.logsumexp_rows(x64)[:, None]) if m else np.zeros(shape)
    gsum = g64.sum(axis=1)
    tol = TOL[dtype] * 10 * max(1.0, np.sqrt(k) / 10)
    np.testing.assert_allclose(to_float64(doff.get(), dtype), gsum, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_float64(dx.get(), dtype), g64 - soft * gsum[:, None], rtol=tol, atol=tol)


def test_neg_inf_nan_and_bad_target():
    x = np.array([[-np.inf, 0.5, 1.0, -np.inf], [-np.inf] * 4, [0.0, np.nan, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    t = np.array([0, 1, 0, 7], dtype=np.int64)  # the last target is out of range
    out, lse = _target_forward(x, t, "float64")
    assert out[0] == -np.inf and np.isnan(out[1]) and np.isnan(out[2]) and np.isnan(out[3])
    assert lse[1] == -np.inf and np.isnan(lse[2])
    np.testing.assert_allclose(lse[[0, 3]], refs.logsumexp_rows(x[[0, 3]]), rtol=1e-14)


def test_pos_inf_row_is_nan_throughout():
    # issue 12 item 7: a row holding +inf has lse NaN, so its outputs are NaN (torch's log_softmax), not -inf
    x = np.array([[0.0, np.inf, 1.0, 2.0], [-np.inf, np.inf, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    out, lse = _target_forward(x, np.array([0, 2, 3], dtype=np.int64), "float64")
    assert np.isnan(out[:2]).all() and np.isnan(lse[:2]).all()
    np.testing.assert_allclose(lse[2], refs.logsumexp_rows(x[2:])[0], rtol=1e-14)
