"""The joiner fused into the RNN-T loss: rnnt_loss_fused_joiner equals rnnt_loss / rnnt_loss_pruned on the
composed joiner act(am[:, :, None] + lm[:, None]) @ weight + bias, loss and the grads of am, lm, weight, bias."""

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ext
import refs
from op_test import analytic_grads, check_grad, check_output, static_grads

TYPES = ["regular", "modified", "constrained"]
ACTIVATIONS = ["tanh", "relu", "identity"]


def joiner_problem(B=3, T=6, S=4, J=5, C=7, seed=0, scale=1.0, dtype="float64"):
    rng = np.random.default_rng(seed)
    am = rng.normal(size=(B, T, J)) * scale
    lm = rng.normal(size=(B, S + 1, J)) * scale
    weight = rng.normal(size=(J, C))
    bias = rng.normal(size=(C,))
    symbols = rng.integers(0, C, size=(B, S)).astype(np.int64)
    Ts = np.array([T] + list(rng.integers(S, T + 1, size=B - 1)))[:B]
    Ss = np.array([S] + list(rng.integers(1, S + 1, size=B - 1)))[:B]
    boundary = np.stack([np.zeros(B), np.zeros(B), Ss, Ts], 1).astype(np.int64)
    return [a.astype(dtype) for a in (am, lm, weight, bias)], symbols, boundary


def t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


def composed(am, lm, weight, bias, activation, ranges=None):
    if ranges is None:
        x = am.unsqueeze(2) + lm.unsqueeze(1)
    else:
        am, lm = paddle_ext.do_rnnt_pruning(am, lm, ranges)
        x = am + lm
    x = {"tanh": paddle.tanh, "relu": F.relu, "identity": lambda v: v}[activation](x)
    return F.linear(x, weight, bias)


def both(arrays, symbols, termination, *, activation="tanh", bias=True, ranges=None, weight_grads=None, **kw):
    """(fused loss, [grads]), (composed loss, [grads]) for the same arrays; grads of am, lm, weight(, bias)."""
    out = []
    for fused in (True, False):
        am, lm, w, b = (t(a, False) for a in arrays)
        b = b if bias else None
        args = (t(symbols), termination)
        rg = None if ranges is None else t(ranges)
        if fused:
            loss = paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, *args, ranges=rg, activation=activation, **kw)
        elif ranges is None:
            loss = paddle_ext.rnnt_loss(composed(am, lm, w, b, activation), *args, **kw)
        else:
            loss = paddle_ext.rnnt_loss_pruned(composed(am, lm, w, b, activation, rg), t(symbols), rg, termination,
                                               **kw)
        g = paddle.to_tensor(weight_grads) if weight_grads is not None else None
        (loss if g is None else loss * g).sum().backward()
        grads = [am.grad, lm.grad, w.grad] + ([b.grad] if bias else [])
        out.append((loss.numpy(), [x.numpy() for x in grads]))
    return out


