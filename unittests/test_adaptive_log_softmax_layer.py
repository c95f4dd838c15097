"""nn.AdaptiveLogSoftmaxWithLoss and nn.functional.adaptive_log_softmax_with_loss against a NumPy float64
reference of the whole layer, Paddle 3.3.1's own layer (weights copied both ways) and PyTorch's when
installed."""

import numpy as np
import paddle
import pytest

import refs
from paddle_ext._library import sum_along
from paddle_ext.nn import AdaptiveLogSoftmaxWithLoss
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss
import op_test
from op_test import MODES, check_double_grad, check_export, check_grad, check_output, static_mode

IN, N_CLASSES, CUTOFFS, DIV = 8, 30, [5, 12, 20], 2.0


def make_layer(head_bias=False, dtype="float64", in_features=IN, n_classes=N_CLASSES, cutoffs=CUTOFFS, div=DIV):
    paddle.set_default_dtype(dtype)
    try:
        layer = AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=div, head_bias=head_bias)
    finally:
        paddle.set_default_dtype("float32")
    if head_bias:  # a non-zero bias, so that it is really tested
        layer.head_bias.set_value(np.random.default_rng(3).normal(size=layer.head_bias.shape).astype(dtype))
    return layer


def weights_np(layer):
    head = layer.head_weight.numpy().astype(np.float64)
    tails = [[w.numpy().astype(np.float64) for w in pair] for pair in layer.tail_weights]
    bias = None if layer.head_bias is None else layer.head_bias.numpy().astype(np.float64)
    return head, tails, bias


def data(n=16, seed=0, labels=None, in_features=IN, n_classes=N_CLASSES):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, in_features))
    y = rng.integers(0, n_classes, size=n) if labels is None else np.asarray(labels)
    return x, y.astype(np.int64)


@pytest.mark.parametrize("head_bias", [False, True])
def test_forward_log_prob_predict_match_reference(head_bias):
    layer = make_layer(head_bias)
    head, tails, bias = weights_np(layer)
    x, y = data()
    out, loss = layer(paddle.to_tensor(x), paddle.to_tensor(y))
    ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(x, y, head, tails, layer.cutoffs, bias)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-12)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-12)
    lp = layer.log_prob(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(lp, refs.adaptive_log_prob(x, head, tails, layer.cutoffs, bias), rtol=1e-12)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lp[np.arange(len(y)), y], out.numpy(), rtol=1e-12)
    pred = layer.predict(paddle.to_tensor(x))
    assert pred.dtype == paddle.int64
    np.testing.assert_array_equal(pred.numpy(), lp.argmax(axis=1))


def test_predict_mixes_shortlist_and_clusters():
    # a head that favours the cluster columns for some rows: predict must descend into those clusters
    layer = make_layer()
    head = layer.head_weight.numpy()
    head[:, CUTOFFS[0]:] *= 6.0
    layer.head_weight.set_value(head)
    x, _ = data(64, seed=5)
    pred = layer.predict(paddle.to_tensor(x)).numpy()
    lp = layer.log_prob(paddle.to_tensor(x)).numpy()
    np.testing.assert_array_equal(pred, lp.argmax(axis=1))
    assert (pred < CUTOFFS[0]).any() and (pred >= CUTOFFS[0]).any()


@pytest.mark.parametrize("labels", [[0, 1, 2, 3, 4, 0], [12, 13, 19, 15, 12], [29, 25, 20], [0, 4, 25, 29]],
                         ids=["head-only", "one-tail-cluster", "last-cluster", "empty-middle-clusters"])
def test_clusters_without_labels(labels):
    layer = make_layer(head_bias=True)
    head, tails, bias = weights_np(layer)
    x, y = data(len(labels), labels=labels)
    out, loss = layer(paddle.to_tensor(x), paddle.to_tensor(y))
    ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(x, y, head, tails, layer.cutoffs, bias)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-12)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-12)


def _functional(x, y, hw, hb, w1a, w2a, w1b, w2b, w1c, w2c, **kw):
    return adaptive_log_softmax_with_loss(x, y, hw, [[w1a, w2a], [w1b, w2b], [w1c, w2c]], [5, 12, 20, 30], hb, **kw)


def _functional_inputs(layer, labels=None, n=6):
    head, tails, bias = weights_np(layer)
    x, y = data(n, seed=2, labels=labels)
    inputs = {"x": x, "y": y, "hw": head, "hb": bias if bias is not None else np.zeros(head.shape[1])}
    for name, pair in zip("abc", tails):
        inputs[f"w1{name}"], inputs[f"w2{name}"] = pair
    return inputs


