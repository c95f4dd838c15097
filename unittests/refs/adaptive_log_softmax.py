"""adaptive_log_softmax (float64, straight from the definitions; PyTorch's algorithm for the layer) and
adaptive_embedding."""

from __future__ import annotations

import numpy as np


def logsumexp_rows(x):
    """logsumexp of each row; a row of -inf gives -inf, +inf gives +inf, NaN gives NaN."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=1) if x.shape[1] else np.full(x.shape[0], -np.inf)
    finite = np.isfinite(m)
    safe = np.where(finite, m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.sum(np.exp(x - safe[:, None]), axis=1)
        return np.where(finite, safe + np.log(s), m)


def log_softmax_lse(x):
    """The lse that log_softmax subtracts, as PyTorch's: NaN for a row holding +inf (its x - max is NaN
    at the +inf), so that the whole row's log-softmax and grads are NaN; else logsumexp_rows."""
    lse = logsumexp_rows(x)
    return np.where(lse == np.inf, np.nan, lse)


def adaptive_log_softmax_target(logits, target):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return logits[np.arange(logits.shape[0]), np.asarray(target)] - log_softmax_lse(logits)


def adaptive_log_softmax_target_grad(logits, target, out_grad):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        grad = -np.exp(logits - log_softmax_lse(logits)[:, None])
    grad[np.arange(logits.shape[0]), np.asarray(target)] += 1.0
    return grad * np.asarray(out_grad)[:, None]


def adaptive_log_softmax_full(logits, offset):
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return logits - log_softmax_lse(logits)[:, None] + np.asarray(offset, dtype=np.float64)[:, None]


def adaptive_log_softmax_full_grad(logits, out_grad):
    """(logits_grad, offset_grad) of sum(out_grad * adaptive_log_softmax_full(logits, offset))."""
    logits, g = np.asarray(logits, dtype=np.float64), np.asarray(out_grad, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        softmax = np.exp(logits - log_softmax_lse(logits)[:, None])  # a row holding +inf or NaN: all NaN
    return g - softmax * g.sum(axis=1, keepdims=True), g.sum(axis=1)


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


def adaptive_log_softmax_with_loss(x, label, head_weight, tail_weights, cutoffs, head_bias=None, ignore_index=None,
                                   reduction="mean"):
    """(output [N], loss): each label's log-probability (0 where label == ignore_index) and nll_loss's
    reduction of their negatives ('mean' over the rows that count, 0 when none does)."""
    batched = np.ndim(x) == 2
    x2 = np.atleast_2d(np.asarray(x, dtype=np.float64))
    label = np.atleast_1d(np.asarray(label))
    keep = label != ignore_index
    lp = adaptive_log_prob(x2, head_weight, tail_weights, cutoffs, head_bias)
    out = np.where(keep, lp[np.arange(len(label)), np.where(keep, label, 0)], 0.0)
    loss = {"none": -out, "sum": -out.sum(), "mean": -out.sum() / max(keep.sum(), 1)}[reduction]
    return (out, loss) if batched else (out[0], loss[0] if reduction == "none" else loss)


def adaptive_embedding(ids, head_weight, tail_weights, cutoffs):
    """[*ids.shape, d]: head_weight[:, y] for a shortlist class, W1 @ W2[:, y - cutoffs[i]] for a class in
    tail cluster i (cutoffs is the full list ending in n_classes)."""
    ids = np.asarray(ids)
    out = np.zeros((ids.size, head_weight.shape[0]))
    for n, y in enumerate(ids.reshape(-1)):
        if y < cutoffs[0]:
            out[n] = head_weight[:, y]
        else:
            i = int(np.searchsorted(cutoffs, y, side="right")) - 1
            w1, w2 = tail_weights[i]
            out[n] = np.asarray(w1, dtype=np.float64) @ np.asarray(w2, dtype=np.float64)[:, y - cutoffs[i]]
    return out.reshape(*ids.shape, head_weight.shape[0])
