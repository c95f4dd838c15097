"""The smoothed simple loss: get_rnnt_logprobs_smoothed and rnnt_loss_smoothed."""

from __future__ import annotations

import paddle

from .. import _amp, _fill, _library
from .._checks import choice, index64, is_real
from .common import (REDUCTIONS, RNNT_TYPES, UNIGRAM_FLOOR, _check_common, _check_loss_args, _dims, _finish_px, _loss,
                     _neg_inf, _symbols64, _times)
from .simple import LM_AM_UNITS, _check_lm_am, _exp_shifted, _simple_logprobs


def get_rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale=0.1, am_only_scale=0.1,
                               boundary=None, rnnt_type="regular"):
    """(px, py) of the simple loss interpolated with an LM-only and an AM-only (unigram-LM) model:
    ``lm_only_scale * lm + am_only_scale * am + (1 - both) * combined``, in log space."""
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type = choice(rnnt_type, RNNT_TYPES)
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
    _check_common(op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type, c_from=LM_AM_UNITS)
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
    symbols, boundary = index64(symbols), index64(boundary)
    rnnt_type, reduction = choice(rnnt_type, RNNT_TYPES), choice(reduction, REDUCTIONS)
    return _amp.float32_op(_rnnt_loss_smoothed, 2, lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale,
                           boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda)


def _rnnt_loss_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary, rnnt_type,
                        delay_penalty, reduction, return_grad, fastemit_lambda):
    op = "rnnt_loss_smoothed"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _get_rnnt_logprobs_smoothed(lm, am, symbols, termination_symbol, lm_only_scale, am_only_scale, boundary,
                                         rnnt_type, op)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda)