def test_second_order_grads_of_the_loss():
    layer = make_layer(head_bias=True)
    inputs = _functional_inputs(layer, n=4)
    check_double_grad(_functional, inputs, ["x", "hw", "hb", "w2c"])


def test_second_order_grads_through_the_layer_and_log_prob():
    layer = make_layer(head_bias=True)
    x, y = data(4, seed=5, labels=[1, 7, 14, 25])
    check_double_grad(lambda x: layer(x, paddle.to_tensor(y))[1], {"x": x}, "x")
    check_double_grad(lambda x: layer.log_prob(x), {"x": x}, "x")


@pytest.mark.parametrize("labels", [None, [13, 14, 19, 12, 18, 15]], ids=["mixed", "one-tail-cluster"])
def test_grads_of_input_and_every_weight(labels):
    layer = make_layer(in_features=8, div=2.0)
    inputs = _functional_inputs(layer, labels)
    wrt = [k for k in inputs if k != "y"]
    check_grad(_functional, inputs, wrt)


def test_layer_grads_match_reference_composition():
    """The layer's backward, every parameter, vs paddle autograd through the NumPy-equivalent composition."""
    layer = make_layer(head_bias=True)
    x, y = data(24, seed=4)
    xt = paddle.to_tensor(x, stop_gradient=False)
    _, loss = layer(xt, paddle.to_tensor(y))
    loss.backward()
    got = [xt.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]
    # the same model written with paddle's log_softmax on tiny rows (fine there) as the oracle
    params = [paddle.to_tensor(p.numpy(), stop_gradient=False) for p in layer.parameters()]
    hw, hb, tails = params[0], params[1], [params[2:4], params[4:6], params[6:8]]
    xt2 = paddle.to_tensor(x, stop_gradient=False)
    head_lp = paddle.nn.functional.log_softmax(xt2 @ hw + hb, axis=1)
    pieces = [head_lp[:, :5]]
    for i, (w1, w2) in enumerate(tails):
        pieces.append(paddle.nn.functional.log_softmax(xt2 @ w1 @ w2, axis=1) + head_lp[:, 5 + i:6 + i])
    lp = paddle.concat(pieces, axis=1)
    (-paddle.take_along_axis(lp, paddle.to_tensor(y)[:, None], 1)).mean().backward()
    want = [xt2.grad.numpy()] + [p.grad.numpy() for p in params]
    assert len(got) == len(want) == 9
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)


def test_log_prob_grad():
    layer = make_layer()
    x, _ = data(5)
    xt = paddle.to_tensor(x, stop_gradient=False)
    g = np.random.default_rng(1).normal(size=(5, N_CLASSES))
    (layer.log_prob(xt) * paddle.to_tensor(g)).sum().backward()
    head, tails, _ = weights_np(layer)
    eps, num = 1e-6, np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            xp, xm = x.copy(), x.copy()
            xp[i, j] += eps
            xm[i, j] -= eps
            num[i, j] = ((refs.adaptive_log_prob(xp, head, tails, layer.cutoffs) -
                          refs.adaptive_log_prob(xm, head, tails, layer.cutoffs)) * g).sum() / (2 * eps)
    np.testing.assert_allclose(xt.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_unbatched_input():
    layer = make_layer()
    x, y = data(3)
    out, loss = layer(paddle.to_tensor(x[1]), paddle.to_tensor(y[1]))
    assert out.shape == [] and loss.shape == []
    full_out, _ = layer(paddle.to_tensor(x), paddle.to_tensor(y))
    np.testing.assert_allclose(float(out), full_out.numpy()[1], rtol=1e-12)
    np.testing.assert_allclose(float(loss), -full_out.numpy()[1], rtol=1e-12)
    lp = layer.log_prob(paddle.to_tensor(x[1]))
    assert lp.shape == [N_CLASSES]
    pred = layer.predict(paddle.to_tensor(x[1]))
    assert pred.shape == [] and int(pred) == int(lp.numpy().argmax())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_dtypes(dtype):
    layer = make_layer(head_bias=True, dtype="float32")
    head, tails, bias = weights_np(layer)
    x, y = data(12)
    xt = paddle.to_tensor(x.astype(np.float32)).astype(dtype)
    out, loss = layer(xt, paddle.to_tensor(y))
    assert out.dtype == xt.dtype and loss.dtype == xt.dtype
    x_seen = xt.astype("float64").numpy()
    ref_out, _ = refs.adaptive_log_softmax_with_loss(x_seen, y, head, tails, layer.cutoffs, bias)
    tol = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2}[dtype]
    np.testing.assert_allclose(out.astype("float64").numpy(), ref_out, rtol=tol, atol=tol)
    lp = layer.log_prob(xt)
    assert lp.dtype == xt.dtype and lp.shape == [12, N_CLASSES]
    assert layer.predict(xt).dtype == paddle.int64


