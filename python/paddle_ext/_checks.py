"""Argument checks shared by the public APIs: each raises the Python exception a Paddle user expects,
naming the argument and the bad value, before anything reaches C++."""

from __future__ import annotations

import numbers

import paddle
from paddle.base.core import DataType, VarDesc
from paddle.pir.core import datatype_to_vartype, vartype_to_datatype

# Legacy-IR programs (paddle.pir_utils.OldIrGuard, FLAGS_enable_pir_api=0) give tensors a VarType dtype
# and make paddle.float32 & co. VarTypes; everywhere else they are DataTypes. No VarType equals a DataType.
_AS_DATATYPE = dict(vartype_to_datatype)


def canonical_dtype(dtype):
    """A paddle dtype as its DataType, whichever IR named it (any other value is returned as it is)."""
    return _AS_DATATYPE.get(dtype, dtype)


class Dtypes(tuple):
    """A tuple of DataTypes whose ``in`` also takes the VarType that a legacy-IR tensor reports. It looks
    the dtype up in a set: comparing pybind dtypes with == costs about a microsecond each."""

    def __new__(cls, dtypes):
        self = super().__new__(cls, dtypes)
        self._members = frozenset(self) | {datatype_to_vartype[d] for d in self}
        return self

    def __contains__(self, dtype):
        return dtype in self._members


FLOATING_DTYPES = Dtypes((DataType.FLOAT16, DataType.BFLOAT16, DataType.FLOAT32, DataType.FLOAT64))
COMPLEX_DTYPES = Dtypes((DataType.COMPLEX64, DataType.COMPLEX128))
INTEGER_DTYPES = Dtypes((DataType.INT32, DataType.INT64, DataType.INT16, DataType.UINT8, DataType.INT8))


# Dygraph tensors, PIR values (static mode, to_static) and old-IR variables.
TENSOR_TYPES = (paddle.Tensor, paddle.pir.Value, paddle.static.Variable)


def is_tensor(x) -> bool:
    return isinstance(x, TENSOR_TYPES)


def check_tensor(x, arg: str, op: str) -> None:
    if not is_tensor(x):
        raise TypeError(f"{op}: {arg} must be a paddle.Tensor, got {type(x).__name__}")


def known_dim(*dims) -> bool:
    """Every dimension known when the graph is built: a dynamic one is -1 or None in a static program, a
    Tensor under to_static."""
    return all(isinstance(d, numbers.Integral) and d >= 0 for d in dims)


def same_dtype(a, b) -> bool:
    """a == b, by identity first: dygraph dtypes are singletons, and comparing them by value costs microseconds."""
    return a is b or a == b


def dtype_name(dtype) -> str:
    return str(canonical_dtype(dtype)).replace("paddle.", "")


def to_dtype(dtype, arg: str, op: str):
    """str / numpy / paddle dtype (of either IR) -> its DataType."""
    if isinstance(dtype, (DataType, VarDesc.VarType)):
        return canonical_dtype(dtype)
    try:
        from paddle.base.data_feeder import convert_dtype  # noqa: PLC0415

        name = convert_dtype(dtype)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{op}: {arg}={dtype!r} is not a dtype") from err
    # convert_dtype names bfloat16 'uint16' (its NumPy storage type)
    return DataType.BFLOAT16 if name == "uint16" else canonical_dtype(getattr(paddle, name))


def floating_dtype(dtype, arg: str, op: str, allow_complex: bool = False):
    d = to_dtype(dtype, arg, op)
    if d not in FLOATING_DTYPES and not (allow_complex and d in COMPLEX_DTYPES):
        expected = "float16, bfloat16, float32, float64, complex64 or complex128" if allow_complex else \
            "float16, bfloat16, float32 or float64"
        raise TypeError(f"{op}: {arg} must be {expected}, got {dtype_name(d)}")
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
