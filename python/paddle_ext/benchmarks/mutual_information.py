"""mutual_information_recursion and the RNN-T losses vs Paddle's own RNN-T loss (warprnnt) and NumPy;
joint_mutual_information_recursion vs the same computation in Paddle ops.

Paddle has no mutual-information op; the closest built-in is ``paddle.nn.functional.rnnt_loss``,
which runs the same lattice recursion on joiner log-probs ``[B, T, S+1, C]`` (here C = 4). So each
case times our op alone, our full ``rnnt_loss`` on the same logits (normalisation + gathers + op),
and Paddle's rnnt_loss (fastemit_lambda=0). The rnnt_loss bench has fast_rnnt as a column where it is installed.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F

import paddle_ext

from . import Case

C = 4


def _numpy_forward(px, py):
    """The recursion in NumPy, vectorised over the batch (rows in order, the t-scan in Python)."""
    B, S, T1 = px.shape
    T = py.shape[2]
    p = np.full((B, S + 1, T + 1), -np.inf)
    p[:, 0, 0] = 0.0
    p[:, 0, 1:] = np.cumsum(py[:, 0, :], axis=1)
    for s in range(1, S + 1):
        from_s = p[:, s - 1, :] + px[:, s - 1, :]
        row = p[:, s]
        row[:, 0] = from_s[:, 0]
        for t in range(1, T + 1):
            row[:, t] = np.logaddexp(from_s[:, t], row[:, t - 1] + py[:, s, t - 1])
    return p[:, S, T]


def _problem(B, S, T, dtype):
    rng = np.random.default_rng(0)
    px = rng.normal(-2.0, 1.0, size=(B, S, T + 1)).astype(dtype)
    px[:, :, T] = -np.inf
    py = rng.normal(-1.0, 1.0, size=(B, S + 1, T)).astype(dtype)
    logits = rng.normal(size=(B, T, S + 1, C)).astype(dtype)
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    return px, py, logits, symbols


def _case(B, S, T, backward, quick, dtype="float32"):
    px_np, py_np, logits_np, symbols_np = _problem(B, S, T, dtype)
    px, py = paddle.to_tensor(px_np), paddle.to_tensor(py_np)
    logits, symbols = paddle.to_tensor(logits_np), paddle.to_tensor(symbols_np)
    logp = F.log_softmax(logits, -1)  # warprnnt takes log-probs; not timed
    labels = symbols.astype("int32")
    t_len = paddle.full([B], T, dtype="int32")
    s_len = paddle.full([B], S, dtype="int32")
    for t in (px, py, logits, logp):
        t.stop_gradient = not backward

    def step(fn, inputs):
        def run():
            if not backward:
                with paddle.no_grad():
                    return fn()
            out = fn()
            return paddle.grad(out.sum() if out.ndim else out, inputs)
        return run

    candidates = {
        "paddle_ext": step(lambda: paddle_ext.mutual_information_recursion(px, py), [px, py]),
        "paddle_ext rnnt_loss": step(lambda: paddle_ext.rnnt_loss(logits, symbols, 0, reduction="sum"), [logits]),
        "paddle rnnt_loss": step(lambda: F.rnnt_loss(logp, labels, t_len, s_len, blank=0, fastemit_lambda=0.0,
                                                     reduction="sum"), [logp]),
    }
    kind = "fwd+bwd" if backward else "fwd"
    return Case("mutual_information", f"{kind} B={B} S={S} T={T} {dtype}", candidates, repeats=3 if quick else 5,
                note="rnnt_loss candidates include log-softmax/gathers on [B,T,S+1,4] logits")


def _numpy_case(B, S, T):
    px_np, py_np, _, _ = _problem(B, S, T, "float64")
    px, py = paddle.to_tensor(px_np), paddle.to_tensor(py_np)
    return Case("mutual_information", f"fwd B={B} S={S} T={T} float64 (vs NumPy)",
                {"paddle_ext": lambda: paddle_ext.mutual_information_recursion(px, py),
                 "numpy": lambda: _numpy_forward(px_np, py_np)}, repeats=3)


def _paddle_joint(pxs, pys):
    """k2's joint recursion as Paddle ops around paddle_ext's recursion: the sums, the occupations, the masked
    inner products and row 0's offset."""
    ans, (occ_x, occ_y) = paddle_ext.mutual_information_recursion(paddle.add_n(pxs).detach(),
                                                                  paddle.add_n(pys).detach(), return_grad=True)

    def inner(terms, occ):
        t = paddle.stack(terms).flatten(2)
        o = occ.flatten(1).unsqueeze(0).expand([len(terms), -1, -1])
        return (paddle.where(o != 0, t, paddle.zeros_like(t)) * o).sum(2)

    rows = inner(pxs, occ_x) + inner(pys, occ_y)
    return paddle.concat([rows[:1] + (ans - rows.detach().sum(0)), rows[1:]])


def _joint_case(N, B, S, T, quick):
    """joint_mutual_information_recursion (one fused op) against the same computation in Paddle ops."""
    rng = np.random.default_rng(1)
    pxs = [paddle.to_tensor(rng.normal(-2.0, 1.0, size=(B, S, T + 1)).astype("float32"), stop_gradient=False)
           for _ in range(N)]
    pys = [paddle.to_tensor(rng.normal(-1.0, 1.0, size=(B, S + 1, T)).astype("float32"), stop_gradient=False)
           for _ in range(N)]

    def step(fn):
        def run():
            return paddle.grad(fn().sum(), pxs + pys)
        return run

    return Case("mutual_information", f"joint fwd+bwd N={N} B={B} S={S} T={T} float32",
                {"paddle_ext": step(lambda: paddle_ext.joint_mutual_information_recursion(pxs, pys)),
                 "paddle composition": step(lambda: _paddle_joint(pxs, pys))}, repeats=3 if quick else 5)


def cases(quick: bool):
    if quick:
        sizes = [(8, 20, 100), (2, 10, 300)]
    else:
        sizes = [(32, 100, 500), (8, 50, 1500)]
    out = []
    for B, S, T in sizes:
        out += [_case(B, S, T, False, quick), _case(B, S, T, True, quick)]
    out.append(_numpy_case(8, 10, 50) if quick else _numpy_case(32, 20, 100))
    out.append(_joint_case(3, 8, 20, 100, quick) if quick else _joint_case(3, 32, 100, 500, quick))
    return out
