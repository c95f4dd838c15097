"""A call written for Paddle's API means the same with ours: every public function and layer that mirrors a
Paddle API has Paddle's parameters, in Paddle's order, with Paddle's defaults (read from the installed
Paddle with inspect); our extra parameters come after them and are keyword-only. And a process that runs
Paddle on its legacy IR throughout (FLAGS_enable_pir_api=0) can use every op."""

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import paddle
import pytest

import paddle_ext
from paddle_ext.nn import AdaptiveLogSoftmaxWithLoss
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss

import refs

PAIRS = {
    "logcumsumexp": (paddle.logcumsumexp, paddle_ext.logcumsumexp),
    "put_along_axis": (paddle.put_along_axis, paddle_ext.put_along_axis),
    # Paddle has the inplace form only as a Tensor method; it takes the same parameters, arr first
    "put_along_axis_": (paddle.Tensor.put_along_axis_, paddle_ext.put_along_axis_),
    "AdaptiveLogSoftmaxWithLoss.__init__": (paddle.nn.AdaptiveLogSoftmaxWithLoss.__init__,
                                            AdaptiveLogSoftmaxWithLoss.__init__),
    "AdaptiveLogSoftmaxWithLoss.forward": (paddle.nn.AdaptiveLogSoftmaxWithLoss.forward,
                                           AdaptiveLogSoftmaxWithLoss.forward),
    "AdaptiveLogSoftmaxWithLoss.log_prob": (paddle.nn.AdaptiveLogSoftmaxWithLoss.log_prob,
                                            AdaptiveLogSoftmaxWithLoss.log_prob),
    "AdaptiveLogSoftmaxWithLoss.predict": (paddle.nn.AdaptiveLogSoftmaxWithLoss.predict,
                                           AdaptiveLogSoftmaxWithLoss.predict),
    "adaptive_log_softmax_with_loss": (paddle.nn.functional.adaptive_log_softmax_with_loss,
                                       adaptive_log_softmax_with_loss),
}

# Our parameters beyond Paddle's, each keyword-only (with its default).
EXTRAS = {
    "logcumsumexp": {"exclusive": False, "reverse": False},
    "put_along_axis": {"name": None, "deterministic": False},
    "put_along_axis_": {"name": None, "deterministic": False},
    "AdaptiveLogSoftmaxWithLoss.__init__": {"ignore_index": -100, "reduction": "mean"},
    "adaptive_log_softmax_with_loss": {"ignore_index": -100, "reduction": "mean"},
}


def _positional(sig):
    return [p for p in sig.parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize("api", sorted(PAIRS))
def test_paddle_parameters_in_paddle_order_with_paddle_defaults(api):
    theirs, ours = (inspect.signature(f) for f in PAIRS[api])
    expected = [(p.name, p.default) for p in _positional(theirs)]
    assert expected, f"{api}: Paddle's signature has no positional parameters (not read?)"
    assert [(p.name, p.default) for p in _positional(ours)] == expected


@pytest.mark.parametrize("api", sorted(PAIRS))
def test_extra_parameters_are_keyword_only(api):
    theirs, ours = (inspect.signature(f) for f in PAIRS[api])
    extra = {name: p for name, p in ours.parameters.items() if name not in theirs.parameters}
    assert {name: p.default for name, p in extra.items()} == EXTRAS.get(api, {})
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra.values()), extra


def test_logcumsumexp_third_positional_argument_is_the_dtype():
    # Paddle's call (x, axis, dtype): once an exclusive float32 scan here, now Paddle's float64 result
    x = paddle.to_tensor([0.0, 1.0, 2.0, 3.0])
    out = paddle_ext.logcumsumexp(x, -1, "float64")
    assert out.dtype == paddle.float64
    np.testing.assert_allclose(out.numpy(), [0.0, 1.3132616875182228, 2.4076059644443806, 3.4401896985611953],
                               rtol=1e-15)
    np.testing.assert_allclose(out.numpy(), paddle.logcumsumexp(x, -1, "float64").numpy(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), refs.logcumsumexp(np.arange(4.0), -1), rtol=1e-15)


@pytest.mark.parametrize("extra", [(True,), (True, False)])
def test_logcumsumexp_takes_no_flag_positionally(extra):
    with pytest.raises(TypeError):
        paddle_ext.logcumsumexp(paddle.ones([3]), 0, None, None, *extra)


