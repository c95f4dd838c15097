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
    # a row holding +inf has lse NaN, so its outputs are NaN (torch's log_softmax), not -inf
    x = np.array([[0.0, np.inf, 1.0, 2.0], [-np.inf, np.inf, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    out, lse = _target_forward(x, np.array([0, 2, 3], dtype=np.int64), "float64")
    assert np.isnan(out[:2]).all() and np.isnan(lse[:2]).all()
    np.testing.assert_allclose(lse[2], refs.logsumexp_rows(x[2:])[0], rtol=1e-14)


# ---------------------------------------------------------------------------------------------------
# The dispatch of the target op's kernels (gpu/adaptive_log_softmax.cu). The forward runs one block per row
# when rows are many (m >= the resident blocks R, 528..1056 on a 132-SM GPU) or short (K < 16384), else
# splits each row into chunks of >= 8192 elements (at most 256) merged by a second kernel. Rows are read as
# 16-byte vectors between a scalar head (up to the first 16-byte boundary) and a scalar tail, the vectors
# kUnroll = 4 at a time, then one at a time. The backward streams tiles of 8192 floats (16384 halves, 4096
# doubles) per block, with vectors only where the logits and their grad share their 16-byte alignment.
DISPATCH_SHAPES = [
    (5, 10001),     # one block per row (K < 16384): the unrolled and the single-vector loops, odd rows misaligned
    (3, 20003),     # 2 chunks of 10240 + 9763: the split path and its merge, misaligned rows
    (2, 40000),     # 4 chunks of 10240 (the last 9280)
    (1, 140000),    # 17 chunks of 8448 (the last 4832)
    (1, 2097155),   # the cap of 256 chunks: 249 of 8448
    (1100, 16387),  # m >= R: one block per row although K could be split
]


def _on_device_at(x, dtype, offset):
    """x on the device `offset` elements past an allocation's start (so misaligned by offset * itemsize)."""
    host = host_array(x, dtype)
    pad = np.concatenate([np.zeros(offset, host.dtype), host.ravel()])
    buf = DeviceBuffer(pad)
    return buf, ctypes.c_void_p(buf.ptr + offset * host.itemsize)


def _target_forward_at(x, t, dtype, offset=0):
    m, k = x.shape
    xd, xp = _on_device_at(x, dtype, offset)
    out, lse = _dev(np.zeros(m), dtype), _dev(np.zeros(m), _lse_dtype(dtype))
    check(library().pe_als_target_forward(DTYPE_CODES[dtype], xp, _f(DeviceBuffer(t)), _f(out), _f(lse),
                                          ctypes.c_int64(m), ctypes.c_int64(k)))
    del xd
    return to_float64(out.get(), dtype), to_float64(lse.get(), _lse_dtype(dtype))


def _lse_tol(dtype):
    return max(TOL[dtype] / 10, 1e-12)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", DISPATCH_SHAPES)
@pytest.mark.parametrize("offset", [0, 1])
def test_target_forward_dispatch(dtype, shape, offset):
    if offset and shape[0] > 100:
        pytest.skip("the misaligned start is covered by the smaller shapes")
    x, t = _inputs(shape, seed=5)
    x64 = to_float64(host_array(x, dtype), dtype)
    out, lse = _target_forward_at(x, t, dtype, offset)
    np.testing.assert_allclose(lse, refs.logsumexp_rows(x64), rtol=_lse_tol(dtype), atol=0)
    np.testing.assert_allclose(out, refs.adaptive_log_softmax_target(x64, t), rtol=TOL[dtype], atol=TOL[dtype])


def _neg_inf_prefix(k):
    return k // 4 + 300  # > the first chunk (10240 of 40000, 8448 of 140003)


def _adversarial_rows(k, rng):
    """Rows that stress the running (max, sum): a max rising at every element, falling, ±1e4 and ±700
    spreads, a lone finite value among -inf at the end, a first quarter of -inf (empty chunks when split),
    NaN or +inf in one place only, all -inf, denormals, ties; with a target per row."""
    q = k // 4
    rows, targets = [], []

    def add(row, t):
        rows.append(row)
        targets.append(t)

    add(np.linspace(-50, 50, k), k - 1)
    add(np.linspace(50, -50, k), k // 2)
    add(rng.uniform(-1e4, 1e4, k), 1)
    add(rng.uniform(-700, 700, k), k - 2)
    r = np.full(k, -np.inf)
    r[k - 3] = 2.5
    add(r, k - 3)                                     # out 0, lse 2.5
    r = rng.normal(0, 3, k)
    r[:_neg_inf_prefix(k)] = -np.inf
    add(r, 3)                                         # target at -inf: out -inf
    r = rng.normal(0, 3, k)
    r[k - 5] = np.nan
    add(r, 0)                                         # NaN in the last chunk only
    r = rng.normal(0, 3, k)
    r[2 * q + 1] = np.inf
    add(r, 2 * q)                                     # +inf in a middle chunk: NaN (torch's log_softmax)
    add(np.full(k, -np.inf), 0)                       # lse -inf, out NaN
    r = np.where(rng.random(k) < 0.5, 1e-40, 0.0)
    add(r, 5)                                         # denormal float32 (flushed to 0 in float16)
    add(np.full(k, 0.75), k // 3)                     # ties: out = -log(k)
    r = np.full(k, -np.inf)
    r[2 * q] = np.nan
    add(r, 1)                                         # -inf and one NaN: NaN
    return np.array(rows), np.array(targets, dtype=np.int64)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("k", [9001, 40000, 140003])  # one block per row; 4 chunks; 17 chunks, misaligned rows
def test_target_forward_adversarial(dtype, k):
    x, t = _adversarial_rows(k, np.random.default_rng(6))
    x64 = to_float64(host_array(x, dtype), dtype)
    out, lse = _target_forward_at(x, t, dtype)
    ref_lse = refs.log_softmax_lse(x64)
    np.testing.assert_array_equal(np.isnan(lse), np.isnan(ref_lse))
    np.testing.assert_allclose(lse, ref_lse, rtol=_lse_tol(dtype), atol=0)
    np.testing.assert_allclose(out, refs.adaptive_log_softmax_target(x64, t), rtol=TOL[dtype], atol=TOL[dtype])
    assert lse[4] == 2.5 and out[4] == 0 and out[5] == -np.inf and lse[8] == -np.inf


@pytest.mark.parametrize("k", [3, 40000])  # one block per row; split and merged
def test_target_forward_bad_target_is_nan(k):
    x, _ = _inputs((4, k), seed=7)
    t = np.array([-1, k, 2**40, k - 1], dtype=np.int64)
    out, lse = _target_forward_at(x, t, "float32")
    assert np.isnan(out[:3]).all() and np.isfinite(lse).all() and np.isfinite(out[3])


def _target_grad_ref(x64, t, g, lse):
    """The target op's grad for any target (an out-of-range one contributes no target term), from the lse
    the kernel was given (rounded to float32 for float32/16-bit rows: exp(x - lse) inherits its rounding)."""
    m, k = x64.shape
    with np.errstate(invalid="ignore"):
        grad = -np.exp(x64 - lse[:, None]) * g[:, None]
    ok = (t >= 0) & (t < k)
    grad[np.arange(m)[ok], t[ok]] += g[ok]
    return grad


def _target_backward_at(x, t, g, dtype, x_offset=0, dx_offset=0):
    m, k = x.shape
    x64 = to_float64(host_array(x, dtype), dtype)
    lse = to_float64(host_array(refs.log_softmax_lse(x64), _lse_dtype(dtype)), _lse_dtype(dtype))
    xd, xp = _on_device_at(x, dtype, x_offset)
    dxd, dxp = _on_device_at(np.zeros((m, k)), dtype, dx_offset)
    check(library().pe_als_target_backward(DTYPE_CODES[dtype], xp, _f(DeviceBuffer(t)), _f(_dev(lse, _lse_dtype(dtype))),
                                           _f(_dev(g, dtype)), dxp, ctypes.c_int64(m), ctypes.c_int64(k)))
    del xd
    return x64, lse, to_float64(dxd.get()[dx_offset:], dtype).reshape(m, k)


BACKWARD_SHAPES = [(3, 5), (7, 257), (4, 8193), (2, 16384), (3, 20003), (2, 40000), (1, 140000)]


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("shape", BACKWARD_SHAPES)
@pytest.mark.parametrize("offsets", [(0, 0), (1, 1), (1, 0)])  # aligned; same misalignment (head); scalar path
def test_target_backward_dispatch(dtype, shape, offsets):
    m, k = shape
    x, _ = _inputs(shape, seed=8)
    rng = np.random.default_rng(9)
    t = rng.integers(0, k, size=m).astype(np.int64)
    t[0] = 0                      # the head when misaligned
    t[-1] = k - 1                 # the tail
    if m > 2:
        t[1] = k // 2             # the vectors
    g = to_float64(host_array(rng.normal(size=m), dtype), dtype)
    x64, lse, dx = _target_backward_at(x, t, g, dtype, *offsets)
    tol = TOL[dtype] * (10 if dtype in ("float64", "float32") else 1)
    np.testing.assert_allclose(dx, _target_grad_ref(x64, t, g, lse), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("k", [9001, 40003])
def test_target_backward_adversarial(dtype, k):
    x, t = _adversarial_rows(k, np.random.default_rng(10))
    m = len(x)
    t[2], t[3] = -1, k  # out of range: no target term
    g = to_float64(host_array(np.random.default_rng(11).normal(size=m), dtype), dtype)
    x64, lse, dx = _target_backward_at(x, t, g, dtype, x_offset=1, dx_offset=1)
    ref = _target_grad_ref(x64, t, g, lse)
    np.testing.assert_array_equal(np.isnan(dx), np.isnan(ref))
    np.testing.assert_allclose(dx, ref, rtol=TOL[dtype], atol=TOL[dtype])
    assert (dx[4][np.isneginf(x64[4])] == 0).all() and dx[4, k - 3] == 0  # softmax 1 at the lone finite target
    pre = _neg_inf_prefix(k)
    assert (dx[5, :pre][np.arange(pre) != 3] == 0).all() and dx[5, 3] == g[5]
