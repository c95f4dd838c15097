"""paddle_ext as a drop-in for k2 / fast_rnnt's MI and RNN-T API: signatures, return_grad, items without
an alignment, the pruning ranges' s_range rule."""

import inspect

import numpy as np
import paddle
import pytest

import paddle_ext
import refs

TYPES = ["regular", "modified", "constrained"]
LOSSES = ["rnnt_loss_simple", "rnnt_loss_smoothed", "rnnt_loss", "rnnt_loss_pruned"]
REQUIRED = inspect.Parameter.empty

# k2's public API, written down from k2-fsa/fast_rnnt at commit 83e4637 (fast_rnnt/python/fast_rnnt/__init__.py,
# mutual_information.py and rnnt_loss.py): each function's parameters, in order, with their defaults.
K2_SIGNATURES = {
    "mutual_information_recursion": [("px", REQUIRED), ("py", REQUIRED), ("boundary", None), ("return_grad", False)],
    "joint_mutual_information_recursion": [("px", REQUIRED), ("py", REQUIRED), ("boundary", None)],
    "get_rnnt_logprobs": [("lm", REQUIRED), ("am", REQUIRED), ("symbols", REQUIRED), ("termination_symbol", REQUIRED),
                          ("rnnt_type", "regular"), ("boundary", None)],
    "rnnt_loss_simple": [("lm", REQUIRED), ("am", REQUIRED), ("symbols", REQUIRED), ("termination_symbol", REQUIRED),
                         ("boundary", None), ("rnnt_type", "regular"), ("delay_penalty", 0.0), ("reduction", "mean"),
                         ("return_grad", False)],
    "get_rnnt_logprobs_joint": [("logits", REQUIRED), ("symbols", REQUIRED), ("termination_symbol", REQUIRED),
                                ("boundary", None), ("rnnt_type", "regular")],
    "rnnt_loss": [("logits", REQUIRED), ("symbols", REQUIRED), ("termination_symbol", REQUIRED), ("boundary", None),
                  ("rnnt_type", "regular"), ("delay_penalty", 0.0), ("reduction", "mean"), ("return_grad", False)],
    "get_rnnt_prune_ranges": [("px_grad", REQUIRED), ("py_grad", REQUIRED), ("boundary", REQUIRED),
                              ("s_range", REQUIRED)],
    "do_rnnt_pruning": [("am", REQUIRED), ("lm", REQUIRED), ("ranges", REQUIRED)],
    "get_rnnt_logprobs_pruned": [("logits", REQUIRED), ("symbols", REQUIRED), ("ranges", REQUIRED),
                                 ("termination_symbol", REQUIRED), ("boundary", None), ("rnnt_type", "regular")],
    "rnnt_loss_pruned": [("logits", REQUIRED), ("symbols", REQUIRED), ("ranges", REQUIRED),
                         ("termination_symbol", REQUIRED), ("boundary", None), ("rnnt_type", "regular"),
                         ("delay_penalty", 0.0), ("reduction", "mean"), ("return_grad", False)],
    "get_rnnt_logprobs_smoothed": [("lm", REQUIRED), ("am", REQUIRED), ("symbols", REQUIRED),
                                   ("termination_symbol", REQUIRED), ("lm_only_scale", 0.1), ("am_only_scale", 0.1),
                                   ("boundary", None), ("rnnt_type", "regular")],
    "rnnt_loss_smoothed": [("lm", REQUIRED), ("am", REQUIRED), ("symbols", REQUIRED), ("termination_symbol", REQUIRED),
                           ("lm_only_scale", 0.1), ("am_only_scale", 0.1), ("boundary", None), ("rnnt_type", "regular"),
                           ("delay_penalty", 0.0), ("reduction", "mean"), ("return_grad", False)],
}


def problem(B=3, T=7, S=4, C=5, seed=0):
    rng = np.random.default_rng(seed)
    lm = rng.normal(size=(B, S + 1, C))
    am = rng.normal(size=(B, T, C))
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    boundary = np.stack([np.zeros(B), np.zeros(B), [S] + [max(S - 1 - b, 1) for b in range(1, B)],
                         [T] * B], 1).astype(np.int64)
    return lm, am, symbols, boundary


def _t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


def _with_start(start, R):
    return (np.asarray(start)[..., None] + np.arange(R)).astype(np.int64)


def _loss(name, lm, am, symbols, boundary, ranges=None, **kw):
    """One of the four losses on the additive joiner lm + am (the pruned one on the windows of `ranges`)."""
    if name == "rnnt_loss_simple":
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, **kw)
    if name == "rnnt_loss_smoothed":
        return paddle_ext.rnnt_loss_smoothed(lm, am, symbols, 0, 0.2, 0.1, boundary, **kw)
    if name == "rnnt_loss":
        return paddle_ext.rnnt_loss(lm.unsqueeze(1) + am.unsqueeze(2), symbols, 0, boundary, **kw)
    am_p, lm_p = paddle_ext.do_rnnt_pruning(am, lm, ranges)
    return paddle_ext.rnnt_loss_pruned(am_p + lm_p, symbols, ranges, 0, boundary, **kw)