@pytest.mark.parametrize("fn", [paddle_ext.put_along_axis, paddle_ext.put_along_axis_])
def test_put_along_axis_positional_call_is_paddles(fn):
    arr = paddle.zeros([2, 3])
    indices = paddle.to_tensor([[1, 0, 1]])
    values = paddle.to_tensor([[1.0, 2.0, 3.0]])
    # (arr, indices, values, axis, reduce, include_self, broadcast), positionally, as Paddle's tests call it
    expected = paddle.put_along_axis(arr, indices, values, 0, "add", False, False).numpy()
    np.testing.assert_array_equal(fn(arr.clone(), indices, values, 0, "add", False, False).numpy(), expected)
    with pytest.raises(TypeError):
        fn(arr.clone(), indices, values, 0, "add", False, False, None)  # name / deterministic: keywords only


LEGACY_PROCESS = """
    import numpy as np, paddle, paddle_ext
    from paddle_ext.nn import AdaptiveLogSoftmaxWithLoss

    assert not isinstance(paddle.float32, paddle.base.core.DataType)  # dtypes are VarTypes in this process
    x64 = np.random.default_rng(0).normal(size=(3, 5))
    expected = np.log(np.cumsum(np.exp(x64), axis=1))
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        x = paddle.to_tensor(x64).astype(dtype)
        x.stop_gradient = False
        y = paddle_ext.logcumsumexp(x, axis=1)
        y.astype("float32").sum().backward()
        assert y.dtype == x.dtype and x.grad is not None
        np.testing.assert_allclose(y.astype("float64").numpy(), expected, rtol=1e-2)
        for reduce in ("assign", "add", "mul", "mean", "amin", "amax"):
            arr = paddle.full([3, 5], 2.0, dtype)
            arr.stop_gradient = False
            out = paddle_ext.put_along_axis(arr, paddle.to_tensor([[0, 1, 2, 0, 1]]), 3.0, 0, reduce)
            out.astype("float32").sum().backward()
            want = {"assign": 3, "add": 5, "mul": 6, "mean": 2.5, "amin": 2, "amax": 3}[reduce]
            assert float(out[0, 0]) == want and float(out[2, 0]) == 2, (reduce, out)
    layer = AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8], head_bias=True)
    features = paddle.randn([6, 8])
    out, loss = layer(features, paddle.to_tensor([0, 3, 5, 9, 2, 7]))
    loss.backward()
    assert (layer.predict(features).numpy() == layer.log_prob(features).numpy().argmax(1)).all()

    paddle.enable_static()
    main = paddle.static.Program()
    with paddle.static.program_guard(main):
        x = paddle.static.data("x", [3, 5], "float32")
        y = paddle_ext.logcumsumexp(x, axis=1, name="out")
        z = paddle_ext.put_along_axis(x, paddle.static.data("i", [1, 5], "int64"), 1.0, 0, "add")
        paddle_ext.put_along_axis_(x, paddle.static.data("j", [1, 5], "int64"), 2.0, 0, "add")
        assert y.name.startswith("out.tmp")
    y, z, x = paddle.static.Executor().run(main, fetch_list=[y, z, x], feed={
        "x": np.zeros((3, 5), "float32"), "i": np.zeros((1, 5), "int64"), "j": np.ones((1, 5), "int64")})
    np.testing.assert_allclose(y[0], np.log(np.arange(1, 6)), rtol=1e-6)
    assert z[0].tolist() == [1.0] * 5 and x[1].tolist() == [2.0] * 5

    paddle.disable_static()  # to_static builds a legacy-IR program here; its backward takes arr's grad only
    def add_at_row_two(arr):
        return paddle_ext.put_along_axis(arr, paddle.to_tensor([[[2]]]), -4.0, axis=-2, reduce="add")
    spec = [paddle.static.InputSpec([-1, -1, -1], "float32", stop_gradient=False)]
    arr = paddle.ones([3, 4, 5])
    arr.stop_gradient = False
    out = paddle.jit.to_static(add_at_row_two, input_spec=spec, full_graph=True)(arr)
    out.backward()
    assert float(out[0, 2, 0]) == -3.0 and (arr.grad.numpy() == 1).all()
    print("every op ran")
"""


def test_every_op_in_a_process_on_the_legacy_ir(tmp_path):
    script = tmp_path / "legacy_process.py"  # a file: to_static reads the function's source
    script.write_text(textwrap.dedent(LEGACY_PROCESS))
    env = dict(os.environ, FLAGS_enable_pir_api="0")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0 and "every op ran" in done.stdout, done.stderr[-3000:]
