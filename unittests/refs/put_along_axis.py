"""put_along_axis: a slot-by-slot loop over the contributions, in the flat order of `indices`."""

from __future__ import annotations

import numpy as np


def _put_broadcast(arr, indices, values, axis, broadcast):
    arr, indices, values = np.asarray(arr), np.asarray(indices), np.asarray(values)
    axis = axis % max(arr.ndim, 1)
    if broadcast:
        target = list(arr.shape)
        target[axis] = indices.shape[axis]
        indices = np.broadcast_to(indices, target)
        values = np.broadcast_to(values, target)
    else:
        values = np.broadcast_to(values, indices.shape) if values.ndim == 0 else values[tuple(slice(0, s) for s in indices.shape)]
    return arr, indices, values, axis


def _put_contributions(arr, indices, values, axis):
    """{slot: [(position, value), ...]} in increasing flat position of indices."""
    n = arr.shape[axis] if arr.ndim else 1
    slots = {}
    for p in np.ndindex(*indices.shape):
        k = int(indices[p])
        assert -n <= k < n
        slot = list(p)
        if arr.ndim:
            slot[axis] = k % n
        slots.setdefault(tuple(slot), []).append((p, values[p]))
    return slots


def put_along_axis(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    arr, indices, values, axis = _put_broadcast(arr, indices, values, axis, broadcast)
    integer = not np.issubdtype(arr.dtype, np.floating)
    out = arr.astype(np.int64 if integer else np.float64).copy()
    reduce = {"multiply": "mul"}.get(reduce, reduce)
    for slot, contrib in _put_contributions(arr, indices, values, axis).items():
        vals = [v for _, v in contrib]
        if reduce == "assign":
            out[slot] = vals[-1]
            continue
        terms = ([arr[slot]] if include_self else []) + vals
        terms = np.asarray(terms, dtype=out.dtype)
        if reduce == "add":
            out[slot] = terms.sum()
        elif reduce == "mul":
            out[slot] = np.prod(terms)
        elif reduce == "mean":
            out[slot] = terms.sum() // len(terms) if integer else terms.sum() / len(terms)
        elif reduce in ("amin", "amax"):
            nan = [t for t in terms if t != t]
            out[slot] = nan[0] if nan else (terms.min() if reduce == "amin" else terms.max())
    return out.astype(arr.dtype) if integer else out


def _is_result(x, result):
    """amin/amax: x is the slot's result, or both are NaN (a NaN contributor wins: it is the result)."""
    return x == result or (x != x and result != result)


def put_along_axis_grad(arr, indices, values, out_grad, axis, reduce="assign", include_self=True):
    """(arr_grad, values_grad) for already-broadcast indices/values (PyTorch's scatter_reduce rules:
    mul, the product of the other factors; amin/amax, an even split among the contributors equal to
    the result, where those of a NaN result are its NaNs: PyTorch's formula `(x == result) * g / N` has
    N = 0 there and gives NaN; an unwritten slot passes g through)."""
    arr, indices, values, axis = _put_broadcast(arr, indices, values, axis, False)
    arr, values, g = (np.asarray(a, dtype=np.float64) for a in (arr, values, out_grad))
    out = put_along_axis(arr, indices, values, axis, reduce, include_self, broadcast=False)
    reduce = {"multiply": "mul"}.get(reduce, reduce)
    arr_grad, values_grad = g.copy(), np.zeros(values.shape)
    for slot, contrib in _put_contributions(arr, indices, values, axis).items():
        positions = [p for p, _ in contrib]
        vals = [v for _, v in contrib]
        if reduce == "assign":
            arr_grad[slot] = 0.0
            values_grad[positions[-1]] = g[slot]
            continue
        factors = ([arr[slot]] if include_self else []) + vals
        grads = []
        for i in range(len(factors)):
            if reduce == "add":
                grads.append(g[slot])
            elif reduce == "mean":
                grads.append(g[slot] / len(factors))
            elif reduce == "mul":
                grads.append(g[slot] * np.prod(factors[:i] + factors[i + 1:]))
            else:  # the contributors that are the result (a NaN result: its NaNs) share its grad
                ties = sum(1 for f in factors if _is_result(f, out[slot]))
                grads.append(g[slot] / ties if _is_result(factors[i], out[slot]) else 0.0)
        if include_self:
            arr_grad[slot] = grads.pop(0)
        else:
            arr_grad[slot] = 0.0
        for p, gv in zip(positions, grads):
            values_grad[p] = gv
    return arr_grad, values_grad
