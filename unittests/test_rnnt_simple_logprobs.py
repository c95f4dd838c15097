"""pe_rnnt_simple_logprobs, the fused px / py of the simple RNN-T loss: the specification, through the OpTest
harness (against the float64 log-softmax of the materialised [B, T, S+1, C] joint, refs.rnnt_simple_logprobs)."""

import numpy as np
import paddle
import pytest

import refs
from op_test import check_export, check_grad, check_output
import paddle_ext
from paddle_ext import _library

TERM = 0


def op(lm, am, symbols, modified=False, termination_symbol=0):
    px, py, _ = _library.ops().pe_rnnt_simple_logprobs(lm, am, symbols, termination_symbol, modified)
    return px, py


def make(B, S, T, C, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return {"lm": rng.normal(size=(B, S + 1, C)) * scale, "am": rng.normal(size=(B, T, C)) * scale,
            "symbols": rng.integers(0, C, size=(B, S)).astype(np.int64)}


# shapes around the CPU kernel's blocks: register tiles of 6 rows x 2 vectors, k blocks of 256,
# 192-column work units; and the degenerate ones (S = 0, T = 1, C = 1)
SHAPES = [(1, 1, 1, 2), (2, 3, 4, 5), (3, 0, 5, 4), (2, 7, 3, 1), (2, 13, 200, 33), (1, 8, 7, 300), (2, 20, 9, 520)]


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("B,S,T,C", SHAPES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_outputs_against_reference(dtype, B, S, T, C, modified):
    attrs = {"termination_symbol": min(2, C - 1), "modified": modified}  # blank 0, or another class
    check_output(op, make(B, S, T, C, seed=S + T + C), refs.rnnt_simple_logprobs, attrs, dtype=dtype, atol=1e-12 if dtype == "float64" else 2e-5)


# logits spread by hundreds or more: exp-space products underflow and those cells take the exact fallback
@pytest.mark.parametrize("scale", [30.0, 300.0, 1e3, 1e4])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_wide_logits_are_exact(dtype, scale):
    inputs = make(2, 5, 9, 7, seed=3, scale=scale)
    # float32: the float64 result on the same float32 inputs, to float32 rounding of values this large
    check_output(op, inputs, refs.rnnt_simple_logprobs, {"termination_symbol": TERM}, dtype=dtype, rtol=1e-9 if dtype == "float64" else 1e-5,
                 atol=1e-9 if dtype == "float64" else 1e-5 * scale)


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_one_lm_row_shared_by_every_context(modified, scale):
    """lm [B, 1, C] stands for the same row at every s (the smoothed loss's AM-only model): outputs and grads
    equal those of the row repeated S+1 times (its grad summed over s)."""
    inputs = make(2, 6, 7, 9, seed=23, scale=scale)
    one_row = inputs["lm"][:, :1]
    check_output(op, dict(inputs, lm=one_row),
                 lambda lm, am, sy, **kw: refs.rnnt_simple_logprobs(np.repeat(lm, 7, axis=1), am, sy, **kw),
                 {"termination_symbol": 2, "modified": modified}, rtol=1e-9 if scale > 1 else None,
                 atol=1e-9 if scale > 1 else None)
    check_grad(op, dict(inputs, lm=one_row), ["lm", "am"], {"termination_symbol": 2, "modified": modified},
               delta=1e-5 if scale == 1 else 1e-3, max_relative_error=1e-6 if scale == 1 else 1e-5)


def test_every_cell_in_the_fallback_and_none():
    """A row pair whose shifted exps all underflow (every product below C sqrt(tiny)) next to normal rows."""
    inputs = make(1, 2, 3, 4, seed=5)
    inputs["lm"][0, 1] = [0.0, -800.0, -800.0, -800.0]  # lm's max at class 0, am's at class 1: products ~ e^-800
    inputs["am"][0, :] = [-800.0, 0.0, -800.0, -800.0]
    check_output(op, inputs, refs.rnnt_simple_logprobs, {"termination_symbol": TERM}, rtol=1e-12)
    px, py = op(*[paddle.to_tensor(v) for v in inputs.values()])
    assert np.isfinite(py.numpy()).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_row_maximum_and_nan_anywhere_in_the_row(dtype):
    """The per-row maximum that shifts the exps (found in vector lanes, then a scalar tail): a spike of +200 at
    every position of a 37-class row (lanes of 2, 4, 8 or 16 values, and the tail) must be found, else its exp
    overflows; a NaN anywhere makes the row's cells NaN, as the unfused log-softmax does."""
    C = 37
    inputs = make(1, 3, C, C, seed=11)
    inputs["am"][0, np.arange(C), np.arange(C)] = 200.0  # frame t: spike at class t
    inputs["lm"][0, np.arange(4), [0, 15, 16, 36]] = 150.0
    check_output(op, inputs, refs.rnnt_simple_logprobs, {"termination_symbol": TERM}, dtype=dtype,
                 rtol=1e-9 if dtype == "float64" else 1e-5, atol=1e-9 if dtype == "float64" else 2e-3)
    for t in (0, 7, 31, 33, 36):  # NaN in the vector body or the tail of am's row t
        am = inputs["am"].copy()
        am[0, t, (t + 1) % C] = np.nan
        px, py = op(*[paddle.to_tensor(v.astype(dtype) if v.dtype != np.int64 else v)
                      for v in (inputs["lm"], am, inputs["symbols"])])
        assert np.isnan(py.numpy()[0, :, t]).all() and np.isfinite(np.delete(py.numpy()[0], t, axis=1)).all()


def test_minus_inf_logits_give_minus_inf_logprobs_and_zero_grads():
    """A class that lm rules out (-inf) has px = -inf where it is the symbol, and no grad flows to it."""
    inputs = make(1, 2, 4, 5, seed=7)
    inputs["lm"][0, :, 3] = -np.inf
    inputs["symbols"][0] = [3, 1]
    check_output(op, inputs, refs.rnnt_simple_logprobs, {"termination_symbol": TERM})
    lm = paddle.to_tensor(inputs["lm"], stop_gradient=False)
    am = paddle.to_tensor(inputs["am"], stop_gradient=False)
    px, py = op(lm, am, paddle.to_tensor(inputs["symbols"]))
    (paddle.where(paddle.isfinite(px), px, paddle.zeros_like(px)).sum() + py.sum()).backward()
    assert np.isfinite(lm.grad.numpy()).all() and np.isfinite(am.grad.numpy()).all()
    assert (lm.grad.numpy()[0, :, 3] == 0).all()


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_numeric_grads(modified, scale):
    inputs = make(2, 3, 4, 5, seed=11, scale=scale)
    check_grad(op, inputs, ["lm", "am"], {"modified": modified}, delta=1e-5 if scale == 1 else 1e-3,
               max_relative_error=1e-6 if scale == 1 else 1e-5)  # x1e3: the differences carry ~1e-9 rounding


@pytest.mark.parametrize("modified", [False, True])
@pytest.mark.parametrize("B,S,T,C,scale", [(2, 3, 4, 5, 1.0), (2, 5, 9, 7, 1e3), (1, 13, 200, 260, 1.0),
                                           (2, 20, 9, 520, 3.0), (1, 2, 7, 600, 300.0)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_grads_against_reference(dtype, B, S, T, C, scale, modified):
    """Both grad GEMMs across their blocks (k blocks of 256, 192-column units), normal and fallback cells:
    analytic grads for random output grads against the materialised float64 softmax."""
    inputs = make(B, S, T, C, seed=B + S + T, scale=scale)
    rng = np.random.default_rng(C)
    gx, gy = rng.normal(size=(B, S, T if modified else T + 1)), rng.normal(size=(B, S + 1, T))
    lm = paddle.to_tensor(inputs["lm"].astype(dtype), stop_gradient=False)
    am = paddle.to_tensor(inputs["am"].astype(dtype), stop_gradient=False)
    px, py = op(lm, am, paddle.to_tensor(inputs["symbols"]), modified, 1)
    paddle.autograd.backward([px, py], [paddle.to_tensor(gx.astype(dtype)), paddle.to_tensor(gy.astype(dtype))])
    ref_lm, ref_am = refs.rnnt_simple_logprobs_grad(lm.numpy(), am.numpy(), inputs["symbols"], 1, gx.astype(dtype),
                                                    gy.astype(dtype), modified)
    tol = 1e-12 if dtype == "float64" else 1e-5
    scale_of = np.sqrt(S + T + 1)  # grads are sums over the lattice of grads ~1
    np.testing.assert_allclose(lm.grad.numpy(), ref_lm, rtol=tol, atol=tol * scale_of * 10)
    np.testing.assert_allclose(am.grad.numpy(), ref_am, rtol=tol, atol=tol * scale_of * 10)


@pytest.mark.parametrize("one_lm_row", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_grads_with_symbols_and_termination_in_every_column_block(dtype, one_lm_row):
    """am_grad's gathered terms are added per 192-column unit: symbols spread over the three units of C = 450,
    some equal to a termination symbol that lies in the last unit."""
    B, S, T, C, term = 2, 9, 11, 450, 400
    inputs = make(B, S, T, C, seed=31)
    inputs["symbols"][:, :] = [[3, 191, 192, 400, 383, 384, 449, 400, 0], [400, 400, 200, 5, 420, 100, 300, 191, 400]]
    lm_np = inputs["lm"][:, :1] if one_lm_row else inputs["lm"]
    rng = np.random.default_rng(32)
    gx, gy = rng.normal(size=(B, S, T + 1)).astype(dtype), rng.normal(size=(B, S + 1, T)).astype(dtype)
    lm = paddle.to_tensor(lm_np.astype(dtype), stop_gradient=False)
    am = paddle.to_tensor(inputs["am"].astype(dtype), stop_gradient=False)
    px, py = op(lm, am, paddle.to_tensor(inputs["symbols"]), False, term)
    paddle.autograd.backward([px, py], [paddle.to_tensor(gx), paddle.to_tensor(gy)])
    full_lm = np.repeat(lm.numpy(), S + 1, axis=1) if one_lm_row else lm.numpy()
    ref_lm, ref_am = refs.rnnt_simple_logprobs_grad(full_lm, am.numpy(), inputs["symbols"], term, gx, gy)
    if one_lm_row:
        ref_lm = ref_lm.sum(axis=1, keepdims=True)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(lm.grad.numpy(), ref_lm, rtol=tol, atol=tol * 50)
    np.testing.assert_allclose(am.grad.numpy(), ref_am, rtol=tol, atol=tol * 50)


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_export(scale, tmp_path):
    inputs = make(2, 3, 5, 6, seed=13, scale=scale)
    f32 = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in inputs.items()}
    out = check_export(op, f32, directory=str(tmp_path), rtol=1e-5)
    ref = refs.rnnt_simple_logprobs(f32["lm"], f32["am"], f32["symbols"], TERM)
    for got, want in zip(out, ref):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def test_float32_matches_float64_run_at_the_issue_shape_slice():
    """float32 within 1e-5 relative of a float64 run on the same inputs at a realistic vocabulary (C = 500)."""
    inputs = make(2, 20, 60, 500, seed=17)
    lm32, am32 = inputs["lm"].astype(np.float32), inputs["am"].astype(np.float32)
    sym = paddle.to_tensor(inputs["symbols"])
    px32, py32 = op(paddle.to_tensor(lm32), paddle.to_tensor(am32), sym)
    px64, py64 = op(paddle.to_tensor(lm32.astype(np.float64)), paddle.to_tensor(am32.astype(np.float64)), sym)
    fin = np.isfinite(px64.numpy())
    np.testing.assert_allclose(px32.numpy()[fin], px64.numpy()[fin], rtol=1e-5)
    np.testing.assert_allclose(py32.numpy(), py64.numpy(), rtol=1e-5)


def test_logprobs_under_no_grad_are_constants():
    """Computed under no_grad, px / py carry no grad node: making them leaves later is safe (Paddle gives a
    custom op's outputs a grad node even under no_grad, whose backward then crashed)."""
    inputs = make(2, 3, 4, 5, seed=19)
    lm = paddle.to_tensor(inputs["lm"], stop_gradient=False)
    am = paddle.to_tensor(inputs["am"], stop_gradient=False)
    with paddle.no_grad():
        px, py = paddle_ext.get_rnnt_logprobs(lm, am, paddle.to_tensor(inputs["symbols"]), TERM)
    assert px.stop_gradient and py.stop_gradient
    px.stop_gradient = False
    px[:, :, :-1].sum().backward()
    assert px.grad is not None and lm.grad is None
