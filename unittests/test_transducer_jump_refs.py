"""The NumPy references of the jump-lattice transducer losses (TDT, multi-blank) checked on their own:
recursion against path enumeration, alpha against beta, formula grads against finite differences, and
multi-blank without big blanks against the plain RNN-T reference."""

import numpy as np
import pytest

import refs


def tdt_problem(B=2, T=5, S=3, C=4, durations=(0, 1, 2), seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(B, T, S + 1, C + len(durations))) * scale
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    return logits, symbols


BOUNDARY = np.array([[0, 0, 3, 5], [1, 1, 2, 4]], np.int64)


@pytest.mark.parametrize("durations", [(0, 1), (1, 0, 3), (0, 1, 2, 4)])
@pytest.mark.parametrize("boundary", [None, BOUNDARY])
def test_tdt_recursion_equals_path_enumeration(durations, boundary):
    logits, symbols = tdt_problem(durations=durations, seed=len(durations))
    arcs = refs.tdt_arcs(durations, 4)
    got = refs.jump_lattice_loss(arcs, logits, symbols, 0, boundary, sigma=0.05)
    want = refs.jump_lattice_loss_brute_force(arcs, logits, symbols, 0, boundary, sigma=0.05)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("durations", [(1, 2, 3, 4, 5), (0, 2, 4), (2, 0, 1), (3,), (1,), (4, 1), (0, 1, 2, 3, 4, 5)])
def test_tdt_lattice_equals_nemos_alpha_recursion_for_any_durations(durations):
    """NeMo's semantics for lists without 0 (every emission takes a frame), without 1 (no one-frame step),
    unsorted and single: our lattice equals the alpha recursion of NeMo's kernel, and path enumeration."""
    logits, symbols = tdt_problem(B=3, T=7, S=3, durations=durations, seed=sum(durations))
    arcs = refs.tdt_arcs(durations, 4)
    got = refs.jump_lattice_loss(arcs, logits, symbols, 0, sigma=0.05)
    np.testing.assert_allclose(got, refs.tdt_loss_nemo(logits, symbols, durations, 0, sigma=0.05), rtol=1e-12)
    np.testing.assert_allclose(got, refs.jump_lattice_loss_brute_force(arcs, logits, symbols, 0, sigma=0.05),
                               rtol=1e-12)
    assert np.isfinite(got).all() or 1 not in durations


@pytest.mark.parametrize("big", [(2,), (2, 3)])
@pytest.mark.parametrize("boundary", [None, BOUNDARY])
def test_multiblank_recursion_equals_path_enumeration(big, boundary):
    rng = np.random.default_rng(7)
    logits, symbols = rng.normal(size=(2, 5, 4, 6)), rng.integers(0, 3, size=(2, 3)).astype(np.int64)
    arcs = refs.multiblank_arcs(big)
    got = refs.jump_lattice_loss(arcs, logits, symbols, 5, boundary, sigma=0.1)
    np.testing.assert_allclose(got, refs.jump_lattice_loss_brute_force(arcs, logits, symbols, 5, boundary, 0.1),
                               rtol=1e-12)


def test_alpha_and_beta_give_one_total():
    logits, symbols = tdt_problem(T=6, durations=(0, 1, 2, 3))
    alpha, beta = refs.jump_lattice_alpha_beta(refs.tdt_arcs((0, 1, 2, 3), 4), logits, symbols, 0, BOUNDARY)
    for b, (s0, t0, s1, t1) in enumerate(BOUNDARY.tolist()):
        np.testing.assert_allclose(alpha[b, t1, s1], beta[b, t0, s0], rtol=1e-13)


def test_multiblank_without_big_blanks_is_the_rnnt_loss():
    rng = np.random.default_rng(3)
    logits, symbols = rng.normal(size=(2, 5, 4, 6)), rng.integers(0, 5, size=(2, 3)).astype(np.int64)
    boundary = np.array([[0, 0, 3, 5], [0, 0, 2, 4]], np.int64)
    np.testing.assert_allclose(refs.multiblank_loss(logits, symbols, (), 5, boundary),
                               refs.rnnt_loss(logits, symbols, 5, boundary), rtol=1e-12)


