"""put_along_axis over index and value layouts: broadcast=False, independent indices into a large
destination, indices broadcast after the axis, broadcast values read in place; the CPU mean's counts."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_export, check_grad, check_output, round_to_dtype, static_mode
from put_along_axis_cases import ALL_DTYPES, REDUCES, int_values, put, put_inplace, rand, rand_indices


# ------------------------------------------------------------------ broadcast=False, a scalar value
@pytest.mark.parametrize("reduce", ["assign", "add", "amax"])
def test_no_broadcast_scalar_value_with_narrower_indices(reduce):
    # A Python-number value with broadcast=False fills the indices' shape; indices narrower than arr off
    # the axis still scatter into that corner only (the rest of arr is kept).
    arr = rand((4, 5), 3)
    idx = np.array([[0, 3], [2, 2]], np.int64)
    out = paddle_ext.put_along_axis(paddle.to_tensor(arr), paddle.to_tensor(idx), 2.5, 0, reduce=reduce,
                                    broadcast=False)
    np.testing.assert_allclose(out.numpy(), refs.put_along_axis(arr, idx, np.full(idx.shape, 2.5), 0, reduce,
                                                                broadcast=False))


# ------------------------------------------------- independent indices into a large destination
def _scattered_case(arr_shape, idx_shape, dtype, index_dtype, seed, mixed=False):
    """Independent indices (negative ones too, duplicates) into a destination well beyond L2, which the
    kernel partitions by destination block; values with ±inf, NaN, zeros and ties (a few distinct values)."""
    rng = np.random.default_rng(seed)
    n = arr_shape[0]
    idx = rng.integers(-n, n, size=idx_shape)
    if mixed:  # a third of the rows one destination each (the row pattern), the rest independent
        rows = rng.random(idx_shape[0]) < 1 / 3
        idx[rows] = rng.integers(-n, n, size=(int(rows.sum()), 1))
    pool = np.array([0.5, -1.0, 2.0, 0.0, np.inf, -np.inf, np.nan, 1.5])
    arr = rng.normal(size=arr_shape)
    vals = np.where(rng.random(idx_shape) < 0.5, pool[rng.integers(0, len(pool), idx_shape)], rng.normal(size=idx_shape))
    return arr.astype(dtype), idx.astype(index_dtype), vals.astype(dtype)


@pytest.mark.parametrize("arr_shape,idx_shape,dtype,index_dtype", [
    ((12000, 64), (18000, 64), "float64", "int32"),    # one thread, 6 MB destination
    ((20000, 64), (40000, 64), "float32", "int64"),    # two threads (> 2**21 positions), a column block each
])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_independent_indices_into_a_large_table_match_the_last_axis_kernel(arr_shape, idx_shape, dtype, index_dtype,
                                                                          reduce, include_self):
    # Along axis 0 with 64 features these updates are partitioned by destination block; along the last
    # axis (the transposed problem) they go through the row kernels. A slot receives the same values in
    # the same order either way, so outputs and grads must agree bit for bit.
    arr, idx, vals = _scattered_case(arr_shape, idx_shape, dtype, index_dtype, seed=len(reduce) + include_self,
                                     mixed=reduce in ("add", "amax"))
    g = np.random.default_rng(5).normal(size=arr_shape).astype(dtype)
    results = []
    for transpose in (False, True):
        t = (lambda x: np.ascontiguousarray(x.T)) if transpose else (lambda x: x)
        a, v = (paddle.to_tensor(t(x), stop_gradient=False) for x in (arr, vals))
        out = put(a, paddle.to_tensor(t(idx)), v, 1 if transpose else 0, reduce=reduce, include_self=include_self)
        grads = paddle.grad(out, [a, v], paddle.to_tensor(t(g)))
        results.append([t(x.numpy()) for x in (out, *grads)])
    for got, want, what in zip(*results, ("out", "arr grad", "values grad")):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)


def test_independent_indices_into_a_large_table_out_of_range_is_an_index_error():
    arr, idx, vals = _scattered_case((12000, 64), (18000, 64), "float32", "int64", seed=9)
    idx[17000, 40] = 12000
    with pytest.raises(IndexError, match=r"index 12000 at indices\[17000, 40\]"):
        put(paddle.to_tensor(arr), paddle.to_tensor(idx), paddle.to_tensor(vals), 0, reduce="add")


# ------------------------------------------------------- indices broadcast along every dim after the axis
# The usual graph call passes indices [E, 1] against values [E, C]: with broadcast=True such
# indices (size 1 in every dimension after the axis, the target's size before it) go to the op as they are,
# and the CPU kernels read one index per row of positions instead of an [E, C] int64 copy.
# (arr shape, indices shape, axis); values have the broadcast target's shape.
ROW_INDEX_CASES = [((6, 5), (9, 1), 0), ((2, 4, 3, 5), (2, 7, 1, 1), 1), ((2, 4, 3, 5), (2, 7, 1, 1), -3),
                   ((3, 4, 6), (3, 5, 1), 1), ((4, 1, 6), (7, 1, 1), 0)]


def _row_index_inputs(arr_shape, idx_shape, axis, seed=0):
    axis = axis % len(arr_shape)
    values_shape = [idx_shape[d] if d == axis else arr_shape[d] for d in range(len(arr_shape))]
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1),
            "values": rand(values_shape, seed + 2)}


def _spy_on_argument(monkeypatch, position):
    """Records the shape of argument `position` of every put_along_axis op call, through the op module and
    through the dispatcher that dygraph calls without grads take."""
    seen, real = [], paddle_ext._library.ops
    names = ("pe_put_along_axis", "pe_put_along_axis_")

    def spying(name, fn):
        def call(*args):
            if name in names:
                seen.append(list(args[position].shape))
            return fn(*args)
        return call

    class Spy:
        def __getattr__(self, name):
            return spying(name, getattr(real(), name))

    dispatchers = {name: spying(name, paddle_ext._library.dygraph_op(name)) for name in names}
    monkeypatch.setattr(paddle_ext._library, "ops", lambda: Spy())
    monkeypatch.setattr(paddle_ext._library, "dygraph_op", dispatchers.__getitem__)
    return seen


def _spy_on_indices(monkeypatch):
    return _spy_on_argument(monkeypatch, 1)


@pytest.mark.parametrize("arr_shape,idx_shape,axis", ROW_INDEX_CASES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_row_indices_match_the_reference(arr_shape, idx_shape, axis, reduce, include_self):
    check_output(put, _row_index_inputs(arr_shape, idx_shape, axis, seed=31), refs.put_along_axis,
                 dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("arr_shape,idx_shape,axis", ROW_INDEX_CASES[:2])
def test_row_indices_grads_match_numeric(arr_shape, idx_shape, axis, reduce, include_self):
    check_grad(put, _row_index_inputs(arr_shape, idx_shape, axis, seed=37), ["arr", "values"],
               dict(axis=axis, reduce=reduce, include_self=include_self))


def _outputs_and_grads(arr, idx, vals, axis, reduce, include_self, inplace=False):
    """Output, and for floating dtypes (arr_grad, values_grad), as NumPy arrays; arr/vals are tensors."""
    floating = arr.dtype in (paddle.float16, paddle.bfloat16, paddle.float32, paddle.float64)
    a, v = arr.detach(), vals.detach()
    a.stop_gradient = v.stop_gradient = not floating
    idx = paddle.to_tensor(idx)
    if inplace:
        out = put_inplace(a * 1 if floating else a.clone(), idx, v, axis, reduce, include_self)
    else:
        out = put(a, idx, v, axis, reduce, include_self)
    results = [out]
    if floating:
        g = paddle.to_tensor(np.random.default_rng(3).normal(size=arr.shape)).astype(arr.dtype)
        results += paddle.grad(out, [a, v], g)
    return [t.astype("float32").numpy() if t.dtype == paddle.bfloat16 else t.numpy() for t in results]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_row_indices_are_bit_identical_to_materialised_ones(dtype, reduce, include_self, inplace):
    """Outputs and grads equal, bit for bit, those of the same indices broadcast in advance: every dtype,
    negative indices and ties (a few destinations, many values each)."""
    idx = np.random.default_rng(41).integers(-3, 3, size=(5, 8, 1))
    if dtype in FLOAT_DTYPES:
        arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in (((5, 3, 4), 43), ((5, 8, 4), 44)))
    else:
        arr, vals = (paddle.to_tensor(int_values(dtype, s, seed)) for s, seed in (((5, 3, 4), 43), ((5, 8, 4), 44)))
    full = np.broadcast_to(idx, vals.shape).copy()
    for got, want in zip(_outputs_and_grads(arr, idx, vals, 1, reduce, include_self, inplace),
                         _outputs_and_grads(arr, full, vals, 1, reduce, include_self, inplace)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arr_shape,idx_shape,axis", [((500, 64), (33000, 1), 0), ((4, 2000, 64), (4, 9000, 1), 1)])
@pytest.mark.parametrize("reduce", REDUCES)
def test_row_indices_large_cases_are_bit_identical(arr_shape, idx_shape, axis, reduce):
    """Over two threads' grain: the column-block and outer-block plans read the broadcast indices too."""
    x = _row_index_inputs(arr_shape, idx_shape, axis, seed=47)
    arr, vals = paddle.to_tensor(x["arr"]), paddle.to_tensor(x["values"])
    full = np.broadcast_to(x["indices"], x["values"].shape).copy()
    for got, want in zip(_outputs_and_grads(arr, x["indices"], vals, axis, reduce, False),
                         _outputs_and_grads(arr, full, vals, axis, reduce, False)):
        np.testing.assert_array_equal(got, want)


