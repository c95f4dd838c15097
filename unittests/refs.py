"""NumPy float64 references for every op: one small, clear function per op.

They favour obviousness over speed and are the specification the tests hold the kernels to.
"""

from __future__ import annotations

import numpy as np


# ------------------------------------------------------------------------------------- logcumsumexp
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


# ---------------------------------------------------------------------------------------------
# put_along_axis: a slot-by-slot loop over the contributions, in the flat order of `indices`.


def _put_broadcast(arr, indices, values, axis, broadcast):
    arr, indices, values = np.asarray(arr), np.asarray(indices), np.asarray(values)
    axis = axis % max(arr.ndim, 1)
    if broadcast:
        target = list(arr.shape)
        target[axis] = indices.shape[axis]
        indices = np.broadcast_to(indices, target)
        values = np.broadcast_to(values, target)
    else:
        values = np.broadcast_to(values, indices.shape) if values.ndim == 0 else values[tuple(slice(0, s) for s in indices.shape)]
    return arr, indices, values, axis


def _put_contributions(arr, indices, values, axis):
    """{slot: [(position, value), ...]} in increasing flat position of indices."""
    n = arr.shape[axis] if arr.ndim else 1
    slots = {}
    for p in np.ndindex(*indices.shape):
        k = int(indices[p])
        assert -n <= k < n
        slot = list(p)
        if arr.ndim:
            slot[axis] = k % n
        slots.setdefault(tuple(slot), []).append((p, values[p]))
    return slots


