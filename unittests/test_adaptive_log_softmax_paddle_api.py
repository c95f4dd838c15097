"""nn.AdaptiveLogSoftmaxWithLoss and nn.functional.adaptive_log_softmax_with_loss as drop-ins for Paddle's: every
behaviour that Paddle's own tests of the layer check, in dygraph, in PIR static programs and in legacy-IR
static programs, for every input dtype."""

import numpy as np
import paddle
import pytest

import refs
from op_test import MODES, run_in_mode, static_mode
from paddle_ext.nn import AdaptiveLogSoftmaxWithLoss
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss

DTYPES = ["float16", "bfloat16", "float32", "float64"]
RTOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}


class _ByShape(paddle.nn.initializer.Initializer):
    """Gives each parameter the array of its shape (in these layers no two weights share a shape), so that
    a layer built in any mode has known weights."""

    def __init__(self, arrays):
        super().__init__()
        self._arrays = {a.shape: a for a in arrays}

    def forward(self, param, block=None):
        return paddle.nn.initializer.Assign(self._arrays[tuple(param.shape)])(param, block)


def _layer(in_features, n_classes, cutoffs, weights, bias=None, dtype="float32", div_value=2.0):
    paddle.set_default_dtype("float64" if dtype == "float64" else "float32")
    try:
        return AdaptiveLogSoftmaxWithLoss(
            in_features, n_classes, cutoffs, div_value=div_value, head_bias=bias is not None,
            weight_attr=paddle.ParamAttr(initializer=_ByShape(weights)),
            bias_attr=None if bias is None else paddle.ParamAttr(initializer=_ByShape([bias])))
    finally:
        paddle.set_default_dtype("float32")


def _weights(shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype("float64" if dtype == "float64" else "float32") for s in shapes]


