"""FastEmit (fastemit_lambda) on the four RNN-T losses: the loss value is unchanged and the grad of every
symbol emission (k2's px) is scaled by 1 + fastemit_lambda, as Paddle's F.rnnt_loss does it."""

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ext
import refs
from op_test import analytic_grads, check_export, run_dygraph, run_static, static_grads

TYPES = ["regular", "modified", "constrained"]
LOSSES = ["rnnt_loss_simple", "rnnt_loss_smoothed", "rnnt_loss", "rnnt_loss_pruned"]


def problem(B=3, T=7, S=4, C=5, seed=0):
    rng = np.random.default_rng(seed)
    lm = rng.normal(size=(B, S + 1, C))
    am = rng.normal(size=(B, T, C))
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    boundary = np.array([[0, 0, S, T]] + [[0, 0, max(S - b, 1), T - b] for b in range(1, B)], np.int64)
    ranges = (np.minimum(np.arange(T) // 2, S - 2)[None, :, None] + np.arange(3)).repeat(B, 0).astype(np.int64)
    return lm, am, symbols, boundary, ranges


def _t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


def _logits(lm, am):
    return lm.unsqueeze(1) + am.unsqueeze(2)


def loss_and_logprobs(name, lm, am, symbols, boundary, ranges, **kw):
    """(the loss, its (px, py) from the loss's own builder) for the additive joiner lm + am."""
    if name == "rnnt_loss_simple":
        return (paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, **kw),
                paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0, kw.get("rnnt_type", "regular"), boundary))
    if name == "rnnt_loss_smoothed":
        return (paddle_ext.rnnt_loss_smoothed(lm, am, symbols, 0, 0.2, 0.1, boundary, **kw),
                paddle_ext.get_rnnt_logprobs_smoothed(lm, am, symbols, 0, 0.2, 0.1, boundary,
                                                      kw.get("rnnt_type", "regular")))
    if name == "rnnt_loss":
        return (paddle_ext.rnnt_loss(_logits(lm, am), symbols, 0, boundary, **kw),
                paddle_ext.get_rnnt_logprobs_joint(_logits(lm, am), symbols, 0, boundary, kw.get("rnnt_type", "regular")))
    am_p, lm_p = paddle_ext.do_rnnt_pruning(am, lm, ranges)
    return (paddle_ext.rnnt_loss_pruned(am_p + lm_p, symbols, ranges, 0, boundary, **kw),
            paddle_ext.get_rnnt_logprobs_pruned(am_p + lm_p, symbols, ranges, 0, boundary,
                                                kw.get("rnnt_type", "regular")))


# ---------------------------------------------------------------------------------------------
# the full loss against Paddle's F.rnnt_loss (warp-transducer's FastEmit)


@pytest.mark.parametrize("fastemit_lambda", [0.0, 0.01, 0.5, 2.0])
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_rnnt_loss_equals_paddles_fastemit(fastemit_lambda, with_boundary, reduction):
    fastemit_lambda = float(np.float32(fastemit_lambda))  # Paddle's op holds lambda as a float32 attribute
    B, T, S, C, blank = 4, 9, 5, 6, 2
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(B, T, S + 1, C)) * 2
    symbols = rng.choice([c for c in range(C) if c != blank], size=(B, S)).astype(np.int64)
    Ts, Ss = (np.array([9, 7, 6, 9]), np.array([5, 3, 5, 1])) if with_boundary else (np.full(B, T), np.full(B, S))
    boundary = _t(np.stack([0 * Ts, 0 * Ts, Ss, Ts], 1).astype(np.int64)) if with_boundary else None
    x1, x2 = _t(logits, False), _t(logits, False)
    ours = paddle_ext.rnnt_loss(x1, _t(symbols), blank, boundary, reduction=reduction, fastemit_lambda=fastemit_lambda)
    theirs = F.rnnt_loss(F.log_softmax(x2, -1), _t(symbols.astype(np.int32)), _t(Ts.astype(np.int32)),
                         _t(Ss.astype(np.int32)), blank=blank, fastemit_lambda=fastemit_lambda, reduction=reduction)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-13)
    plain = paddle_ext.rnnt_loss(_t(logits), _t(symbols), blank, boundary, reduction=reduction)
    np.testing.assert_array_equal(ours.numpy(), plain.numpy())  # FastEmit leaves the value alone
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(x1.grad.numpy(), x2.grad.numpy(), rtol=1e-12, atol=1e-14)
    if fastemit_lambda:  # and it changes the grads
        x0 = _t(logits, False)
        paddle_ext.rnnt_loss(x0, _t(symbols), blank, boundary, reduction=reduction).sum().backward()
        assert np.abs(x0.grad.numpy() - x1.grad.numpy()).max() > 1e-3 * fastemit_lambda


