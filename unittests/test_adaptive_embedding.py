"""nn.AdaptiveEmbedding (adaptive input) against a NumPy float64 reference: shapes, the per-cluster
projections, tying to an AdaptiveLogSoftmaxWithLoss (the same Parameter objects, kept shared by training),
grads, static graphs and export."""

import numpy as np
import paddle
import pytest

import refs
from op_test import check_export, static_mode
from paddle_ext.nn import AdaptiveEmbedding, AdaptiveLogSoftmaxWithLoss

N_CLASSES, DIM, CUTOFFS, DIV = 30, 16, [5, 12, 20], 2.0


def make(dtype="float64", tied=False, **kw):
    paddle.set_default_dtype(dtype)
    try:
        softmax = AdaptiveLogSoftmaxWithLoss(DIM, N_CLASSES, CUTOFFS, div_value=DIV) if tied else None
        emb = AdaptiveEmbedding(N_CLASSES, DIM, CUTOFFS, div_value=DIV, tied_to=softmax, **kw)
    finally:
        paddle.set_default_dtype("float32")
    return emb, softmax


def weights_np(layer):
    return (layer.head_weight.numpy().astype(np.float64),
            [[w.numpy().astype(np.float64) for w in pair] for pair in layer.tail_weights])


IDS = {"1-D": np.array([0, 4, 5, 11, 12, 19, 20, 29, 3, 3]),
       "2-D": np.array([[0, 29, 7], [13, 2, 21]]),
       "0-D": np.array(17),
       "shortlist-only": np.array([[1, 2], [0, 4]]),
       "empty-middle-clusters": np.array([1, 25, 29, 0])}


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("case", list(IDS))
def test_values_and_shapes_match_reference(case, tied):
    emb, _ = make(tied=tied)
    ids = IDS[case]
    out = emb(paddle.to_tensor(ids))
    assert out.shape == [*ids.shape, DIM] and out.dtype == paddle.float64
    head, tails = weights_np(emb)
    np.testing.assert_allclose(out.numpy(), refs.adaptive_embedding(ids, head, tails, emb.cutoffs), rtol=1e-12,
                               atol=1e-15)


def test_parameter_shapes():
    emb, _ = make()
    shapes = {k: list(v.shape) for k, v in emb.state_dict().items()}
    # cluster i embeds in DIM // DIV**i features; the shortlist's DIM need no projection
    assert shapes == {"head_weight": [16, 5], "tail_weights.0.0": [16, 8], "tail_weights.0.1": [8, 7],
                      "tail_weights.1.0": [16, 4], "tail_weights.1.1": [4, 8],
                      "tail_weights.2.0": [16, 2], "tail_weights.2.1": [2, 10]}


def test_tied_embedding_is_the_softmax_output_embedding():
    emb, softmax = make(tied=True)
    params = {id(p) for p in softmax.parameters()}
    assert emb.head_weight is softmax.head_weight
    assert all(a is b for pa, pb in zip(emb.tail_weights, softmax.tail_weights) for a, b in zip(pa, pb))
    assert all(id(p) in params for p in emb.parameters())

    class LM(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.softmax, self.emb = softmax, emb

    assert len(LM().parameters()) == len(softmax.parameters()) == 7  # each shared Parameter once
    # log p(y | x) - log p(y' | x) within the shortlist, or within one cluster, is x . (e_y - e_y')
    x = np.random.default_rng(0).normal(size=(1, DIM))
    lp = softmax.log_prob(paddle.to_tensor(x)).numpy()[0]
    e = emb(paddle.arange(N_CLASSES)).numpy()
    for a, b in ((0, 4), (5, 11), (12, 19), (20, 29)):
        np.testing.assert_allclose(lp[a] - lp[b], x[0] @ (e[a] - e[b]), rtol=1e-10)


def test_training_step_keeps_the_weights_shared():
    emb, softmax = make(dtype="float32", tied=True)

    class LM(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb, self.softmax = emb, softmax

        def forward(self, ids, targets):
            return self.softmax(paddle.tanh(self.emb(ids)), targets)[1]

    model = LM()
    opt = paddle.optimizer.Adam(learning_rate=0.1, parameters=model.parameters())
    before = [p.numpy().copy() for p in softmax.parameters()]
    ids, targets = paddle.to_tensor([0, 7, 14, 25, 3]), paddle.to_tensor([7, 14, 25, 3, 0])
    model(ids, targets).backward()
    opt.step()
    assert emb.head_weight is softmax.head_weight and emb.tail_weights is softmax.tail_weights
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, softmax.parameters()))
    head, tails = weights_np(softmax)
    np.testing.assert_allclose(emb(ids).numpy(), refs.adaptive_embedding(ids.numpy(), head, tails, emb.cutoffs),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ids", [[0, 4, 5, 11, 12, 29, 20, 3, 3], [1, 26, 29, 0]], ids=["mixed", "empty-clusters"])
def test_grads_of_every_weight_match_central_differences(ids):
    emb, _ = make()
    ids = np.array(ids)
    g = np.random.default_rng(4).normal(size=(len(ids), DIM))
    (emb(paddle.to_tensor(ids)) * paddle.to_tensor(g)).sum().backward()
    head, tails = weights_np(emb)
    flat = [head] + [w for pair in tails for w in pair]
    for param, value in zip(emb.parameters(), flat):
        numeric, eps = np.zeros_like(value), 1e-6
        for k in range(value.size):
            old = value.flat[k]
            value.flat[k] = old + eps
            plus = (refs.adaptive_embedding(ids, head, tails, emb.cutoffs) * g).sum()
            value.flat[k] = old - eps
            minus = (refs.adaptive_embedding(ids, head, tails, emb.cutoffs) * g).sum()
            value.flat[k] = old
            numeric.flat[k] = (plus - minus) / (2 * eps)
        got = np.zeros_like(value) if param.grad is None else param.grad.numpy()
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8, err_msg=param.name)