def test_parameters_layout_and_state_dict():
    layer = make_layer(head_bias=True, in_features=16, div=4.0)
    shapes = {k: list(v.shape) for k, v in layer.state_dict().items()}
    # in_features // 4**3 = 0: a zero-width projection, as Paddle and PyTorch allow (uniform cluster)
    assert shapes == {"head_weight": [16, 8], "head_bias": [8],
                      "tail_weights.0.0": [16, 4], "tail_weights.0.1": [4, 7],
                      "tail_weights.1.0": [16, 1], "tail_weights.1.1": [1, 8],
                      "tail_weights.2.0": [16, 0], "tail_weights.2.1": [0, 10]}
    assert [n for n, _ in layer.named_parameters()] == list(shapes)
    x, y = data(6, in_features=16, labels=[0, 7, 13, 21, 29, 25])
    head, tails, bias = weights_np(layer)
    out, _ = layer(paddle.to_tensor(x), paddle.to_tensor(y))
    ref_out, _ = refs.adaptive_log_softmax_with_loss(x, y, head, tails, layer.cutoffs, bias)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-12)
    no_bias = make_layer()
    assert no_bias.head_bias is None and len(no_bias.parameters()) == 7


def test_paddle_layer_weights_load_both_ways():
    x, y = data(10)
    for head_bias in (False, True):
        ours = make_layer(head_bias, dtype="float32")
        theirs = paddle.nn.AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, head_bias=head_bias)
        # Paddle 3.3.1 -> ours: its state_dict holds the head; its tail weights are a plain list
        ours.set_state_dict(theirs.state_dict())
        for i, pair in enumerate(theirs.tail_weights):
            for j, w in enumerate(pair):
                ours.tail_weights[i][j].set_value(w)
        xt, yt = paddle.to_tensor(x.astype(np.float32)), paddle.to_tensor(y)
        np.testing.assert_allclose(ours(xt, yt)[0].numpy(), theirs(xt, yt)[0].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.log_prob(xt).numpy(), theirs.log_prob(xt).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ours.predict(xt).numpy(), theirs.predict(xt).numpy().astype(np.int64))
        # ours -> Paddle 3.3.1
        fresh = make_layer(head_bias, dtype="float32")
        theirs.set_state_dict(fresh.state_dict())
        for i, pair in enumerate(theirs.tail_weights):
            for j, w in enumerate(pair):
                w.set_value(fresh.tail_weights[i][j])
        np.testing.assert_allclose(fresh(xt, yt)[0].numpy(), theirs(xt, yt)[0].numpy(), rtol=1e-5, atol=1e-6)


