"""paddle_ext.put_along_axis / put_along_axis_: scatter values along an axis with any reduction.

Mirrors ``paddle.put_along_axis`` (Paddle 3.x) with every reduction of ``torch.scatter_reduce`` plus
``assign``, exact grads for all of them, and bounds-checked indices (docs/put_along_axis.md).
"""

from __future__ import annotations

import numbers

import paddle

from . import _library
from ._checks import check_axis, check_tensor, dtype_name, is_tensor

OP = "put_along_axis"
REDUCES = {"assign": "assign", "add": "add", "mul": "mul", "multiply": "mul", "mean": "mean", "amin": "amin", "amax": "amax"}
SUPPORTED_DTYPES = (
    paddle.float16, paddle.bfloat16, paddle.float32, paddle.float64,
    paddle.int32, paddle.int64, paddle.int16, paddle.uint8,
)
_INDEX_ERROR_TAG = "[put_along_axis IndexError] "


def _shape(x) -> list[int]:
    return list(x.shape)


def _check_reduce(reduce, op: str) -> str:
    if not isinstance(reduce, str) or reduce not in REDUCES:
        raise ValueError(f"{op}: reduce={reduce!r} is not one of {', '.join(repr(r) for r in REDUCES)}")
    return REDUCES[reduce]


def _check_bool(value, arg: str, op: str) -> bool:
    if not isinstance(value, (bool, int)) or isinstance(value, numbers.Integral) and value not in (0, 1):
        raise TypeError(f"{op}: {arg} must be a bool, got {value!r}")
    return bool(value)


def _broadcast_values_shape(values_shape, target, op):
    """numpy broadcasting of values to the (broadcast) indices shape; a ValueError when impossible."""
    if len(values_shape) > len(target):
        raise ValueError(f"{op}: values of shape {values_shape} cannot be broadcast to the indices shape {target}")
    padded = [1] * (len(target) - len(values_shape)) + list(values_shape)
    for d, (v, t) in enumerate(zip(padded, target)):
        if v not in (1, t):
            raise ValueError(
                f"{op}: values of shape {values_shape} cannot be broadcast to the indices shape {target} "
                f"(dimension {d}: {v} vs {t})"
            )


def _prepare(arr, indices, values, axis, reduce, include_self, broadcast, op):
    """Checks and normalises the arguments; returns (indices, values, axis, reduce, include_self, pad_shape).

    ``pad_shape`` is None normally; with broadcast=False and indices smaller than arr off the axis it is
    the arr block that the scatter touches (see _scatter_block).
    """
    check_tensor(arr, "arr", op)
    check_tensor(indices, "indices", op)
    if arr.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: arr has dtype {dtype_name(arr.dtype)}; expected one of "
                        f"{', '.join(dtype_name(d) for d in SUPPORTED_DTYPES)}")
    if indices.dtype not in (paddle.int32, paddle.int64):
        raise TypeError(f"{op}: indices must be int32 or int64, got {dtype_name(indices.dtype)}")
    reduce = _check_reduce(reduce, op)
    include_self = _check_bool(include_self, "include_self", op)
    broadcast = _check_bool(broadcast, "broadcast", op)
    rank = len(arr.shape)
    axis = check_axis(axis, rank, op)
    a_shape, i_shape = _shape(arr), _shape(indices)
    if len(i_shape) != rank:
        raise ValueError(f"{op}: indices must have arr's rank {rank} (shape {a_shape}), got shape {i_shape}")
    if is_tensor(values):
        if values.dtype != arr.dtype:
            raise TypeError(f"{op}: values has dtype {dtype_name(values.dtype)} but arr has dtype "
                            f"{dtype_name(arr.dtype)}; cast one of them")
    elif isinstance(values, numbers.Number) and not isinstance(values, complex):
        values = paddle.full([], values, dtype=arr.dtype)
    else:
        raise TypeError(f"{op}: values must be a paddle.Tensor or a Python number, got {type(values).__name__}")
    v_shape = _shape(values)
    pad_shape = None
    if broadcast:
        target = list(a_shape)
        for d in range(rank):
            if d == axis:
                target[d] = i_shape[d]
            elif i_shape[d] not in (1, a_shape[d]):
                raise ValueError(
                    f"{op}: indices.shape[{d}] = {i_shape[d]} can be neither broadcast to nor matched with "
                    f"arr.shape[{d}] = {a_shape[d]} (expected 1 or {a_shape[d]})"
                )
        if i_shape != target:
            indices = paddle.broadcast_to(indices, target)
        _broadcast_values_shape(v_shape, target, op)
        if v_shape != target:
            values = paddle.broadcast_to(values, target)
    else:
        if len(v_shape) == 0:
            values = paddle.broadcast_to(values, i_shape)
        elif len(v_shape) != rank:
            raise ValueError(f"{op}: with broadcast=False values must have arr's rank {rank}, got shape {v_shape}")
        else:
            for d in range(rank):
                if d != axis and i_shape[d] > a_shape[d]:
                    raise ValueError(f"{op}: with broadcast=False indices.shape[{d}] = {i_shape[d]} must be "
                                     f"<= arr.shape[{d}] = {a_shape[d]}")
                if i_shape[d] > v_shape[d]:
                    raise ValueError(f"{op}: with broadcast=False indices.shape[{d}] = {i_shape[d]} must be "
                                     f"<= values.shape[{d}] = {v_shape[d]}")
            if v_shape != i_shape:  # torch's rule: values[p] pairs with indices[p]; the rest is unused
                values = paddle.slice(values, list(range(rank)), [0] * rank, i_shape)
        if any(i_shape[d] < a_shape[d] for d in range(rank) if d != axis):
            pad_shape = [a_shape[d] if d == axis else i_shape[d] for d in range(rank)]
    return indices, values, axis, reduce, include_self, pad_shape


