"""logcumsumexp: the specification, through the OpTest harness."""

import gc
import weakref

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_double_grad, check_export, check_grad, check_output

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
    with pytest.raises(TypeError, match="dtype must be float16, bfloat16, float32, float64, complex64 or complex128, "
                                        "got int32"):
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


# ---------------------------------------------------------------------------------------------- complex
# complex64/complex128: the complex log-add-exp scan (docs/logcumsumexp.md, "Complex inputs"). Imaginary parts
# are compared modulo 2 pi (assert_close, assert_complex_close): the branch is not wrapped.
COMPLEX_DTYPES = ("complex64", "complex128")


def crand(shape, seed=0, scale=3.0, phase=np.pi):
    rng = np.random.default_rng(seed)
    return rng.normal(0, scale, size=shape) + 1j * rng.uniform(-phase, phase, size=shape)


def wrap_phase(d):
    return (d + np.pi) % (2 * np.pi) - np.pi


def assert_complex_close(got, ref, rtol, what="out"):
    """Same NaN / -inf positions (an output nothing reached is exactly -inf + 0i), real parts and imaginary
    parts modulo 2 pi within rtol * max(1, |ref|) (a log's absolute error scales with its size)."""
    got, ref = np.asarray(got, np.complex128), np.asarray(ref, np.complex128)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{what}: NaN positions")
    neg = ref.real == -np.inf
    np.testing.assert_array_equal(got[neg], ref[neg], err_msg=f"{what}: -inf outputs")
    ok = np.isfinite(ref)
    err = np.abs(got.real[ok] - ref.real[ok]) + np.abs(wrap_phase(got.imag[ok] - ref.imag[ok]))
    bound = rtol * np.maximum(1.0, np.abs(ref[ok]))
    assert (err <= bound).all(), f"{what}: worst {np.max(err / bound, initial=0.0):.3g} x the bound"


def test_complex_reference_matches_the_naive_formula():
    x = crand((4, 30), seed=30, scale=1.0, phase=20.0)
    naive = np.log(np.cumsum(np.exp(x), axis=1))
    assert_complex_close(refs.logcumsumexp(x, 1), naive, 1e-13)
    naive_exclusive_reverse = np.log(np.cumsum(np.exp(x[:, :0:-1]), 1))[:, ::-1]
    assert_complex_close(refs.logcumsumexp(x, 1, True, True)[:, :-1], naive_exclusive_reverse, 1e-13)
    # shifting every real part shifts the outputs: the pivot keeps exp from overflowing
    for shift in (1e4, -1e4, 700.0):
        assert_complex_close(refs.logcumsumexp(x + shift, 1), naive + shift, 1e-13)


def test_paddle_complex_grad_convention_is_out_grad_times_conj_derivative():
    """Paddle's complex autograd (checked on paddle.exp): x_grad = out_grad * conj(f'(x)), which for the real
    loss L = sum(Re(conj(w) * f(x))) is dL/dRe(x) + i dL/dIm(x): the convention check_grad's numeric grads use."""
    x0, w = crand((5,), seed=31, scale=0.5), crand((5,), seed=32)
    x = paddle.to_tensor(x0, stop_gradient=False)
    (gx,) = paddle.grad(paddle.exp(x), x, grad_outputs=paddle.to_tensor(w))
    # (1e-6: Paddle's complex exp grad is not exact to float64; the other convention, w * exp(x), is off by O(1))
    np.testing.assert_allclose(gx.numpy(), w * np.conj(np.exp(x0)), rtol=1e-6)
    assert np.abs(gx.numpy() - w * np.exp(x0)).max() > 0.1
    loss = lambda z: np.sum(np.real(np.conj(w) * np.exp(z)))  # noqa: E731
    numeric = [np.array([(loss(x0 + s * e) - loss(x0 - s * e)) / (2 * 1e-7) for e in np.eye(5)]) for s in (1e-7, 1e-7j)]
    np.testing.assert_allclose(gx.numpy(), numeric[0] + 1j * numeric[1], rtol=1e-6)


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_complex128_every_axis_and_flag(shape, axis, exclusive, reverse):
    check_output(paddle_ext.logcumsumexp, {"x": crand(shape, seed=33)}, refs.logcumsumexp,
                 dict(axis=axis, exclusive=exclusive, reverse=reverse), dtype="complex128")


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("shape,axis", [((4, 33), 1), ((33, 4), 0), ((2, 5, 3), None)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_forward_complex_dtypes(dtype, shape, axis, exclusive, reverse):
    results = check_output(paddle_ext.logcumsumexp, {"x": crand(shape, seed=34)}, refs.logcumsumexp,
                           dict(axis=axis, exclusive=exclusive, reverse=reverse), dtype=dtype)
    assert all(np.iscomplexobj(out[0]) for out in results.values())
    t = paddle_ext.logcumsumexp(paddle.to_tensor(crand(shape)).astype(dtype), axis=axis)
    assert t.dtype == getattr(paddle, dtype)


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((3, 4), None)])
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_grad_matches_numeric(shape, axis, exclusive, reverse):
    """dygraph, PIR and legacy-IR static grads (paddle.static.gradients) against dL/dRe + i dL/dIm."""
    check_grad(paddle_ext.logcumsumexp, {"x": crand(shape, seed=35, scale=1.5)}, "x",
               dict(axis=axis, exclusive=exclusive, reverse=reverse))


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_grad_matches_brute_force_reference(dtype, exclusive, reverse):
    x, g = crand((3, 6), seed=36, phase=10.0), crand((3, 6), seed=37)
    g[0, 2] = 0  # adds nothing
    t = paddle.to_tensor(x).astype(dtype)
    t.stop_gradient = False
    out = paddle_ext.logcumsumexp(t, axis=1, exclusive=exclusive, reverse=reverse)
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g).astype(dtype))
    assert gx.dtype == t.dtype
    x_rounded, g_rounded = x.astype(dtype), g.astype(dtype)
    ref = refs.logcumsumexp_grad(x_rounded, g_rounded, 1, exclusive, reverse)
    tol = 1e-12 if dtype == "complex128" else 2e-6
    np.testing.assert_allclose(gx.numpy(), ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("exclusive,reverse", FLAGS)
def test_complex_huge_real_and_imaginary_parts(dtype, exclusive, reverse):
    rng = np.random.default_rng(38)
    x = crand((6, 40), seed=38, phase=1e4)
    x.real[0] += 1e4
    x.real[1] -= 1e4
    x.real[2] = rng.uniform(-700, 700, size=40)
    x.real[3] = rng.choice([-1e4, 1e4, 0.0], size=40)
    x.real[4] = 1e4  # ties
    x = x.astype(dtype).astype(np.complex128)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x).astype(dtype), axis=1, exclusive=exclusive, reverse=reverse)
    got = out.numpy()
    assert np.isfinite(got[:, 1:] if not reverse else got[:, :-1]).all()
    assert_complex_close(got, refs.logcumsumexp(x, 1, exclusive, reverse), 1e-13 if dtype == "complex128" else 1e-6)


