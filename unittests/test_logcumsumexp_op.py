"""logcumsumexp: the specification, through the OpTest harness."""

import gc
import weakref

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_export, check_grad, check_output

SHAPES_AXES = [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1), ((2, 3, 4), -3), ((3, 5), None),
               ((2, 70, 3), 1)]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def rand(shape, seed=0, scale=3.0):
    return np.random.default_rng(seed).normal(0, scale, size=shape)


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_float64_every_axis_and_flag(shape, axis, exclusive, reverse):
    check_output(paddle_ext.logcumsumexp, {"x": rand(shape)}, refs.logcumsumexp,
                 dict(axis=axis, exclusive=exclusive, reverse=reverse))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_every_dtype(dtype, exclusive, reverse):
    check_output(paddle_ext.logcumsumexp, {"x": rand((4, 33), seed=1)}, refs.logcumsumexp,
                 dict(axis=1, exclusive=exclusive, reverse=reverse), dtype=dtype)


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((3, 4), None)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_grad_matches_numeric(shape, axis, exclusive, reverse):
    check_grad(paddle_ext.logcumsumexp, {"x": rand(shape, seed=3, scale=2.0)}, "x",
               dict(axis=axis, exclusive=exclusive, reverse=reverse))


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_grad_matches_brute_force_reference(exclusive, reverse):
    x = rand((3, 6), seed=4)
    g = rand((3, 6), seed=5)
    t = paddle.to_tensor(x, stop_gradient=False)
    out = paddle_ext.logcumsumexp(t, axis=1, exclusive=exclusive, reverse=reverse)
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g))
    np.testing.assert_allclose(gx.numpy(), refs.logcumsumexp_grad(x, g, 1, exclusive, reverse), rtol=1e-12, atol=1e-12)


def test_overflow_cases_stay_finite():
    for x in (np.full((10,), 1000.0), np.arange(10000, 10024, dtype=np.float64)):
        naive = np.log(np.cumsum(np.exp(x)))
        assert not np.isfinite(naive).all()  # the naive formula overflows here
        for dtype in ("float32", "float64"):
            check_output(paddle_ext.logcumsumexp, {"x": x}, refs.logcumsumexp, dict(axis=0), dtype=dtype)


def test_neg_inf_prefix_gives_neg_inf_and_zero_grad():
    x = np.array([[-np.inf, -np.inf, 0.5, -np.inf, 1.0], [-np.inf] * 5])
    out = check_output(paddle_ext.logcumsumexp, {"x": x}, refs.logcumsumexp, dict(axis=1))["dygraph"][0]
    assert np.array_equal(out[0, :2], [-np.inf, -np.inf]) and np.all(out[1] == -np.inf)
    for exclusive in (False, True):
        for reverse in (False, True):
            t = paddle.to_tensor(x, stop_gradient=False)
            paddle_ext.logcumsumexp(t, axis=1, exclusive=exclusive, reverse=reverse).sum().backward()
            grad = t.grad.numpy()
            assert not np.isnan(grad).any()
            assert np.all(grad[np.isneginf(x)] == 0.0)
            np.testing.assert_allclose(grad, refs.logcumsumexp_grad(x, np.ones_like(x), 1, exclusive, reverse),
                                       rtol=1e-12, atol=1e-12)


def test_nan_propagates_to_every_later_output():
    x = np.array([0.0, 1.0, np.nan, 2.0, -np.inf])
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy()
    assert np.isfinite(out[:2]).all() and np.isnan(out[2:]).all()
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x), reverse=True).numpy()
    assert np.isnan(out[:3]).all() and np.isfinite(out[3])


def test_pos_inf_stays_pos_inf():
    x = np.array([0.0, np.inf, 1.0, np.inf, -np.inf])
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy()
    np.testing.assert_array_equal(out, [0.0, np.inf, np.inf, np.inf, np.inf])


@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 4), 1), ((0, 4), None)])
def test_empty_tensors(shape, axis):
    out = paddle_ext.logcumsumexp(paddle.zeros(shape, "float32"), axis=axis)
    assert tuple(out.shape) == (tuple(shape) if axis is not None else (0,))


