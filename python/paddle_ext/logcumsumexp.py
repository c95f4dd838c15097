"""paddle_ext.logcumsumexp: log(cumsum(exp(x))) by a stable log-add-exp scan."""

from __future__ import annotations

import paddle
from paddle.autograd import PyLayer
from paddle.base.core import DataType

from . import _amp, _library
from ._checks import (COMPLEX_DTYPES, FLOATING_DTYPES, INTEGER_DTYPES, check_axis, check_tensor, dtype_name,
                      floating_dtype, is_plain_dtype)


@_library.unified
def logcumsumexp(x, axis=None, dtype=None, name=None, *, exclusive=False, reverse=False):
    """log(cumsum(exp(x))) along ``axis``, computed without overflow.

    ``paddle.logcumsumexp``'s parameters in its order; ``exclusive`` and ``reverse`` are keyword-only.

    Args:
        x (Tensor): input, floating or complex; integer tensors are cast to float32, as in Paddle.
        axis (int|None): the axis to scan; ``None`` scans the flattened tensor (1-D result).
            Negative values count from the end.
        dtype (str|paddle.dtype|None): cast ``x`` to this floating or complex dtype first.
        name (str|None): in a legacy-IR static program, the prefix of the output variable's name.
        exclusive (bool): ``out[0] = -inf`` and ``out[i] = logsumexp(x[:i])``.
        reverse (bool): scan from the last element to the first.

    Returns:
        Tensor of ``x``'s shape (1-D when ``axis`` is None) and dtype. For complex ``x``, the imaginary
        part is not wrapped: it equals torch's up to a multiple of 2*pi.
    """
    attrs = _plain_attrs(x, axis, dtype, exclusive, reverse)
    if attrs is None:
        x, attrs = _checked(x, axis, dtype, exclusive, reverse)
    if paddle.in_dynamic_mode():
        if x.stop_gradient:
            return _library.dygraph_op("pe_logcumsumexp")(x, *attrs)[0]
        if paddle.is_grad_enabled():
            return _Logcumsumexp.apply(x, attrs)
    return _library.named(_library.ops().pe_logcumsumexp(x, *attrs), name)  # static: the registered grad op


def _plain_attrs(x, axis, dtype, exclusive, reverse):
    """The op's attrs for the common dygraph call that needs no cast and no check beyond these (an int axis in
    range, a float32/float64/complex tensor); None for anything else, which _checked then handles."""
    if dtype is not None or x.__class__ is not paddle.Tensor or axis.__class__ is not int:
        return None
    x_dtype = x.dtype
    if not is_plain_dtype(x_dtype) and x_dtype not in _PLAIN_DTYPES:  # (float32/float64 by identity first)
        return None
    rank = len(x.shape) or 1  # a 0-d tensor takes axis 0 and -1
    if not -rank <= axis < rank:
        return None
    return axis % rank, False, bool(exclusive), bool(reverse)


def _checked(x, axis, dtype, exclusive, reverse):
    """(x cast as the call asks, the op's attrs), or the error that names the bad argument."""
    check_tensor(x, "x", "logcumsumexp")
    if dtype is not None:
        x = paddle.cast(x, floating_dtype(dtype, "dtype", "logcumsumexp", allow_complex=True))
    elif x.dtype not in FLOATING_DTYPES and x.dtype not in COMPLEX_DTYPES:
        if x.dtype not in INTEGER_DTYPES and x.dtype != paddle.bool:
            raise TypeError(f"logcumsumexp: x has dtype {dtype_name(x.dtype)}; expected a floating, complex or "
                            "integer dtype")
        x = paddle.cast(x, "float32")  # as paddle.logcumsumexp does
    x = _amp.float32_at_o1(x)  # a float32 op at O1 (as cumsum and log_softmax in Paddle's AMP lists); complex stays
    flatten = axis is None
    axis = 0 if flatten else check_axis(axis, len(x.shape), "logcumsumexp")
    return x, (axis, flatten, bool(exclusive), bool(reverse))


# dtypes the op takes as they are at every AMP level (16-bit ones become float32 at O1)
_PLAIN_DTYPES = frozenset((DataType.FLOAT32, DataType.FLOAT64, DataType.COMPLEX64, DataType.COMPLEX128))


