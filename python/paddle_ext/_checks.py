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


@paddle.jit.not_to_static  # (these helpers: plain Python on static values, nothing for to_static's AST to convert)
def known_dim(*dims) -> bool:
    """Every dimension known when the graph is built: a dynamic one is -1 or None in a static program, a
    Tensor under to_static."""
    for d in dims:
        if d.__class__ is int:  # the usual dim, without the ABC isinstance below (about 1 us each)
            if d < 0:
                return False
        elif not (isinstance(d, numbers.Integral) and d >= 0):
            return False
    return True


@paddle.jit.not_to_static
def is_int(value) -> bool:
    """An integral number that is not a bool (a plain int is told without an ABC isinstance)."""
    cls = value.__class__
    if cls is int:
        return True
    return cls is not bool and cls is not float and isinstance(value, numbers.Integral)


@paddle.jit.not_to_static
def is_real(value) -> bool:
    """A real number that is not a bool (plain floats and ints are told without an ABC isinstance)."""
    cls = value.__class__
    if cls is float or cls is int:
        return True
    return cls is not bool and isinstance(value, numbers.Real)


_FLOAT32, _FLOAT64 = DataType.FLOAT32, DataType.FLOAT64


@paddle.jit.not_to_static
def is_floating(dtype) -> bool:
    """dtype in FLOATING_DTYPES, float32 and float64 by identity first (hashing a dtype costs about a microsecond)."""
    return dtype is _FLOAT32 or dtype is _FLOAT64 or dtype in FLOATING_DTYPES


_INT64, _INT32 = DataType.INT64, DataType.INT32


@paddle.jit.not_to_static
def is_integer(dtype) -> bool:
    """dtype in INTEGER_DTYPES, int64 and int32 by identity first."""
    return dtype is _INT64 or dtype is _INT32 or dtype in INTEGER_DTYPES


@paddle.jit.not_to_static
def is_plain_dtype(dtype) -> bool:
    """float32 or float64 (of dygraph and PIR), by identity: the dtypes a float op takes without a cast."""
    return dtype is _FLOAT32 or dtype is _FLOAT64


@paddle.jit.not_to_static
def is_plain_float(x) -> bool:
    """A dygraph tensor of dtype float32 or float64, by identity (the common call, which needs no cast)."""
    if not isinstance(x, paddle.Tensor):
        return False
    dtype = x.dtype
    return dtype is _FLOAT32 or dtype is _FLOAT64


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


def index64(x):
    """An int32 index tensor (boundary, symbols, ranges) as int64, once where the public function starts, so that
    int32 and int64 go the same way (the fast lane, the kernels); anything else as it is, for the checks to name."""
    if x is None or (x.__class__ is paddle.Tensor and x.dtype is _INT64):
        return x
    if is_tensor(x) and same_dtype(canonical_dtype(x.dtype), _INT32):
        return x.astype("int64")
    return x


def choice(value, choices):
    """A string option as the one of ``choices`` it equals (a str subclass, NumPy's str_), once where the public
    function starts, so that no code path reads the user's spelling; anything else as it is, for the checks to
    name."""
    if value.__class__ is not str and isinstance(value, str):
        for c in choices:
            if value == c:
                return c
    return value


def check_int(value, arg: str, op: str) -> int:
    if value.__class__ is int:
        return value
    if not is_int(value):
        raise TypeError(f"{op}: {arg} must be an int, got {value!r}")
    return int(value)


def check_axis(axis, rank: int, op: str, arg: str = "axis") -> int:
    """Normalise a possibly negative axis; a 0-d tensor accepts axis 0 and -1, as in Paddle."""
    axis = check_int(axis, arg, op)
    r = max(rank, 1)
    if not -r <= axis < r:
        raise IndexError(f"{op}: {arg}={axis} is out of range for a tensor of rank {rank} (expected {-r} <= {arg} < {r})")
    return axis + r if axis < 0 else axis


def run_kernel_checked(deferred, check, check_args, fn, *args):
    """fn(*args), whose op's kernel checks input values that ``check(*check_args)`` would read here (``deferred``:
    they were left to it). If fn fails, check runs in full, so bad input raises the Python error the checks
    raise, in their order (and any other failure fn's own error). Not deferred: fn(*args) as is."""
    if not deferred:
        return fn(*args)
    try:
        return fn(*args)
    except (TypeError, ValueError, IndexError) as err:  # (the check below runs outside the handler: no chained traceback)
        failure = err
    check(*check_args)
    raise failure