def test_matches_pytorch_layer():
    torch = pytest.importorskip("torch")
    layer = make_layer(head_bias=True)
    head, tails, bias = weights_np(layer)
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, head_bias=True).double()
    with torch.no_grad():  # torch.nn.Linear stores [out, in]: transposes of Paddle's layout
        ref.head.weight.copy_(torch.from_numpy(head.T))
        ref.head.bias.copy_(torch.from_numpy(bias))
        for i, (w1, w2) in enumerate(tails):
            ref.tail[i][0].weight.copy_(torch.from_numpy(w1.T))
            ref.tail[i][1].weight.copy_(torch.from_numpy(w2.T))
    x, y = data(40, seed=9)
    xt = paddle.to_tensor(x, stop_gradient=False)
    out, loss = layer(xt, paddle.to_tensor(y))
    loss.backward()
    xr = torch.from_numpy(x).requires_grad_()
    res = ref(xr, torch.from_numpy(y))
    res.loss.backward()
    np.testing.assert_allclose(out.numpy(), res.output.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(float(loss), float(res.loss), rtol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(layer.head_weight.grad.numpy(), ref.head.weight.grad.numpy().T, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(layer.log_prob(xt).numpy(), ref.log_prob(xr).detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(layer.predict(xt).numpy(), ref.predict(xr).numpy())


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy-ir"])
def test_static_mode_layer(legacy):
    x, y = data(9, seed=6)
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            layer = AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, head_bias=True)
            xs = paddle.static.data("x", [-1, IN], "float32")
            xs.stop_gradient = False
            ys = paddle.static.data("y", [-1], "int64")
            out, loss = layer(xs, ys)
            lp, pred = layer.log_prob(xs), layer.predict(xs)
            grads = paddle.static.gradients([loss], [xs, layer.head_weight, layer.tail_weights[2][1]])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        scope = paddle.static.global_scope()
        value = lambda p: np.array(scope.find_var(p.name).get_tensor()).astype(np.float64)  # noqa: E731
        head, bias = value(layer.head_weight), value(layer.head_bias)
        tails = [[value(w) for w in pair] for pair in layer.tail_weights]
        for labels in (y, np.array([13, 14, 19, 12, 18, 15, 12, 13, 14])):  # mixed; one tail cluster only
            res = exe.run(main, feed={"x": x.astype(np.float32), "y": labels}, fetch_list=[out, loss, lp, pred] + grads)
            ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(x.astype(np.float32), labels, head, tails,
                                                                    layer.cutoffs, bias)
            np.testing.assert_allclose(res[0], ref_out, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(res[1], ref_loss, rtol=1e-5)
            np.testing.assert_array_equal(res[3], res[2].argmax(1))
            assert all(np.isfinite(g).all() for g in res[4:])


def test_static_grads_functional_without_head_bias():
    # head_bias=None is Paddle's linear's business, never an optional input of our ops
    # (docs/architecture.md, "Paddle's custom-op API")
    layer = make_layer(in_features=8)
    inputs = _functional_inputs(layer)
    del inputs["hb"]

    def fn(x, y, hw, w1a, w2a, w1b, w2b, w1c, w2c):
        return adaptive_log_softmax_with_loss(x, y, hw, [[w1a, w2a], [w1b, w2b], [w1c, w2c]], [5, 12, 20, 30])

    check_grad(fn, inputs, ["x", "hw", "w2c"], modes=MODES)
    head, tails, _ = weights_np(layer)
    check_output(fn, inputs, lambda x, y, hw, *w: refs.adaptive_log_softmax_with_loss(
        x, y, hw, [list(w[0:2]), list(w[2:4]), list(w[4:6])], [5, 12, 20, 30]), modes=MODES)


class _Model(paddle.nn.Layer):
    def __init__(self, head_bias):
        super().__init__()
        self.asm = make_layer(head_bias, dtype="float32")

    def forward(self, x, y):
        out, loss = self.asm(x, y)
        return out, loss, self.asm.log_prob(x), self.asm.predict(x)


@pytest.mark.parametrize("head_bias", [False, True])
@pytest.mark.parametrize("labels", [None, [0, 1, 4, 3, 2, 0, 1]], ids=["mixed", "empty-clusters"])
def test_export_round_trip(head_bias, labels):
    x, y = data(7, seed=8, labels=labels)
    check_export(_Model(head_bias), {"x": x.astype(np.float32), "y": y}, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------
# ignore_index and reduction: the loss is nll_loss(log_prob(x), label, ignore_index, reduction)

REDUCTIONS = ["mean", "sum", "none"]
# -100 (the default), a shortlist class, a tail class, and a negative index other than the default
IGNORE = {"default": (-100, [3, -100, 14, -100, 25, 0, -100, 29, 7, -100]),
          "shortlist-class": (2, [3, 2, 14, 2, 25, 0, 2, 29, 7, 2]),
          "tail-class": (25, [3, 25, 14, 25, 25, 0, 13, 29, 7, 21]),
          "minus-one": (-1, [3, -1, 14, -1, -1, 0, 18, 29, 7, 21])}


def _nll_of_log_prob(layer, x, y, ignore_index, reduction):
    """nll_loss(layer.log_prob(x), y, ignore_index, reduction). Paddle 3.3.1's CPU nll_loss corrupts the heap
    for 'mean' and 'sum' when a label is ignored (glibc aborts), so those two are reduced here from its
    'none', as nll_loss defines them: the sum, divided by the rows that count (at least 1) for 'mean'."""
    rows = paddle.nn.functional.nll_loss(layer.log_prob(x), y, ignore_index=ignore_index, reduction="none")
    if reduction == "none":
        return rows
    total = sum_along(rows, 0)  # (Paddle 3.3.1's sum takes no legacy-IR Variable)
    return total if reduction == "sum" else total / paddle.clip(sum_along((y != ignore_index).astype(rows.dtype), 0),
                                                                min=1.0)


def _grads_of(layer, loss_fn, x, g):
    """Grads of sum(g * loss_fn(x_tensor)) w.r.t. x and every parameter (zeros where none is produced)."""
    xt = paddle.to_tensor(x, stop_gradient=False)
    loss = loss_fn(xt)
    (loss * paddle.to_tensor(g)).sum().backward()
    grads = [xt.grad] + [p.grad for p in layer.parameters()]
    shapes = [x.shape] + [p.shape for p in layer.parameters()]
    layer.clear_gradients(set_to_zero=False)
    return loss.numpy(), [np.zeros(s) if gr is None else gr.numpy() for gr, s in zip(grads, shapes)]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", list(IGNORE))
def test_loss_and_grads_equal_nll_loss_of_log_prob(case, reduction):
    ignore_index, labels = IGNORE[case]
    layer = make_layer(head_bias=True)
    layer.ignore_index, layer.reduction = ignore_index, reduction
    x, y = data(len(labels), seed=11, labels=labels)
    yt = paddle.to_tensor(y)
    g = np.random.default_rng(2).uniform(0.5, 1.5, size=len(y) if reduction == "none" else ())
    got_loss, got = _grads_of(layer, lambda xt: layer(xt, yt)[1], x, g)
    want_loss, want = _grads_of(layer, lambda xt: _nll_of_log_prob(layer, xt, yt, ignore_index, reduction), x, g)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-12, atol=1e-15)
    assert len(got) == len(want) == 9  # x, head weight and bias, 3 x [W1, W2]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    out = layer(paddle.to_tensor(x), yt)[0].numpy()
    head, tails, bias = weights_np(layer)
    ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(x, y, head, tails, layer.cutoffs, bias, ignore_index,
                                                            reduction)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12)
    assert (out[y == ignore_index] == 0).all() and (out[y != ignore_index] < 0).all()
    np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_without_ignored_rows_the_loss_is_nll_loss_itself(reduction):
    layer = make_layer(head_bias=True)
    layer.reduction = reduction
    x, y = data(12, seed=5)
    yt = paddle.to_tensor(y)
    g = np.random.default_rng(2).uniform(0.5, 1.5, size=len(y) if reduction == "none" else ())
    got_loss, got = _grads_of(layer, lambda xt: layer(xt, yt)[1], x, g)
    want_loss, want = _grads_of(layer, lambda xt: paddle.nn.functional.nll_loss(layer.log_prob(xt), yt,
                                                                                reduction=reduction), x, g)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-12)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_all_rows_ignored(reduction):
    layer = make_layer(head_bias=True, dtype="float64")
    layer.reduction = reduction
    x, y = data(5, labels=[-100] * 5)
    yt = paddle.to_tensor(y)
    g = np.ones(5) if reduction == "none" else np.ones(())
    got_loss, got = _grads_of(layer, lambda xt: layer(xt, yt)[1], x, g)
    want_loss, want = _grads_of(layer, lambda xt: _nll_of_log_prob(layer, xt, yt, -100, reduction), x, g)
    np.testing.assert_array_equal(got_loss, want_loss)
    np.testing.assert_array_equal(got_loss, np.zeros_like(got_loss))  # nll_loss's 'mean' of nothing is 0
    for a, b in zip(got, want):
        # (Paddle's composition hands some weights a grad of shape [..., 0] where nothing flows)
        np.testing.assert_array_equal(a, np.zeros(a.shape) if b.size == 0 else b)
        assert not a.any()
    np.testing.assert_array_equal(layer(paddle.to_tensor(x), yt)[0].numpy(), np.zeros(5))


def test_ignored_rows_cost_nothing_in_the_tails():
    # every tail label is the ignored class 25 (or the shortlist): the tails compute nothing, so their
    # weights get no grad at all in a single process
    layer = make_layer()
    layer.ignore_index = 25
    x, y = data(6, labels=[0, 25, 4, 25, 25, 1])
    xt = paddle.to_tensor(x, stop_gradient=False)
    layer(xt, paddle.to_tensor(y))[1].backward()
    assert layer.head_weight.grad is not None
    assert all(w.grad is None for pair in layer.tail_weights for w in pair)


@pytest.mark.parametrize("mode", ["dygraph", "to_static"])
def test_ignored_rows_never_reach_the_head(mode):
    # only the rows that count are gathered for the head: NaN padding leaves every output and grad finite
    layer = make_layer(head_bias=True)
    x, y = data(6, labels=[0, -100, 7, 14, -100, 25])  # a label in every cluster: every weight gets a grad
    x[y == -100] = np.nan
    xt = paddle.to_tensor(x, stop_gradient=False)
    run = paddle.jit.to_static(layer, full_graph=True) if mode == "to_static" else layer
    out, loss = run(xt, paddle.to_tensor(y))
    loss.backward()
    assert np.isfinite(out.numpy()).all() and np.isfinite(float(loss))
    assert all(np.isfinite(p.grad.numpy()).all() for p in layer.parameters())
    assert np.isfinite(xt.grad.numpy()).all() and not xt.grad.numpy()[y == -100].any()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_unbatched_ignored_label(reduction):
    layer = make_layer()
    layer.reduction = reduction
    x, _ = data(1)
    out, loss = layer(paddle.to_tensor(x[0]), paddle.to_tensor(-100))
    assert out.shape == [] and loss.shape == [] and float(out) == 0 and float(loss) == 0
    out, loss = layer(paddle.to_tensor(x[0]), paddle.to_tensor(17))
    np.testing.assert_allclose(float(loss), -float(out), rtol=1e-15)
    assert float(out) < 0


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_functional_keywords_values_and_grads_dygraph_and_static(reduction):
    layer = make_layer(head_bias=True)
    inputs = _functional_inputs(layer, labels=[1, -1, 13, 25, -1, 29])
    attrs = {"ignore_index": -1, "reduction": reduction}
    check_grad(_functional, inputs, [k for k in inputs if k != "y"], attrs=attrs)
    check_output(_functional, inputs, lambda x, y, hw, hb, *w, **kw: refs.adaptive_log_softmax_with_loss(
        x, y, hw, [list(w[0:2]), list(w[2:4]), list(w[4:6])], [5, 12, 20, 30], hb, **kw), attrs=attrs)


def test_second_order_grads_with_ignored_rows():
    layer = make_layer(head_bias=True)
    inputs = _functional_inputs(layer, labels=[1, -100, 25, -100], n=4)
    check_double_grad(_functional, inputs, ["x", "hw", "w2c"], attrs={"reduction": "none"})


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy-ir"])
def test_static_program_ignored_rows_and_out_of_range_labels(legacy):
    x, _ = data(6, seed=6)
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            layer = AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, ignore_index=-1,
                                               reduction="sum")
            xs = paddle.static.data("x", [-1, IN], "float32")
            xs.stop_gradient = False
            ys = paddle.static.data("y", [-1], "int64")
            out, loss = layer(xs, ys)
            want = _nll_of_log_prob(layer, xs, ys, -1, "sum")
            wrt = [xs, layer.head_weight, layer.tail_weights[0][0], layer.tail_weights[2][1]]
            grads = paddle.static.gradients([loss], wrt) + paddle.static.gradients([want], wrt)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed = {"x": x.astype(np.float32)}
        for labels in ([3, -1, 14, -1, 25, 0], [-1] * 6, [3, 1, 14, 7, 25, 0]):  # some, all and no rows ignored
            res = exe.run(main, feed={**feed, "y": np.array(labels)}, fetch_list=[out, loss, want] + grads)
            np.testing.assert_allclose(res[1], res[2], rtol=1e-6, atol=1e-7)
            assert (res[0][np.array(labels) == -1] == 0).all()
            for got, expected in zip(res[3:7], res[7:]):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        checked, startup = paddle.static.Program(), paddle.static.Program()  # no nll_loss checking labels first
        with paddle.static.program_guard(checked, startup):
            layer = AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, ignore_index=-1)
            loss = layer(paddle.static.data("x", [-1, IN], "float32"), paddle.static.data("y", [-1], "int64"))[1]
        exe.run(startup)
        for labels, bad in (([3, -100, 14, -1, 25, 0], r"label\[1\] = -100"),
                            ([3, -1, 30, -1, 25, 0], r"label\[2\] = 30")):
            with pytest.raises(IndexError, match=bad + r" is out of range \[0, 30\)"):
                exe.run(checked, feed={**feed, "y": np.array(labels)}, fetch_list=[loss])


