"""paddle_ext.put_along_axis / put_along_axis_: scatter values along an axis with any reduction.

Mirrors ``paddle.put_along_axis`` (Paddle 3.x) with every reduction of ``torch.scatter_reduce`` plus
``assign``, exact grads for all of them, and bounds-checked indices (docs/put_along_axis.md).
"""

from __future__ import annotations

import numbers

import paddle
from paddle.autograd import PyLayer
from paddle.base.core import DataType

from . import _amp, _library
from ._checks import FLOATING_DTYPES, Dtypes, check_axis, check_tensor, dtype_name, is_tensor
from ._checks import known_dim as _known

OP = "put_along_axis"
REDUCES = {"assign": "assign", "add": "add", "mul": "mul", "multiply": "mul", "mean": "mean", "amin": "amin", "amax": "amax"}
SUPPORTED_DTYPES = Dtypes((*FLOATING_DTYPES, DataType.INT32, DataType.INT64, DataType.INT16, DataType.UINT8))
INDEX_DTYPES = Dtypes((DataType.INT32, DataType.INT64))


class ShapeMismatchError(ValueError, RuntimeError):
    """Shapes of arr, indices and values that do not fit: a ValueError, and the RuntimeError that
    paddle.put_along_axis raises for them with broadcast=False."""


class DtypeMismatchError(TypeError, ValueError):
    """values of another dtype than arr: a TypeError, and the ValueError that paddle.put_along_axis's
    kernel raises for it."""


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index outside [-n, n): an IndexError, and the RuntimeError that paddle.put_along_axis
    raises for it with broadcast=False (and torch.scatter_reduce always)."""


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
    """numpy broadcasting of values to the (broadcast) indices shape; a ShapeMismatchError when impossible.
    Dimensions unknown at trace time (-1 in a static graph) are left to the kernel's run-time check."""
    if len(values_shape) > len(target):
        raise ShapeMismatchError(f"{op}: values of shape {values_shape} cannot be broadcast to the indices shape "
                                 f"{target}")
    padded = [1] * (len(target) - len(values_shape)) + list(values_shape)
    for d, (v, t) in enumerate(zip(padded, target)):
        if _known(v) and _known(t) and v not in (1, t):
            raise ShapeMismatchError(
                f"{op}: values of shape {values_shape} cannot be broadcast to the indices shape {target} "
                f"(dimension {d}: {v} vs {t})"
            )


def _broadcast(x, target, sizes):
    """broadcast_to(x, target); a dimension unknown at trace time (-1) takes its size from the shape
    tensor `sizes` when the graph runs."""
    if _shape(x) == target:
        return x
    if all(_known(d) for d in target):
        return paddle.broadcast_to(x, target)
    return paddle.broadcast_to(x, [d if _known(d) else sizes[i] for i, d in enumerate(target)])


def _reads_broadcast(i_shape, target, axis) -> bool:
    """Whether the kernels take `indices` as they are: size 1 in every dimension after the axis (the
    usual graph call, indices [E, 1] against values [E, C]) and already the target's before it. The CPU
    kernels read one index per row of positions (never an [E, C] int64 copy); the GPU binding expands them."""
    after = range(axis + 1, len(target))
    return (all(i_shape[d] == 1 for d in after) and any(target[d] != 1 for d in after)
            and all(i_shape[d] == target[d] for d in range(axis)))


def _values_as_read(values, target, axis, sizes):
    """values (broadcastable to `target`) as the kernels take them: arr's rank (leading 1s added, a view),
    and in each part of the positions -- the dimensions before the axis, the axis, those after it --
    either 1 throughout (read with a stride of 0: a scalar, one value per index row [E, 1], one row
    [1, C] for all) or the target's sizes. Only a part that mixes the two is broadcast here (in that
    part alone). Dimensions unknown at trace time (-1) are taken as the target's where it has -1 too;
    the kernel checks the sizes at run time."""
    rank = len(target)
    shape = _shape(values)
    if len(shape) < rank:
        if all(_known(d) for d in shape):  # (Paddle 3.3.1's PIR CPU unsqueeze has no float16 kernel)
            values = values.reshape([1] * (rank - len(shape)) + shape)
        else:
            values = paddle.unsqueeze(values, list(range(rank - len(shape))))
        shape = [1] * (rank - len(shape)) + shape
    want = [-1] * rank  # broadcast_to's "keep this dimension"
    for part in (range(axis), range(axis + 1, rank)):
        if len(part) > 1 and not all(shape[d] == 1 for d in part) and not all(shape[d] == target[d] for d in part):
            for d in part:
                want[d] = target[d] if _known(target[d]) else sizes[d]
    return values if all(isinstance(d, int) and d == -1 for d in want) else paddle.broadcast_to(values, want)


