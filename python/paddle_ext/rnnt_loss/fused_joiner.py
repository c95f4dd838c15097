"""The joiner fused into the loss: rnnt_loss_fused_joiner, and the checks and the composed joiner that the
TDT / multi-blank fused losses and nn.TransducerJoiner share.

The joiner is ``act(am[:, :, None] + lm[:, None]) @ weight + bias`` (icefall's, with the projections of am
and lm done by the caller). On CPU the fused op (ops/rnnt_joint_logprobs.yaml, ``pe_rnnt_joiner_logprobs``)
reduces each block of lattice rows to px / py in scratch and recomputes the blocks in its grad, so neither
the ``[B, T, S+1, C]`` logits nor the ``[B, T, S+1, J]`` activations exist at any time. Elsewhere (CUDA tensors)
the joiner is composed of Paddle's ops in blocks of frames, each reduced to its px / py by the joint op and
recomputed in the backward (_BlockedJoiner, which the TDT / multi-blank losses run in blocks of items); a static
program of a CUDA build composes it whole.
"""

from __future__ import annotations

import functools

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from .. import _amp, _fill, _library
from .._checks import check_tensor, choice, dtype_name, index64, run_kernel_checked, same_dtype
from .._checks import known_dim as _known
from .common import (NO_CLAMP, REDUCTIONS, RNNT_TYPES, _agree, _check_clamp, _check_common, _check_float,
                     _check_loss_args, _dims, _finish_px, _loss, _neg_inf, _symbols64, real_bits)
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
                           fastemit_lambda=0.0, clamp=-1.0, name=None):
    """The RNN-T loss with the joiner fused in: equal to ``rnnt_loss(act(am[:, :, None] + lm[:, None]) @ weight
    + bias, symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, fastemit_lambda=...,
    clamp=clamp)``, and with ``ranges`` ``[B, T, s_range]`` (from :func:`get_rnnt_prune_ranges`) to
    ``rnnt_loss_pruned`` on the joiner of ``do_rnnt_pruning(am, lm, ranges)``; values and the grads of am, lm,
    weight and bias (with the clamp: the chain rule through the clamped logits grads).

    Args:
        am (Tensor): ``[B, T, J]``, the projected encoder output; float16/bfloat16/float32/float64.
        lm (Tensor): ``[B, S+1, J]``, the projected predictor output, am's dtype.
        weight (Tensor): ``[J, C]`` (``paddle.nn.Linear``'s layout); bias (Tensor|None): ``[C]``.
        symbols, termination_symbol, boundary, rnnt_type, delay_penalty, reduction, fastemit_lambda, clamp: as in
            :func:`rnnt_loss` (clamp > 0 clamps each logit's grad w.r.t. its item's loss to [-clamp, clamp] before
            the upstream grad multiplies it; the loss is unchanged).
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
                           rnnt_type, delay_penalty, reduction, ranges, activation, fastemit_lambda, clamp)


def _rnnt_loss_fused_joiner(am, lm, weight, bias, symbols, termination_symbol, boundary, rnnt_type, delay_penalty,
                            reduction, ranges, activation, fastemit_lambda, clamp):
    op = "rnnt_loss_fused_joiner"
    delay_penalty, fastemit_lambda = _check_loss_args(op, delay_penalty, reduction, fastemit_lambda)
    bound = _check_clamp(op, clamp)
    px, py, scale = _joiner_logprobs(op, am, lm, weight, bias, symbols, ranges, termination_symbol, boundary,
                                     rnnt_type, activation, real_bits(bound))
    return _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, False, fastemit_lambda,
                 scale=scale if bound < float("inf") else None)


def _joiner_logprobs(op, am, lm, weight, bias, symbols, ranges, termination_symbol, boundary, rnnt_type, activation,
                     clamp_bits=NO_CLAMP):
    """(px, py, scale) of the fused joiner, checked as get_rnnt_logprobs_joint / _pruned check theirs; scale and
    clamp_bits as in full._joint_logprobs."""
    B, T, U, J, X = check_joiner(op, am, lm, weight, bias, activation)
    S = U - 1 if _known(U) else -1
    check_args = (op, symbols, termination_symbol, X, B, S, T, boundary, rnnt_type, ranges)
    deferred = _check_symbols_and_ranges(*check_args, kernel_checks=True)
    ranges64 = None if ranges is None else _symbols64(ranges)
    px, py, scale = run_kernel_checked(deferred, _check_symbols_and_ranges, check_args, _fused_or_composed, am, lm,
                                       weight, bias, _symbols64(symbols), ranges64, termination_symbol, activation,
                                       clamp_bits)
    if rnnt_type == "regular":
        Bs, Ss = _dims(symbols)
        px = paddle.concat([px, _neg_inf([Bs, Ss, 1], px.dtype)], axis=2)  # no symbol on frame T
    return _finish_px(px, py, boundary, rnnt_type), py, scale


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


def _fused_or_composed(am, lm, weight, bias, symbols, ranges, termination_symbol, activation, clamp_bits):
    if fused_fits(am):
        px, py, _, scale = _library.call_op("pe_rnnt_joiner_logprobs", (am, lm, weight, bias), am, lm, weight, bias,
                                            symbols, ranges, int(termination_symbol), ACTIVATIONS.index(activation),
                                            clamp_bits)
        return px, py, scale
    return blocked_joiner_logprobs(am, lm, weight, bias, symbols, ranges, termination_symbol, activation, clamp_bits)


# The composed joiner's blocks: a block's logits, their grad and its activations stay within this (or take one
# frame / one item where that alone is more).
BLOCK_BYTES = 256 << 20


def joiner_blocks(n, per_unit_bytes):
    """[(i0, i1)] covering n units (frames or items) of per_unit_bytes each in blocks of ~BLOCK_BYTES."""
    units = max(1, BLOCK_BYTES // max(1, per_unit_bytes))
    return [(i0, min(n, i0 + units)) for i0 in range(0, n, units)]


def _block_slices(joiner, spec, i0, i1):
    """am, lm, weight, bias with the sliced ones (the first spec['sliced']) cut to units [i0, i1) of spec['axis']."""
    return [paddle.slice(x, [spec["axis"]], [i0], [i1]) if k < spec["sliced"] else x for k, x in enumerate(joiner)]


def _blocked_forward(joiner, spec):
    with paddle.no_grad():
        pieces = [spec["run"](*_block_slices(joiner, spec, i0, i1), i0, i1) for i0, i1 in spec["blocks"]]
    return tuple(pieces[0][k] if axis is None else paddle.concat([p[k] for p in pieces], axis=axis)
                 for k, axis in enumerate(spec["out_axes"]))


class _BlockedJoiner(PyLayer):
    """Dygraph autograd of a function of the composed joiner, run in blocks, for the tensors the fused CPU ops do
    not take (CUDA). spec['run'](am, lm, weight, bias, i0, i1) gives the outputs of units [i0, i1) (frames of am:
    axis 1, sliced 1; items of am and lm: axis 0, sliced 2) from that block's logits, which are then dropped;
    output k is the concat of the blocks' along spec['out_axes'][k] (None: the first block's, the same in each).
    The backward recomputes each block and takes its grads, so no more than a block's logits exist at once. The
    differentiable tensors come as one list input (see put_along_axis._apply: Paddle prunes the slots of a
    multi-slot PyLayer), one that wants a grad first."""

    @staticmethod
    def forward(ctx, tensors, spec):
        ctx.spec, ctx.wanted = spec, [not t.stop_gradient for t in tensors]
        joiner = [tensors[spec["order"].index(i)] for i in range(4)]  # am, lm, weight, bias
        ctx.save_for_backward(*joiner)
        return _blocked_forward(joiner, spec)

    @staticmethod
    def backward(ctx, *out_grads):
        spec, order = ctx.spec, ctx.spec["order"]
        if paddle.is_grad_enabled():
            raise NotImplementedError(f"{spec['op']}: higher-order grads are not supported (the composed joiner's "
                                      "blocks are recomputed in the backward); compose the joiner and call the loss "
                                      "on its logits for them")
        wanted = [ctx.wanted[order.index(i)] for i in range(4)]
        leaves = [x.detach() for x in ctx.saved_tensor()]
        for leaf, want in zip(leaves, wanted):
            leaf.stop_gradient = not want
        sliced, axis = spec["sliced"], spec["axis"]
        pieces = [[] for _ in range(sliced)]
        for i0, i1 in spec["blocks"]:
            block = _block_slices(leaves, spec, i0, i1)
            for k in range(sliced):
                block[k] = block[k].detach()
                block[k].stop_gradient = not wanted[k]
            with paddle.enable_grad():
                outs = spec["run"](*block, i0, i1)
            upstream = [g if g is None or a is None else paddle.slice(g, [a], [i0], [i1])
                        for g, a in zip(out_grads, spec["out_axes"])]
            pairs = [(o, g) for o, g in zip(outs, upstream) if g is not None and not o.stop_gradient]
            if pairs:  # (paddle.grad here would re-enter a running paddle.grad: backward fills the leaves' .grad)
                paddle.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            for k in range(sliced):
                if wanted[k]:
                    pieces[k].append(block[k].grad if block[k].grad is not None else paddle.zeros_like(block[k]))
        grads = [paddle.concat(pieces[k], axis=axis) if wanted[k] else None for k in range(sliced)]
        grads += [(x.grad if x.grad is not None else paddle.zeros_like(x)) if want else None
                  for x, want in zip(leaves[sliced:], wanted[sliced:])]
        return [grads[i] if ctx.wanted[k] else None for k, i in enumerate(order)]


def run_in_blocks(joiner, spec):
    """spec['run']'s outputs over all blocks (see _BlockedJoiner): recorded for the grads where one is wanted."""
    if not paddle.is_grad_enabled() or all(t.stop_gradient for t in joiner):
        return _blocked_forward(joiner, spec)
    spec["order"] = sorted(range(4), key=lambda i: joiner[i].stop_gradient)  # one that wants a grad first
    return _BlockedJoiner.apply([joiner[i] for i in spec["order"]], spec)


