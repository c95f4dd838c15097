"""RNN-T losses on top of mutual_information_recursion (k2 / fast_rnnt semantics)."""

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ext
import refs
from op_test import analytic_grads, check_export, check_grad, check_output, static_grads

TYPES = ["regular", "modified", "constrained"]


def problem(B=3, T=7, S=4, C=5, seed=0):
    rng = np.random.default_rng(seed)
    lm = rng.normal(size=(B, S + 1, C))
    am = rng.normal(size=(B, T, C))
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    Ts = np.array([T] + list(rng.integers(S, T + 1, size=B - 1)))
    Ss = np.array([S] + list(rng.integers(1, S + 1, size=B - 1)))
    boundary = np.stack([np.zeros(B), np.zeros(B), Ss, Ts], 1).astype(np.int64)
    return lm, am, symbols, boundary


def t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


@pytest.mark.parametrize("with_boundary", [False, True])
def test_regular_rnnt_loss_equals_paddle_warprnnt(with_boundary):
    lm, am, symbols, boundary = problem(B=4, T=9, S=5, C=6, seed=1)
    B, T, S = 4, 9, 5
    logits = np.random.default_rng(2).normal(size=(B, T, S + 1, 6)) * 2
    bd = boundary if with_boundary else None
    ours = paddle_ext.rnnt_loss(t(logits), t(symbols), 0, None if bd is None else t(bd), reduction="none")
    Ts = boundary[:, 3] if with_boundary else np.full(B, T)
    Ss = boundary[:, 2] if with_boundary else np.full(B, S)
    theirs = F.rnnt_loss(F.log_softmax(t(logits), -1), t(symbols.astype(np.int32)), t(Ts.astype(np.int32)),
                         t(Ss.astype(np.int32)), blank=0, fastemit_lambda=0.0, reduction="none")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    # and the grads of the logits agree too
    x1, x2 = t(logits, False), t(logits, False)
    paddle_ext.rnnt_loss(x1, t(symbols), 0, None if bd is None else t(bd), reduction="sum").backward()
    F.rnnt_loss(F.log_softmax(x2, -1), t(symbols.astype(np.int32)), t(Ts.astype(np.int32)), t(Ss.astype(np.int32)),
                blank=0, fastemit_lambda=0.0, reduction="sum").backward()
    np.testing.assert_allclose(x1.grad.numpy(), x2.grad.numpy(), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("delay_penalty", [0.0, 0.3])
def test_rnnt_loss_against_numpy_reference(rnnt_type, with_boundary, delay_penalty):
    _, _, symbols, boundary = problem(seed=3)
    logits = np.random.default_rng(4).normal(size=(3, 7, 5, 5))
    bd = boundary if with_boundary else None
    got = paddle_ext.rnnt_loss(t(logits), t(symbols), 2, None if bd is None else t(bd), rnnt_type=rnnt_type,
                               delay_penalty=delay_penalty, reduction="none")
    ref = refs.rnnt_loss(logits, symbols, 2, bd, rnnt_type, delay_penalty)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    for reduction, fn in (("mean", np.mean), ("sum", np.sum)):
        got = paddle_ext.rnnt_loss(t(logits), t(symbols), 2, None if bd is None else t(bd), rnnt_type=rnnt_type,
                                   delay_penalty=delay_penalty, reduction=reduction)
        np.testing.assert_allclose(got.numpy(), fn(ref), rtol=1e-12)


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("delay_penalty", [0.0, 0.25])
def test_simple_loss_equals_full_loss_on_additive_joiner(rnnt_type, with_boundary, delay_penalty):
    lm, am, symbols, boundary = problem(seed=5)
    bd = boundary if with_boundary else None
    lm1, am1, lm2, am2 = t(lm, False), t(am, False), t(lm, False), t(am, False)
    kw = dict(rnnt_type=rnnt_type, delay_penalty=delay_penalty, reduction="none")
    simple = paddle_ext.rnnt_loss_simple(lm1, am1, t(symbols), 0, None if bd is None else t(bd), **kw)
    full = paddle_ext.rnnt_loss(lm2.unsqueeze(1) + am2.unsqueeze(2), t(symbols), 0, None if bd is None else t(bd), **kw)
    np.testing.assert_allclose(simple.numpy(), full.numpy(), rtol=1e-10)
    simple.sum().backward()
    full.sum().backward()
    np.testing.assert_allclose(lm1.grad.numpy(), lm2.grad.numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(am1.grad.numpy(), am2.grad.numpy(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_simple_loss_is_invariant_to_per_row_offsets(rnnt_type):
    lm, am, symbols, boundary = problem(seed=6)
    base = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type=rnnt_type, reduction="none")
    shifted = paddle_ext.rnnt_loss_simple(t(lm + 40.0), t(am - 30.0 + np.arange(7)[None, :, None]), t(symbols), 0,
                                          t(boundary), rnnt_type=rnnt_type, reduction="none")
    np.testing.assert_allclose(shifted.numpy(), base.numpy(), rtol=1e-10)


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_simple_loss_return_grad_and_numeric_grads(rnnt_type):
    lm, am, symbols, boundary = problem(B=2, T=5, S=3, C=4, seed=7)
    loss, (gx, gy) = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type=rnnt_type,
                                                 reduction="none", return_grad=True)
    px, py = paddle_ext.get_rnnt_logprobs(t(lm), t(am), t(symbols), 0, rnnt_type, t(boundary))
    rgx, rgy = refs.mutual_information_grad(px.numpy(), py.numpy(), boundary)
    np.testing.assert_allclose(gx.numpy(), rgx, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gy.numpy(), rgy, rtol=1e-10, atol=1e-14)

    def fn(lm, am, symbols, boundary):
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, rnnt_type=rnnt_type, reduction="none")

    check_grad(fn, {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary}, ["lm", "am"])


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_full_loss_numeric_grads(rnnt_type):
    _, _, symbols, boundary = problem(B=2, T=4, S=3, C=3, seed=8)
    logits = np.random.default_rng(9).normal(size=(2, 4, 4, 3))

    def fn(logits, symbols, boundary):
        return paddle_ext.rnnt_loss(logits, symbols, 1, boundary, rnnt_type=rnnt_type, reduction="none")

    check_grad(fn, {"logits": logits, "symbols": symbols, "boundary": boundary}, ["logits"])


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_smoothed_loss(rnnt_type):
    lm, am, symbols, boundary = problem(seed=10)
    simple = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type=rnnt_type,
                                         reduction="none")
    zero = paddle_ext.rnnt_loss_smoothed(t(lm), t(am), t(symbols), 0, 0.0, 0.0, t(boundary), rnnt_type=rnnt_type,
                                         reduction="none")
    np.testing.assert_allclose(zero.numpy(), simple.numpy(), rtol=1e-10)
    # lm_only_scale = 1: the loss of the LM alone, which ignores am entirely
    lm_only = paddle_ext.rnnt_loss_smoothed(t(lm), t(am), t(symbols), 0, 1.0, 0.0, t(boundary), rnnt_type=rnnt_type,
                                            reduction="none")
    lm_only2 = paddle_ext.rnnt_loss_smoothed(t(lm), t(am * 3 + 1), t(symbols), 0, 1.0, 0.0, t(boundary),
                                             rnnt_type=rnnt_type, reduction="none")
    np.testing.assert_allclose(lm_only.numpy(), lm_only2.numpy(), rtol=1e-8)
    lm1, am1 = t(lm, False), t(am, False)
    loss, (gx, gy) = paddle_ext.rnnt_loss_smoothed(lm1, am1, t(symbols), 0, 0.1, 0.2, t(boundary), rnnt_type=rnnt_type,
                                                   return_grad=True)
    loss.backward()
    assert np.isfinite(loss.numpy()) and np.isfinite(lm1.grad.numpy()).all() and np.isfinite(am1.grad.numpy()).all()
    assert np.isfinite(gx.numpy()).all() and np.isfinite(gy.numpy()).all()


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_pruned_loss_with_full_range_equals_simple_and_ranges_are_well_formed(rnnt_type):
    B, T, S, C = 4, 12, 6, 5
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=11)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type=rnnt_type,
                                              reduction="none", return_grad=True)
    full = paddle_ext.rnnt_loss(t(lm[:, None] + am[:, :, None]), t(symbols), 0, t(boundary), rnnt_type=rnnt_type,
                                reduction="none").numpy()
    for s_range in (2, 3, S + 1, S + 5):
        ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, t(boundary), s_range)
        R = min(s_range, S + 1)
        assert ranges.shape == [B, T, R] and ranges.dtype == paddle.int64
        r = ranges.numpy()
        np.testing.assert_array_equal(r - r[:, :, :1], np.broadcast_to(np.arange(R), r.shape))
        start = r[:, :, 0]
        assert (start[:, 0] == 0).all() and (np.diff(start, axis=1) >= 0).all()
        assert (np.diff(start, axis=1) < (R if rnnt_type == "regular" else 2)).all()
        assert (r <= S).all()
        for b in range(B):  # the last real frame can reach the end symbol
            assert start[b, boundary[b, 3] - 1] + R - 1 >= boundary[b, 2]
        am_p, lm_p = paddle_ext.do_rnnt_pruning(t(am), t(lm), ranges)
        assert am_p.shape == [B, T, R, C] and lm_p.shape == [B, T, R, C]
        np.testing.assert_array_equal(lm_p.numpy(), lm[np.arange(B)[:, None, None], r])
        pruned = paddle_ext.rnnt_loss_pruned(am_p + lm_p, t(symbols), ranges, 0, t(boundary), rnnt_type=rnnt_type,
                                             reduction="none").numpy()
        assert np.isfinite(pruned).all()
        if R == S + 1:
            np.testing.assert_allclose(pruned, full, rtol=1e-10)
        else:  # fewer paths: never a lower loss
            assert (pruned >= full - 1e-9).all()