@paddle.jit.not_to_static  # plain Python on the static shapes (-1 where a dimension is dynamic)
def _prepare(arr, indices, values, axis, reduce, include_self, broadcast, op):
    """Checks and normalises the arguments; returns (indices, values, axis, reduce, include_self, block).

    Shapes are checked before dtypes, in paddle.put_along_axis's order (so an argument wrong in both
    raises the ValueError Paddle raises), and everything before any op is added to a static program.
    ``block`` is None normally; with broadcast=False and indices smaller than arr off the axis it is
    the shape of the corner of arr that the scatter touches (see _scatter_block).
    """
    check_tensor(arr, "arr", op)
    check_tensor(indices, "indices", op)
    reduce = _check_reduce(reduce, op)
    include_self = _check_bool(include_self, "include_self", op)
    broadcast = _check_bool(broadcast, "broadcast", op)
    rank = len(arr.shape)
    a_shape, i_shape = _shape(arr), _shape(indices)
    if len(i_shape) != rank:
        raise ValueError(f"{op}: indices must have arr's rank {rank} (shape {a_shape}), got shape {i_shape}")
    axis = check_axis(axis, rank, op)
    if is_tensor(values):
        v_shape = _shape(values)
    elif isinstance(values, numbers.Number) and not isinstance(values, complex):
        v_shape = []
    else:
        raise TypeError(f"{op}: values must be a paddle.Tensor or a Python number, got {type(values).__name__}")
    target = _check_shapes(a_shape, i_shape, v_shape, axis, broadcast, op)
    if arr.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: arr has dtype {dtype_name(arr.dtype)}; expected one of "
                        f"{', '.join(dtype_name(d) for d in SUPPORTED_DTYPES)}")
    if indices.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: indices must be int32 or int64, got {dtype_name(indices.dtype)}")
    if not is_tensor(values):
        values = paddle.full([], values, dtype=arr.dtype)
    elif values.dtype != arr.dtype:
        raise DtypeMismatchError(f"{op}: values has dtype {dtype_name(values.dtype)} but arr has dtype "
                        f"{dtype_name(arr.dtype)}; cast one of them")
    block = None
    if broadcast:
        # sizes unknown at trace time: the axis's from indices, the others' from arr
        sizes = paddle.concat([paddle.shape(arr)[:axis], paddle.shape(indices)[axis:axis + 1],
                              paddle.shape(arr)[axis + 1:]]) if not all(_known(d) for d in target) else None
        if not _reads_broadcast(i_shape, target, axis):
            indices = _broadcast(indices, target, sizes)
        values = _values_as_read(values, target, axis, sizes)
    else:
        if len(v_shape) == 0:  # read with a stride of 0 (as broadcast values)
            values = values.reshape([1] * rank)
        elif v_shape != i_shape and all(_known(d) for d in i_shape + v_shape):
            # torch's rule: values[p] pairs with indices[p]; the rest is unused
            values = paddle.slice(values, list(range(rank)), [0] * rank, i_shape)
        # Indices narrower than arr off the axis scatter into a block of arr. With dynamic dimensions
        # indices and values must match arr off the axis (the kernel checks at run time).
        if all(_known(d) for d in a_shape + i_shape) and \
                any(i_shape[d] < a_shape[d] for d in range(rank) if d != axis):
            block = [a_shape[d] if d == axis else i_shape[d] for d in range(rank)]
    return indices, values, axis, reduce, include_self, block


