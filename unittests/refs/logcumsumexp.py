"""logcumsumexp, real and complex: the scan, its grad by brute force and in O(n), and a dense form for
long rows."""

from __future__ import annotations

import numpy as np


def logcumsumexp(x, axis=None, exclusive=False, reverse=False):
    """log(cumsum(exp(x))) by np.logaddexp.accumulate (exact max-trick pairs), TF-style flags."""
    if np.iscomplexobj(x):
        return logcumsumexp_complex(x, axis, exclusive, reverse)
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
    """dx[j] = sum over outputs i that include j of g[i] * exp(x[j] - out[i]), by brute force.

    A -inf input gets exactly 0, and a +inf or -inf (unreachable) output adds 0; otherwise NaN
    propagates: a NaN input makes every later output NaN, and the grad of every other input feeding a
    NaN output is NaN."""
    if np.iscomplexobj(x):
        return logcumsumexp_complex_grad(x, out_grad, axis, exclusive, reverse)
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
                keep = (xm[..., j] != -np.inf) & ~np.isinf(om[..., i])
                dx[..., j] += np.where(keep, term, 0.0)
    return np.moveaxis(dx, -1, axis).reshape(shape)



def logcumsumexp_grad_scan(x, out_grad, axis, exclusive=False, reverse=False, out=None):
    """The same grad in O(n): dx[j] = exp(x[j] + L+[j]) - exp(x[j] + L-[j]), L+- the log-cum-sum-exp
    (np.logaddexp.accumulate, in the opposite direction) of log(+-g[i]) - out[i]. Every exponent is
    at most log(sum |g|) (x[j] <= out[i] for each output i that j feeds), so nothing overflows.
    `out`: the forward output to use (e.g. a kernel's, rounded to its dtype); else the reference's."""
    x = np.asarray(x, dtype=np.float64)
    g = np.asarray(out_grad, dtype=np.float64)
    out = logcumsumexp(x, axis, exclusive, reverse) if out is None else np.asarray(out, dtype=np.float64)
    dx = np.zeros_like(x)
    for sign in (1.0, -1.0):
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.where((sign * g > 0) & (out > -np.inf), np.log(np.abs(g)) - out, -np.inf)
        acc = logcumsumexp(term, axis, exclusive, not reverse)
        with np.errstate(over="ignore", invalid="ignore"):
            dx += sign * np.where((x > -np.inf) & (acc > -np.inf), np.exp(x + acc), 0.0)
    return dx


def _complex_log1p(z):
    """log(1 + z), accurate for small |z| (np.log1p on complex rounds 1 + z first)."""
    x, y = z.real, z.imag
    with np.errstate(invalid="ignore", over="ignore"):
        near = (x >= -0.5) & (np.abs(x) <= 1) & (np.abs(y) <= 1)
        mag = np.where(near, 0.5 * np.log1p(np.where(near, x * (2 + x) + y * y, 0.0)), np.log(np.hypot(1 + x, y)))
    return mag + 1j * np.arctan2(y, 1 + x)


def complex_log_add_exp(a, b):
    """log(exp(a) + exp(b)), a the earlier term: pivot on the larger real part, p + log1p(exp(q - p)); NaN in
    either part gives NaN + NaN i; a term with real part -inf adds nothing; the first +inf term wins."""
    nan = np.isnan(a.real) | np.isnan(a.imag) | np.isnan(b.real) | np.isnan(b.imag)
    a_pivot = a.real >= b.real
    p, q = np.where(a_pivot, a, b), np.where(a_pivot, b, a)
    with np.errstate(invalid="ignore", over="ignore"):
        out = p + _complex_log1p(np.exp(q - p))
    out = np.where(b.real == np.inf, b, out)
    out = np.where(a.real == np.inf, a, out)  # the first +inf wins
    out = np.where(a.real == -np.inf, b, out)
    out = np.where(b.real == -np.inf, a, out)
    return np.where(nan, complex(np.nan, np.nan), out)


