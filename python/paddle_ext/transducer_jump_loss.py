"""Transducer losses whose arcs jump over frames: TDT (token-and-duration transducer, Xu et al. 2023) and
multi-blank RNN-T (Xu et al. 2022), in the k2 style of :func:`paddle_ext.rnnt_loss` with NeMo's logits layout.

Both run one fused op (ops/transducer_jump_loss.yaml): the log-softmax of the heads, the alpha/beta
recursions over the lattice and, in the backward, the grads straight into ``logits``' grad, without a
normalised ``[B, T, S+1, C]`` tensor. The lattice is described in docs/transducer_jump_loss.md ("The
lattice"). As the other losses: float16/bfloat16 computed in float32 (``_amp.float32_op``), errors
name the function called, an item with no path gets an inf loss and zero grads.
"""

from __future__ import annotations

import functools

import paddle

from . import _amp, _library
from ._checks import is_int as _is_int
from ._checks import choice, index64, is_real, run_kernel_checked
from ._checks import known_dim as _known
from .rnnt_loss.common import (REDUCTIONS, _check_clamp, _check_common, _check_float, _symbols64, _with_item_scale,
                               real_bits)
from .rnnt_loss.fused_joiner import (ACTIVATIONS, check_joiner, check_weight_units, composed_joiner, fused_fits,
                                     joiner_blocks, run_in_blocks, zero_bias)

MAX_DURATIONS = 16  # the kernels' fixed arc table
_INF = float("inf")


@paddle.jit.not_to_static
def _check_durations(op, arg, durations, minimum, need_positive=False):
    """durations as a list of ints: distinct, each >= minimum; need_positive: one of them >= 1."""
    if isinstance(durations, (str, bytes)) or not hasattr(durations, "__iter__"):
        raise TypeError(f"{op}: {arg} must be a list of ints, got {durations!r}")
    values = list(durations)
    if not all(_is_int(d) for d in values):
        raise TypeError(f"{op}: {arg} must be a list of ints, got {durations!r}")
    values = [int(d) for d in values]
    if len(values) > MAX_DURATIONS:
        raise ValueError(f"{op}: {arg} may hold at most {MAX_DURATIONS} entries, got {len(values)}")
    bad = [d for d in values if d < minimum]
    if bad:
        raise ValueError(f"{op}: {arg} must hold ints >= {minimum}, got {bad[0]} in {values}")
    if len(set(values)) != len(values):
        raise ValueError(f"{op}: {arg} must be distinct, got {values}")
    if need_positive and not any(d >= 1 for d in values):
        raise ValueError(f"{op}: {arg} must hold a duration >= 1 (only blank arcs of durations >= 1 reach the "
                         f"last frame: without one no path ends), got {values}")
    return values