def _frames_logprobs(symbols, ranges, termination_symbol, activation, clamp_bits, am_block, lm, weight, bias, t0, t1):
    """(px [B, S, t1-t0], py [B, S+1, t1-t0], scale [B]) of frames [t0, t1) (am_block: am's) from their composed
    logits only."""
    ranges = None if ranges is None else ranges[:, t0:t1]
    logits = composed_joiner(am_block, lm, weight, bias, activation, ranges)
    return _joint_logprobs(logits, symbols, ranges, termination_symbol, clamp_bits)


def blocked_joiner_logprobs(am, lm, weight, bias, symbols, ranges, termination_symbol, activation, clamp_bits=NO_CLAMP):
    """(px [B, S, T], py [B, S+1, T], scale) of the composed joiner: in dygraph in blocks of frames, whole in a
    static program."""
    if not paddle.in_dynamic_mode() or 0 in am.shape[:2]:
        logits = composed_joiner(am, lm, weight, bias, activation, ranges)
        return _joint_logprobs(logits, symbols, ranges, termination_symbol, clamp_bits)
    B, T, J = am.shape
    R = lm.shape[1] if ranges is None else ranges.shape[2]
    per_frame = B * R * (weight.shape[1] + J) * (8 if am.dtype == paddle.float64 else 4)
    spec = {"op": "rnnt_loss_fused_joiner", "axis": 1, "sliced": 1, "out_axes": (2, 2, None),
            "blocks": joiner_blocks(T, per_frame),
            "run": functools.partial(_frames_logprobs, symbols, ranges, termination_symbol, activation, clamp_bits)}
    return run_in_blocks([am, lm, weight, bias], spec)