def test_out_of_range_labels_still_raise_in_dygraph_and_to_static():
    layer = make_layer(dtype="float32")
    layer.ignore_index = 7
    x = paddle.ones([4, IN])
    with pytest.raises(IndexError, match=r"label\[1\] = -100 is out of range \[0, 30\)"):
        layer(x, paddle.to_tensor([0, -100, 7, 3]))
    with pytest.raises(IndexError, match=r"label\[3\] = 30 is out of range"):
        adaptive_log_softmax_with_loss(x, paddle.to_tensor([7, 7, 7, 30]), layer.head_weight,
                                       [list(p) for p in layer.tail_weights], layer.cutoffs, ignore_index=7)
    static_layer = paddle.jit.to_static(layer, full_graph=True)
    np.testing.assert_allclose(float(static_layer(x, paddle.to_tensor([0, 7, 7, 3]))[1]),
                               float(layer(x, paddle.to_tensor([0, 7, 7, 3]))[1]), rtol=1e-6)
    with pytest.raises(IndexError, match=r"label\[2\] = -1 is out of range \[0, 30\)"):
        static_layer(x, paddle.to_tensor([0, 7, -1, 3]))


class _IgnoringModel(paddle.nn.Layer):
    def __init__(self, reduction):
        super().__init__()
        self.asm = make_layer(True, dtype="float32")
        self.asm.ignore_index, self.asm.reduction = 0, reduction

    def forward(self, x, y):
        out, loss = self.asm(x, y)
        return out, loss, _nll_of_log_prob(self.asm, x, y, 0, self.asm.reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("labels", [[0, 17, 0, 29, 3, 0, 12], [0] * 7], ids=["some-ignored", "all-ignored"])
def test_export_round_trip_with_ignored_rows(reduction, labels):
    x, y = data(7, seed=8, labels=labels)
    out, loss, want = check_export(_IgnoringModel(reduction), {"x": x.astype(np.float32), "y": y}, rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)


def test_auto_cast_with_ignored_rows():
    # the layer's input is a matmul's bfloat16 output, as a model's activations are under AMP
    op_test.skip_unless_bfloat16_static_matmul_works()
    x, _ = data(8, seed=3)
    labels = np.array([3, -100, 14, -100, 25, 0, -100, 29])
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            layer = AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, div_value=DIV, reduction="sum")
            xs = paddle.static.data("x", [8, IN], "float32")
            ys = paddle.static.data("y", [8], "int64")
            with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
                h = paddle.matmul(xs, paddle.static.create_parameter([IN, IN], "float32"))
                out, loss = layer(h, ys)
            grads = paddle.static.gradients([loss], [layer.head_weight, layer.tail_weights[2][1]])
            h32 = h.astype("float32")  # the same layer in float32 on the same input: the reference
            want_out = paddle.where(ys == -100, paddle.zeros([8]), -paddle.nn.functional.nll_loss(
                layer.log_prob(h32), ys, ignore_index=-100, reduction="none"))
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        res = exe.run(main, feed={"x": x.astype(np.float32), "y": labels}, fetch_list=[out, loss, want_out] + grads)
    finally:
        paddle.disable_static()
    assert res[0].dtype == res[1].dtype == np.float32  # the log-probabilities and the loss stay float32
    assert (res[0][labels == -100] == 0).all()
    np.testing.assert_allclose(res[0], res[2], rtol=3e-2, atol=3e-2)  # bfloat16 matmuls in the layer
    np.testing.assert_allclose(res[1], -res[2].sum(), rtol=3e-2)
    assert all(np.isfinite(g).all() and g.any() for g in res[3:])