def _checked(arr, indices, values, axis, reduce, include_self, broadcast, deterministic, op):
    """-> (indices, values, block, attrs): _prepare's, with attrs = (axis, reduce, include_self, deterministic).
    A dygraph call like one seen before (shapes, dtypes, arguments) that _prepare passed through unchanged is
    looked up instead of checked again."""
    key, dtypes = _plan_key(arr, indices, values, axis, reduce, include_self, broadcast, deterministic)
    plan = _PLANS.get(key)
    if plan is not None:
        return indices, values, None, plan[0]
    new_indices, new_values, axis, reduce, include_self, block = _prepare(
        arr, indices, values, axis, reduce, include_self, broadcast, op)
    attrs = (axis, reduce, include_self, _check_bool(deterministic, "deterministic", op))
    if key is not None and block is None and new_indices is indices and new_values is values:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = (attrs, dtypes)  # the dtypes kept alive: no other object can take their ids in a key
    return new_indices, new_values, block, attrs


def _same_dtype_tensors(arr, values) -> bool:
    """Dygraph tensors of one dtype, which auto_cast's rules leave as they are (dtypes compared by identity:
    by value costs microseconds)."""
    return arr.__class__ is values.__class__ is paddle.Tensor and arr.dtype is values.dtype


def _plan_key(arr, indices, values, axis, reduce, include_self, broadcast, deterministic):
    """(key, dtypes): what _prepare's outcome depends on, for dygraph tensors and arguments of exactly the
    default types (so that no two keys that compare equal, such as axis=True and axis=1, differ in validity),
    else (None, None). The key holds the dtypes' ids (hashing a dtype costs about a microsecond); the plan
    stored under it keeps those dtype objects alive, so an id found in a key is that very dtype."""
    if not (arr.__class__ is indices.__class__ is values.__class__ is paddle.Tensor and axis.__class__ is int
            and reduce.__class__ is str and include_self.__class__ is broadcast.__class__ is deterministic.__class__
            is bool and paddle.in_dynamic_mode()):
        return None, None
    dtypes = (arr.dtype, indices.dtype, values.dtype)
    return (tuple(arr.shape), tuple(indices.shape), tuple(values.shape), id(dtypes[0]), id(dtypes[1]), id(dtypes[2]),
            axis, reduce, include_self, broadcast, deterministic), dtypes


_PLANS = {}  # _plan_key's key -> (attrs, dtypes), for calls whose arguments _prepare returned as they were
_MAX_PLANS = 4096


def _check_shapes(a_shape, i_shape, v_shape, axis, broadcast, op):
    """Raises for shapes that do not fit; with broadcast, returns the shape indices and values are
    broadcast to (-1 where a dimension is unknown at trace time; the kernel checks it at run time)."""
    rank = len(a_shape)
    if broadcast:
        target = list(a_shape)
        for d in range(rank):
            if d == axis:
                target[d] = i_shape[d]
            elif _known(i_shape[d]) and _known(a_shape[d]) and i_shape[d] not in (1, a_shape[d]):
                raise ShapeMismatchError(
                    f"{op}: indices.shape[{d}] = {i_shape[d]} can be neither broadcast to nor matched with "
                    f"arr.shape[{d}] = {a_shape[d]} (expected 1 or {a_shape[d]})"
                )
            elif not _known(i_shape[d]):
                target[d] = i_shape[d]  # both dynamic: they must match at run time (the kernel checks)
        _broadcast_values_shape(v_shape, target, op)
        return target
    if v_shape and len(v_shape) != rank:
        raise ValueError(f"{op}: with broadcast=False values must have arr's rank {rank}, got shape {v_shape}")
    for d in range(rank):
        if d != axis and _known(i_shape[d]) and _known(a_shape[d]) and i_shape[d] > a_shape[d]:
            raise ShapeMismatchError(f"{op}: with broadcast=False indices.shape[{d}] = {i_shape[d]} must be "
                                     f"<= arr.shape[{d}] = {a_shape[d]}")
        if v_shape and _known(i_shape[d]) and _known(v_shape[d]) and i_shape[d] > v_shape[d]:
            raise ShapeMismatchError(f"{op}: with broadcast=False indices.shape[{d}] = {i_shape[d]} must be "
                                     f"<= values.shape[{d}] = {v_shape[d]}")
    return None


