"""logcumsumexp as a drop-in for paddle.logcumsumexp: every behaviour that Paddle's own tests of it check
(its API-level tests, and the cases of its OpTest classes), in dygraph, in PIR static programs and in
legacy-IR static programs, for every dtype."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import MODES, analytic_grads, run_in_mode, static_grads
from paddle_ext._checks import dtype_name

ARANGE = np.arange(12, dtype=np.float32).reshape(3, 4)
RANDOM = np.random.default_rng(0).random((5, 4)).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x", [ARANGE, RANDOM], ids=["arange", "random"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
def test_every_axis_in_every_mode(mode, x, axis):
    (out,), (dtype,) = run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, axis=axis), x)
    assert dtype_name(dtype) == "float32"
    np.testing.assert_allclose(out, refs.logcumsumexp(x, axis), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dtype_argument_is_the_result_dtype(mode, dtype):
    seen = []

    def fn(t):
        out = paddle_ext.logcumsumexp(t, dtype=dtype)
        seen.append(dtype_name(out.dtype))
        return out.astype("float64")

    (out,), _ = run_in_mode(mode, fn, RANDOM)
    assert seen == [dtype]
    rtol = {"float16": 1e-3, "bfloat16": 1e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(out, refs.logcumsumexp(RANDOM.astype(np.float64)), rtol=rtol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [-3, 2])
def test_axis_out_of_range_is_an_index_error(mode, axis):
    with pytest.raises(IndexError, match=f"axis={axis} is out of range for a tensor of rank 2"):
        run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, axis=axis), ARANGE)


@pytest.mark.parametrize("mode", MODES)
def test_no_overflow_where_the_naive_formula_overflows(mode):
    x = np.arange(10000, 10024, dtype=np.float32)
    with np.errstate(over="ignore"):
        assert np.isinf(np.log(np.cumsum(np.exp(x)))).all()
    (out,), _ = run_in_mode(mode, paddle_ext.logcumsumexp, x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, refs.logcumsumexp(x), rtol=1e-6)


def test_name_names_the_output_of_a_legacy_ir_program():
    def fn(t):
        out = paddle_ext.logcumsumexp(t, name="out")
        assert "out" in out.name
        return out

    (out,), _ = run_in_mode("legacy_static", fn, ARANGE)
    np.testing.assert_allclose(out, refs.logcumsumexp(ARANGE), rtol=1e-6)
    for mode in ("dygraph", "static"):  # accepted (PIR values and dygraph tensors carry no such name)
        run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, name="out"), ARANGE)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_input_is_scanned_in_float32(mode, dtype):
    # Paddle's static-mode test of an int32 input expects a TypeError, but the TypeError it gets comes
    # from NumPy (np.random.random takes no dtype), not from the op: paddle.logcumsumexp accepts
    # integers in every mode and scans them in float32, and so does ours.
    x = np.random.default_rng(1).integers(-5, 5, (6, 7)).astype(dtype)
    (out,), (out_dtype,) = run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, axis=1), x)
    assert dtype_name(out_dtype) == "float32"
    np.testing.assert_allclose(out, refs.logcumsumexp(x, 1), rtol=1e-6)


@pytest.mark.parametrize("dtype,rtol", [("float16", 1e-3), ("bfloat16", 1e-2)])
@pytest.mark.parametrize("axis", [None, 1])
def test_half_precision_agrees_with_float32_values_and_grads(dtype, rtol, axis):
    # Paddle checks float16 against float32 on GPUs only; our CPU kernels have the half types too.
    x = np.random.default_rng(20).random((10, 12))

    def run(d):
        t = paddle.to_tensor(x.astype(np.float32)).astype(d)
        t.stop_gradient = False
        y = paddle_ext.logcumsumexp(t, dtype=d, axis=axis)
        (g,) = paddle.grad(y, [t])
        return y.astype("float32").numpy(), g.astype("float32").numpy()

    (y_half, g_half), (y_32, g_32) = run(dtype), run("float32")
    np.testing.assert_allclose(y_half, y_32, rtol=rtol)
    np.testing.assert_allclose(g_half, g_32, rtol=2 * rtol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,shape,axis", [("float32", [3, 4, 0], 0), ("float64", [3, 4, 0, 3, 4], -2),
                                              ("int32", [3, 4, 0], 0), ("int64", [3, 4, 0, 3, 4], -1)])
def test_zero_size_input(mode, dtype, shape, axis):
    x = np.zeros(shape, dtype)
    if mode == "dygraph":
        t = paddle.to_tensor(x)
        t.stop_gradient = False
        out = paddle_ext.logcumsumexp(t, axis=axis).numpy()
    else:
        (out,), _ = run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, axis=axis), x)
    assert out.shape == tuple(shape)


# The cases of Paddle's OpTest classes for the op: float64 arange(100) as [10, 10]; Paddle's `flatten` is our
# axis=None. Grads of a random-weighted sum against the brute-force reference, in every mode.
OPTEST_CASES = [dict(axis=None, reverse=True), dict(axis=1, reverse=True), dict(axis=1),
                dict(axis=None, reverse=True, exclusive=True)]


@pytest.mark.parametrize("attrs", OPTEST_CASES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_optest_cases_values(attrs, mode):
    x = np.arange(100, dtype=np.float64).reshape(10, 10)
    (out,), _ = run_in_mode(mode, lambda t: paddle_ext.logcumsumexp(t, **attrs), x)
    # With exclusive=True the first output is -inf (the log of an empty sum); Paddle's kernel writes the
    # dtype's lowest finite value there instead (see docs/logcumsumexp.md, Differences from Paddle).
    np.testing.assert_allclose(out, refs.logcumsumexp(x, **attrs), rtol=1e-13)


@pytest.mark.parametrize("attrs", OPTEST_CASES, ids=str)
def test_optest_cases_grads(attrs):
    x = np.arange(100, dtype=np.float64).reshape(10, 10)
    inputs = {"x": x}
    grads, weights = analytic_grads(paddle_ext.logcumsumexp, inputs, attrs, ["x"])
    expected = refs.logcumsumexp_grad(x, weights[0], **attrs)
    np.testing.assert_allclose(grads[0], expected, rtol=1e-10, atol=1e-14)
    for legacy in (False, True):
        (static,) = static_grads(paddle_ext.logcumsumexp, inputs, attrs, ["x"], weights, legacy=legacy)
        np.testing.assert_allclose(static, expected, rtol=1e-10, atol=1e-14)