@pytest.mark.parametrize("name", sorted(K2_SIGNATURES))
def test_signature_is_k2s_with_our_extras_keyword_only(name):
    assert name in paddle_ext.__all__
    params = list(inspect.signature(getattr(paddle_ext, name)).parameters.values())
    k2 = K2_SIGNATURES[name]
    assert [(p.name, p.default) for p in params[:len(k2)]] == k2
    assert all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params[:len(k2)])
    assert all(p.kind == p.KEYWORD_ONLY for p in params[len(k2):]), [p.name for p in params[len(k2):]]


def test_get_rnnt_logprobs_takes_rnnt_type_before_boundary():
    """k2's order, positionally: (lm, am, symbols, termination_symbol, rnnt_type, boundary)."""
    lm, am, symbols, boundary = problem(B=2, T=5, S=3)
    px, py = paddle_ext.get_rnnt_logprobs(_t(lm), _t(am), _t(symbols), 0, "modified", _t(boundary))
    assert px.shape == [2, 3, 5]  # modified: [B, S, T]
    ref_px, ref_py = refs.rnnt_logprobs(lm[:, None] + am[:, :, None], symbols, 0, boundary, "modified")
    np.testing.assert_allclose(px.numpy(), ref_px, rtol=1e-10)
    np.testing.assert_allclose(py.numpy(), ref_py, rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# return_grad: (loss, (px_grad, py_grad)) on every loss, the occupation probabilities of its own lattice


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_return_grad_gives_the_occupation_of_the_losss_lattice(name, rnnt_type, reduction):
    lm, am, symbols, boundary = problem(seed=1)
    ranges = _t(_with_start(np.broadcast_to(np.minimum(np.arange(7) // 2, 2), (3, 7)), 3))
    args = (_t(lm), _t(am), _t(symbols), _t(boundary), ranges)
    loss, (gx, gy) = _loss(name, *args, rnnt_type=rnnt_type, reduction=reduction, return_grad=True)
    plain = _loss(name, *args, rnnt_type=rnnt_type, reduction=reduction)
    np.testing.assert_array_equal(loss.numpy(), plain.numpy())
    # the (px, py) of the same lattice, from the loss's own builder
    bd = _t(boundary)
    if name == "rnnt_loss_simple":
        px, py = paddle_ext.get_rnnt_logprobs(args[0], args[1], args[2], 0, rnnt_type, bd)
    elif name == "rnnt_loss_smoothed":
        px, py = paddle_ext.get_rnnt_logprobs_smoothed(args[0], args[1], args[2], 0, 0.2, 0.1, bd, rnnt_type)
    elif name == "rnnt_loss":
        px, py = paddle_ext.get_rnnt_logprobs_joint(_t(lm[:, None] + am[:, :, None]), args[2], 0, bd, rnnt_type)
    else:
        am_p, lm_p = paddle_ext.do_rnnt_pruning(args[1], args[0], ranges)
        px, py = paddle_ext.get_rnnt_logprobs_pruned(am_p + lm_p, args[2], ranges, 0, bd, rnnt_type)
    rgx, rgy = refs.mutual_information_grad(px.numpy(), py.numpy(), boundary)  # per item, whatever the reduction
    assert gx.stop_gradient and gy.stop_gradient
    np.testing.assert_allclose(gx.numpy(), rgx, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gy.numpy(), rgy, rtol=1e-10, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# an item without an alignment: an inf loss and zero grads, never an error for the batch


def _no_alignment_batch(rnnt_type):
    """Item 1 has no path: 5 symbols in 3 frames (modified, constrained), or no frame at all (regular)."""
    lm, am, symbols, _ = problem(B=3, T=6, S=5, seed=2)
    bad = [0, 0, 5, 0] if rnnt_type == "regular" else [0, 0, 5, 3]
    boundary = np.array([[0, 0, 4, 6], bad, [0, 0, 2, 5]], np.int64)
    fixed = boundary.copy()
    fixed[1] = [0, 0, 2, 4]
    return lm, am, symbols, boundary, fixed


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_an_item_without_alignment_gets_inf_and_zero_grads(name, rnnt_type, reduction):
    lm, am, symbols, boundary, fixed = _no_alignment_batch(rnnt_type)
    # the pruned loss takes the ranges of the pruned recipe: the simple loss's occupation (all 0 for item 1)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(_t(lm), _t(am), _t(symbols), 0, _t(boundary), rnnt_type=rnnt_type,
                                              return_grad=True)
    assert (gx.numpy()[1] == 0).all() and (gy.numpy()[1] == 0).all()
    ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, _t(boundary), 3)

    def run(bd, red):
        lm_t, am_t = _t(lm, False), _t(am, False)
        loss = _loss(name, lm_t, am_t, _t(symbols), _t(bd), ranges, rnnt_type=rnnt_type, reduction=red)
        return loss, lm_t, am_t

    loss, lm_t, am_t = run(boundary, "none")
    assert loss.numpy()[1] == np.inf and np.isfinite(loss.numpy()[[0, 2]]).all()
    assert all((g.numpy() == 0).all() for g in paddle.grad(loss[1], [lm_t, am_t], retain_graph=True))
    # the other items: their loss and grads as in a batch where item 1 has an alignment
    ok, lm_ok, am_ok = run(fixed, "none")
    np.testing.assert_allclose(loss.numpy()[[0, 2]], ok.numpy()[[0, 2]], rtol=1e-12)
    scale = 1 / 3 if reduction == "mean" else 1.0
    expected = paddle.grad(scale * (ok[0] + ok[2]), [lm_ok, am_ok])
    if reduction != "none":
        loss, lm_t, am_t = run(boundary, reduction)
        assert loss.shape == [] and loss.numpy() == np.inf  # as k2: mean and sum of an inf are inf
    got = paddle.grad(loss.sum() if reduction == "none" else loss, [lm_t, am_t])
    for g, e in zip(got, expected):
        assert np.isfinite(g.numpy()).all()
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_modified_and_constrained_with_fewer_frames_than_symbols_is_inf_not_an_error(rnnt_type):
    lm, am, symbols, _ = problem(B=1, T=3, S=4, seed=0)
    loss = paddle_ext.rnnt_loss_simple(_t(lm), _t(am), _t(symbols), 0, rnnt_type=rnnt_type, reduction="none")
    assert np.isinf(loss.numpy()[0]) == (rnnt_type != "regular")


# ---------------------------------------------------------------------------------------------
# get_rnnt_prune_ranges: k2's s_range rule for each rnnt_type; malformed arguments


def _k2_s_range(s_range, boundary, S, regular):
    """k2: regular raises s_range to max_b((S_b - 1) // T_b + 2) (division truncated), then every layout caps
    it at S + 1; modified and constrained keep it (their px_grad has the same [B, S, T] layout)."""
    if regular:
        s_range = max(s_range, int(max(np.trunc((b[2] - 1) / b[3]) + 2 for b in boundary)))
    return S + 1 if s_range > S else s_range


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("s_range", [0, 1, 2, 3, 9])
def test_prune_ranges_use_k2s_s_range_rule(rnnt_type, s_range):
    B, T, S = 3, 4, 7
    lm, am, symbols, _ = problem(B=B, T=T, S=S, seed=3)
    boundary = np.array([[0, 0, 7, 4], [0, 0, 3, 4], [0, 0, 5, 2]], np.int64)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(_t(lm), _t(am), _t(symbols), 0, _t(boundary), rnnt_type=rnnt_type,
                                              return_grad=True)
    regular = rnnt_type == "regular"
    expected = _k2_s_range(s_range, boundary, S, regular)
    if expected < (2 if regular else 1):
        with pytest.raises(ValueError, match="s_range must be >= 1"):
            paddle_ext.get_rnnt_prune_ranges(gx, gy, _t(boundary), s_range)
        return
    if expected > s_range and regular:
        with pytest.warns(UserWarning, match=f"s_range={s_range}"):
            ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, _t(boundary), s_range)
    else:
        ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, _t(boundary), s_range)
    assert ranges.shape == [B, T, expected]
    # whatever the windows, the pruned loss runs: an item they leave without a path is inf, not an error
    am_p, lm_p = paddle_ext.do_rnnt_pruning(_t(am), _t(lm), ranges)
    loss = paddle_ext.rnnt_loss_pruned(am_p + lm_p, _t(symbols), ranges, 0, _t(boundary), rnnt_type=rnnt_type,
                                       reduction="none")
    assert not np.isnan(loss.numpy()).any()
    if rnnt_type == "constrained" and expected == 1:  # a symbol needs its window and the next context's blank
        assert np.isposinf(loss.numpy()).all()


@pytest.mark.parametrize("rnnt_type", ["regular", "modified"])
def test_negative_s_range_is_an_error(rnnt_type):
    gx = _t(np.zeros((2, 3, 6 if rnnt_type == "regular" else 5)))
    gy = _t(np.zeros((2, 4, 5)))
    with pytest.raises(ValueError, match="get_rnnt_prune_ranges: s_range must be >= 0, got -2"):
        paddle_ext.get_rnnt_prune_ranges(gx, gy, _t(np.array([[0, 0, 3, 5]] * 2)), -2)
