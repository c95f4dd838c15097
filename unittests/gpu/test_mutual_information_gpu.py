"""mutual_information CUDA launchers on a real GPU, against the CPU kernels (through paddle_ext) and
the NumPy reference, on tile-edge sizes (skips without a GPU).

Where Paddle or an installed paddle_ext is missing (a bare GPU machine, a checkout without `make build`), the
tile-edge cases compare against the float64 NumPy reference instead of the CPU kernels; that reference is a
Python loop, so only lattices up to 65x65 run."""

import ctypes

import numpy as np
import pytest

import refs
from fuzz_cases import random_boxes

try:  # by name: without an installed paddle_ext, `import paddle_ext` finds the source folder of the same name
    import paddle

    from paddle_ext import mutual_information_recursion
except ImportError:
    paddle = mutual_information_recursion = None
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, library

SIZES = [31, 32, 33, 63, 64, 65, 500]


def _inputs(B, S, T, modified, seed):
    rng = np.random.default_rng(seed)
    px = rng.normal(-1.5, 1.0, size=(B, S, T if modified else T + 1))
    py = rng.normal(-1.0, 1.0, size=(B, S + 1, T))
    return px, py


def _boxes(B, S, T, seed):
    return random_boxes(B, S, T, np.random.default_rng(seed))


def _gpu(px, py, boundary, dtype, ans_grad=None, grad_fill=0.0):
    lib = library()
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = int(T1 == T)
    code = DTYPE_CODES[dtype]
    dpx, dpy = DeviceBuffer(px.astype(dtype)), DeviceBuffer(py.astype(dtype))
    dbd = DeviceBuffer(boundary) if boundary is not None else None
    bptr = ctypes.c_void_p(dbd.ptr) if dbd is not None else ctypes.c_void_p(0)
    dp = DeviceBuffer.empty((B, S + 1, T + 1), np.float64)
    dans = DeviceBuffer.empty((B,), dtype)
    i64 = ctypes.c_int64
    check(lib.pe_mutual_information_forward(code, ctypes.c_void_p(dpx.ptr), ctypes.c_void_p(dpy.ptr), bptr,
                                            ctypes.c_void_p(dp.ptr), ctypes.c_void_p(dans.ptr), i64(B), i64(S), i64(T),
                                            modified))
    dag = DeviceBuffer(ans_grad.astype(dtype)) if ans_grad is not None else None
    # grad_fill: what the grad buffers hold before the launcher runs (it must overwrite every element).
    dgx, dgy = DeviceBuffer(np.full(px.shape, grad_fill, dtype)), DeviceBuffer(np.full(py.shape, grad_fill, dtype))
    check(lib.pe_mutual_information_backward(code, ctypes.c_void_p(dpx.ptr), ctypes.c_void_p(dpy.ptr), bptr,
                                             ctypes.c_void_p(dp.ptr),
                                             ctypes.c_void_p(dag.ptr) if dag is not None else ctypes.c_void_p(0),
                                             ctypes.c_void_p(dgx.ptr), ctypes.c_void_p(dgy.ptr), i64(B), i64(S), i64(T),
                                             modified))
    return [a.astype(np.float64) for a in (dans.get(), dgx.get(), dgy.get())]


def _cpu(px, py, boundary, dtype):
    if paddle is None:
        ans, _ = refs.mutual_information(px.astype(dtype), py.astype(dtype), boundary)
        return [ans, *refs.mutual_information_grad(px.astype(dtype), py.astype(dtype), boundary)]
    ans, (gx, gy) = mutual_information_recursion(
        paddle.to_tensor(px.astype(dtype)), paddle.to_tensor(py.astype(dtype)),
        None if boundary is None else paddle.to_tensor(boundary), return_grad=True)
    return [a.numpy().astype(np.float64) for a in (ans, gx, gy)]


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("S", SIZES)
@pytest.mark.parametrize("T", SIZES)
def test_gpu_matches_cpu_on_tile_edge_sizes(modified, S, T):
    if modified and T < S:
        pytest.skip("modified needs T >= S for a reachable end (covered below)")
    if paddle is None and S * T > 65 * 65:
        pytest.skip("without Paddle the reference is the NumPy loop: lattices up to 65x65 only")
    B = 3
    px, py = _inputs(B, S, T, modified, seed=S * 1000 + T)
    boundary = _boxes(B, S, T, seed=S + T)
    for dtype, rtol in (("float64", 1e-10), ("float32", 1e-5)):
        for bd in (None, boundary):
            got = _gpu(px, py, bd, dtype)
            want = _cpu(px, py, bd, dtype)
            for g, w, what in zip(got, want, ("ans", "px_grad", "py_grad")):
                np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=what)
                fin = np.isfinite(w)
                np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=rtol * 1e-2, err_msg=f"{what} {dtype}")