# ---------------------------------------------------------------------------------------------
# every loss: the rule on its own px, with every rnnt_type, boundary, delay_penalty, reduction


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("delay_penalty,reduction", [(0.0, "sum"), (0.3, "mean"), (0.2, "none")])
def test_every_loss_scales_its_px_grads(name, rnnt_type, with_boundary, delay_penalty, reduction):
    lm, am, symbols, boundary, ranges = problem(seed=2)
    bd = _t(boundary) if with_boundary else None
    lam = 0.7
    lm_t, am_t = _t(lm, False), _t(am, False)
    kw = dict(rnnt_type=rnnt_type, delay_penalty=delay_penalty, reduction=reduction)
    loss, (px, py) = loss_and_logprobs(name, lm_t, am_t, _t(symbols), bd, _t(ranges), fastemit_lambda=lam, **kw)
    plain = loss_and_logprobs(name, _t(lm), _t(am), _t(symbols), bd, _t(ranges), **kw)[0]
    np.testing.assert_array_equal(loss.numpy(), plain.numpy())
    got = paddle.grad(loss.sum(), [lm_t, am_t], retain_graph=True)
    # the reference: d loss / d px = -(1 + lam) * occupation, d loss / d py = -occupation, chained through the
    # loss's own (px, py) builder
    gx, gy = refs.rnnt_loss_logprob_grads(px.numpy(), py.numpy(), boundary if with_boundary else None,
                                          delay_penalty, lam)
    scale = 1 / 3 if reduction == "mean" else 1.0
    expected = paddle.grad([px, py], [lm_t, am_t], grad_outputs=[_t(scale * gx), _t(scale * gy)])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", LOSSES)
def test_return_grad_is_the_occupation_whatever_lambda(name):
    """return_grad's (px_grad, py_grad) feed get_rnnt_prune_ranges: FastEmit does not move the windows."""
    lm, am, symbols, boundary, ranges = problem(seed=3)
    args = (_t(lm, False), _t(am, False), _t(symbols), _t(boundary), _t(ranges))
    _, (gx, gy) = loss_and_logprobs(name, *args, return_grad=True)[0]
    loss, (gx2, gy2) = loss_and_logprobs(name, *args, return_grad=True, fastemit_lambda=1.5)[0]
    np.testing.assert_array_equal(gx2.numpy(), gx.numpy())
    np.testing.assert_array_equal(gy2.numpy(), gy.numpy())
    loss.backward()  # the loss of a return_grad call is differentiable, with FastEmit's grads
    assert np.isfinite(args[0].grad.numpy()).all()


def test_neg_inf_logits_give_no_nan():
    """px is -inf where a logit is -inf (and in regular px's last column): FastEmit keeps those cells -inf
    with zero grads (a straight-through px + lambda * (px - px.detach()) would give NaN)."""
    lm, am, symbols, boundary, _ = problem(seed=4)
    logits = (lm[:, None] + am[:, :, None])
    logits[0, 2, 1, symbols[0, 1]] = -np.inf
    logits[1, :, :, 0] = -np.inf  # no blank for item 1 at all: no path
    x = _t(logits, False)
    loss = paddle_ext.rnnt_loss(x, _t(symbols), 0, _t(boundary), reduction="none", fastemit_lambda=0.5)
    plain = paddle_ext.rnnt_loss(_t(logits), _t(symbols), 0, _t(boundary), reduction="none")
    np.testing.assert_array_equal(loss.numpy(), plain.numpy())
    assert loss.numpy()[1] == np.inf and np.isfinite(loss.numpy()[[0, 2]]).all()
    loss.sum().backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all() and (g[1] == 0).all() and g[0, 2, 1, symbols[0, 1]] == 0


