"""Shared by the put_along_axis specification files: the modes, the shape cases, input makers and
the two entry points."""

import numpy as np

import paddle_ext
from op_test import FLOAT_DTYPES


REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
# (arr shape, indices shape, axis): duplicates along the axis in every case.
CASES = [((5,), (7,), 0), ((4, 3), (6, 3), 0), ((3, 4), (3, 6), 1), ((3, 4), (3, 5), -1),
         ((2, 3, 4), (2, 5, 4), 1), ((3, 2, 4), (5, 2, 4), -3), ((2, 3, 70), (2, 3, 9), 2)]


def rand(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def rand_indices(arr_shape, idx_shape, axis, seed=1, negative=True, dtype=np.int64):
    n = arr_shape[axis]
    rng = np.random.default_rng(seed)
    low = -n if negative else 0
    return rng.integers(low, n, size=idx_shape).astype(dtype)


def put(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    return paddle_ext.put_along_axis(arr, indices, values, axis, reduce=reduce, include_self=include_self,
                                     broadcast=broadcast)


def put_inplace(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    return paddle_ext.put_along_axis_(arr, indices, values, axis, reduce=reduce, include_self=include_self,
                                      broadcast=broadcast)


def inputs_for(arr_shape, idx_shape, axis, seed=0, dtype=np.int64):
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1, dtype=dtype),
            "values": rand(idx_shape, seed + 2)}

ALL_DTYPES = FLOAT_DTYPES + ("int32", "int64", "int16", "uint8")


def int_values(dtype, shape, seed):
    """Values spread over the dtype's whole range (int64: a range whose int64 sums cannot overflow)."""
    info = np.iinfo(dtype)
    low, high = (info.min, info.max) if dtype != "int64" else (-2 ** 50, 2 ** 50)
    return np.random.default_rng(seed).integers(low, high, size=shape, endpoint=True).astype(dtype)
