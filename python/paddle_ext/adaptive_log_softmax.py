"""paddle_ext.adaptive_log_softmax: the fused per-cluster ops and the adaptive softmax built on them.

The public layer is ``paddle_ext.nn.AdaptiveLogSoftmaxWithLoss`` and the functional form
``paddle_ext.nn.functional.adaptive_log_softmax_with_loss``; both run on the two ops here:

* ``adaptive_log_softmax_target(logits, target)``: ``logits[m, target[m]] - logsumexp(logits[m])``,
  without materialising the ``[M, K]`` log-softmax; its grad is ``(onehot - softmax) * out_grad``
  (so the loss ``-out`` gets PyTorch's ``softmax - onehot``).
* ``adaptive_log_softmax_full(logits, offset)``: ``logits - logsumexp(row) + offset[:, None]``
  (the full log-probabilities of one cluster, for ``log_prob`` and ``predict``).

The projections (head, tail clusters) of float32 CPU tensors outside auto_cast run on a third op,
``pe_adaptive_matmul``: oneDNN's sgemm, from the libdnnl that the user's Paddle loaded, on paddle_ext's
thread count (Paddle's bundled MKL takes a slow generic path on AMD CPUs). Every other matmul (float64,
16-bit, auto_cast, GPU, a Paddle without oneDNN) stays on Paddle's ``matmul``/``linear``. Paddle's own CPU ``log_softmax`` is O(K^2) per row
on wide rows (docs/architecture.md, "Paddle's custom-op API"), so nothing here uses it. Each cluster is
computed only for the rows whose label falls in it (``nonzero`` + ``gather``/``scatter_nd``), which works
with empty clusters in dygraph, in static programs and in exported models alike.
"""

from __future__ import annotations

import numbers

import numpy as np

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from . import _amp, _fill, _library
from .put_along_axis import _apply as _pair_apply
from .put_along_axis import _grads, _ordered
from ._checks import (FLOATING_DTYPES, INTEGER_DTYPES, check_int, check_tensor, dtype_name, is_floating, is_integer,
                      known_dim, run_kernel_checked, same_dtype)

_OP = "adaptive_log_softmax_with_loss"
_INT64 = paddle.int64
REDUCTIONS = ("mean", "sum", "none")


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


# ---------------------------------------------------------------------------------------------------
# Argument checks shared by the layer and the functional form


def check_layer_sizes(width, width_arg, n_classes, cutoffs, div_value, where):
    """An adaptive layer's sizes -> (width, n_classes, cutoffs): positive ints, at least two classes,
    increasing cutoffs inside (0, n_classes), a positive div_value."""
    width = check_int(width, width_arg, where)
    n_classes = check_int(n_classes, "n_classes", where)
    if width <= 0:
        raise ValueError(f"{where}: {width_arg} must be positive, got {width}")
    if n_classes < 2:
        raise ValueError(f"{where}: n_classes must be at least 2, got {n_classes}")
    cutoffs = check_cutoffs(cutoffs, n_classes, where, functional=False)
    if not float(div_value) > 0:
        raise ValueError(f"{where}: div_value must be positive, got {div_value}")
    return width, n_classes, cutoffs


def check_cutoffs(cutoffs, n_classes, where: str, functional: bool) -> list[int]:
    """The layer takes cutoffs < n_classes (n_classes is appended, as in Paddle); the functional form
    takes the full list, ending in n_classes. A bad list raises Paddle's ValueError, in Paddle's words,
    with the value and what is wrong with it."""
    if functional:
        rule = "ending in n_classes" if n_classes is None else f"ending in n_classes = {n_classes}"
    else:
        rule = f"where each value is between 1 and n_classes-1 = {n_classes - 1}"

    def bad(what, shown=cutoffs):
        return ValueError(f"{where}: cutoffs should be a sequence of unique, positive integers sorted in an "
                          f"increasing order, {rule}; got cutoffs={shown!r} ({what})")

    try:
        values = list(cutoffs)
    except TypeError:
        raise bad("not a sequence") from None
    if not values:
        raise bad("empty")
    out = []
    for c in values:
        if isinstance(c, paddle.Tensor) and c.size == 1 and c.dtype in INTEGER_DTYPES and paddle.in_dynamic_mode():
            c = int(c)
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise bad(f"{c!r} is not an int", values)
        out.append(int(c))
    if any(b <= a for a, b in zip(out, out[1:])):
        raise bad("not unique and increasing", out)
    if out[0] <= 0:
        raise bad("not positive", out)
    if functional:
        if n_classes is not None and out[-1] != n_classes:
            raise bad(f"the last is not {n_classes}", out)
    elif out[-1] > n_classes - 1:
        raise bad(f"{out[-1]} > {n_classes - 1}", out)
    return out


