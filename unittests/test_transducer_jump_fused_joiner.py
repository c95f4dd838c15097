"""The joiner fused into the TDT and multi-blank losses: tdt_loss_fused_joiner / multiblank_rnnt_loss_fused_joiner
equal tdt_loss / multiblank_rnnt_loss on the composed joiner, loss and the grads of am, lm, weight and bias."""

import numpy as np
import paddle
import pytest

import paddle_ext
from test_rnnt_fused_joiner import ACTIVATIONS, assert_same, check_grads_of_some_inputs, composed, joiner_problem, t


def both(kind, arrays, symbols, durations, termination, *, activation="tanh", bias=True, weight_grads=None, **kw):
    fused_fn = {"tdt": paddle_ext.tdt_loss_fused_joiner, "multiblank": paddle_ext.multiblank_rnnt_loss_fused_joiner}
    plain_fn = {"tdt": paddle_ext.tdt_loss, "multiblank": paddle_ext.multiblank_rnnt_loss}
    out = []
    for fused in (True, False):
        am, lm, w, b = (t(a, False) for a in arrays)
        b = b if bias else None
        if fused:
            loss = fused_fn[kind](am, lm, w, b, t(symbols), durations, termination, activation=activation, **kw)
        else:
            loss = plain_fn[kind](composed(am, lm, w, b, activation), t(symbols), durations, termination, **kw)
        g = paddle.to_tensor(weight_grads) if weight_grads is not None else None
        (loss if g is None else loss * g).sum().backward()
        grads = [am.grad, lm.grad, w.grad] + ([b.grad] if bias else [])
        out.append((loss.numpy(), [x.numpy() for x in grads]))
    return out


CASES = {"tdt": ([0, 1, 2, 4], 9, 2), "multiblank": ([2, 3], 7, 6)}  # durations, X = C (+ D), termination


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_boundary", [False, True])
def test_float64_equals_the_composed_joiner(kind, activation, with_boundary):
    durations, X, blank = CASES[kind]
    arrays, symbols, boundary = joiner_problem(C=X, seed=21)
    symbols %= X - (len(durations) if kind == "tdt" else 0)
    fused, ref = both(kind, arrays, symbols, durations, blank, activation=activation,
                      boundary=t(boundary) if with_boundary else None, reduction="none",
                      weight_grads=[1.0, 0.25, 3.0])
    assert np.isfinite(ref[0]).all()
    assert_same(fused, ref)


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_sigma_fastemit_reductions_and_no_bias(kind, reduction):
    durations, X, blank = CASES[kind]
    arrays, symbols, boundary = joiner_problem(B=2, T=7, S=3, C=X, seed=22)
    symbols %= X - (len(durations) if kind == "tdt" else 0)
    fused, ref = both(kind, arrays, symbols, durations, blank, bias=False, boundary=t(boundary), reduction=reduction,
                      sigma=0.05, fastemit_lambda=0.3)
    assert_same(fused, ref)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_grad_clamp_on_each_blocks_logits_grad(kind):
    """clamp: the unfused loss's clamp of each logit's grad, applied to every block's logits grad."""
    durations, X, blank = CASES[kind]
    arrays, symbols, boundary = joiner_problem(C=X, seed=26, scale=3.0)
    symbols %= X - (len(durations) if kind == "tdt" else 0)
    fused, ref = both(kind, arrays, symbols, durations, blank, boundary=t(boundary), reduction="sum", clamp=0.05,
                      fastemit_lambda=0.3)
    assert_same(fused, ref)
    unclamped = both(kind, arrays, symbols, durations, blank, boundary=t(boundary), reduction="sum",
                     fastemit_lambda=0.3)[0]
    assert not np.allclose(fused[1][2], unclamped[1][2])  # the clamp bites


@pytest.mark.parametrize("durations", [[1, 2], [2, 3, 4], [0, 2]])
def test_tdt_durations_without_0_or_1(durations):
    """Duration lists without 0 or without 1, as tdt_loss takes them: the same losses (inf where no path fits)."""
    X = 7 + len(durations)
    arrays, symbols, boundary = joiner_problem(C=X, T=9, S=3, seed=30)
    symbols %= 7
    fused, ref = both("tdt", arrays, symbols, durations, 6, boundary=t(boundary), reduction="none",
                      weight_grads=[1.0, 0.0, 2.0])
    assert_same(fused, ref)


