"""Pruning: get_rnnt_prune_ranges, do_rnnt_pruning, get_rnnt_logprobs_pruned and rnnt_loss_pruned."""

from __future__ import annotations

import warnings

import numpy as np
import paddle

from .. import _amp, _library
from .._checks import check_tensor, dtype_name, is_int, is_integer, run_kernel_checked
from .._checks import choice, index64
from .._checks import known_dim as _known
from ..mutual_information import check_boundary
from .common import (NO_CLAMP, REDUCTIONS, RNNT_TYPES, _agree, _check_clamp, _check_common, _check_float,
                     _check_loss_args, _dims, _fast_lane, _finish_px, _loss, _neg_inf, _no_elements, _paths, _symbols64,
                     real_bits)
from .full import _joint_logprobs


def _monotonic_lower_bound(x):
    """x[..., i] = min(x[..., i:]): the largest non-decreasing sequence below x."""
    return paddle.flip(paddle.cummin(paddle.flip(x, [-1]), axis=-1)[0], [-1])


def _adjust_pruning_lower_bound(s_begin, s_range):
    """Make s_begin non-decreasing, start at 0 and never step by s_range or more (k2's construction:
    -(s_begin - (s_range - 1) * t) non-decreasing is equivalent to s_begin[t+1] - s_begin[t] < s_range)."""
    T = _dims(s_begin)[1]
    ramp = (s_range - 1) * paddle.arange(T, dtype=s_begin.dtype).unsqueeze(0)
    s_begin = _monotonic_lower_bound(s_begin)
    s_begin = _monotonic_lower_bound(ramp - s_begin)
    s_begin = paddle.clip(s_begin, min=0)
    return ramp - s_begin


@paddle.jit.not_to_static
def _check_prune_ranges(op, px_grad, py_grad, boundary, s_range):
    """-> (s_range, is_regular) from the static shapes: s_range raised (dygraph) and capped at S+1 where
    S is known (else the graph caps it when it runs); is_regular None where T is dynamic."""
    B, S, T1 = _check_float(px_grad, "px_grad", op, 3)
    By, S1, T = _check_float(py_grad, "py_grad", op, 3)
    both_t = _known(T1) and _known(T)
    if (both_t and T1 not in (T, T + 1)) or not _agree(By, B) or (_known(S) and not _agree(S1, S + 1)):
        raise ValueError(f"{op}: px_grad must be [B, S, T+1] or [B, S, T] and py_grad [B, S+1, T]; got "
                         f"{list(px_grad.shape)} and {list(py_grad.shape)}")
    if boundary is None:
        raise ValueError(f"{op}: boundary is required (int64 [B, 4])")
    check_boundary(boundary, B, S, T, op)
    if not is_int(s_range):
        raise TypeError(f"{op}: s_range must be an int, got {s_range!r}")
    if s_range < 0:
        raise ValueError(f"{op}: s_range must be >= 0, got {s_range}")
    is_regular = T1 != T if both_t else None
    if is_regular and paddle.in_dynamic_mode() and T > 0:
        rows = boundary.numpy()
        # a path needs ceil-ish (S-1)/T + 1 symbols on some frame, plus one for the blank (k2's bound)
        needed = int((np.trunc((rows[:, 2] - 1) / rows[:, 3].clip(1)).astype(np.int64) + 2).max()) if B else 2
        if s_range < needed:
            warnings.warn(f"{op}: s_range={s_range} cannot keep a path for these boundaries; using {needed}")
            s_range = needed
    if _known(S) and s_range > S:
        s_range = S + 1
    # a layout unknown until the graph runs (dynamic T) takes the regular minimum
    if s_range < (1 if is_regular is False else 2):
        kind = {True: "regular", False: "modified", None: "regular (or, with a dynamic T, unknown)"}[is_regular]
        raise ValueError(f"{op}: s_range must be >= {1 if is_regular is False else 2} for {kind} RNN-T, or no "
                         f"path survives; got {s_range}")
    return int(s_range), is_regular


