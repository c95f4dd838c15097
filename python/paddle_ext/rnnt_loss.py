"""RNN-T losses on top of ``mutual_information_recursion``: k2 / fast_rnnt's rnnt_loss_simple,
rnnt_loss_smoothed, rnnt_loss, the pruning helpers and rnnt_loss_pruned, in Paddle ops.

Each loss reduces the transducer lattice to the compact form ``px [B, S, T+1]`` (symbol
emissions; ``[B, S, T]`` for rnnt_type 'modified'/'constrained') and ``py [B, S+1, T]``
(termination/blank emissions), then runs the recursion; the loss is ``-ans``.
Everything here works unchanged in dygraph and static mode, with dimensions that are dynamic in a
static graph (``None`` in an InputSpec, -1 in ``x.shape``) too: the graph takes those sizes from the
tensors when it runs (``_dims``), and shape checks compare the dimensions known when it is built (the
kernels check the rest). Checks that need the values of ``boundary`` (and the s_range adjustment of
``get_rnnt_prune_ranges``) run in dygraph only.

Each public function only sends its arguments through ``_amp.float32_op`` (float16/bfloat16 inputs and
any call under auto_cast computed in float32; docs/rnnt_loss.md, "Mixed precision") to its ``_name``
twin, which does the work. The twins and the checks take ``op``, the name of the public function the user
called: every error names it (a loss calls the twins of the get_rnnt_logprobs* it is built on with its own name).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import paddle
from paddle.autograd import PyLayer

from . import _amp, _fill, _library
from ._library import in_sot_simulation_mode
from ._checks import (check_tensor, dtype_name, is_floating, is_int, is_integer, is_real, run_kernel_checked,
                      same_dtype)
from ._checks import known_dim as _known
from .mutual_information import _recursion, _recursion_in_kernel_checks, check_boundary

RNNT_TYPES = ("regular", "modified", "constrained")
UNIGRAM_FLOOR = 1e-20  # added to the smoothed loss's unigram LM (k2's constant)
REDUCTIONS = ("none", "mean", "sum")
_INF = float("inf")


# ---------------------------------------------------------------------------------------------
# shapes and argument checks


def _no_elements(x) -> bool:
    """Whether dygraph tensor x is empty: from its shape (no op, no sync), and under to_static's SOT, which
    traces this, by Paddle's numel as before (the graph breaks stay where they were)."""
    if in_sot_simulation_mode():
        return bool(x.numel() == 0)
    return 0 in x.shape


def _agree(d, e) -> bool:
    """Static dims d and e may be equal: equal, or one of them known only at run time."""
    return d == e or not (_known(d) and _known(e))


@paddle.jit.not_to_static
def _dims(x):
    """x's dims for building the graph: ints where known, else ``paddle.shape(x)[i]`` (a 0-D int64
    tensor holding the size when a static graph with dynamic dimensions runs)."""
    shape = list(x.shape)
    if all(d >= 0 for d in shape):
        return shape
    sizes = paddle.shape(x)
    return [d if d >= 0 else sizes[i] for i, d in enumerate(shape)]


@paddle.jit.not_to_static
def _check_common(op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type, kernel_checks=False):
    """B, S, T, C are static dims (-1 where dynamic). With kernel_checks (the op run next checks the symbols'
    values on CPU), the values of a CPU tensor in dygraph are left to it: returns True then, and the caller
    runs this again without kernel_checks if the op fails (see run_kernel_checked)."""
    check_tensor(symbols, "symbols", op)
    if not is_integer(symbols.dtype):
        raise TypeError(f"{op}: symbols must be an integer tensor, got {dtype_name(symbols.dtype)}")
    shape = symbols.shape
    if len(shape) != 2 or not (_agree(shape[0], B) and _agree(shape[1], S)):
        raise ValueError(f"{op}: symbols must have shape [B, S] = [{B}, {S}], got {list(shape)}")
    if not is_int(termination_symbol) or not 0 <= termination_symbol < C:
        raise ValueError(f"{op}: termination_symbol must be an int in [0, {C}), got {termination_symbol!r}")
    if rnnt_type not in RNNT_TYPES:
        raise ValueError(f"{op}: rnnt_type must be one of {RNNT_TYPES}, got {rnnt_type!r}")
    if boundary is not None:
        check_boundary(boundary, B, S, T, op)
    # an item without alignment (modified/constrained with T_b < S_b) is no error: its loss is inf
    if not paddle.in_dynamic_mode():
        return False
    if in_sot_simulation_mode():
        # min and max, not .numpy(): under to_static's SOT a .numpy() moves the graph break, and the loss
        # compiled around it then drifts from dygraph's in the last digits
        if symbols.numel() == 0:
            return False
        lo, hi = int(symbols.min()), int(symbols.max())
    elif 0 in shape:
        return False
    elif kernel_checks and _library.is_cpu(symbols):
        return True  # (a NumPy read and two reductions saved on every call that has good symbols)
    else:
        values = symbols.numpy()  # (one copy: Paddle's min and max would be two ops and two syncs)
        lo, hi = values.min(), values.max()
    if lo < 0 or hi >= C:
        raise ValueError(f"{op}: symbols must lie in [0, {C}), got values in [{lo}, {hi}]")
    return False


