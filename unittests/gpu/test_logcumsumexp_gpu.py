"""logcumsumexp CUDA launchers on a real GPU, against the NumPy reference (skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 2e-2}
SHAPES = [((1, 1, 1), 1), ((3, 1000, 1), 1), ((2, 5000, 1), 1), ((1, 1 << 16, 1), 1), ((4, 37, 65), 1),
          ((1, 300, 1024), 1), ((0, 5, 1), 1)]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _run(name, dtype, arrays, shape3, exclusive, reverse):
    lib = library()
    bufs = [DeviceBuffer(host_array(a, dtype)) for a in arrays]
    out = DeviceBuffer(host_array(np.zeros(arrays[0].shape), dtype))
    fn = getattr(lib, name)
    outer, n, inner = shape3
    check(fn(DTYPE_CODES[dtype], *[ctypes.c_void_p(b.ptr) for b in bufs], ctypes.c_void_p(out.ptr),
             ctypes.c_int64(outer), ctypes.c_int64(n), ctypes.c_int64(inner), int(exclusive), int(reverse)))
    return to_float64(out.get(), dtype)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape3,axis", SHAPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_matches_reference(dtype, shape3, axis, exclusive, reverse):
    x = np.random.default_rng(0).normal(0, 3, size=shape3)
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], shape3, exclusive, reverse)
    ref = refs.logcumsumexp(x64, axis, exclusive, reverse)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    np.testing.assert_allclose(got[finite], ref[finite], rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape3,axis", [((2, 700, 1), 1), ((3, 9, 5), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_matches_reference(dtype, shape3, axis, exclusive, reverse):
    rng = np.random.default_rng(1)
    x = rng.normal(0, 2, size=shape3)
    x[0, 0, 0] = -np.inf
    g = rng.normal(size=shape3)
    out = refs.logcumsumexp(x, axis, exclusive, reverse)
    got = _run("pe_logcumsumexp_backward", dtype, [x, out, g], shape3, exclusive, reverse)
    ref = refs.logcumsumexp_grad(x, g, axis, exclusive, reverse) if shape3[1] <= 100 else None
    if ref is None:  # long rows: compare with the CPU formula through float64 on the device
        ref = _run("pe_logcumsumexp_backward", "float64", [x, out, g], shape3, exclusive, reverse)
    assert not np.isnan(got).any() and got[0, 0, 0] == 0.0
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


def test_float32_long_row_accuracy_on_gpu():
    x = np.random.default_rng(0).normal(size=(1, 1 << 20, 1)).astype(np.float32)
    got = _run("pe_logcumsumexp_forward", "float32", [x], (1, 1 << 20, 1), False, False)
    ref = refs.logcumsumexp(x.astype(np.float64), 1)
    assert np.max(np.abs(got - ref) / np.abs(ref).clip(1e-30)) <= 1e-6
