"""tdt_loss and multiblank_rnnt_loss (the fused transducer_jump_loss op) against the NumPy references of
refs/transducer_jump_loss.py: values and grads in dygraph and static programs, dtypes, reductions, sigma,
FastEmit, boundaries, duration lists, adversarial logits, no-path items, empty batches, errors and export."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import analytic_grads, check_export, check_grad, check_output, static_grads

KINDS = ("tdt", "multiblank")


def problem(kind, B=3, T=6, S=3, C=5, durations=(0, 1, 2), big=(2, 3), seed=0, scale=1.0, boundary=True):
    """(logits, symbols, boundary or None, lattice list, blank) for one kind."""
    rng = np.random.default_rng(seed)
    units = C + len(durations) if kind == "tdt" else C
    logits = rng.normal(size=(B, T, S + 1, units)) * scale
    blank = 0 if kind == "tdt" else C - 1
    symbols = rng.integers(0, C, size=(B, S)).astype(np.int64)
    bd = None
    if boundary:
        rows = [[0, 0, S, T]] + [[int(rng.integers(0, 2)), int(rng.integers(0, 2)), int(rng.integers(1, S + 1)),
                                  int(rng.integers(T - 2, T + 1))] for _ in range(B - 1)]
        bd = np.array([[min(r[0], r[2]), min(r[1], r[3]), r[2], r[3]] for r in rows], np.int64)
    return logits, symbols, bd, (list(durations) if kind == "tdt" else list(big)), blank


def api(kind):
    return paddle_ext.tdt_loss if kind == "tdt" else paddle_ext.multiblank_rnnt_loss


def ref_loss(kind, logits, symbols, lattice, blank, boundary=None, sigma=0.0):
    fn = refs.tdt_loss if kind == "tdt" else refs.multiblank_loss
    return fn(np.asarray(logits, np.float64), symbols, lattice, blank, boundary, sigma)


def ref_grad(kind, logits, symbols, lattice, blank, boundary=None, sigma=0.0, fastemit_lambda=0.0, loss_grad=None,
             clamp=-1.0):
    fn = refs.tdt_loss_grad if kind == "tdt" else refs.multiblank_loss_grad
    return fn(np.asarray(logits, np.float64), symbols, lattice, blank, boundary, sigma, fastemit_lambda, loss_grad,
              clamp)


def reduce(loss, reduction):
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


def t(a, stop_gradient=True):
    x = paddle.to_tensor(a)
    x.stop_gradient = stop_gradient
    return x


def run(kind, logits, symbols, lattice, blank, boundary=None, **kw):
    """float64 (loss, grad, weights) in dygraph: the grad of sum(weights * loss) for reduction 'none' (the
    default here), of the reduced loss otherwise; kw goes to the API."""
    x = t(logits, False)
    kw.setdefault("reduction", "none")
    loss = api(kind)(x, t(symbols), lattice, blank, None if boundary is None else t(boundary), **kw)
    weights = np.linspace(0.5, 1.5, logits.shape[0])
    (loss * t(weights)).sum().backward() if kw["reduction"] == "none" else loss.backward()
    return loss, x.grad, weights


# ---------------------------------------------------------------------------------------------- values


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("with_boundary", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_loss_matches_reference_in_every_mode(kind, with_boundary, reduction):
    logits, symbols, bd, lattice, blank = problem(kind, seed=1, boundary=with_boundary)
    inputs = {"logits": logits, "symbols": symbols}
    if bd is not None:
        inputs["boundary"] = bd

    def fn(x, s, b=None):
        return api(kind)(x, s, lattice, blank, b, reduction=reduction, sigma=0.05)

    def expected(x, s, b=None):
        return reduce(ref_loss(kind, x, s, lattice, blank, b, sigma=0.05), reduction)

    check_output(fn, inputs, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sigma", [0.0, 0.3])
@pytest.mark.parametrize("fastemit_lambda", [0.0, 0.7])
def test_float64_grads_equal_reference_to_1e_9(kind, sigma, fastemit_lambda):
    logits, symbols, bd, lattice, blank = problem(kind, seed=2)
    loss, grad, weights = run(kind, logits, symbols, lattice, blank, bd, sigma=sigma, fastemit_lambda=fastemit_lambda)
    np.testing.assert_allclose(loss.numpy(), ref_loss(kind, logits, symbols, lattice, blank, bd, sigma), rtol=1e-9)
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, sigma, fastemit_lambda, weights)
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-9, atol=1e-12)
    assert np.abs(want).max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_static_grads_equal_dygraph_grads(kind):
    logits, symbols, bd, lattice, blank = problem(kind, seed=3)
    inputs = {"logits": logits, "symbols": symbols, "boundary": bd}

    def fn(x, s, b):
        return api(kind)(x, s, lattice, blank, b, reduction="none", fastemit_lambda=0.25, sigma=0.1)

    (dy,), weights = analytic_grads(fn, inputs, {}, ["logits"])
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, 0.1, 0.25, weights[0])
    np.testing.assert_allclose(dy, want, rtol=1e-9, atol=1e-12)
    for legacy in (False, True):
        (st,) = static_grads(fn, inputs, {}, ["logits"], weights, legacy=legacy)
        np.testing.assert_allclose(st, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_grads_match_finite_differences(kind):
    logits, symbols, bd, lattice, blank = problem(kind, B=2, T=4, S=2, C=3, durations=(0, 1, 3), big=(2,), seed=4)
    inputs = {"logits": logits, "symbols": symbols, "boundary": bd}
    check_grad(lambda x, s, b: api(kind)(x, s, lattice, blank, b, reduction="none", sigma=0.2), inputs, "logits",
               modes=("dygraph",))


@pytest.mark.parametrize("durations", [[0, 1], [1, 0, 4], [0, 1, 2, 3], [0, 2, 1, 3, 5], [0, 1, 2, 3, 4, 7],
                                       [1, 2, 3, 4, 5], [0, 2, 4], [4, 2], [3], [1], [5, 0, 3, 1]])
def test_tdt_duration_lists_with_or_without_0_and_1(durations):
    """Any distinct durations >= 0 with one >= 1 (NeMo's [1, 2, 3, 4, 5]: every emission takes a frame; [0, 2, 4]:
    no one-frame step), in any order: the lattice reference (boundaries), and NeMo's alpha recursion (whole
    lattices); items no path reaches (e.g. an odd T with only even steps) are inf with zero grads."""
    logits, symbols, bd, lattice, blank = problem("tdt", T=8, S=4, durations=durations, seed=len(durations))
    for boundary in (bd, None):
        loss, grad, weights = run("tdt", logits, symbols, lattice, 2, boundary, sigma=0.1)
        want_loss = ref_loss("tdt", logits, symbols, lattice, 2, boundary, 0.1)
        np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-9)
        np.testing.assert_allclose(grad.numpy(), ref_grad("tdt", logits, symbols, lattice, 2, boundary, 0.1, 0.0,
                                                          weights), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(loss.numpy(), refs.tdt_loss_nemo(logits, symbols, lattice, 2, 0.1), rtol=1e-9)


@pytest.mark.parametrize("big", [[], [2], [4, 2], [2, 3, 5, 8]])
def test_multiblank_big_blank_lists(big):
    logits, symbols, bd, lattice, blank = problem("multiblank", T=9, C=7, big=big, seed=len(big))
    loss, grad, weights = run("multiblank", logits, symbols, lattice, blank, bd)
    np.testing.assert_allclose(loss.numpy(), ref_loss("multiblank", logits, symbols, lattice, blank, bd), rtol=1e-9)
    np.testing.assert_allclose(grad.numpy(), ref_grad("multiblank", logits, symbols, lattice, blank, bd,
                                                      loss_grad=weights), rtol=1e-9, atol=1e-12)


def test_multiblank_without_big_blanks_equals_rnnt_loss():
    logits, symbols, bd, _, blank = problem("multiblank", seed=5)
    ours = paddle_ext.multiblank_rnnt_loss(t(logits), t(symbols), [], blank, t(bd), reduction="none")
    theirs = paddle_ext.rnnt_loss(t(logits), t(symbols), blank, t(bd), reduction="none")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reduced_losses_backpropagate_the_reduction(kind, reduction):
    logits, symbols, bd, lattice, blank = problem(kind, seed=6)
    _, grad, _ = run(kind, logits, symbols, lattice, blank, bd, reduction=reduction)
    upstream = np.full(logits.shape[0], 1.0 if reduction == "sum" else 1.0 / logits.shape[0])
    np.testing.assert_allclose(grad.numpy(), ref_grad(kind, logits, symbols, lattice, blank, bd, loss_grad=upstream),
                               rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------ clamp


def upstream(reduction, weights):
    """Each item's upstream grad in run(): the weights for 'none', the reduction's otherwise."""
    B = len(weights)
    return {"none": weights, "sum": np.ones(B), "mean": np.full(B, 1.0 / B)}[reduction]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("clamp", [0.01, 0.2])
def test_clamp_bounds_each_items_token_grads_before_the_upstream_grad(kind, reduction, clamp):
    """NeMo's clamp: d loss[b] / d logit (FastEmit included) clamped to [-clamp, clamp] on the token units, then
    times the item's upstream grad; the duration units of TDT are not clamped; the loss is unchanged."""
    logits, symbols, bd, lattice, blank = problem(kind, seed=13, scale=2.0)
    kw = dict(reduction=reduction, sigma=0.1, fastemit_lambda=0.5)
    loss, grad, weights = run(kind, logits, symbols, lattice, blank, bd, clamp=clamp, **kw)
    plain_loss, plain_grad, _ = run(kind, logits, symbols, lattice, blank, bd, **kw)
    np.testing.assert_array_equal(loss.numpy(), plain_loss.numpy())
    up = upstream(reduction, weights)
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, 0.1, 0.5, up, clamp)
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-9, atol=1e-12)
    own = ref_grad(kind, logits, symbols, lattice, blank, bd, 0.1, 0.5)  # each item's unscaled grads
    C = logits.shape[-1] - (len(lattice) if kind == "tdt" else 0)
    assert (np.abs(own[..., :C]) > clamp).any(), "the clamp must bite"
    np.testing.assert_allclose(grad.numpy()[..., C:], plain_grad.numpy()[..., C:], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clamp", [-1.0, 0.0, -7, 0])
def test_clamp_zero_or_negative_is_off(kind, clamp):
    logits, symbols, bd, lattice, blank = problem(kind, seed=14, scale=2.0)
    _, grad, _ = run(kind, logits, symbols, lattice, blank, bd, clamp=clamp)
    _, plain, _ = run(kind, logits, symbols, lattice, blank, bd)
    np.testing.assert_array_equal(grad.numpy(), plain.numpy())


@pytest.mark.parametrize("kind", KINDS)
def test_clamp_with_adversarial_logits_and_items_without_path(kind):
    """±1e4 spreads, -inf units, an item without a path (zero grads) and NaN-free clamped grads elsewhere."""
    logits, symbols, bd, lattice, blank = problem(kind, B=4, seed=15, scale=1e4)
    logits[0, 1, 1, :3] = -np.inf
    logits[2] = -np.inf  # item 2: no arc anywhere, no path
    loss, grad, weights = run(kind, logits, symbols, lattice, blank, bd, sigma=0.5, clamp=0.05)
    got = grad.numpy()
    assert np.isinf(loss.numpy()[2]) and np.all(got[2] == 0) and np.isfinite(got).all()
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, 0.5, loss_grad=weights, clamp=0.05)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_clamp_static_grads_equal_the_reference(kind):
    logits, symbols, bd, lattice, blank = problem(kind, seed=16, scale=2.0)
    inputs = {"logits": logits, "symbols": symbols, "boundary": bd}

    def fn(x, s, b):
        return api(kind)(x, s, lattice, blank, b, reduction="none", clamp=0.05)

    (dy,), weights = analytic_grads(fn, inputs, {}, ["logits"])
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, loss_grad=weights[0], clamp=0.05)
    np.testing.assert_allclose(dy, want, rtol=1e-9, atol=1e-12)
    for legacy in (False, True):
        (st,) = static_grads(fn, inputs, {}, ["logits"], weights, legacy=legacy)
        np.testing.assert_allclose(st, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_clamp_in_float32(kind):
    logits, symbols, bd, lattice, blank = problem(kind, seed=17, scale=2.0)
    x = t(logits.astype(np.float32), False)
    api(kind)(x, t(symbols), lattice, blank, t(bd), reduction="mean", clamp=0.02).backward()
    want = ref_grad(kind, logits.astype(np.float32), symbols, lattice, blank, bd, loss_grad=np.full(3, 1 / 3),
                    clamp=0.02)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=2e-5, atol=1e-7)


