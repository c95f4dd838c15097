"""put_along_axis on integer arrays: mean rounds toward -inf, sums never overflow, add/mul wrap around."""

import numpy as np
import paddle
import pytest

import refs
from op_test import assert_close
from put_along_axis_cases import int_values, put, put_inplace, rand, rand_indices


# ========================================================================================= integer `mean`
# The mean of integers is the floor of sum / count (PyTorch's scatter_reduce). The mean always fits in
# the dtype, the sum need not: it is accumulated in int64 (int32 counts keep sums of up to 32-bit
# values exact there). `add` and `mul` wrap around in the dtype, as in PyTorch and the reference.
INT_DTYPES = ["uint8", "int16", "int32", "int64"]


def _int_put(arr, indices, values, axis, reduce, include_self, inplace=False):
    a = paddle.to_tensor(arr)
    fn = put_inplace if inplace else put
    out = fn(a, paddle.to_tensor(indices), paddle.to_tensor(values), axis, reduce=reduce,
             include_self=include_self)
    assert out.dtype == a.dtype
    return (a if inplace else out).numpy()


@pytest.mark.parametrize("dtype,count,expected", [("uint8", 100, 2), ("int16", 20000, 2), ("int32", 3, 2),
                                                   ("int64", 3, 2)])
def test_integer_mean_of_many_equal_values_is_their_floor_mean(dtype, count, expected):
    # arr = [0], `count` values of 3 at index 0 -> floor(3 * count / (count + 1))
    out = _int_put(np.zeros(1, dtype), np.zeros(count, np.int64), np.full(count, 3, dtype), 0, "mean", True)
    assert out.tolist() == [expected]


# (arr shape, indices shape, axis, index rows): the last axis reaches the flat kernels; a leading axis
# the general ones, with index rows that agree over the inner columns (row-level bookkeeping) or not.
INT_MEAN_CASES = [((3, 4), (3, 300), 1, "random"), ((5,), (400,), -1, "random"),
                  ((4, 3), (300, 3), 0, "random"), ((4, 8), (300, 8), 0, "uniform"),
                  ((2, 4, 3), (2, 250, 3), 1, "random"), ((2, 8), (700, 8), 0, "uniform")]


def _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows, seed=0):
    indices = rand_indices(arr_shape, idx_shape, axis, seed + 1)
    if rows == "uniform":  # every index row aims at one destination row
        indices = np.repeat(indices[..., :1], idx_shape[-1], axis=-1)
    return int_values(dtype, arr_shape, seed), indices, int_values(dtype, idx_shape, seed + 2)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("arr_shape,idx_shape,axis,rows", INT_MEAN_CASES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_integer_mean_sums_do_not_overflow(dtype, arr_shape, idx_shape, axis, rows, include_self, inplace):
    arr, indices, values = _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows)
    got = _int_put(arr, indices, values, axis, "mean", include_self, inplace)
    np.testing.assert_array_equal(got, refs.put_along_axis(arr, indices, values, axis, "mean", include_self))


@pytest.mark.parametrize("include_self", [True, False])
def test_mean_of_more_than_255_agreeing_rows_per_destination_row(include_self):
    # ~350 index rows aim at each destination row: a per-row count past a byte (the row counts' carry)
    arr, values = rand((2, 8)), rand((700, 8), seed=2)
    indices = np.repeat(rand_indices((2, 8), (700, 1), 0, seed=1), 8, axis=1)
    assert np.bincount(indices[:, 0] % 2).min() > 255
    got = put(*map(paddle.to_tensor, (arr, indices, values)), 0, "mean", include_self).numpy()
    assert_close(got, refs.put_along_axis(arr, indices, values, 0, "mean", include_self), "float64")


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("reduce", ["add", "mul"])
@pytest.mark.parametrize("arr_shape,idx_shape,axis,rows", INT_MEAN_CASES[:1] + INT_MEAN_CASES[3:4])
@pytest.mark.parametrize("include_self", [True, False])
def test_integer_add_and_mul_wrap_around_in_the_dtype(dtype, reduce, arr_shape, idx_shape, axis, rows, include_self):
    arr, indices, values = _int_mean_inputs(dtype, arr_shape, idx_shape, axis, rows, seed=5)
    if dtype == "int64":  # wrap-around in int64 itself
        values = values * np.int64(2 ** 12)
    got = _int_put(arr, indices, values, axis, reduce, include_self)
    with np.errstate(over="ignore"):
        expected = refs.put_along_axis(arr, indices, values, axis, reduce, include_self)
    np.testing.assert_array_equal(got, expected)