def test_row_indices_reach_the_op_unbroadcast(monkeypatch):
    """No [E, C] index is built: the op receives [E, 1] (dygraph, and a static program with a dynamic E);
    indices that need broadcasting before the axis are still broadcast."""
    seen = _spy_on_indices(monkeypatch)
    x = _row_index_inputs((6, 5), (9, 1), 0, seed=53)
    put(*(paddle.to_tensor(x[k]) for k in ("arr", "indices", "values")), 0, "add")
    with static_mode():
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            put(paddle.static.data("a", [6, 5], "float64"), paddle.static.data("i", [-1, 1], "int64"),
                paddle.static.data("v", [-1, 5], "float64"), 0, "mean")
    put(paddle.to_tensor(rand((3, 4, 5))), paddle.to_tensor(np.array([[[0], [2]]])), 2.5, 1)
    assert seen == [[9, 1], [-1, 1], [3, 2, 5]]


def test_row_indices_out_of_range_name_their_position():
    arr, vals = paddle.to_tensor(rand((4, 3))), paddle.to_tensor(rand((5, 3)))
    idx = paddle.to_tensor(np.array([[0], [1], [-4], [4], [2]]))
    message = r"index 4 at indices\[3, 0\] is out of range for axis 0 of size 4 \(expected -4 <= index < 4\)"
    with pytest.raises(IndexError, match=message):
        put(arr, idx, vals, 0, "add")
    before = arr.numpy().copy()
    with pytest.raises(IndexError, match=message):
        put_inplace(arr, idx, vals, 0, "add")
    np.testing.assert_array_equal(arr.numpy(), before)


