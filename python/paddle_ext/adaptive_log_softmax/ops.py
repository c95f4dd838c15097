"""The two fused per-cluster ops and their dygraph autograd:

* ``adaptive_log_softmax_target(logits, target)``: ``logits[m, target[m]] - logsumexp(logits[m])``,
  without materialising the ``[M, K]`` log-softmax; its grad is ``(onehot - softmax) * out_grad``
  (so the loss ``-out`` gets PyTorch's ``softmax - onehot``).
* ``adaptive_log_softmax_full(logits, offset)``: ``logits - logsumexp(row) + offset[:, None]``
  (the full log-probabilities of one cluster, for ``log_prob`` and ``predict``).
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from .. import _amp, _fill, _library
from .._checks import check_tensor, dtype_name, is_floating, is_integer, known_dim, run_kernel_checked, same_dtype

_INT64 = paddle.int64


class LabelOutOfRangeError(IndexError, ValueError):
    """A label outside [0, n_classes): an IndexError, and a ValueError as Paddle raises."""


# ---------------------------------------------------------------------------------------------------
# The fused ops


def _check_logits(logits, op):
    """-> logits' shape [M, K]."""
    check_tensor(logits, "logits", op)
    if not is_floating(logits.dtype):
        raise TypeError(f"{op}: logits must be float16, bfloat16, float32 or float64, got {dtype_name(logits.dtype)}")
    shape = logits.shape
    if len(shape) != 2:
        raise ValueError(f"{op}: logits must be 2-D [M, K], got shape {list(shape)}")
    return shape


def _as_int64(label, arg, op):
    check_tensor(label, arg, op)
    dtype = label.dtype
    if not is_integer(dtype):
        raise TypeError(f"{op}: {arg} must be an integer tensor, got {dtype_name(dtype)}")
    return label if same_dtype(dtype, _INT64) else paddle.cast(label, "int64")


def adaptive_log_softmax_target(logits, target, name=None):
    """``logits[m, target[m]] - logsumexp(logits[m, :])`` for each row m of ``logits`` [M, K].

    Args:
        logits (Tensor): [M, K] float16, bfloat16, float32 or float64.
        target (Tensor): [M] integer class indices in ``[0, K)``.

    Returns:
        Tensor [M] in ``logits``' dtype: the target log-probabilities. Differentiable in ``logits``.
    """
    op = "adaptive_log_softmax_target"
    m, k = _check_logits(logits, op)
    logits = _amp.float32_at_o1(logits)  # log_softmax-like: a float32 op at O1, as in Paddle's AMP lists
    target = _as_int64(target, "target", op)
    target_shape = target.shape
    if len(target_shape) != 1:
        raise ValueError(f"{op}: target must be 1-D [M], got shape {list(target_shape)}")
    if known_dim(m, target_shape[0]) and m != target_shape[0]:
        raise ValueError(f"{op}: target has {target_shape[0]} rows but logits has {m}")
    if paddle.in_dynamic_mode() and target_shape[0] != 0:
        return _target_with_values_checked(logits, target, k, op)
    return _target(logits, target)


@paddle.jit.not_to_static
def _target_with_values_checked(logits, target, k, op):
    """_target in dygraph, with target's values checked: by the op's CPU kernel (an IndexError), and only when
    it fails read here, to raise this function's error (a NumPy read and two reductions saved on every call
    with good targets); elsewhere read first."""
    deferred = _library.is_cpu(target)
    if not deferred:
        _check_target_values(target, k, op)
    return run_kernel_checked(deferred, _check_target_values, (target, k, op), _target, logits, target)


def _check_target_values(target, k, op):
    values = target.numpy()  # (one copy; paddle's min and max would be two ops and two syncs)
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= k:
        bad = lo if lo < 0 else hi
        raise LabelOutOfRangeError(f"{op}: target value {bad} is out of range [0, {k})")


