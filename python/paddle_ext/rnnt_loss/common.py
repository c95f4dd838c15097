"""Shapes, argument checks and what every RNN-T loss does with its (px, py): delay penalty, FastEmit, the
recursion, the reduction; and the two paths (fast lane, checked) of each public function's twin."""

from __future__ import annotations

import functools
import struct

import numpy as np
import paddle
from paddle.autograd import PyLayer

from .. import _amp, _fill, _library
from .._library import in_sot_simulation_mode
from .._checks import check_tensor, dtype_name, is_floating, is_int, is_integer, is_real, same_dtype
from .._checks import known_dim as _known
from ..mutual_information import _recursion, _recursion_in_kernel_checks, check_boundary

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
def _check_common(op, symbols, termination_symbol, C, B, S, T, boundary, rnnt_type, kernel_checks=False,
                  c_from="logits' last dim"):
    """B, S, T, C are static dims (-1 where dynamic); c_from says where C comes from, for the errors that bound a
    value by it. With kernel_checks (the op run next checks the symbols' values on CPU), the values of a CPU
    tensor in dygraph are left to it: returns True then, and the caller runs this again without kernel_checks if
    the op fails (see run_kernel_checked)."""
    check_tensor(symbols, "symbols", op)
    if not is_integer(symbols.dtype):
        raise TypeError(f"{op}: symbols must be an integer tensor, got {dtype_name(symbols.dtype)}")
    shape = symbols.shape
    if len(shape) != 2 or not (_agree(shape[0], B) and _agree(shape[1], S)):
        raise ValueError(f"{op}: symbols must have shape [B, S] = [{B}, {S}], got {list(shape)}")
    if not is_int(termination_symbol) or not 0 <= termination_symbol < C:
        raise ValueError(f"{op}: termination_symbol must be an int in [0, C) = [0, {C}), C = {c_from} = {C}; got "
                         f"{termination_symbol!r}")
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
        raise ValueError(f"{op}: symbols must lie in [0, C) = [0, {C}), C = {c_from} = {C}; got values in "
                         f"[{lo}, {hi}]")
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


@paddle.jit.not_to_static
def _check_lengths(op, logit_lengths, target_lengths):
    for arg, x in (("logit_lengths", logit_lengths), ("target_lengths", target_lengths)):
        check_tensor(x, arg, op)
        if not is_integer(x.dtype):
            raise TypeError(f"{op}: {arg} must be an integer tensor, got {dtype_name(x.dtype)}")
        if len(x.shape) != 1:
            raise ValueError(f"{op}: {arg} must be 1-D [B], got shape {list(x.shape)}")
    B, Bt = logit_lengths.shape[0], target_lengths.shape[0]
    if _known(B, Bt) and B != Bt:
        raise ValueError(f"{op}: logit_lengths and target_lengths must both be [B], got [{B}] and [{Bt}]")
    if paddle.in_dynamic_mode():
        for arg, x in (("logit_lengths", logit_lengths), ("target_lengths", target_lengths)):
            values = x.numpy()
            if (values < 0).any():
                b = int(np.flatnonzero(values < 0)[0])
                raise ValueError(f"{op}: {arg} must be >= 0, got {arg}[{b}] = {values[b]}")


def boundary_from_lengths(logit_lengths, target_lengths):
    """The ``boundary`` of a padded batch from NeMo's and torchaudio's lengths: int64 ``[B, 4]`` rows
    ``(0, 0, target_lengths[b], logit_lengths[b])``, i.e. ``(s_begin, t_begin, s_end, t_end) = (0, 0, S_b, T_b)``.

    Args:
        logit_lengths (Tensor): integer ``[B]``, the frames of each item (T_b; NeMo's ``act_lens``).
        target_lengths (Tensor): integer ``[B]``, the symbols of each item (S_b; NeMo's ``label_lens``).

    The losses check the rows against the logits' T and S (``T_b <= T``, ``S_b <= S``) when they get them.
    """
    _check_lengths("boundary_from_lengths", logit_lengths, target_lengths)
    t_end, s_end = logit_lengths.astype("int64"), target_lengths.astype("int64")
    zeros = _fill.zeros_like(t_end)
    return paddle.stack([zeros, zeros, s_end, t_end], axis=1)