def test_row_indices_with_an_empty_inner_dim_are_not_checked():
    """indices [E, 1] broadcast against [E, 0]: no position, so nothing to check or write (as when broadcast)."""
    arr = paddle.zeros([4, 0])
    idx = paddle.to_tensor(np.array([[9], [1]]))
    assert put(arr, idx, paddle.zeros([2, 0]), 0, "add").shape == [4, 0]
    assert put_inplace(arr, idx, paddle.zeros([2, 0]), 0, "add").shape == [4, 0]


@pytest.mark.parametrize("reduce", ["add", "amax"])
def test_row_indices_export_round_trip(reduce):
    check_export(lambda a, i, v: put(a, i, v, 0, reduce=reduce), _row_index_inputs((6, 5), (9, 1), 0, seed=59))


# ======================================================= broadcast values read in place (strides of 0)
# Values that need broadcasting (a Python scalar, a 0-d tensor, [E, 1] against [E, C], [1, C], any
# broadcastable shape) go to the op as they are, padded to arr's rank: the CPU kernels read them with a
# stride of 0 along the broadcast part of the positions (the dimensions before the axis, the axis, those
# after it). A part that mixes size-1 and full dimensions is broadcast first, in that part only. The
# values grad has values' own shape: the sum of the per-position grads over the broadcast dimensions.
# (arr shape, indices shape, axis, values shape)
BROADCAST_VALUE_CASES = [((6, 5), (9, 1), 0, (9, 1)), ((6, 5), (9, 5), 0, (9, 1)), ((6, 5), (9, 5), 0, (1, 5)),
                         ((6, 5), (9, 5), 0, (5,)), ((6, 5), (9, 1), 0, ()), ((3, 4, 5), (3, 7, 5), 1, (3, 1, 5)),
                         ((3, 4, 5), (3, 7, 1), 1, (1, 7, 1)), ((3, 4, 5), (1, 7, 1), -2, (1, 1, 5)),
                         ((2, 3, 4, 5), (2, 3, 6, 5), 2, (1, 3, 6, 1)), ((4, 6), (4, 9), 1, (4, 1)),
                         ((4, 6), (4, 9), 1, (1, 9)), ((7,), (11,), 0, (1,))]