def test_export_with_dynamic_batch_and_length():
    emb, _ = make(dtype="float32", tied=True)
    ids = np.array([[0, 29, 7, 13], [21, 2, 12, 4]])
    head, tails = weights_np(emb)
    want = refs.adaptive_embedding(ids, head, tails, emb.cutoffs)

    class Model(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, ids):
            return self.emb(ids)

    # one export with a dynamic batch and length: every batch through the same jit.load model and predictor
    batches = [{"ids": ids}, {"ids": np.array([[5, 25], [0, 19], [29, 12]])}, {"ids": np.array([[1, 2, 3]])}]
    got = check_export(Model(), batches, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy-ir"])
def test_static_program(legacy):
    ids = np.array([[0, 29, 7, 13], [21, 2, 12, 4]])
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            layer = AdaptiveEmbedding(N_CLASSES, DIM, CUTOFFS, div_value=DIV)
            ids_var = paddle.static.data("ids", [-1, -1], "int64")
            out = layer(ids_var)
            grads = paddle.static.gradients([out * out], [layer.head_weight, layer.tail_weights[2][1]])  # of its sum
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        scope = paddle.static.global_scope()
        value = lambda p: np.array(scope.find_var(p.name).get_tensor()).astype(np.float64)  # noqa: E731
        head, tails = value(layer.head_weight), [[value(w) for w in pair] for pair in layer.tail_weights]
        for batch in (ids, np.array([[1, 2, 3]])):  # the second: every tail cluster empty
            res = exe.run(main, feed={"ids": batch}, fetch_list=[out] + grads)
            np.testing.assert_allclose(res[0], refs.adaptive_embedding(batch, head, tails, layer.cutoffs), rtol=1e-5,
                                       atol=1e-6)
            assert all(np.isfinite(g).all() for g in res[1:])
        with pytest.raises(IndexError, match=r"AdaptiveEmbedding: ids.flatten\(\)\[2\] = 30 is out of range \[0, 30\)"):
            exe.run(main, feed={"ids": np.array([[1, 2, 30]])}, fetch_list=[out])


def test_errors():
    emb, _ = make(dtype="float32")
    with pytest.raises(IndexError, match=r"ids.flatten\(\)\[3\] = -1 is out of range \[0, 30\)"):
        emb(paddle.to_tensor([[0, 1], [2, -1]]))
    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        emb(paddle.ones([3]))
    with pytest.raises(ValueError, match=r"got cutoffs=\[12, 5\] \(not unique and increasing\)"):
        AdaptiveEmbedding(30, 16, [12, 5])
    softmax = AdaptiveLogSoftmaxWithLoss(DIM, N_CLASSES, CUTOFFS, div_value=DIV)
    with pytest.raises(ValueError, match=r"tied_to has in_features=16 but this layer has embedding_dim=8"):
        AdaptiveEmbedding(N_CLASSES, 8, CUTOFFS, div_value=DIV, tied_to=softmax)
    with pytest.raises(ValueError, match=r"tied_to has cutoffs=\[5, 12, 20\] but this layer has cutoffs=\[5, 12\]"):
        AdaptiveEmbedding(N_CLASSES, DIM, [5, 12], div_value=DIV, tied_to=softmax)
    with pytest.raises(ValueError, match=r"tied_to has div_value=2.0 but this layer has div_value=4.0"):
        AdaptiveEmbedding(N_CLASSES, DIM, CUTOFFS, tied_to=softmax)
    with pytest.raises(TypeError, match="tied_to must be a paddle_ext.nn.AdaptiveLogSoftmaxWithLoss, got Linear"):
        AdaptiveEmbedding(N_CLASSES, DIM, CUTOFFS, tied_to=paddle.nn.Linear(2, 2))
