"""logcumsumexp: the fast CPU kernel paths (blocked row scan, SIMD column scan, scalar fallbacks).

The CPU kernel cuts contiguous rows into chunks of 512 (cpu/logcumsumexp/scan.h, kChunk) and advances
strided axes 256 columns at a time (kColumns); chunks with NaN/+inf, or spanning more than 640 in log
space, take the exact scalar path. These tests put lengths, specials and wide ranges on and around
those boundaries, in every dtype and flag combination, for the forward and the backward.
"""

import zlib

import numpy as np
import paddle
import pytest

import paddle_ext
import refs

FLAGS = [(False, False), (True, False), (False, True), (True, True)]
ROW_LENGTHS = [1, 7, 511, 512, 513, 1024, 1500]


def _rand(shape, seed=0, scale=2.0):
    return np.random.default_rng(seed).normal(0, scale, size=shape)


def _run(x, axis, exclusive, reverse, dtype="float64"):
    t = paddle.to_tensor(x).astype(dtype)
    return paddle_ext.logcumsumexp(t, axis=axis, exclusive=exclusive, reverse=reverse).astype("float64").numpy()


def _grad(x, g, axis, exclusive, reverse, dtype="float64"):
    t = paddle.to_tensor(x).astype(dtype)
    t.stop_gradient = False
    out = paddle_ext.logcumsumexp(t, axis=axis, exclusive=exclusive, reverse=reverse)
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g).astype(dtype))
    return gx.astype("float64").numpy()


def _grad_ref_cumsum(x, g, axis, exclusive, reverse):
    """dx[j] = exp(x[j]) * sum_{i fed by j} g[i] exp(-out[i]) by float64 cumsums (well-scaled x only)."""
    out = refs.logcumsumexp(x, axis, exclusive, reverse)
    w = np.where(np.isfinite(out), g * np.exp(-np.where(np.isfinite(out), out, 0.0)), 0.0)
    w = np.moveaxis(w, axis, -1)
    if not reverse:
        w = w[..., ::-1]
    acc = np.cumsum(w, axis=-1)
    if exclusive:
        acc = np.concatenate([np.zeros_like(acc[..., :1]), acc[..., :-1]], axis=-1)
    if not reverse:
        acc = acc[..., ::-1]
    return np.exp(x) * np.moveaxis(acc, -1, axis)