def test_complex_neg_inf_real_parts_add_nothing_and_get_zero_grad():
    x = np.array([[-np.inf + 2j, -np.inf - 1j, 0.5 + 1j, -np.inf + 3j, 1.0 - 2j], [-np.inf + 1j] * 5])
    out = check_output(paddle_ext.logcumsumexp, {"x": x}, refs.logcumsumexp, dict(axis=1), dtype="complex128")
    got = out["dygraph"][0]
    # nothing reached: exactly -inf + 0i, whatever the -inf terms' imaginary parts
    np.testing.assert_array_equal(got[0, :2], [complex(-np.inf, 0)] * 2)
    np.testing.assert_array_equal(got[1], [complex(-np.inf, 0)] * 5)
    assert got[0, 3] == got[0, 2]  # a -inf term between leaves the sum as it was
    for exclusive in (False, True):
        for reverse in (False, True):
            t = paddle.to_tensor(x, stop_gradient=False)
            w = crand(x.shape, seed=39)
            gx = paddle.grad(paddle_ext.logcumsumexp(t, axis=1, exclusive=exclusive, reverse=reverse), t,
                             grad_outputs=paddle.to_tensor(w))[0].numpy()
            assert not np.isnan(gx).any() and np.all(gx[np.isneginf(x.real)] == 0)
            np.testing.assert_allclose(gx, refs.logcumsumexp_grad(x, w, 1, exclusive, reverse), rtol=1e-13, atol=1e-14)


def test_complex_nan_and_pos_inf():
    x = np.array([0.5 + 1j, 1.0, complex(0, np.nan), 2.0, -np.inf + 0j])
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy()
    assert np.isfinite(out[:2]).all() and np.isnan(out[2:].real).all() and np.isnan(out[2:].imag).all()
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x), reverse=True).numpy()
    assert np.isnan(out[:3]).all() and np.isfinite(out[3])
    x = np.array([0.0 + 1j, complex(np.inf, 0.25), 1.0 + 0j, complex(np.inf, -2.0)])
    out = paddle_ext.logcumsumexp(paddle.to_tensor(x)).numpy()
    np.testing.assert_array_equal(out[1:], [complex(np.inf, 0.25)] * 3)  # the first +inf stays
    np.testing.assert_array_equal(out, refs.logcumsumexp(x))


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 4), 1), ((0, 4), None), ((), 0), ((), None)])
def test_complex_empty_and_zero_d(dtype, shape, axis):
    x = paddle.to_tensor(crand(shape, seed=40)).astype(dtype)
    x.stop_gradient = False
    out = paddle_ext.logcumsumexp(x, axis=axis)
    assert out.dtype == x.dtype and tuple(out.shape) == (tuple(shape) if axis is not None else (int(np.prod(shape)),))
    if out.size:
        (gx,) = paddle.grad(out, x, grad_outputs=paddle.ones_like(out))
        np.testing.assert_allclose(gx.numpy().reshape(-1), [1.0], rtol=1e-7)  # d out / d x = 1, conj(1) = 1