def _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=0):
    return {"arr": rand(arr_shape, seed), "indices": rand_indices(arr_shape, idx_shape, axis, seed + 1),
            "values": rand(values_shape, seed + 2)}


def _spy_on_values(monkeypatch):
    return _spy_on_argument(monkeypatch, 2)


def test_broadcast_values_reach_the_op_unbroadcast(monkeypatch):
    """No [E, C] values are built: the op receives them at their own size, padded to arr's rank (dygraph,
    and a static program with a dynamic E); a part of mixed size-1 and full dimensions is broadcast."""
    seen = _spy_on_values(monkeypatch)
    a, a3, a4 = (paddle.to_tensor(rand(s)) for s in ((6, 5), (3, 4, 5), (2, 3, 4, 5)))
    rows, full = paddle.to_tensor(rand_indices((6, 5), (9, 1), 0)), paddle.to_tensor(rand_indices((6, 5), (9, 5), 0))
    put(a, rows, paddle.to_tensor(rand((9, 1))), 0, "add")                        # [E, 1]: one value per row
    put(a, full, paddle.to_tensor(rand((1, 5))), 0, "mean")                       # [1, C]: one row for all
    put(a, full, paddle.to_tensor(rand((5,))), 0, "amax")                         # lower rank
    put(a, rows, 2.5, 0, "assign")                                                # Python scalar
    put_inplace(a.clone(), full, paddle.to_tensor(1.5, dtype="float64"), 0, "mul")  # 0-d tensor
    put(a, full[:3], 2.5, 0, "add", broadcast=False)                              # broadcast=False scalar
    put(a4, paddle.to_tensor(rand_indices((2, 3, 4, 5), (2, 3, 6, 5), 2)),
        paddle.to_tensor(rand((1, 3, 6, 1))), 2, "add")                           # dims before the axis mixed
    with static_mode():
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            put(paddle.static.data("a", [6, 5], "float64"), paddle.static.data("i", [-1, 1], "int64"),
                paddle.static.data("v", [-1, 1], "float64"), 0, "mean")
            put(paddle.static.data("b", [-1, 5], "float64"), paddle.static.data("j", [-1, 5], "int64"), 1.0, 0)
    put(a3, paddle.to_tensor(np.array([[[0], [2]]])), paddle.to_tensor(rand((2, 1))), 1)
    assert seen == [[9, 1], [1, 5], [1, 5], [1, 1], [1, 1], [1, 1], [2, 3, 6, 1], [-1, 1], [1, 1], [1, 2, 1]]