def _call(fn, *args):
    """Runs the op; an out-of-range index (found by the C++ check before any write) is an
    IndexOutOfRangeError with the first line of the kernel's message."""
    try:
        return fn(*args)
    except IndexError as err:
        message = str(err).strip().split("\n", 1)[0].removeprefix("(OutOfRange) ")
        raise IndexOutOfRangeError(message.split(" (at /", 1)[0]) from None


def _records_grad(arr, values) -> bool:
    """Whether a dygraph call must record autograd history (then it goes through the PyLayers below)."""
    return (paddle.in_dynamic_mode() and arr.dtype in FLOATING_DTYPES and paddle.is_grad_enabled()
            and not (arr.stop_gradient and values.stop_gradient))


def _put(arr, indices, values, attrs):
    """The functional op; attrs = (axis, reduce, include_self, deterministic)."""
    if arr.stop_gradient and values.stop_gradient and paddle.in_dynamic_mode():
        return _call(_library.dygraph_op("pe_put_along_axis"), arr, indices, values, *attrs)[0]
    if _records_grad(arr, values):
        return _apply(_PutAlongAxis, arr, values, {"indices": indices, "attrs": attrs})
    arr, values = _library.legacy_grad_inputs(arr, values)
    return _call(_library.ops().pe_put_along_axis, arr, indices, values, *attrs)


def _apply(layer, first, second, spec):
    """layer.apply with the two differentiable tensors as ONE list input, one that requires grad
    first. Paddle 3.3.1's paddle.grad prunes the input slots of a multi-slot PyLayer that lead to no
    requested tensor, then rejects the grads its backward returns for them (and a None grad fed to a
    node that needs one crashes); a single slot is never pruned, and only its first tensor's flag is
    checked. The backward returns its grads in the same order (see _ordered)."""
    swap = first.stop_gradient
    spec["swap"] = swap
    return layer.apply([second, first] if swap else [first, second], spec)


def _ordered(ctx, pair):
    """(first, second) from the list input; records the order and which of them want a grad."""
    first, second = pair[::-1] if ctx.swap else pair
    ctx.wanted = (not first.stop_gradient, not second.stop_gradient)
    return first, second


def _grads(ctx, first_grad, second_grad):
    grads = [first_grad if ctx.wanted[0] else None, second_grad if ctx.wanted[1] else None]
    return grads[::-1] if ctx.swap else grads


def _write_into(arr, result):
    """Writes result into arr (through a strided view into its base) and returns arr, which takes
    result's autograd history in dygraph, as with Paddle's own inplace ops."""
    if _records_grad(arr, result):
        return _apply(_WriteInto, result, arr, {})
    paddle.assign(result, output=arr)
    return arr