@paddle.jit.not_to_static
def _check_float(x, arg, op, ndim):
    check_tensor(x, arg, op)
    if not is_floating(x.dtype):
        raise TypeError(f"{op}: {arg} must be a floating tensor, got {dtype_name(x.dtype)}")
    shape = x.shape
    if len(shape) != ndim:
        raise ValueError(f"{op}: {arg} must be {ndim}-D, got shape {list(shape)}")
    return shape


def _times(x, c):
    """x * c for a Python float c: a static graph stores a bare float as a float32 attribute (1e-8 relative
    off in float64), so there c goes in as a 0-D tensor of x's dtype."""
    return x * c if paddle.in_dynamic_mode() else x * paddle.full([], c, dtype=x.dtype)


def _neg_inf(shape, dtype):
    return paddle.full(shape, float("-inf"), dtype=dtype)


def _reduce(negated_loss, reduction):
    if reduction == "none":
        return -negated_loss
    if reduction == "mean":
        return -paddle.mean(negated_loss)
    return -paddle.sum(negated_loss)


def fix_for_boundary(px, boundary=None):
    """Regular px: no symbol may be emitted on the one-past-the-last frame ``t_end`` of each item."""
    if boundary is None:
        return px  # px[:, :, T] is already -inf
    B, S, T1 = _dims(px)
    t = paddle.arange(T1, dtype="int64").reshape([1, 1, -1])
    mask = (t == boundary[:, 3].reshape([-1, 1, 1])).expand([B, S, T1])
    return paddle.where(mask, _fill.full_like(px, float("-inf")), px)


def _finish_px(px, py, boundary, rnnt_type):
    if rnnt_type == "regular":
        return fix_for_boundary(px, boundary)
    if rnnt_type == "constrained":  # emitting a symbol also takes the blank of the next context
        return px + py[:, 1:, :]
    return px


def _add_delay_penalty(px, boundary, rnnt_type, delay_penalty):
    """k2's delay penalty: symbols emitted later than the middle frame are penalised linearly."""
    if delay_penalty <= 0.0:
        return px
    B, S, T0 = _dims(px)
    T = T0 if rnnt_type != "regular" else T0 - 1
    if boundary is None:
        half = (T - 1) / 2 if isinstance(T, int) else (T.astype(px.dtype) - 1) / 2  # T dynamic: a tensor
        offset = paddle.full([B, 1, 1], half, dtype=px.dtype)
    else:
        offset = ((boundary[:, 3].astype(px.dtype) - 1) / 2).reshape([-1, 1, 1])
    penalty = _times(offset - paddle.arange(T0, dtype=px.dtype).reshape([1, 1, -1]), delay_penalty)
    return px + penalty


def _max_const(x, axis):
    """max over axis as a constant: every use below subtracts it and adds it back, so its grad is
    exactly 0 (and Paddle's CPU max backward is ~7x slower than the whole logsumexp)."""
    return paddle.max(x.detach(), axis=axis, keepdim=True)


