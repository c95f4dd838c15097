"""paddle_ext.logcumsumexp: log(cumsum(exp(x))) by a stable log-add-exp scan."""

from __future__ import annotations

import paddle

from . import _library
from ._checks import FLOATING_DTYPES, INTEGER_DTYPES, check_axis, check_tensor, dtype_name, floating_dtype


def logcumsumexp(x, axis=None, exclusive=False, reverse=False, dtype=None, name=None):
    """log(cumsum(exp(x))) along ``axis``, computed without overflow.

    Args:
        x (Tensor): input; integer tensors are cast to float32, as in Paddle.
        axis (int|None): the axis to scan; ``None`` scans the flattened tensor (1-D result).
            Negative values count from the end.
        exclusive (bool): ``out[0] = -inf`` and ``out[i] = logsumexp(x[:i])``.
        reverse (bool): scan from the last element to the first.
        dtype (str|paddle.dtype|None): cast ``x`` to this floating dtype first.
        name: unused, for API compatibility.

    Returns:
        Tensor of ``x``'s shape (1-D when ``axis`` is None) and floating dtype.
    """
    check_tensor(x, "x", "logcumsumexp")
    if dtype is not None:
        x = paddle.cast(x, floating_dtype(dtype, "dtype", "logcumsumexp"))
    elif x.dtype not in FLOATING_DTYPES:
        if x.dtype not in INTEGER_DTYPES and x.dtype != paddle.bool:
            raise TypeError(f"logcumsumexp: x has dtype {dtype_name(x.dtype)}; expected a real floating or integer dtype")
        x = paddle.cast(x, "float32")  # as paddle.logcumsumexp does
    flatten = axis is None
    axis = 0 if flatten else check_axis(axis, len(x.shape), "logcumsumexp")
    return _library.ops().logcumsumexp(x, axis, flatten, bool(exclusive), bool(reverse))

