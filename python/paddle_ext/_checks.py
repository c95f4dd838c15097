"""Argument checks shared by the public APIs: each raises the Python exception a Paddle user expects,
naming the argument and the bad value, before anything reaches C++."""

from __future__ import annotations

import numbers

import paddle

FLOATING_DTYPES = (paddle.float16, paddle.bfloat16, paddle.float32, paddle.float64)
INTEGER_DTYPES = (paddle.int32, paddle.int64, paddle.int16, paddle.uint8, paddle.int8)


# Dygraph tensors, PIR values (static mode, to_static) and old-IR variables.
TENSOR_TYPES = (paddle.Tensor, paddle.pir.Value, paddle.static.Variable)


def is_tensor(x) -> bool:
    return isinstance(x, TENSOR_TYPES)


def check_tensor(x, arg: str, op: str) -> None:
    if not is_tensor(x):
        raise TypeError(f"{op}: {arg} must be a paddle.Tensor, got {type(x).__name__}")


def known_dim(d) -> bool:
    """A dimension known when the graph is built (a dynamic one is -1, or None)."""
    return d is not None and d >= 0


def dtype_name(dtype) -> str:
    return str(dtype).replace("paddle.", "")


def to_dtype(dtype, arg: str, op: str):
    """str / numpy / paddle dtype -> paddle dtype."""
    try:
        from paddle.base.data_feeder import convert_dtype  # noqa: PLC0415

        name = convert_dtype(dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{op}: {arg}={dtype!r} is not a dtype") from err
    return getattr(paddle, name)


def floating_dtype(dtype, arg: str, op: str):
    d = to_dtype(dtype, arg, op)
    if d not in FLOATING_DTYPES:
        raise TypeError(f"{op}: {arg} must be float16, bfloat16, float32 or float64, got {dtype_name(d)}")
    return d


def check_int(value, arg: str, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {arg} must be an int, got {value!r}")
    return int(value)


def check_axis(axis, rank: int, op: str, arg: str = "axis") -> int:
    """Normalise a possibly negative axis; a 0-d tensor accepts axis 0 and -1, as in Paddle."""
    axis = check_int(axis, arg, op)
    r = max(rank, 1)
    if not -r <= axis < r:
        raise IndexError(f"{op}: {arg}={axis} is out of range for a tensor of rank {rank} (expected {-r} <= {arg} < {r})")
    return axis + r if axis < 0 else axis