@pytest.mark.parametrize("values_shape,expands", [([-1, 3, 6, 5], False), ([1, 1, 6, 5], False),
                                                   ([1, 1, 1, 1], False), ([-1, 3, 1, 1], False),
                                                   ([1, 3, 6, 1], True), ([-1, 1, 6, 1], True)])
def test_broadcast_values_expand_in_a_static_program_only_where_a_part_mixes(values_shape, expands):
    """With a dynamic batch: values of the positions' static shape, or 1 throughout a part, go to the op as
    they are; [1, 3] or [-1, 1] before the axis (against [-1, 3]: the batch may be > 1) is broadcast there."""
    with static_mode():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            put(paddle.static.data("a", [-1, 3, 4, 5], "float64"), paddle.static.data("i", [-1, 3, 6, 5], "int64"),
                paddle.static.data("v", values_shape, "float64"), 2, "add")
        names = [op.name() for op in main.global_block().ops]
    assert ("pd_op.expand" in names) == expands, names


@pytest.mark.parametrize("values_shape,fed", [([-1, 3, 1, 1], (2, 3, 1, 1)), ([-1, 1, 6, 1], (2, 1, 6, 1)),
                                               ([-1, 1, 6, 1], (1, 1, 6, 1)), ([-1, 1, -1, -1], (1, 1, 1, 5))])
def test_broadcast_values_with_dynamic_dims_run_in_a_static_program(values_shape, fed):
    arr, idx, vals = rand((2, 3, 4, 5), 81), rand_indices((2, 3, 4, 5), (2, 3, 6, 5), 2, 82), rand(fed, 83)
    with static_mode():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            out = put(paddle.static.data("a", [-1, 3, 4, 5], "float64"), paddle.static.data("i", [-1, 3, 6, 5], "int64"),
                      paddle.static.data("v", values_shape, "float64"), 2, "add")
        got, = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"a": arr, "i": idx, "v": vals}, fetch_list=[out])
    np.testing.assert_allclose(got, refs.put_along_axis(arr, idx, vals, 2, "add"), rtol=1e-12)


@pytest.mark.parametrize("arr_shape,idx_shape,axis,values_shape", BROADCAST_VALUE_CASES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_broadcast_values_match_the_reference(arr_shape, idx_shape, axis, values_shape, reduce, include_self):
    check_output(put, _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=71), refs.put_along_axis,
                 dict(axis=axis, reduce=reduce, include_self=include_self))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("case", [0, 2, 4, 6, 8])
def test_broadcast_values_grads_match_numeric(case, reduce, include_self):
    arr_shape, idx_shape, axis, values_shape = BROADCAST_VALUE_CASES[case]
    check_grad(put, _broadcast_value_inputs(arr_shape, idx_shape, axis, values_shape, seed=73), ["arr", "values"],
               dict(axis=axis, reduce=reduce, include_self=include_self))


