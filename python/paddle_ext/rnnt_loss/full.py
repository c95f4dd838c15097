"""The full-joiner loss: get_rnnt_logprobs_joint and rnnt_loss."""

from __future__ import annotations

import paddle

from .. import _amp, _library
from .._checks import choice, index64, run_kernel_checked
from .._checks import known_dim as _known
from .common import (NO_CLAMP, REDUCTIONS, RNNT_TYPES, _check_clamp, _check_common, _check_float, _check_loss_args,
                     _dims, _fast_lane, _finish_px, _loss, _neg_inf, _paths, _symbols64, real_bits)


def _joint_logprobs(logits, symbols, ranges, termination_symbol, clamp_bits=NO_CLAMP):
    """px [B, S, T], py [B, S+1, T] from joiner logits [B, T, R, C] by the fused op (ops/rnnt_joint_logprobs.yaml):
    the log-softmax over C of the symbol and termination columns only (never the [B, T, R, C] log-softmax);
    row r of frame t is context r (ranges None, R = S+1) or ranges[b, t, r], other (s, t) cells -inf. Also the
    op's zero [B] output ``scale``, which carries the items' upstream grads where the grad clamp is on."""
    px, py, _, scale = _library.call_op("pe_rnnt_joint_logprobs", (logits,), logits, symbols, ranges,
                                        int(termination_symbol), clamp_bits)
    return px, py, scale


def get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular"):
    """(px, py) from joiner logits ``[B, T, S+1, C]``: their log-softmax over C at the symbol and termination
    columns (one fused op; the normalised [B, T, S+1, C] tensor is never written)."""
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type = choice(rnnt_type, RNNT_TYPES)
    args = (logits, symbols, termination_symbol, boundary, rnnt_type, "get_rnnt_logprobs_joint")
    if boundary is None and _fast_lane((logits,), symbols, termination_symbol, rnnt_type):
        return _amp.first_try(*_get_rnnt_logprobs_joint_paths, *args)[:2]
    return _get_rnnt_logprobs_joint_paths[1](*args)[:2]


def _get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary, rnnt_type, op, checked=True,
                             clamp_bits=NO_CLAMP):
    """checked: as in _get_rnnt_logprobs. -> (px, py, scale); clamp_bits: the grad clamp's (see _joint_logprobs)."""
    if checked:
        B, T, S1, C = _check_float(logits, "logits", op, 4)
        check_args = (op, symbols, termination_symbol, C, B, S1 - 1 if _known(S1) else -1, T, boundary, rnnt_type)
        deferred = _check_common(*check_args, kernel_checks=True)
        px, py, scale = run_kernel_checked(deferred, _check_common, check_args, _joint_logprobs, logits,
                                           _symbols64(symbols), None, termination_symbol, clamp_bits)
    else:
        if logits.shape[2] != symbols.shape[1] + 1:  # (the kernel cannot tell pruned logits without frames)
            raise _amp.TakeFullPath
        px, py, scale = _joint_logprobs(logits, symbols, None, termination_symbol, clamp_bits)
    if rnnt_type == "regular":
        B, S = _dims(symbols)
        px = paddle.concat([px, _neg_inf([B, S, 1], px.dtype)], axis=2)  # no symbol on frame T
    return _finish_px(px, py, boundary, rnnt_type), py, scale


@_library.unified
def rnnt_loss(logits, symbols, termination_symbol, boundary=None, rnnt_type="regular", delay_penalty=0.0,
              reduction="mean", return_grad=False, *, fastemit_lambda=0.0, clamp=-1.0, name=None):
    """The RNN-T loss on full joiner output ``logits [B, T, S+1, C]`` (k2 / fast_rnnt ``rnnt_loss``).

    ``clamp`` (float): > 0 clamps the grad of each logit w.r.t. its item's loss (FastEmit included) to
    ``[-clamp, clamp]`` before the upstream grad (the reduction's 1/B included) multiplies it, as torchaudio's
    ``rnnt_loss`` and NeMo's CUDA RNN-T loss do; <= 0 (default -1): off. The loss is unchanged.
    Other arguments as in :func:`rnnt_loss_simple`. Regular rnnt_loss with reduction 'none' equals
    ``paddle.nn.functional.rnnt_loss(log_softmax(logits), ..., fastemit_lambda=fastemit_lambda,
    reduction='none')``, values and grads.
    """
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type, reduction = choice(rnnt_type, RNNT_TYPES), choice(reduction, REDUCTIONS)
    args = (logits, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
            fastemit_lambda, clamp)
    if not return_grad and _fast_lane((logits,), symbols, termination_symbol, rnnt_type, (boundary,)):
        return _amp.first_try(*_rnnt_loss_paths, *args)
    return _rnnt_loss_paths[1](*args)


def _rnnt_loss(logits, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, return_grad,
               fastemit_lambda, clamp, checked=True):
    op = "rnnt_loss"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    bound = _check_clamp(op, clamp)
    px, py, scale = _get_rnnt_logprobs_joint(logits, symbols, termination_symbol, boundary, rnnt_type, op, checked,
                                             real_bits(bound))
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked,
                 scale if bound < float("inf") else None)


_get_rnnt_logprobs_joint_paths = _paths(_get_rnnt_logprobs_joint, 1)
_rnnt_loss_paths = _paths(_rnnt_loss, 1)