def _call(fn, *args):
    """Runs the op; an out-of-range index (found by the C++ check before any write) is an IndexError."""
    try:
        return fn(*args)
    except (OSError, RuntimeError, ValueError) as err:
        text = str(err)
        if _INDEX_ERROR_TAG in text:
            message = text.split(_INDEX_ERROR_TAG, 1)[1].split("\n", 1)[0].strip()
            message = message.split(" (at ", 1)[0] if " (at /" in message else message
            raise IndexError(message) from None
        raise


def _scatter_block(arr, indices, values, axis, reduce, include_self, pad_shape, deterministic):
    """broadcast=False with indices narrower than arr off the axis: scatter into the block
    arr[:i0, ..., :, ..., :ik] and keep the rest of arr (grads flow through slice/pad/where)."""
    rank = len(pad_shape)
    block = paddle.slice(arr, list(range(rank)), [0] * rank, pad_shape)
    result = _call(_library.ops().pe_put_along_axis, block, indices, values, axis, reduce, include_self,
                   deterministic)
    pads = []
    for d in range(rank):
        pads += [0, arr.shape[d] - pad_shape[d]]
    mask = paddle.nn.functional.pad(paddle.ones(pad_shape, dtype="float32"), pads, mode="constant", value=0.0) > 0
    if result.dtype in (paddle.float16, paddle.bfloat16, paddle.float32, paddle.float64):
        padded = paddle.nn.functional.pad(result, pads, mode="constant", value=0.0)
    else:  # pad has no integer kernel for every dtype: go through float64 (exact for int32/16/uint8)
        padded = paddle.cast(paddle.nn.functional.pad(paddle.cast(result, "float64"), pads, value=0.0), result.dtype)
    return paddle.where(mask, padded, arr)


def put_along_axis(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True, name=None,
                   deterministic=False):
    """Scatter ``values`` into a copy of ``arr`` at ``indices`` along ``axis``, reducing duplicates.

    For each position ``p`` of ``indices`` (after broadcasting), the output slot is ``p`` with its
    ``axis`` coordinate replaced by ``indices[p]`` (negative values wrap once), and ``values[p]`` is
    combined into it.

    Args:
        arr (Tensor): float16, bfloat16, float32, float64, int32, int64, int16 or uint8.
        indices (Tensor): int32 or int64, arr's rank. With ``broadcast`` its dimensions off ``axis``
            are 1 or arr's; otherwise they are ``<=`` arr's and values'.
        values (Tensor|number): arr's dtype, broadcast to the indices' shape (``broadcast=True``) or at
            least the indices' shape (``broadcast=False``, the extra part is unused).
        axis (int): the axis to scatter along; negative counts from the end.
        reduce (str): 'assign' (the largest position of ``indices`` wins), 'add', 'mul'/'multiply',
            'mean', 'amin', 'amax' (a NaN value wins).
        include_self (bool): whether arr's own value takes part in the reduction of a written slot.
        broadcast (bool): broadcast ``indices`` to arr and ``values`` to ``indices`` (Paddle's default).
        name: unused, for API compatibility.
        deterministic (bool): on a GPU, 'add' and 'mean' sort the indices and fold each slot in
            position order (bit-identical run to run) instead of using float atomics. The CPU
            kernels are deterministic in every mode; 'assign' is deterministic on the GPU too.

    Returns:
        Tensor of arr's shape and dtype.

    Raises:
        TypeError: wrong dtypes (values' dtype must equal arr's).
        ValueError: bad reduce or shapes. IndexError: an index outside ``[-n, n)`` (dygraph).
    """
    indices, values, axis, reduce, include_self, pad_shape = _prepare(
        arr, indices, values, axis, reduce, include_self, broadcast, OP)
    deterministic = _check_bool(deterministic, "deterministic", OP)
    if pad_shape is not None:
        return _scatter_block(arr, indices, values, axis, reduce, include_self, pad_shape, deterministic)
    return _call(_library.ops().pe_put_along_axis, arr, indices, values, axis, reduce, include_self, deterministic)


def put_along_axis_(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True, name=None,
                    deterministic=False):
    """Inplace :func:`put_along_axis`: writes into ``arr`` and returns the result (dygraph and static mode).

    The returned tensor shares ``arr``'s memory and carries the autograd history: differentiate through
    it. Indices are checked before anything is written, so an IndexError leaves ``arr`` unchanged.
    """
    op = OP + "_"
    indices, values, axis, reduce, include_self, pad_shape = _prepare(
        arr, indices, values, axis, reduce, include_self, broadcast, op)
    deterministic = _check_bool(deterministic, "deterministic", op)
    if pad_shape is not None:
        result = _scatter_block(arr, indices, values, axis, reduce, include_self, pad_shape, deterministic)
        paddle.assign(result, output=arr)
        return arr
    needs_grad = not arr.stop_gradient or (is_tensor(values) and not values.stop_gradient)
    if needs_grad and include_self and reduce in ("mul", "amin", "amax"):
        # These grads need arr's value before the write, which the inplace op overwrites: run the
        # functional op on a copy (kept for its backward) and write the result into arr's buffer.
        out = _call(_library.ops().pe_put_along_axis, paddle.assign(arr), indices, values, axis, reduce,
                    include_self, deterministic)
        if paddle.in_dynamic_mode():
            with paddle.no_grad():
                arr.copy_(out, False)
            return out
        paddle.assign(out, output=arr)
        return out
    # Grads flow through the returned tensor, which shares arr's memory (Paddle's custom inplace ops
    # leave the Python object `arr` on its previous grad node).
    return _call(_library.ops().pe_put_along_axis_, arr, indices, values, axis, reduce, include_self,
                 deterministic)
