"""put_along_axis / put_along_axis_: the specification, through the OpTest harness."""

import gc
import weakref

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import (FLOAT_DTYPES, RTOL, assert_close, check_export, check_grad, check_output, round_to_dtype,
                     static_mode)

REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
# (arr shape, indices shape, axis): duplicates along the axis in every case.
CASES = [((5,), (7,), 0), ((4, 3), (6, 3), 0), ((3, 4), (3, 6), 1), ((3, 4), (3, 5), -1),
         ((2, 3, 4), (2, 5, 4), 1), ((3, 2, 4), (5, 2, 4), -3), ((2, 3, 70), (2, 3, 9), 2)]


def rand(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def rand_indices(arr_shape, idx_shape, axis, seed=1, negative=True, dtype=np.int64):
    n = arr_shape[axis]
    rng = np.random.default_rng(seed)
    low = -n if negative else 0
    return rng.integers(low, n, size=idx_shape).astype(dtype)


def put(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    return paddle_ext.put_along_axis(arr, indices, values, axis, reduce=reduce, include_self=include_self,
                                     broadcast=broadcast)


def put_inplace(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    return paddle_ext.put_along_axis_(arr, indices, values, axis, reduce=reduce, include_self=include_self,
                                      broadcast=broadcast)


def inputs_for(arr_shape, idx_shape, axis, seed=0, dtype=np.int64):
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1, dtype=dtype),
            "values": rand(idx_shape, seed + 2)}


# ------------------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("arr_shape,idx_shape,axis", CASES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_forward_float64_every_mode_and_axis(arr_shape, idx_shape, axis, reduce, include_self):
    check_output(put, inputs_for(arr_shape, idx_shape, axis), refs.put_along_axis,
                 dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_forward_every_float_dtype(dtype, reduce, include_self):
    inputs = inputs_for((6, 5), (9, 5), 0, seed=3, dtype=np.int32)
    if reduce == "mul":  # keep products of up to ~5 factors well scaled for the half types
        inputs["values"] = rand((9, 5), 4, 0.5, 1.5)
    check_output(put, inputs, refs.put_along_axis, dict(axis=0, reduce=reduce, include_self=include_self),
                 dtype=dtype)


@pytest.mark.parametrize("np_dtype", [np.int32, np.int64, np.int16, np.uint8])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_forward_integer_dtypes(np_dtype, reduce, include_self):
    rng = np.random.default_rng(5)
    low = 0 if np_dtype == np.uint8 else -9
    arr = rng.integers(low, 10, size=(4, 6)).astype(np_dtype)
    values = rng.integers(low, 10, size=(4, 9)).astype(np_dtype)
    if reduce == "mul":
        values = rng.integers(low // 4, 3, size=(4, 9)).astype(np_dtype)
    indices = rand_indices((4, 6), (4, 9), 1, seed=6)
    check_output(put, {"arr": arr, "indices": indices, "values": values}, refs.put_along_axis,
                 dict(axis=1, reduce=reduce, include_self=include_self))


def test_integer_mean_rounds_toward_negative_infinity():
    arr = paddle.to_tensor(np.array([-3, 0, 5], dtype=np.int64))
    idx = paddle.to_tensor(np.array([0, 0, 2, 2], dtype=np.int64))
    vals = paddle.to_tensor(np.array([-4, 0, 2, 1], dtype=np.int64))
    got = paddle_ext.put_along_axis(arr, idx, vals, 0, reduce="mean").numpy()
    np.testing.assert_array_equal(got, [-3, 0, 2])  # (-3-4+0)/3 = -2.33 -> -3; (5+2+1)/3 = 2.67 -> 2
    ref = paddle.put_along_axis(arr, idx, vals, 0, reduce="mean").numpy()
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_matches_paddle_builtin(reduce, include_self):
    x = inputs_for((5, 4), (8, 4), 0, seed=9)
    x["indices"] = x["indices"] % 5  # Paddle 3.3.1's kernels do not take negative indices
    args = [paddle.to_tensor(x["arr"]), paddle.to_tensor(x["indices"]), paddle.to_tensor(x["values"])]
    ours = paddle_ext.put_along_axis(*args, 0, reduce=reduce, include_self=include_self).numpy()
    theirs = paddle.put_along_axis(*args, 0, reduce=reduce, include_self=include_self).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_assign_is_last_write_wins():
    arr = np.zeros((3, 2))
    idx = np.array([[1, 0], [1, 0], [2, 0]])
    vals = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    got = paddle_ext.put_along_axis(paddle.to_tensor(arr), paddle.to_tensor(idx), paddle.to_tensor(vals), 0).numpy()
    np.testing.assert_array_equal(got, [[0.0, 6.0], [3.0, 0.0], [5.0, 0.0]])


def test_multiply_is_mul():
    x = inputs_for((4, 3), (6, 3), 0, seed=11)
    check_output(put, x, refs.put_along_axis, dict(axis=0, reduce="multiply", include_self=False))


@pytest.mark.parametrize("reduce", ["amin", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_nan_propagates_in_amin_amax(reduce, include_self):
    arr = np.array([[1.0, np.nan, 3.0, 4.0]])
    idx = np.array([[0, 0, 2, 3, 3]])
    vals = np.array([[np.nan, 5.0, -1.0, 9.0, np.nan]])
    got = check_output(put, {"arr": arr, "indices": idx, "values": vals}, refs.put_along_axis,
                       dict(axis=1, reduce=reduce, include_self=include_self))["dygraph"][0]
    assert np.isnan(got[0, 0]) and np.isnan(got[0, 3])
    assert np.isnan(got[0, 1])  # untouched slot keeps arr's NaN


def test_broadcast_indices_and_scalar_values():
    arr = rand((3, 4, 5))
    idx = np.array([[[0], [2]]])  # [1, 2, 1] -> broadcast to [3, 2, 5] along axis 1
    for reduce in REDUCES:
        check_output(lambda a, i: put(a, i, 2.5, 1, reduce=reduce), {"arr": arr, "indices": idx},
                     lambda a, i: refs.put_along_axis(a, i, 2.5, 1, reduce))
    # values broadcast from a lower rank, and integer arr with a Python scalar
    vals = rand((5,), 3)
    check_output(lambda a, i, v: put(a, i, v, 1, reduce="add"), {"arr": arr, "indices": idx, "values": vals},
                 lambda a, i, v: refs.put_along_axis(a, i, v, 1, "add"))
    iarr = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = paddle_ext.put_along_axis(paddle.to_tensor(iarr), paddle.to_tensor(np.array([[1], [3], [0]])), 7, 1)
    np.testing.assert_array_equal(got.numpy(), refs.put_along_axis(iarr, np.array([[1], [3], [0]]), 7, 1))


@pytest.mark.parametrize("reduce", REDUCES)
def test_no_broadcast_smaller_indices_and_larger_values(reduce):
    arr = rand((4, 5, 3), 1)
    idx = rand_indices((4, 5, 3), (2, 6, 3), 1, seed=2)  # dim 0 smaller than arr's; values larger
    vals = rand((3, 7, 4), 3)
    check_output(lambda a, i, v: put(a, i, v, 1, reduce=reduce, include_self=False, broadcast=False),
                 {"arr": arr, "indices": idx, "values": vals},
                 lambda a, i, v: refs.put_along_axis(a, i, v, 1, reduce, False, broadcast=False))


ALL_DTYPES = FLOAT_DTYPES + ("int32", "int64", "int16", "uint8")


def _block_inputs(dtype, reduce, seed=61):
    """broadcast=False with indices narrower than arr on both off-axis dims (the block path)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(-4, 4, size=(2, 6, 3))
    if dtype in FLOAT_DTYPES:
        low = 0.5 if reduce == "mul" else -2.0
        return {"arr": rand((3, 4, 5), seed, low, 2.0), "indices": idx, "values": rand((2, 6, 3), seed + 1, low, 2.0)}
    low = 0 if dtype == "uint8" else -9
    vals = rng.integers(0 if dtype == "uint8" else -2, 3 if reduce == "mul" else 10, size=(2, 6, 3))
    return {"arr": rng.integers(low, 10, size=(3, 4, 5)).astype(dtype), "indices": idx, "values": vals.astype(dtype)}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("fn", [put, put_inplace], ids=["put_along_axis", "put_along_axis_"])
def test_no_broadcast_smaller_indices_every_dtype(dtype, reduce, include_self, fn):
    check_output(lambda a, i, v: fn(a, i, v, 1, reduce=reduce, include_self=include_self, broadcast=False),
                 _block_inputs(dtype, reduce),
                 lambda a, i, v: refs.put_along_axis(a, i, v, 1, reduce, include_self, broadcast=False),
                 dtype=dtype if dtype in FLOAT_DTYPES else "float64")


def _dygraph_and_static_grads(fn, arr, idx, vals, g, dtype):
    """(arr_grad, values_grad) of sum(fn(arr, idx, vals) * g) by paddle.grad and by static gradients."""
    a = paddle.to_tensor(arr).astype(dtype)
    v = paddle.to_tensor(vals).astype(dtype)
    a.stop_gradient = v.stop_gradient = False
    out = fn(a * 1, paddle.to_tensor(idx), v)
    found = {"dygraph": [t.astype("float64").numpy() for t in paddle.grad(out, [a, v], paddle.to_tensor(g).astype(dtype))]}
    with static_mode():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            sa = paddle.static.data("a", list(arr.shape), "float32")
            sv = paddle.static.data("v", list(vals.shape), "float32")
            si = paddle.static.data("i", list(idx.shape), "int64")
            sa.stop_gradient = sv.stop_gradient = False
            out = fn(sa.astype(dtype) * 1, si, sv.astype(dtype))
            loss = (out.astype("float32") * paddle.to_tensor(g.astype(np.float32))).sum()
            grads = paddle.static.gradients([loss], [sa, sv])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed = {"a": arr.astype(np.float32), "v": vals.astype(np.float32), "i": idx}
        found["static"] = [np.asarray(r, np.float64) for r in exe.run(main, feed=feed, fetch_list=grads)]
    return found


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("fn", [put, put_inplace], ids=["put_along_axis", "put_along_axis_"])
def test_no_broadcast_smaller_indices_grads(dtype, reduce, include_self, fn):
    x = _block_inputs(dtype, reduce)
    # round to the dtype (through float32, as the static program is fed) so the reference sees the same
    arr, vals = (round_to_dtype(x[k].astype(np.float32), dtype) for k in ("arr", "values"))
    g = round_to_dtype(rand((3, 4, 5), 62).astype(np.float32), dtype)
    ra, rv = refs.put_along_axis_grad(arr, x["indices"], vals, g, 1, reduce, include_self)
    found = _dygraph_and_static_grads(
        lambda a, i, v: fn(a, i, v, 1, reduce=reduce, include_self=include_self, broadcast=False),
        arr, x["indices"], vals, g, dtype)
    rtol = max(RTOL[dtype], 1e-6)
    for mode, (ga, gv) in found.items():
        assert_close(ga, ra, dtype, rtol=rtol, what=f"{mode} arr_grad")
        assert_close(gv, rv, dtype, rtol=rtol, what=f"{mode} values_grad")


def test_empty_indices_return_arr():
    arr = rand((3, 4))
    for reduce in REDUCES:
        check_output(lambda a, i, v: put(a, i, v, 0, reduce=reduce, include_self=False),
                     {"arr": arr, "indices": np.zeros((0, 4), np.int64), "values": np.zeros((0, 4))},
                     lambda a, i, v: a)


@pytest.mark.parametrize("reduce", ["add", "mean", "amax"])
def test_deterministic_flag_is_accepted_and_both_settings_match_the_reference_on_cpu(reduce):
    x = inputs_for((5, 6), (9, 6), 0, seed=23)
    tensors = [paddle.to_tensor(v) for v in x.values()]
    a = paddle_ext.put_along_axis(*tensors, 0, reduce=reduce, include_self=False, deterministic=True).numpy()
    b = paddle_ext.put_along_axis(*tensors, 0, reduce=reduce, include_self=False).numpy()
    want = refs.put_along_axis(*x.values(), 0, reduce, include_self=False)
    np.testing.assert_allclose(a, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        paddle_ext.put_along_axis(*tensors, 0, reduce=reduce, deterministic="yes")


def test_int32_and_int64_indices_agree():
    x = inputs_for((5, 6), (5, 8), 1, seed=21)
    a = put(*[paddle.to_tensor(v) for v in x.values()], 1, reduce="mean")
    x32 = dict(x, indices=x["indices"].astype(np.int32))
    b = put(*[paddle.to_tensor(v) for v in x32.values()], 1, reduce="mean")
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_large_graph_case_uses_every_partition():
    # Exercises the parallel paths: by outer block, by inner columns, and by destination range.
    rng = np.random.default_rng(0)
    # (each has > 2**21 positions: enough for the kernel to use both threads)
    for arr_shape, idx_shape, axis in [((64, 300, 2), (64, 16500, 2), 1), ((500, 64), (33000, 64), 0),
                                       ((3000,), (2_100_000,), 0)]:
        arr = rng.normal(size=arr_shape)
        idx = rng.integers(-arr_shape[axis], arr_shape[axis], size=idx_shape)
        vals = rng.normal(size=idx_shape)
        for reduce in ("assign", "add", "mean", "amax"):
            got = put(paddle.to_tensor(arr), paddle.to_tensor(idx), paddle.to_tensor(vals), axis, reduce=reduce,
                      include_self=False).numpy()
            want = _fast_ref(arr, idx, vals, axis, reduce)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _fast_ref(arr, idx, vals, axis, reduce):
    """Vectorised include_self=False reference for the large cases (np.add.at / maximum.at)."""
    a = np.moveaxis(arr, axis, 0).copy()
    i = np.moveaxis(idx, axis, 0) % arr.shape[axis]
    v = np.moveaxis(vals, axis, 0)
    rest = np.indices(i.shape)[1:]
    loc = (i,) + tuple(rest)
    touched = np.zeros(a.shape, bool)
    touched[loc] = True
    if reduce == "assign":
        order = np.arange(i.size).reshape(i.shape)
        win = np.full(a.shape, -1)
        np.maximum.at(win, loc, order)
        flat = v.reshape(-1)
        a[touched] = flat[win[touched]]
    elif reduce in ("add", "mean"):
        s = np.zeros(a.shape)
        c = np.zeros(a.shape)
        np.add.at(s, loc, v)
        np.add.at(c, loc, 1)
        a[touched] = s[touched] / (c[touched] if reduce == "mean" else 1)
    else:
        m = np.full(a.shape, -np.inf)
        np.maximum.at(m, loc, v)
        a[touched] = m[touched]
    return np.moveaxis(a, 0, axis)


# ------------------------------------------------------------------------------------------ inplace
@pytest.mark.parametrize("reduce", REDUCES)
def test_inplace_dygraph_writes_arr(reduce):
    x = inputs_for((4, 5), (7, 5), 0, seed=13)
    arr = paddle.to_tensor(x["arr"])
    out = paddle_ext.put_along_axis_(arr, paddle.to_tensor(x["indices"]), paddle.to_tensor(x["values"]), 0,
                                     reduce=reduce, include_self=False)
    want = refs.put_along_axis(x["arr"], x["indices"], x["values"], 0, reduce, False)
    np.testing.assert_allclose(arr.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("reduce", REDUCES)
def test_inplace_static_mode(reduce):
    x = inputs_for((4, 5), (7, 5), 0, seed=14)
    check_output(put_inplace, x, refs.put_along_axis, dict(axis=0, reduce=reduce, include_self=True))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_inplace_grad_static(reduce, include_self):
    x = inputs_for((4, 3), (6, 3), 0, seed=15)
    check_grad(lambda a, i, v: put_inplace(a * 1.0, i, v, 0, reduce=reduce, include_self=include_self), x,
               ["arr", "values"])


def test_inplace_index_error_leaves_arr_unchanged():
    arr = paddle.to_tensor(rand((3, 4)))
    before = arr.numpy().copy()
    idx = paddle.to_tensor(np.array([[0, 1, 2, 2], [1, 1, 9, 0]]))
    with pytest.raises(IndexError, match=r"index 9 at indices\[1, 2\] is out of range for axis 0 of size 3"):
        paddle_ext.put_along_axis_(arr, idx, 1.0, 0, reduce="add")
    np.testing.assert_array_equal(arr.numpy(), before)


# Non-contiguous arr (dygraph views share the base's memory, numpy's as well): the same lambda makes both.
VIEWS = {"transpose": lambda t: t.transpose([1, 0]), "strided slice": lambda t: t[:, ::2],
         "view of a view": lambda t: t[1:, ::2].transpose([1, 0])}


def _view_case(view, reduce, seed):
    base = rand((5, 6), seed)
    shape = VIEWS[view](base).shape
    idx = rand_indices(shape, (shape[0] + 2, shape[1]), 0, seed + 1)
    low = 0.5 if reduce == "mul" else -2.0
    return base, idx, rand(idx.shape, seed + 2, low, 2.0)


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_inplace_writes_through_a_view(view, reduce, include_self):
    base_np, idx, vals = _view_case(view, reduce, 71)
    base = paddle.to_tensor(base_np)
    arr = VIEWS[view](base)
    assert not arr.is_contiguous()
    want = refs.put_along_axis(VIEWS[view](base_np), idx, vals, 0, reduce, include_self)
    out = paddle_ext.put_along_axis_(arr, paddle.to_tensor(idx), paddle.to_tensor(vals), 0, reduce=reduce,
                                     include_self=include_self)
    want_base = base_np.copy()
    VIEWS[view](want_base)[...] = want  # numpy writes through its view into want_base
    for name, got, expected in [("out", out, want), ("arr", arr, want), ("base", base, want_base)]:
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inplace_writes_through_a_view_every_dtype(dtype):
    base = paddle.to_tensor(np.arange(12).reshape(3, 4)).astype(dtype)
    arr = base.transpose([1, 0])
    paddle_ext.put_along_axis_(arr, paddle.to_tensor([[0, 2, 0]]), paddle.to_tensor([[5, 6, 7]]).astype(dtype), 0,
                               reduce="add")
    want = np.arange(12).reshape(3, 4)
    want[[0, 1, 2], [0, 2, 0]] += [5, 6, 7]
    np.testing.assert_array_equal(base.astype("float64").numpy(), want)


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_inplace_grad_through_a_view(view, reduce, include_self):
    # As with Paddle's own inplace ops: the returned tensor and the view itself carry the history.
    base_np, idx, vals_np = _view_case(view, reduce, 81)
    arr_np = VIEWS[view](base_np)
    g = rand(arr_np.shape, 84)
    ra, rv = refs.put_along_axis_grad(arr_np, idx, vals_np, g, 0, reduce, include_self)
    want_base_grad = np.zeros_like(base_np)
    VIEWS[view](want_base_grad)[...] = ra
    for through in ("out", "arr"):
        x = paddle.to_tensor(base_np, stop_gradient=False)
        vals = paddle.to_tensor(vals_np, stop_gradient=False)
        arr = VIEWS[view](x * 1.0)
        out = paddle_ext.put_along_axis_(arr, paddle.to_tensor(idx), vals, 0, reduce=reduce, include_self=include_self)
        gx, gv = paddle.grad(out if through == "out" else arr, [x, vals], paddle.to_tensor(g))
        np.testing.assert_allclose(gx.numpy(), want_base_grad, rtol=1e-12, err_msg=through)
        np.testing.assert_allclose(gv.numpy(), rv, rtol=1e-12, err_msg=through)


# ------------------------------------------------------------------------------------------ grads
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("arr_shape,idx_shape,axis", [((4, 3), (6, 3), 0), ((2, 3, 4), (2, 5, 4), -2)])
def test_grad_matches_numeric(reduce, include_self, arr_shape, idx_shape, axis):
    x = inputs_for(arr_shape, idx_shape, axis, seed=17)  # distinct random values: no ties in amin/amax
    check_grad(put, x, ["arr", "values"], dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_grad_matches_reference_with_ties_and_zeros(reduce, include_self):
    # Ties for amin/amax (split evenly), zeros for mul (product of the other factors, no NaN).
    arr = np.array([[1.0, 0.0, 2.0], [3.0, 2.0, 0.0]])
    idx = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 1]])
    vals = np.array([[3.0, 0.0, 2.0], [1.0, 2.0, 0.0], [3.0, 0.0, 5.0]])
    g = rand(arr.shape, 4)
    t_arr, t_vals = paddle.to_tensor(arr, stop_gradient=False), paddle.to_tensor(vals, stop_gradient=False)
    out = put(t_arr, paddle.to_tensor(idx), t_vals, 0, reduce=reduce, include_self=include_self)
    ga, gv = paddle.grad(out, [t_arr, t_vals], grad_outputs=paddle.to_tensor(g))
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, g, 0, reduce, include_self)
    np.testing.assert_allclose(ga.numpy(), ra, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gv.numpy(), rv, rtol=1e-12, atol=1e-15)
    assert not np.isnan(ga.numpy()).any() and not np.isnan(gv.numpy()).any()


@pytest.mark.parametrize("reduce", ["add", "mean", "mul", "amax"])
def test_grad_of_broadcast_values_has_values_shape(reduce):
    arr = rand((3, 4, 5), 1)
    idx = np.array([[[0], [2], [0]]])
    vals = rand((5,), 2, 0.5, 1.5)
    check_grad(lambda a, i, v: put(a, i, v, 1, reduce=reduce), {"arr": arr, "indices": idx, "values": vals},
               ["arr", "values"])


@pytest.mark.parametrize("reduce", ["assign", "add", "mul", "amin"])
def test_grad_no_broadcast_larger_values_and_smaller_indices(reduce):
    arr = rand((4, 5, 3), 1)
    idx = rand_indices((4, 5, 3), (2, 6, 3), 1, seed=2)
    vals = rand((3, 7, 4), 3)
    check_grad(lambda a, i, v: put(a, i, v, 1, reduce=reduce, include_self=False, broadcast=False),
               {"arr": arr, "indices": idx, "values": vals}, ["arr", "values"])


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_inplace_grad_dygraph(reduce, include_self):
    x = inputs_for((4, 3), (6, 3), 0, seed=31)
    base = paddle.to_tensor(x["arr"], stop_gradient=False)
    vals = paddle.to_tensor(x["values"], stop_gradient=False)
    arr = base * 1.0  # a non-leaf, as Paddle requires for inplace ops under autograd
    out = paddle_ext.put_along_axis_(arr, paddle.to_tensor(x["indices"]), vals, 0, reduce=reduce,
                                     include_self=include_self)
    want = refs.put_along_axis(x["arr"], x["indices"], x["values"], 0, reduce, include_self)
    np.testing.assert_allclose(arr.numpy(), want, rtol=1e-12)
    g = rand((4, 3), 5)
    ga, gv = paddle.grad(out, [base, vals], grad_outputs=paddle.to_tensor(g))
    ra, rv = refs.put_along_axis_grad(x["arr"], x["indices"], x["values"], g, 0, reduce, include_self)
    np.testing.assert_allclose(ga.numpy(), ra, rtol=1e-12)
    np.testing.assert_allclose(gv.numpy(), rv, rtol=1e-12)


# ------------------------------------------------------------------------------------------ higher order
# Random data (no ties, no zeros), and data with amin/amax ties and zero factors for mul.
ARR_TIES = np.array([[1.0, 0.0, 2.0], [3.0, 2.0, 0.0], [0.5, 2.0, -1.0]])
IDX_TIES = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 1], [1, 0, 0]])
VALS_TIES = np.array([[3.0, 0.0, 2.0], [1.0, 2.0, 0.0], [3.0, 0.0, 5.0], [0.0, 0.5, 2.0]])


def _first_grads(arr, idx, vals, w, reduce, include_self, inplace, create_graph):
    """(leaves, d/d(arr, values) of sum(w * put(arr, idx, vals))) with arr, values and w as leaves."""
    leaves = [paddle.to_tensor(x, stop_gradient=False) for x in (arr, vals, w)]
    a, v, weight = leaves
    fn = paddle_ext.put_along_axis_ if inplace else paddle_ext.put_along_axis
    out = fn(a * 1.0 if inplace else a, paddle.to_tensor(idx), v, 0, reduce=reduce, include_self=include_self)
    return leaves, paddle.grad((out * weight).sum(), [a, v], create_graph=create_graph)


def _check_second_order(arr, idx, vals, reduce, include_self, inplace, wrt=(0, 1, 2)):
    """Grads of <u, first grads> w.r.t. arr, values and the upstream weights against central differences
    of the (fused, first-order) grads; `wrt` leaves out leaves at which the first grads jump."""
    w, u_arr, u_vals = rand(arr.shape, 91), rand(arr.shape, 92), rand(vals.shape, 93)
    leaves, (ga, gv) = _first_grads(arr, idx, vals, w, reduce, include_self, inplace, create_graph=True)
    for got, fused in zip((ga, gv), _first_grads(arr, idx, vals, w, reduce, include_self, inplace, False)[1]):
        np.testing.assert_allclose(got.numpy(), fused.numpy(), rtol=1e-12)  # first order: same with create_graph
    second = paddle.grad((ga * paddle.to_tensor(u_arr)).sum() + (gv * paddle.to_tensor(u_vals)).sum(),
                         [leaves[k] for k in wrt], allow_unused=True)
    point, delta = [arr, vals, w], 1e-6
    for k, got in zip(wrt, second):
        numeric = np.zeros_like(point[k])
        for i in np.ndindex(point[k].shape):
            sides = []
            for sign in (1, -1):
                moved = [p.copy() for p in point]
                moved[k][i] += sign * delta
                fa, fv = _first_grads(moved[0], idx, moved[1], moved[2], reduce, include_self, inplace, False)[1]
                sides.append((fa.numpy() * u_arr).sum() + (fv.numpy() * u_vals).sum())
            numeric[i] = (sides[0] - sides[1]) / (2 * delta)
        got = np.zeros_like(numeric) if got is None else got.numpy()
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8, err_msg=f"w.r.t. {['arr', 'values', 'w'][k]}")


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True], ids=["put_along_axis", "put_along_axis_"])
def test_second_order_grads_random(reduce, include_self, inplace):
    x = inputs_for((3, 4), (5, 4), 0, seed=95)
    _check_second_order(x["arr"], x["indices"], x["values"], reduce, include_self, inplace)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True], ids=["put_along_axis", "put_along_axis_"])
def test_second_order_grads_ties_and_zeros(reduce, include_self, inplace):
    # Zeros: mul's grads are polynomials, differentiable everywhere. Ties: amin/amax's grads jump when a
    # tied arr or value moves, so there only the (linear) dependence on the upstream grad is checked.
    wrt = (2,) if reduce in ("amin", "amax") else (0, 1, 2)
    _check_second_order(ARR_TIES, IDX_TIES, VALS_TIES, reduce, include_self, inplace, wrt)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("inplace", [False, True], ids=["put_along_axis", "put_along_axis_"])
@pytest.mark.parametrize("wrt", ["arr", "values"])
def test_grad_of_one_input_only(reduce, inplace, wrt):
    """paddle.grad for one of two inputs that both require grad (Paddle prunes the other's path)."""
    x = inputs_for((4, 3), (6, 3), 0, seed=97)
    g = rand((4, 3), 98)
    want = dict(zip(("arr", "values"), refs.put_along_axis_grad(x["arr"], x["indices"], x["values"], g, 0, reduce)))
    for create_graph in (False, True):
        a, v = (paddle.to_tensor(x[k], stop_gradient=False) for k in ("arr", "values"))
        fn = paddle_ext.put_along_axis_ if inplace else paddle_ext.put_along_axis
        out = fn(a * 1.0 if inplace else a, paddle.to_tensor(x["indices"]), v, 0, reduce=reduce)
        (got,) = paddle.grad(out, [a if wrt == "arr" else v], paddle.to_tensor(g), create_graph=create_graph)
        np.testing.assert_allclose(got.numpy(), want[wrt], rtol=1e-12, err_msg=f"create_graph={create_graph}")


@pytest.mark.parametrize("reduce", ["mul", "amin", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_output_modified_inplace_before_backward_is_an_error(reduce, include_self):
    # These grads read the output: a later inplace change must not give silently wrong grads.
    a = paddle.to_tensor(np.array([1.0, 2.0, 3.0]), stop_gradient=False)
    v = paddle.to_tensor(np.array([5.0, 1.0]), stop_gradient=False)
    out = paddle_ext.put_along_axis(a, paddle.to_tensor(np.array([0, 0])), v, 0, reduce=reduce,
                                    include_self=include_self)
    with paddle.no_grad():
        out.add_(paddle.ones([3], "float64"))
    with pytest.raises(OSError, match="modified by an inplace operation"):  # Paddle wraps a PyLayer's error
        paddle.grad(out.sum(), [a, v])


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("inplace", [False, True], ids=["put_along_axis", "put_along_axis_"])
def test_output_without_backward_is_freed(reduce, inplace):
    # The PyLayer keeps what its backward needs without a reference cycle through the output's grad
    # node: an output whose backward never runs is freed with its last reference.
    a = paddle.to_tensor(rand((4, 3), 99), stop_gradient=False)
    src = a * 1.0 if inplace else a
    fn = paddle_ext.put_along_axis_ if inplace else paddle_ext.put_along_axis
    out = fn(src, paddle.to_tensor(np.zeros((2, 3), np.int64)), paddle.ones([2, 3], "float64"), 0, reduce=reduce)
    ref = weakref.ref(out)
    del out, src
    gc.collect()
    assert ref() is None


def test_third_order_grads_mul():
    """mul's grads are products of the other factors, so the third derivative of the slot a*v0*v1*v2 by
    (v0, v1, v2) is a, even where v0 = 0: the composition stays differentiable beyond second order."""
    a = paddle.to_tensor(np.array([2.0, 0.0]), stop_gradient=False)
    v = paddle.to_tensor(np.array([0.0, 3.0, 5.0, 7.0]), stop_gradient=False)
    out = paddle_ext.put_along_axis(a, paddle.to_tensor(np.array([0, 0, 0, 1])), v, 0, reduce="mul")
    (g1,) = paddle.grad(out[0], v, create_graph=True)
    (g2,) = paddle.grad(g1[0], v, create_graph=True)
    (g3,) = paddle.grad(g2[1], v)
    np.testing.assert_array_equal(g1.numpy(), [30.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(g2.numpy(), [0.0, 10.0, 6.0, 0.0])
    np.testing.assert_array_equal(g3.numpy(), [0.0, 0.0, 2.0, 0.0])


# ------------------------------------------------------------------------------------------ errors
def _t(a):
    return paddle.to_tensor(np.asarray(a))


@pytest.mark.parametrize("kwargs,exc,message", [
    (dict(reduce="max"), ValueError, r"reduce='max' is not one of"),
    (dict(axis=2), IndexError, r"axis=2 is out of range for a tensor of rank 2"),
    (dict(indices=_t(np.zeros((2, 3), np.float32))), TypeError, r"indices must be int32 or int64, got float32"),
    (dict(values=_t(np.zeros((2, 3), np.float32))), TypeError,
     r"values has dtype float32 but arr has dtype float64"),
    (dict(indices=_t(np.zeros((2, 2), np.int64))), ValueError,
     r"indices.shape\[1\] = 2 can be neither broadcast to nor matched with arr.shape\[1\] = 3"),
    (dict(indices=_t(np.zeros((2,), np.int64))), ValueError, r"indices must have arr's rank 2"),
    (dict(values=_t(np.zeros((4, 3)))), ValueError, r"values of shape \[4, 3\] cannot be broadcast"),
    (dict(indices=_t(np.array([[0, 1, 4]])), values=1.0), IndexError,
     r"index 4 at indices\[0, 2\] is out of range for axis 0 of size 4 \(expected -4 <= index < 4\)"),
    (dict(indices=_t(np.array([[0, -5, 1]])), values=1.0), IndexError, r"index -5 at indices\[0, 1\] is out of range"),
    (dict(include_self="yes"), TypeError, r"include_self must be a bool"),
    (dict(values="a"), TypeError, r"values must be a paddle.Tensor or a Python number"),
    (dict(arr=np.zeros((4, 3))), TypeError, r"arr must be a paddle.Tensor"),
    (dict(broadcast=False, indices=_t(np.zeros((2, 5), np.int64))), ValueError,
     r"with broadcast=False indices.shape\[1\] = 5 must be <= arr.shape\[1\] = 3"),
    (dict(broadcast=False, values=_t(np.zeros((1, 3)))), ValueError,
     r"with broadcast=False indices.shape\[0\] = 2 must be <= values.shape\[0\] = 1"),
])
def test_errors_name_the_argument_and_value(kwargs, exc, message):
    args = dict(arr=_t(np.zeros((4, 3))), indices=_t(np.zeros((2, 3), np.int64)), values=_t(np.ones((2, 3))),
                axis=0, reduce="add")
    args.update(kwargs)
    for fn in (paddle_ext.put_along_axis, paddle_ext.put_along_axis_):
        with pytest.raises(exc, match=message):
            fn(**args)


def test_unsupported_arr_dtype_is_type_error():
    with pytest.raises(TypeError, match=r"arr has dtype bool"):
        paddle_ext.put_along_axis(_t(np.zeros((2,), bool)), _t(np.zeros((1,), np.int64)), True, 0)


# ------------------------------------------------------------------------------------------ export
@pytest.mark.parametrize("reduce", ["mean", "amax"])
def test_export_round_trip(reduce):
    x = inputs_for((6, 4), (9, 4), 0, seed=41)
    x = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in x.items()}
    check_export(lambda a, i, v: put(a, i, v, 0, reduce=reduce, include_self=False), x)


@pytest.mark.parametrize("rows,n,m", [(3, 5, 7), (4, 9, 17), (2, 1000, 333), (64, 64, 64), (1, 3, 1)])
def test_add_values_grad_along_last_axis_is_a_gather(rows, n, m):
    # The float32/int64 gather of add's values_grad (AVX-512 where the CPU has it, with a scalar tail):
    # negative indices wrap, widths that are not a multiple of 8.
    rng = np.random.default_rng(rows * 1000 + m)
    arr = paddle.to_tensor(rng.standard_normal((rows, n)).astype(np.float32), stop_gradient=False)
    idx = rng.integers(-n, n, (rows, m))
    values = paddle.to_tensor(rng.standard_normal((rows, m)).astype(np.float32), stop_gradient=False)
    out = paddle_ext.put_along_axis(arr, paddle.to_tensor(idx), values, -1, reduce="add")
    g = rng.standard_normal(out.shape).astype(np.float32)
    _, values_grad = paddle.grad(out, [arr, values], paddle.to_tensor(g))
    np.testing.assert_array_equal(values_grad.numpy(), np.take_along_axis(g, np.where(idx < 0, idx + n, idx), -1))


# ========================================================================================= integer `mean`
# The mean of integers is the floor of sum / count (PyTorch's scatter_reduce). The mean always fits in
# the dtype, the sum need not: it is accumulated in int64 (int32 counts keep sums of up to 32-bit
# values exact there). `add` and `mul` wrap around in the dtype, as in PyTorch and the reference.
INT_DTYPES = ["uint8", "int16", "int32", "int64"]


def _int_values(dtype, shape, seed):
    """Values spread over the dtype's whole range (int64: a range whose int64 sums cannot overflow)."""
    info = np.iinfo(dtype)
    low, high = (info.min, info.max) if dtype != "int64" else (-2 ** 50, 2 ** 50)
    return np.random.default_rng(seed).integers(low, high, size=shape, endpoint=True).astype(dtype)


def _int_put(arr, indices, values, axis, reduce, include_self, inplace=False):
    a = paddle.to_tensor(arr)
    fn = put_inplace if inplace else put
    out = fn(a, paddle.to_tensor(indices), paddle.to_tensor(values), axis, reduce=reduce,
             include_self=include_self)
    assert out.dtype == a.dtype
    return (a if inplace else out).numpy()


@pytest.mark.parametrize("dtype,count,expected", [("uint8", 100, 2), ("int16", 20000, 2), ("int32", 3, 2),
                                                   ("int64", 3, 2)])
def test_integer_mean_of_many_equal_values_is_their_floor_mean(dtype, count, expected):
    # arr = [0], `count` values of 3 at index 0 -> floor(3 * count / (count + 1))
    out = _int_put(np.zeros(1, dtype), np.zeros(count, np.int64), np.full(count, 3, dtype), 0, "mean", True)
    assert out.tolist() == [expected]


# (arr shape, indices shape, axis, index rows): the last axis reaches the flat kernels; a leading axis
# the general ones, with index rows that agree over the inner columns (row-level bookkeeping) or not.
INT_MEAN_CASES = [((3, 4), (3, 300), 1, "random"), ((5,), (400,), -1, "random"),
                  ((4, 3), (300, 3), 0, "random"), ((4, 8), (300, 8), 0, "uniform"),
                  ((2, 4, 3), (2, 250, 3), 1, "random"), ((2, 8), (700, 8), 0, "uniform")]


def _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows, seed=0):
    indices = rand_indices(arr_shape, idx_shape, axis, seed + 1)
    if rows == "uniform":  # every index row aims at one destination row
        indices = np.repeat(indices[..., :1], idx_shape[-1], axis=-1)
    return _int_values(dtype, arr_shape, seed), indices, _int_values(dtype, idx_shape, seed + 2)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("arr_shape,idx_shape,axis,rows", INT_MEAN_CASES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_integer_mean_sums_do_not_overflow(dtype, arr_shape, idx_shape, axis, rows, include_self, inplace):
    arr, indices, values = _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows)
    got = _int_put(arr, indices, values, axis, "mean", include_self, inplace)
    np.testing.assert_array_equal(got, refs.put_along_axis(arr, indices, values, axis, "mean", include_self))


@pytest.mark.parametrize("include_self", [True, False])
def test_mean_of_more_than_255_agreeing_rows_per_destination_row(include_self):
    # ~350 index rows aim at each destination row: a per-row count past a byte (the row counts' carry)
    arr, values = rand((2, 8)), rand((700, 8), seed=2)
    indices = np.repeat(rand_indices((2, 8), (700, 1), 0, seed=1), 8, axis=1)
    assert np.bincount(indices[:, 0] % 2).min() > 255
    got = put(*map(paddle.to_tensor, (arr, indices, values)), 0, "mean", include_self).numpy()
    assert_close(got, refs.put_along_axis(arr, indices, values, 0, "mean", include_self), "float64")


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("reduce", ["add", "mul"])
@pytest.mark.parametrize("arr_shape,idx_shape,axis,rows", INT_MEAN_CASES[:1] + INT_MEAN_CASES[3:4])
@pytest.mark.parametrize("include_self", [True, False])
def test_integer_add_and_mul_wrap_around_in_the_dtype(dtype, reduce, arr_shape, idx_shape, axis, rows, include_self):
    arr, indices, values = _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows, seed=5)
    if dtype == "int64":  # wrap-around in int64 itself
        values = values * np.int64(2 ** 12)
    got = _int_put(arr, indices, values, axis, reduce, include_self)
    with np.errstate(over="ignore"):
        expected = refs.put_along_axis(arr, indices, values, axis, reduce, include_self)
    np.testing.assert_array_equal(got, expected)


# ================================================================ grads where arr or values are non-finite
# mul's grads are the products of the other factors of the slot (never out / factor, which is NaN or
# wrong at ±inf, NaN, zeros, underflow and overflow); amin/amax's go to the contributors that are the
# result, split evenly, and the contributors of a NaN result are its NaNs; an unwritten slot passes
# its grad through whatever it holds. unittests/refs.py::put_along_axis_grad is the specification.
def _put_grads(arr, idx, vals, axis, reduce, include_self=True, dtype="float64", g=None):
    """(out, arr_grad, values_grad) as float64 arrays, the upstream grad ones unless given."""
    a = paddle.to_tensor(np.asarray(arr, np.float64)).astype(dtype)
    v = paddle.to_tensor(np.asarray(vals, np.float64)).astype(dtype)
    a.stop_gradient = v.stop_gradient = False
    out = put(a, paddle.to_tensor(np.asarray(idx)), v, axis, reduce=reduce, include_self=include_self)
    g = paddle.ones_like(out) if g is None else paddle.to_tensor(np.asarray(g, np.float64)).astype(dtype)
    ga, gv = paddle.grad(out, [a, v], g)
    wide = "float32" if dtype in ("float16", "bfloat16") else dtype
    return tuple(x.astype(wide).numpy().astype(np.float64) for x in (out, ga, gv))


@pytest.mark.parametrize("x", [np.inf, -np.inf, np.nan])
def test_mul_unwritten_non_finite_slot_passes_its_grad_through(x):
    _, ga, gv = _put_grads([x, 1.0, 2.0], [1], [5.0], 0, "mul")
    np.testing.assert_array_equal(ga, [1.0, 5.0, 1.0])
    np.testing.assert_array_equal(gv, [1.0])


@pytest.mark.parametrize("x", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("axis_last", [True, False], ids=["flat", "general"])
def test_mul_grad_of_a_non_finite_factor_is_the_product_of_the_others(x, axis_last):
    # arr = [2, 3], values = [x] at index 0: d/dx = 2 (arr's factor), d/d(arr[0]) = x
    arr, idx, vals = np.array([[2.0, 3.0]] * 3), np.zeros((3, 1), np.int64), np.full((3, 1), x)
    if not axis_last:  # the same slots along axis 0 with 3 inner columns (the general kernels)
        arr, idx, vals = arr.T.copy(), idx.T.copy(), vals.T.copy()
    _, ga, gv = _put_grads(arr, idx, vals, 1 if axis_last else 0, "mul")
    np.testing.assert_array_equal(gv, np.full(vals.shape, 2.0))
    want = np.array([[x, 1.0]] * 3)
    np.testing.assert_array_equal(ga, want if axis_last else want.T)


@pytest.mark.parametrize("reduce,arr_grad,values_grad", [("amin", [[1.0, 1.0, 1.0]], [[0.0]]),
                                                         ("amax", [[1.0, 0.0, 1.0]], [[1.0]])])
def test_amin_amax_unwritten_nan_slot_passes_its_grad_through(reduce, arr_grad, values_grad):
    out, ga, gv = _put_grads([[np.nan, 1.0, 2.0]], [[1]], [[5.0]], 1, reduce)
    assert np.isnan(out[0, 0])
    np.testing.assert_array_equal(ga, arr_grad)
    np.testing.assert_array_equal(gv, values_grad)


@pytest.mark.parametrize("reduce", ["amin", "amax"])
@pytest.mark.parametrize("axis_last", [True, False], ids=["flat", "general"])
def test_amin_amax_nan_result_gives_its_grad_to_the_nans(reduce, axis_last):
    # slot 1: arr 1 and two NaN values -> NaN, split between the NaNs; slot 0: arr NaN and a NaN value
    # -> split between them; slot 2: arr 2, values 2 and 7 -> the ties (amin: 2 and 2; amax: 7)
    arr = np.array([[np.nan, 1.0, 2.0]])
    idx = np.array([[1, 0, 2, 1, 2, 0]])
    vals = np.array([[np.nan, np.nan, 2.0, np.nan, 7.0, 4.0]])
    if not axis_last:  # along axis 0 with 2 equal inner columns (the general kernels)
        arr, idx, vals = (np.repeat(x.T, 2, axis=1) for x in (arr, idx, vals))
    g = np.repeat(np.arange(1.0, 4.0), arr.size // 3).reshape(arr.shape)
    out, ga, gv = _put_grads(arr, idx, vals, 1 if axis_last else 0, reduce, g=g)
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, g, 1 if axis_last else 0, reduce, True)
    assert_close(ga, ra, "float64", what="arr grad")
    assert_close(gv, rv, "float64", what="values grad")
    want_v = [2 / 2, 1 / 2, 3 / 2 if reduce == "amin" else 0.0, 2 / 2, 0.0 if reduce == "amin" else 3.0, 0.0]
    want_a = [1 / 2, 0.0, 3 / 2 if reduce == "amin" else 0.0]
    np.testing.assert_array_equal(gv, np.reshape(want_v, (1, 6)) if axis_last else np.repeat(want_v, 2).reshape(6, 2))
    np.testing.assert_array_equal(ga, np.reshape(want_a, (1, 3)) if axis_last else np.repeat(want_a, 2).reshape(3, 2))


# (arr shape, indices shape, axis, index rows): the flat kernels (last axis), the general ones with
# scattered index rows, with rows that agree over the inner columns (row-level bookkeeping), and a
# middle axis.
NON_FINITE_LAYOUTS = {"flat": ((3, 7), (3, 15), 1, "random"), "scattered": ((7, 5), (15, 5), 0, "random"),
                      "row_uniform": ((7, 16), (15, 16), 0, "uniform"), "middle": ((2, 6, 3), (2, 13, 3), -2, "random")}
# Factors whose quotient out / factor is not the product of the others. (Products that underflow or
# overflow part-way are order-dependent; test_mul_grads_where_the_product_underflows_or_overflows
# checks them with values where every order agrees.)
SPECIALS = [np.inf, -np.inf, np.nan, 0.0]


def _non_finite_inputs(layout, dtype, seed, fraction=0.2):
    arr_shape, idx_shape, axis, rows = NON_FINITE_LAYOUTS[layout]
    rng = np.random.default_rng(seed)
    idx = rand_indices(arr_shape, idx_shape, axis % len(arr_shape), seed + 1)
    if rows == "uniform":
        idx = np.repeat(idx[..., :1], idx_shape[-1], axis=-1)
    arr = rng.uniform(0.5, 2.0, arr_shape) * rng.choice([-1.0, 1.0], arr_shape)
    vals = rng.uniform(0.5, 2.0, idx_shape) * rng.choice([-1.0, 1.0], idx_shape)
    if seed % 3 == 0:  # integers: ties for amin/amax
        arr, vals = np.round(arr), np.round(vals)
    for x in (arr, vals):
        hit = rng.random(x.shape) < fraction
        x[hit] = rng.choice(SPECIALS, size=int(hit.sum()))
    return round_to_dtype(arr, dtype), idx, round_to_dtype(vals, dtype), axis


@pytest.mark.parametrize("layout", list(NON_FINITE_LAYOUTS))
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grads_with_non_finite_arr_and_values_match_reference(layout, reduce, include_self, dtype, seed):
    arr, idx, vals, axis = _non_finite_inputs(layout, dtype, seed)
    g = round_to_dtype(rand(arr.shape, seed + 7), dtype)
    out, ga, gv = _put_grads(arr, idx, vals, axis, reduce, include_self, dtype, g)
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, g, axis, reduce, include_self)
    rtol = {"float64": 1e-12, "float32": 1e-5}[dtype]
    assert_close(out, round_to_dtype(refs.put_along_axis(arr, idx, vals, axis, reduce, include_self), dtype), dtype,
                 rtol=rtol, atol=0, what="out")
    assert_close(ga, round_to_dtype(ra, dtype), dtype, rtol=rtol, atol=0, what="arr grad")
    assert_close(gv, round_to_dtype(rv, dtype), dtype, rtol=rtol, atol=0, what="values grad")


@pytest.mark.parametrize("layout", list(NON_FINITE_LAYOUTS))
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_grads_with_non_finite_arr_and_values_match_reference(layout, reduce, include_self, dtype):
    # float32 accumulation, one rounding to the dtype: within a few of its ulps of the float64 reference
    arr, idx, vals, axis = _non_finite_inputs(layout, dtype, 5)
    g = round_to_dtype(rand(arr.shape, 12), dtype)
    out, ga, gv = _put_grads(arr, idx, vals, axis, reduce, include_self, dtype, g)
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, g, axis, reduce, include_self)
    tol = {"float16": 4e-3, "bfloat16": 3e-2}[dtype]
    assert_close(out, round_to_dtype(refs.put_along_axis(arr, idx, vals, axis, reduce, include_self), dtype), dtype,
                 rtol=tol, atol=tol, what="out")
    assert_close(ga, round_to_dtype(ra, dtype), dtype, rtol=tol, atol=tol, what="arr grad")
    assert_close(gv, round_to_dtype(rv, dtype), dtype, rtol=tol, atol=tol, what="values grad")


@pytest.mark.parametrize("dtype,e", [("float64", 600), ("float32", 80)])
@pytest.mark.parametrize("axis_last", [True, False], ids=["flat", "general"])
def test_mul_grads_where_the_product_underflows_or_overflows(dtype, e, axis_last):
    # Powers of two, so every product is exact wherever it is in range. Slot 0: 2^-e * 2^-e underflows
    # to 0 before 2^e comes (out = 0, yet the product of the others of 2^-e is 1); slot 1: 2^e * 2^e
    # overflows (out = inf, the others of 2^e: 1); slot 2: a subnormal arr (out subnormal).
    tiny = {"float64": -1070, "float32": -140}[dtype]
    arr = np.array([2.0 ** -e, 2.0 ** e, 2.0 ** tiny])
    idx = np.array([0, 0, 1, 1, 2, 2])
    vals = np.array([2.0 ** -e, 2.0 ** e, 2.0 ** e, 2.0 ** -e, 2.0 ** 10, 2.0 ** -3])
    want_a, want_v = [1.0, 1.0, 2.0 ** 7], [1.0, 0.0, 1.0, np.inf, 2.0 ** (tiny - 3), 2.0 ** (tiny + 10)]
    if axis_last:
        arr, idx, vals = arr[None], idx[None], vals[None]
    else:  # along axis 0 with 2 inner columns
        arr, idx, vals = (np.repeat(x[:, None], 2, axis=1) for x in (arr, idx, vals))
    out, ga, gv = _put_grads(arr, idx, vals, 1 if axis_last else 0, "mul", True, dtype)
    np.testing.assert_array_equal(out.reshape(-1)[::1 if axis_last else 2], [0.0, np.inf, 2.0 ** (tiny + 7)])
    np.testing.assert_array_equal(ga.reshape(-1)[::1 if axis_last else 2], want_a)
    np.testing.assert_array_equal(gv.reshape(-1)[::1 if axis_last else 2], want_v)
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, np.ones(arr.shape), 1 if axis_last else 0, "mul", True)
    np.testing.assert_array_equal(ga, round_to_dtype(ra, dtype))  # the reference, in float64, rounded
    np.testing.assert_array_equal(gv, round_to_dtype(rv, dtype))


@pytest.mark.parametrize("reduce", ["mul", "amin", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_first_order_grads_with_create_graph_agree_at_non_finite_values(reduce, include_self):
    # the differentiable composition (create_graph=True) follows the same rules as the fused kernels
    arr, idx, vals, axis = _non_finite_inputs("scattered", "float64", 4)
    g = rand(arr.shape, 8)
    grads = []
    for create_graph in (False, True):
        a, v = (paddle.to_tensor(x, stop_gradient=False) for x in (arr, vals))
        out = put(a, paddle.to_tensor(idx), v, axis, reduce=reduce, include_self=include_self)
        grads.append([x.numpy() for x in paddle.grad(out, [a, v], paddle.to_tensor(g), create_graph=create_graph)])
    ra, rv = refs.put_along_axis_grad(arr, idx, vals, g, axis, reduce, include_self)
    for (ga, gv), what in zip(grads, ("fused", "create_graph")):
        assert_close(ga, ra, "float64", rtol=1e-12, atol=0, what=f"{what} arr grad")
        assert_close(gv, rv, "float64", rtol=1e-12, atol=0, what=f"{what} values grad")


@pytest.mark.parametrize("reduce,include_self", [("mul", True), ("mul", False), ("amax", True), ("amin", False)])
def test_large_non_finite_grads_on_every_partition(reduce, include_self):
    # The parallel paths (by outer block, by inner columns, by destination range; > 2**21 positions) with
    # ±inf, NaN and zeros, against the differentiable composition (create_graph=True: products of the
    # others by a doubling scan, ties from the forward kernel), an independent implementation.
    rng = np.random.default_rng(3)
    for arr_shape, idx_shape, axis in [((64, 300, 2), (64, 16500, 2), 1), ((500, 64), (33000, 64), 0),
                                       ((3000,), (2_100_000,), 0)]:
        arr, vals = rng.normal(size=arr_shape), rng.normal(size=idx_shape)
        for x in (arr, vals):
            hit = rng.random(x.shape) < 0.01
            x[hit] = rng.choice(SPECIALS, size=int(hit.sum()))
        idx = paddle.to_tensor(rng.integers(-arr_shape[axis], arr_shape[axis], size=idx_shape))
        grads = []
        for create_graph in (False, True):
            a, v = (paddle.to_tensor(x, stop_gradient=False) for x in (arr, vals))
            out = put(a, idx, v, axis, reduce=reduce, include_self=include_self)
            g = paddle.to_tensor(rng.normal(size=arr_shape)) if not grads else g
            grads.append([t.numpy() for t in paddle.grad(out, [a, v], g, create_graph=create_graph)])
        for got, want, what in zip(grads[0], grads[1], ("arr grad", "values grad")):
            assert_close(got, want, "float64", rtol=1e-11, atol=0, what=f"{what} {arr_shape}")


# ------------------------------------------------------------------ broadcast=False, a scalar value
@pytest.mark.parametrize("reduce", ["assign", "add", "amax"])
def test_no_broadcast_scalar_value_with_narrower_indices(reduce):
    # A Python-number value with broadcast=False fills the indices' shape; indices narrower than arr off
    # the axis still scatter into that corner only (the rest of arr is kept).
    arr = rand((4, 5), 3)
    idx = np.array([[0, 3], [2, 2]], np.int64)
    out = paddle_ext.put_along_axis(paddle.to_tensor(arr), paddle.to_tensor(idx), 2.5, 0, reduce=reduce,
                                    broadcast=False)
    np.testing.assert_allclose(out.numpy(), refs.put_along_axis(arr, idx, np.full(idx.shape, 2.5), 0, reduce,
                                                                broadcast=False))


# ------------------------------------------------- independent indices into a large destination
def _scattered_case(arr_shape, idx_shape, dtype, index_dtype, seed, mixed=False):
    """Independent indices (negative ones too, duplicates) into a destination well beyond L2, which the
    kernel partitions by destination block; values with ±inf, NaN, zeros and ties (a few distinct values)."""
    rng = np.random.default_rng(seed)
    n = arr_shape[0]
    idx = rng.integers(-n, n, size=idx_shape)
    if mixed:  # a third of the rows one destination each (the row pattern), the rest independent
        rows = rng.random(idx_shape[0]) < 1 / 3
        idx[rows] = rng.integers(-n, n, size=(int(rows.sum()), 1))
    pool = np.array([0.5, -1.0, 2.0, 0.0, np.inf, -np.inf, np.nan, 1.5])
    arr = rng.normal(size=arr_shape)
    vals = np.where(rng.random(idx_shape) < 0.5, pool[rng.integers(0, len(pool), idx_shape)], rng.normal(size=idx_shape))
    return arr.astype(dtype), idx.astype(index_dtype), vals.astype(dtype)


@pytest.mark.parametrize("arr_shape,idx_shape,dtype,index_dtype", [
    ((12000, 64), (18000, 64), "float64", "int32"),    # one thread, 6 MB destination
    ((20000, 64), (40000, 64), "float32", "int64"),    # two threads (> 2**21 positions), a column block each
])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_independent_indices_into_a_large_table_match_the_last_axis_kernel(arr_shape, idx_shape, dtype, index_dtype,
                                                                          reduce, include_self):
    # Along axis 0 with 64 features these updates are partitioned by destination block; along the last
    # axis (the transposed problem) they go through the row kernels. A slot receives the same values in
    # the same order either way, so outputs and grads must agree bit for bit.
    arr, idx, vals = _scattered_case(arr_shape, idx_shape, dtype, index_dtype, seed=len(reduce) + include_self,
                                     mixed=reduce in ("add", "amax"))
    g = np.random.default_rng(5).normal(size=arr_shape).astype(dtype)
    results = []
    for transpose in (False, True):
        t = (lambda x: np.ascontiguousarray(x.T)) if transpose else (lambda x: x)
        a, v = (paddle.to_tensor(t(x), stop_gradient=False) for x in (arr, vals))
        out = put(a, paddle.to_tensor(t(idx)), v, 1 if transpose else 0, reduce=reduce, include_self=include_self)
        grads = paddle.grad(out, [a, v], paddle.to_tensor(t(g)))
        results.append([t(x.numpy()) for x in (out, *grads)])
    for got, want, what in zip(*results, ("out", "arr grad", "values grad")):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)


def test_independent_indices_into_a_large_table_out_of_range_is_an_index_error():
    arr, idx, vals = _scattered_case((12000, 64), (18000, 64), "float32", "int64", seed=9)
    idx[17000, 40] = 12000
    with pytest.raises(IndexError, match=r"index 12000 at indices\[17000, 40\]"):
        put(paddle.to_tensor(arr), paddle.to_tensor(idx), paddle.to_tensor(vals), 0, reduce="add")


# ------------------------------------------------------- indices broadcast along every dim after the axis
# The usual graph call passes indices [E, 1] against values [E, C]: with broadcast=True such
# indices (size 1 in every dimension after the axis, the target's size before it) go to the op as they are,
# and the CPU kernels read one index per row of positions instead of an [E, C] int64 copy.
# (arr shape, indices shape, axis); values have the broadcast target's shape.
ROW_INDEX_CASES = [((6, 5), (9, 1), 0), ((2, 4, 3, 5), (2, 7, 1, 1), 1), ((2, 4, 3, 5), (2, 7, 1, 1), -3),
                   ((3, 4, 6), (3, 5, 1), 1), ((4, 1, 6), (7, 1, 1), 0)]


def _row_index_inputs(arr_shape, idx_shape, axis, seed=0):
    axis = axis % len(arr_shape)
    values_shape = [idx_shape[d] if d == axis else arr_shape[d] for d in range(len(arr_shape))]
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1),
            "values": rand(values_shape, seed + 2)}


def _spy_on_indices(monkeypatch):
    """Records the shape of the indices every put_along_axis op call receives."""
    seen, real = [], paddle_ext._library.ops

    class Spy:
        def __getattr__(self, name):
            fn = getattr(real(), name)

            def call(*args):
                if name.startswith("pe_put_along_axis"):
                    seen.append(list(args[1].shape))
                return fn(*args)
            return call

    monkeypatch.setattr(paddle_ext._library, "ops", lambda: Spy())
    return seen


@pytest.mark.parametrize("arr_shape,idx_shape,axis", ROW_INDEX_CASES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_row_indices_match_the_reference(arr_shape, idx_shape, axis, reduce, include_self):
    check_output(put, _row_index_inputs(arr_shape, idx_shape, axis, seed=31), refs.put_along_axis,
                 dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("arr_shape,idx_shape,axis", ROW_INDEX_CASES[:2])
def test_row_indices_grads_match_numeric(arr_shape, idx_shape, axis, reduce, include_self):
    check_grad(put, _row_index_inputs(arr_shape, idx_shape, axis, seed=37), ["arr", "values"],
               dict(axis=axis, reduce=reduce, include_self=include_self))


def _outputs_and_grads(arr, idx, vals, axis, reduce, include_self, inplace=False):
    """Output, and for floating dtypes (arr_grad, values_grad), as NumPy arrays; arr/vals are tensors."""
    floating = arr.dtype in (paddle.float16, paddle.bfloat16, paddle.float32, paddle.float64)
    a, v = arr.detach(), vals.detach()
    a.stop_gradient = v.stop_gradient = not floating
    idx = paddle.to_tensor(idx)
    if inplace:
        out = put_inplace(a * 1 if floating else a.clone(), idx, v, axis, reduce, include_self)
    else:
        out = put(a, idx, v, axis, reduce, include_self)
    results = [out]
    if floating:
        g = paddle.to_tensor(np.random.default_rng(3).normal(size=arr.shape)).astype(arr.dtype)
        results += paddle.grad(out, [a, v], g)
    return [t.astype("float32").numpy() if t.dtype == paddle.bfloat16 else t.numpy() for t in results]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_row_indices_are_bit_identical_to_materialised_ones(dtype, reduce, include_self, inplace):
    """Outputs and grads equal, bit for bit, those of the same indices broadcast in advance: every dtype,
    negative indices and ties (a few destinations, many values each)."""
    idx = np.random.default_rng(41).integers(-3, 3, size=(5, 8, 1))
    if dtype in FLOAT_DTYPES:
        arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in (((5, 3, 4), 43), ((5, 8, 4), 44)))
    else:
        arr, vals = (paddle.to_tensor(_int_values(dtype, s, seed)) for s, seed in (((5, 3, 4), 43), ((5, 8, 4), 44)))
    full = np.broadcast_to(idx, vals.shape).copy()
    for got, want in zip(_outputs_and_grads(arr, idx, vals, 1, reduce, include_self, inplace),
                         _outputs_and_grads(arr, full, vals, 1, reduce, include_self, inplace)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arr_shape,idx_shape,axis", [((500, 64), (33000, 1), 0), ((4, 2000, 64), (4, 9000, 1), 1)])
@pytest.mark.parametrize("reduce", REDUCES)
def test_row_indices_large_cases_are_bit_identical(arr_shape, idx_shape, axis, reduce):
    """Over two threads' grain: the column-block and outer-block plans read the broadcast indices too."""
    x = _row_index_inputs(arr_shape, idx_shape, axis, seed=47)
    arr, vals = paddle.to_tensor(x["arr"]), paddle.to_tensor(x["values"])
    full = np.broadcast_to(x["indices"], x["values"].shape).copy()
    for got, want in zip(_outputs_and_grads(arr, x["indices"], vals, axis, reduce, False),
                         _outputs_and_grads(arr, full, vals, axis, reduce, False)):
        np.testing.assert_array_equal(got, want)


def test_row_indices_reach_the_op_unbroadcast(monkeypatch):
    """No [E, C] index is built: the op receives [E, 1] (dygraph, and a static program with a dynamic E);
    indices that need broadcasting before the axis are still broadcast."""
    seen = _spy_on_indices(monkeypatch)
    x = _row_index_inputs((6, 5), (9, 1), 0, seed=53)
    put(*(paddle.to_tensor(x[k]) for k in ("arr", "indices", "values")), 0, "add")
    with static_mode():
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            put(paddle.static.data("a", [6, 5], "float64"), paddle.static.data("i", [-1, 1], "int64"),
                paddle.static.data("v", [-1, 5], "float64"), 0, "mean")
    put(paddle.to_tensor(rand((3, 4, 5))), paddle.to_tensor(np.array([[[0], [2]]])), 2.5, 1)
    assert seen == [[9, 1], [-1, 1], [3, 2, 5]]


def test_row_indices_out_of_range_name_their_position():
    arr, vals = paddle.to_tensor(rand((4, 3))), paddle.to_tensor(rand((5, 3)))
    idx = paddle.to_tensor(np.array([[0], [1], [-4], [4], [2]]))
    message = r"index 4 at indices\[3, 0\] is out of range for axis 0 of size 4 \(expected -4 <= index < 4\)"
    with pytest.raises(IndexError, match=message):
        put(arr, idx, vals, 0, "add")
    before = arr.numpy().copy()
    with pytest.raises(IndexError, match=message):
        put_inplace(arr, idx, vals, 0, "add")
    np.testing.assert_array_equal(arr.numpy(), before)


def test_row_indices_with_an_empty_inner_dim_are_not_checked():
    """indices [E, 1] broadcast against [E, 0]: no position, so nothing to check or write (as when broadcast)."""
    arr = paddle.zeros([4, 0])
    idx = paddle.to_tensor(np.array([[9], [1]]))
    assert put(arr, idx, paddle.zeros([2, 0]), 0, "add").shape == [4, 0]
    assert put_inplace(arr, idx, paddle.zeros([2, 0]), 0, "add").shape == [4, 0]


@pytest.mark.parametrize("reduce", ["add", "amax"])
def test_row_indices_export_round_trip(reduce):
    check_export(lambda a, i, v: put(a, i, v, 0, reduce=reduce), _row_index_inputs((6, 5), (9, 1), 0, seed=59))


# ======================================================= broadcast values read in place (strides of 0)
# Values that need broadcasting (a Python scalar, a 0-d tensor, [E, 1] against [E, C], [1, C], any
# broadcastable shape) go to the op as they are, padded to arr's rank: the CPU kernels read them with a
# stride of 0 along the broadcast part of the positions (the dimensions before the axis, the axis, those
# after it). A part that mixes size-1 and full dimensions is broadcast first, in that part only. The
# values grad has values' own shape: the sum of the per-position grads over the broadcast dimensions.
# (arr shape, indices shape, axis, values shape)
BROADCAST_VALUE_CASES = [((6, 5), (9, 1), 0, (9, 1)), ((6, 5), (9, 5), 0, (9, 1)), ((6, 5), (9, 5), 0, (1, 5)),
                         ((6, 5), (9, 5), 0, (5,)), ((6, 5), (9, 1), 0, ()), ((3, 4, 5), (3, 7, 5), 1, (3, 1, 5)),
                         ((3, 4, 5), (3, 7, 1), 1, (1, 7, 1)), ((3, 4, 5), (1, 7, 1), -2, (1, 1, 5)),
                         ((2, 3, 4, 5), (2, 3, 6, 5), 2, (1, 3, 6, 1)), ((4, 6), (4, 9), 1, (4, 1)),
                         ((4, 6), (4, 9), 1, (1, 9)), ((7,), (11,), 0, (1,))]


def _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=0):
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1),
            "values": rand(values_shape, seed + 2)}


def _spy_on_values(monkeypatch):
    """Records the shape of the values every put_along_axis op call receives."""
    seen, real = [], paddle_ext._library.ops

    class Spy:
        def __getattr__(self, name):
            fn = getattr(real(), name)

            def call(*args):
                if name in ("pe_put_along_axis", "pe_put_along_axis_"):
                    seen.append(list(args[2].shape))
                return fn(*args)
            return call

    monkeypatch.setattr(paddle_ext._library, "ops", lambda: Spy())
    return seen


def test_broadcast_values_reach_the_op_unbroadcast(monkeypatch):
    """No [E, C] values are built: the op receives them at their own size, padded to arr's rank (dygraph,
    and a static program with a dynamic E); a part of mixed size-1 and full dimensions is broadcast."""
    seen = _spy_on_values(monkeypatch)
    a, a3, a4 = (paddle.to_tensor(rand(s)) for s in ((6, 5), (3, 4, 5), (2, 3, 4, 5)))
    rows, full = paddle.to_tensor(rand_indices((6, 5), (9, 1), 0)), paddle.to_tensor(rand_indices((6, 5), (9, 5), 0))
    put(a, rows, paddle.to_tensor(rand((9, 1))), 0, "add")                        # [E, 1]: one value per row
    put(a, full, paddle.to_tensor(rand((1, 5))), 0, "mean")                       # [1, C]: one row for all
    put(a, full, paddle.to_tensor(rand((5,))), 0, "amax")                         # lower rank
    put(a, rows, 2.5, 0, "assign")                                                # Python scalar
    put_inplace(a.clone(), full, paddle.to_tensor(1.5, dtype="float64"), 0, "mul")  # 0-d tensor
    put(a, full[:3], 2.5, 0, "add", broadcast=False)                              # broadcast=False scalar
    put(a4, paddle.to_tensor(rand_indices((2, 3, 4, 5), (2, 3, 6, 5), 2)),
        paddle.to_tensor(rand((1, 3, 6, 1))), 2, "add")                           # dims before the axis mixed
    with static_mode():
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            put(paddle.static.data("a", [6, 5], "float64"), paddle.static.data("i", [-1, 1], "int64"),
                paddle.static.data("v", [-1, 1], "float64"), 0, "mean")
            put(paddle.static.data("b", [-1, 5], "float64"), paddle.static.data("j", [-1, 5], "int64"), 1.0, 0)
    put(a3, paddle.to_tensor(np.array([[[0], [2]]])), paddle.to_tensor(rand((2, 1))), 1)
    assert seen == [[9, 1], [1, 5], [1, 5], [1, 1], [1, 1], [1, 1], [2, 3, 6, 1], [-1, 1], [1, 1], [1, 2, 1]]


@pytest.mark.parametrize("values_shape,expands", [([-1, 3, 6, 5], False), ([1, 1, 6, 5], False),
                                                   ([1, 1, 1, 1], False), ([-1, 3, 1, 1], False),
                                                   ([1, 3, 6, 1], True), ([-1, 1, 6, 1], True)])
def test_broadcast_values_expand_in_a_static_program_only_where_a_part_mixes(values_shape, expands):
    """With a dynamic batch: values of the positions' static shape, or 1 throughout a part, go to the op as
    they are; [1, 3] or [-1, 1] before the axis (against [-1, 3]: the batch may be > 1) is broadcast there."""
    with static_mode():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            put(paddle.static.data("a", [-1, 3, 4, 5], "float64"), paddle.static.data("i", [-1, 3, 6, 5], "int64"),
                paddle.static.data("v", values_shape, "float64"), 2, "add")
        names = [op.name() for op in main.global_block().ops]
    assert ("pd_op.expand" in names) == expands, names


@pytest.mark.parametrize("values_shape,fed", [([-1, 3, 1, 1], (2, 3, 1, 1)), ([-1, 1, 6, 1], (2, 1, 6, 1)),
                                               ([-1, 1, 6, 1], (1, 1, 6, 1)), ([-1, 1, -1, -1], (1, 1, 1, 5))])
def test_broadcast_values_with_dynamic_dims_run_in_a_static_program(values_shape, fed):
    arr, idx, vals = rand((2, 3, 4, 5), 81), rand_indices((2, 3, 4, 5), (2, 3, 6, 5), 2, 82), rand(fed, 83)
    with static_mode():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            out = put(paddle.static.data("a", [-1, 3, 4, 5], "float64"), paddle.static.data("i", [-1, 3, 6, 5], "int64"),
                      paddle.static.data("v", values_shape, "float64"), 2, "add")
        got, = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"a": arr, "i": idx, "v": vals}, fetch_list=[out])
    np.testing.assert_allclose(got, refs.put_along_axis(arr, idx, vals, 2, "add"), rtol=1e-12)


@pytest.mark.parametrize("arr_shape,idx_shape,axis,values_shape", BROADCAST_VALUE_CASES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_broadcast_values_match_the_reference(arr_shape, idx_shape, axis, values_shape, reduce, include_self):
    check_output(put, _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=71), refs.put_along_axis,
                 dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("case", [0, 2, 4, 6, 8])
def test_broadcast_values_grads_match_numeric(case, reduce, include_self):
    arr_shape, idx_shape, axis, values_shape = BROADCAST_VALUE_CASES[case]
    check_grad(put, _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=73), ["arr", "values"],
               dict(axis=axis, reduce=reduce, include_self=include_self))


def _sum_to(grad, shape, dtype):
    """The grad of values of `shape` broadcast to grad's shape: the float64 sum over the broadcast
    dimensions (exact here: a few terms of a narrower type), rounded once to dtype."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(shape) if s == 1 and grad.shape[lead + d] != 1)
    total = grad.astype(np.float64).sum(axis=axes, keepdims=True).reshape(shape)
    return round_to_dtype(total, dtype).astype(grad.dtype) if dtype != "bfloat16" else round_to_dtype(total, dtype)


def _check_against_materialised(arr, idx, vals, axis, reduce, include_self, inplace, dtype):
    """Outputs and arr grads bit for bit those of the same values broadcast in advance; the values grad
    the materialised values' grad summed over the broadcast dimensions."""
    rank = len(arr.shape)
    ax = axis % rank
    target = [idx.shape[ax] if d == ax else arr.shape[d] for d in range(rank)]
    full = paddle.broadcast_to(vals.reshape([1] * (rank - len(vals.shape)) + list(vals.shape)), target)
    got = _outputs_and_grads(arr, idx, vals, axis, reduce, include_self, inplace)
    want = _outputs_and_grads(arr, idx, full, axis, reduce, include_self, inplace)
    for i, (g, w) in enumerate(zip(got[:2], want[:2])):
        np.testing.assert_array_equal(g, w, err_msg=f"{'output' if i == 0 else 'arr grad'}")
    if len(got) == 3:
        expected = _sum_to(want[2], tuple(vals.shape), dtype)
        assert got[2].shape == tuple(vals.shape)
        if dtype == "float64":  # the order of the sum differs: to a few ulps of the sum of the terms' magnitudes
            bound = 1e-15 * _sum_to(np.abs(want[2]), tuple(vals.shape), dtype)
            assert (np.abs(got[2] - expected) <= bound).all(), ("values grad", got[2], expected)
        else:
            np.testing.assert_array_equal(got[2], expected, err_msg="values grad")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_broadcast_values_are_bit_identical_to_materialised_ones(dtype, reduce, include_self, inplace):
    """Every dtype, negative indices and ties (a few destinations, many values each), row indices and full
    ones, values one per row ([E, 1]), one row for all ([1, C]), per outer row, a 0-d tensor. The wider
    arr takes the destination-partitioned passes under PADDLE_EXT_PUT_TILE=small (test_fuzz runs it so)."""
    rng = np.random.default_rng(45)
    for arr_shape, idx_shape, values_shape in (
            ((5, 3, 4), (5, 8, 1), (5, 8, 1)), ((5, 3, 4), (5, 8, 4), (5, 8, 1)), ((5, 3, 4), (5, 8, 4), (1, 1, 4)),
            ((5, 3, 4), (5, 8, 4), (5, 1, 4)), ((5, 3, 4), (5, 8, 1), (1, 8, 1)), ((5, 3, 4), (5, 8, 4), ()),
            ((3, 30, 8), (3, 61, 8), (3, 61, 1)), ((3, 30, 8), (3, 61, 8), (1, 1, 8)), ((3, 30, 8), (3, 61, 8), (1,))):
        idx = rng.integers(-3, 3, size=idx_shape)
        if dtype in FLOAT_DTYPES:
            arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in ((arr_shape, 43), (values_shape, 44)))
        else:
            arr, vals = (paddle.to_tensor(_int_values(dtype, s, seed)) for s, seed in ((arr_shape, 43), (values_shape, 44)))
        _check_against_materialised(arr, idx, vals, 1, reduce, include_self, inplace, dtype)


