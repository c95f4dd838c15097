"""rnnt_joint_logprobs (the fused joiner op) and the pruning gather."""

from __future__ import annotations

import numpy as np

from .mutual_information import _log_softmax_last, rnnt_logprobs, rnnt_loss_logprob_grads


def _joint_rows(logits, symbols, ranges, termination_symbol):
    """For each row (b, t, r) of logits [B, T, R, C]: its context s (r, or ranges[b, t, r]), the symbol
    column (None for s = S) and the termination column."""
    B, T, R, _ = np.shape(logits)
    S = np.shape(symbols)[1]
    for b in range(B):
        for t in range(T):
            for r in range(R):
                s = r if ranges is None else int(ranges[b][t][r])
                yield b, t, r, s, (int(symbols[b][s]) if s < S else None), termination_symbol


def rnnt_joint_logprobs(logits, symbols, ranges, termination_symbol):
    """px [B, S, T], py [B, S+1, T]: the log-softmax over C of each row of logits [B, T, R, C] at its symbol
    and termination columns, placed at the row's context s; cells no row reaches are -inf."""
    with np.errstate(invalid="ignore"):
        logp = _log_softmax_last(logits)
    B, T = logp.shape[:2]
    S = np.shape(symbols)[1]
    px, py = np.full((B, S, T), -np.inf), np.full((B, S + 1, T), -np.inf)
    for b, t, r, s, sym, blank in _joint_rows(logits, symbols, ranges, termination_symbol):
        py[b, s, t] = logp[b, t, r, blank]
        if sym is not None:
            px[b, s, t] = logp[b, t, r, sym]
    return px, py


def rnnt_joint_logprobs_grad(logits, symbols, ranges, termination_symbol, px_grad, py_grad):
    """d logits [B, T, R, C] of sum(px * px_grad) + sum(py * py_grad): per row, the log-softmax grad of an
    incoming grad that is gx at the symbol column and gy at the termination column."""
    x = np.asarray(logits, np.float64)
    with np.errstate(invalid="ignore"):
        p = np.exp(_log_softmax_last(x))
    grad = np.zeros_like(x)
    for b, t, r, s, sym, blank in _joint_rows(logits, symbols, ranges, termination_symbol):
        g = np.zeros(x.shape[3])
        g[blank] += py_grad[b][s][t]
        if sym is not None:
            g[sym] += px_grad[b][s][t]
        grad[b, t, r] = g - p[b, t, r] * g.sum()
    return grad


def rnnt_loss_grad(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular", delay_penalty=0.0,
                   fastemit_lambda=0.0, loss_grad=None, clamp=-1.0):
    """d logits of sum_b loss_grad[b] * loss[b] for rnnt_loss: each item's own loss's grad through its (px, py)
    (FastEmit included), clamp > 0 clamping each element of it to [-clamp, clamp] (torchaudio's and NeMo's
    clamp), then loss_grad[b] times it."""
    logits = np.asarray(logits, np.float64)
    B, T = logits.shape[:2]
    loss_grad = np.ones(B) if loss_grad is None else np.asarray(loss_grad, np.float64)
    px, py = rnnt_logprobs(logits, symbols, termination_symbol, boundary, rnnt_type)
    gx, gy = rnnt_loss_logprob_grads(px, py, boundary, delay_penalty, fastemit_lambda)  # each item's own loss
    gx = gx[:, :, :T]  # regular px's column T is a constant -inf
    if rnnt_type == "constrained":  # px + py[:, 1:] there
        gy = gy.copy()
        gy[:, 1:] += gx
    grad = rnnt_joint_logprobs_grad(logits, symbols, None, termination_symbol, gx, gy)
    if clamp > 0:
        grad = np.clip(grad, -clamp, clamp)
    return grad * loss_grad[:, None, None, None]


def rnnt_prune_gather(x, index):
    """out[b, t, r] = x[b, index[b, t, r]] for x [B, N, D], index [B, T, R]."""
    x = np.asarray(x)
    return x[np.arange(x.shape[0])[:, None, None], np.asarray(index)]


def rnnt_prune_gather_grad(x_shape, index, out_grad):
    grad = np.zeros(x_shape)
    index = np.asarray(index)
    for b in range(index.shape[0]):
        np.add.at(grad[b], index[b].ravel(), np.asarray(out_grad, np.float64)[b].reshape(-1, x_shape[2]))
    return grad
