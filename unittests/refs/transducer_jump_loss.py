"""Transducers with jumps (TDT, multi-blank).

Nodes (t, s) of item b's box t0 <= t <= t1, s0 <= s <= s1 (boundary rows (s0, t0, s1, t1)). From a node
with t < t1: blank arcs (t, s) -> (t + d, s), d >= 1, landing t + d <= t1; symbol arcs (t, s) -> (t + d, s + 1),
d >= 0, landing t + d < t1, s < s1. Each arc is (dt, ds, weight, token, duration index or None); the loss is
-log of the total weight of the paths (t0, s0) -> (t1, s1).
"""

from __future__ import annotations

import numpy as np


def _log_softmax_or_neg_inf(x):
    """log_softmax over the last axis; a row of only -inf gives -inf everywhere (no arc from it)."""
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    dead = np.isneginf(m)
    shift = x - np.where(dead, 0.0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = shift - np.log(np.exp(shift).sum(-1, keepdims=True))
    return np.where(dead, -np.inf, out)


def tdt_arcs(durations, num_tokens):
    """TDT (Xu et al. 2023): token log-softmax over the first num_tokens units minus sigma, duration
    log-softmax over the rest; every arc's weight is its token's log-prob plus its duration's."""
    def arcs(row, symbol, blank, sigma):
        tok = _log_softmax_or_neg_inf(row[:num_tokens]) - sigma
        dur = _log_softmax_or_neg_inf(row[num_tokens:])
        out = [(d, 0, tok[blank] + dur[k], blank, k) for k, d in enumerate(durations) if d >= 1]
        if symbol is not None:
            out += [(d, 1, tok[symbol] + dur[k], symbol, k) for k, d in enumerate(durations)]
        return out
    return arcs


def multiblank_arcs(big_blank_durations):
    """Multi-blank (Xu et al. 2022): the standard blank moves one frame, big blank i (unit blank - 1 - i)
    moves big_blank_durations[i] frames, a symbol moves none; sigma is subtracted from every log-prob."""
    def arcs(row, symbol, blank, sigma):
        lp = _log_softmax_or_neg_inf(row) - sigma
        out = [(1, 0, lp[blank], blank, None)]
        out += [(d, 0, lp[blank - 1 - i], blank - 1 - i, None) for i, d in enumerate(big_blank_durations)]
        if symbol is not None:
            out.append((0, 1, lp[symbol], symbol, None))
        return out
    return arcs


def _jump_box(boundary, b, T, S):
    return (0, 0, S, T) if boundary is None else tuple(int(v) for v in boundary[b])


def _jump_out_arcs(arcs_fn, logits, symbols, blank, sigma, b, t, s, box):
    """The arcs leaving node (t, s) of item b that land inside its box."""
    s0, t0, s1, t1 = box
    symbol = int(symbols[b][s]) if s < s1 else None
    out = []
    for dt, ds, w, tok, k in arcs_fn(logits[b, t, s], symbol, blank, sigma):
        if (ds == 0 and t + dt <= t1) or (ds == 1 and t + dt < t1):
            out.append((dt, ds, w, tok, k))
    return out


def jump_lattice_alpha_beta(arcs_fn, logits, symbols, blank, boundary=None, sigma=0.0):
    """Forward (alpha) and backward (beta) log-scores [B, T+1, S+1], float64, -inf outside each box."""
    logits = np.asarray(logits, np.float64)
    B, T, S1 = logits.shape[:3]
    alpha = np.full((B, T + 1, S1), -np.inf)
    beta = np.full((B, T + 1, S1), -np.inf)
    for b in range(B):
        box = s0, t0, s1, t1 = _jump_box(boundary, b, T, S1 - 1)
        alpha[b, t0, s0] = 0.0
        for t in range(t0, t1):  # every arc goes to a later frame or, in the same frame, to s + 1
            for s in range(s0, s1 + 1):
                for dt, ds, w, _, _ in _jump_out_arcs(arcs_fn, logits, symbols, blank, sigma, b, t, s, box):
                    alpha[b, t + dt, s + ds] = np.logaddexp(alpha[b, t + dt, s + ds], alpha[b, t, s] + w)
        beta[b, t1, s1] = 0.0
        for t in range(t1 - 1, t0 - 1, -1):
            for s in range(s1, s0 - 1, -1):
                for dt, ds, w, _, _ in _jump_out_arcs(arcs_fn, logits, symbols, blank, sigma, b, t, s, box):
                    beta[b, t, s] = np.logaddexp(beta[b, t, s], w + beta[b, t + dt, s + ds])
    return alpha, beta


def jump_lattice_loss(arcs_fn, logits, symbols, blank, boundary=None, sigma=0.0):
    """Per-item loss [B] = -alpha at the end of each box (inf where no path reaches it)."""
    alpha, _ = jump_lattice_alpha_beta(arcs_fn, logits, symbols, blank, boundary, sigma)
    B, T, S1 = np.asarray(logits).shape[:3]
    return np.array([-alpha[b, _jump_box(boundary, b, T, S1 - 1)[3], _jump_box(boundary, b, T, S1 - 1)[2]]
                     for b in range(B)])


def jump_lattice_loss_grad(arcs_fn, logits, symbols, blank, num_tokens, boundary=None, sigma=0.0,
                           fastemit_lambda=0.0, loss_grad=None, clamp=-1.0):
    """d(sum_b loss_grad[b] * loss[b]) / d logits, with FastEmit's (1 + lambda) on symbol arcs. Each arc's
    occupancy gamma = exp(alpha + w + beta(dest) - logZ); for a unit j of a head with softmax p:
    d loss / d x_j = p_j * N - E_j, N the (scaled) occupancy leaving the node, E_j that of the arcs using j.
    An item with no path (logZ = -inf) gets zero grads. clamp > 0 (NeMo's clamp): each token unit's
    d loss[b] / d x_j clamped to [-clamp, clamp] before loss_grad[b] multiplies it (duration units unclamped)."""
    logits = np.asarray(logits, np.float64)
    B, T, S1, X = logits.shape
    loss_grad = np.ones(B) if loss_grad is None else np.asarray(loss_grad, np.float64)
    alpha, beta = jump_lattice_alpha_beta(arcs_fn, logits, symbols, blank, boundary, sigma)
    grad = np.zeros_like(logits)
    for b in range(B):
        box = s0, t0, s1, t1 = _jump_box(boundary, b, T, S1 - 1)
        log_z = beta[b, t0, s0]
        if not np.isfinite(log_z):
            continue
        for t in range(t0, t1):
            for s in range(s0, s1 + 1):
                n_out, e_tok, e_dur = 0.0, np.zeros(num_tokens), np.zeros(X - num_tokens)
                for dt, ds, w, tok, k in _jump_out_arcs(arcs_fn, logits, symbols, blank, sigma, b, t, s, box):
                    gamma = np.exp(alpha[b, t, s] + w + beta[b, t + dt, s + ds] - log_z)
                    gamma *= 1.0 + fastemit_lambda if ds == 1 else 1.0
                    n_out += gamma
                    e_tok[tok] += gamma
                    if k is not None:
                        e_dur[k] += gamma
                if n_out == 0.0:
                    continue
                row = logits[b, t, s]
                grad[b, t, s, :num_tokens] = np.exp(_log_softmax_or_neg_inf(row[:num_tokens])) * n_out - e_tok
                if X > num_tokens:
                    grad[b, t, s, num_tokens:] = np.exp(_log_softmax_or_neg_inf(row[num_tokens:])) * n_out - e_dur
                if clamp > 0:
                    grad[b, t, s, :num_tokens] = np.clip(grad[b, t, s, :num_tokens], -clamp, clamp)
                grad[b, t, s] *= loss_grad[b]
    return grad


def jump_lattice_loss_brute_force(arcs_fn, logits, symbols, blank, boundary=None, sigma=0.0):
    """The loss by enumerating every path (tiny lattices only): an independent check of the recursion."""
    logits = np.asarray(logits, np.float64)
    B, T, S1 = logits.shape[:3]
    out = np.empty(B)
    for b in range(B):
        box = s0, t0, s1, t1 = _jump_box(boundary, b, T, S1 - 1)
        scores = []

        def walk(t, s, score):
            if (t, s) == (t1, s1):
                scores.append(score)
                return
            if t >= t1:
                return
            for dt, ds, w, _, _ in _jump_out_arcs(arcs_fn, logits, symbols, blank, sigma, b, t, s, box):
                walk(t + dt, s + ds, score + w)

        walk(t0, s0, 0.0)
        out[b] = -np.logaddexp.reduce(scores) if scores else np.inf
    return out


def tdt_loss_nemo(logits, symbols, durations, blank, sigma=0.0):
    """NeMo's TDT loss stated as its CUDA kernel's alpha recursion states it (whole lattices, no boundary): an
    independent statement of the semantics for any durations. alpha runs over frames t < T: a blank of duration
    d > 0 comes from (t - d, u) (a duration-0 blank is no arc), a symbol of duration d >= 0 from (t - d, u - 1);
    the total adds the blanks of duration d > 0 from (T - d, U - 1) that end exactly at T. Durations in any
    order (NeMo's kernel stops at the first d > t, so it wants them sorted)."""
    logits = np.asarray(logits, np.float64)
    B, T, U, X = logits.shape
    C = X - len(durations)
    out = np.empty(B)
    for b in range(B):
        tok = _log_softmax_or_neg_inf(logits[b, :, :, :C]) - sigma
        dur = _log_softmax_or_neg_inf(logits[b, :, :, C:])
        alpha = np.full((T, U), -np.inf)
        alpha[0, 0] = 0.0
        for t in range(T):
            for u in range(U):
                if t == 0 and u == 0:
                    continue
                terms = [-np.inf]
                for i, d in enumerate(durations):
                    if d > 0 and t >= d:
                        terms.append(alpha[t - d, u] + tok[t - d, u, blank] + dur[t - d, u, i])
                    if u > 0 and t >= d:
                        terms.append(alpha[t - d, u - 1] + tok[t - d, u - 1, symbols[b][u - 1]] + dur[t - d, u - 1, i])
                alpha[t, u] = np.logaddexp.reduce(terms)
        final = [-np.inf] + [alpha[T - d, U - 1] + tok[T - d, U - 1, blank] + dur[T - d, U - 1, i]
                             for i, d in enumerate(durations) if 0 < d <= T]
        out[b] = -np.logaddexp.reduce(final)
    return out


def tdt_loss(logits, symbols, durations, blank, boundary=None, sigma=0.0):
    return jump_lattice_loss(tdt_arcs(durations, logits.shape[-1] - len(durations)), logits, symbols, blank,
                             boundary, sigma)


def tdt_loss_grad(logits, symbols, durations, blank, boundary=None, sigma=0.0, fastemit_lambda=0.0, loss_grad=None,
                  clamp=-1.0):
    C = logits.shape[-1] - len(durations)
    return jump_lattice_loss_grad(tdt_arcs(durations, C), logits, symbols, blank, C, boundary, sigma,
                                  fastemit_lambda, loss_grad, clamp)


def multiblank_loss(logits, symbols, big_blank_durations, blank, boundary=None, sigma=0.0):
    return jump_lattice_loss(multiblank_arcs(big_blank_durations), logits, symbols, blank, boundary, sigma)


def multiblank_loss_grad(logits, symbols, big_blank_durations, blank, boundary=None, sigma=0.0, fastemit_lambda=0.0,
                         loss_grad=None, clamp=-1.0):
    return jump_lattice_loss_grad(multiblank_arcs(big_blank_durations), logits, symbols, blank, logits.shape[-1],
                                  boundary, sigma, fastemit_lambda, loss_grad, clamp)