@pytest.mark.parametrize("arr_shape,idx_shape,axis,values_shape,pattern", [
    ((500, 64), (33000, 1), 0, (33000, 1), "rows"),      # column-block plan, one value per row
    ((500, 64), (33000, 1), 0, (1, 64), "rows"),
    ((500, 64), (33000, 64), 0, (33000, 1), "rows"),     # full indices that agree along each row
    ((4, 2000, 64), (4, 9000, 1), 1, (4, 9000, 1), "rows"),  # outer-block plan
    ((4, 2000, 64), (4, 9000, 64), 1, (1, 1, 64), "random"),
    ((20000, 64), (33000, 64), 0, (33000, 1), "random"),  # independent indices: destination-partitioned
    ((20000, 64), (33000, 64), 0, (), "random"),
    ((3, 800000), (3, 900000), 1, (3, 1), "random"),     # the last axis
])
@pytest.mark.parametrize("reduce", REDUCES)
def test_broadcast_values_large_cases_are_bit_identical(arr_shape, idx_shape, axis, values_shape, pattern, reduce):
    """Over two threads' grain: every plan reads the broadcast values too."""
    rng = np.random.default_rng(49)
    n = arr_shape[axis]
    idx = rng.integers(-n, n, size=idx_shape)
    if pattern == "rows":
        idx = np.broadcast_to(idx[..., :1], idx_shape).copy() if axis == 0 else idx
    arr, vals = paddle.to_tensor(rand(arr_shape, 51)).astype("float32"), paddle.to_tensor(rand(values_shape, 52)).astype("float32")
    _check_against_materialised(arr, idx, vals, axis, reduce, False, False, "float32")


