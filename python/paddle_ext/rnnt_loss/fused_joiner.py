"""The joiner fused into the loss: rnnt_loss_fused_joiner, and the checks and the composed joiner that the
TDT / multi-blank fused losses and nn.TransducerJoiner share.

The joiner is ``act(am[:, :, None] + lm[:, None]) @ weight + bias`` (icefall's, with the projections of am
and lm done by the caller). On CPU the fused op (ops/rnnt_joint_logprobs.yaml, ``pe_rnnt_joiner_logprobs``)
reduces each block of lattice rows to px / py in scratch and recomputes the blocks in its grad, so neither
the ``[B, T, S+1, C]`` logits nor the ``[B, T, S+1, J]`` activations exist at any time; elsewhere (a CUDA
tensor, a static program of a CUDA build) the same loss is computed on the composed joiner.
"""

from __future__ import annotations

import functools

import paddle
import paddle.nn.functional as F

from .. import _amp, _fill, _library
from .._checks import check_tensor, choice, dtype_name, index64, run_kernel_checked, same_dtype
from .._checks import known_dim as _known
from .common import (REDUCTIONS, RNNT_TYPES, _agree, _check_common, _check_float, _check_loss_args, _dims, _finish_px,
                     _loss, _neg_inf, _symbols64)
from .full import _joint_logprobs
from .pruned import _check_pruned_ranges, do_rnnt_pruning

ACTIVATIONS = ("tanh", "relu", "identity")  # the op's activation attr is the index
check_weight_units = functools.partial(_check_common, c_from="weight's last dim")  # (C comes from the joiner's weight)


@paddle.jit.not_to_static
def check_joiner(op, am, lm, weight, bias, activation):
    """-> (B, T, U, J, X) static dims of am [B, T, J], lm [B, U, J], weight [J, X], bias [X] (bias checked when
    given), one floating dtype; activation one of ACTIVATIONS."""
    B, T, J = _check_float(am, "am", op, 3)
    Bl, U, Jl = _check_float(lm, "lm", op, 3)
    Jw, X = _check_float(weight, "weight", op, 2)
    if not (_agree(Bl, B) and _agree(Jl, J) and _agree(Jw, J)):
        raise ValueError(f"{op}: am [B, T, J], lm [B, S+1, J] and weight [J, C] must agree in B and J, got "
                         f"{list(am.shape)}, {list(lm.shape)} and {list(weight.shape)}")
    tensors = [("lm", lm), ("weight", weight)]
    if bias is not None:
        (Xb,) = _check_float(bias, "bias", op, 1)
        if not _agree(Xb, X):
            raise ValueError(f"{op}: bias must be [C] with C = {X} (weight [J, C]), got {list(bias.shape)}")
        tensors.append(("bias", bias))
    for arg, t in tensors:
        if not same_dtype(t.dtype, am.dtype):
            raise TypeError(f"{op}: {arg} must have am's dtype {dtype_name(am.dtype)}, got {dtype_name(t.dtype)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {ACTIVATIONS}, got {activation!r}")
    return B, T, U, J, X


def zero_bias(weight):
    """The bias of a joiner without one: zeros [C] of weight's dtype (no grad)."""
    bias = _fill.zeros_like(weight[0])
    bias.stop_gradient = True
    return bias


def fused_fits(am):
    """Whether the fused CPU op runs: a dygraph CPU tensor, or a static program's CPU executor (taken as the CPU
    unless this Paddle has CUDA)."""
    if paddle.in_dynamic_mode():
        return _library.is_cpu(am)
    return not paddle.is_compiled_with_cuda()


def composed_joiner(am, lm, weight, bias, activation, ranges=None):
    """The joiner's logits ``[B, T, S+1 (or s_range), C]`` by Paddle's ops (where the fused op does not run)."""
    if ranges is None:
        x = am.unsqueeze(2) + lm.unsqueeze(1)
    else:
        am_p, lm_p = do_rnnt_pruning(am, lm, ranges)
        x = am_p + lm_p
    if activation == "tanh":
        x = paddle.tanh(x)
    elif activation == "relu":
        x = F.relu(x)
    return F.linear(x, weight, bias)


