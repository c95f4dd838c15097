"""The simple (additive joiner) loss: get_rnnt_logprobs and rnnt_loss_simple."""

from __future__ import annotations

import functools

import paddle

from .. import _amp, _library
from .._checks import dtype_name, run_kernel_checked, same_dtype
from .._checks import choice, index64
from .._checks import known_dim as _known
from .common import (REDUCTIONS, RNNT_TYPES, _agree, _check_common, _check_float, _check_loss_args, _fast_lane,
                     _finish_px, _loss, _max_const, _paths, _symbols64)


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


LM_AM_UNITS = "lm's and am's last dim"  # where C comes from, for the errors
_check_symbols = functools.partial(_check_common, c_from=LM_AM_UNITS)


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
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type = choice(rnnt_type, RNNT_TYPES)
    args = (lm, am, symbols, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs")
    if boundary is None and _fast_lane((lm, am), symbols, termination_symbol, rnnt_type):
        return _amp.first_try(*_get_rnnt_logprobs_paths, *args)
    return _get_rnnt_logprobs_paths[1](*args)


def _get_rnnt_logprobs(lm, am, symbols, termination_symbol, boundary, rnnt_type, op, checked=True):
    """checked=False: the fast lane's call (see _amp.fast_lane): every check but the scalars' left to the kernels."""
    if checked:
        B, S, T, C = _check_lm_am(lm, am, op)  # static dims: -1 where dynamic
        check_args = (op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type)
        deferred = _check_symbols(*check_args, kernel_checks=True)
        px, py = run_kernel_checked(deferred, _check_symbols, check_args, _simple_logprobs, lm, am, symbols,
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
        boundary (Tensor|None): int64 or int32 ``[B, 4]`` rows ``(s_begin, t_begin, s_end, t_end)``; default
            ``(0, 0, S, T)`` (:func:`boundary_from_lengths` builds them from lengths).
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
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type, reduction = choice(rnnt_type, RNNT_TYPES), choice(reduction, REDUCTIONS)
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


_get_rnnt_logprobs_paths = _paths(_get_rnnt_logprobs, 2)
_rnnt_loss_simple_paths = _paths(_rnnt_loss_simple, 2)