def _check_input_label(input, label, in_features, where):
    check_tensor(input, "input", where)
    if input.dtype not in FLOATING_DTYPES:
        raise TypeError(f"{where}: input must be float16, bfloat16, float32 or float64, got {dtype_name(input.dtype)}")
    if len(input.shape) not in (1, 2):
        raise ValueError(f"{where}: input must be 1-D [in_features] or 2-D [N, in_features], got shape "
                         f"{list(input.shape)}")
    if known_dim(input.shape[-1]) and input.shape[-1] != in_features:
        raise ValueError(f"{where}: input has {input.shape[-1]} features (shape {list(input.shape)}), "
                         f"expected in_features={in_features}")
    if label is None:
        return None
    label = _as_int64(label, "label", where)
    if len(input.shape) == 2 and len(label.shape) != 1:
        raise ValueError(f"{where}: a 2-D input needs a 1-D label, got label shape {list(label.shape)}")
    if len(input.shape) == 1 and len(label.shape) != 0:
        raise ValueError(f"{where}: a 1-D (unbatched) input needs a 0-D label, got label shape {list(label.shape)}")
    if len(input.shape) == 2 and known_dim(input.shape[0], label.shape[0]) and input.shape[0] != label.shape[0]:
        raise ValueError(f"{where}: input has batch size {input.shape[0]} but label has {label.shape[0]}")
    return label


def _check_label_range(label, n_classes, where, arg="label"):
    """label, or a LabelOutOfRangeError naming the first bad position. In a static graph the values are
    unknown here: the check becomes an op that raises (an IndexError) when the graph runs."""
    if not paddle.in_dynamic_mode():
        return _library.ops().pe_check_index(label, 0, n_classes, f"{where}: {arg}")
    if label.size > 0:
        values = label.numpy().reshape(-1)
        bad = np.flatnonzero((values < 0) | (values >= n_classes))
        if bad.size:
            raise LabelOutOfRangeError(f"{where}: {arg}[{bad[0]}] = {values[bad[0]]} is out of range [0, {n_classes})")
    return label