@pytest.mark.parametrize("reduce", ["add", "amax"])
@pytest.mark.parametrize("values_shape", [(9, 1), (1, 5), ()])
def test_broadcast_values_export_round_trip(reduce, values_shape):
    x = _broadcast_value_inputs((6, 5), (9, 5), 0, values_shape, seed=79)
    check_export(lambda a, i, v: put(a, i, v, 0, reduce=reduce), {k: v.astype(np.float32) if v.dtype == np.float64 else v
                                                                  for k, v in x.items()})


def test_broadcast_values_of_a_bad_shape_are_value_errors():
    arr, idx = paddle.to_tensor(rand((6, 5))), paddle.to_tensor(rand_indices((6, 5), (9, 1), 0))
    for shape, message in (((9, 2), r"values of shape \[9, 2\] cannot be broadcast to the indices shape \[9, 5\] "
                                     r"\(dimension 1: 2 vs 5\)"),
                           ((2, 9, 5), r"values of shape \[2, 9, 5\] cannot be broadcast")):
        for fn in (put, put_inplace):
            with pytest.raises(ValueError, match=message):
                fn(arr, idx, paddle.to_tensor(rand(shape)), 0, "add")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("values_shape", [(6, 9, 1), (1, 9, 1), (6, 1, 1), ()])