def _sum_to(grad, shape, dtype):
    """The grad of values of `shape` broadcast to grad's shape: the float64 sum over the broadcast
    dimensions (exact here: a few terms of a narrower type), rounded once to dtype."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(shape) if s == 1 and grad.shape[lead + d] != 1)
    total = grad.astype(np.float64).sum(axis=axes, keepdims=True).reshape(shape)
    return round_to_dtype(total, dtype).astype(grad.dtype) if dtype != "bfloat16" else round_to_dtype(total, dtype)


def _check_against_materialised(arr, idx, vals, axis, reduce, include_self, inplace, dtype):
    """Outputs and arr grads bit for bit those of the same values broadcast in advance; the values grad
    the materialised values' grad summed over the broadcast dimensions."""
    rank = len(arr.shape)
    ax = axis % rank
    target = [idx.shape[ax] if d == ax else arr.shape[d] for d in range(rank)]
    full = paddle.broadcast_to(vals.reshape([1] * (rank - len(vals.shape)) + list(vals.shape)), target)
    got = _outputs_and_grads(arr, idx, vals, axis, reduce, include_self, inplace)
    want = _outputs_and_grads(arr, idx, full, axis, reduce, include_self, inplace)
    for i, (g, w) in enumerate(zip(got[:2], want[:2])):
        np.testing.assert_array_equal(g, w, err_msg=f"{'output' if i == 0 else 'arr grad'}")
    if len(got) == 3:
        expected = _sum_to(want[2], tuple(vals.shape), dtype)
        assert got[2].shape == tuple(vals.shape)
        if dtype == "float64":  # the order of the sum differs: to a few ulps of the sum of the terms' magnitudes
            bound = 1e-15 * _sum_to(np.abs(want[2]), tuple(vals.shape), dtype)
            assert (np.abs(got[2] - expected) <= bound).all(), ("values grad", got[2], expected)
        else:
            np.testing.assert_array_equal(got[2], expected, err_msg="values grad")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
def test_broadcast_values_are_bit_identical_to_materialised_ones(dtype, reduce, include_self, inplace):
    """Every dtype, negative indices and ties (a few destinations, many values each), row indices and full
    ones, values one per row ([E, 1]), one row for all ([1, C]), per outer row, a 0-d tensor. The wider
    arr takes the destination-partitioned passes under PADDLE_EXT_PUT_TILE=small (test_fuzz runs it so)."""
    rng = np.random.default_rng(45)
    for arr_shape, idx_shape, values_shape in (
            ((5, 3, 4), (5, 8, 1), (5, 8, 1)), ((5, 3, 4), (5, 8, 4), (5, 8, 1)), ((5, 3, 4), (5, 8, 4), (1, 1, 4)),
            ((5, 3, 4), (5, 8, 4), (5, 1, 4)), ((5, 3, 4), (5, 8, 1), (1, 8, 1)), ((5, 3, 4), (5, 8, 4), ()),
            ((3, 30, 8), (3, 61, 8), (3, 61, 1)), ((3, 30, 8), (3, 61, 8), (1, 1, 8)), ((3, 30, 8), (3, 61, 8), (1,))):
        idx = rng.integers(-3, 3, size=idx_shape)
        if dtype in FLOAT_DTYPES:
            arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in ((arr_shape, 43), (values_shape, 44)))
        else:
            arr, vals = (paddle.to_tensor(int_values(dtype, s, seed)) for s, seed in ((arr_shape, 43), (values_shape, 44)))
        _check_against_materialised(arr, idx, vals, 1, reduce, include_self, inplace, dtype)


