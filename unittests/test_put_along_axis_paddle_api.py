"""put_along_axis / put_along_axis_ as drop-ins for paddle.put_along_axis / Tensor.put_along_axis_: every
behaviour that Paddle's own tests of them check (its API-level tests, and the cases of its OpTest classes),
in dygraph, in PIR static programs and in legacy-IR static programs, for every dtype."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import MODES, check_grad, check_output, run_in_mode, static_mode

# (arr shape, indices) scattered along axis 0 with broadcast=True: one index, one per slot, and more
# index rows than arr has (four writes into two rows).
BROADCAST_CASES = {
    "one": ((1, 3), [[0]]),
    "per-slot": ((2, 2), [[0, 0], [1, 0]]),
    "more-rows": ((2, 2), [[0, 0], [1, 0], [0, 0], [1, 0]]),
}
REDUCES = ["assign", "add", "mul", "multiply", "mean", "amin", "amax"]


def _arr(shape, seed=0):
    return np.random.default_rng(seed).random(shape).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(BROADCAST_CASES))
@pytest.mark.parametrize("reduce", ["assign", "mul", "add"])
@pytest.mark.parametrize("fn", [paddle_ext.put_along_axis, paddle_ext.put_along_axis_], ids=["functional", "inplace"])
def test_scalar_value_broadcast_in_every_mode(mode, case, reduce, fn):
    shape, index = BROADCAST_CASES[case]
    arr, indices, value = _arr(shape), np.array(index, np.int64), np.array(99.0, np.float32)
    expected = refs.put_along_axis(arr, indices, value, 0, reduce)
    if reduce == "assign":
        np.put_along_axis(ref := arr.copy(), indices, 99.0, 0)
        np.testing.assert_allclose(expected, ref)  # NumPy's own put_along_axis agrees with the reference
    # values as a 0-d tensor (fed to a static program) and as a Python float
    (out,), _ = run_in_mode(mode, lambda a, i, v: fn(a, i, v, 0, reduce), arr, indices, value)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    (out,), _ = run_in_mode(mode, lambda a, i: fn(a, i, 99.0, 0, reduce), arr, indices)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_tensor_inplace_writes_into_arr():
    shape, index = BROADCAST_CASES["per-slot"]
    arr = _arr(shape)
    t = paddle.to_tensor(arr)
    out = paddle_ext.put_along_axis_(t, paddle.to_tensor(np.array(index)), paddle.to_tensor(99.0), 0)
    expected = arr.copy()
    np.put_along_axis(expected, np.array(index), 99.0, 0)
    np.testing.assert_array_equal(t.numpy(), expected)
    assert out is t


# broadcast=False (torch's rule): zeros [3, 5] take values arange(1, 11) as [2, 5] at indices smaller than
# arr and values off the axis.
VALUES_2X5 = np.arange(1, 11, dtype=np.float32).reshape(2, 5)
NO_BROADCAST_CASES = {"axis0": ([[0, 1, 2, 0]], 0), "axis1": ([[0, 1, 2], [0, 1, 4]], 1)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(NO_BROADCAST_CASES))
@pytest.mark.parametrize("reduce", ["assign", "mul", "add"])
@pytest.mark.parametrize("fn", [paddle_ext.put_along_axis, paddle_ext.put_along_axis_], ids=["functional", "inplace"])
def test_no_broadcast_in_every_mode(mode, case, reduce, fn):
    index, axis = NO_BROADCAST_CASES[case]
    arr, indices = np.zeros((3, 5), np.float32), np.array(index, np.int64)
    expected = refs.put_along_axis(arr, indices, VALUES_2X5, axis, reduce, True, False)
    # values fed to the program, and values made inside it with paddle.to_tensor (a constant there)
    (out,), _ = run_in_mode(mode, lambda a, i, v: fn(a, i, v, axis, reduce, True, False), arr, indices, VALUES_2X5)
    np.testing.assert_allclose(out, expected)
    (out,), _ = run_in_mode(mode, lambda a, i: fn(a, i, paddle.to_tensor(VALUES_2X5), axis, reduce, True, False),
                            arr, indices)
    np.testing.assert_allclose(out, expected)
    (out,), _ = run_in_mode(mode, lambda a, i: fn(a, i, 10, axis, reduce, True, False), arr, indices)
    np.testing.assert_allclose(out, refs.put_along_axis(arr, indices, np.float32(10), axis, reduce, True, False))


@pytest.mark.parametrize("fn", [paddle_ext.put_along_axis, paddle_ext.put_along_axis_], ids=["functional", "inplace"])
def test_errors_are_paddles_exception_types(fn):
    arr = paddle.to_tensor([[1, 2, 3], [4, 5, 6]]).astype("float32")

    def call(indices, values):
        return fn(arr.clone(), paddle.to_tensor(indices).astype("int32"), values, 0, "assign", True, False)

    with pytest.raises(ValueError, match=r"indices must have arr's rank 2 \(shape \[2, 3\]\), got shape \[1\]"):
        call([1], 1.0)
    # values of another rank AND another dtype: the rank is checked first, as by Paddle (a ValueError)
    with pytest.raises(ValueError, match=r"with broadcast=False values must have arr's rank 2, got shape \[1\]"):
        call([[1]], paddle.to_tensor([2]))
    # Paddle raises RuntimeError for indices larger than arr and for an index out of range; ours are
    # also the ValueError and IndexError they are
    with pytest.raises(RuntimeError, match=r"indices.shape\[1\] = 4 must be <= arr.shape\[1\] = 3") as info:
        call([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], 1.0)
    assert isinstance(info.value, ValueError)
    with pytest.raises(RuntimeError, match=r"index 10 at indices\[0, 0\] is out of range for axis 0 of size 2") as info:
        call([[10]], 1.0)
    assert isinstance(info.value, IndexError)
    np.testing.assert_array_equal(arr.numpy(), [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(TypeError, match="indices must be int32 or int64, got float32"):
        fn(arr.clone(), paddle.to_tensor([[1.0]]), paddle.to_tensor([[2.0]]), 0, "mul", True, False)
    # values of another dtype alone: a TypeError, and the ValueError Paddle's kernel raises
    with pytest.raises(TypeError, match="values has dtype int64 but arr has dtype float32") as info:
        call([[1]], paddle.to_tensor([[2]]))
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("mode", ["static", "legacy_static"])
def test_shape_errors_while_building_a_static_program(mode):
    with pytest.raises(ValueError, match="indices must have arr's rank 2"):
        run_in_mode(mode, lambda a, i: paddle_ext.put_along_axis(a, i, 1.0, 0), np.zeros((2, 3), np.float32),
                    np.zeros([1], np.int32))
    with pytest.raises(RuntimeError, match=r"indices.shape\[1\] = 4 must be <= arr.shape\[1\] = 3"):
        run_in_mode(mode, lambda a, i: paddle_ext.put_along_axis(a, i, 1.0, 0, "assign", True, False),
                    np.zeros((2, 3), np.float32), np.zeros([3, 4], np.int32))
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        run_in_mode(mode, lambda a, i: paddle_ext.put_along_axis(a, i, 1.0, 0), np.zeros((2, 3), np.float32),
                    np.zeros([1, 3], np.float32))


def _add_minus_four_at_row_two(arr):
    indices = paddle.to_tensor([[[[2]]]], dtype="int32", stop_gradient=False)
    return paddle_ext.put_along_axis(arr, indices=indices, values=-4.0, axis=-2, reduce="add")


def test_to_static_with_dynamic_shape_matches_dygraph_values_and_grads():
    x = np.random.default_rng(2024).random([10, 10, 10, 10]).astype(np.float32)
    spec = [paddle.static.InputSpec(shape=[-1, -1, -1, -1], dtype="float32", stop_gradient=False)]
    results = []
    for net in (_add_minus_four_at_row_two, paddle.jit.to_static(_add_minus_four_at_row_two, input_spec=spec,
                                                                  full_graph=True)):
        arr = paddle.to_tensor(x, stop_gradient=False)
        out = net(arr)
        out.backward()
        results.append((out.numpy(), arr.grad.numpy()))
    (dy_out, dy_grad), (st_out, st_grad) = results
    expected = x.copy()
    expected[:, :, 2, :] -= 4.0
    np.testing.assert_allclose(dy_out, expected, rtol=1e-6)
    np.testing.assert_allclose(st_out, dy_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(dy_grad, np.ones_like(x))
    np.testing.assert_allclose(st_grad, dy_grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy-ir"])
@pytest.mark.parametrize("wrt", ["arr", "values", "arr-with-scalar-values"])
@pytest.mark.parametrize("reduce", ["add", "mul", "amax"])
def test_static_grads_when_one_input_needs_none(legacy, wrt, reduce):
    rng = np.random.default_rng(7)
    arr, values, g = rng.normal(size=(4, 3)), rng.normal(size=(2, 3)), rng.normal(size=(4, 3))
    indices = np.array([[0, 3, 1], [0, 2, 1]])
    if wrt == "arr-with-scalar-values":
        values = np.full((2, 3), 1.5)
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            a = paddle.static.data("a", [4, 3], "float64")
            v = paddle.static.data("v", [2, 3], "float64")
            a.stop_gradient, v.stop_gradient = wrt == "values", wrt != "values"
            i = paddle.static.data("i", [2, 3], "int64")
            out = paddle_ext.put_along_axis(a, i, 1.5 if wrt == "arr-with-scalar-values" else v, 0, reduce)
            loss = paddle.mean(out * paddle.to_tensor(g)) * out.shape[0] * out.shape[1]
            (grad,) = paddle.static.gradients([loss], [v if wrt == "values" else a])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        (grad,) = exe.run(main, feed={"a": arr, "v": values, "i": indices}, fetch_list=[grad])
    arr_grad, values_grad = refs.put_along_axis_grad(arr, indices, values, g, 0, reduce)
    np.testing.assert_allclose(grad, values_grad if wrt == "values" else arr_grad, rtol=1e-12, atol=1e-12)


# Every dtype and reduce in every mode: Paddle checks reduce='mul' with broadcast=False for float32,
# bfloat16, int32, int64 and uint8 (on GPUs); here every supported dtype, on the CPU. arr [10, 10, 10]
# takes values [5, 5, 5] along axis 1.
DTYPES = ["float16", "bfloat16", "float32", "float64", "int16", "int32", "int64", "uint8"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_dtype_and_reduce_in_every_mode(mode, dtype, reduce):
    rng = np.random.default_rng(3)
    arr = rng.integers(1, 5, (10, 10, 10)).astype(np.float64)
    values = rng.integers(1, 5, (5, 5, 5)).astype(np.float64)
    indices = rng.integers(0, 5, (5, 5, 5))
    is_float = dtype in ("float16", "bfloat16", "float32", "float64")
    feed = "float32" if dtype == "bfloat16" else dtype  # NumPy has no bfloat16: fed as float32, cast inside

    def fn(a, i, v):
        out = paddle_ext.put_along_axis(a.astype(dtype), i, v.astype(dtype), 1, reduce, True, False)
        return out.astype("float64") if is_float else out

    (out,), _ = run_in_mode(mode, fn, arr.astype(feed), indices, values.astype(feed))
    expected = refs.put_along_axis(arr.astype(dtype if not is_float else np.float64), indices,
                                   values.astype(dtype if not is_float else np.float64), 1, reduce, True, False)
    if is_float:
        # small integers: exact in every floating dtype, except the products of mul in the half types
        rtol = {"float16": 1e-3, "bfloat16": 1e-2}.get(dtype, 1e-7) if reduce in ("mul", "multiply", "mean") else 0
        np.testing.assert_allclose(out, expected, rtol=rtol)
    else:
        np.testing.assert_array_equal(out, expected)


# The cases of Paddle's OpTest classes: arr [10, 10, 10]; broadcast indices [[[0]]] with value 99 along
# axis 1 (float64 and float16), and broadcast=False with indices of zeros [5, 5, 5] (every value into
# slot 0) for each reduce, with and without arr's own value. Values and grads of arr and values.
def _optest_inputs(values):
    rng = np.random.default_rng(4)
    return {"arr": rng.random((10, 10, 10)), "indices": np.zeros((5, 5, 5), np.int64), "values": values}


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_optest_broadcast_assign(dtype, index_dtype):
    inputs = {"arr": np.random.default_rng(5).random((10, 10, 10)), "indices": np.array([[[0]]], index_dtype),
              "values": np.array([99.0])}
    attrs = dict(axis=1)

    def expected(arr, indices, values, axis):
        out = arr.copy()
        np.put_along_axis(out, indices, values, axis)
        return out

    check_output(paddle_ext.put_along_axis, inputs, expected, attrs, dtype=dtype, modes=MODES)
    if dtype == "float64":
        check_grad(paddle_ext.put_along_axis, inputs, ["arr", "values"], attrs, modes=MODES)


@pytest.mark.parametrize("reduce,include_self", [("assign", True)] + [(r, s) for r in ("mul", "add", "mean", "amin",
                                                                                       "amax") for s in (True, False)])
def test_optest_no_broadcast_reduce(reduce, include_self):
    rng = np.random.default_rng(6)
    distinct = reduce in ("assign", "amin", "amax")  # distinct values: no ties for amin/amax's grads
    values = np.arange(1.0, 126.0).reshape(5, 5, 5) if distinct else rng.integers(1, 5, (5, 5, 5)).astype(np.float64)
    inputs = _optest_inputs(values)
    attrs = dict(axis=1, reduce=reduce, include_self=include_self, broadcast=False)
    check_output(paddle_ext.put_along_axis, inputs, refs.put_along_axis, attrs, modes=MODES)
    check_grad(paddle_ext.put_along_axis, inputs, ["arr", "values"], attrs, modes=MODES)