def test_pruned_loss_trains_the_joiner_grads_flow():
    B, T, S, C = 2, 10, 4, 6
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=12)
    lm_t, am_t = t(lm, False), t(am, False)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(lm_t, am_t, t(symbols), 0, t(boundary), return_grad=True)
    ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, t(boundary), 3)
    am_p, lm_p = paddle_ext.do_rnnt_pruning(am_t, lm_t, ranges)
    loss = paddle_ext.rnnt_loss_pruned(paddle.tanh(am_p + lm_p) * 3, t(symbols), ranges, 0, t(boundary))
    loss.backward()
    assert np.isfinite(am_t.grad.numpy()).all() and np.abs(am_t.grad.numpy()).sum() > 0
    assert np.abs(lm_t.grad.numpy()).sum() > 0


def test_get_rnnt_prune_ranges_raises_s_range_to_keep_a_path():
    B, T, S = 1, 3, 6  # regular: 6 symbols in 3 frames need >= 3 symbols on some frame
    lm, am, symbols, _ = problem(B=B, T=T, S=S, C=4, seed=13)
    boundary = np.array([[0, 0, S, T]], dtype=np.int64)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), return_grad=True)
    with pytest.warns(UserWarning, match="s_range=2"):
        ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, t(boundary), 2)
    assert ranges.shape[2] == 3


@pytest.mark.parametrize("rnnt_type", ["regular", "modified"])
def test_simple_loss_static_and_export(rnnt_type, tmp_path):
    lm, am, symbols, boundary = problem(seed=14)

    def fn(lm, am, symbols, boundary):
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, rnnt_type=rnnt_type, reduction="none")

    def ref(lm, am, symbols, boundary):
        return refs.rnnt_loss(lm[:, None] + am[:, :, None], symbols, 0, boundary, rnnt_type)

    inputs = {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary}
    check_output(fn, inputs, ref)
    check_output(fn, inputs, ref, dtype="float32")
    f32 = {"lm": lm.astype(np.float32), "am": am.astype(np.float32), "symbols": symbols, "boundary": boundary}
    out = check_export(fn, f32, directory=str(tmp_path), rtol=1e-5)
    np.testing.assert_allclose(out[0], ref(lm, am, symbols, boundary), rtol=1e-5)


def test_full_and_pruned_losses_static():
    _, _, symbols, boundary = problem(seed=15)
    logits = np.random.default_rng(16).normal(size=(3, 7, 5, 5))

    def fn(logits, symbols, boundary):
        return paddle_ext.rnnt_loss(logits, symbols, 0, boundary, reduction="none")

    check_output(fn, {"logits": logits, "symbols": symbols, "boundary": boundary},
                 lambda lg, sy, bd: refs.rnnt_loss(lg, sy, 0, bd))
    ranges = np.minimum(np.arange(7)[None, :, None] // 2 + np.arange(3)[None, None, :], 4).repeat(3, 0)
    ranges = np.minimum(ranges, 4 - 2 + np.arange(3))  # keep each window inside [0, S]
    ranges = (ranges[:, :, :1] + np.arange(3)).astype(np.int64)
    pruned_logits = np.random.default_rng(17).normal(size=(3, 7, 3, 5))

    def fp(lg, sy, rg, bd):
        return paddle_ext.rnnt_loss_pruned(lg, sy, rg, 0, bd, reduction="none")

    res = check_output(fp, {"logits": pruned_logits, "symbols": symbols, "ranges": ranges, "boundary": boundary},
                       lambda lg, sy, rg, bd: _pruned_ref(lg, sy, rg, bd))
    assert np.isfinite(res["dygraph"][0]).all()


# ------------------------------------------------------------------------------------------ clamp


def _clamp_problem(seed, B=3, T=7, S=4, C=6, scale=2.0):
    _, _, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=seed)
    return np.random.default_rng(seed + 100).normal(size=(B, T, S + 1, C)) * scale, symbols, boundary


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("clamp", [0.02, 0.3])
def test_clamp_bounds_each_items_logit_grads_before_the_upstream_grad(rnnt_type, reduction, clamp):
    """torchaudio's and NeMo's clamp: d loss[b] / d logits (FastEmit and delay penalty included) clamped to
    [-clamp, clamp], then times the item's upstream grad (weights, or the reduction's); the loss unchanged."""
    logits, symbols, bd = _clamp_problem(seed=30)
    B = logits.shape[0]
    weights = np.linspace(0.5, 1.5, B)
    kw = dict(rnnt_type=rnnt_type, delay_penalty=0.1, reduction=reduction, fastemit_lambda=0.4)
    results = []
    for c in (clamp, -1.0):
        x = t(logits, False)
        loss = paddle_ext.rnnt_loss(x, t(symbols), 2, t(bd), clamp=c, **kw)
        (loss * t(weights)).sum().backward() if reduction == "none" else loss.backward()
        results.append((loss.numpy(), x.grad.numpy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    up = {"none": weights, "sum": np.ones(B), "mean": np.full(B, 1.0 / B)}[reduction]
    want = refs.rnnt_loss_grad(logits, symbols, 2, bd, rnnt_type, 0.1, 0.4, up, clamp)
    np.testing.assert_allclose(results[0][1], want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(results[1][1], refs.rnnt_loss_grad(logits, symbols, 2, bd, rnnt_type, 0.1, 0.4, up),
                               rtol=1e-9, atol=1e-12)
    own = refs.rnnt_loss_grad(logits, symbols, 2, bd, rnnt_type, 0.1, 0.4)
    assert (np.abs(own) > clamp).any(), "the clamp must bite"


@pytest.mark.parametrize("clamp", [-1.0, 0.0, -3])
def test_rnnt_clamp_zero_or_negative_is_off(clamp):
    logits, symbols, bd = _clamp_problem(seed=31)
    grads = []
    for c in (clamp, None):
        x = t(logits, False)
        kw = {} if c is None else {"clamp": c}
        paddle_ext.rnnt_loss(x, t(symbols), 2, t(bd), reduction="sum", **kw).backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


def test_rnnt_clamp_matches_nemos_small_case():
    """NeMo's own clamp test (RNNTLossNumba, clamp 0.1, reduction 'sum'): cost 4.495666 and its clamped grads."""
    acts = np.array([[[[0.1, 0.6, 0.1, 0.1, 0.1], [0.1, 0.1, 0.6, 0.1, 0.1], [0.1, 0.1, 0.2, 0.8, 0.1]],
                      [[0.1, 0.6, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.1, 0.1], [0.7, 0.1, 0.2, 0.1, 0.1]]]])
    nemo_grads = np.array([[[[-0.1, -0.1, 0.1, 0.1, 0.1], [-0.1, 0.1, -0.1, 0.1, 0.1],
                             [-0.1, 0.06269141, 0.06928472, 0.1, 0.06269141]],
                            [[0.05456069, -0.1, 0.05456069, 0.05456069, 0.05456069], [0.1, 0.1, -0.1, 0.1, 0.1],
                             [-0.1, 0.1, 0.1, 0.1, 0.1]]]])
    x = t(acts, False)
    loss = paddle_ext.rnnt_loss(x, t(np.array([[1, 2]])), 0, reduction="sum", clamp=0.1)
    loss.backward()
    np.testing.assert_allclose(float(loss), 4.495666, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), nemo_grads, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), refs.rnnt_loss_grad(acts, [[1, 2]], 0, clamp=0.1), rtol=1e-12)


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_rnnt_clamp_static_grads_equal_the_reference(rnnt_type):
    logits, symbols, bd = _clamp_problem(seed=32)
    inputs = {"logits": logits, "symbols": symbols, "boundary": bd}

    def fn(x, s, b):
        return paddle_ext.rnnt_loss(x, s, 2, b, rnnt_type=rnnt_type, reduction="none", clamp=0.05)

    (dy,), weights = analytic_grads(fn, inputs, {}, ["logits"])
    want = refs.rnnt_loss_grad(logits, symbols, 2, bd, rnnt_type, loss_grad=weights[0], clamp=0.05)
    np.testing.assert_allclose(dy, want, rtol=1e-9, atol=1e-12)
    for legacy in (False, True):
        (st,) = static_grads(fn, inputs, {}, ["logits"], weights, legacy=legacy)
        np.testing.assert_allclose(st, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-5), ("float16", 2e-2), ("bfloat16", 5e-2)])