@_library.unified
def rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, termination_symbol, boundary=None, rnnt_type="regular",
                           delay_penalty=0.0, reduction="mean", *, ranges=None, activation="tanh",
                           fastemit_lambda=0.0, name=None):
    """The RNN-T loss with the joiner fused in: equal to ``rnnt_loss(act(am[:, :, None] + lm[:, None]) @ weight
    + bias, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction)``, and with ``ranges``
    ``[B, T, s_range]`` (from :func:`get_rnnt_prune_ranges`) to ``rnnt_loss_pruned`` on the joiner of
    ``do_rnnt_pruning(am, lm, ranges)``; values and the grads of am, lm, weight and bias.

    Args:
        am (Tensor): ``[B, T, J]``, the projected encoder output; float16/bfloat16/float32/float64.
        lm (Tensor): ``[B, S+1, J]``, the projected predictor output, am's dtype.
        weight (Tensor): ``[J, C]`` (``paddle.nn.Linear``'s layout); bias (Tensor|None): ``[C]``.
        symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, fastemit_lambda: as in
            :func:`rnnt_loss`.
        ranges (Tensor|None): int ``[B, T, s_range]``: the pruned loss.
        activation (str): 'tanh', 'relu' or 'identity'.

    On CPU neither the ``[B, T, S+1, C]`` logits nor the ``[B, T, S+1, J]`` activations are formed: blocks of
    lattice rows are reduced to the lattice's log-probs and recomputed in the backward.
    """
    symbols, boundary, ranges = index64(symbols), index64(boundary), index64(ranges)
    rnnt_type, reduction = choice(rnnt_type, RNNT_TYPES), choice(reduction, REDUCTIONS)
    activation = choice(activation, ACTIVATIONS)
    if bias is None:
        bias = zero_bias(weight)
    return _amp.float32_op(_rnnt_loss_fused_joiner, 4, am, lm, weight, bias, symbols, termination_symbol, boundary,
                           rnnt_type, delay_penalty, reduction, ranges, activation, fastemit_lambda)


def _rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, termination_symbol, boundary, rnnt_type, delay_penalty,
                            reduction, ranges, activation, fastemit_lambda):
    op = "rnnt_loss_fused_joiner"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    px, py = _joiner_logprobs(op, am, lm, weight, bias, symbols, ranges, termination_symbol, boundary, rnnt_type,
                              activation)
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, False, fastemit_lambda)


def _joiner_logprobs(op, am, lm, weight, bias, symbols, ranges, termination_symbol, boundary, rnnt_type, activation):
    """(px, py) of the fused joiner, checked as get_rnnt_logprobs_joint / _pruned check theirs."""
    B, T, U, J, X = check_joiner(op, am, lm, weight, bias, activation)
    S = U - 1 if _known(U) else -1
    check_args = (op, symbols, termination_symbol, X, B, S, T, boundary, rnnt_type, ranges)
    deferred = _check_symbols_and_ranges(*check_args, kernel_checks=True)
    px, py = run_kernel_checked(deferred, _check_symbols_and_ranges, check_args, _fused_or_composed, am, lm, weight,
                                 bias, _symbols64(symbols), None if ranges is None else _symbols64(ranges),
                                 termination_symbol, activation)
    if rnnt_type == "regular":
        Bs, Ss = _dims(symbols)
        px = paddle.concat([px, _neg_inf([Bs, Ss, 1], px.dtype)], axis=2)  # no symbol on frame T
    return _finish_px(px, py, boundary, rnnt_type), py


@paddle.jit.not_to_static
def _check_symbols_and_ranges(op, symbols, termination_symbol, X, B, S, T, boundary, rnnt_type, ranges,
                              kernel_checks=False):
    """_check_common, then the pruned loss's checks of ranges (when given); kernel_checks as there."""
    deferred = check_weight_units(op, symbols, termination_symbol, X, B, S, T, boundary, rnnt_type, kernel_checks)
    if ranges is None:
        return deferred
    check_tensor(ranges, "ranges", op)
    R = ranges.shape[2] if len(ranges.shape) == 3 else -1
    return run_kernel_checked(deferred, check_weight_units, (op, symbols, termination_symbol, X, B, S, T, boundary,
                                                        rnnt_type), _check_pruned_ranges, op, ranges, B, T, R, S,
                              kernel_checks) or deferred


def _fused_or_composed(am, lm, weight, bias, symbols, ranges, termination_symbol, activation):
    if fused_fits(am):
        px, py, _ = _library.call_op("pe_rnnt_joiner_logprobs", (am, lm, weight, bias), am, lm, weight, bias, symbols,
                                     ranges, int(termination_symbol), ACTIVATIONS.index(activation))
        return px, py
    return _joint_logprobs(composed_joiner(am, lm, weight, bias, activation, ranges), symbols, ranges,
                           termination_symbol)[:2]
