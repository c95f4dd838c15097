"""Seeded complex64/complex128 inputs for logcumsumexp and their comparison (NumPy only), in fuzz_cases'
style (its own module: fuzz_cases.py is at its size limit).

Real parts take fuzz_cases' value mixtures (normal, x1e3, +-1e4 spikes, +-700 spreads, -inf, +inf, NaN,
denormals, all-equal, ties, mixed); imaginary parts their own (IMAG_MIXES): uniform phases, large ones up to
+-1e4 (where phases wrap many times), zeros, ties of a few phases, NaN.
"""

from __future__ import annotations

import numpy as np

import refs
from fuzz_cases import LONG_ROWS, MIXES, count, mode, random_shape, rng_for, values

COMPLEX_DTYPES = ("complex128", "complex64")
IMAG_MIXES = ("phase", "large", "zero", "ties", "nan")
EPS = 2.0 ** -53  # both dtypes accumulate in complex128
OUT_EPS = {"complex128": 2.0 ** -53, "complex64": 2.0 ** -24}  # the output's (and saved out's) rounding
OUT_TINY = {"complex128": 2.0 ** -1074, "complex64": 2.0 ** -149}  # its absolute rounding near 0 (subnormals)


def imag_values(rng, shape, mix):
    n = int(np.prod(shape))
    if mix == "phase":
        im = rng.uniform(-np.pi, np.pi, size=n)
    elif mix == "large":
        im = rng.uniform(-1e4, 1e4, size=n)
    elif mix == "zero":
        im = np.zeros(n)
    elif mix == "ties":
        im = rng.integers(-2, 3, size=n) * (np.pi / 2)
    else:  # nan
        im = rng.normal(0.0, 2.0, size=n)
        im[rng.random(n) < 0.02] = np.nan
    return im.reshape(shape)


def logcumsumexp_complex_cases(n=None):
    """x (complex128 holding the dtype's values), g, axis (None, negative too), exclusive, reverse, dtype, view."""
    name = "logcumsumexp_complex"
    n = count(60) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = COMPLEX_DTYPES[seed % 2]
        mix, imix = MIXES[seed % len(MIXES)], IMAG_MIXES[int(rng.integers(len(IMAG_MIXES)))]
        rank = int(rng.integers(0, 4))
        long = rng.random() < 0.3 and rank > 0
        shape = random_shape(rng, rank, int(rng.choice(LONG_ROWS)) if long else None,
                             max_dim=7 if mode() == "ci" else 30)
        axis = None if rank == 0 or rng.random() < 0.1 else int(rng.integers(-rank, rank))
        x = (values(rng, shape, mix) + 1j * imag_values(rng, shape, imix)).astype(dtype).astype(np.complex128)
        g = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype).astype(np.complex128)
        view = None if rank < 2 else rng.choice([None, "transpose", "stride"], p=[0.6, 0.2, 0.2])
        yield dict(id=f"lcse-complex-{seed}-{dtype}-{mix}-{imix}-{shape}-ax{axis}", x=x, g=g, axis=axis,
                   exclusive=bool(rng.random() < 0.5), reverse=bool(rng.random() < 0.5), dtype=dtype, view=view)


def _wrap(d):
    return (d + np.pi) % (2 * np.pi) - np.pi


def assert_complex_matches(got, ref, bound, what, phase=True):
    """NaN (in either part) where the reference has it; other non-finite values exactly (-inf + 0i where
    nothing was reached, the first +inf term); finite ones with |d re| + |d im| <= bound, the imaginary
    parts compared modulo 2 pi when `phase` (logs: the branch is not wrapped)."""
    got, ref = np.asarray(got, np.complex128), np.asarray(ref, np.complex128)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    nan_got, nan_ref = np.isnan(got.real) | np.isnan(got.imag), np.isnan(ref.real) | np.isnan(ref.imag)
    bad = nan_got != nan_ref
    assert not bad.any(), f"{what}: NaN positions differ at {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}"
    special = ~nan_ref & ~np.isfinite(ref)
    bad = special & (got != ref)
    assert not bad.any(), f"{what}: non-finite values differ at {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}, " \
                          f"expected {ref[bad][:5]}"
    finite = np.isfinite(ref)
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: compared exactly above
        d_imag = got.imag - ref.imag
        err = np.abs(got.real - ref.real) + np.abs(_wrap(d_imag) if phase else d_imag)
    over = finite & ~(err <= np.broadcast_to(bound, ref.shape))
    if over.any():
        i = tuple(np.argwhere(over)[0])
        raise AssertionError(f"{what}: at {list(i)} got {got[i]!r}, expected {ref[i]!r} (|err| {err[i]:.3g} > "
                             f"bound {np.broadcast_to(bound, ref.shape)[i]:.3g}; {int(over.sum())} bad)")


def condition(x, out, axis, exclusive, reverse):
    """The sum's condition number sum|exp(x)| / |sum exp(x)| = exp(lcse(Re x) - Re out) per output (1 where
    it is not finite: those outputs are compared exactly)."""
    with np.errstate(invalid="ignore", over="ignore"):
        magnitudes = refs.logcumsumexp(np.where(np.isnan(x.real), -np.inf, x.real), axis, exclusive, reverse)
        cond = np.exp(np.minimum(magnitudes - out.real, 700.0))
    return np.where(np.isfinite(cond), np.maximum(cond, 1.0), 1.0)


def forward_bound(x, ref, axis, exclusive, reverse, dtype):
    """The scan's error: per step a rounding of the running log-sum and of each term's phase (|Im x|), times
    the condition number; then the output's rounding."""
    n = x.size if axis is None else (x.shape[axis] if x.ndim else 1)
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(x.imag, posinf=0, neginf=0)), initial=0.0)))
    return (8 * (n + 2) * EPS * scale * np.maximum(1.0, np.abs(np.nan_to_num(ref)))
            * condition(x, ref, axis, exclusive, reverse) + 2 * OUT_EPS[dtype] * np.abs(np.nan_to_num(ref))
            + 2 * OUT_TINY[dtype])


def grad_bound(x, g, ref_out, ref_grad, axis, exclusive, reverse, dtype):
    """Each grad term g[i] conj(exp(x[j] - out[i])) carries the absolute error of x[j] - out[i] (out's own
    error, which grows with its condition number, and its rounding to the dtype): bounded by the real grad of
    |g[i]| cond[i] at Re x, Re out (the sum of the terms' magnitudes so weighted)."""
    n = x.size if axis is None else (x.shape[axis] if x.ndim else 1)
    weights = np.abs(g) * condition(x, ref_out, axis, exclusive, reverse)
    xr, outr = np.nan_to_num(x.real, nan=0.0), np.nan_to_num(ref_out.real, nan=np.inf)
    if axis is None:
        xr, weights, outr = xr.reshape(-1), weights.reshape(-1), outr.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        abs_sum = refs.logcumsumexp_grad_dense(xr, weights, 0 if axis is None else axis, exclusive, reverse, out=outr)
    abs_sum = np.nan_to_num(abs_sum.reshape(x.shape), nan=0.0, posinf=1e300)
    finite = lambda a: np.abs(a[np.isfinite(a)]).max(initial=0.0)  # noqa: E731
    scale = max(1.0, finite(x.real), finite(x.imag), finite(ref_out.real), finite(ref_out.imag))
    return ((8 * (n + 2) * EPS * scale + 4 * OUT_EPS[dtype] * scale) * abs_sum
            + 2 * OUT_EPS[dtype] * np.abs(np.nan_to_num(ref_grad)) + 2 * (n + 2) * OUT_TINY[dtype])  # subnormal terms