class _WriteInto(PyLayer):
    """paddle.assign(result, output=arr) with grads of any order (Paddle's assign_out_ has no double
    grad): arr's old value gets no grad, result gets arr's."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap = spec["swap"]
        result, arr = _ordered(ctx, pair)
        paddle.assign(result, output=arr)
        return arr

    @staticmethod
    def backward(ctx, arr_grad):
        return _grads(ctx, arr_grad, paddle.zeros_like(arr_grad))  # (a None grad can crash Paddle)


def _scatter_block(arr, indices, values, attrs, block):
    """broadcast=False with indices narrower than arr off the axis: scatter into the corner block
    arr[:b0, ..., :bk] (whose op checks the indices), then assign the block into arr by its flat slot
    ids with our own op, which has every dtype and grads of any order."""
    rank = len(block)
    result = _put(paddle.slice(arr, list(range(rank)), [0] * rank, block), indices, values, attrs)
    ids, stride = paddle.zeros([1] * rank, dtype="int64"), 1
    for d in reversed(range(rank)):
        shape = [1] * rank
        shape[d] = block[d]
        ids = ids + paddle.arange(block[d], dtype="int64").reshape(shape) * stride
        stride *= arr.shape[d]
    flat = _put(arr.reshape([-1]), ids.reshape([-1]), result.reshape([-1]), (0, "assign", True, attrs[3]))
    return flat.reshape(arr.shape)


@_library.unified
def put_along_axis(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True, *, name=None,
                   deterministic=False):
    """Scatter ``values`` into a copy of ``arr`` at ``indices`` along ``axis``, reducing duplicates.

    For each position ``p`` of ``indices`` (after broadcasting), the output slot is ``p`` with its
    ``axis`` coordinate replaced by ``indices[p]`` (negative values wrap once), and ``values[p]`` is
    combined into it.

    Args:
        arr (Tensor): float16, bfloat16, float32, float64, int32, int64, int16 or uint8.
        indices (Tensor): int32 or int64, arr's rank. With ``broadcast`` its dimensions off ``axis``
            are 1 or arr's; otherwise they are ``<=`` arr's and values'.
        values (Tensor|number): arr's dtype (under auto_cast both are promoted to the wider one),
            broadcast to the indices' shape (``broadcast=True``) or at least the indices' shape
            (``broadcast=False``, the extra part is unused).
        axis (int): the axis to scatter along; negative counts from the end.
        reduce (str): 'assign' (the largest position of ``indices`` wins), 'add', 'mul'/'multiply',
            'mean', 'amin', 'amax' (a NaN value wins).
        include_self (bool): whether arr's own value takes part in the reduction of a written slot.
        broadcast (bool): broadcast ``indices`` to arr and ``values`` to ``indices`` (Paddle's default).
        name (str|None): keyword-only; in a legacy-IR static program, the prefix of the output's name.
        deterministic (bool): keyword-only; on a GPU, 'add' and 'mean' sort the indices and fold each
            slot in position order (bit-identical run to run) instead of using float atomics. The CPU
            kernels are deterministic in every mode; 'assign' is deterministic on the GPU too.

    Returns:
        Tensor of arr's shape and dtype.

    The parameters up to ``broadcast`` are paddle.put_along_axis's, in its order.

    Raises:
        TypeError: wrong dtypes (values' dtype must equal arr's outside auto_cast: DtypeMismatchError,
            also a ValueError as Paddle's).
        ValueError: bad reduce or ranks; shapes that do not fit (ShapeMismatchError, also a RuntimeError
            as Paddle's). IndexError: an index outside ``[-n, n)`` (dygraph; IndexOutOfRangeError, also
            a RuntimeError as Paddle's).
    """
    if not _same_dtype_tensors(arr, values):
        arr, values = _amp.promote(arr, values)  # under auto_cast, as paddle.put_along_axis (on no AMP list)
    indices, values, block, attrs = _checked(arr, indices, values, axis, reduce, include_self, broadcast,
                                             deterministic, OP)
    out = _put(arr, indices, values, attrs) if block is None else _scatter_block(arr, indices, values, attrs, block)
    return _library.named(out, name)


@_library.unified
def put_along_axis_(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True, *, name=None,
                    deterministic=False):
    """Inplace :func:`put_along_axis`: writes into ``arr`` and returns the result (dygraph and static mode).

    A strided view (a transpose, a strided slice) is written through into its base, as by Paddle's
    inplace ops. The returned tensor shares ``arr``'s memory and carries the autograd history (in
    dygraph it is ``arr`` itself when grads are recorded). Indices are checked before anything is
    written, so an IndexError leaves ``arr`` unchanged.
    """
    op = OP + "_"
    if not _same_dtype_tensors(arr, values):
        values = _amp.cast_like(values, arr)  # under auto_cast: arr's dtype cannot change
    indices, values, block, attrs = _checked(arr, indices, values, axis, reduce, include_self, broadcast,
                                             deterministic, op)
    _, reduce, include_self, _ = attrs  # normalized ('multiply' is 'mul'): below, no test reads the caller's spelling
    dygraph = paddle.in_dynamic_mode()
    if dygraph and block is None and arr.stop_gradient and values.stop_gradient and arr.is_contiguous():
        _library.dygraph_op("pe_put_along_axis_")(arr, indices, values, *attrs)
        return arr
    if block is not None:
        if dygraph:  # from a copy: the functional ops keep arr for their backward
            return _write_into(arr, _scatter_block(arr.clone(), indices, values, attrs, block))
        out = _scatter_block(arr, indices, values, attrs, block)
        paddle.assign(out, output=arr)
        # Return out, as the static mul/amin/amax branch below does: differentiating the written arr
        # gave float16/bfloat16 arr grads with arr's old value counted again.
        return out
    if _records_grad(arr, values):
        if include_self and reduce in _NEEDS_OLD_ARR:  # from a copy (with its history) kept for the backward
            return _write_into(arr, _put(arr.clone(), indices, values, attrs))
        return _apply(_PutAlongAxisInplace, arr, values, {"indices": indices, "attrs": attrs})
    if dygraph and not arr.is_contiguous():
        # A custom op sees a contiguous copy of a strided view: write the result through the view instead.
        return _write_into(arr, _call(_library.ops().pe_put_along_axis, arr, indices, values, *attrs))
    needs_old_arr = include_self and reduce in _NEEDS_OLD_ARR and not (arr.stop_gradient and values.stop_gradient)
    if not dygraph and (needs_old_arr or _library.in_legacy_program()):
        # The functional op, then the write: where the static grad needs arr's value before the write (the op
        # reads a copy), and in legacy-IR programs, where Paddle 3.3.1 refuses a custom inplace op that has
        # a dtype function ("Outputs size = 1 does not match the InplaceMap size + InferDtypeFn output size").
        source, values = _library.legacy_grad_inputs(paddle.assign(arr) if needs_old_arr else arr, values)
        out = _call(_library.ops().pe_put_along_axis, source, indices, values, *attrs)
        paddle.assign(out, output=arr)
        return out
    out = _library.ops().pe_put_along_axis_(arr, indices, values, *attrs)
    return arr if dygraph else out  # dygraph: arr itself, as Paddle's inplace ops return


# The grads of these modes with include_self need arr's value before the write.
_NEEDS_OLD_ARR = ("mul", "amin", "amax")


class _PutAlongAxis(PyLayer):
    """Dygraph autograd of the functional op: the fused grad kernel for first-order grads, a
    differentiable composition when the backward is recorded (create_graph=True), so grads of any
    order are right. Static graphs use the registered grad op."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap, ctx.attrs = spec["swap"], spec["attrs"]
        arr, values = _ordered(ctx, pair)
        axis, reduce, include_self = ctx.attrs[:3]
        ctx.counts = None
        if reduce == "mean" and arr.place.is_cpu_place():  # the counts, kept for a backward with no count pass
            out, ctx.counts = _library.ops().pe_put_along_axis_counted(arr, spec["indices"], values, axis,
                                    include_self)
        else:
            out = _library.ops().pe_put_along_axis(arr, spec["indices"], values, *ctx.attrs)
        ctx.save_for_backward(arr, spec["indices"], values, _saved_output(ctx, out))
        return out

    @staticmethod
    def backward(ctx, out_grad):
        arr, indices, values, out = ctx.saved_tensor()
        _check_saved_output(ctx, out)
        counts, ctx.counts = ctx.counts, None
        if counts is not None and not paddle.is_grad_enabled():
            return _grads(ctx, *_library.dygraph_op("pe_put_along_axis_counted_vjp")(
                arr, indices, values, out_grad, counts, *ctx.attrs[:1], ctx.attrs[2]))
        return _grads(ctx, *_vjp(arr, indices, values, out, out_grad, *ctx.attrs[:3]))


class _PutAlongAxisInplace(PyLayer):
    """The inplace op under autograd, for the modes whose grads do not need arr's old value: writes
    into arr (through a strided view into its base) and returns it, so arr carries the history."""

    @staticmethod
    def forward(ctx, pair, spec):
        ctx.swap, ctx.attrs = spec["swap"], spec["attrs"]
        arr, values = _ordered(ctx, pair)
        indices = spec["indices"]
        if arr.is_contiguous():
            _library.ops().pe_put_along_axis_(arr, indices, values, *ctx.attrs)
        else:
            paddle.assign(_library.ops().pe_put_along_axis(arr, indices, values, *ctx.attrs), output=arr)
        ctx.save_for_backward(indices, values, _saved_output(ctx, arr, bumps=1))  # Paddle bumps arr's version
        return arr

    @staticmethod
    def backward(ctx, out_grad):
        indices, values, out = ctx.saved_tensor()
        _check_saved_output(ctx, out)
        # arr's old value is not read in these modes: out stands in for it
        return _grads(ctx, *_vjp(out, indices, values, out, out_grad, *ctx.attrs[:3]))


def _saved_output(ctx, out, bumps=0):
    """The output to save for the backward, detached: saving the output itself makes a reference
    cycle (ctx -> output -> its grad node -> ctx) that only the backward breaks, so an output whose
    backward never ran stayed alive (and every call paid fresh pages). The detached tensor shares
    the output's memory and inplace version counter, which _check_saved_output compares."""
    saved = out.detach()
    ctx.out_version = saved._inplace_version() + bumps
    return saved


def _check_saved_output(ctx, out):
    if ctx.attrs[1] in _NEEDS_OUT and out._inplace_version() != ctx.out_version:
        raise RuntimeError(
            f"put_along_axis: the output of a reduce={ctx.attrs[1]!r} call was modified by an inplace operation "
            f"before its backward (version {out._inplace_version()}, expected {ctx.out_version}); its grads need it")


# The grad kernels of these modes read the output.
_NEEDS_OUT = ("mul", "amin", "amax")


def _vjp(arr, indices, values, out, out_grad, axis, reduce, include_self):
    if not paddle.is_grad_enabled():  # (an op without a grad op: no _respecting_no_grad needed)
        return _library.dygraph_op("pe_put_along_axis_vjp")(arr, indices, values, out, out_grad, axis, reduce,
                                                            include_self)
    return _differentiable_grads(arr, indices, values, out, out_grad, axis, reduce, include_self)


def _differentiable_grads(arr, indices, values, out, out_grad, axis, reduce, include_self):
    """(arr_grad, values_grad) from differentiable ops (docs/put_along_axis.md, Gradients). They are
    linear in out_grad, with coefficients that are constants (written masks, counts, winners, ties)
    except mul's products of the other factors, which are products (never quotients) of arr and values
    (_products_of_others): so every derivative of every order is the true one, at zeros too.
    Computed in float32 for the half types, as the kernels accumulate."""
    positions = [indices.shape[axis] if d == axis else s for d, s in enumerate(arr.shape)]
    if list(values.shape) != positions:  # values read in place (with strides of 0): their grad is summed
        values = paddle.broadcast_to(values, positions)
    dtype = arr.dtype
    acc = paddle.float32 if dtype in (paddle.float16, paddle.bfloat16) else dtype
    arr, values, out, g = (t.astype(acc) if dtype != acc else t for t in (arr, values, out, out_grad))
    idx = paddle.remainder(indices, paddle.full([], arr.shape[axis], indices.dtype))  # wrap negatives

    def gather(x):  # slot -> position
        return paddle.take_along_axis(x, idx, axis)

    with paddle.no_grad():
        ones = paddle.ones(values.shape, acc)
        count = _library.ops().pe_put_along_axis(paddle.zeros(arr.shape, acc), idx, ones, axis, "add", True,
                      False)
        unwritten = (count == 0).astype(acc)
    if reduce == "mul":
        others_arr, others_values = _products_of_others(arr, idx, values, axis, include_self)
        arr_grad = g * others_arr if include_self else g * unwritten
        values_grad = gather(g) * others_values
    else:
        with paddle.no_grad():  # arr_grad = g * arr_coef, values_grad = gather(g * slot_coef) * values_coef
            written = 1 - unwritten
            arr_coef = unwritten + (written if include_self else 0)
            slot_coef, values_coef = None, None
            if reduce == "assign":
                position = paddle.arange(values.numel(), dtype="int64").reshape(values.shape)
                winner = _library.ops().pe_put_along_axis(paddle.full(arr.shape, -1, "int64"), idx, position,
                               axis, "assign", True, False)
                arr_coef, values_coef = unwritten, (gather(winner) == position).astype(acc)
            elif reduce == "mean":
                slot_coef = 1 / paddle.maximum(count + int(include_self), paddle.ones([], acc))
                arr_coef = unwritten + (written * slot_coef if include_self else 0)
            elif reduce in ("amin", "amax"):  # the contributors that are the result (a NaN result: its NaNs)
                values_coef = _is_result(values, gather(out)).astype(acc)
                arr_ties = written * _is_result(arr, out).astype(acc) if include_self else 0
                ties = _library.ops().pe_put_along_axis(paddle.zeros(arr.shape, acc), idx, values_coef, axis,
                             "add", True, False) + arr_ties
                slot_coef = 1 / paddle.maximum(ties, paddle.ones([], acc))
                arr_coef = unwritten + arr_ties * slot_coef
        arr_grad = g * arr_coef
        values_grad = gather(g if slot_coef is None else g * slot_coef)
        if values_coef is not None:
            values_grad = values_grad * values_coef
    return (arr_grad.astype(dtype), values_grad.astype(dtype)) if dtype != acc else (arr_grad, values_grad)


def _is_result(x, result):
    return (x == result) | (paddle.isnan(x) & paddle.isnan(result))


def _products_of_others(arr, idx, values, axis, include_self):
    """For every factor of every slot (arr's own value with include_self, and each value), the product
    of the slot's other factors: segmented exclusive prefix and suffix products over the factors sorted
    by slot (Hillis-Steele doubling, log2 of the longest slot steps). Only products, gathers and
    selects (no concat: Paddle 3.3.1's concat with a constant fails at second order): exact polynomials."""
    rank, size = len(arr.shape), arr.numel()
    with paddle.no_grad():  # the flat slot id of every position, then the factors sorted by it
        ids, stride = paddle.zeros([], "int64"), 1
        for d in reversed(range(rank)):
            if d == axis:
                ids = ids + idx.astype("int64") * stride
            else:
                shape = [1] * rank
                shape[d] = values.shape[d]
                ids = ids + paddle.arange(values.shape[d], dtype="int64").reshape(shape) * stride
            stride *= arr.shape[d]
        keys = ids.reshape([-1])
        if include_self:  # arr's factors are sources [0, size), the values [size, size + P)
            keys = paddle.concat([paddle.arange(size, dtype="int64"), keys])
        order = paddle.argsort(keys, stable=True)
        keys = paddle.gather(keys, order)
        inverse = paddle.scatter(paddle.zeros_like(order), order, paddle.arange(order.shape[0], dtype="int64"))
    flat_values = values.reshape([-1])
    if include_self:
        from_arr = order < size
        factors = paddle.where(from_arr, paddle.gather(arr.reshape([-1]), paddle.clip(order, max=size - 1)),
                               paddle.gather(flat_values, paddle.clip(order - size, min=0)))
    else:
        factors = paddle.gather(flat_values, order)
    prefix = _segmented_exclusive_products(factors, keys)
    suffix = _segmented_exclusive_products(factors.flip(0), keys.flip(0)).flip(0)
    others = prefix * suffix
    if not include_self:
        return None, paddle.gather(others, inverse).reshape(values.shape)
    return (paddle.gather(others, inverse[:size]).reshape(arr.shape),
            paddle.gather(others, inverse[size:]).reshape(values.shape))


def _segmented_exclusive_products(x, keys):
    """out[j] = product of x[i] for i < j with keys[i] == keys[j] (keys sorted, so segments are runs):
    an inclusive doubling scan of x shifted right by one within the segment."""
    total = x.shape[0]
    one = paddle.ones([], x.dtype)
    position = paddle.arange(total, dtype="int64")

    def back(by):  # (the index j - by, clipped, and whether it lies in j's segment)
        with paddle.no_grad():
            source = paddle.clip(position - by, min=0)
            return source, (position >= by) & (paddle.gather(keys, source) == keys)

    source, same = back(1)
    result = paddle.where(same, paddle.gather(x, source), one)
    step = 1
    while step < total:
        source, same = back(step)
        if not bool(same.any()):
            break
        result = result * paddle.where(same, paddle.gather(result, source), one)
        step *= 2
    return result