@pytest.mark.parametrize("exclusive", [False, True])
def test_zero_d_and_length_one(exclusive):
    out = paddle_ext.logcumsumexp(paddle.to_tensor(2.5), axis=0, exclusive=exclusive)
    assert out.shape == [] and float(out) == (-np.inf if exclusive else 2.5)
    assert paddle_ext.logcumsumexp(paddle.to_tensor(2.5), exclusive=exclusive).shape == [1]
    x = rand((4, 1, 3))
    np.testing.assert_allclose(paddle_ext.logcumsumexp(paddle.to_tensor(x), axis=1, exclusive=exclusive).numpy(),
                               refs.logcumsumexp(x, 1, exclusive), rtol=1e-15)


def test_non_contiguous_input():
    x = rand((6, 8))
    t = paddle.to_tensor(x).transpose([1, 0])
    np.testing.assert_allclose(paddle_ext.logcumsumexp(t, axis=1).numpy(), refs.logcumsumexp(x.T, 1), rtol=1e-13)
    sliced = paddle.to_tensor(x)[:, ::2]
    np.testing.assert_allclose(paddle_ext.logcumsumexp(sliced, axis=1).numpy(), refs.logcumsumexp(x[:, ::2], 1),
                               rtol=1e-13)


def test_dtype_argument_and_integer_input():
    x = np.arange(6).reshape(2, 3)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x), axis=1)
    assert out.dtype == paddle.float32
    np.testing.assert_allclose(out.numpy(), refs.logcumsumexp(x, 1), rtol=1e-6)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x), axis=1, dtype="float64")
    assert out.dtype == paddle.float64
    np.testing.assert_allclose(out.numpy(), refs.logcumsumexp(x, 1), rtol=1e-15)
    assert paddle_ext.logcumsumexp(paddle.ones([3], "float32"), dtype=paddle.float16).dtype == paddle.float16


def test_matches_paddle_builtin():
    x = paddle.randn([5, 7], "float64")
    for axis in (0, 1, None):
        np.testing.assert_allclose(paddle_ext.logcumsumexp(x, axis).numpy(), paddle.logcumsumexp(x, axis).numpy(),
                                   rtol=1e-12)


def _leading_neg_inf(rng, shape, axis):
    x = rng.normal(size=shape)
    x[(slice(None),) * (axis % len(shape)) + (slice(0, 40),)] = -np.inf
    return x


# Data that pushes the float-lane kernels onto their fallbacks: outputs crossing 0 far into a row (the
# error bound fails after float rounding entered the carry: the line is rescanned in double), ranges too
# wide for float exp, -inf runs, near-zero outputs at the start.
HARD_DATA = {
    "crosses_zero_late": lambda rng, shape, axis: rng.normal(size=shape) - 10.0,
    "wide": lambda rng, shape, axis: rng.normal(0.0, 60.0, size=shape),
    "log_cdf": lambda rng, shape, axis: np.log(rng.random(shape) / shape[axis]),
    "tiny": lambda rng, shape, axis: rng.normal(0.0, 1e-4, size=shape),
    "neg_inf_sprinkled": lambda rng, shape, axis: np.where(rng.random(shape) < 0.3, -np.inf, rng.normal(size=shape)),
    "leading_neg_inf": _leading_neg_inf,
}


@pytest.mark.parametrize("data", sorted(HARD_DATA))
@pytest.mark.parametrize("shape,axis", [((64, 3000), -1), ((2, 40000), -1), ((700, 300), 0), ((5, 50, 37), 1)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_float32_within_1e6_on_hard_data(data, shape, axis, exclusive, reverse):
    x = HARD_DATA[data](np.random.default_rng(7), shape, axis).astype(np.float32)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x), axis=axis, exclusive=exclusive, reverse=reverse)
    out = out.numpy().astype(np.float64)
    ref = refs.logcumsumexp(x.astype(np.float64), axis, exclusive, reverse)
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    finite = np.isfinite(ref)
    rel = np.abs(out[finite] - ref[finite]) / np.maximum(np.abs(ref[finite]), 1e-4)
    assert rel.max(initial=0.0) <= 1e-6, rel.max()


def test_float32_long_row_accuracy():
    # 2^21 float32 = 8 MiB: big enough for the output to be faulted in ahead (populate_for_write).
    x = np.random.default_rng(0).normal(size=(1 << 21,)).astype(np.float32)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy().astype(np.float64)
    ref = refs.logcumsumexp(x.astype(np.float64))
    rel = np.max(np.abs(out - ref) / np.maximum(np.abs(ref), 1e-30))
    assert rel <= 1e-6, rel