def check_loss_args(ignore_index, reduction, where):
    """ignore_index as an int, after checking reduction (nll_loss's arguments, its defaults)."""
    ignore_index = check_int(ignore_index, "ignore_index", where)
    if reduction not in REDUCTIONS:
        raise ValueError(f"{where}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return ignore_index


def _mask_ignored(label, ignore_index):
    """(label with each ignored row moved to class 0, the [N] bool mask of the rows that count). Class 0
    is in the shortlist: the head op gets a valid target, and no tail cluster selects an ignored row.
    In dygraph a batch without ignored rows gets (label, None): no masking ops (~80 us a call)."""
    if paddle.in_dynamic_mode() and not (label.numpy() == ignore_index).any():
        return label, None
    keep = label != ignore_index
    return paddle.where(keep, label, _fill.zeros_like(label)), keep


def _check_weights(head_weight, tail_weights, head_bias, cutoffs, in_features, where):
    shortlist, n_clusters = cutoffs[0], len(cutoffs) - 1
    check_tensor(head_weight, "head_weight", where)
    if list(head_weight.shape) != [in_features, shortlist + n_clusters]:
        raise ValueError(f"{where}: head_weight has shape {list(head_weight.shape)}, expected "
                         f"[{in_features}, {shortlist + n_clusters}] (in_features, cutoffs[0] + n_clusters)")
    if head_bias is not None:
        check_tensor(head_bias, "head_bias", where)
        if list(head_bias.shape) != [shortlist + n_clusters]:
            raise ValueError(f"{where}: head_bias has shape {list(head_bias.shape)}, expected "
                             f"[{shortlist + n_clusters}]")
    if len(tail_weights) != n_clusters:
        raise ValueError(f"{where}: tail_weights has {len(tail_weights)} clusters, cutoffs {cutoffs} give {n_clusters}")
    for i, pair in enumerate(tail_weights):
        if len(pair) != 2:
            raise ValueError(f"{where}: tail_weights[{i}] must be [W1, W2], got {len(pair)} tensors")
        w1, w2 = pair
        check_tensor(w1, f"tail_weights[{i}][0]", where)
        check_tensor(w2, f"tail_weights[{i}][1]", where)
        size = cutoffs[i + 1] - cutoffs[i]
        if len(w1.shape) != 2 or w1.shape[0] != in_features:
            raise ValueError(f"{where}: tail_weights[{i}][0] has shape {list(w1.shape)}, expected [{in_features}, hsz]")
        if i == n_clusters - 1 and len(w2.shape) == 2 and w2.shape[0] == w1.shape[1] and w2.shape[1] != size:
            raise ValueError(f"{where}: cutoffs must end in n_classes = {cutoffs[i] + w2.shape[1]} (tail_weights[{i}][1] "
                             f"has {w2.shape[1]} columns for classes from {cutoffs[i]}), got {cutoffs}")
        if list(w2.shape) != [w1.shape[1], size]:
            raise ValueError(f"{where}: tail_weights[{i}][1] has shape {list(w2.shape)}, expected "
                             f"[{w1.shape[1]}, {size}] (cluster {i} holds classes [{cutoffs[i]}, {cutoffs[i + 1]}))")


# ---------------------------------------------------------------------------------------------------
# The computation


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


def _projected_target(x, weight, target, dtype, bias=None):
    """_target(x @ weight + bias, target) with the logits in ``dtype``. In dygraph with grads, where the product
    runs on pe_adaptive_matmul, one PyLayer (_LinearTarget) whose backward is one op for both grads."""
    if bias is None and paddle.in_dynamic_mode() and not (x.stop_gradient and weight.stop_gradient) \
            and _gemm_fits(x, weight):
        return _pair_apply(_LinearTarget, x, weight, {"target": target})
    return _target(_cast(_linear(x, weight, bias), dtype), target)


class _LinearTarget(PyLayer):
    """Dygraph autograd of pe_adaptive_log_softmax_target(x @ w): first-order grads from
    pe_adaptive_linear_target_vjp (one op for both, the logits grad in its scratch); when the backward is recorded
    (create_graph=True), the same grads from differentiable ops on logits recomputed from x and w, so that
    higher-order grads see how the logits depend on them."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap = spec["swap"]
        x, w = _ordered(ctx, pair)
        target = spec["target"]
        logits = _library.ops().pe_adaptive_matmul(x, w, False, False)
        out, lse = _library.ops().pe_adaptive_log_softmax_target(logits, target)
        ctx.save_for_backward(x, w, target, logits, lse)
        return out

    @staticmethod
    def backward(ctx, out_grad):
        x, w, target, logits, lse = ctx.saved_tensor()
        if not paddle.is_grad_enabled():
            x_grad, w_grad = _library.dygraph_op("pe_adaptive_linear_target_vjp")(x, w, target, logits, lse, out_grad)
        else:
            logits_grad = _target_grad_composed(paddle.matmul(x, w), target, out_grad)
            x_grad = paddle.matmul(logits_grad, w, transpose_y=True)
            w_grad = paddle.matmul(x, logits_grad, transpose_x=True)
        return _grads(ctx, x_grad, w_grad)


def _argmax_rows(x):
    """paddle.argmax(x, axis=1); in a legacy-IR program the first position of the row's maximum (or of its
    first NaN), from max, where and min."""
    if not _library.in_legacy_program():
        return paddle.argmax(x, axis=1)
    k = x.shape[1]
    position = _fill.zeros_like(x, "int64") + paddle.arange(k, dtype="int64").reshape([1, k])
    wins = (x == paddle.max(x, axis=1, keepdim=True)) | (x != x)
    return paddle.min(paddle.where(wins, position, _fill.full_like(position, k)), axis=1)


def _grads_must_sync():
    """Whether every parameter must produce a grad: under data parallelism (paddle.DataParallel over 2+
    processes) a parameter without a grad on one rank breaks the gradient all-reduce (PreconditionNotMet
    on that rank while the others wait, or the parameter silently left out), unless
    find_unused_parameters=True. A single process keeps grads None where a cluster has no label, so
    optimizers leave its parameters (and their moments) alone, as before, at no cost (0.2 us)."""
    return paddle.distributed.is_initialized() and paddle.distributed.get_world_size() > 1 and paddle.is_grad_enabled()


class _ZeroGrads(PyLayer):
    """Identity on x that gives each weight an exact zero grad: the grads of a tail cluster without
    labels (running it on zero rows would do the same, but Paddle 3.3.1's matmul grad fails on an
    empty batch whose input needs no grad)."""

    @staticmethod
    def forward(ctx, x, *weights):
        ctx.weights = [(w.shape, w.dtype) for w in weights]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return (grad, *(paddle.zeros(shape, dtype) for shape, dtype in ctx.weights))


# Paddle 3.0.0's executor fails the static programs of the gathered rows and of the zero row ("Tensor holds
# no memory"): before 3.2, static programs run every row through the head (ignored ones cut by a where) and
# add no zero row.
_OLD_STATIC = tuple(int(v) for v in paddle.__version__.split(".")[:2] if v.isdigit()) < (3, 2)


def _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias):
    """[N] log p(label | input) for a 2-D input, in the compute dtype."""
    shortlist = cutoffs[0]
    dtype = _compute_dtype(input.dtype)
    # The head column of each row: its label in the shortlist, else shortlist + (cluster index - 1).
    cluster = _fill.zeros_like(label)
    for c in cutoffs[:-1]:
        cluster = cluster + (label >= c).astype("int64")
    head_target = paddle.where(cluster == 0, label, cluster + (shortlist - 1))
    output = _projected_target(input, head_weight, head_target, dtype, head_bias)
    for i in range(len(cutoffs) - 1):
        low, high = cutoffs[i], cutoffs[i + 1]
        rows = paddle.nonzero((label >= low) & (label < high))  # [k, 1]
        if paddle.in_dynamic_mode() and rows.shape[0] == 0:
            # No label in this cluster: nothing to compute (static graphs run it on 0 rows).
            trained = [w for w in tail_weights[i] if not w.stop_gradient] if _grads_must_sync() else []
            if trained:
                output = _ZeroGrads.apply(output, *trained)
            continue
        flat = rows.reshape([-1])
        x, y = _with_zero_row(paddle.gather(input, flat), paddle.gather(label, flat) - low)
        local = _projected_target(_gemm(x, tail_weights[i][0]), tail_weights[i][1], y, dtype)
        output = _index_add(output, flat, local, padded=True)
    return output


def _kept_log_prob(input, label, keep, head_weight, tail_weights, cutoffs, head_bias):
    """[N] log p(label | input), 0 on the rows that ``keep`` masks out (None: every row counts). The rows
    that count are gathered once and only they run through the head and the tails, then are scattered
    back (index_add): an ignored row costs no GEMM row and its input is never read. In dygraph a batch of
    only ignored rows runs every row cut by a where instead: no matmul sees an empty batch, and the head
    weight gets exact zero grads (which DataParallel needs)."""
    if keep is None:
        return _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias)
    rows = paddle.nonzero(keep).reshape([-1])
    if (paddle.in_dynamic_mode() and rows.shape[0] == 0) or (not paddle.in_dynamic_mode() and _OLD_STATIC):
        output = _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias)
        return paddle.where(keep, output, _fill.zeros_like(output))  # where: no NaN * 0 reaches the output
    # (paddle.inference fails on an all-ignored batch when the head sees no row)
    x, y = _with_zero_row(paddle.gather(input, rows), paddle.gather(label, rows))
    kept = _target_log_prob(x, y, head_weight, tail_weights, cutoffs, head_bias)
    return _index_add(_fill.zeros_like(keep, kept.dtype), rows, kept, padded=True)


def _with_zero_row(x, label=None):
    """In a static program, (x, label) with a zero row of class 0 appended, whose output goes to
    _index_add's scratch slot (padded=True): a row selection there may be empty at run time, and a matmul
    never sees an empty batch then (bfloat16 matmul grads of one came out NaN under AMP; paddle.inference
    fails on some). Its grads are exact zeros. In dygraph, where empty selections are skipped, unchanged."""
    if paddle.in_dynamic_mode() or _OLD_STATIC:
        return x, label
    x = paddle.concat([x, paddle.zeros([1, x.shape[1]], x.dtype)])
    return x, None if label is None else paddle.concat([label, paddle.zeros([1], label.dtype)])


def _index_add(output, index, values, padded=False):
    """``paddle.index_add`` along axis 0 (scatter_nd_add has no second-order grad). A static graph's index
    may be empty at run time, which index_add rejects in Paddle 3.0.0 and 3.1.0 ("The length of Input(Index)
    can't be 0"): there the add also writes to a scratch slot in front, so it never is; ``padded``
    values (from _with_zero_row) already end in the row for that slot, otherwise a zero is added there.
    The slot is row 0, not one past the end: that would need paddle.shape, which Paddle 3.0.0's PIR cannot
    run on bfloat16 tensors."""
    if paddle.in_dynamic_mode():
        return paddle.index_add(output, index, 0, values)
    scratch = paddle.zeros([1, *output.shape[1:]], output.dtype)  # (the trailing dims are static)
    index = paddle.concat([index + 1, paddle.zeros([1], index.dtype)])
    if not padded or _OLD_STATIC:
        values = paddle.concat([values, scratch.astype(values.dtype)])
    return paddle.index_add(paddle.concat([scratch, output]), index, 0, values)[1:]


def _full_log_prob(input, head, tail_weights, cutoffs):
    """[N, n_classes] log-probabilities, from the input and its head logits."""
    shortlist = cutoffs[0]
    dtype = _compute_dtype(input.dtype)
    head = _cast(head, dtype)
    zeros = _fill.zeros_like(head[:, 0])
    zeros.stop_gradient = True
    head_lp = _full(head, zeros)
    pieces = [head_lp[:, :shortlist]]
    for i in range(len(cutoffs) - 1):
        logits = _cast(_gemm(_gemm(input, tail_weights[i][0]), tail_weights[i][1]), dtype)
        lp = _full(logits, head_lp[:, shortlist + i])
        pieces.append(lp)
    return paddle.concat(pieces, axis=1) if len(pieces) > 1 else pieces[0]


def _out_dtype(input):
    """input's dtype; float32 (the compute dtype) under auto_cast, as Paddle's log_softmax and losses at O1."""
    return input.dtype if _amp.amp_level() == "O0" else _compute_dtype(input.dtype)


def _prepare(input, head_weight, tail_weights, head_bias):
    """The arguments in the compute dtype (float32 for 16-bit inputs). Under auto_cast the matmuls keep
    AMP's dtype (the casts would only be undone) and their logits are cast instead (_target_log_prob)."""
    if _amp.amp_level() != "O0":
        return input, head_weight, tail_weights, head_bias
    dtype = _compute_dtype(input.dtype)
    input = _cast(input, dtype)
    head_weight = _cast(head_weight, dtype)
    head_bias = _cast(head_bias, dtype)
    tail_weights = [[_cast(w, dtype) for w in pair] for pair in tail_weights]
    return input, head_weight, tail_weights, head_bias


@_library.unified
def adaptive_log_softmax_with_loss(input, label, head_weight, tail_weights, cutoffs, head_bias=None, name=None, *,
                                   ignore_index=-100, reduction="mean"):
    """Adaptive softmax log-likelihood (Grave et al. 2017), Paddle 3.3.1's signature, plus nll_loss's
    ``ignore_index`` and ``reduction`` (keyword-only).

    Args:
        input (Tensor): [N, in_features], or [in_features] with a 0-D ``label`` (unbatched).
        label (Tensor): [N] (or 0-D) integer classes in ``[0, n_classes)``, sorted by frequency.
        head_weight (Tensor): [in_features, cutoffs[0] + n_clusters].
        tail_weights (list): per tail cluster i, ``[W1 [in_features, hsz_i], W2 [hsz_i, cutoffs[i+1] - cutoffs[i]]]``.
        cutoffs (Sequence[int]): the FULL list of cluster boundaries, strictly increasing and ending in
            ``n_classes`` (as the layer passes ``[*cutoffs, n_classes]``).
        head_bias (Tensor|None): [cutoffs[0] + n_clusters], or None.
        ignore_index (int): rows whose label equals it count for nothing (output 0, no grad, no tail work).
        reduction (str): 'mean' (over the rows that count; 0 when none does, as nll_loss), 'sum' or
            'none' (the per-row negative log-likelihood, 0 on ignored rows).

    Returns:
        (output, loss): output [N] (0-D when unbatched) the log-probability of each label (0 on ignored
        rows), loss the reduced negative log-likelihood, both in ``input``'s dtype.
    """
    ignore_index = check_loss_args(ignore_index, reduction, _OP)
    cutoffs = check_cutoffs(cutoffs, None, _OP, functional=True)
    check_tensor(head_weight, "head_weight", _OP)
    in_features = head_weight.shape[0]
    label = _check_input_label(input, label, in_features, _OP)
    _check_weights(head_weight, tail_weights, head_bias, cutoffs, in_features, _OP)
    label, keep = _mask_ignored(label, ignore_index)
    label = _check_label_range(label, cutoffs[-1], _OP)
    return adaptive_log_softmax_with_loss_checked(input, label, head_weight, tail_weights, cutoffs, head_bias,
                                                  keep=keep, reduction=reduction)


def adaptive_log_softmax_with_loss_checked(input, label, head_weight, tail_weights, cutoffs, head_bias=None,
                                           keep=None, reduction="mean"):
    """The computation of adaptive_log_softmax_with_loss on arguments already validated (by the layer);
    ``keep`` masks the rows that count (None: all), whose ``label`` is already a valid class."""
    batched = len(input.shape) == 2
    out_dtype = _out_dtype(input)
    x, head_weight, tail_weights, head_bias = _prepare(input, head_weight, tail_weights, head_bias)
    if not batched:
        x, label = x.unsqueeze(0), label.unsqueeze(0)
        keep = None if keep is None else keep.unsqueeze(0)
    output = _kept_log_prob(x, label, keep, head_weight, tail_weights, cutoffs, head_bias)
    loss = _reduce(output, keep, reduction)
    if not batched:
        output = output.squeeze(0)
        loss = loss.squeeze(0) if reduction == "none" else loss
    return _cast(output, out_dtype), _cast(loss, out_dtype)


def _reduce(output, keep, reduction):
    """nll_loss's reductions of -output: 'mean' divides by the number of rows that count, and gives 0 when
    none does (as paddle.nn.functional.nll_loss)."""
    if reduction == "none":
        return -output
    total = -_sum(output)
    if reduction == "sum":
        return total
    if keep is None:  # every row counts; an empty batch gives 0 as an all-ignored one
        n = output.shape[0]
        return total / max(n, 1) if known_dim(n) else (-output).mean()
    return total / paddle.clip(_sum(keep.astype(output.dtype)), min=1.0)


def _sum(x):
    """The sum of a 0-d or 1-D tensor, also in legacy-IR programs."""
    return x if len(x.shape) == 0 else _library.sum_along(x, 0)


def adaptive_log_prob(input, head_weight, tail_weights, cutoffs, head_bias=None):
    """[N, n_classes] (or [n_classes]) log-probabilities of every class, in ``input``'s dtype."""
    out_dtype = _out_dtype(input)
    batched = len(input.shape) == 2
    x, head_weight, tail_weights, head_bias = _prepare(input, head_weight, tail_weights, head_bias)
    if not batched:
        x = x.unsqueeze(0)
    out = _full_log_prob(x, _linear(x, head_weight, head_bias), tail_weights, cutoffs)
    if not batched:
        out = out.squeeze(0)
    return _cast(out, out_dtype)


def adaptive_predict(input, head_weight, tail_weights, cutoffs, head_bias=None):
    """[N] (or 0-D) int64: argmax of the log-probabilities. In dygraph the full distribution is computed
    only for the rows whose head argmax is a cluster (a shortlist argmax already beats every cluster
    member); a static graph computes it for every row, since Paddle's inference kernels (oneDNN concat)
    crash on the empty batch that the row selection can produce."""
    batched = len(input.shape) == 2
    x, head_weight, tail_weights, head_bias = _prepare(input, head_weight, tail_weights, head_bias)
    if not batched:
        x = x.unsqueeze(0)
    head = _linear(x, head_weight, head_bias)
    if not paddle.in_dynamic_mode():
        pred = _argmax_rows(_full_log_prob(x, head, tail_weights, cutoffs))
    else:
        pred = paddle.argmax(head, axis=1)
        rows = paddle.nonzero(pred >= cutoffs[0])
        if rows.shape[0] > 0:
            flat = rows.reshape([-1])
            lp = _full_log_prob(paddle.gather(x, flat), paddle.gather(head, flat), tail_weights, cutoffs)
            pred = paddle.scatter(pred, flat, paddle.argmax(lp, axis=1))
    return pred if batched else pred.squeeze(0)