class _Logcumsumexp(PyLayer):
    """Dygraph autograd: the fused grad kernel for first-order grads; a composition of logcumsumexp
    itself when the backward is recorded (create_graph=True), so grads of any order work."""

    @staticmethod
    def forward(ctx, x, attrs):
        out = _library.ops().pe_logcumsumexp(x, *attrs)
        # Saved detached: saving `out` itself makes a reference cycle (ctx -> out -> its grad node -> ctx)
        # that only the backward breaks, so outputs whose backward never ran stayed alive. The detached
        # tensor shares out's memory and inplace version counter.
        saved = out.detach()
        ctx.save_for_backward(x, saved)
        ctx.out_version = saved._inplace_version()
        ctx.attrs = attrs
        return out

    @staticmethod
    def backward(ctx, out_grad):
        x, out = ctx.saved_tensor()
        if out._inplace_version() != ctx.out_version:
            raise RuntimeError("logcumsumexp: its output was modified by an inplace operation before the "
                               f"backward (version {out._inplace_version()}, expected {ctx.out_version}); "
                               "the grad needs it")
        if not paddle.is_grad_enabled():  # (an op without a grad op: no _respecting_no_grad needed)
            return _library.dygraph_op("pe_logcumsumexp_vjp")(x, out, out_grad, *ctx.attrs)[0]
        # A higher-order graph needs out's own dependence on x (the saved alias is detached): recompute it
        # on the graph, through this same PyLayer.
        axis, flatten, exclusive, reverse = ctx.attrs
        out = logcumsumexp(x, axis=None if flatten else axis, exclusive=exclusive, reverse=reverse)
        grad = _differentiable_grad_complex if x.dtype in COMPLEX_DTYPES else _differentiable_grad
        return grad(x, out, out_grad, *ctx.attrs)


def _differentiable_grad(x, out, out_grad, axis, flatten, exclusive, reverse):
    """dx = exp(x + L+) - exp(x + L-), L± = the opposite-direction scan of log(±g) - out (see the docs)."""
    shape = x.shape
    if flatten:
        x, out_grad = x.reshape([-1]), out_grad.reshape([-1])
    neg_inf = paddle.full_like(out, float("-inf"))
    live = out > float("-inf")

    def side(mask):
        safe = paddle.where(mask, out_grad.abs(), paddle.ones_like(out_grad))
        terms = paddle.where(mask & live, safe.log() - paddle.where(live, out, paddle.zeros_like(out)), neg_inf)
        return logcumsumexp(terms, axis=axis, exclusive=exclusive, reverse=not reverse)

    finite_x = x > float("-inf")
    safe_x = paddle.where(finite_x, x, paddle.zeros_like(x))
    grad = (safe_x + side(out_grad > 0)).exp() - (safe_x + side(out_grad < 0)).exp()
    grad = paddle.where(finite_x, grad, paddle.zeros_like(grad))
    return grad.reshape(shape) if flatten else grad


def _differentiable_grad_complex(x, out, out_grad, axis, flatten, exclusive, reverse):
    """dx = exp(conj(x) + L), L = the opposite-direction scan of log(g) - conj(out) (see the docs); terms
    with g = 0 or a non-finite real part of out add nothing, and x with real part -inf gets 0."""
    shape = x.shape
    if flatten:
        x, out_grad = x.reshape([-1]), out_grad.reshape([-1])
    zero = paddle.zeros_like(out_grad)
    live = ((out_grad.real() != 0) | (out_grad.imag() != 0)) & paddle.isfinite(out.real())
    safe_g = paddle.where(live, out_grad, paddle.ones_like(out_grad))
    safe_out = paddle.where(live, out, zero)
    log_zero = paddle.complex(paddle.full_like(out.real(), float("-inf")), paddle.zeros_like(out.real()))
    terms = paddle.where(live, safe_g.log() - safe_out.conj(), log_zero)
    log_sum = logcumsumexp(terms, axis=axis, exclusive=exclusive, reverse=not reverse)
    finite_x = x.real() > float("-inf")
    safe_x = paddle.where(finite_x, x, paddle.zeros_like(x))
    grad = paddle.where(finite_x, (safe_x.conj() + log_sum).exp(), paddle.zeros_like(x))
    return grad.reshape(shape) if flatten else grad
