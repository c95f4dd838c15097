"""NumPy float64 references for every op: one small, clear function per op.

They favour obviousness over speed and are the specification the tests hold the kernels to.
"""

from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------------------------- logcumsumexp
def logcumsumexp(x, axis=None, exclusive=False, reverse=False):
    """log(cumsum(exp(x))) by np.logaddexp.accumulate (exact max-trick pairs), TF-style flags."""
    x = np.asarray(x, dtype=np.float64)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.ndim == 0:
        x = x.reshape(1)
        return logcumsumexp(x, 0, exclusive, reverse).reshape(())
    if x.shape[axis] == 0:
        return x.copy()
    if reverse:
        x = np.flip(x, axis)
    with np.errstate(invalid="ignore"):
        out = np.logaddexp.accumulate(x, axis=axis)
    if exclusive:
        out = np.concatenate([np.full_like(np.take(out, [0], axis=axis), -np.inf),
                              np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


def logcumsumexp_grad(x, out_grad, axis=None, exclusive=False, reverse=False):
    """dx[j] = sum over outputs i that include j of g[i] * exp(x[j] - out[i]), by brute force."""
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float64)
    if axis is None:
        x, out_grad, axis = x.reshape(-1), np.reshape(out_grad, -1), 0
    if x.ndim == 0:
        return np.zeros(shape) if exclusive else np.asarray(out_grad, dtype=np.float64).reshape(shape)
    out = logcumsumexp(x, axis, exclusive, reverse)
    xm, om, gm = (np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1) for a in (x, out, out_grad))
    n = xm.shape[-1]
    dx = np.zeros_like(xm)
    for i in range(n):
        for j in range(n):
            before = j < i if not reverse else j > i
            if before or (j == i and not exclusive):
                with np.errstate(invalid="ignore", over="ignore"):
                    term = gm[..., i] * np.exp(xm[..., j] - om[..., i])
                dx[..., j] += np.where(np.isfinite(om[..., i]) & (xm[..., j] > -np.inf), term, 0.0)
    return np.moveaxis(dx, -1, axis).reshape(shape)


# ---------------------------------------------------------------------------------------------------
# adaptive_log_softmax (float64, straight from the definitions; PyTorch's algorithm for the layer)


def logsumexp_rows(x):
    """logsumexp of each row; a row of -inf gives -inf, +inf gives +inf, NaN gives NaN."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=1) if x.shape[1] else np.full(x.shape[0], -np.inf)
    finite = np.isfinite(m)
    safe = np.where(finite, m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.sum(np.exp(x - safe[:, None]), axis=1)
        return np.where(finite, safe + np.log(s), m)


def adaptive_log_softmax_target(logits, target):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return logits[np.arange(logits.shape[0]), np.asarray(target)] - logsumexp_rows(logits)


def adaptive_log_softmax_target_grad(logits, target, out_grad):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        grad = -np.exp(logits - logsumexp_rows(logits)[:, None])
    grad[np.arange(logits.shape[0]), np.asarray(target)] += 1.0
    return grad * np.asarray(out_grad)[:, None]


def adaptive_log_softmax_full(logits, offset):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return logits - logsumexp_rows(logits)[:, None] + np.asarray(offset, dtype=np.float64)[:, None]


def adaptive_log_prob(x, head_weight, tail_weights, cutoffs, head_bias=None):
    """[N, n_classes]: head log-softmax for the shortlist; cluster log-softmax + the cluster's head
    log-probability for each tail cluster. cutoffs is the full list ending in n_classes."""
    x = np.asarray(x, dtype=np.float64)
    head = x @ head_weight + (0.0 if head_bias is None else head_bias)
    head_lp = adaptive_log_softmax_full(head, np.zeros(len(x)))
    pieces = [head_lp[:, :cutoffs[0]]]
    for i, (w1, w2) in enumerate(tail_weights):
        pieces.append(adaptive_log_softmax_full(x @ w1 @ w2, head_lp[:, cutoffs[0] + i]))
    return np.concatenate(pieces, axis=1)


def adaptive_log_softmax_with_loss(x, label, head_weight, tail_weights, cutoffs, head_bias=None):
    """(output [N], loss): each label's log-probability and their mean negative."""
    batched = np.ndim(x) == 2
    x2 = np.atleast_2d(np.asarray(x, dtype=np.float64))
    label = np.atleast_1d(np.asarray(label))
    out = adaptive_log_prob(x2, head_weight, tail_weights, cutoffs, head_bias)[np.arange(len(label)), label]
    loss = -out.mean()
    return (out if batched else out[0]), loss
