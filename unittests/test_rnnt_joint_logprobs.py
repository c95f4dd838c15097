"""rnnt_joint_logprobs (the fused RNN-T joiner op: log-softmax at the symbol and termination columns only) and
the pruning gather, through the OpTest harness and against unittests/refs/rnnt_joint_logprobs.py."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_export, check_grad, check_output
from paddle_ext.rnnt_loss.common import NO_CLAMP

TERM = 0


def ops():
    return paddle_ext._library.ops()


def joint(logits, symbols, ranges=None):
    px, py, _, _ = paddle_ext._library.ops().pe_rnnt_joint_logprobs(logits, symbols, ranges, 0, NO_CLAMP)  # TERM
    return px, py


def joint_pruned(logits, symbols, ranges):
    return joint(logits, symbols, ranges)


def gather(x, index):
    return paddle_ext._library.ops().pe_rnnt_prune_gather(x, index)


def problem(B, T, S, C, R=None, seed=0, scale=3.0):
    """Full logits [B, T, S+1, C] (R None) or pruned [B, T, R, C] with valid ranges; symbols [B, S]."""
    rng = np.random.default_rng(seed)
    symbols = rng.integers(0, C, size=(B, S)).astype(np.int64)
    if R is None:
        return rng.normal(0, scale, size=(B, T, S + 1, C)), symbols, None
    starts = np.sort(rng.integers(0, S + 2 - R, size=(B, T)), axis=1)
    ranges = (starts[..., None] + np.arange(R)).astype(np.int64)
    return rng.normal(0, scale, size=(B, T, R, C)), symbols, ranges


def ref(logits, symbols, ranges=None):
    return refs.rnnt_joint_logprobs(logits, symbols, ranges, TERM)


# (B, T, S, C, R): R None = the full joiner; C = 700 > every SIMD width and 64-vector sum chunk
SHAPES = [(2, 3, 2, 5, None), (1, 1, 0, 3, None), (3, 4, 3, 1, None), (2, 5, 3, 33, None), (2, 3, 4, 700, None),
          (2, 6, 4, 5, 2), (3, 5, 6, 33, 3), (1, 4, 0, 4, 1), (2, 3, 3, 700, 4)]


def _inputs(logits, symbols, ranges):
    return {"logits": logits, "symbols": symbols} | ({} if ranges is None else {"ranges": ranges})


def _fn(ranges):
    return joint if ranges is None else joint_pruned


@pytest.mark.parametrize("shape", SHAPES)
def test_outputs_float64(shape):
    logits, symbols, ranges = problem(*shape)
    check_output(_fn(ranges), _inputs(logits, symbols, ranges), ref)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("pruned", [False, True])
def test_every_dtype(dtype, pruned):
    logits, symbols, ranges = problem(2, 4, 3, 300, 3 if pruned else None, seed=1)
    # differences of two O(10) numbers: tolerances absolute at the dtype's resolution (-inf cells exact)
    atol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2, "bfloat16": 1.5e-1}[dtype]
    check_output(_fn(ranges), _inputs(logits, symbols, ranges), ref, dtype=dtype, atol=atol)


@pytest.mark.parametrize("shape", [(2, 3, 2, 5, None), (1, 2, 0, 4, None), (2, 4, 3, 6, 2), (2, 3, 3, 4, 4)])
def test_numeric_grads(shape):
    logits, symbols, ranges = problem(*shape, seed=2)
    check_grad(_fn(ranges), _inputs(logits, symbols, ranges), "logits")


def test_grads_against_reference_with_symbol_equal_to_termination():
    """The row grad adds both sparse terms at a column that is symbol and termination at once."""
    logits, symbols, ranges = problem(2, 3, 4, 6, 3, seed=3)
    symbols[:, ::2] = TERM
    x = paddle.to_tensor(logits, stop_gradient=False)
    px, py = joint(x, paddle.to_tensor(symbols), paddle.to_tensor(ranges))
    rng = np.random.default_rng(4)
    gx, gy = rng.normal(size=px.shape), rng.normal(size=py.shape)
    (grad,) = paddle.grad([px, py], x, [paddle.to_tensor(gx), paddle.to_tensor(gy)])
    np.testing.assert_allclose(grad.numpy(), refs.rnnt_joint_logprobs_grad(logits, symbols, ranges, TERM, gx, gy),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("pruned", [False, True])
def test_float32_within_1e5_of_float64_on_wide_rows(pruned):
    """The accuracy bar at a realistic vocabulary: values and grads of float32 runs."""
    logits, symbols, ranges = problem(2, 6, 5, 2000, 3 if pruned else None, seed=5, scale=8.0)
    rg = None if ranges is None else paddle.to_tensor(ranges)
    outs = {}
    for dtype in ("float32", "float64"):
        x = paddle.to_tensor(logits.astype(np.float32).astype(dtype), stop_gradient=False)
        px, py = joint(x, paddle.to_tensor(symbols), rg)
        w = np.random.default_rng(6)
        gx, gy = (paddle.to_tensor(w.normal(size=t.shape).astype(dtype)) for t in (px, py))
        (g,) = paddle.grad([px, py], x, [gx, gy])
        outs[dtype] = [px.numpy(), py.numpy(), g.numpy()]
    for got, want in zip(outs["float32"], outs["float64"]):
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(got), finite)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5 * np.abs(want[finite]).max())


SPECIAL = {
    "spread 1e4": lambda x: x * 1e4,
    "spread 700": lambda x: np.sign(x) * 700.0,
    "denormals": lambda x: x * 1e-310,
    "ties": lambda x: np.round(x),
    "-inf entries": lambda x: np.where(x < -1.0, -np.inf, x),
    "a row of -inf": lambda x: np.where(np.arange(x.shape[2])[None, None, :, None] == 1, -np.inf, x),
    "+inf": lambda x: np.where(x > 2.5, np.inf, x),
    "NaN": lambda x: np.where(x > 2.5, np.nan, x),
}


@pytest.mark.parametrize("pruned", [False, True])
@pytest.mark.parametrize("case", list(SPECIAL))
def test_adversarial_values(case, pruned):
    """As log_softmax: a -inf logit gives -inf and no softmax term in the grad (never NaN); a row of only -inf,
    or holding +inf or NaN, gives NaN everywhere (outputs and that row's grad)."""
    logits, symbols, ranges = problem(2, 5, 3, 9, 3 if pruned else None, seed=7, scale=1.5)
    logits = SPECIAL[case](logits)
    for dtype in ("float64", "float32"):
        x = paddle.to_tensor(logits.astype(dtype), stop_gradient=False)
        rg = None if ranges is None else paddle.to_tensor(ranges)
        px, py = joint(x, paddle.to_tensor(symbols), rg)
        want_px, want_py = ref(logits.astype(dtype), symbols, ranges)
        rtol = 1e-12 if dtype == "float64" else 1e-5
        for got, want in ((px.numpy(), want_px), (py.numpy(), want_py)):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want[np.isfinite(want)]).max(
                initial=0)), equal_nan=True)
        rng = np.random.default_rng(8)
        gx, gy = rng.normal(size=px.shape), rng.normal(size=py.shape)
        (grad,) = paddle.grad([px, py], x, [paddle.to_tensor(gx.astype(dtype)), paddle.to_tensor(gy.astype(dtype))])
        with np.errstate(invalid="ignore"):
            want = refs.rnnt_joint_logprobs_grad(logits.astype(dtype), symbols, ranges, TERM, gx.astype(dtype),
                                                 gy.astype(dtype))
        got = grad.numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)


