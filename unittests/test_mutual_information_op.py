"""mutual_information_recursion: the specification, through the OpTest harness."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_export, check_grad, check_output

MODES = [False, True]  # modified?


def make(B, S, T, modified, seed=0, scale=1.0, offset=0.0):
    rng = np.random.default_rng(seed)
    px = rng.normal(offset, scale, size=(B, S, T if modified else T + 1))
    py = rng.normal(offset, scale, size=(B, S + 1, T))
    return px, py


def boxes(B, S, T, seed=0, modified=False):
    """Different boxes per item: a full one, inner ones, a point box."""
    rng = np.random.default_rng(seed)
    rows = [[0, 0, S, T]]
    while len(rows) < B:
        s0, s1 = sorted(rng.integers(0, S + 1, size=2))
        t0, t1 = sorted(rng.integers(0, T + 1, size=2))
        if modified and t1 - t0 < s1 - s0:  # keep most modified boxes reachable
            s1 = s0 + (t1 - t0)
        rows.append([s0, t0, s1, t1])
    rows[-1] = [min(1, S), min(2, T), min(1, S), min(2, T)] if B > 2 else rows[-1]  # a point box
    return np.array(rows, dtype=np.int64)


def mi(px, py, boundary=None):
    return paddle_ext.mutual_information_recursion(px, py, boundary)


def ref_ans(px, py, boundary=None):
    return refs.mutual_information(px, py, boundary)[0]


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("B,S,T", [(1, 1, 1), (3, 4, 6), (4, 7, 5), (2, 10, 13)])
def test_forward_float64_against_reference(modified, with_boundary, B, S, T):
    px, py = make(B, S, T, modified, seed=S * T)
    inputs = {"px": px, "py": py}
    if with_boundary:
        inputs["boundary"] = boxes(B, S, T, seed=B + S, modified=modified)
    check_output(mi, inputs, ref_ans)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("modified", MODES)
def test_forward_every_dtype(dtype, modified):
    px, py = make(3, 5, 9, modified, seed=2, scale=0.5)
    # values ~ -log(2) each step keep |ans| moderate, so the relative tolerance is meaningful in fp16
    check_output(mi, {"px": px - 1.0, "py": py - 1.0, "boundary": boxes(3, 5, 9, seed=3, modified=modified)},
                 ref_ans, dtype=dtype)


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_forward_and_grads_equal_brute_force_path_sums(modified, with_boundary):
    B, S, T = 4, 3, 4
    px, py = make(B, S, T, modified, seed=11)
    boundary = boxes(B, S, T, seed=5, modified=modified) if with_boundary else None
    ans_bf, gx_bf, gy_bf = refs.mutual_information_brute_force(px, py, boundary)
    tpx, tpy = paddle.to_tensor(px, stop_gradient=False), paddle.to_tensor(py, stop_gradient=False)
    tb = None if boundary is None else paddle.to_tensor(boundary)
    ans = paddle_ext.mutual_information_recursion(tpx, tpy, tb)
    ans.sum().backward()
    np.testing.assert_allclose(ans.numpy(), ans_bf, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tpx.grad.numpy(), gx_bf, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tpy.grad.numpy(), gy_bf, rtol=1e-12, atol=1e-12)
    # and the recursive NumPy backward agrees with the path sums
    gx, gy = refs.mutual_information_grad(px, py, boundary)
    np.testing.assert_allclose(gx, gx_bf, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, gy_bf, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_grad_matches_numeric_dygraph_and_static(modified, with_boundary):
    B, S, T = 3, 3, 4
    px, py = make(B, S, T, modified, seed=7)
    inputs = {"px": px, "py": py}
    if with_boundary:
        inputs["boundary"] = boxes(B, S, T, seed=9, modified=modified)
    check_grad(mi, inputs, ["px", "py"])


@pytest.mark.parametrize("modified", MODES)
def test_upstream_grad_scales_each_item_and_return_grad_gives_occupations(modified):
    B, S, T = 4, 5, 7
    px, py = make(B, S, T, modified, seed=3)
    boundary = boxes(B, S, T, seed=4, modified=modified)
    w = np.array([0.5, -2.0, 3.0, 1.5])
    tpx, tpy = paddle.to_tensor(px, stop_gradient=False), paddle.to_tensor(py, stop_gradient=False)
    ans, (gx, gy) = paddle_ext.mutual_information_recursion(tpx, tpy, paddle.to_tensor(boundary), return_grad=True)
    assert gx.stop_gradient and gy.stop_gradient
    rgx, rgy = refs.mutual_information_grad(px, py, boundary)
    np.testing.assert_allclose(gx.numpy(), rgx, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gy.numpy(), rgy, rtol=1e-12, atol=1e-13)
    (ans * paddle.to_tensor(w)).sum().backward()
    wgx, wgy = refs.mutual_information_grad(px, py, boundary, ans_grad=w)
    np.testing.assert_allclose(tpx.grad.numpy(), wgx, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tpy.grad.numpy(), wgy, rtol=1e-12, atol=1e-13)
    # occupation: the py-grads of each reachable item's t-steps sum to its number of frames... per row
    # of t, exactly one edge is crossed: sum over s of (py_grad + px_grad in regular) columns is 1.
    if not modified:
        for b, (s0, t0, s1, t1) in enumerate(boundary):
            if np.isfinite(ans.numpy()[b]):
                np.testing.assert_allclose(gy.numpy()[b].sum(), t1 - t0, rtol=1e-12)
                np.testing.assert_allclose(gx.numpy()[b].sum(), s1 - s0, rtol=1e-12)


@pytest.mark.parametrize("modified", MODES)
def test_empty_sides_and_point_boxes(modified):
    for S, T in [(0, 5), (4, 0), (0, 0)]:
        px, py = make(2, S, T, modified, seed=1)
        if modified and T < S:
            continue
        tpx, tpy = paddle.to_tensor(px, stop_gradient=False), paddle.to_tensor(py, stop_gradient=False)
        ans = paddle_ext.mutual_information_recursion(tpx, tpy)
        np.testing.assert_allclose(ans.numpy(), refs.mutual_information(px, py)[0], rtol=1e-12)
        ans.sum().backward()
        gx, gy = refs.mutual_information_grad(px, py)
        np.testing.assert_allclose(tpy.grad.numpy(), gy, rtol=1e-12)
        if px.size:
            np.testing.assert_allclose(tpx.grad.numpy(), gx, rtol=1e-12)
    px, py = make(3, 4, 5, modified, seed=2)
    boundary = np.array([[2, 3, 2, 3], [0, 0, 0, 0], [4, 5, 4, 5]], dtype=np.int64)
    tpx, tpy = paddle.to_tensor(px, stop_gradient=False), paddle.to_tensor(py, stop_gradient=False)
    ans = paddle_ext.mutual_information_recursion(tpx, tpy, paddle.to_tensor(boundary))
    np.testing.assert_array_equal(ans.numpy(), np.zeros(3))
    ans.sum().backward()
    assert not tpx.grad.numpy().any() and not tpy.grad.numpy().any()


def test_modified_with_fewer_frames_than_symbols_is_neg_inf_with_exactly_zero_grads():
    px, py = make(2, 5, 3, True, seed=4)
    boundary = np.array([[0, 0, 5, 3], [0, 0, 2, 3]], dtype=np.int64)
    tpx, tpy = paddle.to_tensor(px, stop_gradient=False), paddle.to_tensor(py, stop_gradient=False)
    ans = paddle_ext.mutual_information_recursion(tpx, tpy, paddle.to_tensor(boundary))
    assert ans.numpy()[0] == -np.inf and np.isfinite(ans.numpy()[1])
    ans.sum().backward()
    gx, gy = tpx.grad.numpy(), tpy.grad.numpy()
    assert not np.isnan(gx).any() and not np.isnan(gy).any()
    assert not gx[0].any() and not gy[0].any()
    rgx, rgy = refs.mutual_information_grad(px, py, boundary)
    np.testing.assert_allclose(gx, rgx, rtol=1e-12)
    np.testing.assert_allclose(gy, rgy, rtol=1e-12)


@pytest.mark.parametrize("modified", MODES)
def test_large_offsets_and_neg_inf_entries(modified):
    B, S, T = 3, 6, 8
    px, py = make(B, S, T, modified, seed=5, offset=15.0, scale=2.0)
    px[0, 2, :] = -1e4
    py[1, :, 3] = -np.inf  # item 1 cannot cross frame 3 -> ans -inf
    if modified:
        px[1, :, 3] = -np.inf  # (a modified symbol step also crosses a frame)
    px[2, 1, 2] = -np.inf
    py[2, 4, 5] = -np.inf
    ans_ref, _ = refs.mutual_information(px, py)
    assert ans_ref[1] == -np.inf
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        tpx = paddle.to_tensor(px).astype(dtype)
        tpy = paddle.to_tensor(py).astype(dtype)
        tpx.stop_gradient = tpy.stop_gradient = False
        ans = paddle_ext.mutual_information_recursion(tpx, tpy)
        np.testing.assert_allclose(ans.numpy().astype(np.float64), ans_ref, rtol=tol)
        ans.sum().backward()
        gx, gy = tpx.grad.numpy(), tpy.grad.numpy()
        assert np.isfinite(gx).all() and np.isfinite(gy).all()
        rgx, rgy = refs.mutual_information_grad(px, py)
        np.testing.assert_allclose(gx, rgx, rtol=tol * 10, atol=tol)
        np.testing.assert_allclose(gy, rgy, rtol=tol * 10, atol=tol)
        assert not gx[1].any() and not gy[1].any()


@pytest.mark.parametrize("modified", MODES)
def test_float32_close_to_float64_on_a_long_lattice(modified):
    B, S, T = 3, 40, 200
    px, py = make(B, S, T, modified, seed=8)
    px, py = px - 2.0, py - 1.0
    boundary = np.array([[0, 0, S, T], [3, 10, 30, 150], [0, 0, 20, 200]], dtype=np.int64)
    out = {}
    for dtype in ("float32", "float64"):
        tpx = paddle.to_tensor(px).astype(dtype)
        tpy = paddle.to_tensor(py).astype(dtype)
        ans, (gx, gy) = paddle_ext.mutual_information_recursion(tpx, tpy, paddle.to_tensor(boundary), return_grad=True)
        out[dtype] = [a.numpy().astype(np.float64) for a in (ans, gx, gy)]
    np.testing.assert_allclose(out["float64"][0], refs.mutual_information(px, py, boundary)[0], rtol=1e-12)
    np.testing.assert_allclose(out["float32"][0], out["float64"][0], rtol=1e-5)
    for a, b in zip(out["float32"][1:], out["float64"][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-5)


@pytest.mark.parametrize("modified", MODES)
def test_batch_items_in_parallel_match_one_by_one(modified):
    B, S, T = 9, 6, 11
    px, py = make(B, S, T, modified, seed=12)
    boundary = boxes(B, S, T, seed=13, modified=modified)
    ans, (gx, gy) = paddle_ext.mutual_information_recursion(paddle.to_tensor(px), paddle.to_tensor(py),
                                                           paddle.to_tensor(boundary), return_grad=True)
    for b in range(B):
        a1, (x1, y1) = paddle_ext.mutual_information_recursion(paddle.to_tensor(px[b:b + 1]),
                                                               paddle.to_tensor(py[b:b + 1]),
                                                               paddle.to_tensor(boundary[b:b + 1]), return_grad=True)
        assert a1.numpy()[0] == ans.numpy()[b] or (np.isneginf(a1.numpy()[0]) and np.isneginf(ans.numpy()[b]))
        np.testing.assert_array_equal(x1.numpy()[0], gx.numpy()[b])
        np.testing.assert_array_equal(y1.numpy()[0], gy.numpy()[b])


@pytest.mark.parametrize("with_boundary", [False, True])
def test_static_return_grad(with_boundary):
    px, py = make(3, 4, 6, False, seed=1)
    boundary = boxes(3, 4, 6, seed=2)

    def fn(a, b, *bd):
        ans, (gx, gy) = paddle_ext.mutual_information_recursion(a, b, bd[0] if bd else None, return_grad=True)
        return ans, gx, gy

    inputs = {"px": px, "py": py}
    if with_boundary:
        inputs["boundary"] = boundary

    def ref(a, b, *bd):
        bd = bd[0] if bd else None
        return (refs.mutual_information(a, b, bd)[0], *refs.mutual_information_grad(a, b, bd))

    check_output(fn, inputs, ref)


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_export_round_trip(modified, with_boundary, tmp_path):
    px, py = make(3, 4, 6, modified, seed=1)
    inputs = {"px": px.astype(np.float32), "py": py.astype(np.float32)}
    if with_boundary:
        inputs["boundary"] = boxes(3, 4, 6, seed=2, modified=modified)
    expected = check_export(mi, inputs, directory=str(tmp_path))
    np.testing.assert_allclose(expected[0], refs.mutual_information(px, py, inputs.get("boundary"))[0], rtol=1e-5)


def _t(a):
    return paddle.to_tensor(np.asarray(a))


@pytest.mark.parametrize("args,exc,match", [
    ((np.zeros((2, 3, 5)), np.zeros((2, 4))), ValueError, "3-D"),
    ((np.zeros((2, 3, 5)), np.zeros((2, 3, 4))), ValueError, r"S\+1"),
    ((np.zeros((2, 3, 5)), np.zeros((3, 4, 4))), ValueError, "batch size"),
    ((np.zeros((2, 3, 7)), np.zeros((2, 4, 4))), ValueError, "T\\+1 = 5"),
    ((np.zeros((2, 3, 5), np.float32), np.zeros((2, 4, 4))), TypeError, "py must have px's dtype"),
    ((np.zeros((2, 3, 5), np.int64), np.zeros((2, 4, 4), np.int64)), TypeError, "floating"),
])
def test_bad_shapes_and_dtypes(args, exc, match):
    with pytest.raises(exc, match=match):
        paddle_ext.mutual_information_recursion(*[_t(a) for a in args])


@pytest.mark.parametrize("boundary,exc,match", [
    (np.zeros((2, 4), np.int16), TypeError, "must be int32 or int64, got int16"),
    (np.zeros((3, 4), np.int64), ValueError, r"shape \[B, 4\]"),
    (np.zeros((2, 3), np.int64), ValueError, r"shape \[B, 4\]"),
    (np.array([[0, 0, 3, 4], [2, 0, 1, 4]]), ValueError, r"row 1 .*s_begin <= s_end <= S"),
    (np.array([[0, 0, 4, 4], [0, 0, 3, 4]]), ValueError, r"row 0 .*S = 3"),
    (np.array([[-1, 0, 3, 4], [0, 0, 3, 4]]), ValueError, r"row 0 .*0 <= s_begin"),
    (np.array([[0, 0, 3, 4], [0, 3, 3, 2]]), ValueError, r"row 1 .*t_begin <= t_end <= T"),
    (np.array([[0, 0, 3, 5], [0, 0, 3, 4]]), ValueError, r"row 0 .*T = 4"),
])
def test_bad_boundary(boundary, exc, match):
    px, py = make(2, 3, 4, False)
    with pytest.raises(exc, match=match):
        paddle_ext.mutual_information_recursion(_t(px), _t(py), _t(boundary))


def test_non_tensor_arguments():
    px, py = make(2, 3, 4, False)
    with pytest.raises(TypeError, match="px must be a paddle.Tensor"):
        paddle_ext.mutual_information_recursion(px, _t(py))
    with pytest.raises(TypeError, match="boundary must be a paddle.Tensor"):
        paddle_ext.mutual_information_recursion(_t(px), _t(py), [[0, 0, 3, 4]] * 2)


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("box", [None, [3, 100, 60, 1900], [0, 0, 70, 2000]])
def test_single_item_row_bands_match_the_batch_path(modified, box):
    """B = 1 runs one item on all threads (row bands pipelined over column chunks); B = 2 runs items
    in parallel with each item on one thread. Same arithmetic per cell: bitwise equal results."""
    S, T = 70, 2000
    px, py = make(1, S, T, modified, seed=21)
    px, py = px - 1.0, py - 0.5
    boundary = None if box is None else np.array([box], dtype=np.int64)

    def run(n):
        tb = None if boundary is None else paddle.to_tensor(np.repeat(boundary, n, 0))
        tpx = paddle.to_tensor(np.repeat(px, n, 0))
        tpy = paddle.to_tensor(np.repeat(py, n, 0))
        tpx.stop_gradient = tpy.stop_gradient = False
        ans = paddle_ext.mutual_information_recursion(tpx, tpy, tb)
        (ans * paddle.to_tensor(np.linspace(0.5, 1.5, n))).sum().backward()
        return ans.numpy()[0], tpx.grad.numpy()[0], tpy.grad.numpy()[0]

    one, two = run(1), run(2)
    assert np.isfinite(one[0])
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_non_contiguous_inputs():
    px, py = make(3, 4, 6, False, seed=30)
    tpx = paddle.to_tensor(np.ascontiguousarray(px.transpose(0, 2, 1))).transpose([0, 2, 1])
    tpy = paddle.to_tensor(np.ascontiguousarray(py[:, :, ::-1])).flip([2])
    ans, (gx, gy) = paddle_ext.mutual_information_recursion(tpx, tpy, return_grad=True)
    np.testing.assert_allclose(ans.numpy(), refs.mutual_information(px, py)[0], rtol=1e-12)
    rgx, rgy = refs.mutual_information_grad(px, py)
    np.testing.assert_allclose(gx.numpy(), rgx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gy.numpy(), rgy, rtol=1e-12, atol=1e-14)


def test_empty_batch():
    tpx = paddle.zeros([0, 3, 5], "float64")
    tpx.stop_gradient = False
    ans, (gx, gy) = paddle_ext.mutual_information_recursion(tpx, paddle.zeros([0, 4, 4], "float64"), return_grad=True)
    assert ans.shape == [0] and gx.shape == [0, 3, 5] and gy.shape == [0, 4, 4]
    ans.sum().backward()
    assert tpx.grad.shape == [0, 3, 5]


@pytest.mark.parametrize("modified", MODES)
def test_higher_order_grads_are_refused_first_order_still_work(modified):
    """The grad op has no grad of its own: its double-grad op refuses, so a backward through grads taken with
    create_graph=True raises instead of giving a wrong number (those grads themselves are right)."""
    px_np, py_np = make(2, 3, 4, modified, seed=30)
    px, py = paddle.to_tensor(px_np, stop_gradient=False), paddle.to_tensor(py_np, stop_gradient=False)
    ref_gx, ref_gy = refs.mutual_information_grad(px_np, py_np)
    gx, gy = paddle.grad(mi(px, py).sum(), [px, py], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), ref_gx, rtol=1e-10, atol=1e-12)
    with pytest.raises(NotImplementedError, match="mutual_information_recursion and the RNN-T losses: higher-order grads"):
        paddle.grad((gx * gx).sum() + gy.sum(), [px, py])
    gx, gy = paddle.grad(mi(px, py).sum(), [px, py])
    np.testing.assert_allclose(gx.numpy(), ref_gx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), ref_gy, rtol=1e-10, atol=1e-12)


# --- wide ranges: entries far apart inside one 16-cell block of the forward's row scan -------------

def _mi_with_grads(px, py, boundary=None, ans_grad=None, dtype="float64"):
    tpx = paddle.to_tensor(px).astype(dtype)
    tpy = paddle.to_tensor(py).astype(dtype)
    tpx.stop_gradient = tpy.stop_gradient = False
    tb = None if boundary is None else paddle.to_tensor(boundary)
    ans = paddle_ext.mutual_information_recursion(tpx, tpy, tb)
    w = np.ones(len(px)) if ans_grad is None else ans_grad
    (ans * paddle.to_tensor(w).astype(dtype)).sum().backward()
    return [a.numpy().astype(np.float64) for a in (ans, tpx.grad, tpy.grad)]


def _assert_matches_reference(px, py, boundary=None, ans_grad=None, dtype="float64"):
    """ans and grads against the cell-by-cell float64 recursion. The tolerance is a few ulps of the
    largest magnitude of an input or of p: the reference itself rounds p + y at that scale (and a
    grad's exp(p_from + x - p_to) turns it into a relative error)."""
    px64, py64 = np.asarray(px, np.float64), np.asarray(py, np.float64)
    if dtype != "float64":  # the kernel sees the rounded inputs (and computes p in float64)
        px64, py64 = px64.astype(dtype).astype(np.float64), py64.astype(dtype).astype(np.float64)
    ans, gx, gy = _mi_with_grads(px64, py64, boundary, ans_grad, dtype)
    ref, p = refs.mutual_information(px64, py64, boundary)
    rgx, rgy = refs.mutual_information_grad(px64, py64, boundary, ans_grad)
    scale = max(1.0, np.abs(px64).max(initial=0.0), np.abs(py64).max(initial=0.0),
                np.abs(p[np.isfinite(p)]).max(initial=0.0))
    if dtype == "float64":
        atol, rtol = 64 * np.finfo(np.float64).eps * scale, 1e-12
    else:  # the answer is stored as float32; grads too (their weights come from the float64 p)
        atol, rtol = 1e-6 * scale, 1e-6
    assert np.array_equal(np.isneginf(ans), np.isneginf(ref)), (ans, ref)
    np.testing.assert_allclose(ans, ref, rtol=rtol, atol=atol)
    # a grad is exp(p_from + x - p_to) times the downstream grad: an error d in p is a relative error d
    gtol = atol * max(1.0, np.abs(ans_grad if ans_grad is not None else 1.0).max())
    np.testing.assert_allclose(gx, rgx, rtol=max(rtol, atol), atol=gtol)
    np.testing.assert_allclose(gy, rgy, rtol=max(rtol, atol), atol=gtol)


@pytest.mark.parametrize("modified,px,py,expected", [
    (True, [[1430, 1244], [755, -1403]], [[2081, 517], [-108, 22], [-340, 424]], 27.0),
    (False, [[1046, 1445, 505], [-1169, -395, -69]], [[1957, 579], [-245, -1379], [-831, 1067]], 4074.0),
])
def test_wide_range_examples_from_issue_12(modified, px, py, expected):
    px, py = np.array([px], np.float64), np.array([py], np.float64)
    assert abs(refs.mutual_information(px, py)[0][0] - expected) < 1.0
    _assert_matches_reference(px, py)


@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("entry", [-740.0, -800.0, -1e4])
def test_one_far_py_entry_does_not_move_the_answer(modified, entry):
    # One py entry far below the rest: the cells before it in its block underflowed against it.
    px, py = make(1, 3, 20, modified, seed=31)
    py[0, 1, 9] = entry
    _assert_matches_reference(px, py)


@pytest.mark.parametrize("mask", [-1e4, 1e4, -300.0])
def test_large_running_sum_of_py_does_not_cancel(mask):
    # Row 1 is reached only at its last cell, from row 0 (px is -inf elsewhere), and its py are masks:
    # the block form's p = C + (a - C) + log(1) would round at ulp(15 * mask); the answer is exactly
    # p[0, T] + px[0, T] = sum(py[0]) + px[0, T], as the cell-by-cell recursion gives it.
    S, T = 1, 15
    px = np.full((1, S, T + 1), -np.inf)
    px[0, 0, T] = 0.3
    py = np.random.default_rng(3).normal(-1, 1, size=(1, S + 1, T))
    py[0, 1, :] = mask
    ans, gx, gy = _mi_with_grads(px, py)
    ref = refs.mutual_information(px, py)[0]
    np.testing.assert_allclose(ans, ref, rtol=4 * np.finfo(np.float64).eps)
    assert gx[0, 0, T] == 1.0 and np.all(gy[0, 0] == 1.0) and not gy[0, 1].any()


def _wide_inputs(rng, B, S, T, modified, kind):
    """Normal logits with adversarial entries: masks of -1e3 / -1e4 (or +), or values spread over +-700."""
    T1 = T if modified else T + 1
    px, py = rng.normal(0, 2, size=(B, S, T1)), rng.normal(0, 2, size=(B, S + 1, T))
    for a in (px, py):
        if kind == "spread":
            a += rng.uniform(-700, 700, size=a.shape) * (rng.random(a.shape) < 0.3)
        else:
            mask = rng.random(a.shape) < 0.25
            a[mask] = rng.choice([-1e3, -1e4, 1e3, 1e4] if kind == "masks" else [-1e3, -1e4], size=mask.sum())
            a[mask] += rng.normal(0, 2, size=mask.sum())
    return px, py


@pytest.mark.parametrize("kind", ["neg_masks", "masks", "spread"])
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("seed", range(4))
def test_wide_range_sweep_batch_path(kind, with_boundary, modified, seed):
    # B > 1: items in parallel, each on one thread (the per-item path), several boxes.
    rng = np.random.default_rng(1000 * seed + 10 * with_boundary + modified)
    B, S, T = 4, int(rng.integers(1, 9)), int(rng.integers(1, 60))
    if modified:
        T = max(T, S)
    px, py = _wide_inputs(rng, B, S, T, modified, kind)
    boundary = boxes(B, S, T, seed=seed, modified=modified) if with_boundary else None
    _assert_matches_reference(px, py, boundary, ans_grad=rng.uniform(0.5, 2.0, size=B))


@pytest.mark.parametrize("kind", ["neg_masks", "spread"])
@pytest.mark.parametrize("modified", MODES)
def test_wide_range_float32_inputs(kind, modified):
    rng = np.random.default_rng(7 + modified)
    px, py = _wide_inputs(rng, 3, 5, 40, modified, kind)
    _assert_matches_reference(px, py, boxes(3, 5, 40, seed=1, modified=modified), dtype="float32")


@pytest.mark.parametrize("kind", ["neg_masks", "spread"])
@pytest.mark.parametrize("modified", MODES)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_wide_range_single_item_row_bands(kind, modified, with_boundary):
    # B = 1 on a lattice big enough for use_bands (the banded wavefront over all threads).
    rng = np.random.default_rng(50 + 2 * modified + with_boundary)
    S, T = 40, 3500
    px, py = _wide_inputs(rng, 1, S, T, modified, kind)
    boundary = np.array([[2, 30, S, T - 5]], dtype=np.int64) if with_boundary else None
    _assert_matches_reference(px, py, boundary)