def test_rnnt_clamp_in_lower_precision(dtype, rtol):
    logits, symbols, bd = _clamp_problem(seed=33)
    x = paddle.to_tensor(logits).astype(dtype)
    rounded = x.astype("float64").numpy()
    x.stop_gradient = False
    paddle_ext.rnnt_loss(x, t(symbols), 2, t(bd), reduction="mean", clamp=0.03).backward()
    want = refs.rnnt_loss_grad(rounded, symbols, 2, bd, loss_grad=np.full(3, 1 / 3), clamp=0.03)
    np.testing.assert_allclose(x.grad.astype("float64").numpy(), want, rtol=rtol, atol=rtol * np.abs(want).max())


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_pruned_clamp_bounds_each_items_pruned_logit_grads(rnnt_type, reduction):
    """rnnt_loss_pruned's clamp: with every context in range, the full loss's clamped reference; with narrower
    ranges, each item's own pruned-logits grad (the unclamped loss's grad of its item) clamped, then times the
    item's upstream grad; the loss unchanged."""
    logits, symbols, bd = _clamp_problem(seed=36)
    B, T, S1, _ = logits.shape
    kw = dict(rnnt_type=rnnt_type, delay_penalty=0.1, fastemit_lambda=0.4)
    weights = np.linspace(0.5, 1.5, B)
    up = weights if reduction == "none" else np.full(B, 1.0 / B)

    def run(x, ranges, clamp, red):
        x = t(x, False)
        loss = paddle_ext.rnnt_loss_pruned(x, t(symbols), t(ranges), 2, t(bd), reduction=red, clamp=clamp, **kw)
        (loss * t(weights)).sum().backward() if red == "none" else loss.backward()
        return loss.numpy(), x.grad.numpy()

    every = np.broadcast_to(np.arange(S1), (B, T, S1)).astype(np.int64)
    got = run(logits, every, 0.05, reduction)[1]
    want = refs.rnnt_loss_grad(logits, symbols, 2, bd, rnnt_type, 0.1, 0.4, up, 0.05)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    ranges = np.repeat(np.minimum(np.arange(T) // 2, S1 - 3)[None, :, None] + np.arange(3), B, 0).astype(np.int64)
    pruned = np.take_along_axis(logits, ranges[..., None], axis=2)
    x = t(pruned, False)
    paddle_ext.rnnt_loss_pruned(x, t(symbols), t(ranges), 2, t(bd), reduction="sum", **kw).backward()
    own = x.grad.numpy()  # each item's logits take grads from its own loss alone
    assert (np.abs(own) > 0.05).any(), "the clamp must bite"
    loss, got = run(pruned, ranges, 0.05, reduction)
    np.testing.assert_array_equal(loss, run(pruned, ranges, -1.0, reduction)[0])
    np.testing.assert_allclose(got, np.clip(own, -0.05, 0.05) * up[:, None, None, None], rtol=1e-12, atol=1e-15)


def test_rnnt_clamp_with_wide_logits_and_an_item_without_path():
    logits, symbols, _ = _clamp_problem(seed=34, scale=1e4)
    logits[0, 2, 1, :2] = -np.inf
    bd = np.array([[0, 0, 4, 7], [0, 0, 3, 0], [0, 0, 2, 5]], np.int64)  # item 1: symbols but no frame
    x = t(logits, False)
    loss = paddle_ext.rnnt_loss(x, t(symbols), 2, t(bd), reduction="none", clamp=0.05)
    loss.sum().backward()
    got = x.grad.numpy()
    assert np.isinf(loss.numpy()[1]) and np.all(got[1] == 0) and np.isfinite(got).all()
    np.testing.assert_allclose(got, refs.rnnt_loss_grad(logits, symbols, 2, bd, clamp=0.05), rtol=1e-9, atol=1e-12)


def test_rnnt_clamp_export_round_trip():
    logits, symbols, bd = _clamp_problem(seed=35)

    def fn(x, s, b):
        return paddle_ext.rnnt_loss(x, s, 2, b, reduction="none", clamp=0.1)

    out = check_export(fn, {"logits": logits.astype(np.float32), "symbols": symbols, "boundary": bd}, rtol=1e-5)
    np.testing.assert_allclose(out[0], refs.rnnt_loss(logits.astype(np.float32), symbols, 2, bd), rtol=1e-5)


@pytest.mark.parametrize("clamp", [float("nan"), "0.1", None, True])
def test_rnnt_clamp_must_be_a_number(clamp):
    logits, symbols, bd = _clamp_problem(seed=36)
    with pytest.raises(ValueError, match=r"rnnt_loss: clamp must be a float"):
        paddle_ext.rnnt_loss(t(logits), t(symbols), 2, t(bd), clamp=clamp)


def _pruned_ref(logits, symbols, ranges, boundary):
    """The pruned loss = the full loss on logits that are -inf-like outside each frame's range."""
    B, T, R, C = logits.shape
    S = symbols.shape[1]
    full = np.full((B, T, S + 1, C), -1e30)
    for b in range(B):
        for tt in range(T):
            full[b, tt, ranges[b, tt]] = logits[b, tt]
    m = full.max(-1, keepdims=True)
    logp = full - (m + np.log(np.exp(full - m).sum(-1, keepdims=True)))
    logp[full[..., :1].repeat(C, -1) <= -1e29] = -np.inf
    px = np.full((B, S, T + 1), -np.inf)
    py = np.full((B, S + 1, T), -np.inf)
    for b in range(B):
        for s in range(S + 1):
            for tt in range(T):
                py[b, s, tt] = logp[b, tt, s, 0]
                if s < S and tt != boundary[b, 3]:
                    px[b, s, tt] = logp[b, tt, s, symbols[b, s]]
    return -refs.mutual_information(px, py, boundary)[0]


def _lt(a):
    return paddle.to_tensor(np.asarray(a))


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(rnnt_type="fancy"), ValueError, "rnnt_type"),
    (dict(reduction="avg"), ValueError, "reduction"),
    (dict(delay_penalty=-1.0), ValueError, "delay_penalty"),
    (dict(termination_symbol=5), ValueError, "termination_symbol"),
    (dict(termination_symbol=-1), ValueError, "termination_symbol"),
    (dict(symbols=np.full((3, 4), 7)), ValueError,
     r"symbols must lie in \[0, C\) = \[0, 5\), C = lm's and am's last dim = 5; got values in \[7, 7\]"),
    (dict(symbols=np.zeros((3, 3), np.int64)), ValueError, r"symbols must have shape \[B, S\]"),
    (dict(symbols=np.zeros((3, 4), np.float32)), TypeError, "integer"),
    (dict(boundary=np.array([[0, 0, 4, 7], [0, 0, 5, 7], [0, 0, 4, 7]])), ValueError, "row 1"),
    (dict(am=np.zeros((3, 7, 6))), ValueError, "lm must be"),
    (dict(lm=np.zeros((3, 5))), ValueError, "3-D"),
])
def test_simple_loss_errors(kwargs, exc, match):
    lm, am, symbols, _ = problem(seed=0)
    args = dict(lm=lm, am=am, symbols=symbols, termination_symbol=0)
    args.update(kwargs)
    for k in ("lm", "am", "symbols", "boundary"):
        if k in args:
            args[k] = _lt(args[k])
    with pytest.raises(exc, match=match):
        paddle_ext.rnnt_loss_simple(**args)


@pytest.mark.parametrize("loss", ["rnnt_loss_simple", "rnnt_loss", "rnnt_loss_pruned", "tdt_loss"])
def test_symbols_checked_by_the_kernel_raise_the_python_error_alone(loss):
    """CPU symbols are checked by the op's kernel; its failure re-runs the Python checks, whose error is raised
    with no kernel traceback chained to it, and in the checks' order (the symbols before the ranges)."""
    B, T, S, C = 2, 4, 3, 5
    lm, am, _, _ = problem(B=B, T=T, S=S, C=C, seed=5)
    bad = t(np.full((B, S), C, np.int64))
    logits = t(lm[:, None] + am[:, :, None])
    ranges = t(_with_start(np.zeros((B, T), np.int64), 2))
    calls = {
        "rnnt_loss_simple": lambda: paddle_ext.rnnt_loss_simple(t(lm), t(am), bad, 0),
        "rnnt_loss": lambda: paddle_ext.rnnt_loss(logits, bad, 0),
        # ranges of the wrong shape too: the symbols' error comes first, as the checks run in order
        "rnnt_loss_pruned": lambda: paddle_ext.rnnt_loss_pruned(logits[:, :, :2], bad, ranges[:, :3], 0),
        "tdt_loss": lambda: paddle_ext.tdt_loss(paddle.concat([logits, logits[..., :2]], -1), bad, [0, 1], 0),
    }
    with pytest.raises(ValueError, match=rf"^{loss}: symbols must lie in \[0, C\) = \[0, {C}\), C = .* = {C}; got "
                                         rf"values in \[{C}, {C}\]") as err:
        calls[loss]()
    assert err.value.__context__ is None and err.value.__cause__ is None


