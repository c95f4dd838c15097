"""paddle_ext.nn.TransducerJoiner: forward gives the joiner's logits; its losses are the fused ops on its own
projections and parameters (grads reach every sublayer); it trains under to_static and exports for decoding."""

import numpy as np
import paddle
import pytest

import paddle_ext
from op_test import check_export
from paddle_ext.nn import TransducerJoiner

E, D, J, C = 6, 5, 8, 7


def layer(activation="tanh", seed=0, num_outputs=C):
    paddle.seed(seed)
    return TransducerJoiner(E, D, J, num_outputs, activation=activation)


def batch(B=2, T=6, S=3, seed=1, vocab=C):
    rng = np.random.default_rng(seed)
    enc = paddle.to_tensor(rng.normal(size=(B, T, E)).astype("float32"))
    dec = paddle.to_tensor(rng.normal(size=(B, S + 1, D)).astype("float32"))
    symbols = paddle.to_tensor(rng.integers(1, vocab, size=(B, S)).astype("int64"))
    return enc, dec, symbols


@pytest.mark.parametrize("activation", ["tanh", "relu", "identity"])
def test_forward_is_the_composed_joiner(activation):
    net = layer(activation)
    enc, dec, _ = batch()
    logits = net(enc.unsqueeze(2), dec.unsqueeze(1))
    x = net.encoder_proj(enc).unsqueeze(2) + net.decoder_proj(dec).unsqueeze(1)
    x = {"tanh": paddle.tanh, "relu": paddle.nn.functional.relu, "identity": lambda v: v}[activation](x)
    np.testing.assert_allclose(logits.numpy(), net.output_linear(x).numpy(), rtol=1e-6)
    assert logits.shape == [2, 6, 4, C]


def _param_grads(net, loss):
    net.clear_gradients()
    loss.backward()
    return {n: p.grad.numpy().copy() for n, p in net.named_parameters()}


@pytest.mark.parametrize("method", ["rnnt_loss", "tdt_loss", "multiblank_rnnt_loss"])
@pytest.mark.parametrize("clamp", [-1.0, 0.02])
def test_losses_equal_the_unfused_losses_and_train_every_parameter(method, clamp):
    net = layer(num_outputs=C + 3 if method == "tdt_loss" else C)
    enc, dec, symbols = batch(vocab=4)
    extra = {"rnnt_loss": (), "tdt_loss": ([0, 1, 2],), "multiblank_rnnt_loss": ([2],)}[method]
    blank = 4 if method == "multiblank_rnnt_loss" else 0
    fused = getattr(net, method)(enc, dec, symbols, *extra, blank, reduction="sum", clamp=clamp)
    got = _param_grads(net, fused)
    logits = net(enc.unsqueeze(2), dec.unsqueeze(1))
    plain = {"rnnt_loss": paddle_ext.rnnt_loss, "tdt_loss": paddle_ext.tdt_loss,
             "multiblank_rnnt_loss": paddle_ext.multiblank_rnnt_loss}[method]
    args = (logits, symbols, *extra, blank) if extra else (logits, symbols, blank)
    ref = plain(*args, reduction="sum", clamp=clamp)
    want = _param_grads(net, ref)
    np.testing.assert_allclose(float(fused), float(ref), rtol=1e-5)
    assert set(got) == set(want) and len(got) == 6
    for name in got:
        assert np.abs(got[name]).max() > 0, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-5 * np.abs(want[name]).max(),
                                   err_msg=name)


def test_pruned_loss_through_ranges():
    net = layer()
    enc, dec, symbols = batch(T=8, S=5)
    ranges = paddle.to_tensor((np.minimum(np.arange(8) // 2, 3)[None, :, None] + np.arange(3)).repeat(2, 0))
    fused = net.rnnt_loss(enc, dec, symbols, 0, ranges=ranges, reduction="none")
    am, lm = paddle_ext.do_rnnt_pruning(net.encoder_proj(enc), net.decoder_proj(dec), ranges)
    logits = net.output_linear(paddle.tanh(am + lm))
    ref = paddle_ext.rnnt_loss_pruned(logits, symbols, ranges, 0, reduction="none")
    np.testing.assert_allclose(fused.numpy(), ref.numpy(), rtol=1e-5)


class _Step(paddle.nn.Layer):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, enc, dec, symbols):
        return self.net.rnnt_loss(enc, dec, symbols, 0, delay_penalty=0.1)


def test_trains_under_to_static_as_in_dygraph():
    enc, dec, symbols = batch()
    losses = {}
    for mode in ("dygraph", "to_static"):
        net = layer(seed=3)
        opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
        step = _Step(net)
        fn = paddle.jit.to_static(step, full_graph=True) if mode == "to_static" else step
        out = []
        for _ in range(3):
            loss = fn(enc, dec, symbols)
            loss.backward()
            opt.step()
            opt.clear_grad()
            out.append(float(loss))
        losses[mode] = out
    assert losses["dygraph"][2] < losses["dygraph"][0]
    np.testing.assert_allclose(losses["to_static"], losses["dygraph"], rtol=1e-5)


def test_export_for_decoding(tmp_path):
    net = layer()
    enc, dec, _ = batch()
    check_export(net, [{"encoder_out": enc.numpy()[:, :, None], "decoder_out": dec.numpy()[:, None]},
                       {"encoder_out": enc.numpy()[:1, :3, None], "decoder_out": dec.numpy()[:1, None, :2]}],
                 directory=str(tmp_path))


def test_bad_activation():
    with pytest.raises(ValueError, match="TransducerJoiner: activation must be one of"):
        TransducerJoiner(E, D, J, C, activation="gelu")