def real_bits(value: float) -> int:
    """value's float64 bit pattern: an op takes a real exactly this way (a float attribute is float32)."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


NO_CLAMP = real_bits(_INF)  # the clamp's bound (as real_bits) that clamps nothing


@paddle.jit.not_to_static
def _check_clamp(op, clamp) -> float:
    """NeMo's and torchaudio's ``clamp`` as the kernels' bound: clamp > 0 clamps each logit's grad to
    [-clamp, clamp]; clamp <= 0 is off (bound +inf)."""
    if not is_real(clamp) or clamp != clamp:
        raise ValueError(f"{op}: clamp must be a float (> 0 clamps the logits' grads, <= 0 is off), got {clamp!r}")
    return float(clamp) if clamp > 0 else _INF


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


class _OwnLossGrad(PyLayer):
    """Identity whose backward hands its input a grad of -1 (that of each item's loss -x) whatever comes in."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return _fill.full_like(grad, -1.0)


def _with_item_scale(negated_loss, scale):
    """The grad clamp's plumbing (paddle_ext/grad_clamp.h): the value stays -loss (scale is the joiner op's zero
    output), the lattice below gets each item's own loss's grad, and scale's grad is each item's upstream grad,
    which the joiner op's backward applies after clamping."""
    if negated_loss.stop_gradient:
        return negated_loss
    if paddle.in_dynamic_mode():
        own = _OwnLossGrad.apply(negated_loss)
    else:
        own = paddle.static.nn.static_pylayer(paddle.assign, [negated_loss], lambda grad: _fill.full_like(grad, -1.0))
    return own - scale


def _fastemit(px, fastemit_lambda):
    """px with its grad scaled by 1 + fastemit_lambda and its values untouched (a straight-through
    px + lambda * (px - px.detach()) would turn px's -inf cells into NaN)."""
    if fastemit_lambda == 0.0 or px.stop_gradient:
        return px
    factor = 1.0 + fastemit_lambda
    if paddle.in_dynamic_mode():
        return _ScaleGrad.apply(px, factor)
    return paddle.static.nn.static_pylayer(paddle.assign, [px], lambda grad: _times(grad, factor))


def _loss(op, px, py, boundary, rnnt_type, delay_penalty, reduction, return_grad, fastemit_lambda, checked=True,
          scale=None):
    """What every loss does with its (px, py): delay penalty, FastEmit, the recursion, the reduction. An item
    with no path gets ans = -inf and zero grads from the recursion, so an inf loss (and 'sum'/'mean' inf).
    checked=False (the fast lane, without return_grad): the recursion's kernel checks px, py and boundary.
    scale: the joiner op's scale output where the grad clamp is on (_with_item_scale)."""
    px = _fastemit(_add_delay_penalty(px, boundary, rnnt_type, delay_penalty), fastemit_lambda)
    if not checked:
        out = _recursion_in_kernel_checks(px, py, boundary)
    else:
        out = _recursion(px, py, boundary, return_grad, op, boundary_checked=True)  # (by the loss's _check_common)
    negated = out[0] if return_grad else out
    if scale is not None:
        negated = _with_item_scale(negated, scale)
    if return_grad:  # occupation probabilities: the recursion's own, before FastEmit's scaling
        return _reduce(negated, reduction), out[1]
    return _reduce(negated, reduction)


def _paths(twin, n):
    """A twin's two paths: the fast lane's (every check but the scalars' left to the kernels; _amp.fast_lane),
    and the full one (its checks, its AMP casts; ``n``: its floating inputs)."""
    return functools.partial(twin, checked=False), functools.partial(_amp.float32_op, twin, n)