@pytest.mark.parametrize("modified", [False, True])
def test_gpu_matches_numpy_reference_with_upstream_grad_and_edge_cases(modified):
    B, S, T = 5, 6, 9
    px, py = _inputs(B, S, T, modified, seed=3)
    px[1, 2, :] = -np.inf
    boundary = np.array([[0, 0, S, T], [1, 2, 5, 7], [2, 3, 2, 3], [0, 0, 0, 9], [0, 0, 6, 0]], dtype=np.int64)
    ans_grad = np.array([1.0, -2.0, 0.5, 3.0, 1.5])
    ans, gx, gy = _gpu(px, py, boundary, "float64", ans_grad)
    ref_ans, _ = refs.mutual_information(px, py, boundary)
    rgx, rgy = refs.mutual_information_grad(px, py, boundary, ans_grad)
    np.testing.assert_allclose(ans, ref_ans, rtol=1e-12)
    np.testing.assert_allclose(gx, rgx, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gy, rgy, rtol=1e-10, atol=1e-14)
    assert not np.isnan(gx).any() and not np.isnan(gy).any()


def test_gpu_unreachable_end_gives_zero_grads():
    px, py = _inputs(2, 5, 3, True, seed=4)  # modified, fewer frames than symbols
    ans, gx, gy = _gpu(px, py, None, "float32")
    assert np.isneginf(ans).all() and not gx.any() and not gy.any()


def test_gpu_long_lattice_float32_close_to_float64():
    px, py = _inputs(2, 100, 1500, False, seed=5)
    a32 = _gpu(px, py, None, "float32")
    a64 = _gpu(px, py, None, "float64")
    np.testing.assert_allclose(a32[0], a64[0], rtol=1e-6)
    for g32, g64 in zip(a32[1:], a64[1:]):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("kind", ["masks", "spread"])
def test_gpu_exact_on_wide_ranges(modified, kind):
    # -1e4 / +-1e3 masks and +-700 spreads next to normal logits: the cells must not lose terms.
    B, S, T = 3, 6, 40
    rng = np.random.default_rng(23 + modified)
    px, py = _inputs(B, S, T, modified, seed=24)
    for a in (px, py):
        pick = rng.random(a.shape) < 0.25
        a[pick] = rng.choice([-1e4, -1e3, 1e3], size=pick.sum()) if kind == "masks" else \
            rng.uniform(-700, 700, size=pick.sum())
    boundary = _boxes(B, S, T, seed=25)
    ans, gx, gy = _gpu(px, py, boundary, "float64")
    ref_ans, p = refs.mutual_information(px, py, boundary)
    tol = 64 * np.finfo(np.float64).eps * max(1e4, np.abs(p[np.isfinite(p)]).max())  # ulps of |p| and inputs
    assert np.array_equal(np.isneginf(ans), np.isneginf(ref_ans))
    np.testing.assert_allclose(ans, ref_ans, rtol=1e-12, atol=tol)
    rgx, rgy = refs.mutual_information_grad(px, py, boundary)
    np.testing.assert_allclose(gx, rgx, rtol=tol, atol=tol)
    np.testing.assert_allclose(gy, rgy, rtol=tol, atol=tol)


def _reference(px, py, boundary, dtype, ans_grad=None):
    """The CPU op where Paddle is installed (ans_grad None), else the float64 NumPy recursion."""
    if paddle is not None and ans_grad is None:
        return _cpu(px, py, boundary, dtype)
    px, py = px.astype(dtype).astype(np.float64), py.astype(dtype).astype(np.float64)
    ans, _ = refs.mutual_information(px, py, boundary)
    return [ans, *refs.mutual_information_grad(px, py, boundary, ans_grad)]


def _assert_close(got, want, rtol):
    for g, w, what in zip(got, want, ("ans", "px_grad", "py_grad")):
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=what)
        assert not np.isnan(g).any(), what
        fin = np.isfinite(w)
        np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=rtol * 1e-2, err_msg=what)