def _logsumexp_last(x):
    """logsumexp over the last axis; Paddle's CPU paddle.logsumexp is ~2x slower than these ops on
    [B, T, S+1, C] joiner output with small C. Rows that are all -inf give -inf (not NaN)."""
    m = _max_const(x, -1)
    m = paddle.where(paddle.isinf(m), _fill.zeros_like(m), m)
    return paddle.log(paddle.sum(paddle.exp(x - m), axis=-1)) + m.squeeze(-1)


_INT64 = paddle.int64


def _symbols64(symbols):
    return symbols if same_dtype(symbols.dtype, _INT64) else symbols.astype("int64")


def _fast_lane(floats, symbols, termination_symbol, rnnt_type, others=()):
    """_amp.fast_lane, and what the lane hands the kernels as it is: an int termination_symbol, a known
    rnnt_type, int64 symbols (``others``: more int64 tensors, or None)."""
    return (termination_symbol.__class__ is int and rnnt_type in RNNT_TYPES
            and _amp.fast_lane(floats, (symbols, *others)))


# ---------------------------------------------------------------------------------------------
# the simple (additive joiner) loss


@paddle.jit.not_to_static
def _check_lm_am(lm, am, op):
    """lm [B, S+1, C] and am [B, T, C] of one float dtype -> static (B, S, T, C), -1 where dynamic."""
    Bl, S1, Cl = _check_float(lm, "lm", op, 3)
    B, T, C = _check_float(am, "am", op, 3)
    S = S1 - 1 if _known(S1) else -1
    if not (_agree(Bl, B) and _agree(Cl, C)) or not same_dtype(lm.dtype, am.dtype):
        raise ValueError(f"{op}: lm must be [B, S+1, C] with am's B = {B}, C = {C} and dtype; got lm "
                         f"{list(lm.shape)} {dtype_name(lm.dtype)}, am {list(am.shape)} {dtype_name(am.dtype)}")
    return B, S, T, C


def _exp_shifted(x):
    """exp(x - max) over the last axis (every factor <= 1, so the products below cannot overflow), and max."""
    x_max = _max_const(x, 2)
    return paddle.exp(x - x_max), x_max