def _assert_close_with_specials(got, ref, rtol, atol=0.0):
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isposinf(got), np.isposinf(ref))
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=atol)


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_rows_across_chunk_boundaries_float64(n, exclusive, reverse):
    x = _rand((3, n), seed=n)
    np.testing.assert_allclose(_run(x, 1, exclusive, reverse), refs.logcumsumexp(x, 1, exclusive, reverse),
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape,axis", [((3, 1500, 1), 1), ((2, 300, 37), 1), ((2, 50, 300), 1), ((600, 5), 0),
                                        ((4, 3, 520), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_strided_axes_float64(shape, axis, exclusive, reverse):
    x = _rand(shape, seed=1)
    np.testing.assert_allclose(_run(x, axis, exclusive, reverse), refs.logcumsumexp(x, axis, exclusive, reverse),
                               rtol=1e-13, atol=1e-13)


def _with_specials(shape, axis, seed):
    """Normal data with -inf runs, NaN, +inf and a huge dynamic range at chunk-internal and boundary spots."""
    x = _rand(shape, seed=seed, scale=3.0)
    moved = np.moveaxis(x, axis, -1).copy()
    n = moved.shape[-1]
    xm = moved.reshape(-1, n)  # one line per row, a view of `moved`
    xm[0, : min(n, 600)] = -np.inf  # a prefix of -inf longer than one chunk
    if xm.shape[0] > 1:
        xm[1, n // 3] = np.nan
    if xm.shape[0] > 2:
        xm[2, min(n - 1, 511)] = np.inf
    if xm.shape[0] > 3:
        xm[3, ::7] = -np.inf  # -inf scattered inside chunks: stays on the fast path
    if xm.shape[0] > 4:
        xm[4, n // 2] = 900.0  # > 640 above its neighbours: the exact path for that chunk
        xm[4, n // 2 + 1] = -900.0
    if xm.shape[0] > 5:
        xm[5, :] = -np.inf
    return np.ascontiguousarray(np.moveaxis(moved, -1, axis))


@pytest.mark.parametrize("shape,axis", [((7, 1100), 1), ((7, 40), 1), ((1100, 7), 0), ((2, 300, 7), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_specials_inside_chunks_and_lanes(shape, axis, exclusive, reverse, dtype):
    x = _with_specials(shape, axis, seed=2)
    if len(shape) == 3:
        x[:, 0, 0] = np.nan
        x[:, 5, 3] = np.inf
    x = x.astype(dtype).astype(np.float64)
    got = _run(x, axis, exclusive, reverse, dtype)
    ref = refs.logcumsumexp(x, axis, exclusive, reverse)
    _assert_close_with_specials(got, ref, rtol=1e-13 if dtype == "float64" else 1e-6, atol=1e-12)


@pytest.mark.parametrize("shape,axis", [((16, 4096), 1), ((4096, 16), 0), ((1, 1 << 18), 1), ((3, 700, 300), 1)])
def test_float32_relative_error_per_element(shape, axis):
    # Every element, including those near out == 0, within 1e-6 of the float64 result (rounding: 6e-8).
    x = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    got = _run(x, axis, False, False, "float32")
    ref = refs.logcumsumexp(x.astype(np.float64), axis)
    assert np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)) <= 1e-6


@pytest.mark.parametrize("dtype,rtol", [("float16", 1e-3), ("bfloat16", 8e-3)])
@pytest.mark.parametrize("shape,axis", [((3, 1030), 1), ((600, 40), 0)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_half_types_long_axes(dtype, rtol, shape, axis, exclusive, reverse):
    x = _rand(shape, seed=4)
    x[0, 5] = -np.inf
    xt = paddle.to_tensor(x).astype(dtype)
    x_rounded = xt.astype("float64").numpy()
    got = _run(x_rounded, axis, exclusive, reverse, dtype)
    ref = refs.logcumsumexp(x_rounded, axis, exclusive, reverse)
    _assert_close_with_specials(got, ref, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape,axis", [((3, 1100), 1), ((1100, 3), 0), ((2, 600, 37), 1), ((2, 9, 300), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-11), ("float32", 1e-5)])
def test_backward_long_axes(shape, axis, exclusive, reverse, dtype, rtol):
    x = _rand(shape, seed=5, scale=1.0)
    g = _rand(shape, seed=6, scale=1.0)
    x, g = x.astype(dtype).astype(np.float64), g.astype(dtype).astype(np.float64)
    got = _grad(x, g, axis, exclusive, reverse, dtype)
    np.testing.assert_allclose(got, _grad_ref_cumsum(x, g, axis, exclusive, reverse), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("shape,axis", [((7, 40), 1), ((40, 7), 0), ((7, 530), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_with_specials_matches_brute_force(shape, axis, exclusive, reverse):
    x = _rand(shape, seed=7, scale=2.0)
    xm = np.moveaxis(x, axis, -1)
    xm[0, :3] = -np.inf
    xm[1, 10] = -np.inf
    xm[2, :] = -np.inf
    xm[3, 20] = 700.0  # a wide range inside one chunk
    g = _rand(shape, seed=8, scale=1.0)
    gm = np.moveaxis(g, axis, -1)
    gm[4, ::3] = 0.0
    gm[5, :] = -np.abs(gm[5, :])
    got = _grad(x, g, axis, exclusive, reverse)
    if shape[axis] > 100:  # the O(n^2) reference is slow: compare the rows without huge values by cumsum
        rows = [0, 1, 2, 4, 5]
        np.testing.assert_allclose(got[rows], _grad_ref_cumsum(x[rows], g[rows], axis, exclusive, reverse),
                                   rtol=1e-11, atol=1e-11)
        assert np.isfinite(got).all() and np.all(got[np.isneginf(x)] == 0.0)
        return
    ref = refs.logcumsumexp_grad(x, g, axis, exclusive, reverse)
    assert np.all(got[np.isneginf(x)] == 0.0)
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_nan_and_inf_agree_between_row_and_column_kernels(exclusive, reverse):
    # The row kernel (chunks, scalar path for the special chunk) and the column kernel (SIMD lanes,
    # scalar steps after a special) are independent implementations of the same semantics.
    x = _rand((3, 1030), seed=9)
    x[0, 700] = np.nan
    x[1, 300] = np.inf
    x[2, 100:103] = -np.inf
    g = _rand((3, 1030), seed=10)
    rows = _grad(x, g, 1, exclusive, reverse)
    cols = _grad(np.ascontiguousarray(x.T), np.ascontiguousarray(g.T), 0, exclusive, reverse).T
    np.testing.assert_allclose(rows, cols, rtol=1e-12, atol=1e-12)  # NaNs compare equal
    # NaN reaches every input that fed an output (exclusive: the last input in scan order feeds none).
    assert np.isnan(rows[0]).sum() == (1029 if exclusive else 1030)
    assert np.all(rows[2, 100:103] == 0.0) and np.isfinite(rows[2]).all()
    if not exclusive and not reverse:  # +inf: outputs from it on are +inf and pass no gradient back
        np.testing.assert_allclose(rows[1, :300], _grad(x[1:2, :300], g[1:2, :300], 1, False, False)[0], rtol=1e-12,
                                   atol=1e-13)  # exp(x + L+) - exp(x + L-) cancels
        assert np.all(rows[1, 300:] == 0.0)


def test_flattened_long_tensor_float32():
    x = np.random.default_rng(11).normal(size=(3, 70001)).astype(np.float32)
    got = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy().astype(np.float64)
    ref = refs.logcumsumexp(x.astype(np.float64).reshape(-1), 0)
    assert np.max(np.abs(got - ref) / np.abs(ref).clip(1e-30)) <= 1e-6


@pytest.mark.skipif(bool(__import__("os").environ.get("PADDLE_EXT_SIMD_SUBPROCESS")), reason="already a subprocess")
@pytest.mark.parametrize("level", ["avx2", "sse2"])
def test_narrower_simd_paths(level):
    # The kernels are compiled for AVX-512, AVX2 and SSE2 and picked at run time; PADDLE_EXT_SIMD caps the
    # choice, so the narrower paths run here too (in a subprocess: the choice is made once per process).
    import os
    import subprocess
    import sys

    tests = "test_rows_across_chunk_boundaries_float64 or test_strided_axes_float64 or specials or float32_relative " \
            "or half_types or backward or complex"
    env = dict(os.environ, PADDLE_EXT_SIMD=level, PADDLE_EXT_SIMD_SUBPROCESS="1")
    result = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", tests],
                            env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.parametrize("special", [None, "nan_first_part", "inf_first_part", "neg_inf_prefix", "wide"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_single_long_row_split_over_threads(special, exclusive, reverse):
    # One row of >= 2^16 is scanned by two threads: the second reduces the first part to a carry.
    n = 70000
    x = _rand((n,), seed=12)
    pos = (lambda i: i) if not reverse else (lambda i: n - 1 - i)  # scan-order position -> index
    if special == "nan_first_part":
        x[pos(1000)] = np.nan
    elif special == "inf_first_part":
        x[pos(40000)] = np.inf
    elif special == "neg_inf_prefix":
        x[[pos(i) for i in range(50000)]] = -np.inf
    elif special == "wide":
        x[pos(47000)] = 800.0
    got = _run(x.reshape(1, n), 1, exclusive, reverse)[0]
    _assert_close_with_specials(got, refs.logcumsumexp(x, 0, exclusive, reverse), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,axis", [((3, 1037), 1), ((1037, 3), 0), ((2, 77, 19), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_half_types_round_once_like_float32(dtype, shape, axis, exclusive, reverse):
    # The 16-bit loads/stores are vectorized bit arithmetic: the half result must be exactly the float32
    # result rounded to the half type (both are computed from the same doubles).
    x = _rand(shape, seed=13, scale=4.0)
    flat = x.reshape(-1)
    flat[::97] = 1e-6  # subnormal halves
    flat[5::101] = -3e4
    flat[7] = np.nan
    flat[11] = -np.inf
    flat[13] = 6e4  # outputs near the half's overflow
    xt = paddle.to_tensor(x).astype(dtype)
    got = paddle_ext.logcumsumexp(xt, axis=axis, exclusive=exclusive, reverse=reverse)
    via32 = paddle_ext.logcumsumexp(xt.astype("float32"), axis=axis, exclusive=exclusive, reverse=reverse).astype(dtype)
    a, b = got.astype("float32").numpy(), via32.astype("float32").numpy()
    assert np.array_equal(np.isnan(a), np.isnan(b))
    assert np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)])


@pytest.mark.parametrize("data", ["normal", "log_cdf", "shifted", "wide"])
@pytest.mark.parametrize("shape,axis", [((40, 3000), 1), ((1, 200000), 1), ((3000, 40), 0), ((4, 300, 37), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_float32_lanes_stay_within_1e6(data, shape, axis, exclusive, reverse):
    # float32 is scanned in float lanes with a per-output error bound; what the bound rejects is redone
    # in double (a vector while the carry is exact, else the whole line or column group). log_cdf makes
    # outputs approach 0 late in every line (the double rescan), "normal" near the start (the redo).
    rng = np.random.default_rng(21)
    if data == "log_cdf":
        p = rng.random(shape)
        x = np.log(p / p.sum(axis=axis, keepdims=True))
    else:
        x = rng.normal(0, {"normal": 1.0, "shifted": 1.0, "wide": 40.0}[data], size=shape)
        x -= 8.0 if data == "shifted" else 0.0
    x = x.astype(np.float32)
    got = _run(x, axis, exclusive, reverse, "float32")
    ref = refs.logcumsumexp(x.astype(np.float64), axis, exclusive, reverse)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    # Outputs within 1e-5 of 0 are computed in double (~1e-13 absolute): compare those absolutely.
    rel = np.abs(got[finite] - ref[finite]) / np.maximum(np.abs(ref[finite]), 1e-5)
    assert rel.max() <= 1e-6, rel.max()


# --- the backward on wide ranges: exponents near the overflow limit, exclusive scans -----------------

def _grad_with_out(x, g, axis, exclusive, reverse, dtype):
    """The kernel's grad and the forward output (in its dtype) that the backward was given."""
    t = paddle.to_tensor(x).astype(dtype)
    t.stop_gradient = False
    out = paddle_ext.logcumsumexp(t, axis=axis, exclusive=exclusive, reverse=reverse)
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g).astype(dtype))
    return gx.astype("float64").numpy(), out.astype("float64").numpy()


@pytest.mark.parametrize("x,axis,expected", [
    ([[0.0, 0.0], [710.0, 0.0]], 0, [[1.0, 1.0], [0.0, 0.0]]),
    ([[0.0, 710.0], [0.0, 0.0]], 1, [[1.0, 0.0], [1.0, 0.0]]),
    ([[0.0, 0.0], [1e4, 0.0]], 0, [[1.0, 1.0], [0.0, 0.0]]),
])
def test_backward_exclusive_input_far_above_earlier_outputs_issue_12(x, axis, expected):
    # The last input of an exclusive scan feeds no output: its grad is 0 however large it is.
    got = _grad(np.array(x), np.ones((2, 2)), axis, True, False)
    np.testing.assert_array_equal(got, expected)


def _wide_data(rng, shape, kind):
    x = rng.normal(0, 2, size=shape)
    if kind == "spread":
        x = rng.uniform(-700, 700, size=shape)
    elif kind == "spikes":
        spikes = rng.random(shape) < 0.2
        x[spikes] = rng.choice([-1e4, 1e4, 710.0, -710.0], size=spikes.sum()) + rng.normal(0, 1, size=spikes.sum())
    elif kind == "neg_inf":
        x = rng.uniform(-700, 700, size=shape)
        x[rng.random(shape) < 0.3] = -np.inf
    return x


WIDE_SHAPES = [((1, 1, 15, 2), 2), ((37,), 0), ((3, 40), 1), ((40, 3), 0), ((2, 30, 5), 1), ((9, 300), 0),
               ((2, 1100), 1), ((1100, 2), 0)]


@pytest.mark.parametrize("kind", ["spread", "spikes", "neg_inf"])
@pytest.mark.parametrize("shape,axis", WIDE_SHAPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_backward_wide_range_sweep(kind, shape, axis, exclusive, reverse, dtype):
    # Rows (inner == 1: 512-chunks, linear form with the scalar fallback) and strided axes (lanes of
    # 256 columns); compared with the exact O(n) log-domain reference given the same forward output,
    # so only the backward's own arithmetic is measured.
    rng = np.random.default_rng(zlib.crc32(repr((kind, shape, exclusive, reverse)).encode()))
    x = _wide_data(rng, shape, kind)
    if dtype in ("float16", "bfloat16"):
        x = np.clip(x, -6e4, 6e4)
    x = paddle.to_tensor(x).astype(dtype).astype("float64").numpy()  # what the kernel sees
    g = rng.normal(0, 1, size=shape) if dtype in ("float64", "float32") else rng.uniform(0.5, 2, size=shape)
    g = paddle.to_tensor(g).astype(dtype).astype("float64").numpy()
    got, out = _grad_with_out(x, g, axis, exclusive, reverse, dtype)
    ref = refs.logcumsumexp_grad_scan(x, g, axis, exclusive, reverse, out=out)
    assert np.isfinite(got).all()
    assert np.all(got[np.isneginf(x)] == 0.0)
    # exp(x + M) with x and M of size |x| rounds its exponent at ulp(max |x|) (so does the reference);
    # narrower dtypes use ~1e-13 exps, then round once to the dtype. Signed g can cancel: an absolute
    # part proportional to the line's sum of |g|.
    scale = max(1.0, np.abs(x[np.isfinite(x)]).max(initial=0.0))
    arith = 64 * 2.0 ** -52 * scale + (0.0 if dtype == "float64" else 1e-12)
    rtol = arith + {"float64": 0.0, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
    tiny = {"float64": 0.0, "float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}[dtype]
    atol = arith * np.abs(g).sum(axis=axis, keepdims=True) + tiny  # (+ the dtype's smallest subnormal)
    bad = np.abs(got - ref) > atol + rtol * np.abs(ref)
    assert not bad.any(), (np.argwhere(bad)[:5], got[bad][:5], ref[bad][:5])
    if dtype == "float64" and shape[axis] <= 40:  # and the O(n) reference equals the brute-force sum
        np.testing.assert_allclose(ref, refs.logcumsumexp_grad(x, g, axis, exclusive, reverse), rtol=rtol,
                                   atol=np.abs(g).sum() * rtol)


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_complex_lines_mixing_linear_and_sequential_chunks(exclusive, reverse, dtype):
    # The complex CPU kernels scan eight lines side by side, 64 steps a chunk, in linear form; a line's chunk
    # with NaN, +inf, a phase past the SIMD sincos's range or nearly cancelling terms runs the sequential scan
    # from its carry while its neighbours stay linear. Rows and columns (and a ragged last block of lines)
    # against the sequential reference, and against each other.
    import fuzz_cases_complex as fcc

    rng = np.random.default_rng(12)
    x = rng.normal(size=(11, 200)) + 1j * rng.uniform(-np.pi, np.pi, size=(11, 200))
    x[0, 70] = complex(np.nan, 0.5)
    x[1, 130] = complex(np.inf, 1.0)
    x[2, 10:80] = complex(-np.inf, 2.0)
    x[3, 64] = complex(1.0, 3e6)
    x[4, 90:96] = [0, 1j * np.pi, 0, 1j * np.pi, 0.5j * np.pi, -0.5j * np.pi]  # terms that nearly cancel
    x[5, 100] = 800.0  # the running max jumps past exp's range
    x[6] *= 700.0
    x[7] += 1j * rng.uniform(-1e4, 1e4, size=200)
    x[8, 150:] = -1e4
    x = x.astype(dtype).astype(np.complex128)
    g = (rng.normal(size=x.shape) + 1j * rng.normal(size=x.shape)).astype(dtype).astype(np.complex128)
    results = []
    for axis, xs, gs in ((1, x, g), (0, np.ascontiguousarray(x.T), np.ascontiguousarray(g.T))):
        t = paddle.to_tensor(xs).astype(dtype)
        t.stop_gradient = False
        out = paddle_ext.logcumsumexp(t, axis=axis, exclusive=exclusive, reverse=reverse)
        (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(gs).astype(dtype))
        ref = refs.logcumsumexp(xs, axis, exclusive, reverse)
        fcc.assert_complex_matches(out.numpy(), ref, fcc.forward_bound(xs, ref, axis, exclusive, reverse, dtype), "out")
        ref_g = refs.logcumsumexp_grad(xs, gs, axis, exclusive, reverse)
        fcc.assert_complex_matches(gx.numpy(), ref_g, fcc.grad_bound(xs, gs, ref, ref_g, axis, exclusive, reverse, dtype),
                                   "grad", phase=False)
        results.append((out.numpy(), gx.numpy()) if axis == 1 else (out.numpy().T, gx.numpy().T))
    for a, b in zip(*results):  # NaNs compare equal
        np.testing.assert_allclose(a, b, rtol=1e-12 if dtype == "complex128" else 1e-6, atol=1e-300)