LANE_CALLS = {  # dygraph float32/float64 CPU calls that take the fast lane, (args, kwargs) as numpy
    "mutual_information_recursion": lambda lm, am, logits, symbols, boundary, ranges: ((lm[:, 1:, :4], lm[:, :, :3]), {}),
    "get_rnnt_logprobs": lambda lm, am, logits, symbols, boundary, ranges: ((lm, am, symbols, 0), {}),
    "get_rnnt_logprobs_joint": lambda lm, am, logits, symbols, boundary, ranges: ((logits, symbols, 0), {}),
    "get_rnnt_logprobs_pruned": lambda lm, am, logits, symbols, boundary, ranges: (
        (logits[:, :, :2], symbols, ranges, 0), {}),
    "rnnt_loss_simple": lambda lm, am, logits, symbols, boundary, ranges: ((lm, am, symbols, 0, boundary), {}),
    "rnnt_loss": lambda lm, am, logits, symbols, boundary, ranges: ((logits, symbols, 0, boundary), {}),
    "rnnt_loss_pruned": lambda lm, am, logits, symbols, boundary, ranges: (
        (logits[:, :, :2], symbols, ranges, 0, boundary), {"rnnt_type": "modified"}),
}


@pytest.mark.parametrize("fn", sorted(LANE_CALLS))
@pytest.mark.parametrize("wants_grad", [False, True])
def test_fast_lane_leaves_the_checks_to_the_kernels(fn, wants_grad, monkeypatch):
    """A dygraph float32/float64 CPU call runs no Python check of its tensors (the kernels check them), and
    gives what the checked path gives; a float16 call still takes the checked path."""
    import sys

    B, T, S, C = 2, 4, 3, 5
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=7)
    logits = lm[:, None] + am[:, :, None]
    ranges = _with_start(np.zeros((B, T), np.int64), 2)
    args, kwargs = LANE_CALLS[fn](lm, am, logits, symbols, boundary, ranges)
    tensors = [t(a, stop_gradient=not (wants_grad and a.dtype == np.float64)) for a in args if isinstance(a, np.ndarray)]
    it = iter(tensors)
    call_args = [next(it) if isinstance(a, np.ndarray) else a for a in args]
    expected = getattr(paddle_ext, fn)(*call_args, **kwargs)

    def refused(*a, **k):
        raise AssertionError("a Python check ran")

    checks = {"_check_common", "_check_float", "_check_lm_am", "_check_pruned", "check_px_py"}
    modules = [m for key, m in sys.modules.items() if key.startswith("paddle_ext.rnnt_loss.")]
    for module in modules + [sys.modules["paddle_ext.mutual_information"]]:  # every module that calls one
        for name in checks & set(vars(module)):
            monkeypatch.setattr(module, name, refused)
    got = getattr(paddle_ext, fn)(*call_args, **kwargs)
    for g, e in zip(paddle.utils.flatten(got), paddle.utils.flatten(expected)):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    halves = [x.astype("float16") if isinstance(x, paddle.Tensor) and x.dtype == paddle.float64 else x
              for x in call_args]
    with pytest.raises(AssertionError, match="a Python check ran"):
        getattr(paddle_ext, fn)(*halves, **kwargs)


@pytest.mark.parametrize("fn", ["get_rnnt_logprobs", "rnnt_loss_simple"])
def test_one_lm_row_for_every_s_is_refused_by_the_api(fn):
    # the simple op's kernel also takes lm [B, 1, C] (the smoothed loss's AM-only model); the API does not
    lm, am = paddle.zeros([2, 1, 5]), paddle.zeros([2, 4, 5])
    with pytest.raises(ValueError, match=rf"^{fn}: symbols must have shape \[B, S\] = \[2, 0\], got \[2, 3\]"):
        getattr(paddle_ext, fn)(lm, am, paddle.ones([2, 3], "int64"), 0)


@pytest.mark.parametrize("fn", ["get_rnnt_logprobs_pruned", "rnnt_loss_pruned"])
def test_pruned_s_range_beyond_s_plus_one_is_refused_without_frames(fn):
    # with T = 0 no range value shows it to the kernel
    logits, ranges = paddle.zeros([2, 0, 6, 4]), paddle.zeros([2, 0, 6], "int64")
    with pytest.raises(ValueError, match=rf"^{fn}: s_range = 6 exceeds S\+1 = 4"):
        getattr(paddle_ext, fn)(logits, paddle.ones([2, 3], "int64"), ranges, 0, rnnt_type="modified")


@pytest.mark.parametrize("B, T", [(2, 0), (0, 4)])
def test_pruned_loss_of_empty_logits(B, T):
    # no frames: no path for an item with symbols (inf), an empty one for an item without; no items: no losses
    S = 3
    logits = paddle.zeros([B, T, 2, 4])
    logits.stop_gradient = False
    symbols = paddle.ones([B, S], "int64")
    loss = paddle_ext.rnnt_loss_pruned(logits, symbols, paddle.zeros([B, T, 2], "int64"), 0, rnnt_type="modified",
                                       reduction="none")
    np.testing.assert_array_equal(loss.numpy(), np.full([B], np.inf, np.float32))
    (grad,) = paddle.grad(loss.sum(), logits, allow_unused=True)
    assert grad is None or (list(grad.shape) == [B, T, 2, 4] and not grad.numpy().any())


def test_pruning_errors():
    gx, gy = _lt(np.zeros((2, 3, 6))), _lt(np.zeros((2, 4, 5)))
    boundary = _lt(np.array([[0, 0, 3, 5]] * 2))
    with pytest.raises(ValueError, match="boundary is required"):
        paddle_ext.get_rnnt_prune_ranges(gx, gy, None, 2)
    with pytest.raises(ValueError, match="py_grad"):
        paddle_ext.get_rnnt_prune_ranges(gx, _lt(np.zeros((2, 3, 5))), boundary, 2)
    with pytest.raises(TypeError, match="s_range"):
        paddle_ext.get_rnnt_prune_ranges(gx, gy, boundary, 2.5)
    with pytest.raises(ValueError, match="ranges"):
        paddle_ext.do_rnnt_pruning(_lt(np.zeros((2, 5, 4))), _lt(np.zeros((2, 4, 4))), _lt(np.zeros((2, 6, 2), np.int64)))
    with pytest.raises(ValueError, match="s_range = 6 exceeds"):
        paddle_ext.rnnt_loss_pruned(_lt(np.zeros((2, 5, 6, 4))), _lt(np.zeros((2, 3), np.int64)),
                                    _lt(np.zeros((2, 5, 6), np.int64)), 0)


@pytest.mark.parametrize("rnnt_type", ["regular", "modified"])
def test_prune_ranges_and_pruning_static_match_dygraph(rnnt_type):
    B, T, S, C = 3, 10, 5, 4
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=18)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type=rnnt_type,
                                              return_grad=True)
    gx, gy = gx.numpy(), gy.numpy()

    def fn(gx, gy, boundary, am, lm):
        ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, boundary, 3)
        am_p, lm_p = paddle_ext.do_rnnt_pruning(am, lm, ranges)
        return ranges, am_p, lm_p

    expected = [o.numpy() for o in fn(t(gx), t(gy), t(boundary), t(am), t(lm))]
    check_output(fn, {"gx": gx, "gy": gy, "boundary": boundary, "am": am, "lm": lm}, lambda *a: expected,
                 modes=("static",))


def test_smoothed_am_only_part_sees_lm_only_through_its_unigram():
    """am_only_scale = 1: px = am[sym] + log u[sym] - log sum_c exp(am_c) u_c with u the unigram of
    the normalised lm rows; permuting lm rows inside each item keeps u, so the loss does not change."""
    lm, am, symbols, boundary = problem(seed=19)
    kw = dict(lm_only_scale=0.0, am_only_scale=1.0, boundary=t(boundary), reduction="none")
    base = paddle_ext.rnnt_loss_smoothed(t(lm), t(am), t(symbols), 0, **kw).numpy()
    perm = paddle_ext.rnnt_loss_smoothed(t(lm[:, ::-1].copy()), t(am), t(symbols), 0, **kw).numpy()
    np.testing.assert_allclose(perm, base, rtol=1e-10)
    # and it equals the full loss of log(u) + am, normalised per frame
    probs = np.exp(lm - lm.max(-1, keepdims=True))
    u = (probs / probs.sum(-1, keepdims=True)).mean(axis=(0, 1))
    logits = np.broadcast_to((np.log(u) + am)[:, :, None, :], (3, 7, 5, 5)).copy()
    np.testing.assert_allclose(base, refs.rnnt_loss(logits, symbols, 0, boundary), rtol=1e-8)
    lm_only = paddle_ext.rnnt_loss_smoothed(t(lm), t(am), t(symbols), 0, 1.0, 0.0, t(boundary), reduction="none")
    logits = np.broadcast_to(lm[:, None], (3, 7, 5, 5)).copy()
    np.testing.assert_allclose(lm_only.numpy(), refs.rnnt_loss(logits, symbols, 0, boundary), rtol=1e-8)