@paddle.jit.not_to_static
def _check_reals(op, reduction, sigma, fastemit_lambda, clamp):
    """-> (sigma, fastemit_lambda, the clamp's bound) as floats."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not is_real(sigma) or not abs(sigma) < _INF:
        raise ValueError(f"{op}: sigma must be a finite float, got {sigma!r}")
    if not is_real(fastemit_lambda) or not 0 <= fastemit_lambda < _INF:
        raise ValueError(f"{op}: fastemit_lambda must be a finite float >= 0, got {fastemit_lambda!r}")
    return float(sigma), float(fastemit_lambda), _check_clamp(op, clamp)


def _jump_loss(op, logits, symbols, termination_symbol, boundary, reduction, reals, durations, multiblank):
    """The fused op for checked arguments (reals: sigma, fastemit_lambda, the clamp's bound), then the reduction."""
    return _reduce(_item_losses(logits, symbols, boundary, termination_symbol, reals, durations, multiblank),
                   reduction)


def _item_losses(logits, symbols, boundary, termination_symbol, reals, durations, multiblank):
    """The loss of each item [B]."""
    return _library.call_op("pe_transducer_jump_loss", (logits,), logits, _symbols64(symbols), boundary,
                            int(termination_symbol), bool(multiblank), [real_bits(v) for v in reals],
                            list(durations))[0]


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return paddle.mean(loss) if reduction == "mean" else _library.sum_along(loss, 0)


def _jump_joiner_loss(op, joiner, symbols, termination_symbol, boundary, reduction, reals, durations, multiblank):
    """The loss of the joiner ``joiner`` = (am, lm, weight, bias, activation) for checked arguments: the fused
    op where it runs (ops/transducer_jump_loss.yaml), else the loss of the composed joiner."""
    am, lm, weight, bias, activation = joiner
    if not fused_fits(am):
        return _reduce(_blocked_item_losses(op, joiner, symbols, termination_symbol, boundary, reals, durations,
                                            multiblank), reduction)
    loss = _library.call_op("pe_transducer_jump_joiner_loss", (am, lm, weight, bias), am, lm, weight, bias,
                            _symbols64(symbols), boundary, int(termination_symbol), bool(multiblank),
                            ACTIVATIONS.index(activation), [real_bits(v) for v in reals], list(durations))[0]
    return _reduce(loss, reduction)


def _arc_count(durations, multiblank):
    """K, the arcs out of a node: TDT's blanks (durations >= 1) and symbols (every duration); multi-blank's blank,
    big blanks and symbol."""
    return len(durations) + (2 if multiblank else sum(d >= 1 for d in durations))


def _frames_arc_weights(symbols, termination_symbol, multiblank, reals, durations, activation, am_block, lm, weight,
                        bias, t0, t1):
    """(weights [B, t1-t0, S+1, K] float64, scale [B]) of frames [t0, t1) (am_block: am's) from their composed
    logits only."""
    logits = composed_joiner(am_block, lm, weight, bias, activation)
    weights, _, scale = _library.call_op("pe_transducer_jump_arc_weights", (logits,), logits, symbols,
                                         _arc_count(durations, multiblank), int(termination_symbol), bool(multiblank),
                                         [real_bits(v) for v in reals], list(durations))
    return weights, scale


def _blocked_item_losses(op, joiner, symbols, termination_symbol, boundary, reals, durations, multiblank):
    """The loss of each item [B] of the composed joiner (where the fused op does not run: CUDA): in dygraph in
    blocks of frames, each block's logits formed, reduced to its nodes' arc weights and recomputed in the
    backward (_BlockedJoiner), then the loss on all the weights, so no more than a block's logits exist at once;
    whole in a static program."""
    am, lm, weight, bias, activation = joiner
    if not paddle.in_dynamic_mode() or 0 in am.shape[:2]:
        return _item_losses(composed_joiner(am, lm, weight, bias, activation), symbols, boundary, termination_symbol,
                            reals, durations, multiblank)
    B, T, J = am.shape
    # a block's logits, their grad and its activations
    per_frame = B * lm.shape[1] * (2 * weight.shape[1] + J) * (8 if am.dtype == paddle.float64 else 4)
    run = functools.partial(_frames_arc_weights, _symbols64(symbols), termination_symbol, multiblank, reals,
                            durations, activation)
    spec = {"op": op, "axis": 1, "sliced": 1, "out_axes": (1, None), "blocks": joiner_blocks(T, per_frame), "run": run}
    weights, scale = run_in_blocks([am, lm, weight, bias], spec)
    loss = _library.call_op("pe_transducer_jump_weights_loss", (weights,), weights, boundary, bool(multiblank),
                            [real_bits(reals[1])], list(durations))[0].astype(am.dtype)
    if reals[2] < _INF:  # the clamp: the arc weights' grad clamps each item's own grad, then scales it
        loss = -_with_item_scale(-loss, scale)
    return loss


@_library.unified
def tdt_loss(logits, symbols, durations, termination_symbol, boundary=None, reduction="mean", *, sigma=0.0,
             fastemit_lambda=0.0, clamp=-1.0, name=None):
    """The Token-and-Duration Transducer loss (Xu et al. 2023) on joiner output with NeMo's layout.

    Args:
        logits (Tensor): ``[B, T, S+1, C + D]``: C token logits (the blank, ``termination_symbol``, among
            them), then D duration logits, one per entry of ``durations``; float16/bfloat16/float32/float64.
        symbols (Tensor): int ``[B, S]``, values in ``[0, C)``.
        durations (list[int]): D <= 16 distinct ints >= 0, one of them >= 1, in any order (e.g. ``[0, 1, 2, 3, 4]``,
            ``[1, 2, 3, 4, 5]``: every emission takes a frame, ``[0, 2, 4]``: no step of one frame).
        termination_symbol (int): the blank, in ``[0, C)``.
        boundary (Tensor|None): int64 or int32 ``[B, 4]`` rows ``(s_begin, t_begin, s_end, t_end)``; default
            ``(0, 0, S, T)`` (:func:`paddle_ext.boundary_from_lengths` builds them from lengths).
        reduction (str): 'none' ([B]), 'mean' (over the batch) or 'sum'.
        sigma (float): subtracted from every token log-prob (logit under-normalisation).
        fastemit_lambda (float): >= 0; the loss is unchanged and the grads through symbol arcs are scaled by
            ``1 + fastemit_lambda``.
        clamp (float): > 0 clamps the grad of each token logit (the first C units; NeMo clamps no duration
            logit) w.r.t. its item's loss to ``[-clamp, clamp]`` before the upstream grad (the reduction's
            1/B included) multiplies it, as NeMo's TDT loss does; <= 0 (default -1): off. The loss is unchanged.

    From node (t, s) a symbol arc emits ``symbols[s]`` with duration d to (t+d, s+1) (d may be 0, landing
    before the last frame), a blank arc emits the blank with duration d >= 1 to (t+d, s) (landing <= T);
    an arc's weight is its token log-prob plus its duration log-prob at (t, s) (two separate log-softmaxes).
    The loss is -log of the total weight of the paths (0, 0) -> (T, S); an item with no path gets inf (and
    zero grads).
    """
    symbols, boundary = index64(symbols), index64(boundary)
    reduction = choice(reduction, REDUCTIONS)
    return _amp.float32_op(_tdt_loss, 1, logits, symbols, durations, termination_symbol, boundary, reduction, sigma,
                           fastemit_lambda, clamp)


def _tdt_loss(logits, symbols, durations, termination_symbol, boundary, reduction, sigma, fastemit_lambda, clamp):
    op = "tdt_loss"
    reals = _check_reals(op, reduction, sigma, fastemit_lambda, clamp)
    B, T, S1, X = _check_float(logits, "logits", op, 4)
    durations, check, check_args = _tdt_checks(op, "logits' last dim", durations, X, symbols, termination_symbol, B,
                                               S1, T, boundary)
    deferred = check(*check_args, kernel_checks=True)  # the op's CPU kernel checks the symbols
    return run_kernel_checked(deferred, check, check_args, _jump_loss, op, logits, symbols, termination_symbol,
                               boundary, reduction, reals, durations, False)


@paddle.jit.not_to_static
def _tdt_checks(op, units, durations, X, symbols, termination_symbol, B, S1, T, boundary):
    """-> (durations as ints, the symbols' check, its arguments) for X = C + D units (``units`` names that dim;
    the check's errors say how C follows from it)."""
    durations = _check_durations(op, "durations", durations, 0, need_positive=True)
    D = len(durations)
    C = X - D if _known(X) else -1
    if _known(X) and C < 1:
        raise ValueError(f"{op}: {units} must be C + D with C >= 1 token units and D = len(durations) = {D}, got "
                         f"{X} (C = {X} - {D} = {C})")
    c_from = f"{units} - len(durations)" + (f" = {X} - {D}" if _known(X) else "")
    check = functools.partial(_check_common, c_from=c_from)
    return durations, check, (op, symbols, termination_symbol, C if C >= 0 else X, B, S1 - 1 if _known(S1) else -1,
                              T, boundary, "regular")


@_library.unified
def multiblank_rnnt_loss(logits, symbols, big_blank_durations, termination_symbol, boundary=None, reduction="mean", *,
                         sigma=0.0, fastemit_lambda=0.0, clamp=-1.0, name=None):
    """The multi-blank RNN-T loss (Xu et al. 2022) on joiner output ``logits [B, T, S+1, C]`` (NeMo's layout).

    Big blank i, of duration ``big_blank_durations[i]`` (distinct ints >= 2), is unit
    ``termination_symbol - 1 - i``: the standard blank last, the big blanks just before it. From node (t, s):
    the standard blank to (t+1, s), big blank i to (t + d_i, s) (landing <= T), a symbol to (t, s+1).
    ``sigma`` is subtracted from every log-prob; ``clamp`` > 0 clamps the grad of every logit (as NeMo's
    multi-blank loss); other arguments as in :func:`tdt_loss`.
    """
    symbols, boundary = index64(symbols), index64(boundary)
    reduction = choice(reduction, REDUCTIONS)
    return _amp.float32_op(_multiblank_rnnt_loss, 1, logits, symbols, big_blank_durations, termination_symbol,
                           boundary, reduction, sigma, fastemit_lambda, clamp)


def _multiblank_rnnt_loss(logits, symbols, big_blank_durations, termination_symbol, boundary, reduction, sigma,
                          fastemit_lambda, clamp):
    op = "multiblank_rnnt_loss"
    reals = _check_reals(op, reduction, sigma, fastemit_lambda, clamp)
    big = _check_durations(op, "big_blank_durations", big_blank_durations, 2)
    B, T, S1, C = _check_float(logits, "logits", op, 4)
    check_args = (op, symbols, termination_symbol, C, B, S1 - 1 if _known(S1) else -1, T, boundary, "regular")
    deferred = _check_common(*check_args, kernel_checks=True)  # the op's CPU kernel checks the symbols
    return run_kernel_checked(deferred, _check_common, check_args, _multiblank_checked_loss, op, logits, symbols,
                               termination_symbol, boundary, reduction, reals, big)


def _check_big_blanks(op, termination_symbol, big):
    if termination_symbol - len(big) < 0:
        raise ValueError(f"{op}: {len(big)} big blanks take units termination_symbol - 1 ... termination_symbol - "
                         f"{len(big)}, so termination_symbol must be >= {len(big)}, got {termination_symbol}")


def _multiblank_checked_loss(op, logits, symbols, termination_symbol, boundary, reduction, reals, big):
    _check_big_blanks(op, termination_symbol, big)
    return _jump_loss(op, logits, symbols, termination_symbol, boundary, reduction, reals, big, True)


@_library.unified
def tdt_loss_fused_joiner(am, lm, weight, bias, symbols, durations, termination_symbol, boundary=None,
                          reduction="mean", *, activation="tanh", sigma=0.0, fastemit_lambda=0.0, clamp=-1.0,
                          name=None):
    """The TDT loss with the joiner fused in: equal to ``tdt_loss(act(am[:, :, None] + lm[:, None]) @ weight +
    bias, symbols, durations, termination_symbol, boundary, reduction, sigma=sigma, fastemit_lambda=...,
    clamp=clamp)`` (the clamp applied to each block's logits grad), with
    the grads of am ``[B, T, J]``, lm ``[B, S+1, J]``, weight ``[J, C + D]`` and bias ``[C + D]`` (or None);
    activation 'tanh', 'relu' or 'identity'. On CPU the joiner's logits are never whole (blocks of lattice
    rows, recomputed in the backward), as in :func:`paddle_ext.rnnt_loss_fused_joiner`."""
    symbols, boundary = index64(symbols), index64(boundary)
    reduction, activation = choice(reduction, REDUCTIONS), choice(activation, ACTIVATIONS)
    if bias is None:
        bias = zero_bias(weight)
    return _amp.float32_op(_tdt_loss_fused_joiner, 4, am, lm, weight, bias, symbols, durations, termination_symbol,
                           boundary, reduction, activation, sigma, fastemit_lambda, clamp)


def _tdt_loss_fused_joiner(am, lm, weight, bias, symbols, durations, termination_symbol, boundary, reduction,
                           activation, sigma, fastemit_lambda, clamp):
    op = "tdt_loss_fused_joiner"
    reals = _check_reals(op, reduction, sigma, fastemit_lambda, clamp)
    B, T, S1, J, X = check_joiner(op, am, lm, weight, bias, activation)
    durations, check, check_args = _tdt_checks(op, "weight's last dim", durations, X, symbols, termination_symbol, B,
                                               S1, T, boundary)
    deferred = check(*check_args, kernel_checks=True)  # the op's CPU kernel checks the symbols
    return run_kernel_checked(deferred, check, check_args, _jump_joiner_loss, op,
                              (am, lm, weight, bias, activation), symbols, termination_symbol, boundary, reduction,
                              reals, durations, False)


@_library.unified
def multiblank_rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, big_blank_durations, termination_symbol,
                                      boundary=None, reduction="mean", *, activation="tanh", sigma=0.0,
                                      fastemit_lambda=0.0, clamp=-1.0, name=None):
    """The multi-blank RNN-T loss with the joiner fused in: equal to ``multiblank_rnnt_loss`` on the logits
    ``act(am[:, :, None] + lm[:, None]) @ weight + bias`` (weight ``[J, C]``); arguments as in
    :func:`tdt_loss_fused_joiner` and :func:`multiblank_rnnt_loss`."""
    symbols, boundary = index64(symbols), index64(boundary)
    reduction, activation = choice(reduction, REDUCTIONS), choice(activation, ACTIVATIONS)
    if bias is None:
        bias = zero_bias(weight)
    return _amp.float32_op(_multiblank_rnnt_loss_fused_joiner, 4, am, lm, weight, bias, symbols, big_blank_durations,
                           termination_symbol, boundary, reduction, activation, sigma, fastemit_lambda, clamp)


def _multiblank_rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, big_blank_durations, termination_symbol,
                                       boundary, reduction, activation, sigma, fastemit_lambda, clamp):
    op = "multiblank_rnnt_loss_fused_joiner"
    reals = _check_reals(op, reduction, sigma, fastemit_lambda, clamp)
    big = _check_durations(op, "big_blank_durations", big_blank_durations, 2)
    B, T, S1, J, C = check_joiner(op, am, lm, weight, bias, activation)
    check_args = (op, symbols, termination_symbol, C, B, S1 - 1 if _known(S1) else -1, T, boundary, "regular")
    deferred = check_weight_units(*check_args, kernel_checks=True)  # the op's CPU kernel checks the symbols
    if termination_symbol - len(big) < 0:
        run_kernel_checked(deferred, check_weight_units, check_args, _check_big_blanks, op, termination_symbol, big)
    return run_kernel_checked(deferred, check_weight_units, check_args, _jump_joiner_loss, op,
                              (am, lm, weight, bias, activation), symbols, termination_symbol, boundary, reduction,
                              reals, big, True)


__all__ = ["multiblank_rnnt_loss", "multiblank_rnnt_loss_fused_joiner", "tdt_loss", "tdt_loss_fused_joiner"]