def get_rnnt_logprobs(lm, am, symbols, termination_symbol, rnnt_type="regular", boundary=None):
    """(px, py) for an additive joiner: ``log_softmax(lm[b, s] + am[b, t])`` without the [B, S+1, T, C] tensor.

    Args: lm ``[B, S+1, C]``, am ``[B, T, C]``, symbols int ``[B, S]``; see rnnt_loss_simple.
    Returns: px ``[B, S, T+1]`` (regular) or ``[B, S, T]``, py ``[B, S+1, T]``. Note k2's argument order:
    ``rnnt_type`` comes before ``boundary`` here (and after it in every other function).
    """
    args = (lm, am, symbols, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs")
    if boundary is None and _fast_lane((lm, am), symbols, termination_symbol, rnnt_type):
        return _amp.first_try(*_get_rnnt_logprobs_paths, *args)
    return _get_rnnt_logprobs_paths[1](*args)


def _get_rnnt_logprobs(lm, am, symbols, termination_symbol, boundary, rnnt_type, op, checked=True):
    """checked=False: the fast lane's call (see _amp.fast_lane): every check but the scalars' left to the kernels."""
    if checked:
        B, S, T, C = _check_lm_am(lm, am, op)  # static dims: -1 where dynamic
        check_args = (op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type)
        deferred = _check_common(*check_args, kernel_checks=True)
        px, py = run_kernel_checked(deferred, _check_common, check_args, _simple_logprobs, lm, am, symbols,
                                     termination_symbol, rnnt_type)
    else:
        if lm.shape[1] != symbols.shape[1] + 1:  # (the kernel also takes one lm row for all s)
            raise _amp.TakeFullPath
        px, py = _simple_logprobs(lm, am, symbols, termination_symbol, rnnt_type)
    return _finish_px(px, py, boundary, rnnt_type), py


def _simple_logprobs(lm, am, symbols, termination_symbol, rnnt_type):
    """The fused op pe_rnnt_simple_logprobs on lm ``[B, S+1, C]`` (or ``[B, 1, C]``: one row for every s): px
    ``[B, S, T+1]`` (regular; column T is -inf) or ``[B, S, T]``, and py ``[B, S+1, T]``, exact for any finite
    logits (float32/float64: the public functions' _amp gate has cast 16-bit inputs)."""
    px, py, _ = _library.call_op("pe_rnnt_simple_logprobs", (lm, am), lm, am, _symbols64(symbols),
                                 int(termination_symbol), rnnt_type != "regular")
    return px, py


@_library.unified
def rnnt_loss_simple(lm, am, symbols, termination_symbol, boundary=None, rnnt_type="regular", delay_penalty=0.0,
                     reduction="mean", return_grad=False, *, fastemit_lambda=0.0, name=None):
    """RNN-T loss where the joiner is just ``lm + am`` (k2 / fast_rnnt ``rnnt_loss_simple``).

    Args:
        lm (Tensor): ``[B, S+1, C]`` prediction-network logits (unnormalised).
        am (Tensor): ``[B, T, C]`` encoder logits (unnormalised).
        symbols (Tensor): int ``[B, S]``, values in ``[0, C)``.
        termination_symbol (int): the blank / next-frame symbol.
        boundary (Tensor|None): int64 ``[B, 4]`` rows ``(s_begin, t_begin, s_end, t_end)``; default ``(0, 0, S, T)``.
        rnnt_type (str): 'regular' (a symbol does not consume a frame), 'modified' (every emission consumes
            a frame) or 'constrained' (a symbol also takes the blank of the next context).
        delay_penalty (float): k2's linear penalty against late symbols (0 disables it).
        reduction (str): 'none' ([B]), 'mean' or 'sum'.
        return_grad (bool): also return ``(px_grad, py_grad)``, the occupation probabilities (grads of
            ``-loss.sum()`` w.r.t. px, py, reduction 'none', without FastEmit's scaling), as
            get_rnnt_prune_ranges wants them.
        fastemit_lambda (float): FastEmit, >= 0: the loss is unchanged and the grad of every symbol emission
            (px) is scaled by ``1 + fastemit_lambda``, as in ``paddle.nn.functional.rnnt_loss``.

    Returns:
        loss, or ``(loss, (px_grad, py_grad))``. An item with no path through its lattice (e.g. modified or
        constrained with T_b < S_b) gets an inf loss and zero grads.
    """
    args = (lm, am, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
            fastemit_lambda)
    if not return_grad and _fast_lane((lm, am), symbols, termination_symbol, rnnt_type, (boundary,)):
        return _amp.first_try(*_rnnt_loss_simple_paths, *args)
    return _rnnt_loss_simple_paths[1](*args)


def _rnnt_loss_simple(lm, am, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction,
                      return_grad, fastemit_lambda, checked=True):
    op = "rnnt_loss_simple"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _get_rnnt_logprobs(lm, am, symbols, termination_symbol, boundary, rnnt_type, op, checked)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked)


@paddle.jit.not_to_static
def _check_loss_args(op, delay_penalty, reduction, fastemit_lambda):
    """-> (delay_penalty, fastemit_lambda) as floats."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    for arg, v in (("delay_penalty", delay_penalty), ("fastemit_lambda", fastemit_lambda)):
        if not is_real(v) or not 0 <= v < _INF:
            raise ValueError(f"{op}: {arg} must be a finite float >= 0, got {v!r}")
    return float(delay_penalty), float(fastemit_lambda)


class _ScaleGrad(PyLayer):
    """Identity whose backward scales the grad by a constant."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor


def _fastemit(px, fastemit_lambda):
    """px with its grad scaled by 1 + fastemit_lambda and its values untouched (a straight-through
    px + lambda * (px - px.detach()) would turn px's -inf cells into NaN)."""
    if fastemit_lambda == 0.0 or px.stop_gradient:
        return px
    factor = 1.0 + fastemit_lambda
    if paddle.in_dynamic_mode():
        return _ScaleGrad.apply(px, factor)
    return paddle.static.nn.static_pylayer(paddle.assign, [px], lambda grad: _times(grad, factor))