@pytest.mark.parametrize("arr_shape,idx_shape,axis,values_shape,pattern", [
    ((500, 64), (33000, 1), 0, (33000, 1), "rows"),      # column-block plan, one value per row
    ((500, 64), (33000, 1), 0, (1, 64), "rows"),
    ((500, 64), (33000, 64), 0, (33000, 1), "rows"),     # full indices that agree along each row
    ((4, 2000, 64), (4, 9000, 1), 1, (4, 9000, 1), "rows"),  # outer-block plan
    ((4, 2000, 64), (4, 9000, 64), 1, (1, 1, 64), "random"),
    ((20000, 64), (33000, 64), 0, (33000, 1), "random"),  # independent indices: destination-partitioned
    ((20000, 64), (33000, 64), 0, (), "random"),
    ((3, 800000), (3, 900000), 1, (3, 1), "random"),     # the last axis
])
@pytest.mark.parametrize("reduce", REDUCES)
def test_broadcast_values_large_cases_are_bit_identical(arr_shape, idx_shape, axis, values_shape, pattern, reduce):
    """Over two threads' grain: every plan reads the broadcast values too."""
    rng = np.random.default_rng(49)
    n = arr_shape[axis]
    idx = rng.integers(-n, n, size=idx_shape)
    if pattern == "rows":
        idx = np.broadcast_to(idx[..., :1], idx_shape).copy() if axis == 0 else idx
    arr, vals = paddle.to_tensor(rand(arr_shape, 51)).astype("float32"), paddle.to_tensor(rand(values_shape, 52)).astype("float32")
    _check_against_materialised(arr, idx, vals, axis, reduce, False, False, "float32")


@pytest.mark.parametrize("reduce", ["add", "amax"])
@pytest.mark.parametrize("values_shape", [(9, 1), (1, 5), ()])
def test_broadcast_values_export_round_trip(reduce, values_shape):
    x = _broadcast_value_inputs((6, 5), (9, 5), 0, values_shape, seed=79)
    check_export(lambda a, i, v: put(a, i, v, 0, reduce=reduce), {k: v.astype(np.float32) if v.dtype == np.float64 else v
                                                                  for k, v in x.items()})


def test_broadcast_values_of_a_bad_shape_are_value_errors():
    arr, idx = paddle.to_tensor(rand((6, 5))), paddle.to_tensor(rand_indices((6, 5), (9, 1), 0))
    for shape, message in (((9, 2), r"values of shape \[9, 2\] cannot be broadcast to the indices shape \[9, 5\] "
                                     r"\(dimension 1: 2 vs 5\)"),
                           ((2, 9, 5), r"values of shape \[2, 9, 5\] cannot be broadcast")):
        for fn in (put, put_inplace):
            with pytest.raises(ValueError, match=message):
                fn(arr, idx, paddle.to_tensor(rand(shape)), 0, "add")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("values_shape", [(6, 9, 1), (1, 9, 1), (6, 1, 1), ()])
def test_add_values_grad_of_row_indices_sums_the_grad_rows_as_the_positions_grads(dtype, values_shape):
    """`add` with row indices and values broadcast after the axis sums the out_grad rows directly: the same
    bits as the positions' grads summed (the same indices materialised), float64 included."""
    idx = np.random.default_rng(85).integers(-4, 4, size=(6, 9, 1))
    arr, vals = (paddle.to_tensor(rand(s, seed)).astype(dtype) for s, seed in (((6, 4, 37), 86), (values_shape, 87)))
    got = _outputs_and_grads(arr, idx, vals, 1, "add", True)
    want = _outputs_and_grads(arr, np.broadcast_to(idx, (6, 9, 37)).copy(), vals, 1, "add", True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ------------------------------------------------------------------------------------------ build

@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("arr_shape, idx_shape, axis", [((40, 16), (90, 16), 0), ((6, 30), (6, 45), 1)])
def test_dygraph_mean_backward_reuses_the_forward_counts(monkeypatch, arr_shape, idx_shape, axis, include_self):
    """A CPU mean under autograd keeps its forward's counts: its backward calls the counted vjp (no count
    pass over the indices), whose grads are the reference's and the plain vjp's, bit for bit."""
    ops = paddle_ext._library.ops()
    rng = np.random.default_rng(7)
    n = arr_shape[axis]
    arr = paddle.to_tensor(rng.standard_normal(arr_shape).astype("float32"), stop_gradient=False)
    values = paddle.to_tensor(rng.standard_normal(idx_shape).astype("float32"), stop_gradient=False)
    idx = paddle.to_tensor(rng.integers(-n, n, idx_shape))
    grad = paddle.to_tensor(rng.standard_normal(arr_shape).astype("float32"))
    out_plain = ops.pe_put_along_axis(arr, idx, values, axis, "mean", include_self, False)
    want = ops.pe_put_along_axis_vjp(arr, idx, values, out_plain, grad, axis, "mean", include_self)

    def no_plain_vjp(*args):
        raise AssertionError("the mean backward counted again")

    monkeypatch.setattr(ops, "pe_put_along_axis_vjp", no_plain_vjp)
    out = paddle_ext.put_along_axis(arr, idx, values, axis, reduce="mean", include_self=include_self)
    got = paddle.grad([out], [arr, values], [grad])
    np.testing.assert_array_equal(out.numpy(), out_plain.numpy())
    as64 = [t.numpy().astype(np.float64) for t in (arr, idx, values, grad)]
    ref_grads = refs.put_along_axis_grad(as64[0], as64[1].astype(np.int64), as64[2], as64[3], axis, "mean",
                                         include_self)
    for g, w, r in zip(got, want, ref_grads):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-6, atol=1e-7)  # g / count, rounded once to float32
        assert g.numpy().tobytes() == w.numpy().tobytes()