# ---------------------------------------------------------------------------------------------
# exact for any finite logits (the exp-space normaliser of the simple losses underflows past ~700)


def wide_problem(scale, B=2, T=4, S=3, C=5, seed=20):
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=C, seed=seed)
    return lm * scale, am * scale, symbols, boundary


# large logits: B=1, S=1, T=2, C=3, logits x 1e3 (px off by up to 57.5)
LARGE_LOGITS_CASE = (np.array([[[0.4, -1.2, 0.9], [-0.3, 1.1, -0.8]]]) * 1e3,
              np.array([[[1.3, -0.5, -1.0], [-0.9, 0.2, 1.4]]]) * 1e3, np.array([[1]]), None)


def _problems():
    yield "large_logits", LARGE_LOGITS_CASE
    for scale in (1.0, 30.0, 1e3, 1e4):
        yield f"x{scale:g}", wide_problem(scale)
    yield "x30 long", wide_problem(30.0, T=24, S=12, C=6)  # spreads > 745 inside the recursion's blocks


PROBLEMS = dict(_problems())


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("rnnt_type", TYPES)
def test_simple_logprobs_are_the_exact_log_softmax(name, rnnt_type):
    lm, am, symbols, boundary = PROBLEMS[name]
    bd = None if boundary is None else t(boundary)
    px, py = paddle_ext.get_rnnt_logprobs(t(lm), t(am), t(symbols), 0, rnnt_type, bd)
    ref_px, ref_py = refs.rnnt_logprobs(lm[:, None] + am[:, :, None], symbols, 0, boundary, rnnt_type)
    np.testing.assert_allclose(px.numpy(), ref_px, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(py.numpy(), ref_py, rtol=1e-9, atol=1e-9)
    # float32: the float64 result on the same (float32) inputs, to float32 rounding of values this large
    lm32, am32 = lm.astype(np.float32), am.astype(np.float32)
    px32, py32 = paddle_ext.get_rnnt_logprobs(t(lm32), t(am32), t(symbols), 0, rnnt_type, bd)
    ref_px, ref_py = refs.rnnt_logprobs(lm32[:, None].astype(np.float64) + am32[:, :, None], symbols, 0, boundary,
                                        rnnt_type)
    np.testing.assert_allclose(px32.numpy(), ref_px, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(py32.numpy(), ref_py, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("scales", [(0.1, 0.2), (0.0, 0.5), (0.5, 0.5), (0.6, 0.4)])
def test_smoothed_logprobs_are_exact(name, rnnt_type, scales):
    lm, am, symbols, boundary = PROBLEMS[name]
    bd = None if boundary is None else t(boundary)
    px, py = paddle_ext.get_rnnt_logprobs_smoothed(t(lm), t(am), t(symbols), 0, *scales, bd, rnnt_type)
    ref_px, ref_py = refs.rnnt_logprobs_smoothed(lm, am, symbols, 0, *scales, boundary, rnnt_type)
    np.testing.assert_allclose(px.numpy(), ref_px, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(py.numpy(), ref_py, rtol=1e-9, atol=1e-9)
    lm32, am32 = lm.astype(np.float32), am.astype(np.float32)
    px32, py32 = paddle_ext.get_rnnt_logprobs_smoothed(t(lm32), t(am32), t(symbols), 0, *scales, bd, rnnt_type)
    ref_px, ref_py = refs.rnnt_logprobs_smoothed(lm32, am32, symbols, 0, *scales, boundary, rnnt_type)
    np.testing.assert_allclose(px32.numpy(), ref_px, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(py32.numpy(), ref_py, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_simple_logprobs_grads_with_wide_logits(rnnt_type):
    """The exactly recomputed cells are differentiable too (dygraph and static)."""
    lm, am, symbols, boundary = wide_problem(1e3, B=1, T=3, S=2, C=3)

    def fn(lm, am, symbols, boundary):
        return paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0, rnnt_type, boundary)

    check_grad(fn, {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary}, ["lm", "am"], delta=1e-4)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("rnnt_type", TYPES)
def test_simple_and_smoothed_losses_with_wide_logits(name, rnnt_type):
    """Against the float64 NumPy recursion (needs mutual_information exact for any finite px/py)."""
    lm, am, symbols, boundary = PROBLEMS[name]
    if rnnt_type == "modified" and boundary is None and am.shape[1] < symbols.shape[1]:
        pytest.skip("modified needs T >= S")
    bd = None if boundary is None else t(boundary)
    got = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, bd, rnnt_type, reduction="none")
    ref = refs.rnnt_loss(lm[:, None] + am[:, :, None], symbols, 0, boundary, rnnt_type)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9, atol=1e-9)
    got = paddle_ext.rnnt_loss_smoothed(t(lm), t(am), t(symbols), 0, 0.1, 0.2, bd, rnnt_type, reduction="none")
    ref = refs.rnnt_loss_from_logprobs(*refs.rnnt_logprobs_smoothed(lm, am, symbols, 0, 0.1, 0.2, boundary, rnnt_type),
                                       boundary)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9, atol=1e-9)


def test_simple_logprobs_static_with_wide_logits():
    lm, am, symbols, boundary = wide_problem(1e3)

    def fn(lm, am, symbols, boundary):
        return paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0, boundary=boundary)

    check_output(fn, {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary},
                 lambda lm, am, sy, bd: refs.rnnt_logprobs(lm[:, None] + am[:, :, None], sy, 0, bd), rtol=1e-9)


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_simple_logprobs_export_with_wide_logits(scale, tmp_path):
    """The exported graph holds the fallback: paddle.inference runs it with nothing (1) or some (1e3)
    cells to recompute."""
    lm, am, symbols, boundary = wide_problem(scale)
    f32 = {"lm": lm.astype(np.float32), "am": am.astype(np.float32), "symbols": symbols, "boundary": boundary}
    out = check_export(lambda lm, am, sy, bd: paddle_ext.get_rnnt_logprobs(lm, am, sy, 0, boundary=bd), f32,
                       directory=str(tmp_path), rtol=1e-5)
    ref = refs.rnnt_logprobs(f32["lm"][:, None].astype(np.float64) + f32["am"][:, :, None], symbols, 0, boundary)
    for got, want in zip(out, ref):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# malformed ranges are an error; well-formed ranges that leave no path give that item an inf loss


def _with_start(start, R):
    return (np.asarray(start)[..., None] + np.arange(R)).astype(np.int64)


@pytest.mark.parametrize("rnnt_type", ["regular", "modified"])
@pytest.mark.parametrize("item,start,match", [
    (0, "all -3", r"ranges\[0, 0\] = \[-3, -3, -3\] is not s_begin \+ arange\(s_range\)"),
    (1, "not consecutive", r"ranges\[1, 2\] = \[2, 4, 3\] is not s_begin \+ arange\(s_range\)"),
    (0, [-1, 1, 2, 3, 4, 4, 4], r"ranges\[0, 0\] = \[-1, 0, 1\] does not fit in \[0, S\] = \[0, 6\]"),
    (0, [0, 1, 2, 3, 4, 4, 5], r"ranges\[0, 6\] = \[5, 6, 7\] does not fit in \[0, S\] = \[0, 6\]"),
    (0, [0, 1, 2, 3, 2, 4, 4], r"non-decreasing along T, but ranges\[0, 4, 0\] = 2 < ranges\[0, 3, 0\] = 3"),
])
def test_pruned_loss_rejects_invalid_ranges(rnnt_type, item, start, match):
    """k2's ranges: ranges[b, t] = s_begin[b, t] + arange(s_range) inside [0, S], s_begin non-decreasing."""
    B, T, S, R, C = 2, 7, 6, 3, 5
    _, _, symbols, _ = problem(B=B, T=T, S=S, C=C, seed=21)
    ranges = _with_start(np.broadcast_to([0, 1, 2, 3, 4, 4, 4], (B, T)), R)
    logits = t(np.random.default_rng(22).normal(size=(B, T, R, C)))
    ok = paddle_ext.rnnt_loss_pruned(logits, t(symbols), t(ranges), 0, rnnt_type=rnnt_type, reduction="none")
    assert np.isfinite(ok.numpy()).all()
    if start == "all -3":
        ranges[:] = -3
    elif start == "not consecutive":
        ranges[1, 2] = [2, 4, 3]
    else:
        ranges[item] = _with_start(start, R)
    with pytest.raises(ValueError, match=match):
        paddle_ext.rnnt_loss_pruned(logits, t(symbols), t(ranges), 0, rnnt_type=rnnt_type)


def test_pruned_loss_ranges_must_be_integers():
    with pytest.raises(TypeError, match="ranges must be an integer tensor, got float32"):
        paddle_ext.rnnt_loss_pruned(t(np.zeros((1, 2, 2, 3))), t(np.zeros((1, 1), np.int64)),
                                    t(np.zeros((1, 2, 2), np.float32)), 0)


def _has_path(start, R, S, row, rnnt_type):
    """Whether windows start[t] + arange(R) (one item, boundary row) hold a lattice path: a 0/-inf recursion."""
    T = len(start)
    inside = (np.arange(S + 1) >= start[:, None]) & (np.arange(S + 1) < start[:, None] + R)  # [T, S+1]
    mask = np.where(inside, 0.0, -np.inf).T  # [S+1, T]
    px = mask[:S]
    if rnnt_type == "regular":  # no symbol on frame T nor on t_end
        px = np.concatenate([px, np.full((S, 1), -np.inf)], axis=1)
        px[:, row[3]] = -np.inf
    elif rnnt_type == "constrained":
        px = px + mask[1:]
    return bool(np.isfinite(refs.mutual_information(px[None], mask[None], row[None])[0][0]))


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_pruned_loss_is_inf_exactly_where_the_ranges_leave_no_path(rnnt_type):
    """Each item's boundary (t_end < T, s_end < S) and the rnnt_type decide whether its windows hold a path;
    an item without one gets an inf loss and zero grads, the others their loss (no error for the batch)."""
    B, T, S, R, C = 3, 6, 4, 2, 5
    _, _, symbols, _ = problem(B=B, T=T, S=S, C=C, seed=23)
    rows = np.array([[0, 0, S, T], [0, 0, S - 1, T - 1], [0, 0, 2, T - 2]], np.int64)
    logits_np = np.random.default_rng(24).normal(size=(B, T, R, C))
    rng = np.random.default_rng(25)
    starts = [np.minimum(np.sort(rng.integers(0, S, size=T)), S + 1 - R) for _ in range(12)]
    starts += [np.minimum(np.arange(T) * k // 2, S + 1 - R) for k in (1, 2)]
    no_path = []
    for start in starts:
        ranges = t(_with_start(np.broadcast_to(start, (B, T)), R))
        logits = t(logits_np, False)
        loss = paddle_ext.rnnt_loss_pruned(logits, t(symbols), ranges, 0, t(rows), rnnt_type, reduction="none")
        loss.backward()  # the inf items' grads are zero
        expected = [not _has_path(start, R, S, row, rnnt_type) for row in rows]
        np.testing.assert_array_equal(np.isposinf(loss.numpy()), expected)
        assert np.isfinite(loss.numpy()[np.logical_not(expected)]).all()
        grad = logits.grad.numpy()
        assert np.isfinite(grad).all() and (grad[expected] == 0).all()
        assert (np.abs(grad[np.logical_not(expected)]).sum(axis=(1, 2, 3)) > 0).all()
        no_path += expected
    assert any(no_path) and not all(no_path)


# ---------------------------------------------------------------------------------------------
# higher-order grads: refused by the double-grad ops when a backward reaches them (a wrong number or a
# SystemError before), first order unchanged


def _losses(lm, am, symbols, boundary):
    B, T, C = am.shape
    S = symbols.shape[1]
    ranges = t(_with_start(np.broadcast_to(np.minimum(np.arange(T) // 2, S - 1), (B, T)), 2))
    return {
        "rnnt_loss_simple": lambda: paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary),
        "rnnt_loss_smoothed": lambda: paddle_ext.rnnt_loss_smoothed(lm, am, symbols, 0, 0.1, 0.1, boundary),
        "rnnt_loss": lambda: paddle_ext.rnnt_loss(lm.unsqueeze(1) + am.unsqueeze(2), symbols, 0, boundary),
        "rnnt_loss_pruned": lambda: paddle_ext.rnnt_loss_pruned(
            paddle_ext.do_rnnt_pruning(am, lm, ranges)[0] + paddle_ext.do_rnnt_pruning(am, lm, ranges)[1],
            symbols, ranges, 0, boundary),
    }


@pytest.mark.parametrize("op", ["rnnt_loss_simple", "rnnt_loss_smoothed", "rnnt_loss", "rnnt_loss_pruned"])
def test_higher_order_grads_are_refused(op):
    lm_np, am_np, symbols, _ = problem(seed=23)
    lm, am = t(lm_np, False), t(am_np, False)
    loss = _losses(lm, am, t(symbols), None)[op]
    # the message names the functions built on the op the backward reaches first (the loss among them)
    with pytest.raises(NotImplementedError, match=rf"{op}\b.*: higher-order grads are not supported"):
        gl, ga = paddle.grad(loss(), [lm, am], create_graph=True)
        paddle.grad((gl * gl).sum() + (ga * ga).sum(), [lm, am])
    # the gradient-penalty pattern (a SystemError "Unable to fill empty grad inputs" before)
    with pytest.raises(NotImplementedError, match=rf"{op}\b.*: higher-order grads are not supported"):
        (g,) = paddle.grad(loss(), am, create_graph=True)
        (g * g).sum().backward()
    # first order is unaffected: paddle.grad and backward agree, and match central differences
    gl, ga = paddle.grad(loss(), [lm, am])
    loss().backward()
    np.testing.assert_allclose(am.grad.numpy(), ga.numpy(), rtol=1e-12)
    np.testing.assert_allclose(lm.grad.numpy(), gl.numpy(), rtol=1e-12)
    i = (1, 2, 3)
    with paddle.no_grad():
        d = np.zeros_like(am_np)
        d[i] = 1e-6
        plus = float(_losses(lm, t(am_np + d), t(symbols), None)[op]())
        minus = float(_losses(lm, t(am_np - d), t(symbols), None)[op]())
    np.testing.assert_allclose(ga.numpy()[i], (plus - minus) / 2e-6, rtol=1e-5, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# export with dynamic dimensions: B, S, T are None in the InputSpecs (C stays static); the exported
# graph takes the sizes when it runs, at any size (jit.load and paddle.inference match dygraph)

DYN_C, DYN_S_RANGE = 5, 4
DYN_SIZES = ((2, 2, 5), (3, 4, 7))  # (B, S, T): s_range 4 is capped at S+1 = 3 at the first size only
DYN_SPECS = {"lm": ([None, None, DYN_C], "float32"), "am": ([None, None, DYN_C], "float32"),
             "symbols": ([None, None], "int64"), "boundary": ([None, 4], "int64"),
             "logits": ([None, None, None, DYN_C], "float32"), "px_grad": ([None, None, None], "float32"),
             "py_grad": ([None, None, None], "float32"), "ranges": ([None, None, None], "int64")}


def _dynamic_inputs(rnnt_type, B, S, T, seed):
    """Every input of the cases below at one size; px_grad/py_grad/ranges from the dygraph simple loss."""
    lm, am, symbols, boundary = problem(B=B, T=T, S=S, C=DYN_C, seed=seed)
    lm, am = lm.astype(np.float32), am.astype(np.float32)
    _, (gx, gy) = paddle_ext.rnnt_loss_simple(t(lm), t(am), t(symbols), 0, t(boundary), rnnt_type, return_grad=True)
    ranges = paddle_ext.get_rnnt_prune_ranges(gx, gy, t(boundary), DYN_S_RANGE).numpy()
    rng = np.random.default_rng(seed + 1)
    return {"lm": lm, "am": am, "symbols": symbols, "boundary": boundary, "px_grad": gx.numpy(), "py_grad": gy.numpy(),
            "ranges": ranges, "logits": rng.normal(size=(B, T, S + 1, DYN_C)).astype(np.float32),
            "pruned": rng.normal(size=(B, T, ranges.shape[2], DYN_C)).astype(np.float32)}


def _pruning(px_grad, py_grad, boundary, am, lm):
    ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, DYN_S_RANGE)
    return (ranges, *paddle_ext.do_rnnt_pruning(am, lm, ranges))


# name -> (fn(rnnt_type, *inputs), input names); "boundary?": only regular px uses the boundary (the others'
# graphs would not use that input)
DYN_CASES = {
    "get_rnnt_logprobs": (lambda ty, lm, am, sy, bd=None: paddle_ext.get_rnnt_logprobs(lm, am, sy, 0, ty, bd),
                          ["lm", "am", "symbols", "boundary?"]),
    "get_rnnt_logprobs_smoothed": (
        lambda ty, lm, am, sy, bd=None: paddle_ext.get_rnnt_logprobs_smoothed(lm, am, sy, 0, 0.1, 0.2, bd, ty),
        ["lm", "am", "symbols", "boundary?"]),
    "get_rnnt_logprobs_joint": (lambda ty, lg, sy, bd=None: paddle_ext.get_rnnt_logprobs_joint(lg, sy, 0, bd, ty),
                                ["logits", "symbols", "boundary?"]),
    # no boundary: the delay penalty's middle frame comes from the dynamic T
    "rnnt_loss_simple": (lambda ty, lm, am, sy: paddle_ext.rnnt_loss_simple(
        lm, am, sy, 0, None, ty, delay_penalty=0.3, reduction="none", return_grad=True), ["lm", "am", "symbols"]),
    "rnnt_loss_smoothed": (lambda ty, lm, am, sy, bd: paddle_ext.rnnt_loss_smoothed(
        lm, am, sy, 0, 0.2, 0.1, bd, ty, delay_penalty=0.3, reduction="none", return_grad=True),
        ["lm", "am", "symbols", "boundary"]),
    "rnnt_loss": (lambda ty, lg, sy: paddle_ext.rnnt_loss(lg, sy, 0, None, ty, delay_penalty=0.3, reduction="sum"),
                  ["logits", "symbols"]),
    "get_rnnt_prune_ranges+do_rnnt_pruning": (lambda ty, gx, gy, bd, am, lm: _pruning(gx, gy, bd, am, lm),
                                              ["px_grad", "py_grad", "boundary", "am", "lm"]),
    "rnnt_loss_pruned": (lambda ty, lg, sy, rg, bd: paddle_ext.rnnt_loss_pruned(lg, sy, rg, 0, bd, ty, reduction="none"),
                         ["pruned", "symbols", "ranges", "boundary"]),
}


def _serve(prefix, names, cases, loaded=True, predictor=True):
    """(jit.load outputs, paddle.inference predictor outputs) of the model at prefix for each case's inputs."""
    import paddle.inference as paddle_infer  # noqa: PLC0415

    layer = paddle.jit.load(prefix) if loaded else None
    if predictor:
        config = paddle_infer.Config(prefix + ".json", prefix + ".pdiparams")
        config.disable_gpu()
        config.disable_glog_info()
        predictor = paddle_infer.create_predictor(config)
    for arrays in cases:
        got = served = None
        if layer is not None:
            got = [g.numpy() for g in paddle.utils.flatten(layer(*[paddle.to_tensor(a) for a in arrays]))]
        if predictor:
            for name, a in zip(names, arrays):
                handle = predictor.get_input_handle(name)
                handle.reshape(list(a.shape))
                handle.copy_from_cpu(a)
            predictor.run()
            served = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
        yield got, served


class _Model(paddle.nn.Layer):
    """fn(rnnt_type, *inputs) as a Layer with flat outputs (to_static needs named arguments)."""

    def __init__(self, fn, rnnt_type):
        super().__init__()
        self._fn, self._rnnt_type = fn, rnnt_type

    def forward(self, a, b, c=None, d=None, e=None):
        return paddle.utils.flatten(self._fn(self._rnnt_type, *[x for x in (a, b, c, d, e) if x is not None]))


def _flat(out):
    return [o.numpy() for o in paddle.utils.flatten(out)]


def _export_dynamic(case, rnnt_type, prefix):
    """Exports DYN_CASES[case] with its dynamic specs; returns the input names."""
    fn, names = DYN_CASES[case]
    names = [n.rstrip("?") for n in names if rnnt_type == "regular" or not n.endswith("?")]
    spec_names = ["logits" if n == "pruned" else n for n in names]
    specs = [paddle.static.InputSpec(DYN_SPECS[n][0], DYN_SPECS[n][1], name) for n, name in zip(spec_names, names)]
    paddle.jit.save(paddle.jit.to_static(_Model(fn, rnnt_type), input_spec=specs, full_graph=True), prefix)
    return names


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("case", list(DYN_CASES))
def test_export_with_dynamic_batch_symbols_and_frames(case, rnnt_type, tmp_path):
    if case == "get_rnnt_prune_ranges+do_rnnt_pruning" and rnnt_type == "constrained":
        pytest.skip("the ranges see only px_grad's layout: constrained is modified's")
    fn = DYN_CASES[case][0]
    prefix = str(tmp_path / "model")
    names = _export_dynamic(case, rnnt_type, prefix)
    cases = [[_dynamic_inputs(rnnt_type, B, S, T, seed=30 + B)[n] for n in names] for B, S, T in DYN_SIZES]
    expected = [_flat(fn(rnnt_type, *[t(a) for a in arrays])) for arrays in cases]
    if case.startswith("get_rnnt_prune_ranges"):
        assert [e[0].shape[2] for e in expected] == [3, 4]  # s_range capped at S+1 at the first size only
    for (got, served), want in zip(_serve(prefix, names, cases), expected):
        assert len(got) == len(served) == len(want)
        for g, s, w in zip(got, served, want):
            assert g.shape == s.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(s, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case,mismatch", [
    (case, mismatch) for case in ("rnnt_loss_simple", "rnnt_loss")
    for mismatch in ("one symbol short", "one symbol too many", "one batch item short")
] + [("rnnt_loss_pruned", "one symbol short"), ("rnnt_loss_pruned", "one batch item short")])
def test_exported_losses_reject_inconsistent_sizes_when_they_run(case, mismatch, tmp_path):
    """Sizes that are dynamic in the graph are checked by the ops when it runs: a Python exception from
    jit.load and from the predictor (Paddle's InvalidArgumentError as ValueError, or OutOfRangeError as
    IndexError for ranges past S), never a wrong loss. (Longer symbols are consistent with pruned ranges
    and boundaries inside [0, S].)"""
    prefix = str(tmp_path / "model")
    names = _export_dynamic(case, "regular", prefix)
    inputs = _dynamic_inputs("regular", *DYN_SIZES[1], seed=40)
    symbols = inputs["symbols"]
    inputs["symbols"] = {"one symbol short": symbols[:, :-1], "one batch item short": symbols[:-1],
                         "one symbol too many": np.concatenate([symbols, symbols[:, :1]], 1)}[mismatch]
    for where in ({"predictor": False}, {"loaded": False}):
        with pytest.raises((ValueError, IndexError), match="InvalidArgumentError|OutOfRangeError"):
            next(_serve(prefix, names, [[inputs[n] for n in names]], **where))


@pytest.mark.parametrize("case", list(DYN_CASES))
def test_to_static_default_mode_matches_dygraph(case):
    """paddle.jit.to_static's default (SOT, full_graph=False) at two sizes (it failed on closures over tensors)."""
    fn, names = DYN_CASES[case]
    names = [n.rstrip("?") for n in names]
    model = paddle.jit.to_static(_Model(fn, "regular"))
    for B, S, T in DYN_SIZES:
        arrays = [_dynamic_inputs("regular", B, S, T, seed=50 + B)[n] for n in names]
        want = _flat(fn("regular", *[t(a) for a in arrays]))
        got = _flat(model(*[t(a) for a in arrays]))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_prune_ranges_with_a_dynamic_frame_count_need_the_regular_minimum_s_range():
    """With T dynamic the layout of px_grad (regular [B, S, T+1] or modified [B, S, T]) is known only when
    the graph runs, so s_range must keep a path for regular RNN-T: >= 2."""
    def fn(px_grad, py_grad, boundary):
        return paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, 1)

    specs = [paddle.static.InputSpec([None, None, None], "float32"), paddle.static.InputSpec([None, None, None], "float32"),
             paddle.static.InputSpec([None, 4], "int64")]
    with pytest.raises(ValueError, match=r"s_range must be >= 2 for regular \(or, with a dynamic T, unknown\) RNN-T"):
        paddle.jit.to_static(fn, input_spec=specs, full_graph=True).concrete_program  # noqa: B018


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("used", ["px", "py"])
def test_simple_logprobs_grads_of_one_output_count_the_other_as_zero(rnnt_type, used):
    """paddle.grad of px alone (or py alone): Paddle hands the grad op no grad for the unused output; the
    result equals the grads of both outputs with a zero upstream grad for the unused one."""
    lm, am, symbols, boundary = PROBLEMS[sorted(PROBLEMS)[0]]
    lm_t, am_t = t(lm, stop_gradient=False), t(am, stop_gradient=False)
    bd = None if boundary is None else t(boundary)
    px, py = paddle_ext.get_rnnt_logprobs(lm_t, am_t, t(symbols), 0, rnnt_type, bd)
    out = px if used == "px" else py
    g = np.random.default_rng(7).normal(size=out.shape)
    alone = paddle.grad(out, [lm_t, am_t], t(g), retain_graph=True)
    zeros = [t(np.zeros(o.shape)) for o in (px, py)]
    zeros[0 if used == "px" else 1] = t(g)
    both = paddle.grad([px, py], [lm_t, am_t], zeros)
    for a, b in zip(alone, both):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --------------------------------------------------------- index dtypes, boundary_from_lengths, spellings

INDEX_CALLS = {  # every entry point with an integer index argument: (its numpy args, kwargs), ranges where it takes them
    "mutual_information_recursion": lambda lm, am, lg, sy, bd, rg: ((lm[:, 1:, :4], lm[:, :, :4], bd.clip(0, 3)), {}),
    "joint_mutual_information_recursion": lambda lm, am, lg, sy, bd, rg: (
        ([lm[:, 1:, :4]], [lm[:, :, :4]], bd.clip(0, 3)), {}),
    "get_rnnt_logprobs": lambda lm, am, lg, sy, bd, rg: ((lm, am, sy, 0, "regular", bd), {}),
    "rnnt_loss_simple": lambda lm, am, lg, sy, bd, rg: ((lm, am, sy, 0, bd), {}),
    "get_rnnt_logprobs_smoothed": lambda lm, am, lg, sy, bd, rg: ((lm, am, sy, 0, 0.1, 0.1, bd), {}),
    "rnnt_loss_smoothed": lambda lm, am, lg, sy, bd, rg: ((lm, am, sy, 0, 0.1, 0.1, bd), {}),
    "get_rnnt_logprobs_joint": lambda lm, am, lg, sy, bd, rg: ((lg, sy, 0, bd), {}),
    "rnnt_loss": lambda lm, am, lg, sy, bd, rg: ((lg, sy, 0, bd), {"clamp": 0.1}),
    "get_rnnt_logprobs_pruned": lambda lm, am, lg, sy, bd, rg: ((lg[:, :, :2], sy, rg, 0, bd), {}),
    "rnnt_loss_pruned": lambda lm, am, lg, sy, bd, rg: ((lg[:, :, :2], sy, rg, 0, bd), {}),
    "tdt_loss": lambda lm, am, lg, sy, bd, rg: ((np.concatenate([lg, lg[..., :2]], -1), sy, [0, 1], 0, bd), {}),
    "multiblank_rnnt_loss": lambda lm, am, lg, sy, bd, rg: ((lg, sy, [2], 4, bd), {}),
    "do_rnnt_pruning": lambda lm, am, lg, sy, bd, rg: ((am, lm, rg), {}),
}


def _index_problem():
    B, T, S, C = 2, 5, 3, 5
    lm, am, symbols, _ = problem(B=B, T=T, S=S, C=C, seed=40)
    logits = np.random.default_rng(41).normal(size=(B, T, S + 1, C))
    boundary = np.array([[0, 0, 3, 5], [0, 0, 2, 4]], np.int64)
    return lm, am, logits, symbols, boundary, _with_start(np.array([[0, 0, 1, 1, 2], [0, 1, 1, 1, 1]]), 2)


def _run_index_call(fn, as_int32):
    """fn's outputs and its floating inputs' grads, its index arrays int32 or int64."""
    args, kwargs = INDEX_CALLS[fn](*_index_problem())

    def tensor(a):
        if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
            return [tensor(x) for x in a]
        if not isinstance(a, np.ndarray):
            return a
        x = paddle.to_tensor(a.astype(np.int32) if as_int32 and a.dtype == np.int64 else a)
        x.stop_gradient = a.dtype != np.float64
        return x

    inputs = [tensor(a) for a in args]
    floats = [x for a in inputs for x in (a if isinstance(a, list) else [a])
              if isinstance(x, paddle.Tensor) and x.dtype == paddle.float64]
    outs = getattr(paddle_ext, fn)(*inputs, **kwargs)
    outs = [o for o in (outs if isinstance(outs, (tuple, list)) else [outs])]
    total = sum(paddle.where(paddle.isfinite(o), o, paddle.zeros_like(o)).sum() for o in outs)
    grads = paddle.grad(total, floats, allow_unused=True)
    return [o.numpy() for o in outs] + [g.numpy() for g in grads if g is not None]


@pytest.mark.parametrize("fn", sorted(INDEX_CALLS))
def test_int32_and_int64_index_arguments_give_the_same_results(fn):
    """boundary, symbols and ranges: int32 goes where int64 goes (cast once where the function starts)."""
    for got, want in zip(_run_index_call(fn, True), _run_index_call(fn, False)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn", ["rnnt_loss", "tdt_loss", "mutual_information_recursion"])
def test_boundary_of_another_integer_dtype_is_refused(fn):
    args, kwargs = INDEX_CALLS[fn](*_index_problem())
    args = [a if not isinstance(a, np.ndarray) else
            paddle.to_tensor(a.astype(np.int16) if a.shape[-1:] == (4,) and a.dtype == np.int64 else a) for a in args]
    with pytest.raises(TypeError, match=rf"^{fn}: boundary must be int32 or int64, got int16"):
        getattr(paddle_ext, fn)(*args, **kwargs)


@pytest.mark.parametrize("dtypes", [("int64", "int64"), ("int32", "int32"), ("int32", "int64")])
def test_boundary_from_lengths(dtypes):
    logit_lengths, target_lengths = np.array([7, 5, 6]), np.array([4, 2, 0])
    got = paddle_ext.boundary_from_lengths(paddle.to_tensor(logit_lengths.astype(dtypes[0])),
                                           paddle.to_tensor(target_lengths.astype(dtypes[1])))
    assert got.dtype == paddle.int64 and got.shape == [3, 4]
    np.testing.assert_array_equal(got.numpy(), [[0, 0, 4, 7], [0, 0, 2, 5], [0, 0, 0, 6]])
    logits = np.random.default_rng(42).normal(size=(3, 7, 5, 5))
    symbols = t(np.random.default_rng(43).integers(1, 5, size=(3, 4)))
    np.testing.assert_allclose(paddle_ext.rnnt_loss(t(logits), symbols, 0, got, reduction="none").numpy(),
                               refs.rnnt_loss(logits, symbols.numpy(), 0, got.numpy()), rtol=1e-12)


def test_boundary_from_lengths_in_a_static_program():
    with paddle.pir_utils.IrGuard():
        paddle.enable_static()
        try:
            main = paddle.static.Program()
            with paddle.static.program_guard(main):
                a, b = paddle.static.data("a", [None], "int32"), paddle.static.data("b", [None], "int64")
                out = paddle_ext.boundary_from_lengths(a, b)
            (got,) = paddle.static.Executor().run(main, feed={"a": np.array([3, 4], np.int32),
                                                             "b": np.array([1, 0], np.int64)}, fetch_list=[out])
        finally:
            paddle.disable_static()
    np.testing.assert_array_equal(got, [[0, 0, 1, 3], [0, 0, 0, 4]])


@pytest.mark.parametrize("args,exc,match", [
    (([3, 4], np.array([1, 2])), TypeError, r"logit_lengths must be a paddle.Tensor, got list"),
    ((np.array([3.0, 4.0]), np.array([1, 2])), TypeError, r"logit_lengths must be an integer tensor, got float64"),
    ((np.array([3, 4]), np.array([[1, 2]])), ValueError, r"target_lengths must be 1-D \[B\], got shape \[1, 2\]"),
    ((np.array([3, 4]), np.array([1, 2, 3])), ValueError,
     r"logit_lengths and target_lengths must both be \[B\], got \[2\] and \[3\]"),
    ((np.array([3, -4]), np.array([1, 2])), ValueError, r"logit_lengths must be >= 0, got logit_lengths\[1\] = -4"),
])
def test_boundary_from_lengths_errors(args, exc, match):
    args = [paddle.to_tensor(a) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(exc, match="^boundary_from_lengths: " + match):
        paddle_ext.boundary_from_lengths(*args)


@pytest.mark.parametrize("spelling", [np.str_, type("Sub", (str,), {})])
def test_string_options_are_taken_in_any_str_spelling(spelling):
    """rnnt_type and reduction as a str subclass or NumPy's str_ (Paddle's own losses take them: they compare by
    value): the same results as the plain strings, everywhere (normalized where each function starts)."""
    lm, am, logits, symbols, boundary, _ = _index_problem()
    for rnnt_type in TYPES:
        for reduction in ("none", "mean", "sum"):
            kw = dict(rnnt_type=spelling(rnnt_type), reduction=spelling(reduction))
            plain = dict(rnnt_type=rnnt_type, reduction=reduction)
            for fn, args in (("rnnt_loss", (logits, symbols, 0, boundary)),
                             ("rnnt_loss_simple", (lm, am, symbols, 0, boundary))):
                tensors = [t(a) if isinstance(a, np.ndarray) else a for a in args]
                got = getattr(paddle_ext, fn)(*tensors, **kw)
                want = getattr(paddle_ext, fn)(*tensors, **plain)
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    tdt_logits = t(np.concatenate([logits, logits[..., :2]], -1))
    got = paddle_ext.tdt_loss(tdt_logits, t(symbols), [0, 1], 0, reduction=spelling("sum"))
    np.testing.assert_array_equal(got.numpy(), paddle_ext.tdt_loss(tdt_logits, t(symbols), [0, 1], 0,
                                                                   reduction="sum").numpy())