def _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked=True):
    """What every loss does with its (px, py): delay penalty, FastEmit, the recursion, the reduction. An item
    with no path gets ans = -inf and zero grads from the recursion, so an inf loss (and 'sum'/'mean' inf).
    checked=False (the fast lane, without return_grad): the recursion's kernel checks px, py and boundary."""
    px = _fastemit(_add_delay_penalty(px, boundary, rnnt_type, delay_penalty), fastemit_lambda)
    if not checked:
        return _reduce(_recursion_in_kernel_checks(px, py, boundary), reduction)
    out = _recursion(px, py, boundary, return_grad, op, boundary_checked=True)  # (by the loss's _check_common)
    if return_grad:  # occupation probabilities: the recursion's own, before FastEmit's scaling
        return _reduce(out[0], reduction), out[1]
    return _reduce(out, reduction)


# ---------------------------------------------------------------------------------------------
# the full-joiner loss


def _joint_logprobs(logits, symbols, ranges, termination_symbol):
    """px [B, S, T], py [B, S+1, T] from joiner logits [B, T, R, C] by the fused op (ops/rnnt_joint_logprobs.yaml):
    the log-softmax over C of the symbol and termination columns only (never the [B, T, R, C] log-softmax);
    row r of frame t is context r (ranges None, R = S+1) or ranges[b, t, r], other (s, t) cells -inf."""
    px, py, _ = _library.call_op("pe_rnnt_joint_logprobs", (logits,), logits, symbols, ranges, int(termination_symbol))
    return px, py


def get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular"):
    """(px, py) from joiner logits ``[B, T, S+1, C]``: their log-softmax over C at the symbol and termination
    columns (one fused op; the normalised [B, T, S+1, C] tensor is never written)."""
    args = (logits, symbols, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs_joint")
    if boundary is None and _fast_lane((logits,), symbols, termination_symbol, rnnt_type):
        return _amp.first_try(*_get_rnnt_logprobs_joint_paths, *args)
    return _get_rnnt_logprobs_joint_paths[1](*args)


def _get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary, rnnt_type, op, checked=True):
    """checked: as in _get_rnnt_logprobs."""
    if checked:
        B, T, S1, C = _check_float(logits, "logits", op, 4)
        check_args = (op, symbols, termination_symbol, C, B, S1 - 1 if _known(S1) else -1, T, boundary, rnnt_type)
        deferred = _check_common(*check_args, kernel_checks=True)
        px, py = run_kernel_checked(deferred, _check_common, check_args, _joint_logprobs, logits,
                                     _symbols64(symbols), None, termination_symbol)
    else:
        if logits.shape[2] != symbols.shape[1] + 1:  # (the kernel cannot tell pruned logits without frames)
            raise _amp.TakeFullPath
        px, py = _joint_logprobs(logits, symbols, None, termination_symbol)
    if rnnt_type == "regular":
        B, S = _dims(symbols)
        px = paddle.concat([px, _neg_inf([B, S, 1], px.dtype)], axis=2)  # no symbol on frame T
    return _finish_px(px, py, boundary, rnnt_type), py


@_library.unified
def rnnt_loss(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular", delay_penalty=0.0,
              reduction="mean", return_grad=False, *, fastemit_lambda=0.0, name=None):
    """The RNN-T loss on full joiner output ``logits [B, T, S+1, C]`` (k2 / fast_rnnt ``rnnt_loss``).

    Other arguments as in :func:`rnnt_loss_simple`. Regular rnnt_loss with reduction 'none' equals
    ``paddle.nn.functional.rnnt_loss(log_softmax(logits), ..., fastemit_lambda=fastemit_lambda,
    reduction='none')``, values and grads.
    """
    args = (logits, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
            fastemit_lambda)
    if not return_grad and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (boundary,)):
        return _amp.first_try(*_rnnt_loss_paths, *args)
    return _rnnt_loss_paths[1](*args)


def _rnnt_loss(logits, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
               fastemit_lambda, checked=True):
    op = "rnnt_loss"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary, rnnt_type, op, checked)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked)


