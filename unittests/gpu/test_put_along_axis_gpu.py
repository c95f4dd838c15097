"""put_along_axis CUDA launchers on a real GPU, against the NumPy reference (skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

REDUCE_CODES = {"assign": 0, "add": 1, "mul": 2, "mean": 3, "amin": 4, "amax": 5}
# put_along_axis's dtypes: no complex (the op raises a TypeError for a complex arr; DTYPE_CODES has them for
# logcumsumexp).
PUT_DTYPES = [d for d in DTYPE_CODES if not d.startswith("complex")]
TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 2e-2, "int32": 0, "int64": 0}
INDEX_CODES = {np.int32: 4, np.int64: 5}
# (outer, n, m, inner): duplicates (m > n), graph-like (inner 64), a single long axis, empty indices.
SHAPES = [(1, 5, 12, 1), (3, 7, 20, 5), (1, 300, 5000, 64), (2, 1000, 30000, 1), (2, 4, 0, 3)]


def _acc_dtype(dtype, reduce):
    """What the set-up (put_along_axis_gpu.h, the binding's) accumulates `dtype` values in for `reduce`."""
    code = library().pe_put_along_axis_acc_dtype(DTYPE_CODES[dtype], REDUCE_CODES[reduce])
    return {c: name for name, c in DTYPE_CODES.items()}[code]


@pytest.mark.parametrize("dtype", PUT_DTYPES)
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
def test_accumulator_is_float32_for_half_types_and_int64_for_an_integer_mean(dtype, reduce):
    want = "float32" if dtype in ("float16", "bfloat16") else "int64" if reduce == "mean" and dtype == "int32" else dtype
    assert _acc_dtype(dtype, reduce) == want


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_dtypes_are_not_dispatched(dtype):
    """The shims reject a complex dtype code (-2) rather than run a launcher on it."""
    assert library().pe_put_along_axis_acc_dtype(DTYPE_CODES[dtype], REDUCE_CODES["add"]) == -2


def _ptr(buf):
    return ctypes.c_void_p(buf.ptr if buf is not None else 0)


class _Shifted:
    """A device array that starts one element into its buffer: pointers that are not 16-byte aligned."""

    def __init__(self, host):
        self.buf = DeviceBuffer(np.concatenate([host.reshape(-1)[:1], host.reshape(-1)]) if host.size else host)
        self.ptr = self.buf.ptr + (host.itemsize if host.size else 0)


def _device(host, misaligned=False):
    return _Shifted(host) if misaligned else DeviceBuffer(host)


def _winner_scratch(outer, n, inner):
    """assign's scratch as the binding hands it over: uninitialised (here: junk bytes the launcher must not trust)."""
    lib = library()
    lib.pe_put_along_axis_winner_scratch.restype = ctypes.c_int64
    nbytes = lib.pe_put_along_axis_winner_scratch(ctypes.c_int64(outer), ctypes.c_int64(n), ctypes.c_int64(inner))
    return DeviceBuffer(np.full(max(nbytes, 1), 0x5A, np.uint8))


def _scatter(dtype, reduce, arr, idx, vals, shape4, include_self, deterministic, misaligned=False):
    """The accumulator after the binding's set-up and launch (pe_put_along_axis_scatter)."""
    lib = library()
    outer, n, m, inner = shape4
    # the accumulation buffer holds arr as the dtype would store it, widened
    acc = DeviceBuffer(host_array(to_float64(host_array(arr, dtype), dtype), _acc_dtype(dtype, reduce)))
    values = _device(host_array(vals, dtype), misaligned)
    indices = _device(np.ascontiguousarray(idx), misaligned)
    check(lib.pe_put_along_axis_scatter(DTYPE_CODES[dtype], INDEX_CODES[idx.dtype.type], REDUCE_CODES[reduce],
                                        _ptr(acc), _ptr(values), _ptr(indices), ctypes.c_int64(outer),
                                        ctypes.c_int64(n), ctypes.c_int64(m), ctypes.c_int64(inner), int(include_self),
                                        int(deterministic)))
    return acc.get()


def _forward(dtype, reduce, arr, idx, vals, shape4, include_self, misaligned=False):
    got = _scatter(dtype, reduce, arr, idx, vals, shape4, include_self, False, misaligned).astype(np.float64)
    if dtype in ("float16", "bfloat16"):  # the binding rounds the float32 accumulator once
        got = to_float64(host_array(got, dtype), dtype)
    return got


def _inputs(dtype, shape4, seed=0, index_dtype=np.int64):
    outer, n, m, inner = shape4
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        arr = rng.integers(-9, 10, size=(outer, n, inner)).astype(dtype)
        vals = rng.integers(-9, 10, size=(outer, m, inner)).astype(dtype)
    else:
        arr = rng.uniform(-2, 2, size=(outer, n, inner))
        vals = rng.uniform(0.5, 1.5, size=(outer, m, inner)) * rng.choice([-1, 1], size=(outer, m, inner))
    idx = rng.integers(-n, n, size=(outer, m, inner)).astype(index_dtype) if n else np.zeros((outer, m, inner),
                                                                                             index_dtype)
    return arr, idx, vals


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("shape4", SHAPES)
def test_forward_matches_reference(dtype, reduce, include_self, shape4):
    if reduce == "mul" and shape4[2] > 100:
        pytest.skip("long products over/underflow; mul is covered by the small shapes")
    arr, idx, vals = _inputs(dtype, shape4)
    got = _forward(dtype, reduce, arr, idx, vals, shape4, include_self)
    a64 = to_float64(host_array(arr, dtype), dtype) if not dtype.startswith("int") else arr
    v64 = to_float64(host_array(vals, dtype), dtype) if not dtype.startswith("int") else vals
    if shape4[2] * shape4[3] * shape4[0] > 20000:  # large: the vectorised reference
        want = _fast_ref(a64, idx, v64, reduce, include_self)
    else:
        want = refs.put_along_axis(a64, idx, v64, 1, reduce, include_self)
    np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


def _fast_ref(arr, idx, vals, reduce, include_self):
    outer, n, inner = arr.shape
    k = idx % n
    o = np.arange(outer)[:, None, None] + 0 * k
    i = np.arange(inner)[None, None, :] + 0 * k
    loc = (o, k, i)
    a = arr.astype(np.float64).copy()
    touched = np.zeros(a.shape, bool)
    touched[loc] = True
    if reduce == "assign":
        win = np.full(a.shape, -1)
        np.maximum.at(win, loc, np.arange(idx.size).reshape(idx.shape))
        a[touched] = vals.reshape(-1)[win[touched]]
        return a
    s = np.zeros(a.shape)
    c = np.zeros(a.shape)
    if reduce in ("add", "mean"):
        np.add.at(s, loc, vals)
    elif reduce == "mul":
        s[:] = 1.0
        np.multiply.at(s, loc, vals)
    else:
        s[:] = np.inf if reduce == "amin" else -np.inf
        (np.minimum if reduce == "amin" else np.maximum).at(s, loc, vals)
    np.add.at(c, loc, 1)
    if include_self:
        if reduce in ("add", "mean"):
            s += a
            c += 1
        elif reduce == "mul":
            s *= a
        else:
            s = np.minimum(s, a) if reduce == "amin" else np.maximum(s, a)
    if reduce == "mean":
        s = np.floor(s / c) if np.issubdtype(arr.dtype, np.integer) else s / np.maximum(c, 1)
    a[touched] = s[touched]
    return a


def test_assign_is_deterministic_largest_position_wins():
    shape4 = (1, 3, 100000, 1)
    arr, idx, vals = _inputs("float32", shape4, seed=3)
    first = _forward("float32", "assign", arr, idx, vals, shape4, True)
    for _ in range(3):
        np.testing.assert_array_equal(_forward("float32", "assign", arr, idx, vals, shape4, True), first)
    np.testing.assert_array_equal(first, _fast_ref(arr.astype(np.float32).astype(np.float64), idx,
                                                   vals.astype(np.float32).astype(np.float64), "assign", True))


def test_out_of_range_indices_are_skipped_never_written():
    arr, idx, vals = _inputs("float32", (1, 4, 6, 1), seed=4)
    idx[0, 2, 0] = 1 << 40
    idx[0, 3, 0] = -(1 << 40)
    got = _forward("float32", "add", arr, idx, vals, (1, 4, 6, 1), True)
    keep = np.ones(6, bool)
    keep[[2, 3]] = False
    want = refs.put_along_axis(arr.astype(np.float32).astype(np.float64), idx[:, keep],
                               vals.astype(np.float32).astype(np.float64)[:, keep], 1, "add")
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_nan_wins_in_amax():
    arr = np.array([[[1.0], [2.0]]])
    idx = np.array([[[0], [0], [1]]])
    vals = np.array([[[np.nan], [5.0], [0.0]]])
    got = _forward("float32", "amax", arr, idx, vals, (1, 2, 3, 1), True)
    assert np.isnan(got[0, 0, 0]) and got[0, 1, 0] == 2.0


def _backward(dtype, reduce, arr, idx, vals, out, g, shape4, include_self, misaligned=False):
    """(arr_grad, values_grad) from the binding's set-up and launch (pe_put_along_axis_grads)."""
    lib = library()
    outer, n, m, inner = shape4
    d_arr, d_vals, d_out = (DeviceBuffer(host_array(x, dtype)) for x in (arr, vals, out))
    d_g = _device(host_array(g, dtype), misaligned)
    d_idx = _device(np.ascontiguousarray(idx), misaligned)
    # junk where the kernels must write every element
    arr_grad = DeviceBuffer(host_array(np.full(arr.shape, 7.0), dtype))
    values_grad = DeviceBuffer(host_array(np.full(vals.shape, 7.0), dtype))
    check(lib.pe_put_along_axis_grads(DTYPE_CODES[dtype], INDEX_CODES[idx.dtype.type], REDUCE_CODES[reduce],
                                      _ptr(d_arr), _ptr(d_idx), _ptr(d_vals), _ptr(d_out), _ptr(d_g), _ptr(arr_grad),
                                      _ptr(values_grad), ctypes.c_int64(outer), ctypes.c_int64(n), ctypes.c_int64(m),
                                      ctypes.c_int64(inner), int(include_self)))
    return to_float64(arr_grad.get(), dtype), to_float64(values_grad.get(), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("include_self", [True, False])
def test_backward_matches_reference(dtype, reduce, include_self):
    shape4 = (2, 4, 9, 3)
    arr, idx, vals = _inputs(dtype, shape4, seed=7)
    vals[0, 0, 0] = 0.0  # exact zeros for mul
    arr[1, 2, 1] = 0.0
    a64, v64 = arr.astype(dtype).astype(np.float64), vals.astype(dtype).astype(np.float64)
    out = refs.put_along_axis(a64, idx, v64, 1, reduce, include_self)
    g = np.random.default_rng(8).normal(size=arr.shape)
    got_a, got_v = _backward(dtype, reduce, arr, idx, vals, out, g, shape4, include_self)
    ra, rv = refs.put_along_axis_grad(a64, idx, v64, g.astype(dtype).astype(np.float64), 1, reduce, include_self)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got_a, ra, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_v, rv, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("reduce", ["mul", "amin", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_backward_with_non_finite_values_matches_reference(dtype, reduce, include_self):
    # The CPU regression sweep (test_put_along_axis_nonfinite.py) on the launchers: ±inf, NaN
    # and zeros in arr and values; mul's grads are products of the other factors, amin/amax's go to
    # the contributors matching the result (the NaNs of a NaN result).
    shape4 = (2, 5, 12, 3)
    rng = np.random.default_rng(31)
    special = np.array([np.inf, -np.inf, np.nan, 0.0])
    arr, idx, vals = _inputs("float64", shape4, seed=32)
    for x in (arr, vals):
        hit = rng.random(x.shape) < 0.15
        x[hit] = rng.choice(special, size=hit.sum())
    a64, v64 = to_float64(host_array(arr, dtype), dtype), to_float64(host_array(vals, dtype), dtype)
    out = refs.put_along_axis(a64, idx, v64, 1, reduce, include_self)
    g = to_float64(host_array(rng.normal(size=arr.shape), dtype), dtype)
    got_a, got_v = _backward(dtype, reduce, a64, idx, v64, out, g, shape4, include_self)
    ra, rv = refs.put_along_axis_grad(a64, idx, v64, g, 1, reduce, include_self)
    tol = TOL[dtype] * 5
    for got, want in ((got_a, ra), (got_v, rv)):
        want = to_float64(host_array(want, dtype), dtype)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _sorted(dtype, reduce, arr, idx, vals, shape4, include_self):
    return _scatter(dtype, reduce, arr, idx, vals, shape4, include_self, True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64"])
@pytest.mark.parametrize("reduce", ["add", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_deterministic_add_mean_are_bit_identical_run_to_run(dtype, reduce, include_self):
    shape4 = (2, 500, 40000, 3)
    arr, idx, vals = _inputs(dtype, shape4, seed=11)
    first = _sorted(dtype, reduce, arr, idx, vals, shape4, include_self)
    for _ in range(2):
        np.testing.assert_array_equal(_sorted(dtype, reduce, arr, idx, vals, shape4, include_self), first)
    a64 = to_float64(host_array(arr, dtype), dtype) if not dtype.startswith("int") else arr
    v64 = to_float64(host_array(vals, dtype), dtype) if not dtype.startswith("int") else vals
    want = _fast_ref(a64, idx, v64, reduce, include_self)
    tol = {"float64": 1e-12, "float32": 1e-4, "float16": 1e-4, "int64": 0}[dtype]
    np.testing.assert_allclose(first.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("path", ["atomic", "sorted"])
def test_int32_mean_sums_in_int64(include_self, path):
    # integer mean: 400 values near int32's limits per slot; their sum overflows int32, their floor mean fits
    shape4 = (2, 3, 1200, 2)
    rng = np.random.default_rng(21)
    info = np.iinfo(np.int32)
    arr = rng.integers(info.min, info.max, size=(2, 3, 2), endpoint=True).astype(np.int32)
    vals = rng.integers(info.max - 100, info.max, size=(2, 1200, 2), endpoint=True).astype(np.int32)
    vals[:, ::2] = rng.integers(info.min, info.min + 100, size=(2, 600, 2))
    idx = rng.integers(-3, 3, size=(2, 1200, 2)).astype(np.int64)
    run = _forward if path == "atomic" else _sorted
    got = run("int32", "mean", arr, idx, vals, shape4, include_self).astype(np.int32)  # the binding's cast back
    np.testing.assert_array_equal(got, refs.put_along_axis(arr, idx, vals, 1, "mean", include_self))


# ------------------------------------------------------------------------------ the row passes
# Update rows (o, j, :) whose indices are all equal (graph scatter: indices [E, 1] broadcast over C
# features): assign's row tables; packs of 4 (vector loads, float4 atomics on sm_90) where inner % 4 == 0.
# (outer, n, m, inner): inner 64 (16 packs, G = 16), 12 (3 packs over G = 4), 260 (65 packs over 32
# lanes), 6 (no packs, G = 8), 8 with many rows per target row.
ROW_SHAPES = [(1, 300, 5000, 64), (2, 50, 700, 12), (1, 40, 90, 260), (3, 40, 300, 6), (2, 5, 400, 8)]


def _row_inputs(dtype, shape4, seed=0, index_dtype=np.int64, out_of_range_rows=False):
    """_inputs with one index per update row (negative ones included), optionally some rows out of range."""
    arr, _, vals = _inputs(dtype, shape4, seed, index_dtype)
    outer, n, m, inner = shape4
    rng = np.random.default_rng(seed + 100)
    rows = rng.integers(-n, n, size=(outer, m, 1))
    if out_of_range_rows:
        rows[:, ::7] = n + 3
        rows[:, 3::11] = -n - 1
    return arr, np.ascontiguousarray(np.broadcast_to(rows, (outer, m, inner))).astype(index_dtype), vals


def _check_forward(dtype, reduce, arr, idx, vals, shape4, include_self, misaligned=False):
    got = _forward(dtype, reduce, arr, idx, vals, shape4, include_self, misaligned)
    a64 = to_float64(host_array(arr, dtype), dtype) if not dtype.startswith("int") else arr
    v64 = to_float64(host_array(vals, dtype), dtype) if not dtype.startswith("int") else vals
    keep = (idx >= -shape4[1]) & (idx < shape4[1])
    if keep.all():
        want = _fast_ref(a64, idx, v64, reduce, include_self)
    else:  # out-of-range positions are skipped: the reference of the rest (their indices redirected to a
        # slot of a scratch row appended to arr, dropped after)
        pad = np.concatenate([a64, np.zeros((shape4[0], 1, shape4[3]), a64.dtype)], axis=1)
        want = _fast_ref(pad, np.where(keep, idx % shape4[1], shape4[1]), v64, reduce, include_self)[:, :-1]
    tol = TOL[dtype] * 10
    np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=tol, atol=tol)
    if reduce == "assign":  # exact: a copy of the winner
        np.testing.assert_array_equal(got, np.asarray(want, np.float64))


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("shape4", ROW_SHAPES)
def test_forward_row_pattern_matches_reference(dtype, reduce, include_self, shape4):
    if reduce == "mul" and shape4[2] > (3 if dtype.startswith("int") else 30) * shape4[1]:
        pytest.skip("long products overflow (integers wrap) or underflow")
    if shape4[0] * shape4[2] * shape4[3] > 20000 and dtype not in ("float32", "float16", "int32"):
        pytest.skip("large shapes: one dtype per accumulation kind (GPU time)")
    arr, idx, vals = _row_inputs(dtype, shape4, index_dtype=np.int32 if shape4[3] == 12 else np.int64)
    _check_forward(dtype, reduce, arr, idx, vals, shape4, include_self)


@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("misaligned", [False, True])
def test_forward_row_pattern_with_rows_out_of_range(reduce, misaligned):
    # uniform rows aimed outside arr are skipped by the row table and the row passes alike; misaligned:
    # indices/values one element into their buffers (no packs: the scalar row passes)
    shape4 = (2, 50, 700, 12)
    arr, idx, vals = _row_inputs("float32", shape4, seed=5, out_of_range_rows=True)
    _check_forward("float32", reduce, arr, idx, vals, shape4, True, misaligned)


@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("broken", ["first", "late", "last"])
def test_forward_one_broken_row_falls_back_to_per_slot_passes(reduce, broken):
    # assign: one update row with a differing index raises the flag (found first, late after the scan has
    # polled it many times, or in the last row); the per-slot passes then give the exact per-slot result
    shape4 = (1, 300, 5000, 64)
    arr, idx, vals = _row_inputs("float32", shape4, seed=6)
    row = {"first": 0, "late": 3999, "last": shape4[2] - 1}[broken]
    idx[0, row, 17] = (idx[0, row, 17] + 1) % shape4[1]
    _check_forward("float32", reduce, arr, idx, vals, shape4, True)


def _check_backward(dtype, reduce, arr, idx, vals, shape4, include_self, misaligned=False):
    a64, v64 = arr.astype(dtype).astype(np.float64), vals.astype(dtype).astype(np.float64)
    g = np.random.default_rng(8).normal(size=arr.shape).astype(dtype).astype(np.float64)
    # out-of-range positions take no part: the reference aims them at a scratch row (zero grad), dropped after
    outer, n, m, inner = shape4
    pad = lambda x: np.concatenate([x, np.zeros((outer, 1, inner))], axis=1)  # noqa: E731
    ridx = np.where((idx >= -n) & (idx < n), idx % n if n else idx, n)
    out = refs.put_along_axis(pad(a64), ridx, v64, 1, reduce, include_self)[:, :n]
    got_a, got_v = _backward(dtype, reduce, arr, idx, vals, out, g, shape4, include_self, misaligned)
    ra, rv = refs.put_along_axis_grad(pad(a64), ridx, v64, pad(g), 1, reduce, include_self)
    ra = ra[:, :n]
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got_a, ra, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_v, rv, rtol=tol, atol=tol)


# (outer, n, m, inner): packs of 4 over G = 2, 64 features, no packs (inner 3), inner 1, no updates
BWD_ROW_SHAPES = [(2, 6, 40, 8), (1, 30, 120, 64), (2, 5, 30, 3), (1, 40, 500, 1), (2, 4, 0, 8)]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("shape4", BWD_ROW_SHAPES)
def test_backward_row_pattern_matches_reference(dtype, reduce, include_self, shape4):
    if shape4[3] == 64 and dtype != "float32":
        pytest.skip("64 features: float32 only (GPU time)")
    arr, idx, vals = _row_inputs("float64", shape4, seed=9)
    if dtype == "float16":
        a64, v64 = to_float64(host_array(arr, dtype), dtype), to_float64(host_array(vals, dtype), dtype)
        out = refs.put_along_axis(a64, idx, v64, 1, reduce, include_self)
        g = to_float64(host_array(np.random.default_rng(8).normal(size=arr.shape), dtype), dtype)
        got_a, got_v = _backward(dtype, reduce, a64, idx, v64, out, g, shape4, include_self)
        ra, rv = refs.put_along_axis_grad(a64, idx, v64, g, 1, reduce, include_self)
        np.testing.assert_allclose(got_a, ra, rtol=1e-2, atol=1e-2)
        np.testing.assert_allclose(got_v, rv, rtol=1e-2, atol=1e-2)
        return
    _check_backward(dtype, reduce, arr, idx, vals, shape4, include_self)


@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("case", ["broken row", "rows out of range", "misaligned", "int32 indices"])
def test_backward_row_pattern_variants(reduce, case):
    shape4 = (2, 6, 40, 8)
    arr, idx, vals = _row_inputs("float64", shape4, seed=10, out_of_range_rows=case == "rows out of range",
                                 index_dtype=np.int32 if case == "int32 indices" else np.int64)
    if case == "broken row":  # assign falls back to the per-slot winners
        idx[1, 33, 5] = (idx[1, 33, 5] + 1) % shape4[1]
    _check_backward("float32", reduce, arr, idx, vals, shape4, True, misaligned=case == "misaligned")


@pytest.mark.parametrize("reduce", ["assign", "add", "mean", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_backward_per_element_indices_with_packs(reduce, include_self):
    # independent indices with inner % 4 == 0: packs whose 4 indices differ take the scalar branch
    # (add), assign's scan raises the flag at once
    shape4 = (2, 9, 40, 8)
    arr, idx, vals = _inputs("float64", shape4, seed=12)
    idx[:, ::3] = idx[:, ::3, :1]  # some uniform rows among them
    _check_backward("float32", reduce, arr, idx, vals, shape4, include_self)


@pytest.mark.parametrize("reduce", ["assign", "add", "mean", "amin"])
def test_forward_runs_twice_on_the_same_scratch(reduce):
    # the launcher prepares assign's tables itself: a second call on used scratch gives the same result
    shape4 = (2, 50, 700, 12)
    arr, idx, vals = _row_inputs("float32", shape4, seed=13)
    lib = library()
    outer, n, m, inner = shape4
    winner = _winner_scratch(outer, n, inner) if reduce == "assign" else None
    results = []
    for _ in range(2):
        acc = DeviceBuffer(arr.astype(np.float32))
        count = DeviceBuffer(np.zeros(outer * n * inner, np.int32)) if reduce == "mean" else None
        check(lib.pe_put_along_axis_forward(DTYPE_CODES["float32"], INDEX_CODES[np.int64], REDUCE_CODES[reduce],
                                            _ptr(acc), _ptr(DeviceBuffer(vals.astype(np.float32))),
                                            _ptr(DeviceBuffer(idx)), _ptr(count), _ptr(winner), ctypes.c_int64(outer),
                                            ctypes.c_int64(n), ctypes.c_int64(m), ctypes.c_int64(inner), 1))
        results.append(acc.get())
    want = _fast_ref(arr.astype(np.float32).astype(np.float64), idx, vals.astype(np.float32).astype(np.float64),
                     reduce, True)
    np.testing.assert_allclose(results[0], want, rtol=2e-5, atol=2e-5)
    if reduce == "assign":
        np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("include_self", [True, False])
def test_backward_with_an_empty_axis_zeroes_values_grad(reduce, include_self):
    # arr of size 0 along the axis: every index is out of range, nothing is scattered, every value's grad
    # is 0 (mul's grads returned early and left values_grad unwritten)
    shape4 = (2, 0, 5, 4)
    arr, vals = np.zeros((2, 0, 4)), np.ones((2, 5, 4))
    idx = np.zeros((2, 5, 4), np.int64)
    got_a, got_v = _backward("float32", reduce, arr, idx, vals, arr, arr, shape4, include_self)
    assert got_a.shape == (2, 0, 4)
    np.testing.assert_array_equal(got_v, np.zeros(vals.shape))


@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
def test_backward_with_empty_rows_passes_grad_through(reduce):
    # inner == 0 (no positions, no slots) and m == 0 (no positions): nothing to read in the indices;
    # every slot is unwritten, so arr's grad is g
    for shape4 in [(2, 3, 5, 0), (2, 3, 0, 4)]:
        outer, n, m, inner = shape4
        arr, vals, idx = np.ones((outer, n, inner)), np.ones((outer, m, inner)), np.zeros((outer, m, inner), np.int64)
        g = np.arange(arr.size, dtype=np.float64).reshape(arr.shape)
        got_a, got_v = _backward("float32", reduce, arr, idx, vals, arr, g, shape4, True)
        np.testing.assert_array_equal(got_a, g)
        assert got_v.shape == vals.shape


# ------------------------------------------------------------------ few long rows, CAS chunks, keyed assign
# (outer, n, m, inner): few update rows of many features widen the row groups past a warp (up to a block of
# lanes per row); 1000 and 1030 features leave tails in the CAS chunks (lane + 256 u; 1030: a second chunk).
LONG_ROW_SHAPES = [(1, 8, 16, 1000), (2, 6, 12, 1030), (1, 16, 40, 256)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
@pytest.mark.parametrize("reduce", list(REDUCE_CODES))
@pytest.mark.parametrize("pattern", ["rows", "independent"])
@pytest.mark.parametrize("shape4", LONG_ROW_SHAPES)
def test_forward_few_long_rows_matches_reference(dtype, reduce, pattern, shape4):
    if reduce == "mul" and dtype == "int32" and pattern == "independent":
        pytest.skip("a slot's dozen factors can wrap int32 (the float64 reference does not)")
    make = _row_inputs if pattern == "rows" else _inputs
    arr, idx, vals = make(dtype, shape4, seed=14)
    _check_forward(dtype, reduce, arr, idx, vals, shape4, pattern == "rows")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "float64", "int64"])
@pytest.mark.parametrize("misaligned", [False, True])
def test_assign_per_slot_keys_carry_the_winners_bits(dtype, misaligned):
    # independent indices: one atomicMax of (position, value bits) per element for <= 4-byte types, the
    # position alone (then the winner's write) for 8-byte ones; the result is the winner's exact bits,
    # whatever they are (negative, -0.0, inf, NaN, the most negative integer)
    shape4 = (2, 50, 400, 12)
    arr, idx, vals = _inputs(dtype, shape4, seed=15)
    if dtype.startswith("int"):
        vals[:, ::5] = np.iinfo(dtype).min
        vals[:, 1::5] = -1
    else:
        vals[:, ::5] = -np.inf
        vals[:, 1::5] = -0.0
        vals[:, 2::5] = np.nan
    _check_forward(dtype, "assign", arr, idx, vals, shape4, True, misaligned)
    got = _forward(dtype, "assign", arr, idx, vals, shape4, True, misaligned)
    if not dtype.startswith("int"):  # -0.0 stays -0.0
        a64 = to_float64(host_array(arr, dtype), dtype)
        v64 = to_float64(host_array(vals, dtype), dtype)
        want = _fast_ref(a64, idx, v64, "assign", True)
        real = ~np.isnan(want)  # (a NaN's sign is not asserted: host rounding may canonicalise it)
        np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))
