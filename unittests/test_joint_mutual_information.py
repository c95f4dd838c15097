"""joint_mutual_information_recursion: k2's recursion on sum(px), sum(py), reported per term."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import check_grad, check_output


def terms(N, B=3, S=4, T=6, modified=False, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    pxs = rng.normal(size=(N, B, S, T if modified else T + 1)) * scale
    pys = rng.normal(size=(N, B, S + 1, T)) * scale
    boundary = np.array([[0, 0, S, T], [1, 0, S - 1, T - 2], [0, 2, 2, T]][:B], np.int64)
    return pxs, pys, boundary


def joint(n):
    """fn(px_0..px_{n-1}, py_0..py_{n-1}, boundary), as OpTest calls it."""
    def fn(*args):
        return paddle_ext.joint_mutual_information_recursion(list(args[:n]), list(args[n:2 * n]), args[2 * n])
    return fn


def inputs(pxs, pys, boundary):
    d = {f"px{i}": x for i, x in enumerate(pxs)}
    d.update({f"py{i}": y for i, y in enumerate(pys)})
    d["boundary"] = boundary
    return d


def _t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


@pytest.mark.parametrize("N", [1, 2, 3])
@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matches_the_float64_reference(N, modified, dtype):
    pxs, pys, boundary = terms(N, modified=modified, seed=N)
    check_output(joint(N), inputs(pxs, pys, boundary),
                 lambda *a: refs.joint_mutual_information(np.stack(a[:N]), np.stack(a[N:2 * N]), a[2 * N]),
                 dtype=dtype)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("with_boundary", [False, True])
def test_rows_sum_to_the_recursion_on_the_sums(modified, with_boundary):
    pxs, pys, boundary = terms(3, modified=modified, seed=4, scale=3.0)
    bd = _t(boundary) if with_boundary else None
    rows = paddle_ext.joint_mutual_information_recursion([_t(x) for x in pxs], [_t(y) for y in pys], bd)
    assert rows.shape == [3, 3]
    whole = paddle_ext.mutual_information_recursion(_t(pxs.sum(0)), _t(pys.sum(0)), bd)
    np.testing.assert_allclose(rows.numpy().sum(0), whole.numpy(), rtol=1e-12)
    # N = 1: the recursion itself
    one = paddle_ext.joint_mutual_information_recursion([_t(pxs.sum(0))], [_t(pys.sum(0))], bd)
    np.testing.assert_allclose(one.numpy()[0], whole.numpy(), rtol=1e-12)


@pytest.mark.parametrize("modified", [False, True])
def test_each_row_has_the_occupation_as_grad_of_its_own_terms_only(modified):
    """k2: d row_i / d px[j] = occupation of the summed lattice if i == j, else 0 (per batch item)."""
    N = 3
    pxs, pys, boundary = terms(N, modified=modified, seed=5)
    xs, ys = [_t(x, False) for x in pxs], [_t(y, False) for y in pys]
    w = np.random.default_rng(6).normal(size=(N, 3))
    rows = paddle_ext.joint_mutual_information_recursion(xs, ys, _t(boundary))
    (rows * _t(w)).sum().backward()
    occ_x, occ_y = refs.mutual_information_grad(pxs.sum(0), pys.sum(0), boundary)
    for i in range(N):
        np.testing.assert_allclose(xs[i].grad.numpy(), w[i][:, None, None] * occ_x, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(ys[i].grad.numpy(), w[i][:, None, None] * occ_y, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("modified", [False, True])
def test_numeric_grads_of_the_sum_over_terms(modified):
    """The rows' sum is a function of the inputs (the recursion on the sums): central differences agree,
    in dygraph and in a static program."""
    pxs, pys, boundary = terms(2, B=2, S=2, T=3, modified=modified, seed=7)
    fn = joint(2)
    # rows[0] + rows[1], not .sum(0): Paddle 3.3.1's sum takes no legacy-IR Variable
    check_grad(lambda *a: (lambda rows: rows[0] + rows[1])(fn(*a)), inputs(pxs, pys, boundary),
               ["px0", "px1", "py0", "py1"])


def test_neg_inf_terms_and_unreachable_items():
    """-inf in one term masks the cell (no NaN: unoccupied cells count 0); an item whose end cannot be
    reached (modified with S > T) gives -inf in row 0, 0 in the others, and zero grads."""
    pxs, pys, _ = terms(2, B=2, S=4, T=3, modified=True, seed=8)
    pxs[1, 0, 1, :2] = -np.inf
    pys[0, 0, 2, 1] = -np.inf
    xs, ys = [_t(x, False) for x in pxs], [_t(y, False) for y in pys]
    boundary = np.array([[0, 0, 2, 3], [0, 0, 4, 3]], np.int64)  # item 1: 4 symbols, 3 frames
    rows = paddle_ext.joint_mutual_information_recursion(xs, ys, _t(boundary))
    expected = refs.joint_mutual_information(pxs, pys, boundary)
    np.testing.assert_allclose(rows.numpy(), expected, rtol=1e-12)
    assert np.isfinite(rows.numpy()[:, 0]).all()
    assert rows.numpy()[0, 1] == -np.inf and rows.numpy()[1, 1] == 0
    rows.sum().backward()
    for x in xs + ys:
        g = x.grad.numpy()
        assert np.isfinite(g).all() and (g[1] == 0).all() and np.abs(g[0]).sum() > 0


def test_half_inputs_are_computed_in_float32():
    pxs, pys, boundary = terms(2, seed=9)
    rows32 = paddle_ext.joint_mutual_information_recursion([_t(x.astype(np.float32)) for x in pxs],
                                                           [_t(y.astype(np.float32)) for y in pys], _t(boundary))
    xs = [_t(x).astype("float16") for x in pxs]
    for x in xs:
        x.stop_gradient = False
    rows16 = paddle_ext.joint_mutual_information_recursion(xs, [_t(y).astype("float16") for y in pys], _t(boundary))
    assert rows16.dtype == paddle.float16
    ref = refs.joint_mutual_information(np.stack([x.astype(np.float16) for x in pxs]).astype(np.float64),
                                        np.stack([y.astype(np.float16) for y in pys]).astype(np.float64), boundary)
    np.testing.assert_allclose(rows16.astype("float32").numpy(), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(rows32.numpy(), refs.joint_mutual_information(pxs, pys, boundary), rtol=1e-5)
    rows16.sum().backward()
    assert xs[0].grad.dtype == paddle.float16


@pytest.mark.parametrize("px,py,exc,match", [
    ([], [], TypeError, "px must be a non-empty list of tensors"),
    ("x", ["y"], TypeError, "px must be a non-empty list of tensors, got str"),
    (["a", "b"], ["a"], ValueError, "px and py must have the same length, got 2 and 1"),
    (["x"], ["np"], TypeError, r"py\[0\] must be a paddle.Tensor, got ndarray"),
    (["x", "x_short"], ["y", "y"], ValueError, r"px\[1\] must have the shape and dtype of px\[0\]"),
    (["x"], ["y_bad"], ValueError, "py must have shape"),
    (["x", "x32"], ["y", "y"], ValueError, r"px\[1\] must have the shape and dtype of px\[0\]"),
    (["x"], ["y32"], TypeError, "py must have px's dtype"),
])
def test_errors_name_the_argument(px, py, exc, match):
    pxs, pys, _ = terms(2)
    named = {"x": _t(pxs[0]), "x_short": _t(pxs[0][:, :-1]), "y": _t(pys[0]), "y_bad": _t(pys[0][:, :-1]),
             "np": pys[0], "a": _t(pxs[0]), "b": _t(pxs[1]),
             "x32": _t(pxs[0].astype(np.float32)), "y32": _t(pys[0].astype(np.float32))}
    args = [[named.get(v, v) for v in arg] if isinstance(arg, list) else arg for arg in (px, py)]
    with pytest.raises(exc, match=match):
        paddle_ext.joint_mutual_information_recursion(*args)


def test_to_static_matches_dygraph():
    pxs, pys, boundary = terms(2, seed=10)

    def fn(x0, x1, y0, y1, boundary):
        return paddle_ext.joint_mutual_information_recursion([x0, x1], [y0, y1], boundary)

    outs = []
    for f in (fn, paddle.jit.to_static(fn, full_graph=True)):
        xs = [_t(a, False) for a in (*pxs, *pys)]
        rows = f(*xs, _t(boundary))
        (rows * _t(np.arange(6.0).reshape(2, 3))).sum().backward()
        outs.append([rows.numpy()] + [x.grad.numpy() for x in xs])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_higher_order_grads_are_refused_first_order_still_work():
    """The grad op holds the occupations constant and has no grad of its own: its double-grad op refuses."""
    pxs, pys, boundary = terms(2, seed=11)
    xs, ys = [_t(x, False) for x in pxs], [_t(y, False) for y in pys]
    rows = paddle_ext.joint_mutual_information_recursion(xs, ys, _t(boundary))
    (g,) = paddle.grad(rows.sum(), [xs[0]], create_graph=True)
    occ_x, _ = refs.mutual_information_grad(pxs.sum(0), pys.sum(0), boundary)
    np.testing.assert_allclose(g.numpy(), occ_x, rtol=1e-10, atol=1e-14)
    with pytest.raises(NotImplementedError, match=r"joint_mutual_information_recursion\b.*: higher-order grads"):
        paddle.grad((g * g).sum(), [xs[0]])


@pytest.mark.parametrize("modified", [False, True])
def test_empty_batch_and_non_contiguous_terms(modified):
    pxs, pys, _ = terms(2, modified=modified, seed=12)
    rows = paddle_ext.joint_mutual_information_recursion([_t(x[:0]) for x in pxs], [_t(y[:0]) for y in pys])
    assert rows.shape == [2, 0]
    # terms that are transposed views of [B, T, S] tensors
    xs = [_t(np.ascontiguousarray(x.transpose(0, 2, 1))).transpose([0, 2, 1]) for x in pxs]
    ys = [_t(np.ascontiguousarray(y.transpose(0, 2, 1))).transpose([0, 2, 1]) for y in pys]
    np.testing.assert_allclose(paddle_ext.joint_mutual_information_recursion(xs, ys).numpy(),
                               refs.joint_mutual_information(pxs, pys), rtol=1e-12)