# ---------------------------------------------------------------------------------------------
# graphs: static programs, to_static (both modes), export; 16-bit inputs


def _fn(name, lam):
    def fn(lm, am, symbols, boundary, ranges):
        return loss_and_logprobs(name, lm, am, symbols, boundary, ranges, reduction="none", delay_penalty=0.3,
                                 fastemit_lambda=lam)[0]
    return fn


@pytest.mark.parametrize("name", LOSSES)
def test_static_program_matches_dygraph(name):
    """Losses and grads in a float64 static program equal dygraph's (1.3 and the delay penalty, as float32
    attributes, would be 1e-8 off)."""
    lm, am, symbols, boundary, ranges = problem(seed=5)
    inputs = {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary, "ranges": ranges}
    np.testing.assert_allclose(run_static(_fn(name, 0.3), inputs, {}, "float64")[0],
                               run_dygraph(_fn(name, 0.3), inputs, {}, "float64")[0], rtol=1e-14)
    dygraph, weights = analytic_grads(_fn(name, 0.3), inputs, {}, ["lm", "am"])
    static = static_grads(_fn(name, 0.3), inputs, {}, ["lm", "am"], weights)
    static0 = static_grads(_fn(name, 0.0), inputs, {}, ["lm", "am"], weights)
    for d, s, s0 in zip(dygraph, static, static0):
        np.testing.assert_allclose(s, d, rtol=1e-12, atol=1e-15)
        assert np.abs(s - s0).max() > 1e-4


@pytest.mark.parametrize("full_graph", [True, False])
def test_to_static_grads_match_dygraph(full_graph):
    lm, am, symbols, boundary, ranges = problem(seed=6)

    def step(lm, am, symbols, boundary):
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, fastemit_lambda=0.5, delay_penalty=0.1)

    grads = []
    for fn in (step, paddle.jit.to_static(step, full_graph=full_graph)):
        lm_t, am_t = _t(lm, False), _t(am, False)
        loss = fn(lm_t, am_t, _t(symbols), _t(boundary))
        loss.backward()
        grads.append((float(loss), lm_t.grad.numpy(), am_t.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-12)
    for a, b in zip(grads[1][1:], grads[0][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_export_keeps_the_loss_value(tmp_path):
    lm, am, symbols, boundary, _ = problem(seed=7)

    def fn(lm, am, symbols, boundary):
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, reduction="none", fastemit_lambda=0.5)

    f32 = {"lm": lm.astype(np.float32), "am": am.astype(np.float32), "symbols": symbols, "boundary": boundary}
    out = check_export(fn, f32, directory=str(tmp_path), rtol=1e-5)
    np.testing.assert_allclose(out[0], refs.rnnt_loss(lm[:, None] + am[:, :, None], symbols, 0, boundary), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs(dtype):
    lm, am, symbols, boundary, _ = problem(seed=8)
    lm, am = (paddle.to_tensor(a).astype(dtype).astype("float64").numpy() for a in (lm, am))
    grads = {}
    for d in (dtype, "float64"):
        lm_t, am_t = _t(lm).astype(d), _t(am).astype(d)
        lm_t.stop_gradient = am_t.stop_gradient = False
        paddle_ext.rnnt_loss_simple(lm_t, am_t, _t(symbols), 0, _t(boundary), fastemit_lambda=0.5).backward()
        assert lm_t.grad.dtype == lm_t.dtype
        grads[d] = [g.astype("float64").numpy() for g in (lm_t.grad, am_t.grad)]
    tol = 2e-2 if dtype == "bfloat16" else 2e-3
    for a, b in zip(grads[dtype], grads["float64"]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("bad", [-0.1, float("inf"), float("nan"), True, "0.5"])
def test_bad_lambda_is_an_error(name, bad):
    lm, am, symbols, boundary, ranges = problem(seed=9)
    with pytest.raises(ValueError, match=f"{name}: fastemit_lambda must be a finite float >= 0"):
        loss_and_logprobs(name, _t(lm), _t(am), _t(symbols), _t(boundary), _t(ranges), fastemit_lambda=bad)