def test_add_values_grad_of_row_indices_sums_the_grad_rows_as_the_positions_grads(dtype, values_shape):
    """`add` with row indices and values broadcast after the axis sums the out_grad rows directly: the same
    bits as the positions' grads summed (the same indices materialised), float64 included."""
    idx = np.random.default_rng(85).integers(-4, 4, size=(6, 9, 1))
    arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in (((6, 4, 37), 86), (values_shape, 87)))
    got = _outputs_and_grads(arr, idx, vals, 1, "add", True)
    want = _outputs_and_grads(arr, np.broadcast_to(idx, (6, 9, 37)).copy(), vals, 1, "add", True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ------------------------------------------------------------------------------------------ build

@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("arr_shape, idx_shape, axis", [((40, 16), (90, 16), 0), ((6, 30), (6, 45), 1)])
def test_dygraph_mean_backward_reuses_the_forward_counts(monkeypatch, arr_shape, idx_shape, axis, include_self):
    """A CPU mean under autograd keeps its forward's counts: its backward calls the counted vjp (no count
    pass over the indices), whose grads are the reference's and the plain vjp's, bit for bit."""
    ops = paddle_ext._library.ops()
    rng = np.random.default_rng(7)
    n = arr_shape[axis]
    arr = paddle.to_tensor(rng.standard_normal(arr_shape).astype("float32"), stop_gradient=False)
    values = paddle.to_tensor(rng.standard_normal(idx_shape).astype("float32"), stop_gradient=False)
    idx = paddle.to_tensor(rng.integers(-n, n, idx_shape))
    grad = paddle.to_tensor(rng.standard_normal(arr_shape).astype("float32"))
    out_plain = ops.pe_put_along_axis(arr, idx, values, axis, "mean", include_self, False)
    want = ops.pe_put_along_axis_vjp(arr, idx, values, out_plain, grad, axis, "mean", include_self)

    def no_plain_vjp(*args):
        raise AssertionError("the mean backward counted again")

    monkeypatch.setattr(ops, "pe_put_along_axis_vjp", no_plain_vjp)
    out = paddle_ext.put_along_axis(arr, idx, values, axis, reduce="mean", include_self=include_self)
    got = paddle.grad([out], [arr, values], [grad])
    np.testing.assert_array_equal(out.numpy(), out_plain.numpy())
    as64 = [t.numpy().astype(np.float64) for t in (arr, idx, values, grad)]
    ref_grads = refs.put_along_axis_grad(as64[0], as64[1].astype(np.int64), as64[2], as64[3], axis, "mean",
                                         include_self)
    for g, w, r in zip(got, want, ref_grads):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-6, atol=1e-7)  # g / count, rounded once to float32
        assert g.numpy().tobytes() == w.numpy().tobytes()