def put_along_axis(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    arr, indices, values, axis = _put_broadcast(arr, indices, values, axis, broadcast)
    integer = not np.issubdtype(arr.dtype, np.floating)
    out = arr.astype(np.int64 if integer else np.float64).copy()
    reduce = {"multiply": "mul"}.get(reduce, reduce)
    for slot, contrib in _put_contributions(arr, indices, values, axis).items():
        vals = [v for _, v in contrib]
        if reduce == "assign":
            out[slot] = vals[-1]
            continue
        terms = ([arr[slot]] if include_self else []) + vals
        terms = np.asarray(terms, dtype=out.dtype)
        if reduce == "add":
            out[slot] = terms.sum()
        elif reduce == "mul":
            out[slot] = np.prod(terms)
        elif reduce == "mean":
            out[slot] = terms.sum() // len(terms) if integer else terms.sum() / len(terms)
        elif reduce in ("amin", "amax"):
            nan = [t for t in terms if t != t]
            out[slot] = nan[0] if nan else (terms.min() if reduce == "amin" else terms.max())
    return out.astype(arr.dtype) if integer else out


def _is_result(x, result):
    """amin/amax: x is the slot's result, or both are NaN (a NaN contributor wins: it is the result)."""
    return x == result or (x != x and result != result)


def put_along_axis_grad(arr, indices, values, out_grad, axis, reduce="assign", include_self=True):
    """(arr_grad, values_grad) for already-broadcast indices/values (PyTorch's scatter_reduce rules:
    mul, the product of the other factors; amin/amax, an even split among the contributors equal to
    the result, where those of a NaN result are its NaNs: PyTorch's formula `(x == result) * g / N` has
    N = 0 there and gives NaN; an unwritten slot passes g through)."""
    arr, indices, values, axis = _put_broadcast(arr, indices, values, axis, False)
    arr, values, g = (np.asarray(a, dtype=np.float64) for a in (arr, values, out_grad))
    out = put_along_axis(arr, indices, values, axis, reduce, include_self, broadcast=False)
    reduce = {"multiply": "mul"}.get(reduce, reduce)
    arr_grad, values_grad = g.copy(), np.zeros(values.shape)
    for slot, contrib in _put_contributions(arr, indices, values, axis).items():
        positions = [p for p, _ in contrib]
        vals = [v for _, v in contrib]
        if reduce == "assign":
            arr_grad[slot] = 0.0
            values_grad[positions[-1]] = g[slot]
            continue
        factors = ([arr[slot]] if include_self else []) + vals
        grads = []
        for i in range(len(factors)):
            if reduce == "add":
                grads.append(g[slot])
            elif reduce == "mean":
                grads.append(g[slot] / len(factors))
            elif reduce == "mul":
                grads.append(g[slot] * np.prod(factors[:i] + factors[i + 1:]))
            else:  # the contributors that are the result (a NaN result: its NaNs) share its grad
                ties = sum(1 for f in factors if _is_result(f, out[slot]))
                grads.append(g[slot] / ties if _is_result(factors[i], out[slot]) else 0.0)
        if include_self:
            arr_grad[slot] = grads.pop(0)
        else:
            arr_grad[slot] = 0.0
        for p, gv in zip(positions, grads):
            values_grad[p] = gv
    return arr_grad, values_grad
# mutual_information_recursion (k2 / fast_rnnt semantics) and the RNN-T losses on top of it


def _mi_boxes(px, py, boundary):
    B, S, _ = np.shape(px)
    T = np.shape(py)[2]
    if boundary is None:
        return [(0, 0, S, T)] * B
    return [tuple(int(v) for v in row) for row in np.asarray(boundary)]


def _mi_log_add(a, b):
    with np.errstate(invalid="ignore"):
        return np.logaddexp(a, b)


def mutual_information(px, py, boundary=None):
    """(ans [B], p [B, S+1, T+1]) by the recursion in float64; p is -inf outside each box."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = T1 == T
    p = np.full((B, S + 1, T + 1), -np.inf)
    ans = np.zeros(B)
    for b, (s0, t0, s1, t1) in enumerate(_mi_boxes(px, py, boundary)):
        for s in range(s0, s1 + 1):
            for t in range(t0, t1 + 1):
                if s == s0 and t == t0:
                    p[b, s, t] = 0.0
                    continue
                from_t = p[b, s, t - 1] + py[b, s, t - 1] if t > t0 else -np.inf
                if modified:
                    from_s = p[b, s - 1, t - 1] + px[b, s - 1, t - 1] if s > s0 and t > t0 else -np.inf
                else:
                    from_s = p[b, s - 1, t] + px[b, s - 1, t] if s > s0 else -np.inf
                p[b, s, t] = _mi_log_add(from_s, from_t)
        ans[b] = p[b, s1, t1]
    return ans, p


def _mi_edge_weight(a, x, c):
    """exp(a + x - c), the share of p[next] that came through one edge; 0 where not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(a + x - c)
    return np.where(np.isfinite(e), e, 0.0)


def mutual_information_grad(px, py, boundary=None, ans_grad=None):
    """(px_grad, py_grad) by the backward recursion of the MLU design (non-finite terms count as 0)."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = T1 == T
    ans_grad = np.ones(B) if ans_grad is None else np.asarray(ans_grad, np.float64)
    _, p = mutual_information(px, py, boundary)
    px_grad, py_grad = np.zeros_like(px), np.zeros_like(py)

    for b, (s0, t0, s1, t1) in enumerate(_mi_boxes(px, py, boundary)):
        g = np.zeros((S + 2, T + 2))
        for s in range(s1, s0 - 1, -1):
            for t in range(t1, t0 - 1, -1):
                if s == s1 and t == t1:
                    g[s, t] = ans_grad[b]
                    continue
                total = 0.0
                if s < s1 and (not modified or t < t1):
                    nxt = (s + 1, t + 1) if modified else (s + 1, t)
                    px_grad[b, s, t] = g[nxt] * _mi_edge_weight(p[b, s, t], px[b, s, t], p[b][nxt])
                    total += px_grad[b, s, t]
                if t < t1:
                    py_grad[b, s, t] = g[s, t + 1] * _mi_edge_weight(p[b, s, t], py[b, s, t], p[b, s, t + 1])
                    total += py_grad[b, s, t]
                g[s, t] = total
    return px_grad, py_grad


def mutual_information_brute_force(px, py, boundary=None):
    """(ans, px_grad, py_grad) from an explicit sum over every lattice path (tiny S, T only):
    ans = log sum_paths exp(score), and the grad of an edge is the posterior mass of the paths through it."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = T1 == T
    ans = np.zeros(B)
    px_grad, py_grad = np.zeros_like(px), np.zeros_like(py)
    for b, (s0, t0, s1, t1) in enumerate(_mi_boxes(px, py, boundary)):
        paths = []  # (score, [edges])

        def walk(s, t, score, edges):
            if (s, t) == (s1, t1):
                paths.append((score, list(edges)))
                return
            if s < s1 and (not modified or t < t1):
                edges.append(("x", s, t))
                walk(s + 1, t + (1 if modified else 0), score + px[b, s, t], edges)
                edges.pop()
            if t < t1:
                edges.append(("y", s, t))
                walk(s, t + 1, score + py[b, s, t], edges)
                edges.pop()

        walk(s0, t0, 0.0, [])
        scores = np.array([sc for sc, _ in paths]) if paths else np.array([-np.inf])
        finite = scores[np.isfinite(scores)]
        total = -np.inf if finite.size == 0 else np.log(np.sum(np.exp(finite - finite.max()))) + finite.max()
        ans[b] = total
        if not np.isfinite(total):
            continue
        for sc, edges in paths:
            w = np.exp(sc - total) if np.isfinite(sc) else 0.0
            for kind, s, t in edges:
                (px_grad if kind == "x" else py_grad)[b, s, t] += w
    return ans, px_grad, py_grad


def _log_softmax_last(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))