def test_counted_vjp_rejects_counts_of_another_shape():
    ops = paddle_ext._library.ops()
    arr, values = paddle.zeros([4, 3]), paddle.ones([5, 3])
    idx = paddle.zeros([5, 3], dtype="int64")
    with pytest.raises(ValueError, match="counts must be the CPU mean forward's int32 counts"):
        ops.pe_put_along_axis_counted_vjp(arr, idx, values, paddle.ones([4, 3]), paddle.zeros([3, 3], "int32"), 0, True)


def test_mean_byte_counts_in_reused_memory_start_from_zero():
    """mean's partitioned byte counts (a byte per slot: 33 MiB here) come from BlockCache, whose blocks hold
    what the last call left in them; each partition block clears its counts first. So a second call, which
    gets the first call's blocks, must give the same output and grads as the first, and both the reference's."""
    ops = paddle_ext._library.ops()
    rng = np.random.default_rng(3)
    n = 540_000
    arr = paddle.to_tensor(rng.standard_normal((n, 64), dtype=np.float32))
    idx = paddle.to_tensor(rng.integers(0, n, (n, 64)))
    values = paddle.to_tensor(rng.standard_normal((n, 64), dtype=np.float32))
    grad = paddle.ones([n, 64])
    runs = []
    for _ in range(2):
        out = ops.pe_put_along_axis(arr, idx, values, 0, "mean", True, False)
        arr_grad, values_grad = ops.pe_put_along_axis_vjp(arr, idx, values, out, grad, 0, "mean", True)
        runs.append([t.numpy().tobytes() for t in (out, arr_grad, values_grad)])
        del out, arr_grad, values_grad
    assert runs[0] == runs[1]
    # the reference in float64: slot (i, j) = (arr + the values sent there) / (1 + their count)
    slot = (idx.numpy() * 64 + np.arange(64)).ravel()
    count = 1.0 + np.bincount(slot, minlength=n * 64)
    vals = values.numpy().astype(np.float64).ravel()
    a = arr.numpy().astype(np.float64).ravel()
    want_out = (a + np.bincount(slot, weights=vals, minlength=n * 64)) / count
    terms = (np.abs(a) + np.bincount(slot, weights=np.abs(vals), minlength=n * 64)) / count
    got_out, got_arr_grad, got_values_grad = (np.frombuffer(b, np.float32) for b in runs[1])
    np.testing.assert_array_less(np.abs(got_out - want_out), 1e-6 * np.abs(want_out) + 2e-6 * terms + 1e-30)
    np.testing.assert_allclose(got_arr_grad, 1.0 / count, rtol=1e-7)
    np.testing.assert_allclose(got_values_grad, 1.0 / count[slot], rtol=1e-7)
