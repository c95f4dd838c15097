"""put_along_axis / put_along_axis_: the specification, through the OpTest harness: forward, inplace,
grads of every order, errors, export."""

import gc
import weakref

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, RTOL, assert_close, check_export, check_grad, check_output, round_to_dtype, static_mode
from put_along_axis_cases import ALL_DTYPES, CASES, REDUCES, inputs_for, put, put_inplace, rand, rand_indices


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


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("fn", [put, put_inplace], ids=["put_along_axis", "put_along_axis_"])
def test_multiply_is_mul(fn, include_self):
    x = inputs_for((4, 3), (6, 3), 0, seed=11)
    check_output(fn, x, refs.put_along_axis, dict(axis=0, reduce="multiply", include_self=include_self))
    check_grad(lambda a, i, v: fn(a * 1.0, i, v, 0, reduce="multiply", include_self=include_self), x,
               ["arr", "values"])


@pytest.mark.parametrize("reduce", ["mul", "multiply"])
def test_inplace_mul_grads_see_arr_before_the_write(reduce):
    """In place on a tensor with history: the values' grad is out_grad * arr's old value * the other values
    of the slot, not the written product (which would count the value itself again)."""
    a = np.array([-1.38127972, -2.75415886, -2.90083419])
    v = np.array([0.63981465, 1.37697937, 0.26174995, 2.61043454])
    idx = np.array([0, 2, 1, 2])
    g = np.array([0.5, -0.3, 0.7])
    ta, tv = paddle.to_tensor(a, stop_gradient=False), paddle.to_tensor(v, stop_gradient=False)
    out = paddle_ext.put_along_axis_(ta * 1.0, paddle.to_tensor(idx), tv, 0, reduce, include_self=True,
                                     broadcast=False)
    ga, gv = paddle.grad(out, [ta, tv], grad_outputs=paddle.to_tensor(g))
    want_ga, want_gv = refs.put_along_axis_grad(a, idx, v, g, 0, "mul", True)
    np.testing.assert_allclose(gv.numpy(), want_gv, rtol=1e-12)
    np.testing.assert_allclose(ga.numpy(), want_ga, rtol=1e-12)
    np.testing.assert_allclose(gv.numpy(), [-0.691, -5.301, 0.826, -2.796], atol=1e-3)  # Paddle's own result


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