# ------------------------------------------------------------------------------------- adversarial


@pytest.mark.parametrize("kind", KINDS)
def test_huge_spreads_and_minus_inf_logits(kind):
    logits, symbols, bd, lattice, blank = problem(kind, B=4, seed=7, scale=1e4)
    logits[0, 1, 1, :3] = -np.inf  # some units impossible at one node
    logits[1, 2, 0, :] = -np.inf  # a node with no arcs at all
    logits[2, :, :, blank] = -np.inf  # item 2 can never emit a blank: no path
    loss, grad, weights = run(kind, logits, symbols, lattice, blank, bd, sigma=0.5)
    want_loss = ref_loss(kind, logits, symbols, lattice, blank, bd, 0.5)
    assert want_loss[2] == np.inf and np.isfinite(want_loss[[0, 1, 3]]).all()
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-9)
    want = ref_grad(kind, logits, symbols, lattice, blank, bd, 0.5, loss_grad=weights)
    got = grad.numpy()
    assert np.isfinite(got).all() and np.all(got[2] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("S", [7, 13])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_rows_over_several_simd_chunks_and_boxes_inside_them(kind, S, scale):
    """S + 1 nodes per frame span several vector chunks; boxes start and end inside them; some units -inf:
    the frame-at-a-time recursions' shifted loads and row tails against the reference."""
    logits, symbols, _, lattice, blank = problem(kind, B=4, T=9, S=S, seed=S, scale=scale, boundary=False,
                                                 durations=(0, 1, 2, 4), big=(2, 3))
    logits[np.random.default_rng(S).random(logits.shape) < 0.05] = -np.inf
    bd = np.array([[0, 0, S, 9], [3, 1, S, 9], [1, 2, S - 2, 7], [5, 0, S - 1, 8]], np.int64)
    for boundary in (None, bd):
        loss, grad, weights = run(kind, logits, symbols, lattice, blank, boundary, sigma=0.1)
        want_loss = ref_loss(kind, logits, symbols, lattice, blank, boundary, 0.1)
        assert np.isfinite(want_loss).any()
        np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-9)
        np.testing.assert_allclose(grad.numpy(), ref_grad(kind, logits, symbols, lattice, blank, boundary, 0.1,
                                                          loss_grad=weights), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_symbols_that_are_blank_units_share_their_column(kind):
    """A node's symbol may be the blank (or a big blank): the column gets the occupancy of every arc emitting it."""
    logits, symbols, bd, lattice, blank = problem(kind, T=7, S=5, C=6, big=(2, 3), seed=12)
    symbols[0, :] = blank
    if kind == "multiblank":
        symbols[1, :] = blank - 1  # the first big blank
    loss, grad, weights = run(kind, logits, symbols, lattice, blank, bd, fastemit_lambda=0.5)
    np.testing.assert_allclose(loss.numpy(), ref_loss(kind, logits, symbols, lattice, blank, bd), rtol=1e-9)
    np.testing.assert_allclose(grad.numpy(), ref_grad(kind, logits, symbols, lattice, blank, bd, 0.0, 0.5, weights),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_an_item_without_path_gives_inf_and_the_batch_goes_on(kind):
    logits, symbols, _, lattice, blank = problem(kind, seed=8)
    bd = np.array([[0, 0, 3, 6], [0, 0, 2, 0], [0, 0, 1, 5]], np.int64)  # item 1: symbols but no frame
    loss, grad, _ = run(kind, logits, symbols, lattice, blank, bd, reduction="mean")
    assert loss.numpy() == np.inf
    g = grad.numpy()
    assert np.all(g[1] == 0) and np.abs(g[0]).max() > 0 and np.isfinite(g).all()
    np.testing.assert_allclose(g, ref_grad(kind, logits, symbols, lattice, blank, bd, loss_grad=np.full(3, 1 / 3)),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_batch(kind):
    logits, symbols, _, lattice, blank = problem(kind, B=1, seed=9, boundary=False)
    x = t(logits[:0], False)
    loss = api(kind)(x, t(symbols[:0]), lattice, blank, reduction="none")
    assert loss.shape == [0]
    loss.sum().backward()
    assert x.grad.shape == [0] + list(logits.shape[1:])
    assert float(api(kind)(t(logits[:0]), t(symbols[:0]), lattice, blank, reduction="sum")) == 0.0


# ------------------------------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-5), ("float16", 2e-2), ("bfloat16", 5e-2)])
def test_lower_precision_dtypes(kind, dtype, rtol):
    logits, symbols, bd, lattice, blank = problem(kind, seed=10)
    x = paddle.to_tensor(logits).astype(dtype)
    rounded = x.astype("float64").numpy()
    x.stop_gradient = False
    loss = api(kind)(x, t(symbols), lattice, blank, t(bd), reduction="none")
    assert loss.dtype == x.dtype
    loss.sum().backward()
    assert x.grad.dtype == x.dtype
    np.testing.assert_allclose(loss.astype("float64").numpy(), ref_loss(kind, rounded, symbols, lattice, blank, bd),
                               rtol=rtol)
    want = ref_grad(kind, rounded, symbols, lattice, blank, bd)
    np.testing.assert_allclose(x.grad.astype("float64").numpy(), want, rtol=rtol, atol=rtol * np.abs(want).max())


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("call,match", [
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0], 0), r"tdt_loss: durations must hold a duration >= 1 .*got \[0\]"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [], 0), r"tdt_loss: durations must hold a duration >= 1 .*got \[\]"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 1], 0), r"tdt_loss: durations must be distinct, got \[0, 1, 1\]"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, -2], 0), r"tdt_loss: durations must hold ints >= 0, got -2"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1.5], 0), r"tdt_loss: durations must be a list of ints"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, list(range(9)), 0), r"tdt_loss: logits' last dim must be C \+ D"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 2], 5),
     r"tdt_loss: termination_symbol must be an int in \[0, C\) = \[0, 5\), C = logits' last dim - len\(durations\) = "
     r"8 - 3 = 5; got 5"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 2], 0, reduction="avg"), r"tdt_loss: reduction must be one of"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 2], 0, sigma=float("inf")), r"tdt_loss: sigma must be a finite"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 2], 0, fastemit_lambda=-1.0),
     r"tdt_loss: fastemit_lambda must be a finite float >= 0, got -1.0"),
    (lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1, 2], 0, clamp=float("nan")), r"tdt_loss: clamp must be a float .*nan"),
    (lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s, [2], 7, clamp="0.1"),
     r"multiblank_rnnt_loss: clamp must be a float .*'0.1'"),
    (lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s, [1], 7),
     r"multiblank_rnnt_loss: big_blank_durations must hold ints >= 2, got 1"),
    (lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s, [2, 2], 7),
     r"multiblank_rnnt_loss: big_blank_durations must be distinct"),
    (lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s, [2, 3], 1),
     r"multiblank_rnnt_loss: 2 big blanks .* termination_symbol must be >= 2, got 1"),
    (lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s + 7, [2], 7), r"multiblank_rnnt_loss: symbols must lie in"),
])
def test_errors_name_the_argument_and_value(call, match):
    logits, symbols, _, _, _ = problem("tdt", C=5, durations=(0, 1, 2), boundary=False)
    with pytest.raises((ValueError, TypeError), match=match):
        call(t(logits), t(symbols))


