"""Argument checks shared by the layer, the functional form and the adaptive embedding."""

from __future__ import annotations

import numbers

import numpy as np

import paddle

from .. import _fill, _library
from .._checks import FLOATING_DTYPES, INTEGER_DTYPES, check_int, check_tensor, dtype_name, known_dim
from .ops import LabelOutOfRangeError, _as_int64

REDUCTIONS = ("mean", "sum", "none")


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