def test_tdt_many_blocks_and_wide_inputs():
    arrays, symbols, _ = joiner_problem(B=2, T=5, S=3, J=4, C=20005, seed=23, scale=30.0)
    fused, ref = both("tdt", arrays, symbols, [0, 1, 2, 3, 4], 11, reduction="sum")
    assert_same(fused, ref, atol=1e-9 * max(1.0, abs(float(ref[0]))))


def test_tdt_float32_within_gemm_rounding():
    check_tdt_float32_within_rounding()


def check_tdt_float32_within_rounding():
    """float32 against float64: the loss to 2e-5, the grads to 1e-3 (1e-4 of the largest)."""
    arrays, symbols, _ = joiner_problem(B=2, T=12, S=5, J=48, C=205, seed=24)
    symbols %= 200
    ref = both("tdt", arrays, symbols, [0, 1, 2, 3, 4], 0, reduction="none")[0]
    fused = both("tdt", [a.astype("float32") for a in arrays], symbols, [0, 1, 2, 3, 4], 0, reduction="none")[0]
    np.testing.assert_allclose(fused[0], ref[0], rtol=2e-5)
    for a, b in zip(fused[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


@pytest.mark.parametrize("fn, over, exc, match", [
    ("tdt_loss_fused_joiner", dict(durations=[0]), ValueError, "must hold a duration >= 1"),
    ("tdt_loss_fused_joiner", dict(weight=np.zeros((5, 3))), ValueError, "weight's last dim must be C \\+ D"),
    ("tdt_loss_fused_joiner", dict(activation="sigmoid"), ValueError, "activation must be one of"),
    ("multiblank_rnnt_loss_fused_joiner", dict(durations=[2, 3], termination_symbol=1), ValueError,
     "termination_symbol must be >= 2"),
    ("multiblank_rnnt_loss_fused_joiner", dict(durations=[1]), ValueError, "ints >= 2"),
    ("multiblank_rnnt_loss_fused_joiner", dict(symbols=np.full((3, 4), 9, np.int64)), ValueError,
     "symbols must lie in \\[0, C\\) = \\[0, 9\\), C = weight's last dim = 9"),
])
def test_bad_input_errors_name_the_function(fn, over, exc, match):
    arrays, symbols, _ = joiner_problem(C=9, seed=25)
    symbols %= 5
    kw = dict(am=arrays[0], lm=arrays[1], weight=arrays[2], bias=None, symbols=symbols,
              durations=[0, 1, 2] if fn.startswith("tdt") else [2, 3], termination_symbol=4)
    kw.update(over)
    args = [t(kw[k]) if isinstance(kw[k], np.ndarray) else kw[k]
            for k in ("am", "lm", "weight", "bias", "symbols", "durations", "termination_symbol")]
    with pytest.raises(exc, match=match) as info:
        getattr(paddle_ext, fn)(*args, activation=kw.get("activation", "tanh"))
    assert fn in str(info.value)


# ---- the joiner composed in blocks of frames: the path of the tensors the fused CPU op does not take (CUDA),
# forced here on CPU tensors with blocks of one frame (BLOCK_BYTES 1) or two: each block's arc weights, then
# the loss on them.

@pytest.fixture(params=[1, 2])
def composed_in_blocks(monkeypatch, request):
    """-> (frames a block, the frames of the joiners composed): set_problem(B, S, J, X) sizes the blocks."""
    from paddle_ext import transducer_jump_loss
    from paddle_ext.rnnt_loss import fused_joiner
    monkeypatch.setattr(transducer_jump_loss, "fused_fits", lambda am: False)
    frames = []

    def recording(am, *args, **kw):
        frames.append(am.shape[1])
        return fused_joiner.composed_joiner(am, *args, **kw)

    monkeypatch.setattr(transducer_jump_loss, "composed_joiner", recording)

    def set_problem(B, S, J, X):  # a frame's logits, their grad and its activations, in float64
        monkeypatch.setattr(fused_joiner, "BLOCK_BYTES", 1 if request.param == 1 else
                            request.param * B * (S + 1) * (2 * X + J) * 8)
    return request.param, frames, set_problem


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("clamp", [-1.0, 0.05])
def test_blocks_of_frames_equal_the_composed_joiner(composed_in_blocks, kind, clamp):
    per_block, frames, set_problem = composed_in_blocks
    durations, X, blank = CASES[kind]
    B, T, S, J = 5, 7, 4, 5
    set_problem(B, S, J, X)
    arrays, symbols, boundary = joiner_problem(B=B, T=T, S=S, J=J, C=X, seed=27, scale=3.0)
    symbols %= X - (len(durations) if kind == "tdt" else 0)
    fused, ref = both(kind, arrays, symbols, durations, blank, boundary=t(boundary), reduction="none", sigma=0.05,
                      fastemit_lambda=0.3, clamp=clamp, weight_grads=[1.0, 0.25, 3.0, 0.0, 2.0])
    assert_same(fused, ref)
    blocks = [min(per_block, T - t0) for t0 in range(0, T, per_block)]
    assert frames == blocks * 2  # the forward's blocks, then the backward's


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_blocks_of_frames_reductions_clamp_and_no_path(composed_in_blocks, kind, reduction):
    """An item whose box has no path (inf loss, zero grads) next to others; the clamp with the reduction's 1/B."""
    composed_in_blocks[2](3, 4, 5, CASES[kind][1])
    durations, X, blank = CASES[kind]
    arrays, symbols, boundary = joiner_problem(C=X, T=6, seed=31, scale=3.0)
    symbols %= X - (len(durations) if kind == "tdt" else 0)
    boundary[1] = [0, 0, 4, 0]  # four symbols and no frame: no path (a symbol arc must land before t_end)
    fused, ref = both(kind, arrays, symbols, durations, blank, boundary=t(boundary), reduction="none", clamp=0.05,
                      weight_grads=[1.0, 1.0, 0.5])
    assert_same(fused, ref)
    assert np.isinf(ref[0][1]) and np.isfinite(ref[0][[0, 2]]).all()
    finite = np.array([0, 2])
    arrays_ok = [a[finite] if k < 2 else a for k, a in enumerate(arrays)]
    fused, ref = both(kind, arrays_ok, symbols[finite], durations, blank, boundary=t(boundary[finite]),
                      reduction=reduction, clamp=0.05)
    assert_same(fused, ref)


@pytest.mark.parametrize("frozen", ["weight", "am", "lm_and_bias"])
@pytest.mark.parametrize("grad_api", ["paddle.grad", "backward"])
def test_blocks_of_frames_grads_of_some_inputs(composed_in_blocks, frozen, grad_api):
    """Only the inputs that want grads get them, through paddle.grad or backward; the others stay without."""
    composed_in_blocks[2](3, 4, 5, 9)
    arrays, symbols, _ = joiner_problem(C=9, seed=28)
    symbols %= 5
    check_grads_of_some_inputs(
        arrays, frozen, grad_api, lambda *x: paddle_ext.tdt_loss_fused_joiner(*x, t(symbols), [0, 1, 2, 4], 2),
        lambda *x: paddle_ext.tdt_loss(composed(*x, "tanh"), t(symbols), [0, 1, 2, 4], 2))


def test_blocks_of_frames_without_grads_and_refusing_second_order(composed_in_blocks):
    composed_in_blocks[2](3, 4, 5, 7)
    arrays, symbols, _ = joiner_problem(seed=29)
    am, lm, w, b = (t(a, False) for a in arrays)
    with paddle.no_grad():
        value = paddle_ext.multiblank_rnnt_loss_fused_joiner(am, lm, w, b, t(symbols), [2, 3], 6, reduction="none")
    ref = paddle_ext.multiblank_rnnt_loss(composed(am, lm, w, b, "tanh"), t(symbols), [2, 3], 6, reduction="none")
    np.testing.assert_allclose(value.numpy(), ref.numpy(), rtol=1e-12)
    assert value.stop_gradient
    loss = paddle_ext.multiblank_rnnt_loss_fused_joiner(am, lm, w, b, t(symbols), [2, 3], 6)
    # (Paddle hands an error raised in a PyLayer's backward on as an OSError that quotes it)
    with pytest.raises((NotImplementedError, OSError),
                       match="multiblank_rnnt_loss_fused_joiner: higher-order grads are not"):
        paddle.grad(loss, [am], create_graph=True)


def test_blocks_of_frames_float32_within_rounding(composed_in_blocks):
    composed_in_blocks[2](2, 5, 48, 205)
    check_tdt_float32_within_rounding()