@pytest.mark.parametrize("axis", [1, None])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_double_grad(axis, exclusive, reverse):
    """Grad of grad against central differences of the (analytic, verified) first grad."""
    x0 = rand((2, 5), seed=9, scale=1.5)
    w = rand((2, 5), seed=10)
    v = rand((2, 5), seed=11)

    def first_grad(x_np, create_graph):
        x = paddle.to_tensor(x_np, stop_gradient=False)
        out = paddle_ext.logcumsumexp(x, axis=axis, exclusive=exclusive, reverse=reverse)
        out_w = out * paddle.to_tensor(w if axis is not None else w.reshape(-1))
        masked = paddle.where(paddle.isfinite(out_w), out_w, paddle.zeros_like(out_w))
        (g,) = paddle.grad(masked.sum(), x, create_graph=create_graph)
        return x, g

    x, g = first_grad(x0, True)
    (gg,) = paddle.grad((g * paddle.to_tensor(v)).sum(), x)
    delta, numeric = 1e-6, np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        xp, xm = x0.copy(), x0.copy()
        xp[i] += delta
        xm[i] -= delta
        numeric[i] = ((first_grad(xp, False)[1].numpy() - first_grad(xm, False)[1].numpy()) * v).sum() / (2 * delta)
    np.testing.assert_allclose(gg.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_first_grad_same_with_and_without_create_graph():
    x = paddle.to_tensor(rand((3, 7), seed=12), stop_gradient=False)
    g1 = paddle.grad(paddle_ext.logcumsumexp(x, axis=1).sum(), x)[0].numpy()
    g2 = paddle.grad(paddle_ext.logcumsumexp(x, axis=1).sum(), x, create_graph=True)[0].numpy()
    np.testing.assert_allclose(g1, g2, rtol=1e-12)


@pytest.mark.parametrize("bad_axis", [2, -3, 5])
def test_axis_out_of_range_is_index_error(bad_axis):
    with pytest.raises(IndexError, match=rf"axis={bad_axis} is out of range for a tensor of rank 2"):
        paddle_ext.logcumsumexp(paddle.ones([2, 3]), axis=bad_axis)


def test_bad_arguments():
    with pytest.raises(TypeError, match="x must be a paddle.Tensor"):
        paddle_ext.logcumsumexp(np.ones(3))
    with pytest.raises(TypeError, match="axis must be an int"):
        paddle_ext.logcumsumexp(paddle.ones([3]), axis=1.5)
    with pytest.raises(TypeError, match="dtype must be float16, bfloat16, float32 or float64, got int32"):
        paddle_ext.logcumsumexp(paddle.ones([3]), dtype="int32")


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_export_round_trip(exclusive, reverse):
    check_export(paddle_ext.logcumsumexp, {"x": rand((3, 5)).astype(np.float32)},
                 dict(axis=1, exclusive=exclusive, reverse=reverse))


class _BroadcastThenScan(paddle.nn.Layer):
    """A broadcast add run by oneDNN in paddle.inference hands the op a blocked ONEDNN layout."""

    def forward(self, a, b):
        s = a.unsqueeze(2) + b.unsqueeze(1)
        return paddle_ext.logcumsumexp(s - s.max(axis=-1, keepdim=True), axis=-1)


def test_export_with_onednn_layout_input():
    inputs = {"a": rand((2, 3, 5), seed=20).astype(np.float32), "b": rand((2, 4, 5), seed=21).astype(np.float32)}
    check_export(_BroadcastThenScan(), inputs)


def test_output_without_backward_is_freed():
    # The dygraph PyLayer saves a detached alias of its output: an output whose backward never runs is
    # freed with its last reference (saving the output itself kept every such output alive: ~4 MB per
    # call of a [1000, 1000] scan in a loop without backward).
    x = paddle.to_tensor(np.random.randn(4, 5), stop_gradient=False)
    out = paddle_ext.logcumsumexp(x, axis=1)
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


def test_output_modified_inplace_before_backward_is_an_error():
    x = paddle.to_tensor(np.random.randn(4, 5), stop_gradient=False)
    out = paddle_ext.logcumsumexp(x, axis=1)
    out.add_(paddle.ones_like(out))
    with pytest.raises(Exception, match="logcumsumexp: its output was modified by an inplace operation"):
        paddle.grad(out.sum(), x)