def _rnnt_edges(logp, symbols, termination_symbol):
    """From log-probs [B, T, S+1, C]: symbol scores [B, S, T] (logp[t, s, symbols[s]]) and blank
    scores [B, S+1, T] (logp[t, s, termination_symbol])."""
    S = logp.shape[2] - 1
    sym = np.take_along_axis(logp[:, :, :S], np.asarray(symbols)[:, None, :, None], axis=3)[..., 0]
    return sym.transpose(0, 2, 1), logp[..., termination_symbol].transpose(0, 2, 1)


def _rnnt_finish(px, py, boundary, rnnt_type):
    """A symbol edge (t, s) -> s+1 scores px[s, t] (modified/constrained: it also moves to t+1;
    constrained adds the blank of context s+1 on frame t), a blank edge py[s, t] moves to t+1; regular
    paths end with a blank on the last frame, so regular px is [B, S, T+1] with px[:, :, t_end] = -inf."""
    B, S, T = px.shape
    if rnnt_type == "constrained":
        px = px + py[:, 1:, :]
    if rnnt_type == "regular":
        px = np.concatenate([px, np.full((B, S, 1), -np.inf)], axis=2)
        for b in range(B):
            px[b, :, T if boundary is None else int(boundary[b][3])] = -np.inf
    return px, py


def rnnt_logprobs(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular"):
    """(px, py) of the joiner logits [B, T, S+1, C] (exact log-softmax over C, float64)."""
    logp = _log_softmax_last(np.asarray(logits, np.float64))
    return _rnnt_finish(*_rnnt_edges(logp, symbols, termination_symbol), boundary, rnnt_type)


def rnnt_simple_logprobs(lm, am, symbols, termination_symbol, modified=False):
    """The fused op pe_rnnt_simple_logprobs: px [B, S, T+1] (regular: column T is -inf) or [B, S, T] and
    py [B, S+1, T] of log_softmax(lm[s] + am[t]) (float64, the [B, T, S+1, C] tensor materialised)."""
    lm, am = np.asarray(lm, np.float64), np.asarray(am, np.float64)
    px, py = _rnnt_edges(_log_softmax_last(lm[:, None] + am[:, :, None]), symbols, termination_symbol)
    if not modified:
        px = np.concatenate([px, np.full(px.shape[:2] + (1,), -np.inf)], axis=2)
    return px, py


def rnnt_simple_logprobs_grad(lm, am, symbols, termination_symbol, px_grad, py_grad, modified=False):
    """(lm_grad, am_grad) of sum(px * px_grad) + sum(py * py_grad) for rnnt_simple_logprobs (the finite
    part of px: regular px's column T is a constant), from the materialised softmax, float64."""
    lm, am = np.asarray(lm, np.float64), np.asarray(am, np.float64)
    logp = _log_softmax_last(lm[:, None] + am[:, :, None])  # [B, T, S+1, C]
    B, T, S1, C = logp.shape
    g = np.asarray(py_grad, np.float64).transpose(0, 2, 1).copy()  # [B, T, S+1]: the grad of each cell's normaliser
    gx = np.asarray(px_grad, np.float64)[:, :, :T].transpose(0, 2, 1)  # [B, T, S]
    g[:, :, :S1 - 1] += gx
    d = -np.exp(logp) * g[..., None]
    for b in range(B):
        for s in range(S1 - 1):
            d[b, :, s, symbols[b][s]] += gx[b, :, s]
    d[..., termination_symbol] += np.asarray(py_grad, np.float64).transpose(0, 2, 1)
    return d.sum(1), d.sum(2)


def rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary=None,
                           rnnt_type="regular", tiny=1e-20):
    """k2's smoothed (px, py): the log-softmax of am[t] + lm[s], of lm[s] alone and of am[t] + log(u)
    (u = the mean of the softmax(lm) rows + 1e-20, k2's floor), mixed linearly in log space (a zero
    scale is 1e-20)."""
    lm, am = np.asarray(lm, np.float64), np.asarray(am, np.float64)
    log_u = np.log(np.exp(_log_softmax_last(lm)).mean(axis=(0, 1)) + tiny)
    parts = [(_log_softmax_last(lm[:, None] + am[:, :, None]), 1.0 - lm_only_scale - am_only_scale),
             (_log_softmax_last(lm)[:, None], lm_only_scale or 1e-20),
             (_log_softmax_last(am + log_u)[:, :, None], am_only_scale or 1e-20)]
    B, T, S1 = am.shape[0], am.shape[1], lm.shape[1]
    px, py = np.zeros((B, S1 - 1, T)), np.zeros((B, S1, T))
    for logp, scale in parts:
        sym, blank = _rnnt_edges(np.broadcast_to(logp, (B, T, S1, lm.shape[2])), symbols, termination_symbol)
        px, py = px + scale * sym, py + scale * blank
    return _rnnt_finish(px, py, boundary, rnnt_type)