def test_a_size_derived_from_the_logits_says_how():
    """C = logits' last dim - len(durations): a symbol out of range names that subtraction, not just [0, C)."""
    x = paddle.randn([1, 4, 3, 5], dtype="float64")
    with pytest.raises(ValueError, match=r"^tdt_loss: symbols must lie in \[0, C\) = \[0, 1\), C = logits' last dim - "
                                         r"len\(durations\) = 5 - 4 = 1; got values in \[1, 2\]$"):
        paddle_ext.tdt_loss(x, paddle.to_tensor([[1, 2]]), [0, 1, 2, 3], 0)
    with pytest.raises(ValueError, match=r"tdt_loss: logits' last dim must be C \+ D .* D = len\(durations\) = 5, got 5 "
                                         r"\(C = 5 - 5 = 0\)"):
        paddle_ext.tdt_loss(x, paddle.to_tensor([[1, 2]]), [0, 1, 2, 3, 4], 0)


def test_bad_boundary_is_rejected():
    logits, symbols, _, lattice, blank = problem("tdt", boundary=False)
    bd = np.array([[0, 0, 3, 6], [0, 0, 4, 6], [0, 0, 1, 1]], np.int64)
    with pytest.raises(ValueError, match=r"tdt_loss: boundary row 1"):
        paddle_ext.tdt_loss(t(logits), t(symbols), lattice, blank, t(bd))