def test_complex_non_contiguous_input():
    x = crand((6, 8), seed=41)
    t = paddle.to_tensor(x).transpose([1, 0])
    assert_complex_close(paddle_ext.logcumsumexp(t, axis=1).numpy(), refs.logcumsumexp(x.T, 1), 1e-13)
    sliced = paddle.to_tensor(x)[:, ::2]
    assert_complex_close(paddle_ext.logcumsumexp(sliced, axis=0).numpy(), refs.logcumsumexp(x[:, ::2], 0), 1e-13)


def test_complex_long_rows_and_columns():
    """Both CPU parallel splits (many lines, few long lines) against the reference."""
    for shape, axis in (((3, 5000), 1), ((5000, 3), 0), ((1, 20000), None), ((64, 300), 0)):
        x = crand(shape, seed=42, phase=50.0)
        for dtype, rtol in (("complex128", 1e-12), ("complex64", 1e-6)):
            xd = x.astype(dtype)
            got = paddle_ext.logcumsumexp(paddle.to_tensor(xd), axis=axis).numpy()
            assert_complex_close(got, refs.logcumsumexp(xd.astype(np.complex128), axis), rtol)


def test_complex_dtype_argument():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    for dtype in COMPLEX_DTYPES:
        out = paddle_ext.logcumsumexp(paddle.to_tensor(x), axis=1, dtype=dtype)
        assert out.dtype == getattr(paddle, dtype)
        assert_complex_close(out.numpy(), refs.logcumsumexp(x.astype(np.complex128), 1), 1e-6)
    out = paddle_ext.logcumsumexp(paddle.to_tensor(np.arange(4)), dtype=paddle.complex128)
    assert out.dtype == paddle.complex128


def test_complex_double_grad():
    check_double_grad(lambda x: paddle_ext.logcumsumexp(x, axis=1), {"x": crand((2, 4), seed=43, scale=1.0)}, "x")


def test_complex_first_grad_same_with_and_without_create_graph():
    x = paddle.to_tensor(crand((3, 7), seed=44), stop_gradient=False)
    w = paddle.to_tensor(crand((3, 7), seed=45))
    g1 = paddle.grad(paddle_ext.logcumsumexp(x, axis=1), x, grad_outputs=w)[0].numpy()
    g2 = paddle.grad(paddle_ext.logcumsumexp(x, axis=1), x, grad_outputs=w, create_graph=True)[0].numpy()
    # the composition is as exact as Paddle's complex exp and log (about 1e-7 relative in Paddle 3.3.1)
    np.testing.assert_allclose(g1, g2, rtol=2e-6)


class _ComplexScanOfParts(paddle.nn.Layer):
    """paddle.inference's copy_from_cpu takes no complex array (Paddle 3.3.1): the served model makes its
    complex tensor from two real inputs and returns the output's parts."""

    def forward(self, re, im):
        out = paddle_ext.logcumsumexp(paddle.complex(re, im), axis=1, reverse=True, exclusive=True)
        return paddle.real(out), paddle.imag(out)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
def test_complex_export_round_trip(dtype):
    x = crand((3, 5), seed=46).astype(dtype)
    check_export(_ComplexScanOfParts(), {"re": x.real.copy(), "im": x.imag.copy()})


class _ComplexScan(paddle.nn.Layer):
    def forward(self, x):
        return paddle_ext.logcumsumexp(x, axis=0)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES)
def test_complex_input_jit_save_load(tmp_path, dtype):
    x = paddle.to_tensor(crand((3, 5), seed=47).astype(dtype))
    fn = paddle.jit.to_static(_ComplexScan(), input_spec=[paddle.static.InputSpec([None, 5], dtype, "x")],
                              full_graph=True)
    paddle.jit.save(fn, str(tmp_path / "model"))
    loaded = paddle.jit.load(str(tmp_path / "model"))
    got = loaded(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.numpy(), paddle_ext.logcumsumexp(x, axis=0).numpy())


def test_complex_left_as_is_under_auto_cast():
    paddle.enable_static()
    try:
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            x = paddle.static.data("x", [4, 6], "complex64")
            with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
                out = paddle_ext.logcumsumexp(x, axis=1)
            assert out.dtype == paddle.complex64
    finally:
        paddle.disable_static()


def test_other_ops_reject_complex():
    z = paddle.to_tensor(crand((1, 3, 4)))
    with pytest.raises(TypeError, match="px must be a floating tensor, got complex128"):
        paddle_ext.mutual_information_recursion(z, z[:, :, :3])
    with pytest.raises(TypeError, match="arr has dtype complex128"):
        paddle_ext.put_along_axis(z, paddle.zeros([1, 3, 1], "int64"), z[:, :, :1], axis=2)