# Every dispatch branch of the launchers: the 4-warp band kernel (S + 1 <= 128: 1..4 bands, the last one
# partial or full), the 16-warp one (129..512 rows), and its passes of 512 rows (S + 1 > 512: a second pass
# of 1 row, two full passes, three passes); empty sides (S = 0, T = 0), T around the 16-step chunk and the
# 64-column ring between warps, B = 1.
BRANCH_SHAPES = [(1, 0, 0), (2, 0, 7), (2, 5, 0), (1, 1, 1), (3, 31, 16), (3, 32, 17), (2, 127, 64), (2, 126, 65),
                 (2, 128, 40), (2, 200, 129), (1, 511, 20), (1, 512, 20), (2, 1023, 12), (1, 1100, 20),
                 (2, 100, 500)]


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("B,S,T", BRANCH_SHAPES)
def test_gpu_every_dispatch_branch(modified, B, S, T):
    if paddle is None and B * (S + 1) * (T + 1) > 30000:
        pytest.skip("without Paddle the reference is the NumPy loop")
    px, py = _inputs(B, S, T, modified, seed=7 * S + T + modified)
    boundary = _boxes(B, S, T, seed=S * 3 + T)
    ans_grad = np.linspace(-1.0, 2.0, B)
    for dtype, rtol in (("float64", 1e-10), ("float32", 1e-5)):
        for bd in (None, boundary):
            _assert_close(_gpu(px, py, bd, dtype, grad_fill=np.nan), _reference(px, py, bd, dtype), rtol)
    if B * (S + 1) * (T + 1) <= 30000:  # (the upstream-grad reference is the NumPy loop)
        _assert_close(_gpu(px, py, boundary, "float64", ans_grad),
                      _reference(px, py, boundary, "float64", ans_grad), 1e-10)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("S", [40, 300, 700])  # the 4-warp and the 16-warp band kernels, two passes