def test_higher_order_grads_are_refused():
    logits, symbols, _, lattice, blank = problem("tdt", boundary=False)
    x = t(logits, False)
    loss = paddle_ext.tdt_loss(x, t(symbols), lattice, blank)
    (g,) = paddle.grad(loss, x, create_graph=True)  # (the refusal comes with a backward through g)
    with pytest.raises(NotImplementedError, match=r"tdt_loss\b.*: higher-order grads are not supported"):
        (g * g).sum().backward()
    (g,) = paddle.grad(paddle_ext.tdt_loss(x, t(symbols), lattice, blank), x)  # first order works
    assert np.abs(g.numpy()).max() > 0


# ------------------------------------------------------------------------------------------ export


@pytest.mark.parametrize("kind", KINDS)
def test_to_static_export_round_trip(kind):
    logits, symbols, bd, lattice, blank = problem(kind, seed=11)

    def fn(x, s, b):
        return api(kind)(x, s, lattice, blank, b, reduction="none", sigma=0.1)

    out = check_export(fn, {"logits": logits.astype(np.float32), "symbols": symbols, "boundary": bd}, rtol=1e-5)
    np.testing.assert_allclose(out[0], ref_loss(kind, logits.astype(np.float32), symbols, lattice, blank, bd, 0.1),
                               rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_export_with_dynamic_batch_frames_and_symbols(kind):
    """One exported model serves batches of other B, T and S (dimensions None in the InputSpec)."""
    batches = []
    for seed, (B, T, S) in enumerate([(3, 6, 3), (2, 9, 4)]):
        logits, symbols, bd, lattice, blank = problem(kind, B=B, T=T, S=S, seed=seed)
        batches.append({"logits": logits.astype(np.float32), "symbols": symbols, "boundary": bd})

    def fn(x, s, b):
        return api(kind)(x, s, lattice, blank, b, reduction="none")

    check_export(fn, batches, rtol=1e-5)