# ---------------------------------------------------------------------------------------------------
# Errors


# Paddle's words for any bad cutoffs list (its own tests match their start); ours add the value and the fault.
CUTOFFS_RULE = (r"AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive integers sorted in an "
                r"increasing order, where each value is between 1 and n_classes-1 = 29; got cutoffs=")


@pytest.mark.parametrize("cutoffs, detail", [
    ([5, 5], r"\[5, 5\] \(not unique and increasing\)"),
    ([12, 5], r"\[12, 5\] \(not unique and increasing\)"),
    ([2.5, 10], r"\[2.5, 10\] \(2.5 is not an int\)"),
    ([0, 10], r"\[0, 10\] \(not positive\)"),
    ([5, 30], r"\[5, 30\] \(30 > 29\)"),
    ([], r"\[\] \(empty\)"),
    (5, r"5 \(not a sequence\)"),
])
def test_constructor_cutoffs_errors(cutoffs, detail):
    with pytest.raises(ValueError, match=CUTOFFS_RULE + detail):
        AdaptiveLogSoftmaxWithLoss(8, 30, cutoffs)


def test_constructor_errors():
    with pytest.raises(TypeError, match="in_features must be an int"):
        AdaptiveLogSoftmaxWithLoss(8.0, 30, [5])


def test_forward_errors():
    layer = make_layer(dtype="float32")
    x = paddle.ones([4, IN])
    with pytest.raises(ValueError, match=r"input has 7 features \(shape \[4, 7\]\), expected in_features=8"):
        layer(paddle.ones([4, 7]), paddle.to_tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="input has batch size 4 but label has 3"):
        layer(x, paddle.to_tensor([0, 1, 2]))
    with pytest.raises(IndexError, match=r"label\[2\] = 30 is out of range \[0, 30\)"):
        layer(x, paddle.to_tensor([0, 1, 30, 3]))
    with pytest.raises(ValueError, match=r"label\[1\] = -1 is out of range \[0, 30\)"):  # also a ValueError, as Paddle
        layer(x, paddle.to_tensor([0, -1, 2, 3]))
    with pytest.raises(ValueError, match=r"input must be 1-D \[in_features\] or 2-D \[N, in_features\], got shape"):
        layer(paddle.ones([2, 2, IN]), paddle.to_tensor([0, 1]))
    with pytest.raises(ValueError, match="a 2-D input needs a 1-D label"):
        layer(x, paddle.to_tensor([[0, 1, 2, 3]]))
    with pytest.raises(ValueError, match="a 1-D \\(unbatched\\) input needs a 0-D label"):
        layer(paddle.ones([IN]), paddle.to_tensor([1]))
    with pytest.raises(TypeError, match="label must be an integer tensor"):
        layer(x, paddle.ones([4]))
    with pytest.raises(ValueError, match=r"input has 5 features"):
        layer.log_prob(paddle.ones([2, 5]))


