"""The adaptive softmax's float32 CPU projections on oneDNN's sgemm (pe_adaptive_matmul): the op against
NumPy in every transposition, its grads in dygraph and in static programs, the layers on it against the
same layers on Paddle's matmul, and the fallback where oneDNN is off."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import paddle
import pytest

import paddle_ext
from paddle_ext import _library
from paddle_ext.adaptive_log_softmax import projection
from op_test import static_mode
import refs

ONEDNN = _library.gemm_backend() == "onednn"
needs_onednn = pytest.mark.skipif(not ONEDNN, reason="this Paddle has no oneDNN loaded")


def rand(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def bound(a, b):
    """The float32 GEMM bound of the docs: |C - C_exact| <= k * 2^-24 * (|A| @ |B|) (plus underflow)."""
    k = a.shape[1]
    return k * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) + 1e-30


def op(a, b, tx, ty):
    return _library.ops().pe_adaptive_matmul(paddle.to_tensor(a), paddle.to_tensor(b), tx, ty).numpy()


def test_backend_is_onednn_on_paddle_cpu_wheels():
    assert _library.gemm_backend() in ("onednn", "reference")
    if not paddle.is_compiled_with_cuda():  # every Paddle CPU wheel ships and loads libdnnl.so.3
        assert ONEDNN


@pytest.mark.parametrize("tx", [False, True])
@pytest.mark.parametrize("ty", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (64, 130, 257), (0, 4, 3), (5, 0, 3)])
def test_op_matches_numpy_in_every_layout(m, k, n, tx, ty):
    a, b = rand((m, k), 1), rand((k, n), 2)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = op(a.T.copy() if tx else a, b.T.copy() if ty else b, tx, ty)
    assert got.shape == (m, n) and got.dtype == np.float32
    assert np.all(np.abs(got - want) <= bound(a, b))


@needs_onednn
@pytest.mark.parametrize("ty", [False, True])
@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_dygraph_grads(ty, needs):
    a_np, b_np, g_np = rand((6, 9), 3), rand((9, 4), 4), rand((6, 4), 5)
    a = paddle.to_tensor(a_np, stop_gradient=not needs[0])
    b = paddle.to_tensor(b_np.T.copy() if ty else b_np, stop_gradient=not needs[1])
    out = projection._gemm(a, b, transpose_y=ty)
    out.backward(paddle.to_tensor(g_np))
    a64, b64, g64 = (x.astype(np.float64) for x in (a_np, b_np, g_np))
    if needs[0]:
        np.testing.assert_allclose(a.grad.numpy(), g64 @ b64.T, rtol=1e-5, atol=1e-5)
    else:
        assert a.grad is None
    if needs[1]:
        want = g64.T @ a64 if ty else a64.T @ g64
        np.testing.assert_allclose(b.grad.numpy(), want, rtol=1e-5, atol=1e-5)
    else:
        assert b.grad is None


@needs_onednn
@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("ty", [False, True])
def test_static_program_grads(legacy, ty):
    a_np, b_np = rand((5, 8), 6), rand((8, 3), 7)
    b_fed = b_np.T.copy() if ty else b_np
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            a = paddle.static.data("a", [-1, 8], "float32")
            b = paddle.static.data("b", list(b_fed.shape), "float32")
            a.stop_gradient = b.stop_gradient = False
            out = projection._gemm(a, b, transpose_y=ty)
            loss = _library.sum_along(_library.sum_along(out * out, 1), 0)
            grads = paddle.static.gradients([loss], [a, b])
        names = [o.type if isinstance(getattr(o, "type", None), str) else o.name() for o in main.global_block().ops]
        assert any("pe_adaptive_matmul" in name for name in names), names
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        out_v, ga, gb = exe.run(main, feed={"a": a_np, "b": b_fed}, fetch_list=[out, *grads])
    a64, b64 = a_np.astype(np.float64), b_np.astype(np.float64)
    want = a64 @ b64
    np.testing.assert_allclose(out_v, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ga, 2 * want @ b64.T, rtol=1e-4, atol=1e-4)
    gb_want = a64.T @ (2 * want)
    np.testing.assert_allclose(gb, gb_want.T if ty else gb_want, rtol=1e-4, atol=1e-4)


def _layer_step(layer, x_np, y_np, use_gemm, monkeypatch):
    calls = []
    original = _library.ops().pe_adaptive_matmul

    def counted(*args):
        calls.append(args[2:])
        return original(*args)

    with monkeypatch.context() as patch:
        if not use_gemm:
            patch.setattr(projection, "_gemm_fits", lambda *args: False)
        patch.setattr(_library.ops(), "pe_adaptive_matmul", counted)
        x = paddle.to_tensor(x_np, stop_gradient=False)
        out, loss = layer(x, paddle.to_tensor(y_np))
        loss.backward()
        lp = layer.log_prob(x).numpy()
        pred = layer.predict(x).numpy()
    grads = [x.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]
    layer.clear_gradients()
    return [out.numpy(), loss.numpy(), lp, pred, grads], calls


@needs_onednn
@pytest.mark.parametrize("head_bias", [False, True])
def test_layer_float32_same_as_on_paddle_matmul(head_bias, monkeypatch):
    paddle.seed(3)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(32, 100, [10, 40], div_value=2.0, head_bias=head_bias)
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(50, 32)).astype(np.float32)
    y_np = rng.integers(0, 100, size=50)
    ours, calls = _layer_step(layer, x_np, y_np, True, monkeypatch)
    theirs, none = _layer_step(layer, x_np, y_np, False, monkeypatch)
    assert calls and not none  # head + 2 tails x 2 forward, the grads, log_prob and predict
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours[3], theirs[3])
    for a, b in zip(ours[4], theirs[4]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _exact_projection(kind, m, n_in, k, rng):
    """x [m, n_in] and w [n_in, k] whose float32 product is exact in any summation order (small integers), so
    that the logits of every row block equal the whole product's: plain, ±700 / ±1e4 spreads, masked classes
    (-inf logits through the last feature, 1 on every row), or rows of only -inf and of only +inf (NaN)."""
    x = rng.integers(-2, 3, size=(m, n_in)).astype(np.float32)
    w = rng.integers(-3, 4, size=(n_in, k)).astype(np.float32)
    if kind == "spread":
        w *= np.float32(700 if k < 1000 else 1e4)
    elif kind == "masked" and n_in >= 2 and k >= 3:
        x[:, -1] = 1
        w[:, ::3] = 0
        w[-1, ::3] = -np.inf
    elif kind == "nonfinite" and n_in >= 2:  # every logit of a row -inf or +inf: NaN rows (the header's rules)
        x[:, -1] = np.where(np.arange(m) % 2 == 0, 1, -1)
        w[-1, :] = -np.inf
    return x, w


@needs_onednn
@pytest.mark.parametrize("m,n_in,k", [
    (512, 512, 300),     # n_in >= 128: the grad in place in the block's logits; m >= 512: w copied transposed
    (300, 1024, 50),     # w read in place (n_in >= 1024)
    (256, 128, 900),     # w read in place (m < 512)
    (300, 128, 60000),   # 139-row blocks: three of them, the last partial
    (64, 8, 40000),      # n_in < 128: passes of 16384 columns, the last one partial; w read in place
    (600, 16, 5000),     # passes of 1744 columns, w copied transposed
    (520, 16, 20000),    # 419-row blocks (two), each in passes of 2496 columns; w copied transposed
    (3, 5, 7), (5, 3, 1), (0, 4, 9), (4, 0, 6),
])
@pytest.mark.parametrize("kind", ["plain", "spread", "masked", "nonfinite"])
def test_linear_target_matches_its_composition(m, n_in, k, kind):
    """pe_adaptive_linear_target (the grads of sum(out) formed in the forward) and pe_adaptive_linear_target_vjp
    (any out_grad, the logits recomputed) = the whole-logits composition: pe_adaptive_matmul, the target op (out
    bit for bit: the logits are exact) and its grad op, then both grad products within the float32 GEMM bound,
    with targets in every block."""
    rng = np.random.default_rng(m + 7 * k + n_in)
    x, w = _exact_projection(kind, m, n_in, k, rng)
    target = rng.integers(0, max(k, 1), size=m)
    if m:
        target[-1] = k - 1
    ops = _library.ops()
    tx, tw, tt = paddle.to_tensor(x), paddle.to_tensor(w), paddle.to_tensor(target)
    out, x_unit, w_unit = ops.pe_adaptive_linear_target(tx, tw, tt, True)
    out_only, x_none, w_none = ops.pe_adaptive_linear_target(tx, tw, tt, False)
    g = rand((m,), 3)
    x_grad, w_grad = ops.pe_adaptive_linear_target_vjp(tx, tw, tt, paddle.to_tensor(g))
    assert x_unit.shape == x_grad.shape == [m, n_in] and w_unit.shape == w_grad.shape == [n_in, k]
    assert x_none.size == 0 and w_none.size == 0
    logits = paddle.to_tensor(x.astype(np.float64) @ w.astype(np.float64), dtype="float32")  # exact
    want_out, lse = ops.pe_adaptive_log_softmax_target(logits, tt)
    np.testing.assert_array_equal(out.numpy(), want_out.numpy())
    np.testing.assert_array_equal(out_only.numpy(), want_out.numpy())
    for grad_out, xg, wg in ((np.ones(m, np.float32), x_unit, w_unit), (g, x_grad, w_grad)):
        d = ops.pe_adaptive_log_softmax_target_vjp(logits, tt, lse, paddle.to_tensor(grad_out)).numpy()
        d64 = d.astype(np.float64)
        for got, want, limit in ((xg.numpy(), d64 @ w.T.astype(np.float64), bound(d, w.T)),
                                 (wg.numpy(), x.T.astype(np.float64) @ d64, bound(x.T, d))):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            finite = ~np.isnan(want)
            np.testing.assert_array_less(np.abs(got - want)[finite], limit[finite] + 1e-30 * 2)


@needs_onednn
def test_linear_target_rejects_other_dtypes_and_bad_targets():
    f64 = paddle.zeros([2, 3], "float64")
    with pytest.raises(Exception, match="float32 CPU tensors only"):
        _library.ops().pe_adaptive_linear_target_vjp(f64, paddle.zeros([3, 4], "float64"), paddle.zeros([2], "int64"),
                                                     paddle.zeros([2], "float64"))
    with pytest.raises(IndexError, match=r"target\[1\] = 4 is out of range \[0, 4\)"):
        _library.ops().pe_adaptive_linear_target(paddle.zeros([2, 3]), paddle.zeros([3, 4]),
                                                 paddle.to_tensor([0, 4]), True)


@needs_onednn
def test_layer_grads_of_the_weights_alone_float32():
    """A frozen input (x needs no grad) and paddle.grad of one weight: the shared projection + target PyLayer
    returns the weights' grads only, equal to the layer's on Paddle's matmul."""
    paddle.seed(1)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(32, 100, [10, 40], div_value=2.0)
    rng = np.random.default_rng(0)
    x = paddle.to_tensor(rng.normal(size=(50, 32)).astype(np.float32))
    y = paddle.to_tensor(rng.integers(0, 100, size=50))

    def grads(fits):
        fits_before = projection._gemm_fits
        projection._gemm_fits = fits_before if fits else (lambda *args: False)
        try:
            layer(x, y)[1].backward()
            out = [p.grad.numpy().copy() for p in layer.parameters()]
            layer.clear_gradients()
            (head_grad,) = paddle.grad(layer(x, y)[1], layer.parameters()[0])
            return out + [head_grad.numpy()]
        finally:
            projection._gemm_fits = fits_before

    for a, b in zip(grads(True), grads(False)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@needs_onednn
def test_layer_second_order_grads_float32():
    """create_graph=True: the backward runs on Paddle's differentiable matmul, so the grad of a grad is there
    (and equals the fallback's)."""
    paddle.seed(4)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 40, [8, 20], div_value=2.0)
    rng = np.random.default_rng(1)
    x_np, y_np = rng.normal(size=(12, 16)).astype(np.float32), rng.integers(0, 40, size=12)

    def second(fits):
        fits_before = projection._gemm_fits
        projection._gemm_fits = fits_before if fits else (lambda *args: False)
        try:
            x = paddle.to_tensor(x_np, stop_gradient=False)
            (gx,) = paddle.grad(layer(x, paddle.to_tensor(y_np))[1], x, create_graph=True)
            (ggx,) = paddle.grad((gx * gx).sum(), x)
            return gx.numpy(), ggx.numpy()
        finally:
            projection._gemm_fits = fits_before

    for a, b in zip(second(True), second(False)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@needs_onednn
def test_adaptive_embedding_uses_it(monkeypatch):
    paddle.seed(5)
    emb = paddle_ext.nn.AdaptiveEmbedding(100, 16, [10, 40], div_value=2.0)
    ids = paddle.to_tensor(np.random.default_rng(2).integers(0, 100, size=(4, 9)))
    calls = []
    original = _library.ops().pe_adaptive_matmul
    monkeypatch.setattr(_library.ops(), "pe_adaptive_matmul", lambda *a: calls.append(a[2:]) or original(*a))
    out = emb(ids)
    out.sum().backward()
    assert (False, True) in calls
    w1, w2 = emb.tail_weights[0]
    flat = ids.numpy().reshape(-1)
    sel = (flat >= 10) & (flat < 40)
    want = (w1.numpy().astype(np.float64) @ w2.numpy().astype(np.float64)[:, flat[sel] - 10]).T
    np.testing.assert_allclose(out.numpy().reshape(-1, 16)[sel], want, rtol=1e-5, atol=1e-6)


def test_float64_and_16_bit_stay_on_paddle_matmul():
    a64 = paddle.to_tensor(rand((3, 4)).astype(np.float64))
    assert not projection._gemm_fits(a64, a64.t())
    a16 = paddle.to_tensor(rand((3, 4))).astype("bfloat16")
    assert not projection._gemm_fits(a16, a16.t())


def test_disabled_onednn_falls_back_to_paddle_matmul():
    """PADDLE_EXT_DISABLE_ONEDNN_GEMM=1: the backend is the reference loop, the layer uses Paddle's matmul,
    and the op itself (reached by a static program saved elsewhere) still computes the product."""
    code = textwrap.dedent("""
        import numpy as np, paddle, paddle_ext
        from paddle_ext import _library
        from paddle_ext.adaptive_log_softmax import projection
        assert _library.gemm_backend() == "reference", _library.gemm_backend()
        a = paddle.to_tensor(np.random.default_rng(0).normal(size=(7, 300)).astype("float32"))
        b = paddle.to_tensor(np.random.default_rng(1).normal(size=(9, 300)).astype("float32"))
        assert not projection._gemm_fits(a, b)
        got = _library.ops().pe_adaptive_matmul(a, b, False, True).numpy()
        np.testing.assert_allclose(got, a.numpy().astype("float64") @ b.numpy().astype("float64").T, rtol=1e-4, atol=1e-4)
        layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 30, [5, 10])
        out, loss = layer(paddle.randn([6, 8]), paddle.to_tensor([0, 4, 5, 9, 10, 29]))
        loss.backward()
        print("ok")
    """)
    env = dict(os.environ, PADDLE_EXT_DISABLE_ONEDNN_GEMM="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


@needs_onednn
def test_paddle_grad_of_one_input():
    """paddle.grad asking for one input's grad only (the other one's slot pruned), first and second order."""
    a = paddle.to_tensor(rand((4, 6), 8), stop_gradient=False)
    b = paddle.to_tensor(rand((6, 3), 9), stop_gradient=False)
    for create_graph in (False, True):
        (ga,) = paddle.grad(projection._gemm(a, b).sum(), a, create_graph=create_graph)
        np.testing.assert_allclose(ga.numpy(), np.ones((4, 3)) @ b.numpy().T, rtol=1e-5, atol=1e-6)
        (gb,) = paddle.grad(projection._gemm(a, b).sum(), b, create_graph=create_graph)
        np.testing.assert_allclose(gb.numpy(), a.numpy().T @ np.ones((4, 3)), rtol=1e-5, atol=1e-6)


def _on_paddle_matmul(fn):
    """fn() with the projections on Paddle's matmul: the layer's whole-logits path."""
    fits_before = projection._gemm_fits
    projection._gemm_fits = lambda *args: False
    try:
        return fn()
    finally:
        projection._gemm_fits = fits_before


@needs_onednn
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("head_bias", [False, True])
@pytest.mark.parametrize("uses_output", [False, True])
def test_layer_in_row_blocks_equals_the_whole_logits_path(reduction, head_bias, uses_output):
    """A head of 50002 columns over 400 rows (blocks of 167 rows) and tails of 20000 and 30000 classes: the
    layer's loss, output and every grad equal those of the whole-logits path on Paddle's matmul, for a reduced
    loss (grads formed in the forward and scaled), for 'none' and for a loss that also uses `output` (grads
    recomputed block by block)."""
    paddle.seed(7)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 100000, [50000, 70000], div_value=2.0, head_bias=head_bias,
                                                     reduction=reduction, ignore_index=-1)
    if head_bias:
        layer.head_bias.set_value(paddle.to_tensor(rand((50002,), 9)))
    rng = np.random.default_rng(3)
    x_np = rng.normal(size=(400, 16)).astype(np.float32)
    y_np = np.where(rng.random(400) < 0.5, rng.integers(0, 50000, 400), rng.integers(50000, 100000, 400))
    y_np[::37] = -1  # some rows ignored
    weights = rng.normal(size=400).astype(np.float32)

    def run():
        x = paddle.to_tensor(x_np, stop_gradient=False)
        out, loss = layer(x, paddle.to_tensor(y_np))
        total = loss.sum() if reduction == "none" else loss
        if uses_output:
            total = total + (out * paddle.to_tensor(weights)).sum()
        total.backward()
        grads = [x.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]
        layer.clear_gradients()
        return [out.numpy(), loss.numpy()] + grads

    blocked = run()
    whole = _on_paddle_matmul(run)
    for a, b in zip(blocked, whole):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@needs_onednn
def test_layer_reduced_step_forms_the_grads_in_the_forward(monkeypatch):
    """reduction 'mean' with the loss alone: the backward runs no projection op (it scales the grads the
    forward formed); a loss that also uses `output` recomputes them (pe_adaptive_linear_target_vjp)."""
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 60, [20, 40], div_value=2.0)
    x = paddle.to_tensor(rand((30, 8), 4), stop_gradient=False)
    y = paddle.to_tensor(np.arange(30) * 2)
    calls = []
    dygraph_op = _library.dygraph_op
    monkeypatch.setattr(_library, "dygraph_op", lambda name: calls.append(name) or dygraph_op(name))
    out, loss = layer(x, y)
    loss.backward()
    assert "pe_adaptive_linear_target_vjp" not in calls
    out, loss = layer(x, y)
    (loss + (out * paddle.arange(30).astype("float32")).sum()).backward()
    assert calls.count("pe_adaptive_linear_target_vjp") == 3  # the head and both tails


@needs_onednn
@pytest.mark.parametrize("head_bias", [False, True])
def test_log_prob_and_predict_in_row_blocks(head_bias):
    """log_prob and predict under no_grad (blocks of 83 rows over 200) equal the whole computation on Paddle's
    matmul; log_prob with grads recorded is the same too."""
    paddle.seed(8)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 100000, [50000, 70000], div_value=2.0, head_bias=head_bias)
    x = paddle.to_tensor(rand((200, 16), 5) * 3)
    with paddle.no_grad():
        blocked = layer.log_prob(x).numpy(), layer.predict(x).numpy()
        whole = _on_paddle_matmul(lambda: (layer.log_prob(x).numpy(), layer.predict(x).numpy()))
    np.testing.assert_allclose(blocked[0], whole[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(blocked[1], blocked[0].argmax(axis=1))
    assert (blocked[1] == whole[1]).mean() > 0.99  # (float32 near-ties may go either way)
    np.testing.assert_allclose(layer.log_prob(x).numpy(), blocked[0], rtol=1e-5, atol=1e-5)