def assert_same(fused, ref, rtol=1e-9, atol=1e-12):
    np.testing.assert_allclose(fused[0], ref[0], rtol=rtol, atol=atol)
    for name, a, b in zip(("am", "lm", "weight", "bias"), fused[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_float64_equals_the_composed_joiner(rnnt_type, activation, with_boundary):
    arrays, symbols, boundary = joiner_problem(seed=1)
    bd = t(boundary) if with_boundary else None
    fused, ref = both(arrays, symbols, 2, activation=activation, boundary=bd, rnnt_type=rnnt_type,
                      reduction="none", weight_grads=[0.5, 1.0, 2.0])
    assert np.isfinite(ref[0]).all()
    assert_same(fused, ref)


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_delay_penalty_fastemit_and_reductions(rnnt_type, reduction):
    arrays, symbols, boundary = joiner_problem(seed=2, B=2, T=7, S=3)
    fused, ref = both(arrays, symbols, 0, boundary=t(boundary), rnnt_type=rnnt_type, delay_penalty=0.3,
                      fastemit_lambda=0.5, reduction=reduction)
    assert_same(fused, ref)


def test_without_bias_and_symbol_equal_to_the_blank():
    arrays, symbols, _ = joiner_problem(seed=3, C=4)
    symbols[0, :2] = 1  # the blank below
    fused, ref = both(arrays, symbols, 1, bias=False, reduction="sum")
    assert_same(fused, ref)


@pytest.mark.parametrize("scale", [30.0, 1e4])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_wide_inputs(scale, activation):
    """Saturated tanh, relu's kink and logits spread over thousands: still the composed loss to 1e-9."""
    arrays, symbols, _ = joiner_problem(seed=4, scale=scale)
    fused, ref = both(arrays, symbols, 3, activation=activation, reduction="none")
    assert_same(fused, ref, atol=1e-9 * max(1.0, np.abs(ref[0]).max()))


def test_many_blocks():
    """A vocabulary wide enough that each block holds a frame or two: blocks never change a digit that matters."""
    arrays, symbols, boundary = joiner_problem(B=2, T=5, S=3, J=4, C=30000, seed=5)
    fused, ref = both(arrays, symbols, 7, boundary=t(boundary), reduction="sum")
    assert_same(fused, ref)


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_pruned_equals_rnnt_loss_pruned_on_the_pruned_joiner(rnnt_type, activation):
    arrays, symbols, boundary = joiner_problem(B=3, T=8, S=5, seed=6)
    rng = np.random.default_rng(7)
    px_grad = paddle.to_tensor(rng.random((3, 5, 8 + (rnnt_type == "regular"))))
    py_grad = paddle.to_tensor(rng.random((3, 6, 8)))
    ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, t(boundary), 3).numpy()
    fused, ref = both(arrays, symbols, 0, activation=activation, ranges=ranges, boundary=t(boundary),
                      rnnt_type=rnnt_type, reduction="none")
    finite = np.isfinite(ref[0])
    assert finite.any()
    np.testing.assert_array_equal(np.isfinite(fused[0]), finite)
    assert_same(fused, ref)


def test_float32_within_gemm_rounding():
    arrays, symbols, boundary = joiner_problem(B=2, T=20, S=6, J=64, C=300, seed=8)
    ref = both(arrays, symbols, 0, boundary=t(boundary), reduction="none")[0]
    fused = both([a.astype("float32") for a in arrays], symbols, 0, boundary=t(boundary), reduction="none")[0]
    assert fused[1][0].dtype == np.float32
    np.testing.assert_allclose(fused[0], ref[0], rtol=2e-5)
    for a, b in zip(fused[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize("kind", ["full", "tdt"])
def test_float32_grads_below_the_flush_only_are_dropped(kind):
    """Wide logits make many lattice nodes unlikely: a few % of their logits grads lie below 2^16 x float32's
    smallest normal, which the CPU backward gives its GEMMs as zeros (joiner_blocks.h). The grads stay float64's
    to float32 rounding; a unit whose logits grads are ~1e-24 (bias -40, never emitted) keeps its weight grads
    (~1e-22), one whose are mostly below the flush (bias -72) gets no more than float64's ~1e-33."""
    durations = [0, 1, 2, 4]
    C = 205 + (len(durations) if kind == "tdt" else 0)
    arrays, symbols, boundary = joiner_problem(B=2, T=12, S=5, J=48, C=C, seed=24, scale=4.0)
    symbols %= 200
    arrays[3][198], arrays[3][199] = -40.0, -72.0  # (token units, not emitted)
    if kind == "tdt":
        fused_fn = lambda am, lm, w, b: paddle_ext.tdt_loss_fused_joiner(am, lm, w, b, t(symbols), durations, 0,
                                                                          t(boundary), "sum")
        loss_fn = lambda x: paddle_ext.tdt_loss(x, t(symbols), durations, 0, t(boundary), "sum")
    else:
        fused_fn = lambda am, lm, w, b: paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, t(symbols), 0, t(boundary),
                                                                           reduction="sum")
        loss_fn = lambda x: paddle_ext.rnnt_loss(x, t(symbols), 0, t(boundary), reduction="sum")
    x = t(composed(*(t(a) for a in arrays), "tanh").numpy(), False)
    (logits_grad,) = paddle.grad(loss_fn(x), [x])
    g = np.abs(logits_grad.numpy())
    flush = np.finfo(np.float32).tiny * 65536
    assert ((g > 0) & (g < flush)).mean() > 0.01  # the flush has work to do
    results = []
    for dtype in ("float64", "float32"):
        inputs = [t(a.astype(dtype), False) for a in arrays]
        value = fused_fn(*inputs)
        results.append([value.numpy()] + [v.numpy() for v in paddle.grad(value, inputs)])
    ref, fused = results
    np.testing.assert_allclose(fused[0], ref[0], rtol=2e-5)
    for name, a, b in zip(("am", "lm", "weight", "bias"), fused[1:], ref[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5 * np.abs(b).max(), err_msg=name)
    kept, dropped = ref[3][:, 198], ref[3][:, 199]
    assert 1e-30 < np.abs(kept).max() < 1e-20 and 0 < np.abs(dropped).max() < 1e-30
    np.testing.assert_allclose(fused[3][:, 198], kept, rtol=1e-3, atol=1e-3 * np.abs(kept).max())
    assert np.abs(fused[3][:, 199]).max() <= np.abs(dropped).max()
    np.testing.assert_allclose(fused[4][198:200], ref[4][198:200], rtol=1e-3)  # (bias grads: summed unflushed)


def test_float16_inputs_compute_in_float32():
    arrays, symbols, _ = joiner_problem(seed=9)
    half = [t(a.astype("float16"), False) for a in arrays]
    loss = paddle_ext.rnnt_loss_fused_joiner(*half, t(symbols), 0, reduction="sum")
    assert loss.dtype == paddle.float16
    loss.backward()
    assert all(x.grad.dtype == paddle.float16 for x in half)
    ref = both([a.astype("float16").astype("float64") for a in arrays], symbols, 0, reduction="sum")[1]
    np.testing.assert_allclose(float(loss), ref[0], rtol=2e-3)
    np.testing.assert_allclose(half[2].grad.numpy().astype("float64"), ref[1][2], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("B, T", [(0, 4), (2, 0)])
def test_empty_batch_or_frames(B, T):
    arrays, symbols, _ = joiner_problem(B=2, seed=10)
    arrays = [arrays[0][:B, :T], arrays[1][:B], arrays[2], arrays[3]]
    fused, ref = both(arrays, symbols[:B], 0, reduction="none")
    assert_same(fused, ref)

# ------------------------------------------------------------------------------------------ grad clamp


def chain_rule_grads(arrays, logits_grad):
    """The grads of am, lm, weight, bias of the tanh joiner (NumPy, float64) from a given grad of its full
    logits [B, T, S+1, C]."""
    am, lm, weight, _ = arrays
    h = np.tanh(am[:, :, None] + lm[:, None])
    pre = (logits_grad @ weight.T) * (1 - h * h)
    return [pre.sum(2), pre.sum(1), np.einsum("btuj,btuc->jc", h, logits_grad), logits_grad.sum((0, 1, 2))]


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_clamp_is_the_chain_rule_through_the_clamped_logits_grads(rnnt_type, reduction):
    """clamp: each logit's grad w.r.t. its item's loss (FastEmit, delay penalty included) clamped, times the item's
    upstream grad, then through the joiner: the float64 reference and the composed joiner with rnnt_loss's clamp,
    to 1e-9; the loss the unclamped one."""
    arrays, symbols, boundary = joiner_problem(seed=40, scale=3.0)
    B = len(symbols)
    weights = [0.5, 1.0, 2.0] if reduction == "none" else None
    kw = dict(boundary=t(boundary), rnnt_type=rnnt_type, delay_penalty=0.1, fastemit_lambda=0.4, reduction=reduction,
              weight_grads=weights)
    fused, ref = both(arrays, symbols, 2, clamp=0.05, **kw)
    assert_same(fused, ref)
    plain = both(arrays, symbols, 2, **kw)[0]
    np.testing.assert_array_equal(fused[0], plain[0])
    am, lm, weight, bias = arrays
    logits = np.tanh(am[:, :, None] + lm[:, None]) @ weight + bias
    up = {"none": np.asarray(weights), "mean": np.full(B, 1.0 / B), "sum": np.ones(B)}[reduction]
    own = refs.rnnt_loss_grad(logits, symbols, 2, boundary, rnnt_type, 0.1, 0.4)
    assert (np.abs(own) > 0.05).any(), "the clamp must bite"
    want = chain_rule_grads(arrays, refs.rnnt_loss_grad(logits, symbols, 2, boundary, rnnt_type, 0.1, 0.4, up, 0.05))
    for name, got, w in zip(("am", "lm", "weight", "bias"), fused[1], want):
        np.testing.assert_allclose(got, w, rtol=1e-9, atol=1e-12, err_msg=name)
    assert not np.allclose(fused[1][2], plain[1][2])


@pytest.mark.parametrize("rnnt_type", TYPES)
def test_pruned_clamp_equals_rnnt_loss_pruneds_clamp(rnnt_type):
    arrays, symbols, boundary = joiner_problem(B=3, T=8, S=5, seed=41, scale=3.0)
    rng = np.random.default_rng(42)
    px_grad = paddle.to_tensor(rng.random((3, 5, 8 + (rnnt_type == "regular"))))
    py_grad = paddle.to_tensor(rng.random((3, 6, 8)))
    ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, t(boundary), 3).numpy()
    kw = dict(activation="relu", ranges=ranges, boundary=t(boundary), rnnt_type=rnnt_type, reduction="none",
              fastemit_lambda=0.2, weight_grads=[1.5, 0.5, 1.0])
    fused, ref = both(arrays, symbols, 0, clamp=0.05, **kw)
    assert np.isfinite(ref[0]).any()
    assert_same(fused, ref)
    plain = both(arrays, symbols, 0, **kw)[0]
    np.testing.assert_array_equal(fused[0], plain[0])
    assert not np.allclose(fused[1][2], plain[1][2])  # the clamp bites


@pytest.mark.parametrize("clamp", [-1.0, 0.0, -3])
def test_clamp_zero_or_negative_is_off(clamp):
    arrays, symbols, boundary = joiner_problem(seed=43, scale=3.0)
    with_clamp = both(arrays, symbols, 1, boundary=t(boundary), reduction="sum", clamp=clamp)[0]
    without = both(arrays, symbols, 1, boundary=t(boundary), reduction="sum")[0]
    np.testing.assert_array_equal(with_clamp[0], without[0])
    for a, b in zip(with_clamp[1], without[1]):
        np.testing.assert_array_equal(a, b)


def test_clamp_float32_within_gemm_rounding():
    arrays, symbols, boundary = joiner_problem(B=2, T=20, S=6, J=64, C=300, seed=44, scale=2.0)
    ref = both(arrays, symbols, 0, boundary=t(boundary), reduction="mean", clamp=0.01)[0]
    fused = both([a.astype("float32") for a in arrays], symbols, 0, boundary=t(boundary), reduction="mean",
                 clamp=0.01)[0]
    np.testing.assert_allclose(fused[0], ref[0], rtol=2e-5)
    for a, b in zip(fused[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize("ranged", [False, True])
def test_clamp_in_static_programs_equals_dygraph_and_the_composed_joiner(ranged):
    """PIR and legacy-IR programs: the grads of all four joiner inputs with the clamp on (numeric differences do
    not apply: the clamped grad is no derivative), against dygraph and the composed joiner's."""
    arrays, symbols, boundary = joiner_problem(B=2, T=6, S=4, J=3, C=4, seed=45, scale=3.0)
    inputs = dict(am=arrays[0], lm=arrays[1], weight=arrays[2], bias=arrays[3], symbols=symbols)
    if ranged:
        inputs["ranges"] = np.repeat(np.minimum(np.arange(6) // 2, 2)[None, :, None] + np.arange(3), 2, 0)
    wrt = ["am", "lm", "weight", "bias"]

    def fn(am, lm, weight, bias, symbols, ranges=None):
        return paddle_ext.rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, 1, delay_penalty=0.1, ranges=ranges,
                                                 reduction="none", clamp=0.03)

    def unfused(am, lm, weight, bias, symbols, ranges=None):
        if ranges is not None:
            return paddle_ext.rnnt_loss_pruned(composed(am, lm, weight, bias, "tanh", ranges), symbols, ranges, 1,
                                               delay_penalty=0.1, reduction="none", clamp=0.03)
        return paddle_ext.rnnt_loss(composed(am, lm, weight, bias, "tanh"), symbols, 1, delay_penalty=0.1,
                                    reduction="none", clamp=0.03)

    dy, weights = analytic_grads(fn, inputs, {}, wrt)
    want, _ = analytic_grads(unfused, inputs, {}, wrt)
    for legacy in (False, True):
        for name, a, s_, w in zip(wrt, dy, static_grads(fn, inputs, {}, wrt, weights, legacy=legacy), want):
            np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(s_, w, rtol=1e-9, atol=1e-12, err_msg=f"{name} legacy={legacy}")


def test_a_small_problems_blocks_are_its_own_size():
    """A block holds at most the problem's frames: one step of a tiny joiner with J=256 in a fresh process grows the
    peak RSS about as the unfused step does, not by the scratch of a block sized for 4 MiB of logits (~90 MiB)."""
    from paddle_ext.benchmarks import _joiner  # noqa: PLC0415  (its fresh-process peak measurement)

    fused, unfused = (_joiner.peak_mib("rnnt", v, (2, 6, 3, 256, 12, 12), 1) for v in ("paddle_ext", "unfused"))
    assert fused < unfused + 16, f"peak RSS growth MiB: fused {fused}, unfused {unfused}"


def _args(**over):
    arrays, symbols, _ = joiner_problem(seed=11)
    kw = dict(am=t(arrays[0]), lm=t(arrays[1]), weight=t(arrays[2]), bias=t(arrays[3]), symbols=t(symbols),
              termination_symbol=0)
    kw.update(over)
    return kw


@pytest.mark.parametrize("over, exc, match", [
    (dict(activation="gelu"), ValueError, "activation must be one of"),
    (dict(am=t(np.zeros((3, 6)))), ValueError, "am must be 3-D"),
    (dict(lm=t(np.zeros((3, 5, 4)))), ValueError, "must agree in B and J"),
    (dict(weight=t(np.zeros((5, 7), "float32"))), TypeError, "weight must have am's dtype"),
    (dict(bias=t(np.zeros(6))), ValueError, "bias must be \\[C\\] with C = 7"),
    (dict(symbols=t(np.full((3, 4), 7, np.int64))), ValueError, "symbols must lie in \\[0, C\\) = \\[0, 7\\), C = weight's last dim = 7"),
    (dict(termination_symbol=7), ValueError, "termination_symbol must be an int in \\[0, C\\) = \\[0, 7\\)"),
    (dict(rnnt_type="other"), ValueError, "rnnt_type must be one of"),
    (dict(ranges=t(np.full((3, 6, 2), 9, np.int64) + np.arange(2))), ValueError, "does not fit in \\[0, S\\]"),
    (dict(ranges=t(np.zeros((3, 6, 2), np.int64))), ValueError, "is not s_begin \\+ arange"),
    (dict(reduction="avg"), ValueError, "reduction must be one of"),
    (dict(clamp=float("nan")), ValueError, "clamp must be a float"),
    (dict(clamp="0.1"), ValueError, "clamp must be a float"),
])
def test_bad_input_errors_name_the_argument(over, exc, match):
    with pytest.raises(exc, match=match) as info:
        paddle_ext.rnnt_loss_fused_joiner(**_args(**over))
    assert "rnnt_loss_fused_joiner" in str(info.value)


def test_static_programs_forward_and_grads_equal_dygraph():
    """PIR and legacy-IR programs: the loss and the grads of all four joiner inputs (check_output / check_grad
    also compare the analytic grads with central differences)."""
    arrays, symbols, boundary = joiner_problem(B=2, T=5, S=3, J=3, C=4, seed=12)
    inputs = dict(am=arrays[0], lm=arrays[1], weight=arrays[2], bias=arrays[3], symbols=symbols, boundary=boundary)

    def fn(am, lm, weight, bias, symbols, boundary):
        return paddle_ext.rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, 1, boundary, delay_penalty=0.1,
                                                 reduction="none")

    def expected(am, lm, weight, bias, symbols, boundary):
        x = [paddle.to_tensor(a) for a in (am, lm, weight, bias)]
        return paddle_ext.rnnt_loss(composed(*x, "tanh"), paddle.to_tensor(symbols), 1, paddle.to_tensor(boundary),
                                    delay_penalty=0.1, reduction="none").numpy()

    check_output(fn, inputs, expected, rtol=1e-9)
    check_grad(fn, inputs, ["am", "lm", "weight", "bias"])


def test_pruned_static_program():
    arrays, symbols, boundary = joiner_problem(B=2, T=6, S=4, seed=13)
    ranges = np.minimum(np.arange(6) // 2, 2)[None, :, None] + np.arange(3)
    ranges = np.repeat(ranges, 2, 0).astype(np.int64)
    inputs = dict(am=arrays[0], lm=arrays[1], weight=arrays[2], bias=arrays[3], symbols=symbols, ranges=ranges)

    def fn(am, lm, weight, bias, symbols, ranges):
        return paddle_ext.rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, 0, ranges=ranges, activation="relu",
                                                 reduction="none")

    def expected(am, lm, weight, bias, symbols, ranges):
        x = [paddle.to_tensor(a) for a in (am, lm, weight, bias)]
        rg = paddle.to_tensor(ranges)
        return paddle_ext.rnnt_loss_pruned(composed(*x, "relu", rg), paddle.to_tensor(symbols), rg, 0,
                                           reduction="none").numpy()

    check_output(fn, inputs, expected, rtol=1e-9)
    check_grad(fn, inputs, ["am", "lm", "weight"], modes=("dygraph", "static"))


# ---- the joiner composed in blocks of frames: the path of the tensors the fused CPU op does not take (CUDA),
# forced here on CPU tensors with blocks of one frame (BLOCK_BYTES 1) or two.

@pytest.fixture(params=[1, 2])
def composed_in_blocks(monkeypatch, request):
    from paddle_ext.rnnt_loss import fused_joiner
    monkeypatch.setattr(fused_joiner, "fused_fits", lambda am: False)
    # one frame a block, or two (5 x 5 x (7 + 5) float64 values a frame)
    monkeypatch.setattr(fused_joiner, "BLOCK_BYTES", 1 if request.param == 1 else 2 * 3 * 5 * (7 + 5) * 8)
    return request.param


@pytest.mark.parametrize("rnnt_type", TYPES)
@pytest.mark.parametrize("pruned", [False, True])
def test_blocks_of_frames_equal_the_composed_joiner(composed_in_blocks, rnnt_type, pruned):
    arrays, symbols, boundary = joiner_problem(B=3, T=7, S=4, seed=11)
    ranges = None
    if pruned:
        rng = np.random.default_rng(12)
        px_grad = paddle.to_tensor(rng.random((3, 4, 7 + (rnnt_type == "regular"))))
        ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, paddle.to_tensor(rng.random((3, 5, 7))), t(boundary),
                                                  2).numpy()
    fused, ref = both(arrays, symbols, 0, ranges=ranges, boundary=t(boundary), rnnt_type=rnnt_type,
                      delay_penalty=0.2, fastemit_lambda=0.3, reduction="none", weight_grads=[0.5, 1.0, 2.0])
    assert_same(fused, ref)


@pytest.mark.parametrize("frozen", ["weight", "am", "lm_and_bias"])
@pytest.mark.parametrize("grad_api", ["paddle.grad", "backward"])
def test_blocks_of_frames_grads_of_some_inputs(composed_in_blocks, frozen, grad_api):
    """Only the inputs that want grads get them, through paddle.grad (which the blocks' recompute must not
    re-enter) or backward; the others stay without."""
    arrays, symbols, _ = joiner_problem(seed=13)
    check_grads_of_some_inputs(
        arrays, frozen, grad_api, lambda *x: paddle_ext.rnnt_loss_fused_joiner(*x, t(symbols), 0, reduction="sum"),
        lambda *x: paddle_ext.rnnt_loss(composed(*x, "tanh"), t(symbols), 0, reduction="sum"))


def check_grads_of_some_inputs(arrays, frozen, grad_api, fused_loss, composed_loss):
    """fused_loss(am, lm, weight, bias) with the inputs named in frozen ('lm_and_bias') stopped: its value and the
    grads of the others (through paddle.grad or backward) are composed_loss's; the stopped ones get none."""
    names = ("am", "lm", "weight", "bias")
    tensors = {k: t(a, False) for k, a in zip(names, arrays)}
    refs = {k: t(a, False) for k, a in zip(names, arrays)}
    for name in frozen.split("_and_"):
        tensors[name].stop_gradient = True
    wanted = [k for k, x in tensors.items() if not x.stop_gradient]
    loss = fused_loss(*tensors.values())
    ref = composed_loss(*(refs[k] for k in names))
    want = paddle.grad(ref, [refs[k] for k in wanted])
    if grad_api == "paddle.grad":
        got = paddle.grad(loss, [tensors[k] for k in wanted])
    else:
        loss.backward()
        got = [tensors[k].grad for k in wanted]
        assert all(tensors[k].grad is None for k in tensors if k not in wanted)
    np.testing.assert_allclose(loss.numpy(), ref.numpy(), rtol=1e-12)
    for name, a, b in zip(wanted, got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_blocks_of_frames_without_grads_and_refusing_second_order(composed_in_blocks):
    arrays, symbols, _ = joiner_problem(seed=14)
    am, lm, w, b = (t(a, False) for a in arrays)
    with paddle.no_grad():
        value = paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, t(symbols), 0, reduction="none")
    ref = paddle_ext.rnnt_loss(composed(am, lm, w, b, "tanh"), t(symbols), 0, reduction="none")
    np.testing.assert_allclose(value.numpy(), ref.numpy(), rtol=1e-12)
    assert value.stop_gradient
    loss = paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, t(symbols), 0)
    # (Paddle hands an error raised in a PyLayer's backward on as an OSError that quotes it)
    with pytest.raises((NotImplementedError, OSError), match="rnnt_loss_fused_joiner: higher-order grads are not"):
        paddle.grad(loss, [am], create_graph=True)


@pytest.mark.parametrize("pruned", [False, True])
def test_blocks_of_frames_with_the_grad_clamp(composed_in_blocks, pruned):
    """The clamp on the composed joiner's blocks: each block's logits grad clamped before its item's upstream grad,
    as rnnt_loss / rnnt_loss_pruned clamp on the whole logits."""
    arrays, symbols, boundary = joiner_problem(B=3, T=7, S=4, seed=15, scale=3.0)
    ranges = np.repeat(np.minimum(np.arange(7) // 2, 2)[None, :, None] + np.arange(3), 3, 0) if pruned else None
    kw = dict(ranges=ranges, boundary=t(boundary), fastemit_lambda=0.3, reduction="mean")
    fused, ref = both(arrays, symbols, 0, clamp=0.02, **kw)
    assert_same(fused, ref)
    assert not np.allclose(fused[1][2], both(arrays, symbols, 0, **kw)[0][1][2])  # the clamp bites
