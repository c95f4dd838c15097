"""The adaptive softmax over its head and tail clusters: the loss, ``log_prob`` and ``predict``. Each
cluster is computed only for the rows whose label falls in it (``nonzero`` + ``gather`` / ``index_add``),
which works with empty clusters in dygraph, in static programs and in exported models alike."""

from __future__ import annotations

import paddle
from paddle.autograd import PyLayer

from .. import _amp, _fill, _library
from .._checks import check_tensor, known_dim
from .checks import (_check_input_label, _check_label_range, _check_weights, _mask_ignored, check_cutoffs,
                     check_loss_args)
from .ops import _full
from .projection import _cast, _compute_dtype, _gemm, _linear, _projected_target

_OP = "adaptive_log_softmax_with_loss"


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


def _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias, reduced=False):
    """[N] log p(label | input) for a 2-D input, in the compute dtype. ``reduced``: the loss sums its outputs
    (reduction 'mean'/'sum': the projections form their grads in the forward, _projected_target)."""
    shortlist = cutoffs[0]
    dtype = _compute_dtype(input.dtype)
    # The head column of each row: its label in the shortlist, else shortlist + (cluster index - 1).
    cluster = _fill.zeros_like(label)
    for c in cutoffs[:-1]:
        cluster = cluster + (label >= c).astype("int64")
    head_target = paddle.where(cluster == 0, label, cluster + (shortlist - 1))
    output = _projected_target(input, head_weight, head_target, dtype, head_bias, reduced)
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
        local = _projected_target(_gemm(x, tail_weights[i][0]), tail_weights[i][1], y, dtype, reduced=reduced)
        output = _index_add(output, flat, local, padded=True)
    return output


def _kept_log_prob(input, label, keep, head_weight, tail_weights, cutoffs, head_bias, reduced=False):
    """[N] log p(label | input), 0 on the rows that ``keep`` masks out (None: every row counts). The rows
    that count are gathered once and only they run through the head and the tails, then are scattered
    back (index_add): an ignored row costs no GEMM row and its input is never read. In dygraph a batch of
    only ignored rows runs every row cut by a where instead: no matmul sees an empty batch, and the head
    weight gets exact zero grads (which DataParallel needs)."""
    if keep is None:
        return _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias, reduced)
    rows = paddle.nonzero(keep).reshape([-1])
    if (paddle.in_dynamic_mode() and rows.shape[0] == 0) or (not paddle.in_dynamic_mode() and _OLD_STATIC):
        output = _target_log_prob(input, label, head_weight, tail_weights, cutoffs, head_bias, reduced)
        return paddle.where(keep, output, _fill.zeros_like(output))  # where: no NaN * 0 reaches the output
    # (paddle.inference fails on an all-ignored batch when the head sees no row)
    x, y = _with_zero_row(paddle.gather(input, rows), paddle.gather(label, rows))
    kept = _target_log_prob(x, y, head_weight, tail_weights, cutoffs, head_bias, reduced)
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
    output = _kept_log_prob(x, label, keep, head_weight, tail_weights, cutoffs, head_bias, reduction != "none")
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


# Rows per block of log_prob and predict: ~32 MiB of float32 per [rows, width] piece, at least 16 rows.
_BLOCK_FLOATS = 8 << 20


def _row_blocks(n, width):
    """The [start, stop) row ranges of blocks of about _BLOCK_FLOATS / width rows."""
    rows = max(16, _BLOCK_FLOATS // max(width, 1))
    return [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]


def _records_grad(*tensors):
    return paddle.is_grad_enabled() and any(t is not None and not t.stop_gradient for t in tensors)


def adaptive_log_prob(input, head_weight, tail_weights, cutoffs, head_bias=None):
    """[N, n_classes] (or [n_classes]) log-probabilities of every class, in ``input``'s dtype. In dygraph without
    grads, in blocks of rows written into the output: only the output is whole. (With grads, the backward needs
    every cluster's logits, so the blocks would save nothing: computed whole.)"""
    out_dtype = _out_dtype(input)
    batched = len(input.shape) == 2
    x, head_weight, tail_weights, head_bias = _prepare(input, head_weight, tail_weights, head_bias)
    if not batched:
        x = x.unsqueeze(0)
    if paddle.in_dynamic_mode() and not _records_grad(x, head_weight, head_bias, *(w for p in tail_weights for w in p)):
        out = paddle.empty([x.shape[0], cutoffs[-1]], out_dtype)
        for r0, r1 in _row_blocks(x.shape[0], cutoffs[-1]):
            xb = x[r0:r1]
            out[r0:r1] = _cast(_full_log_prob(xb, _linear(xb, head_weight, head_bias), tail_weights, cutoffs),
                               out_dtype)
    else:
        out = _cast(_full_log_prob(x, _linear(x, head_weight, head_bias), tail_weights, cutoffs), out_dtype)
    return out if batched else out.squeeze(0)


def adaptive_predict(input, head_weight, tail_weights, cutoffs, head_bias=None):
    """[N] (or 0-D) int64: argmax of the log-probabilities. In dygraph, in blocks of rows, and in each block the
    full distribution is computed only for the rows whose head argmax is a cluster (a shortlist argmax already
    beats every cluster member); a static graph computes it for every row, since Paddle's inference kernels
    (oneDNN concat) crash on the empty batch that the row selection can produce."""
    batched = len(input.shape) == 2
    x, head_weight, tail_weights, head_bias = _prepare(input, head_weight, tail_weights, head_bias)
    if not batched:
        x = x.unsqueeze(0)
    if not paddle.in_dynamic_mode():
        pred = _argmax_rows(_full_log_prob(x, _linear(x, head_weight, head_bias), tail_weights, cutoffs))
        return pred if batched else pred.squeeze(0)
    width = max(b - a for a, b in zip([0, *cutoffs], cutoffs))
    preds = []
    for r0, r1 in _row_blocks(x.shape[0], width):
        xb = x[r0:r1]
        head = _linear(xb, head_weight, head_bias)
        pred = paddle.argmax(head, axis=1)
        rows = paddle.nonzero(pred >= cutoffs[0])
        if rows.shape[0] > 0:
            flat = rows.reshape([-1])
            lp = _full_log_prob(paddle.gather(xb, flat), paddle.gather(head, flat), tail_weights, cutoffs)
            pred = paddle.scatter(pred, flat, paddle.argmax(lp, axis=1))
        preds.append(pred)
    pred = preds[0] if len(preds) == 1 else paddle.concat(preds) if preds else paddle.zeros([0], "int64")
    return pred if batched else pred.squeeze(0)