def adaptive_log_softmax_full(logits, offset=None, name=None):
    """``logits - logsumexp(logits, axis=1, keepdim=True) + offset[:, None]``: log-softmax of each row of
    ``logits`` [M, K] shifted by ``offset`` [M] (zeros when None), in one pass after the row reduction.

    Differentiable in ``logits`` and ``offset``.
    """
    op = "adaptive_log_softmax_full"
    m = _check_logits(logits, op)[0]
    logits = _amp.float32_at_o1(logits)  # log_softmax-like: a float32 op at O1, as in Paddle's AMP lists
    if offset is None:
        offset = _fill.zeros_like(logits[:, 0])
        offset.stop_gradient = True
    else:
        check_tensor(offset, "offset", op)
        offset_shape = offset.shape
        if len(offset_shape) != 1:
            raise ValueError(f"{op}: offset must be 1-D [M], got shape {list(offset_shape)}")
        if known_dim(m, offset_shape[0]) and m != offset_shape[0]:
            raise ValueError(f"{op}: offset has {offset_shape[0]} rows but logits has {m}")
        dtype = logits.dtype
        if not same_dtype(offset.dtype, dtype):
            offset = paddle.cast(offset, dtype)
    return _full(logits, offset)


def _target(logits, target):
    """The target op; in dygraph with grads, through _Target (grads of any order)."""
    if paddle.in_dynamic_mode():
        if logits.stop_gradient:
            return _library.dygraph_op("pe_adaptive_log_softmax_target")(logits, target)[0]
        return _Target.apply(logits, target)
    return _library.ops().pe_adaptive_log_softmax_target(logits, target)[0]  # static: the registered grad op


def _full(logits, offset):
    if paddle.in_dynamic_mode():
        if logits.stop_gradient and offset.stop_gradient:
            return _library.dygraph_op("pe_adaptive_log_softmax_full")(logits, offset)[0]
        return _Full.apply(logits, offset)
    return _library.ops().pe_adaptive_log_softmax_full(*_library.legacy_grad_inputs(logits, offset))[0]


def _target_grad_composed(logits, target, out_grad):
    """The target op's grad as differentiable Paddle ops (for grads of higher order)."""
    onehot = F.one_hot(target, logits.shape[1]).astype(logits.dtype)
    return (onehot - F.softmax(logits, axis=1)) * out_grad.unsqueeze(1)


class _Target(PyLayer):
    """Dygraph autograd: the fused grad kernel for first-order grads; when the backward is recorded
    (create_graph=True), the same grad as differentiable ops, so higher-order grads are right."""

    @staticmethod
    def forward(ctx, logits, target):
        out, lse = _library.ops().pe_adaptive_log_softmax_target(logits, target)
        ctx.save_for_backward(logits, target, lse)
        return out

    @staticmethod
    def backward(ctx, out_grad):
        logits, target, lse = ctx.saved_tensor()
        if not paddle.is_grad_enabled():  # (an op without a grad op: no _respecting_no_grad needed)
            return _library.dygraph_op("pe_adaptive_log_softmax_target_vjp")(logits, target, lse, out_grad)[0], None
        return _target_grad_composed(logits, target, out_grad), None


class _Full(PyLayer):
    """As _Target, for adaptive_log_softmax_full."""

    @staticmethod
    def forward(ctx, logits, offset):
        out, lse = _library.ops().pe_adaptive_log_softmax_full(logits, offset)
        ctx.save_for_backward(logits, offset, lse)
        ctx.grads = (not logits.stop_gradient, not offset.stop_gradient)
        return out

    @staticmethod
    def backward(ctx, out_grad):
        logits, offset, lse = ctx.saved_tensor()
        if not paddle.is_grad_enabled():  # (an op without a grad op: no _respecting_no_grad needed)
            logits_grad, offset_grad = _library.dygraph_op("pe_adaptive_log_softmax_full_vjp")(logits, offset, lse,
                                                                                               out_grad)
        else:
            offset_grad = out_grad.sum(axis=1)
            logits_grad = out_grad - F.softmax(logits, axis=1) * offset_grad.unsqueeze(1)
        return tuple(g if needed else None for g, needed in zip((logits_grad, offset_grad), ctx.grads))