def test_static_and_export(tmp_path):
    logits, symbols, ranges = problem(2, 4, 3, 7, 2, seed=9)
    check_export(joint_pruned, {"logits": logits.astype(np.float32), "symbols": symbols, "ranges": ranges},
                 directory=str(tmp_path))
    full, symbols, _ = problem(2, 4, 3, 7, seed=10)
    check_export(joint, {"logits": full.astype(np.float32), "symbols": symbols}, directory=str(tmp_path))


@pytest.mark.parametrize("bad,exc,match", [
    ("symbol value", IndexError, r"symbols\[1, 0\] = 9 is out of range \[0, 7\)"),
    ("termination", ValueError, r"termination_symbol must be in \[0, C = 7\), got 7"),
    ("symbols rows", ValueError, "symbols has 1 rows but logits has B = 2"),
    ("full R", ValueError, r"logits must be \[B, T, S\+1, C\] with S = 3 \(symbols \[B, S\]\), got R = 3"),
    ("range value", IndexError, r"ranges\[0, 1, 1\] = 4: each frame's ranges must be s_begin \+ arange\(R\) inside"),
    ("range step", IndexError, r"ranges\[1, 2, 1\] = 0"),
    ("range order", IndexError, r"non-decreasing along T, but ranges\[0, 1, 0\] = 0 < ranges\[0, 0, 0\] = 1"),
])
def test_kernel_checks_name_the_bad_value(bad, exc, match):
    """What a static graph can only see when it runs: Paddle's typed errors (ValueError / IndexError)."""
    logits, symbols, ranges = problem(2, 4, 3, 7, 2, seed=11)  # S = 3, R = 2
    full, term = problem(2, 4, 3, 7, seed=11)[0], TERM
    if bad == "symbol value":
        symbols[1, 0] = 9
    elif bad == "termination":
        term = 7
    elif bad == "symbols rows":
        symbols = symbols[:1]
    elif bad == "full R":
        full = full[:, :, :3]
    elif bad == "range value":
        ranges[0, 1] = [3, 4]
    elif bad == "range order":
        ranges[0] = [[1, 2], [0, 1], [1, 2], [2, 3]]
    else:
        ranges[1, 2] = [1, 0]
    lg, rg = (full, None) if bad in ("symbol value", "termination", "symbols rows", "full R") else (logits, ranges)
    with pytest.raises(exc, match=match):
        ops().pe_rnnt_joint_logprobs(paddle.to_tensor(lg), paddle.to_tensor(symbols),
                                     None if rg is None else paddle.to_tensor(rg), term, NO_CLAMP)