def logcumsumexp_complex(x, axis=None, exclusive=False, reverse=False):
    """The complex scan, one step at a time along the axis from -inf + 0i (nothing reached: -inf + 0i);
    the imaginary part is not wrapped (the kernels' and torch's branch, up to 2 pi)."""
    x = np.asarray(x, dtype=np.complex128)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.ndim == 0:
        return logcumsumexp_complex(x.reshape(1), 0, exclusive, reverse).reshape(())
    xm = np.moveaxis(x, axis, -1)
    out = np.empty_like(xm)
    acc = np.full(xm.shape[:-1], complex(-np.inf, 0.0))
    for k in (range(xm.shape[-1] - 1, -1, -1) if reverse else range(xm.shape[-1])):
        if exclusive:
            out[..., k] = acc
        acc = complex_log_add_exp(acc, xm[..., k])
        if not exclusive:
            out[..., k] = acc
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))


def logcumsumexp_complex_grad(x, out_grad, axis=None, exclusive=False, reverse=False):
    """Paddle's (and PyTorch's) complex convention, x_grad = sum over the outputs i that include j of
    g[i] * conj(exp(x[j] - out[i])), by brute force: a g of 0, an output with infinite real part and an input
    with real part -inf add nothing; NaN propagates."""
    shape = np.shape(x)
    x, g = np.asarray(x, dtype=np.complex128), np.asarray(out_grad, dtype=np.complex128)
    if x.size == 0:
        return np.zeros(shape, dtype=np.complex128)
    if axis is None:
        x, g, axis = x.reshape(-1), g.reshape(-1), 0
    if x.ndim == 0:
        x, g, axis = x.reshape(1), g.reshape(1), 0
    out = logcumsumexp_complex(x, axis, exclusive, reverse)
    xm, om, gm = (np.moveaxis(a, axis, -1) for a in (x, out, g))
    lead, n = xm.shape[:-1], xm.shape[-1]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    take = ((j > i) if reverse else (j < i)) | ((j == i) & (not exclusive))
    dx = np.zeros((int(np.prod(lead)), n), dtype=np.complex128)
    for r, (xr, orr, gr) in enumerate(zip(*(a.reshape(-1, n) for a in (xm, om, gm)))):  # n^2 memory per line
        keep = take & (gr != 0)[:, None] & ~np.isinf(orr.real)[:, None] & ((xr.real != -np.inf) | np.isnan(xr.imag))
        with np.errstate(invalid="ignore", over="ignore"):
            terms = gr[:, None] * np.conj(np.exp(xr[None, :] - orr[:, None]))
        dx[r] = np.where(keep, terms, 0).sum(axis=0)
    return np.moveaxis(dx.reshape(lead + (n,)), -1, axis).reshape(shape)


# ---------------------------------------------------------------------------------------------------
# The grad's vectorised form for long rows (the fuzz suite), checked against logcumsumexp_grad on small
# inputs (test_fuzz.py).


def logcumsumexp_grad_dense(x, out_grad, axis, exclusive=False, reverse=False, out=None):
    """logcumsumexp_grad with the j-loop as an [n, n] matrix per line: same terms, same masking.
    `out`: the forward output to use (e.g. rounded to a 16-bit dtype, as the kernel gets it); else the reference's."""
    if np.iscomplexobj(x):
        return logcumsumexp_complex_grad(x, out_grad, axis, exclusive, reverse)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0 or x.size == 0:
        return logcumsumexp_grad(x, out_grad, axis, exclusive, reverse)
    out = logcumsumexp(x, axis, exclusive, reverse) if out is None else np.asarray(out, dtype=np.float64)
    xm, om, gm = (np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1) for a in (x, out, out_grad))
    lead, n = xm.shape[:-1], xm.shape[-1]
    xr, orr, gr = (a.reshape(-1, n) for a in (xm, om, gm))
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    before = (j < i) if not reverse else (j > i)
    take = before | ((j == i) & (not exclusive))
    dx = np.zeros_like(xr)
    for r in range(xr.shape[0]):
        with np.errstate(invalid="ignore", over="ignore"):
            term = gr[r][:, None] * np.exp(xr[r][None, :] - orr[r][:, None])
        keep = take & ~np.isinf(orr[r])[:, None] & (xr[r] != -np.inf)[None, :]
        dx[r] = np.where(keep, term, 0.0).sum(axis=0)
    return np.moveaxis(dx.reshape(lead + (n,)), -1, axis)
