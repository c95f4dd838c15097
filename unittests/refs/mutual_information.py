"""mutual_information_recursion (k2 / fast_rnnt semantics) and the RNN-T losses on top of it."""

from __future__ import annotations

import numpy as np


def _mi_boxes(px, py, boundary):
    B, S, _ = np.shape(px)
    T = np.shape(py)[2]
    if boundary is None:
        return [(0, 0, S, T)] * B
    return [tuple(int(v) for v in row) for row in np.asarray(boundary)]


def _mi_log_add(a, b):
    with np.errstate(invalid="ignore"):
        return np.logaddexp(a, b)


def _mi_inputs(px, py):
    """px, py in float64, B, S, T, T1 and whether the lattice is the modified one (T1 == T)."""
    px, py = np.asarray(px, np.float64), np.asarray(py, np.float64)
    B, S, T1 = px.shape
    T = py.shape[2]
    return px, py, B, S, T, T1, T1 == T


def mutual_information(px, py, boundary=None):
    """(ans [B], p [B, S+1, T+1]) by the recursion in float64; p is -inf outside each box."""
    px, py, B, S, T, T1, modified = _mi_inputs(px, py)
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


def _mi_grad_start(px, py, boundary, ans_grad, forward):
    """What both grad references start from: float64 inputs, sizes, the upstream grad, `forward`'s p and
    zeroed grads."""
    px, py, B, S, T, T1, modified = _mi_inputs(px, py)
    ans_grad = np.ones(B) if ans_grad is None else np.asarray(ans_grad, np.float64)
    _, p = forward(px, py, boundary)
    return px, py, S, T, T1, modified, ans_grad, p, np.zeros_like(px), np.zeros_like(py)


def mutual_information_grad(px, py, boundary=None, ans_grad=None):
    """(px_grad, py_grad) by the backward recursion of the MLU design (non-finite terms count as 0)."""
    px, py, S, T, T1, modified, ans_grad, p, px_grad, py_grad = _mi_grad_start(
        px, py, boundary, ans_grad, mutual_information)

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
# The recursion and its grad vectorised for big lattices (the fuzz suite), each checked against its loop
# form on small inputs (test_fuzz.py), and the pruned / smoothed RNN-T losses.


def _mi_cells_by_diagonal(s0, t0, s1, t1):
    """For d = 1 .. (s1-s0)+(t1-t0): the (s, t) arrays of the box's cells with (s-s0)+(t-t0) = d."""
    for d in range(1, (s1 - s0) + (t1 - t0) + 1):
        s = np.arange(max(s0, s0 + d - (t1 - t0)), min(s1, s0 + d) + 1)
        yield s, t0 + d - (s - s0)


def mutual_information_wavefront(px, py, boundary=None):
    """mutual_information, one anti-diagonal at a time (the same log-adds, vectorised)."""
    px, py, B, S, T, T1, modified = _mi_inputs(px, py)
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
    px, py, S, T, T1, modified, ans_grad, p, px_grad, py_grad = _mi_grad_start(
        px, py, boundary, ans_grad, mutual_information_wavefront)

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