def test_counted_vjp_rejects_counts_of_another_shape():
    ops = paddle_ext._library.ops()
    arr, values = paddle.zeros([4, 3]), paddle.ones([5, 3])
    idx = paddle.zeros([5, 3], dtype="int64")
    with pytest.raises(ValueError, match="counts must be the CPU mean forward's int32 counts"):
        ops.pe_put_along_axis_counted_vjp(arr, idx, values, paddle.ones([4, 3]), paddle.zeros([3, 3], "int32"), 0, True)


def test_mean_byte_counts_in_reused_memory_start_from_zero():
    """mean's partitioned byte counts (a byte per slot: 33 MiB here) come from BlockCache, whose blocks hold
    what the last call left in them; each partition block clears its counts first. So a second call, which
    gets the first call's blocks, must give the same output and grads as the first, and both the reference's."""
    ops = paddle_ext._library.ops()
    rng = np.random.default_rng(3)
    n = 540_000
    arr = paddle.to_tensor(rng.standard_normal((n, 64), dtype=np.float32))
    idx = paddle.to_tensor(rng.integers(0, n, (n, 64)))
    values = paddle.to_tensor(rng.standard_normal((n, 64), dtype=np.float32))
    grad = paddle.ones([n, 64])
    runs = []
    for _ in range(2):
        out = ops.pe_put_along_axis(arr, idx, values, 0, "mean", True, False)
        arr_grad, values_grad = ops.pe_put_along_axis_vjp(arr, idx, values, out, grad, 0, "mean", True)
        runs.append([t.numpy().tobytes() for t in (out, arr_grad, values_grad)])
        del out, arr_grad, values_grad
    assert runs[0] == runs[1]
    # the reference in float64: slot (i, j) = (arr + the values sent there) / (1 + their count)
    slot = (idx.numpy() * 64 + np.arange(64)).ravel()
    count = 1.0 + np.bincount(slot, minlength=n * 64)
    vals = values.numpy().astype(np.float64).ravel()
    a = arr.numpy().astype(np.float64).ravel()
    want_out = (a + np.bincount(slot, weights=vals, minlength=n * 64)) / count
    terms = (np.abs(a) + np.bincount(slot, weights=np.abs(vals), minlength=n * 64)) / count
    got_out, got_arr_grad, got_values_grad = (np.frombuffer(b, np.float32) for b in runs[1])
    np.testing.assert_array_less(np.abs(got_out - want_out), 1e-6 * np.abs(want_out) + 2e-6 * terms + 1e-30)
    np.testing.assert_allclose(got_arr_grad, 1.0 / count, rtol=1e-7)
    np.testing.assert_allclose(got_values_grad, 1.0 / count[slot], rtol=1e-7)
