"""logcumsumexp CUDA launchers on a real GPU, against the NumPy reference (skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import fuzz_cases_complex as fcc
import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 2e-2}
# (512, 2100, 1) and (1, 260, 4096): float32 takes the float tiles, float16/bfloat16 the one-warp-per-row
# and column-segment kernels (faster for 16-bit where they fill the device).
SHAPES = [((1, 1, 1), 1), ((3, 1000, 1), 1), ((2, 5000, 1), 1), ((1, 1 << 16, 1), 1), ((4, 37, 65), 1),
          ((1, 300, 1024), 1), ((0, 5, 1), 1), ((512, 2100, 1), 1), ((1, 260, 4096), 1)]
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


def _assert_same_specials_and_close(got, ref, dtype):
    """NaN, +inf and -inf exactly where the reference has them; the finite values within tolerance."""
    for check in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(check(got), check(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=TOL[dtype], atol=TOL[dtype])


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


# The row kernel scans tiles of 1024 in linear form and falls back to the exact log-add-exp scan for
# tiles holding NaN/+inf or too wide a range: put those on and across tile boundaries.
def _specials_rows(rows, n, seed):
    x = np.random.default_rng(seed).normal(0, 3, size=(rows, n))
    x[0, :1500] = -np.inf  # a -inf prefix longer than a tile
    x[1, n // 2] = np.nan
    x[2, 2047] = np.inf
    x[3, ::5] = -np.inf  # scattered -inf: stays linear
    x[4, 2000] = 700.0  # a range no exp(x - M) can span: exact path for that tile
    x[4, 2001] = -700.0
    x[5, :] = -np.inf
    return x


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_rows_with_specials_across_tiles(dtype, exclusive, reverse):
    x = _specials_rows(7, 3000, seed=3)
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], (7, 3000, 1), exclusive, reverse)
    ref = refs.logcumsumexp(x64.reshape(7, 3000), 1, exclusive, reverse).reshape(7, 3000, 1)
    got = got.reshape(7, 3000, 1)
    _assert_same_specials_and_close(got, ref, dtype)


def _grad_ref_cumsum(x, g, exclusive, reverse):
    """dx[j] = exp(x[j]) * sum over outputs i fed by j of g[i] exp(-out[i]) (float64 cumsums, well-scaled x)."""
    out = refs.logcumsumexp(x, 1, exclusive, reverse)
    w = np.where(np.isfinite(out), g * np.exp(-np.where(np.isfinite(out), out, 0.0)), 0.0)
    w = w if reverse else w[:, ::-1]
    acc = np.cumsum(w, axis=1)
    if exclusive:
        acc = np.concatenate([np.zeros_like(acc[:, :1]), acc[:, :-1]], axis=1)
    acc = acc if reverse else acc[:, ::-1]
    return np.exp(x) * acc


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_rows_long_and_special(dtype, exclusive, reverse):
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, size=(4, 2500))
    x[0, :3] = -np.inf
    x[1, 1200:1300] = -np.inf
    g = rng.normal(size=(4, 2500))
    g[2, ::3] = 0.0
    g[3] = -np.abs(g[3])
    x = to_float64(host_array(x, dtype), dtype)
    g = to_float64(host_array(g, dtype), dtype)
    out = refs.logcumsumexp(x, 1, exclusive, reverse)
    got = _run("pe_logcumsumexp_backward", dtype, [x, out, g], (4, 2500, 1), exclusive, reverse).reshape(4, 2500)
    assert np.all(got[np.isneginf(x)] == 0.0)
    np.testing.assert_allclose(got, _grad_ref_cumsum(x, g, exclusive, reverse), rtol=TOL[dtype] * 10,
                               atol=TOL[dtype] * 10)


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_rows_nan_and_inf_take_the_exact_path(exclusive, reverse):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 2100))
    x[0, 1500] = np.nan
    g = rng.normal(size=(2, 2100))
    out = refs.logcumsumexp(x, 1, exclusive, reverse)
    got = _run("pe_logcumsumexp_backward", "float64", [x, out, g], (2, 2100, 1), exclusive, reverse).reshape(2, 2100)
    assert np.isnan(got[0]).sum() == (2099 if exclusive else 2100)  # NaN reaches every input that fed an output
    np.testing.assert_allclose(got[1], _grad_ref_cumsum(x[1:], g[1:], exclusive, reverse)[0], rtol=1e-11, atol=1e-11)
    got16 = _run("pe_logcumsumexp_backward", "float16", [x[1:], out[1:], g[1:]], (1, 2100, 1), exclusive, reverse)
    ref = _grad_ref_cumsum(x[1:], g[1:], exclusive, reverse).reshape(got16.shape)
    np.testing.assert_allclose(got16, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("shape3", [(1, 600, 64), (2, 300, 45), (3, 50, 7)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_strided_forward_and_backward(dtype, shape3, exclusive, reverse):
    # (1, 600, 64) and (2, 300, 45) split each column's axis over the threads of a block; (3, 50, 7) does not.
    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, size=shape3)
    x[0, 7, 3] = -np.inf
    g = rng.normal(size=shape3)
    x = to_float64(host_array(x, dtype), dtype)
    g = to_float64(host_array(g, dtype), dtype)
    out = refs.logcumsumexp(x, 1, exclusive, reverse)
    got = _run("pe_logcumsumexp_forward", dtype, [x], shape3, exclusive, reverse)
    finite = np.isfinite(out)
    assert np.array_equal(np.isneginf(got), np.isneginf(out))
    np.testing.assert_allclose(got[finite], out[finite], rtol=TOL[dtype], atol=TOL[dtype])
    o, n, c = shape3
    rows = lambda a: np.ascontiguousarray(np.moveaxis(a, 1, 2).reshape(o * c, n))  # noqa: E731
    ref = _grad_ref_cumsum(rows(x), rows(g), exclusive, reverse).reshape(o, c, n).transpose(0, 2, 1)
    got = _run("pe_logcumsumexp_backward", dtype, [x, out, g], shape3, exclusive, reverse)
    tol = TOL[dtype] * 10 if dtype != "float16" else 2e-2
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    assert got[0, 7, 3] == 0.0


# A few rows longer than a chunk (16384) are split over blocks: chunk sums, then each chunk scanned from
# the chunks before it. 40000 = two full chunks and a partial one, so `reverse` starts on the partial one.
def _specials_long_rows():
    x = np.random.default_rng(7).normal(0, 3, size=(5, 40000))
    x[0, :20000] = -np.inf  # a -inf prefix longer than a chunk
    x[1, 16384] = np.nan  # first element of the second chunk
    x[2, 32767] = np.inf  # last element of the second chunk
    x[3, 16383] = 700.0  # an exact-path tile at a chunk edge
    return x


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_long_rows_split_into_chunks(dtype, exclusive, reverse):
    x = _specials_long_rows()
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], (5, 40000, 1), exclusive, reverse).reshape(5, 40000)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_long_rows_split_into_chunks(dtype, exclusive, reverse):
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, size=(3, 40000))
    x[0, :17000] = -np.inf
    g = rng.normal(size=(3, 40000))
    g[1, 16384:32768] = 0.0  # a chunk that contributes nothing
    x = to_float64(host_array(x, dtype), dtype)
    g = to_float64(host_array(g, dtype), dtype)
    out = refs.logcumsumexp(x, 1, exclusive, reverse)
    got = _run("pe_logcumsumexp_backward", dtype, [x, out, g], (3, 40000, 1), exclusive, reverse).reshape(3, 40000)
    assert np.all(got[np.isneginf(x)] == 0.0) and not np.isnan(got).any()
    np.testing.assert_allclose(got, _grad_ref_cumsum(x, g, exclusive, reverse), rtol=TOL[dtype] * 10,
                               atol=TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape3", [(1, 600, 64), (3, 50, 7)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_strided_forward_with_specials(dtype, shape3, exclusive, reverse):
    x = np.random.default_rng(9).normal(0, 3, size=shape3)
    x[0, 10, 5] = np.nan
    x[0, 20, 6] = np.inf
    x[0, :30, 4] = -np.inf
    x[0, 40, 3], x[0, 41, 3] = 700.0, -700.0
    x[-1, :, 2] = -np.inf
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], shape3, exclusive, reverse)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)


# Many rows (>= 512, up to 16384 long) take one warp per row: 256 positions per step, vector loads where a
# lane's 8 items are aligned (n = 512) and scalar loads where they are not (n = 301).
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [301, 512])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_many_rows_one_warp_each(dtype, n, exclusive, reverse):
    x = np.random.default_rng(10).normal(0, 3, size=(600, n))
    x[0, :200] = -np.inf  # a -inf prefix longer than a warp step
    x[1, 150] = np.nan
    x[2, 255] = np.inf  # the last item of the first step
    x[3, ::5] = -np.inf
    x[4, 200], x[4, 201] = 700.0, -700.0  # a range no exp(x - M) spans: exact step
    x[5, :] = -np.inf
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], (600, n, 1), exclusive, reverse).reshape(600, n)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape3", [(2, 2500, 1), (3, 40, 1), (1, 15, 2), (1, 600, 64), (3, 50, 7)])
@pytest.mark.parametrize("kind", ["spread", "spikes"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_backward_wide_ranges(dtype, shape3, kind, exclusive, reverse):
    # Inputs up to +-700 (or +-1e4 spikes): exp(x - out) of an exclusive scan's input against the outputs
    # it does not feed would overflow; rows take the exact tile scan there, columns are log-domain.
    rng = np.random.default_rng(31)
    x = rng.uniform(-700, 700, size=shape3) if kind == "spread" else rng.normal(0, 2, size=shape3)
    if kind == "spikes":
        pick = rng.random(shape3) < 0.2
        x[pick] = rng.choice([-1e4, 1e4, 710.0, -710.0], size=pick.sum())
    x[0, 0, 0] = -np.inf
    g = rng.normal(size=shape3)
    x = to_float64(host_array(x, dtype), dtype)
    g = to_float64(host_array(g, dtype), dtype)
    out = to_float64(host_array(refs.logcumsumexp(x, 1, exclusive, reverse), dtype), dtype)
    got = _run("pe_logcumsumexp_backward", dtype, [x, out, g], shape3, exclusive, reverse)
    ref = refs.logcumsumexp_grad_scan(x, g, 1, exclusive, reverse, out=out)
    assert np.isfinite(got).all() and got[0, 0, 0] == 0.0
    scale = np.abs(x[np.isfinite(x)]).max()
    rtol = 64 * 2.0 ** -52 * scale + (0.0 if dtype == "float64" else 2e-6)
    atol = rtol * np.abs(g).sum(axis=1, keepdims=True) + (2.0 ** -149 if dtype == "float32" else 0.0)
    assert np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref))


# float32/float16/bfloat16 rows of >= 2048 take float tiles of 4096 with a decoupled look-back (the carry
# from the tiles before, in double): float exps and sums with an error bound per output; outputs it cannot
# certify to 1e-6 are redone in double (the positions up to the last failing one while the carry is exact
# or large enough, else the whole row). Each row below selects one path. A warp loads and stores its
# positions as 16-byte vectors, lane after lane: n = 12288 takes vectors only; 12388 ends on a partial
# tile (half rows: every other row misaligned, a vector across the end); 12390 does so in float32 too.
TILE = 4096


def _tile_rows(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, size=(13, n))
    x[0, :5000] = -np.inf  # a whole -inf tile, then one starting with -inf
    x[1, TILE + 17] = np.nan  # an exact tile in the middle; the NaN carry makes later tiles exact
    x[2, TILE - 1] = np.inf  # last position of the first tile: a +inf carry
    x[3, 2 * TILE + 5], x[3, 2 * TILE + 6] = 700.0, -700.0  # a range float exp cannot span: exact tile
    x[4, :TILE] -= 200.0  # the carry far below the next tile: its outputs take the exact scan
    x[5, :TILE] += 200.0  # far above: linear outputs, the tile's scale underflows to 0
    x[6, TILE:2 * TILE] = -np.inf  # an all -inf tile after a finite carry: every output is the carry
    x[7, :] = -np.inf
    x[8] = rng.normal(0, 1, size=n)
    x[8, TILE + 2000] = 70.0  # outputs before the spike fail the float bound: redone from the inexact carry
    x[9] = rng.normal(0, 1, size=n)
    x[9] -= np.logaddexp.reduce(x[9])  # log-probabilities: late outputs near 0, the row is rescanned
    x[10] = rng.normal(-9, 1, size=n)  # the outputs cross 0 in the second tile: rescanned
    x[11, ::7] = -np.inf  # scattered -inf stays linear
    x[12, TILE:] = x[12, TILE - 1]  # ties across tiles
    return x


def _max_rel_err(got, ref):
    finite = np.isfinite(ref)
    return float(np.max(np.abs(got[finite] - ref[finite]) / np.abs(ref[finite]).clip(1e-30)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [12288, 12388, 12390])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_float_tiles_every_path(dtype, n, exclusive, reverse):
    x = _tile_rows(n, seed=11)
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], (13, n, 1), exclusive, reverse).reshape(13, n)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)
    if dtype == "float32":
        assert _max_rel_err(got, ref) <= 1e-6


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_float32_tiles_within_1e6_on_many_rows(exclusive, reverse):
    # One tile per row (no look-back): the first outputs of nearly every row are near 0 and are redone in
    # double; a relative error above 1e-6 there means the redo did not happen or was wrong.
    x = np.random.default_rng(12).normal(0, 3, size=(600, TILE)).astype(np.float32)
    x[:, 0] = np.linspace(-1e-3, 1e-3, 600)  # first outputs as small as 1e-6
    got = _run("pe_logcumsumexp_forward", "float32", [x], (600, TILE, 1), exclusive, reverse).reshape(600, TILE)
    ref = refs.logcumsumexp(x.astype(np.float64), 1, exclusive, reverse)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    assert _max_rel_err(got, ref) <= 1e-6


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_float_tiles_long_rows_look_back_far(dtype, exclusive, reverse):
    # 3 rows of 64 tiles: a tile's look-back spans many windows of 32 tiles when its neighbours are slow.
    x = np.random.default_rng(13).normal(0, 2, size=(3, 64 * TILE + 3))
    x[1, : 40 * TILE] = -np.inf
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], (3, x.shape[1], 1), exclusive, reverse).reshape(x.shape)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)
    if dtype == "float32":
        assert _max_rel_err(got, ref) <= 1e-6


# A strided axis (inner >= 32, n >= 256) in float32/float16/bfloat16 takes column tiles: 32 columns x 128
# steps, a carry per column, every decision per column. Columns get the patterns of the row tiles above
# (on 128-step tiles); inner = 45 leaves 19 idle lanes in the second column group, n = 1000 ends on a
# partial tile.
CTILE = 128


def _column_patterns(n, inner, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, size=(n, inner))
    x[:300, 0] = -np.inf  # two whole -inf tiles, then one starting with -inf
    x[CTILE + 17, 1] = np.nan
    x[CTILE - 1, 2] = np.inf
    x[2 * CTILE + 5, 3], x[2 * CTILE + 6, 3] = 700.0, -700.0
    x[:CTILE, 4] -= 200.0  # carry far below the next tile
    x[:CTILE, 5] += 200.0  # far above
    x[CTILE:2 * CTILE, 6] = -np.inf  # an all -inf tile after a finite carry
    x[:, 7] = -np.inf
    x[:, 8] = rng.normal(0, 1, size=n)
    x[CTILE + 60, 8] = 70.0  # a spike: the outputs before it are redone from the inexact carry
    x[:, 9] = rng.normal(0, 1, size=n)
    x[:, 9] -= np.logaddexp.reduce(x[:, 9])  # log-probabilities: rescanned
    x[:, 10] = rng.normal(-6, 1, size=n)  # outputs cross 0 after the first tile: rescanned
    x[::7, 11] = -np.inf
    x[CTILE:, 12] = x[CTILE - 1, 12]
    x[:, 33] = np.linspace(-1e-3, 1e-3, n)  # outputs near 0 in the first tile: redone exactly
    return x


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape3", [(2, 1000, 45), (1, 384, 64)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_column_tiles_every_path(dtype, shape3, exclusive, reverse):
    outer, n, inner = shape3
    x = np.stack([_column_patterns(n, inner, seed=20 + o) for o in range(outer)])
    x64 = to_float64(host_array(x, dtype), dtype)
    got = _run("pe_logcumsumexp_forward", dtype, [x], shape3, exclusive, reverse)
    ref = refs.logcumsumexp(x64, 1, exclusive, reverse)
    _assert_same_specials_and_close(got, ref, dtype)
    if dtype == "float32":
        assert _max_rel_err(got, ref) <= 1e-6


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_float32_column_tiles_within_1e6(exclusive, reverse):
    # Axis 0 of [2048, 512]: 16 step tiles per column group, 16 groups.
    x = np.random.default_rng(21).normal(0, 3, size=(1, 2048, 512)).astype(np.float32)
    got = _run("pe_logcumsumexp_forward", "float32", [x], x.shape, exclusive, reverse)
    ref = refs.logcumsumexp(x.astype(np.float64), 1, exclusive, reverse)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    assert _max_rel_err(got, ref) <= 1e-6


# ---------------------------------------------------------------------------------------------- complex
# complex64/complex128 (gpu/logcumsumexp/complex.cu): one warp per contiguous row (shuffle scan), one thread
# per strided line; both accumulate in complex128. Compared as the fuzz suite compares them (the error scaled
# by the sum's condition number), the forward's imaginary parts on the sequential scan's branch, as the CPU
# kernels have them (not modulo 2 pi).
COMPLEX_SHAPES = [((1, 1, 1), 1), ((3, 31, 1), 1), ((5, 33, 1), 1), ((2, 1000, 1), 1), ((300, 64, 1), 1),
                  ((4, 37, 65), 1), ((1, 300, 1024), 1), ((0, 5, 1), 1), ((3, 0, 4), 1)]


def _complex_input(shape3, seed, phase=np.pi):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 3, size=shape3) + 1j * rng.uniform(-phase, phase, size=shape3)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("shape3,axis", COMPLEX_SHAPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_forward_matches_reference(dtype, shape3, axis, exclusive, reverse):
    x = _complex_input(shape3, seed=20, phase=50.0).astype(dtype).astype(np.complex128)
    got = _run_complex("pe_logcumsumexp_forward", dtype, [x], shape3, exclusive, reverse)
    ref = refs.logcumsumexp(x, axis, exclusive, reverse)
    fcc.assert_complex_matches(got, ref, fcc.forward_bound(x, ref, axis, exclusive, reverse, dtype), "forward",
                               phase=False)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_forward_specials(dtype, exclusive, reverse):
    x = _complex_input((6, 100), seed=21, phase=1e4)
    x.real[0, :40] = -np.inf  # a -inf prefix longer than a warp step: -inf + 0i
    x[1, 50] = complex(np.nan, 0.0)
    x.real[2, 70] = np.inf
    x.real[3] += 1e4
    x.real[4] = np.where(np.arange(100) % 2, 700.0, -700.0)
    x.real[5] = -1e4
    x = x.astype(dtype).astype(np.complex128).reshape(6, 100, 1)
    got = _run_complex("pe_logcumsumexp_forward", dtype, [x], (6, 100, 1), exclusive, reverse)
    ref = refs.logcumsumexp(x, 1, exclusive, reverse)
    fcc.assert_complex_matches(got, ref, fcc.forward_bound(x, ref, 1, exclusive, reverse, dtype), "forward",
                               phase=False)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("shape3,axis", [((3, 70, 1), 1), ((2, 9, 5), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_backward_matches_reference(dtype, shape3, axis, exclusive, reverse):
    x = _complex_input(shape3, seed=22).astype(dtype).astype(np.complex128)
    x[0, 0, 0] = complex(-np.inf, 1.0)
    g = _complex_input(shape3, seed=23).astype(dtype).astype(np.complex128)
    out = refs.logcumsumexp(x, axis, exclusive, reverse).astype(dtype).astype(np.complex128)
    got = _run_complex("pe_logcumsumexp_backward", dtype, [x, out, g], shape3, exclusive, reverse)
    ref = refs.logcumsumexp_grad(x, g, axis, exclusive, reverse)
    assert got[0, 0, 0] == 0
    bound = fcc.grad_bound(x, g, refs.logcumsumexp(x, axis, exclusive, reverse), ref, axis, exclusive, reverse, dtype)
    fcc.assert_complex_matches(got, ref, bound, "backward", phase=False)


def _run_complex(name, dtype, arrays, shape3, exclusive, reverse):
    lib = library()
    bufs = [DeviceBuffer(np.ascontiguousarray(np.asarray(a).astype(dtype))) for a in arrays]
    out = DeviceBuffer(np.zeros(shape3, dtype=dtype))
    outer, n, inner = shape3
    check(getattr(lib, name)(DTYPE_CODES[dtype], *[ctypes.c_void_p(b.ptr) for b in bufs], ctypes.c_void_p(out.ptr),
                             ctypes.c_int64(outer), ctypes.c_int64(n), ctypes.c_int64(inner), int(exclusive),
                             int(reverse)))
    return out.get().astype(np.complex128)