# ---------------------------------------------------------------------------------------------
# pruning


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
        boundary (Tensor): int64 ``[B, 4]`` (required).
        s_range (int): symbols kept per frame, >= 0; after the rule above >= 2 for regular RNN-T (and where
            T is dynamic), >= 1 otherwise.
    """
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
    args = (logits, symbols, ranges, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs_pruned")
    if boundary is None and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (ranges,)):
        return _amp.first_try(*_get_rnnt_logprobs_pruned_paths, *args)
    return _get_rnnt_logprobs_pruned_paths[1](*args)


def _get_rnnt_logprobs_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, op, checked=True):
    """checked: as in _get_rnnt_logprobs."""
    if checked:
        check_args = (op, logits, symbols, ranges, termination_symbol, boundary, rnnt_type)
        deferred = _check_pruned(*check_args, kernel_checks=True)
        px, py = run_kernel_checked(deferred, _check_pruned, check_args, _joint_logprobs, logits,
                                     _symbols64(symbols), _symbols64(ranges), termination_symbol)
    else:
        if logits.shape[2] > symbols.shape[1] + 1:  # (with no frames, no range value shows it)
            raise _amp.TakeFullPath
        px, py = _joint_logprobs(logits, symbols, ranges, termination_symbol)
    if rnnt_type == "regular":
        B, S = _dims(symbols)
        px = paddle.concat([px, _neg_inf([B, S, 1], px.dtype)], axis=2)
    return _finish_px(px, py, boundary, rnnt_type), py


@_library.unified
def rnnt_loss_pruned(logits, symbols, ranges, termination_symbol, boundary=None, rnnt_type="regular",
                     delay_penalty=0.0, reduction="mean", return_grad=False, *, fastemit_lambda=0.0, name=None):
    """The RNN-T loss on pruned joiner output ``logits [B, T, s_range, C]`` (k2 ``rnnt_loss_pruned``),
    with ``ranges`` from :func:`get_rnnt_prune_ranges`; other arguments as in :func:`rnnt_loss_simple`.
    Ranges that leave an item no path give it an inf loss and zero grads."""
    args = (logits, symbols, ranges, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
            fastemit_lambda)
    if not return_grad and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (ranges, boundary)):
        return _amp.first_try(*_rnnt_loss_pruned_paths, *args)
    return _rnnt_loss_pruned_paths[1](*args)


def _rnnt_loss_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, delay_penalty, reduction,
                      return_grad, fastemit_lambda, checked=True):
    op = "rnnt_loss_pruned"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _get_rnnt_logprobs_pruned(logits, symbols, ranges, termination_symbol, boundary, rnnt_type, op, checked)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked)


# ---------------------------------------------------------------------------------------------
# the smoothed simple loss


def get_rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale=0.1, am_only_scale=0.1,
                               boundary=None, rnnt_type="regular"):
    """(px, py) of the simple loss interpolated with an LM-only and an AM-only (unigram-LM) model:
    ``lm_only_scale * lm + am_only_scale * am + (1 - both) * combined``, in log space."""
    return _amp.float32_op(_get_rnnt_logprobs_smoothed, 2, lm, am, symbols, termination_symbol, lm_only_scale,
                           am_only_scale, boundary, rnnt_type, "get_rnnt_logprobs_smoothed")


def _get_rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary,
                                rnnt_type, op):
    B, S, T, C = _check_lm_am(lm, am, op)  # static dims: -1 where dynamic
    for arg, v in (("lm_only_scale", lm_only_scale), ("am_only_scale", am_only_scale)):
        if not is_real(v) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{op}: {arg} must be a float in [0, 1], got {v!r}")
    if lm_only_scale + am_only_scale > 1.0:
        raise ValueError(f"{op}: lm_only_scale + am_only_scale must be <= 1, got {lm_only_scale + am_only_scale}")
    _check_common(op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type)
    B, _, C = _dims(am)  # the graph's dims: tensors where dynamic
    S = _dims(symbols)[1]
    symbols = _symbols64(symbols)
    lm_probs, lm_max = _exp_shifted(lm)
    lm_sum = paddle.sum(lm_probs, axis=2, keepdim=True)  # [B, S+1, 1]
    # + 1e-20 as k2 does: a class the LM never predicts keeps a finite, dtype-independent AM-only score
    log_unigram = paddle.log(paddle.mean(lm_probs / lm_sum, axis=[0, 1], keepdim=True) + UNIGRAM_FLOOR)
    # the LM-only model: lm[s, symbols[s]] and lm[s, term] minus logsumexp(lm[s]), one gather for both (slices
    # of lm itself would cost a zero-filled lm-sized grad each)
    with_term = paddle.concat([symbols, paddle.full([B, 1], termination_symbol, dtype="int64")], axis=1)
    idx = paddle.stack([with_term, _fill.full_like(with_term, termination_symbol)], axis=-1)  # [B, S+1, 2]
    lmonly = paddle.take_along_axis(lm, idx, axis=2) - (paddle.log(lm_sum) + lm_max)  # [B, S+1, 2]
    # the combined and the AM-only model are both additive joiners: the AM-only one is the fused op with one
    # lm row, log(unigram), shared by every s (a [B, T] normaliser), exact like the combined one
    combined = 1.0 - lm_only_scale - am_only_scale
    # with combined > 0 the ops' regular px already ends in the -inf column T, which the mix keeps (-inf times
    # positive scales plus a finite LM-only term), so no concat; combined = 0 would give 0 * -inf there
    layout = "regular" if rnnt_type == "regular" and combined > 0 else "modified"
    px, py = _simple_logprobs(lm, am, symbols, termination_symbol, layout)
    px_amonly, py_amonly = _simple_logprobs(log_unigram.expand([B, 1, C]), am, symbols, termination_symbol, layout)
    px_lmonly, py_lmonly = lmonly[:, :-1, :1], lmonly[:, :, 1:]  # [B, S, 1], [B, S+1, 1]

    # a zero scale would turn -inf terms into NaN (0 * -inf): k2 uses 1e-20 instead
    lm_only_scale = lm_only_scale or 1.0e-20
    am_only_scale = am_only_scale or 1.0e-20
    px = _times(px, combined) + _times(px_lmonly, lm_only_scale) + _times(px_amonly, am_only_scale)
    py = _times(py, combined) + _times(py_lmonly, lm_only_scale) + _times(py_amonly, am_only_scale)
    if rnnt_type == "regular" and layout == "modified":
        px = paddle.concat([px, _neg_inf([B, S, 1], px.dtype)], axis=2)
    return _finish_px(px, py, boundary, rnnt_type), py


@_library.unified
def rnnt_loss_smoothed(lm, am, symbols, termination_symbol, lm_only_scale=0.1, am_only_scale=0.1, boundary=None,
                       rnnt_type="regular", delay_penalty=0.0, reduction="mean", return_grad=False, *,
                       fastemit_lambda=0.0, name=None):
    """rnnt_loss_simple on the smoothed (px, py) of :func:`get_rnnt_logprobs_smoothed` (k2 ``rnnt_loss_smoothed``)."""
    return _amp.float32_op(_rnnt_loss_smoothed, 2, lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale,
                           boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda)


def _rnnt_loss_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary, rnnt_type,
                        delay_penalty, reduction, return_grad, fastemit_lambda):
    op = "rnnt_loss_smoothed"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _get_rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary,
                                         rnnt_type, op)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda)


def _paths(twin, n):
    """A twin's two paths: the fast lane's (every check but the scalars' left to the kernels; _amp.fast_lane),
    and the full one (its checks, its AMP casts; ``n``: its floating inputs)."""
    return functools.partial(twin, checked=False), functools.partial(_amp.float32_op, twin, n)


_get_rnnt_logprobs_paths = _paths(_get_rnnt_logprobs, 2)
_rnnt_loss_simple_paths = _paths(_rnnt_loss_simple, 2)
_get_rnnt_logprobs_joint_paths = _paths(_get_rnnt_logprobs_joint, 1)
_rnnt_loss_paths = _paths(_rnnt_loss, 1)
_get_rnnt_logprobs_pruned_paths = _paths(_get_rnnt_logprobs_pruned, 1)
_rnnt_loss_pruned_paths = _paths(_rnnt_loss_pruned, 1)

__all__ = [
    "do_rnnt_pruning",
    "get_rnnt_logprobs",
    "get_rnnt_logprobs_joint",
    "get_rnnt_logprobs_pruned",
    "get_rnnt_logprobs_smoothed",
    "get_rnnt_prune_ranges",
    "rnnt_loss",
    "rnnt_loss_pruned",
    "rnnt_loss_simple",
    "rnnt_loss_smoothed",
]