def rnnt_loss(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular", delay_penalty=0.0):
    """Per-item RNN-T loss on joiner logits [B, T, S+1, C] (the recursion over rnnt_logprobs)."""
    px, py = rnnt_logprobs(logits, symbols, termination_symbol, boundary, rnnt_type)
    return rnnt_loss_from_logprobs(px, py, boundary, rnnt_type, delay_penalty)


def rnnt_delay_penalised(px, py, boundary=None, delay_penalty=0.0):
    """px + delay_penalty * ((t_end - 1) / 2 - t): k2's penalty against late symbols."""
    px = np.array(px, np.float64)
    if delay_penalty > 0:
        B, _, T0 = px.shape
        for b in range(B):
            t_end = py.shape[2] if boundary is None else int(boundary[b][3])
            px[b] += delay_penalty * ((t_end - 1) / 2 - np.arange(T0))[None, :]
    return px


def rnnt_loss_from_logprobs(px, py, boundary=None, rnnt_type="regular", delay_penalty=0.0):
    return -mutual_information(rnnt_delay_penalised(px, py, boundary, delay_penalty), py, boundary)[0]


def rnnt_loss_logprob_grads(px, py, boundary=None, delay_penalty=0.0, fastemit_lambda=0.0):
    """Grads of sum(loss) w.r.t. px and py under FastEmit: -(1 + lambda) x and -1 x the occupation."""
    gx, gy = mutual_information_grad(rnnt_delay_penalised(px, py, boundary, delay_penalty), py, boundary)
    return -(1.0 + fastemit_lambda) * gx, -gy


def joint_mutual_information(pxs, pys, boundary=None):
    """k2's joint recursion [N, B]: row i = <occ_x, px[i]> + <occ_y, py[i]> over the occupied cells, the
    occupations of the summed lattice; row 0 also holds ans(sums) minus the sum of the rows."""
    px_tot, py_tot = np.sum(pxs, axis=0), np.sum(pys, axis=0)
    ans = mutual_information(px_tot, py_tot, boundary)[0]
    gx, gy = mutual_information_grad(px_tot, py_tot, boundary)

    def inner(terms, occ):
        return np.array([[np.sum(occ[b][occ[b] != 0] * term[b][occ[b] != 0]) for b in range(len(occ))]
                         for term in terms])

    rows = inner(pxs, gx) + inner(pys, gy)
    rows[0] += ans - rows.sum(axis=0)
    return rows


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


# ---------------------------------------------------------------------------------------------------
# Vectorised forms of the references above for long rows and big lattices (the fuzz suite), and the
# pruned / smoothed RNN-T losses. Each is checked against its loop form on small inputs (test_fuzz.py).


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


def _mi_cells_by_diagonal(s0, t0, s1, t1):
    """For d = 1 .. (s1-s0)+(t1-t0): the (s, t) arrays of the box's cells with (s-s0)+(t-t0) = d."""
    for d in range(1, (s1 - s0) + (t1 - t0) + 1):
        s = np.arange(max(s0, s0 + d - (t1 - t0)), min(s1, s0 + d) + 1)
        yield s, t0 + d - (s - s0)


def mutual_information_wavefront(px, py, boundary=None):
    """mutual_information, one anti-diagonal at a time (the same log-adds, vectorised)."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = T1 == T
    p = np.full((B, S + 1, T + 1), -np.inf)
    ans = np.zeros(B)
    with np.errstate(invalid="ignore"):  # -inf + inf entries: NaN, as in the loop form
        for b, (s0, t0, s1, t1) in enumerate(_mi_boxes(px, py, boundary)):
            pb = p[b]
            pb[s0, t0] = 0.0
            for s, t in _mi_cells_by_diagonal(s0, t0, s1, t1):
                has_t = t > t0
                tm = np.maximum(t - 1, 0)
                from_t = np.where(has_t, pb[s, tm] + py[b, s, tm], -np.inf) if T else np.full(s.shape, -np.inf)
                sm = np.maximum(s - 1, 0)
                if S == 0:
                    from_s = np.full(s.shape, -np.inf)
                elif modified:
                    from_s = np.where((s > s0) & has_t, pb[sm, tm] + px[b, sm, tm], -np.inf)
                else:
                    from_s = np.where(s > s0, pb[sm, t] + px[b, sm, np.minimum(t, T1 - 1)], -np.inf)
                pb[s, t] = _mi_log_add(from_s, from_t)
            ans[b] = pb[s1, t1]
    return ans, p


def mutual_information_grad_wavefront(px, py, boundary=None, ans_grad=None):
    """mutual_information_grad, one anti-diagonal at a time, from the last cell back."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    modified = T1 == T
    ans_grad = np.ones(B) if ans_grad is None else np.asarray(ans_grad, np.float64)
    _, p = mutual_information_wavefront(px, py, boundary)
    px_grad, py_grad = np.zeros_like(px), np.zeros_like(py)

    for b, (s0, t0, s1, t1) in enumerate(_mi_boxes(px, py, boundary)):
        g = np.zeros((S + 2, T + 2))
        g[s1, t1] = ans_grad[b]
        pb = np.full((S + 2, T + 2), -np.inf)
        pb[:S + 1, :T + 1] = p[b]
        diagonals = [(np.array([s0]), np.array([t0]))] + list(_mi_cells_by_diagonal(s0, t0, s1, t1))
        for s, t in reversed(diagonals[:-1]):
            total = np.zeros(s.shape)
            sx = (s < s1) & ((t < t1) if modified else True)
            ns, nt = s + 1, (t + 1 if modified else t)
            tx = np.minimum(t, T1 - 1)
            sxi = np.minimum(s, S - 1) if S else s
            if S:
                w = np.where(sx, g[ns, nt] * _mi_edge_weight(pb[s, t], px[b, sxi, tx], pb[ns, nt]), 0.0)
                px_grad[b, s[sx], t[sx]] = w[sx]
                total += w
            ty = t < t1
            tyi = np.minimum(t, T - 1) if T else t
            if T:
                w = np.where(ty, g[s, t + 1] * _mi_edge_weight(pb[s, t], py[b, s, tyi], pb[s, t + 1]), 0.0)
                py_grad[b, s[ty], t[ty]] = w[ty]
                total += w
            g[s, t] = total
    return px_grad, py_grad


def rnnt_loss_pruned(logits, symbols, ranges, termination_symbol, boundary=None, rnnt_type="regular"):
    """The loss on pruned logits [B, T, R, C]: frame t sees contexts ranges[b, t] only; every other
    (s, t) lattice entry is -inf (so the recursion only walks inside the ranges)."""
    logp = _log_softmax_last(logits)
    B, T, R, C = logp.shape
    S = np.shape(symbols)[1]
    regular = rnnt_type == "regular"
    px = np.full((B, S, T + 1 if regular else T), -np.inf)
    py = np.full((B, S + 1, T), -np.inf)
    for b in range(B):
        t_end = T if boundary is None else int(boundary[b][3])
        for t in range(T):
            for r in range(R):
                s = int(ranges[b][t][r])
                py[b, s, t] = logp[b, t, r, termination_symbol]
                if s < S and (not regular or t != t_end):
                    px[b, s, t] = logp[b, t, r, symbols[b][s]]
        if rnnt_type == "constrained":
            px[b] += py[b, 1:, :]
    return -mutual_information(px, py, boundary)[0]


def rnnt_loss_smoothed(lm, am, symbols, termination_symbol, lm_only_scale=0.1, am_only_scale=0.1, boundary=None,
                       rnnt_type="regular"):
    """k2's smoothed simple loss from its definition: per lattice entry, the log-probability of the
    additive joiner log_softmax(lm[s] + am[t]) weighted with the LM-only log_softmax(lm[s]) and the AM-only
    model log_softmax(am[t] + log unigram), unigram = the batch mean of softmax(lm[b, s]) + 1e-20; a zero
    scale counts as 1e-20 (both as k2 does)."""
    lm, am = np.asarray(lm, np.float64), np.asarray(am, np.float64)
    B, S1, C = lm.shape
    T = am.shape[1]
    S = S1 - 1
    combined = _log_softmax_last(lm[:, None, :, :] + am[:, :, None, :])  # [B, T, S+1, C]
    lm_only = _log_softmax_last(lm)  # [B, S+1, C]
    unigram = np.log(np.exp(lm_only).mean(axis=(0, 1)) + 1e-20)  # [C]
    am_only = _log_softmax_last(am + unigram)  # [B, T, C]
    w = 1.0 - lm_only_scale - am_only_scale
    a, c = lm_only_scale or 1e-20, am_only_scale or 1e-20
    regular = rnnt_type == "regular"
    px = np.full((B, S, T + 1 if regular else T), -np.inf)
    py = np.zeros((B, S + 1, T))
    for b in range(B):
        t_end = T if boundary is None else int(boundary[b][3])
        for s in range(S + 1):
            for t in range(T):
                k = termination_symbol
                py[b, s, t] = w * combined[b, t, s, k] + a * lm_only[b, s, k] + c * am_only[b, t, k]
                if s < S and (not regular or t != t_end):
                    k = symbols[b][s]
                    px[b, s, t] = w * combined[b, t, s, k] + a * lm_only[b, s, k] + c * am_only[b, t, k]
        if rnnt_type == "constrained":
            px[b] += py[b, 1:, :]
    return -mutual_information(px, py, boundary)[0]


# ---------------------------------------------------------------------------------------------------
# rnnt_joint_logprobs (the fused joiner op) and the pruning gather


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


# ------------------------------------------------------------------ transducers with jumps (TDT, multi-blank)
# Nodes (t, s) of item b's box t0 <= t <= t1, s0 <= s <= s1 (boundary rows (s0, t0, s1, t1)). From a node
# with t < t1: blank arcs (t, s) -> (t + d, s), d >= 1, landing t + d <= t1; symbol arcs (t, s) -> (t + d, s + 1),
# d >= 0, landing t + d < t1, s < s1. Each arc is (dt, ds, weight, token, duration index or None); the loss is
# -log of the total weight of the paths (t0, s0) -> (t1, s1).


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
                           fastemit_lambda=0.0, loss_grad=None):
    """d(sum_b loss_grad[b] * loss[b]) / d logits, with FastEmit's (1 + lambda) on symbol arcs. Each arc's
    occupancy gamma = exp(alpha + w + beta(dest) - logZ); for a unit j of a head with softmax p:
    d loss / d x_j = p_j * N - E_j, N the (scaled) occupancy leaving the node, E_j that of the arcs using j.
    An item with no path (logZ = -inf) gets zero grads."""
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


def tdt_loss(logits, symbols, durations, blank, boundary=None, sigma=0.0):
    return jump_lattice_loss(tdt_arcs(durations, logits.shape[-1] - len(durations)), logits, symbols, blank,
                             boundary, sigma)


def tdt_loss_grad(logits, symbols, durations, blank, boundary=None, sigma=0.0, fastemit_lambda=0.0, loss_grad=None):
    C = logits.shape[-1] - len(durations)
    return jump_lattice_loss_grad(tdt_arcs(durations, C), logits, symbols, blank, C, boundary, sigma,
                                  fastemit_lambda, loss_grad)


def multiblank_loss(logits, symbols, big_blank_durations, blank, boundary=None, sigma=0.0):
    return jump_lattice_loss(multiblank_arcs(big_blank_durations), logits, symbols, blank, boundary, sigma)


def multiblank_loss_grad(logits, symbols, big_blank_durations, blank, boundary=None, sigma=0.0, fastemit_lambda=0.0,
                         loss_grad=None):
    return jump_lattice_loss_grad(multiblank_arcs(big_blank_durations), logits, symbols, blank, logits.shape[-1],
                                  boundary, sigma, fastemit_lambda, loss_grad)