def test_functional_errors():
    layer = make_layer(dtype="float32")
    x, y = paddle.ones([4, IN]), paddle.to_tensor([0, 1, 2, 3])
    hw, tw = layer.head_weight, [list(p) for p in layer.tail_weights]
    with pytest.raises(ValueError, match=r"cutoffs must end in n_classes = 30 \(tail_weights\[2\]\[1\] has 10 "
                                         r"columns for classes from 20\), got \[5, 12, 20, 29\]"):
        adaptive_log_softmax_with_loss(x, y, hw, tw, [5, 12, 20, 29])
    with pytest.raises(ValueError, match=r"tail_weights\[1\]\[1\] has shape \[2, 8\], expected \[2, 9\]"):
        adaptive_log_softmax_with_loss(x, y, hw, tw, [5, 12, 21, 30])
    with pytest.raises(ValueError, match=r"head_weight has shape \[8, 8\], expected \[8, 7\]"):
        adaptive_log_softmax_with_loss(x, y, hw, tw[:2], [5, 12, 30])
    with pytest.raises(ValueError, match=r"cutoffs should be a sequence of unique, positive integers sorted in an "
                                         r"increasing order, ending in n_classes; got cutoffs=\[5, 20, 12, 30\] "
                                         r"\(not unique and increasing\)"):
        adaptive_log_softmax_with_loss(x, y, hw, tw, [5, 20, 12, 30])
    with pytest.raises(ValueError, match=r"tail_weights has 2 clusters"):
        adaptive_log_softmax_with_loss(x, y, paddle.ones([IN, 8]), tw[:2], [5, 12, 20, 30])
    with pytest.raises(IndexError, match=r"label\[3\] = 31 is out of range \[0, 30\)"):
        adaptive_log_softmax_with_loss(x, paddle.to_tensor([0, 1, 2, 31]), hw, tw, [5, 12, 20, 30])
    with pytest.raises(ValueError, match=r"input has 3 features"):
        adaptive_log_softmax_with_loss(paddle.ones([4, 3]), y, hw, tw, [5, 12, 20, 30])