# ------------------------------------------------------------------------------------- pruning gather


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gather_outputs(dtype):
    rng = np.random.default_rng(12)
    x, index = rng.normal(size=(3, 6, 70)), rng.integers(0, 6, size=(3, 5, 4)).astype(np.int64)
    check_output(gather, {"x": x, "index": index}, refs.rnnt_prune_gather, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(2, 4, 3, 5, 2), (1, 3, 1, 1, 1), (3, 2, 5, 130, 3)])
def test_gather_grads(shape):
    """Numeric grads, and the scatter-add against NumPy with repeated indices (column blocks of 64 and more)."""
    B, N, T, D, R = shape
    rng = np.random.default_rng(13)
    x, index = rng.normal(size=(B, N, D)), rng.integers(0, N, size=(B, T, R)).astype(np.int64)
    check_grad(gather, {"x": x, "index": index}, "x")
    xt = paddle.to_tensor(x, stop_gradient=False)
    g = rng.normal(size=(B, T, R, D))
    (grad,) = paddle.grad(gather(xt, paddle.to_tensor(index)), xt, paddle.to_tensor(g))
    np.testing.assert_allclose(grad.numpy(), refs.rnnt_prune_gather_grad(x.shape, index, g), rtol=1e-12, atol=1e-12)


def test_gather_export_and_index_check(tmp_path):
    rng = np.random.default_rng(14)
    x, index = rng.normal(size=(2, 5, 8)).astype(np.float32), rng.integers(0, 5, size=(2, 3, 2)).astype(np.int64)
    check_export(gather, {"x": x, "index": index}, directory=str(tmp_path))
    with pytest.raises(IndexError, match=r"index value 5 is out of range \[0, 5\)"):
        gather(paddle.to_tensor(x), paddle.to_tensor(np.full((2, 3, 2), 5, np.int64)))