# in_features 8, 4 classes, cutoffs [2], div_value 2: head [8, 3], one cluster [8, 4] x [4, 2]
SMALL_SHAPES = [(8, 3), (8, 4), (4, 2)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_log_prob_rows_are_distributions_and_forward_reads_them(mode, dtype):
    weights = _weights(SMALL_SHAPES, 1, dtype)
    x = np.random.default_rng(2).normal(size=(4, 8)).astype(np.float32)

    def fn(t):
        layer = _layer(8, 4, [2], weights, dtype=dtype)
        t = t.astype(dtype)
        outs = [layer.log_prob(t)]
        for v in range(4):  # every row labelled v, for each class v
            outs.extend(layer(t, paddle.full([4], v, "int64")))
        assert all(str(o.dtype).endswith(dtype) for o in outs)
        return [o.astype("float64") for o in outs]

    results, _ = run_in_mode(mode, fn, x)
    log_prob, rest = results[0], results[1:]
    rtol = RTOL[dtype]
    x_used = paddle.to_tensor(x).astype(dtype).astype("float64").numpy()
    expected = refs.adaptive_log_prob(x_used, weights[0].astype(np.float64), [[w.astype(np.float64) for w in weights[1:]]],
                                      [2, 4])
    np.testing.assert_allclose(log_prob, expected, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(np.exp(log_prob).sum(axis=1), np.ones(4), rtol=rtol)
    for v in range(4):
        out, loss = rest[2 * v], rest[2 * v + 1]
        np.testing.assert_allclose(out, log_prob[:, v], rtol=rtol, atol=rtol)
        np.testing.assert_allclose(loss, -log_prob[:, v].mean(), rtol=rtol, atol=rtol)  # nll_loss of log_prob


# in_features 8, 10 classes, cutoffs [4, 8], div_value 2: head [8, 6], clusters [8, 4] x [4, 4], [8, 2] x [2, 2]
PREDICT_SHAPES = [(8, 6), (8, 4), (4, 4), (8, 2), (2, 2)]


def _predict_case(config):
    """Weights and inputs (|N(0, 1)|, as Paddle's test) such that the predictions fall in the shortlist,
    in the clusters, or in both: the head sees features [0, 4) only, [4, 8) only, or the first 32 rows
    see features [4, 8) through the cluster columns and the rest [0, 4) through the shortlist columns."""
    weights = [np.abs(w) for w in _weights(PREDICT_SHAPES, 3, "float32")]
    bias = np.abs(np.random.default_rng(4).normal(size=6)).astype(np.float32)
    x = np.abs(np.random.default_rng(5).normal(size=(64, 8))).astype(np.float32)
    head = weights[0]
    if config == "head-sees-first-features":
        head[4:, :] = 0
    elif config == "head-sees-last-features":
        head[:4, :] = 0
    else:
        x[:32, :4] = 0
        x[32:, 4:] = 0
        head[:4, 4:] = 0
        head[4:, :4] = 0
    return weights, bias, x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", ["head-sees-first-features", "head-sees-last-features", "mixed"])
def test_predict_is_the_argmax_of_log_prob(mode, config):
    weights, bias, x = _predict_case(config)

    def fn(t):
        layer = _layer(8, 10, [4, 8], weights, bias)
        return layer.predict(t), layer.log_prob(t)

    (pred, log_prob), _ = run_in_mode(mode, fn, x)
    assert pred.dtype == np.int64
    np.testing.assert_array_equal(pred, log_prob.argmax(axis=1))
    if config == "mixed":  # the case is what it claims: shortlist and cluster predictions both occur
        assert (pred < 4).any() and (pred >= 4).any()


@pytest.mark.parametrize("mode", MODES)
def test_clusters_have_paddles_parameter_shapes(mode):
    y = np.random.default_rng(6).integers(0, 20, 128)

    def fn(t, labels):
        layer = AdaptiveLogSoftmaxWithLoss(16, 20, [5, 10, 15], div_value=2.0)
        assert list(layer.head_weight.shape) == [16, 5 + 3]
        assert [list(layer.tail_weights[i][1].shape) for i in range(3)] == [[8, 5], [4, 5], [2, 5]]
        return layer(t, labels)

    (output, loss), _ = run_in_mode(mode, fn, np.random.default_rng(7).normal(size=(128, 16)).astype(np.float32), y)
    assert output.shape == (128,) and loss.shape == ()
    assert (output <= 0).all() and np.isclose(loss, -output.mean(), rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_label_batch_size_must_match_the_input(mode):
    def fn(t, labels):
        return AdaptiveLogSoftmaxWithLoss(16, 20, [5, 10, 15], div_value=2.0)(t, labels)

    with pytest.raises(ValueError, match="input has batch size 2 but label has 3"):
        run_in_mode(mode, fn, np.zeros((2, 16), np.float32), np.array([0, 5, 10]))


def test_labels_beyond_n_classes_are_a_value_error():
    layer = AdaptiveLogSoftmaxWithLoss(16, 20, [5, 10, 15], div_value=2.0)
    labels = paddle.randint(low=21, high=200, shape=[128])
    with pytest.raises(ValueError, match=r"label\[0\] = \d+ is out of range \[0, 20\)"):
        layer(paddle.randn((128, 16)), labels)


# Paddle's test matches the start of its message; ours goes on with n_classes - 1, the value and the fault.
@pytest.mark.parametrize("cutoffs, fault", [([5, 15, 15], "not unique and increasing"),
                                            ([5, 15, 10], "not unique and increasing"),
                                            ([5, 10, 25], "25 > 19"), ([5, 10, 20], "20 > 19")])
def test_bad_cutoffs_raise_paddles_value_error(cutoffs, fault):
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique,") as info:
        AdaptiveLogSoftmaxWithLoss(16, 20, cutoffs, div_value=2.0)
    assert str(info.value).endswith(f"between 1 and n_classes-1 = 19; got cutoffs={cutoffs} ({fault})")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_functional_form_in_every_mode_and_dtype(mode, dtype):
    store = "float64" if dtype == "float64" else "float32"
    weights = _weights(PREDICT_SHAPES, 8, dtype)
    bias = np.random.default_rng(9).normal(size=6).astype(store)
    x = np.random.default_rng(10).normal(size=(12, 8)).astype(store)
    y = np.random.default_rng(11).integers(0, 10, 12)

    def fn(t, labels, head, w1, w2, v1, v2, b):
        out, loss = adaptive_log_softmax_with_loss(t.astype(dtype), labels, head, [[w1, w2], [v1, v2]], [4, 8, 10], b)
        return out.astype("float64"), loss.astype("float64")

    (out, loss), _ = run_in_mode(mode, fn, x, y, *weights, bias)
    x_used = paddle.to_tensor(x).astype(dtype).astype("float64").numpy()
    w64 = [w.astype(np.float64) for w in weights]
    ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(x_used, y, w64[0], [w64[1:3], w64[3:5]], [4, 8, 10],
                                                            bias.astype(np.float64))
    np.testing.assert_allclose(out, ref_out, rtol=RTOL[dtype], atol=RTOL[dtype])
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL[dtype], atol=RTOL[dtype])


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy-ir"])
def test_log_prob_grads_in_static_programs(legacy):
    weights, bias, x = _predict_case("mixed")
    g = np.random.default_rng(12).normal(size=(64, 10)).astype(np.float32)
    layer = _layer(8, 10, [4, 8], weights, bias)
    t = paddle.to_tensor(x, stop_gradient=False)
    (expected,) = paddle.grad((layer.log_prob(t) * paddle.to_tensor(g)).sum(), [t])
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            xs = paddle.static.data("x", [64, 8], "float32")
            xs.stop_gradient = False
            log_prob = _layer(8, 10, [4, 8], weights, bias).log_prob(xs)
            loss = paddle.mean(log_prob * paddle.to_tensor(g)) * (64 * 10)
            (grad,) = paddle.static.gradients([loss], [xs])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        (grad,) = exe.run(main, feed={"x": x}, fetch_list=[grad])
    np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-4, atol=1e-4)