def _numeric_grad(loss_fn, logits, weights, delta=1e-6):
    grad = np.zeros_like(logits)
    for i in np.ndindex(logits.shape):
        hi, lo = logits.copy(), logits.copy()
        hi[i] += delta
        lo[i] -= delta
        grad[i] = (weights @ loss_fn(hi) - weights @ loss_fn(lo)) / (2 * delta)
    return grad


@pytest.mark.parametrize("kind", ["tdt", "multiblank"])
def test_formula_grads_match_finite_differences(kind):
    weights = np.array([0.7, -1.3])
    if kind == "tdt":
        logits, symbols = tdt_problem(T=4, S=2, C=3, durations=(0, 1, 2), seed=5)
        arcs, tokens, blank = refs.tdt_arcs((0, 1, 2), 3), 3, 0
    else:
        rng = np.random.default_rng(5)
        logits, symbols = rng.normal(size=(2, 4, 3, 5)), rng.integers(0, 3, size=(2, 2)).astype(np.int64)
        arcs, tokens, blank = refs.multiblank_arcs((2, 3)), 5, 4
    boundary = np.array([[0, 0, 2, 4], [0, 1, 1, 4]], np.int64)
    analytic = refs.jump_lattice_loss_grad(arcs, logits, symbols, blank, tokens, boundary, 0.2, 0.0, weights)
    numeric = _numeric_grad(lambda x: refs.jump_lattice_loss(arcs, x, symbols, blank, boundary, 0.2), logits, weights)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    assert np.abs(analytic).max() > 1e-2


def test_fastemit_scales_only_symbol_occupancy():
    logits, symbols = tdt_problem(seed=9)
    arcs = refs.tdt_arcs((0, 1, 2), 4)
    plain = refs.jump_lattice_loss_grad(arcs, logits, symbols, 0, 4)
    scaled = refs.jump_lattice_loss_grad(arcs, logits, symbols, 0, 4, fastemit_lambda=0.5)
    # the blank unit only gets symbol occupancy through the softmax term, so the two differ
    assert not np.allclose(plain, scaled)
    # a symbol-only change: plain + 0.5 * (the symbol-arc part), which is linear in lambda
    twice = refs.jump_lattice_loss_grad(arcs, logits, symbols, 0, 4, fastemit_lambda=1.0)
    np.testing.assert_allclose(scaled, (plain + twice) / 2, rtol=1e-12, atol=1e-15)


def test_no_path_gives_inf_and_zero_grads():
    logits, symbols = tdt_problem(T=3, S=3, durations=(0, 1))
    # no frame at all (T_b = 0) for two symbols: with 0-frame symbol arcs that is the only way to have no path
    boundary = np.array([[0, 0, 3, 3], [0, 0, 2, 0]], np.int64)
    loss = refs.tdt_loss(logits, symbols, (0, 1), 0, boundary)
    assert np.isfinite(loss[0]) and loss[1] == np.inf
    grad = refs.tdt_loss_grad(logits, symbols, (0, 1), 0, boundary)
    assert np.all(grad[1] == 0) and np.abs(grad[0]).max() > 0


def test_a_row_of_only_minus_inf_has_no_arcs():
    logits, symbols = tdt_problem(durations=(0, 1, 2))
    logits[0, 2, 1, :4] = -np.inf  # no token at node (2, 1)
    arcs = refs.tdt_arcs((0, 1, 2), 4)
    loss = refs.jump_lattice_loss(arcs, logits, symbols, 0)
    np.testing.assert_allclose(loss, refs.jump_lattice_loss_brute_force(arcs, logits, symbols, 0), rtol=1e-12)
    grad = refs.tdt_loss_grad(logits, symbols, (0, 1, 2), 0)
    assert np.all(np.isfinite(grad)) and np.all(grad[0, 2, 1] == 0)