def get_rnnt_prune_ranges(px_grad, py_grad, boundary, s_range):
    """Pruning ranges ``[B, T, s_range]`` from the occupation grads of the simple loss (k2's algorithm).

    For each frame t, the window of ``s_range`` consecutive symbol positions that holds the most
    occupation mass: ``ranges[b, t] = s_begin[b, t] + arange(s_range)``, with s_begin non-decreasing,
    starting at 0, stepping by less than s_range (so no symbol is skipped), and ending so that the
    last real frame reaches ``s_end``. As in k2, a regular px_grad raises s_range to the least value that
    keeps a path (``max_b((S_b-1)//T_b + 2)`` in dygraph, with a warning), a modified/constrained one (the
    same layout for both) keeps it, and every s_range is capped at S+1 (in a static graph with a dynamic
    S, when it runs: the last dim of the ranges is then dynamic too). Windows that leave an item no path
    (e.g. constrained with s_range 1) give it an inf pruned loss.

    Args:
        px_grad (Tensor): ``[B, S, T+1]`` (regular) or ``[B, S, T]``.
        py_grad (Tensor): ``[B, S+1, T]``.
        boundary (Tensor): int64 or int32 ``[B, 4]`` (required).
        s_range (int): symbols kept per frame, >= 0; after the rule above >= 2 for regular RNN-T (and where
            T is dynamic), >= 1 otherwise.
    """
    boundary = index64(boundary)
    return _amp.float32_op(_get_rnnt_prune_ranges, 2, px_grad, py_grad, boundary, s_range)


def _get_rnnt_prune_ranges(px_grad, py_grad, boundary, s_range):
    op = "get_rnnt_prune_ranges"
    s_range, is_regular = _check_prune_ranges(op, px_grad, py_grad, boundary, s_range)
    B, S, T1 = _dims(px_grad)
    T = _dims(py_grad)[2]
    rows = py_grad
    if isinstance(S, int):
        R = s_range
    else:  # S dynamic: R = min(s_range, S+1) when the graph runs
        R = paddle.clip(S + 1, max=s_range)
        # zero rows below py_grad: with R = S+1 < s_range the slices below reach up to s_range - 1 rows
        # past its end (each must have n rows; the zeros leave the sums exact)
        rows = paddle.concat([py_grad, paddle.zeros([B, s_range - 1, T], dtype=py_grad.dtype)], axis=1)
    n = S + 2 - R  # candidate window starts 0 .. S+1-R
    blk = rows[:, 0:n, :]
    for k in range(1, s_range):  # the py mass inside each window of R rows
        blk = blk + rows[:, k:k + n, :]
    px_pad = paddle.concat([paddle.zeros([B, 1, T1], dtype=px_grad.dtype), px_grad], axis=1)
    final = blk - px_pad[:, :n, :T]  # minus the mass that enters the window from below
    s_begin = paddle.argmax(final, axis=1)  # [B, T]
    t = paddle.arange(T, dtype="int64").unsqueeze(0)
    mask = t < (boundary[:, 3] - 1).unsqueeze(1)
    padding = paddle.clip(boundary[:, 2] - R + 1, min=0).unsqueeze(1).expand([B, T])
    s_begin = paddle.where(mask.expand([B, T]), s_begin, padding)
    if is_regular is None:  # T dynamic: the layout is known when the graph runs
        step = 2 + (R - 2) * (T1 != T).astype("int64")
    else:
        step = R if is_regular else 2
    s_begin = _adjust_pruning_lower_bound(s_begin, step)
    return s_begin.unsqueeze(-1) + paddle.arange(R, dtype="int64").reshape([1, 1, -1])


@paddle.jit.not_to_static
def _check_pruning(op, am, lm, ranges):
    _check_float(am, "am", op, 3)
    _check_float(lm, "lm", op, 3)
    check_tensor(ranges, "ranges", op)
    r = list(ranges.shape)
    if len(r) != 3 or not (_agree(r[0], am.shape[0]) and _agree(r[0], lm.shape[0]) and _agree(r[1], am.shape[1])):
        raise ValueError(f"{op}: ranges must be [B, T, s_range] matching am {list(am.shape)} and lm "
                         f"{list(lm.shape)}; got {r}")
    if not is_integer(ranges.dtype):
        raise TypeError(f"{op}: ranges must be an integer tensor, got {dtype_name(ranges.dtype)}")
    if paddle.in_dynamic_mode() and ranges.numel() > 0 and _known(lm.shape[1]):
        lo, hi = int(ranges.min()), int(ranges.max())
        if lo < 0 or hi >= lm.shape[1]:
            raise ValueError(f"{op}: ranges must lie in [0, S] = [0, {lm.shape[1] - 1}] (lm is [B, S+1, Dl]), "
                             f"got values in [{lo}, {hi}]")


