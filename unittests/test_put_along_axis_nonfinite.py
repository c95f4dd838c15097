"""put_along_axis grads where arr or values hold inf, NaN, zeros, or under/overflow."""

import numpy as np
import paddle
import pytest

import refs
from op_test import assert_close, round_to_dtype
from put_along_axis_cases import REDUCES, put, rand, rand_indices


# ================================================================ grads where arr or values are non-finite
# mul's grads are the products of the other factors of the slot (never out / factor, which is NaN or
# wrong at ±inf, NaN, zeros, underflow and overflow); amin/amax's go to the contributors that are the
# result, split evenly, and the contributors of a NaN result are its NaNs; an unwritten slot passes
# its grad through whatever it holds. unittests/refs/put_along_axis.py::put_along_axis_grad is the specification.
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