@pytest.mark.parametrize("ignore_index", [-100, 12], ids=["no-ignored-rows", "some-ignored-rows"])
def test_export_with_dynamic_batch(ignore_index):
    model = _Model(head_bias=True)
    model.asm.ignore_index = ignore_index
    batches = []
    for n, labels in ((3, None), (11, None), (5, [12, 13, 19, 12, 18])):
        x, y = data(n, seed=n, labels=labels)
        batches.append({"x": x.astype(np.float32), "y": y})
    check_export(model, batches, rtol=1e-5, atol=1e-6)


def test_ignore_index_and_reduction_errors():
    layer = make_layer(dtype="float32")
    x, y = paddle.ones([4, IN]), paddle.to_tensor([0, 1, 2, 3])
    tw = [list(p) for p in layer.tail_weights]
    with pytest.raises(ValueError, match=r"AdaptiveLogSoftmaxWithLoss: reduction must be 'mean', 'sum' or 'none', "
                                         r"got 'avg'"):
        AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, reduction="avg")
    with pytest.raises(TypeError, match=r"AdaptiveLogSoftmaxWithLoss: ignore_index must be an int, got 1.5"):
        AdaptiveLogSoftmaxWithLoss(IN, N_CLASSES, CUTOFFS, ignore_index=1.5)
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', got None"):
        adaptive_log_softmax_with_loss(x, y, layer.head_weight, tw, layer.cutoffs, reduction=None)
    with pytest.raises(TypeError, match=r"ignore_index must be an int, got True"):
        adaptive_log_softmax_with_loss(x, y, layer.head_weight, tw, layer.cutoffs, ignore_index=True)
    with pytest.raises(TypeError):  # keyword-only: Paddle's positional parameters end at name
        adaptive_log_softmax_with_loss(x, y, layer.head_weight, tw, layer.cutoffs, None, None, -1)