def do_rnnt_pruning(am, lm, ranges):
    """Prune encoder (am ``[B, T, Da]``) and predictor (lm ``[B, S+1, Dl]``) outputs with ranges
    ``[B, T, s_range]``: returns ``am_pruned [B, T, s_range, Da]`` and ``lm_pruned [B, T, s_range, Dl]``.
    Both are row gathers by one fused op whose grad adds the rows back (no [B, T, s_range, D] index tensor)."""
    ranges = index64(ranges)
    return _amp.moved_in_float32(_do_rnnt_pruning, 2, am, lm, ranges)  # 16-bit inputs: moved as float32 (exact)


def _do_rnnt_pruning(am, lm, ranges):
    _check_pruning("do_rnnt_pruning", am, lm, ranges)
    B, T, R = _dims(ranges)
    ops = _library.ops()
    frames = paddle.arange(T, dtype="int64").reshape([1, -1, 1]).expand([B, T, R])
    am_pruned = ops.pe_rnnt_prune_gather(am, frames)  # am[b, t] on each of the frame's R rows
    lm_pruned = ops.pe_rnnt_prune_gather(lm, _symbols64(ranges))  # lm[b, ranges[b, t, r]]
    return am_pruned, lm_pruned


@paddle.jit.not_to_static
def _check_ranges(op, ranges, S, kernel_checks=False):
    """k2's ranges: ranges[b, t] = s_begin[b, t] + arange(s_range) within [0, S], s_begin non-decreasing
    in t. Values are checked in dygraph only. Windows that leave an item no path are no error (its loss
    is inf, as in k2). With kernel_checks, the joint op's CPU kernel checks all three rules: a CPU
    tensor's values are left to it, and True returned (see _check_common)."""
    if not is_integer(ranges.dtype):
        raise TypeError(f"{op}: ranges must be an integer tensor, got {dtype_name(ranges.dtype)}")
    if not paddle.in_dynamic_mode() or _no_elements(ranges):
        return False
    if kernel_checks and _library.is_cpu(ranges):
        return True  # (a NumPy read and a dozen small NumPy ops saved on every call with good ranges)
    r = ranges.numpy().astype(np.int64, copy=False)
    B, T, R = r.shape
    begin = r[:, :, 0]
    steps = r - begin[:, :, None] != np.arange(R)
    if steps.any():
        b, t = np.argwhere(steps.any(-1))[0]
        raise ValueError(f"{op}: ranges[{b}, {t}] = {r[b, t].tolist()} is not s_begin + arange(s_range), "
                         f"s_range consecutive symbol positions")
    outside = (begin < 0) | (begin + R - 1 > S)
    if outside.any():
        b, t = np.argwhere(outside)[0]
        raise ValueError(f"{op}: ranges[{b}, {t}] = {r[b, t].tolist()} does not fit in [0, S] = [0, {S}]")
    down = begin[:, 1:] < begin[:, :-1]
    if down.any():
        b, t = np.argwhere(down)[0]
        raise ValueError(f"{op}: ranges must be non-decreasing along T, but ranges[{b}, {t + 1}, 0] = "
                         f"{begin[b, t + 1]} < ranges[{b}, {t}, 0] = {begin[b, t]}")
    return False


@paddle.jit.not_to_static
def _check_pruned(op, logits, symbols, ranges, termination_symbol, boundary, rnnt_type, kernel_checks=False):
    """The pruned functions' checks; kernel_checks as in _check_common (the joint op checks symbols and ranges)."""
    B, T, R, C = _check_float(logits, "logits", op, 4)
    check_tensor(symbols, "symbols", op)
    symbols_shape = symbols.shape
    S = symbols_shape[1] if len(symbols_shape) == 2 else -1
    common_args = (op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type)
    deferred = _check_common(*common_args, kernel_checks=kernel_checks)
    # the ranges' checks come after the symbols' (a failure there also runs the symbols' deferred check first)
    return run_kernel_checked(deferred, _check_common, common_args, _check_pruned_ranges, op, ranges, B, T, R, S,
                               kernel_checks) or deferred