def test_do_rnnt_pruning_grads_match_numpy():
    """do_rnnt_pruning on the gather: am rows repeated per range entry, lm rows by ranges; grads add back."""
    B, T, S, D, R = 2, 5, 4, 9, 3
    rng = np.random.default_rng(15)
    am, lm = rng.normal(size=(B, T, D)), rng.normal(size=(B, S + 1, D))
    ranges = (np.minimum(np.arange(T) // 2, S + 1 - R)[None, :, None] + np.arange(R)).repeat(B, 0).astype(np.int64)
    a, l = paddle.to_tensor(am, stop_gradient=False), paddle.to_tensor(lm, stop_gradient=False)
    ap, lp = paddle_ext.do_rnnt_pruning(a, l, paddle.to_tensor(ranges))
    np.testing.assert_array_equal(ap.numpy(), np.broadcast_to(am[:, :, None], (B, T, R, D)))
    np.testing.assert_array_equal(lp.numpy(), refs.rnnt_prune_gather(lm, ranges))
    ga, gl = rng.normal(size=(B, T, R, D)), rng.normal(size=(B, T, R, D))
    da, dl = paddle.grad([ap, lp], [a, l], [paddle.to_tensor(ga), paddle.to_tensor(gl)])
    np.testing.assert_allclose(da.numpy(), ga.sum(2), rtol=1e-12)
    np.testing.assert_allclose(dl.numpy(), refs.rnnt_prune_gather_grad(lm.shape, ranges, gl), rtol=1e-12)


def test_do_rnnt_pruning_rejects_ranges_past_s():
    am, lm = paddle.zeros([1, 3, 4]), paddle.zeros([1, 3, 4])
    with pytest.raises(ValueError, match=r"ranges must lie in \[0, S\] = \[0, 2\].*got values in \[0, 3\]"):
        paddle_ext.do_rnnt_pruning(am, lm, paddle.to_tensor(np.array([[[0, 1], [1, 2], [2, 3]]], np.int64)))
    with pytest.raises(TypeError, match="ranges must be an integer tensor"):
        paddle_ext.do_rnnt_pruning(am, lm, paddle.zeros([1, 3, 2]))


@pytest.mark.parametrize("loss", ["rnnt_loss", "rnnt_loss_pruned"])
def test_losses_float32_within_1e5_of_float64_at_large_logits(loss):
    """Logits of +-700 (and 1e4 spreads): float32 losses and grads within 1e-5 of float64 runs on the same
    inputs. A float32 lse (ulp 6e-5 at 700) missed this by ~1e-4; the rows keep their max exactly instead."""
    B, T, S, C, R = 2, 6, 3, 40, 2
    logits, symbols, ranges = problem(B, T, S, C, R if loss == "rnnt_loss_pruned" else None, seed=16)
    # +-700 (+ noise), the columns the lattice reads on the +700 side: well-conditioned losses near 0, whose
    # float32 values depend on log-probabilities x - lse computed exactly next to 700
    high = logits > 2.5  # few +700 entries per row: softmax values near 1, where an lse error shows fully
    high[..., 0] = True
    for b in range(B):
        high[b][..., symbols[b]] = True
    logits = np.where(high, 700.0, -700.0) + np.random.default_rng(17).normal(0, 0.5, size=logits.shape)
    if loss == "rnnt_loss_pruned":  # windows that keep a path: s_begin = min(t // 2, S + 1 - R)
        ranges = (np.minimum(np.arange(T) // 2, S + 1 - R)[None, :, None] + np.arange(R)).repeat(B, 0)
    results = {}
    for dtype in ("float32", "float64"):
        x = paddle.to_tensor(logits.astype(np.float32).astype(dtype), stop_gradient=False)
        args = (x, paddle.to_tensor(symbols)) + (() if ranges is None else (paddle.to_tensor(ranges),))
        out = getattr(paddle_ext, loss)(*args, 0, reduction="none")
        (g,) = paddle.grad(out.sum(), x)
        results[dtype] = out.numpy(), g.numpy()
    (l32, g32), (l64, g64) = results["float32"], results["float64"]
    assert np.isfinite(l64).all()
    np.testing.assert_allclose(l32, l64, rtol=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-5, atol=1e-5 * np.abs(g64).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gather_half_grads_sum_in_float32(dtype):
    """A grad row summed from 1000 gathered rows is rounded once to the half type (accumulated in float32,
    as the GPU kernel does): within one rounding of the float64 sum (bfloat16 sums kept in bfloat16 were
    4% off)."""
    rng = np.random.default_rng(16)
    x = paddle.to_tensor(rng.normal(size=(1, 2, 8))).astype(dtype)
    x.stop_gradient = False
    index = rng.integers(0, 2, size=(1, 200, 5)).astype(np.int64)
    g = paddle.to_tensor(rng.uniform(0.5, 1.5, size=(1, 200, 5, 8))).astype(dtype)
    (grad,) = paddle.grad(gather(x, paddle.to_tensor(index)), x, g)
    want = refs.rnnt_prune_gather_grad(x.shape, index, g.astype("float32").numpy())
    unit = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]
    np.testing.assert_allclose(grad.astype("float32").numpy(), want, rtol=1.01 * unit)


@pytest.mark.parametrize("pruned", [False, True])
@pytest.mark.parametrize("used", ["px", "py"])
def test_grads_of_one_output_count_the_other_as_zero(pruned, used):
    """paddle.grad of px alone (or py alone): Paddle hands the grad op no grad for the unused output."""
    logits, symbols, ranges = problem(2, 4, 3, 6, 2 if pruned else None, seed=5)
    x = paddle.to_tensor(logits, stop_gradient=False)
    sym = paddle.to_tensor(symbols)
    if pruned:
        px, py = paddle_ext.get_rnnt_logprobs_pruned(x, sym, paddle.to_tensor(ranges), TERM, rnnt_type="modified")
    else:
        px, py = paddle_ext.get_rnnt_logprobs_joint(x, sym, TERM, rnnt_type="modified")
    out = px if used == "px" else py
    g = np.random.default_rng(6).normal(size=out.shape)
    (grad,) = paddle.grad(out, x, paddle.to_tensor(g))
    gx, gy = (g, np.zeros(py.shape)) if used == "px" else (np.zeros(px.shape), g)
    np.testing.assert_allclose(grad.numpy(), refs.rnnt_joint_logprobs_grad(logits, symbols, ranges, TERM, gx, gy),
                               rtol=1e-12, atol=1e-14)
