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
