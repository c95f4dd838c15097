"""A call written for Paddle's API means the same with ours: every public function and layer that mirrors a
Paddle API has Paddle's parameters, in Paddle's order, with Paddle's defaults (read from the installed
Paddle with inspect); our extra parameters come after them and are keyword-only."""

import inspect

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
