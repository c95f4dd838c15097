"""The projections: float32 CPU products outside auto_cast on ``pe_adaptive_matmul`` (oneDNN's sgemm from
the libdnnl that the user's Paddle loaded, on paddle_ext's thread count), every other one on Paddle's
``matmul``/``linear``; and a projection followed by the target op in blocks of rows (one op each way)."""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from .. import _amp, _fill, _library
from ..put_along_axis import _apply as _pair_apply
from ..put_along_axis import _grads, _ordered
from .ops import _target, _target_grad_composed


def _compute_dtype(dtype):
    return paddle.float32 if dtype in (paddle.float16, paddle.bfloat16) else dtype


def _cast(t, dtype):
    return t if t is None or t.dtype == dtype else paddle.cast(t, dtype)


# Paddle 3.3.1's paddle.matmul and paddle.argmax (C++ APIs that take dygraph tensors and PIR values only)
# are not available in legacy-IR programs: these two stand in for them there.


def _matmul(a, b):
    return F.linear(a, b) if _library.in_legacy_program() else paddle.matmul(a, b)  # linear: matmul_v2 there


def _gemm_fits(a, b, bias=None):
    """Whether a @ b goes to pe_adaptive_matmul: float32 CPU tensors outside auto_cast (where matmul would
    run in 16 bits), and oneDNN's sgemm found in this process. A static program's place is its executor's:
    taken as the CPU unless this Paddle has CUDA."""
    if a.dtype != paddle.float32 or b.dtype != paddle.float32 or (bias is not None and bias.dtype != paddle.float32):
        return False
    if _amp.amp_level() != "O0":
        return False
    place = a.place if paddle.in_dynamic_mode() else None  # (None also while to_static's SOT traces)
    if place is not None and not place.is_cpu_place():
        return False
    if place is None and paddle.is_compiled_with_cuda():
        return False
    return _library.gemm_backend() == "onednn"


def _gemm(a, b, transpose_y=False):
    """a @ b (a @ b.T when transpose_y), a and b 2-D: on oneDNN where _gemm_fits, else Paddle's matmul."""
    if not _gemm_fits(a, b):
        if not transpose_y:
            return _matmul(a, b)
        return F.linear(a, b.t()) if _library.in_legacy_program() else paddle.matmul(a, b, transpose_y=True)
    if paddle.in_dynamic_mode():
        if a.stop_gradient and b.stop_gradient:
            return _library.ops().pe_adaptive_matmul(a, b, False, transpose_y)
        return _pair_apply(_Gemm, a, b, {"transpose_y": transpose_y})
    return _library.ops().pe_adaptive_matmul(*_library.legacy_grad_inputs(a, b), False, transpose_y)  # grad op


def _linear(x, weight, bias=None):
    """F.linear(x, weight, bias) with the product on _gemm where it fits."""
    if not _gemm_fits(x, weight, bias):
        return F.linear(x, weight, bias)
    out = _gemm(x, weight)
    return out if bias is None else out + bias


class _Gemm(PyLayer):
    """Dygraph autograd of pe_adaptive_matmul: each grad that is needed is one GEMM (matmul's formulas, the
    same op with transposes); when the backward is recorded (create_graph=True), Paddle's differentiable
    matmul computes them instead, so higher-order grads are right. a and b come as one list input
    (_pair_apply: paddle.grad on a subset of the inputs would reject a grad for a pruned slot)."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap = spec["swap"]
        a, b = _ordered(ctx, pair)
        ctx.save_for_backward(a, b)
        ctx.transpose_y = spec["transpose_y"]
        return _library.ops().pe_adaptive_matmul(a, b, False, ctx.transpose_y)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensor()
        ty = ctx.transpose_y
        if paddle.is_grad_enabled():
            def mm(x, y, tx, ty_):
                return paddle.matmul(x, y, transpose_x=tx, transpose_y=ty_)
        else:
            mm = _library.ops().pe_adaptive_matmul
        a_grad = mm(grad, b, False, not ty) if ctx.wanted[0] else None
        b_grad = (mm(grad, a, True, False) if ty else mm(a, grad, True, False)) if ctx.wanted[1] else None
        return _grads(ctx, a_grad, b_grad)


def _projected_target(x, weight, target, dtype, bias=None, reduced=False):
    """_target(x @ weight + bias, target) with the logits in ``dtype``. In dygraph, where the product runs on
    pe_adaptive_matmul: pe_adaptive_linear_target, which makes the logits in blocks of rows and never holds them
    whole (a bias joins as one more input feature: [x, 1] @ [w; b]); with grads, under one PyLayer
    (_LinearTarget). ``reduced``: the caller's loss is a sum or mean of the outputs (reduction 'mean'/'sum'),
    so the forward forms the grads as it goes and the backward only scales them."""
    if not (paddle.in_dynamic_mode() and _gemm_fits(x, weight, bias)):
        return _target(_cast(_linear(x, weight, bias), dtype), target)
    if bias is not None:
        x = paddle.concat([x, _fill.full_like(x[:, :1], 1.0)], axis=1)
        weight = paddle.concat([weight, bias.unsqueeze(0)], axis=0)
    if not paddle.is_grad_enabled() or (x.stop_gradient and weight.stop_gradient):
        return _library.dygraph_op("pe_adaptive_linear_target")(x, weight, target, False)[0]
    return _pair_apply(_LinearTarget, x, weight, {"target": target, "reduced": reduced})


def _uniform(out_grad):
    """The one finite value of every element of out_grad (0.0 when it is empty), else None."""
    g = out_grad.numpy().reshape(-1)
    if g.size == 0:
        return 0.0
    first = g[0]
    return float(first) if np.isfinite(first) and (g == first).all() else None


class _LinearTarget(PyLayer):
    """Dygraph autograd of pe_adaptive_log_softmax_target(x @ w) on pe_adaptive_linear_target (logits in blocks of
    rows). ``reduced``: the forward forms the grads of sum(out), and the first backward whose out_grad is one value
    c on every row (the grad a sum or mean of the outputs gives) scales them by c in place and hands them on (no
    second copy). Any other out_grad, or a second backward (retain_graph): the grads from
    pe_adaptive_linear_target_vjp, which recomputes the logits block by block. When the backward is recorded
    (create_graph=True): the grads from differentiable ops on logits recomputed from x and w, so that
    higher-order grads see how the logits depend on them."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap = spec["swap"]
        x, w = _ordered(ctx, pair)
        target = spec["target"]
        out, x_unit, w_unit = _library.ops().pe_adaptive_linear_target(x, w, target, spec["reduced"])
        ctx.units = (x_unit, w_unit) if spec["reduced"] else None  # (not saved: the backward hands them on)
        ctx.save_for_backward(x, w, target)
        return out

    @staticmethod
    def backward(ctx, out_grad):
        x, w, target = ctx.saved_tensor()
        units, ctx.units = ctx.units, None
        if paddle.is_grad_enabled():
            logits_grad = _target_grad_composed(paddle.matmul(x, w), target, out_grad)
            x_grad = paddle.matmul(logits_grad, w, transpose_y=True)
            w_grad = paddle.matmul(x, logits_grad, transpose_x=True)
            return _grads(ctx, x_grad, w_grad)
        c = _uniform(out_grad) if units is not None else None
        if c is None:
            x_grad, w_grad = _library.dygraph_op("pe_adaptive_linear_target_vjp")(x, w, target, out_grad)
        else:
            x_grad, w_grad = (u.scale_(c) if wanted else None for u, wanted in zip(units, ctx.wanted))
        return _grads(ctx, x_grad, w_grad)