@paddle.jit.not_to_static
def _check_pruned_ranges(op, ranges, B, T, R, S, kernel_checks):
    check_tensor(ranges, "ranges", op)
    r = ranges.shape
    if len(r) != 3 or not (_agree(r[0], B) and _agree(r[1], T) and _agree(r[2], R)):
        raise ValueError(f"{op}: ranges must have shape [B, T, s_range] = {[B, T, R]}, got {list(r)}")
    if _known(R) and _known(S) and R > S + 1:
        raise ValueError(f"{op}: s_range = {R} exceeds S+1 = {S + 1}")
    return _check_ranges(op, ranges, S, kernel_checks)


def get_rnnt_logprobs_pruned(logits, symbols, ranges, termination_symbol, boundary=None, rnnt_type="regular"):
    """(px, py) from pruned joiner logits ``[B, T, s_range, C]``: entries outside each frame's range are -inf."""
    symbols, ranges, boundary = index64(symbols), index64(ranges), index64(boundary)
    rnnt_type = choice(rnnt_type, RNNT_TYPES)
    args = (logits, symbols, ranges, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs_pruned")
    if boundary is None and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (ranges,)):
        return _amp.first_try(*_get_rnnt_logprobs_pruned_paths, *args)[:2]
    return _get_rnnt_logprobs_pruned_paths[1](*args)[:2]


def _get_rnnt_logprobs_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, op, checked=True,
                              clamp_bits=NO_CLAMP):
    """checked: as in _get_rnnt_logprobs. -> (px, py, scale); clamp_bits: the grad clamp's (see _joint_logprobs)."""
    if checked:
        check_args = (op, logits, symbols, ranges, termination_symbol, boundary, rnnt_type)
        deferred = _check_pruned(*check_args, kernel_checks=True)
        px, py, scale = run_kernel_checked(deferred, _check_pruned, check_args, _joint_logprobs, logits,
                                           _symbols64(symbols), _symbols64(ranges), termination_symbol, clamp_bits)
    else:
        if logits.shape[2] > symbols.shape[1] + 1:  # (with no frames, no range value shows it)
            raise _amp.TakeFullPath
        px, py, scale = _joint_logprobs(logits, symbols, ranges, termination_symbol, clamp_bits)
    if rnnt_type == "regular":
        B, S = _dims(symbols)
        px = paddle.concat([px, _neg_inf([B, S, 1], px.dtype)], axis=2)
    return _finish_px(px, py, boundary, rnnt_type), py, scale


@_library.unified
def rnnt_loss_pruned(logits, symbols, ranges, termination_symbol, boundary=None, rnnt_type="regular",
                     delay_penalty=0.0, reduction="mean", return_grad=False, *, fastemit_lambda=0.0, clamp=-1.0,
                     name=None):
    """The RNN-T loss on pruned joiner output ``logits [B, T, s_range, C]`` (k2 ``rnnt_loss_pruned``),
    with ``ranges`` from :func:`get_rnnt_prune_ranges`; ``clamp`` as in :func:`rnnt_loss` (each pruned logit's
    grad); other arguments as in :func:`rnnt_loss_simple`. Ranges that leave an item no path give it an inf loss
    and zero grads."""
    symbols, ranges, boundary = index64(symbols), index64(ranges), index64(boundary)
    rnnt_type, reduction = choice(rnnt_type, RNNT_TYPES), choice(reduction, REDUCTIONS)
    args = (logits, symbols, ranges, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
            fastemit_lambda, clamp)
    if not return_grad and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (ranges, boundary)):
        return _amp.first_try(*_rnnt_loss_pruned_paths, *args)
    return _rnnt_loss_pruned_paths[1](*args)


def _rnnt_loss_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, delay_penalty, reduction,
                      return_grad, fastemit_lambda, clamp, checked=True):
    op = "rnnt_loss_pruned"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    bound = _check_clamp(op, clamp)
    px, py, scale = _get_rnnt_logprobs_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, op,
                                              checked, real_bits(bound))
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked,
                 scale if bound < float("inf") else None)


_get_rnnt_logprobs_pruned_paths = _paths(_get_rnnt_logprobs_pruned, 1)
_rnnt_loss_pruned_paths = _paths(_rnnt_loss_pruned, 1)