@pytest.mark.parametrize("kind", ["nan", "posinf", "huge", "big", "neginf_rows"])
def test_gpu_band_kernels_redo_or_stay_exact(modified, S, kind):
    # NaN, +inf and |x| > 1e6 leave the forward's extended range: that item is redone in log space (NaN
    # where the reference has NaN); +-3e5 entries and -inf rows stay on the fast chain, exact, no NaN.
    B, T = 3, 50
    rng = np.random.default_rng(S + 2 * modified)
    px, py = _inputs(B, S, T, modified, seed=S + 1)
    bad = {"nan": np.nan, "posinf": np.inf, "huge": -2e6, "big": 3e5}.get(kind)
    if kind == "neginf_rows":
        px[1, S // 2, :] = -np.inf
        py[2, :, T // 3] = -np.inf
    else:
        for a in (px, py):
            pick = rng.random(a.shape) < 0.02
            a[pick] = bad
    boundary = _boxes(B, S, T, seed=S + 5)
    ans, gx, gy = _gpu(px, py, boundary, "float64")
    ref_ans, p = refs.mutual_information(px, py, boundary)
    np.testing.assert_array_equal(np.isnan(ans), np.isnan(ref_ans))
    np.testing.assert_array_equal(np.isneginf(ans), np.isneginf(ref_ans))
    fin = np.isfinite(ref_ans)
    scale = max(1.0, np.abs(p[np.isfinite(p)]).max())
    np.testing.assert_allclose(ans[fin], ref_ans[fin], rtol=1e-12, atol=64 * np.finfo(float).eps * scale)
    if kind in ("nan", "posinf"):
        return
    rgx, rgy = refs.mutual_information_grad(px, py, boundary)
    assert not np.isnan(gx).any() and not np.isnan(gy).any()
    tol = 64 * np.finfo(float).eps * scale
    np.testing.assert_allclose(gx, rgx, rtol=max(tol, 1e-10), atol=tol)
    np.testing.assert_allclose(gy, rgy, rtol=max(tol, 1e-10), atol=tol)


def test_gpu_band_kernels_many_items_at_once():
    # More blocks than SMs hold at once (the band warps of a block only wait on each other), all boxes different.
    B, S, T = 300, 70, 90
    px, py = _inputs(B, S, T, False, seed=11)
    boundary = _boxes(B, S, T, seed=12)
    got = _gpu(px, py, boundary, "float64")
    if paddle is None:
        pick = [0, 1, 150, 299]
        want = _reference(px[pick], py[pick], boundary[pick], "float64")
        got = [got[0][pick], got[1][pick], got[2][pick]]
    else:
        want = _reference(px, py, boundary, "float64")
    _assert_close(got, want, 1e-10)


def _gpu_joint(pxs, pys, boundary, out_grad, dtype):
    """The joint op's passes as the binding runs them: the sums, the recursion and its occupations, the rows;
    then the grads of the stacked inputs for out_grad."""
    lib, i64, vp = library(), ctypes.c_int64, ctypes.c_void_p
    N, B, S, T1 = pxs.shape
    T = pys.shape[3]
    code = DTYPE_CODES[dtype]
    cx, cy = S * T1, (S + 1) * T
    dpx, dpy = DeviceBuffer(pxs.astype(dtype)), DeviceBuffer(pys.astype(dtype))
    xt, yt = DeviceBuffer.empty(pxs.shape[1:], dtype), DeviceBuffer.empty(pys.shape[1:], dtype)
    check(lib.pe_joint_mutual_information_sum(code, vp(dpx.ptr), vp(xt.ptr), i64(N), i64(B * cx)))
    check(lib.pe_joint_mutual_information_sum(code, vp(dpy.ptr), vp(yt.ptr), i64(N), i64(B * cy)))
    dbd = DeviceBuffer(boundary)
    dp, dans = DeviceBuffer.empty((B, S + 1, T + 1), np.float64), DeviceBuffer.empty((B,), dtype)
    modified = int(T1 == T)
    check(lib.pe_mutual_information_forward(code, vp(xt.ptr), vp(yt.ptr), vp(dbd.ptr), vp(dp.ptr), vp(dans.ptr),
                                            i64(B), i64(S), i64(T), modified))
    ox, oy = DeviceBuffer.empty(pxs.shape[1:], dtype), DeviceBuffer.empty(pys.shape[1:], dtype)
    check(lib.pe_mutual_information_backward(code, vp(xt.ptr), vp(yt.ptr), vp(dbd.ptr), vp(dp.ptr), vp(0),
                                             vp(ox.ptr), vp(oy.ptr), i64(B), i64(S), i64(T), modified))
    out = DeviceBuffer.empty((N, B), dtype)
    check(lib.pe_joint_mutual_information_rows(code, vp(dpx.ptr), vp(dpy.ptr), vp(ox.ptr), vp(oy.ptr), vp(dans.ptr),
                                               vp(out.ptr), i64(N), i64(B), i64(cx), i64(cy)))
    dog = DeviceBuffer(out_grad.astype(dtype))
    gx, gy = DeviceBuffer(np.full(pxs.shape, 7.0, dtype)), DeviceBuffer(np.full(pys.shape, 7.0, dtype))
    check(lib.pe_joint_mutual_information_grad(code, vp(ox.ptr), vp(dog.ptr), vp(gx.ptr), i64(N), i64(B), i64(cx)))
    check(lib.pe_joint_mutual_information_grad(code, vp(oy.ptr), vp(dog.ptr), vp(gy.ptr), i64(N), i64(B), i64(cy)))
    return [a.astype(np.float64) for a in (out.get(), gx.get(), gy.get())]


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_joint_matches_the_reference(modified, dtype):
    """Rows, -inf terms off the path (count 0), an unreachable item (row 0 -inf, zero grads) and the grads
    out_grad[n, b] * occupation, against the float64 reference."""
    N, B, S, T = 3, 40, 33, 65
    rng = np.random.default_rng(13)
    pxs = rng.normal(-1.5, 1.0, size=(N, B, S, T if modified else T + 1))
    pys = rng.normal(-1.0, 1.0, size=(N, B, S + 1, T))
    boundary = _boxes(B, S, T, seed=14)
    pxs[1, 2, 0, :3] = -np.inf
    if modified:
        boundary[3] = [0, 0, 20, 10]  # more symbols than frames: unreachable
    out_grad = rng.normal(size=(N, B))
    out, gx, gy = _gpu_joint(pxs, pys, boundary, out_grad, dtype)
    x, y = pxs.astype(dtype).astype(np.float64), pys.astype(dtype).astype(np.float64)
    want = refs.joint_mutual_information(x, y, boundary)
    occ_x, occ_y = refs.mutual_information_grad(x.sum(0), y.sum(0), boundary)
    rtol = 1e-10 if dtype == "float64" else 2e-4
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(out[fin], want[fin], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gx, out_grad[:, :, None, None] * occ_x, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gy, out_grad[:, :, None, None] * occ_y, rtol=rtol, atol=rtol)
