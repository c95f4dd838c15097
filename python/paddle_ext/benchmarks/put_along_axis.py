"""put_along_axis vs paddle.put_along_axis and torch.scatter_reduce / scatter (when torch is installed).

The GNN-style case of issue 3: rows of a [N, 64] float32 feature table scattered along axis 0 by
[2N, 64] indices (a row drawn uniformly per index row), every reduce mode, forward and forward +
backward; and a [1024, 1024] table scattered along axis 1. `--quick` shrinks N from 1e6 to 1e5.
"""

from __future__ import annotations

import functools

import numpy as np
import paddle

import paddle_ext

from . import Case, torch_or_none

REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
TORCH_REDUCE = {"add": "sum", "mul": "prod", "mean": "mean", "amin": "amin", "amax": "amax"}


@functools.lru_cache(maxsize=1)
def _data(arr_shape, idx_shape, axis, seed=0):
    """One data set alive at a time (the full graph case is ~2 GB), made on a case's first (warm-up) call
    and shared by the cases of that shape: NumPy arrays (shared with torch) and paddle tensors."""
    rng = np.random.default_rng(seed)
    arr = rng.standard_normal(size=arr_shape, dtype=np.float32)
    if axis == 0:  # graph style: one destination row per index row
        rows = rng.integers(0, arr_shape[0], size=(idx_shape[0], 1))
        idx = np.ascontiguousarray(np.broadcast_to(rows, idx_shape))
    else:
        idx = rng.integers(0, arr_shape[axis], size=idx_shape)
    vals = (rng.random(size=idx_shape, dtype=np.float32) + 0.5)  # in [0.5, 1.5): products stay finite
    arrays = (arr, idx.astype(np.int64), vals)
    tensors = tuple(paddle.to_tensor(a) for a in arrays)
    return arrays, tensors


def _torch_scatter(torch, ta, axis, ti, tv, reduce):
    if reduce == "assign":
        return torch.scatter(ta, axis, ti, tv)
    return torch.scatter_reduce(ta, axis, ti, tv, TORCH_REDUCE[reduce])


def _single_threaded(torch, fn):
    """The issue's torch baseline is single-threaded: torch.set_num_threads(1) around the call."""

    def run():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(threads)

    return run


def _forward_case(arr_shape, idx_shape, axis, reduce, repeats):
    key = (tuple(arr_shape), tuple(idx_shape), axis)

    def ours():
        arr, idx, vals = _data(*key)[1]
        return paddle_ext.put_along_axis(arr, idx, vals, axis, reduce=reduce)

    def theirs():
        arr, idx, vals = _data(*key)[1]
        return paddle.put_along_axis(arr, idx, vals, axis, reduce=reduce)

    candidates = {"paddle_ext": ours, "paddle": theirs}
    torch = torch_or_none()
    if torch is not None:
        def torch_fwd():
            arr, idx, vals = (torch.from_numpy(a) for a in _data(*key)[0])
            return _torch_scatter(torch, arr, axis, idx, vals, reduce)

        candidates["torch"] = torch_fwd
        candidates["torch 1 thread"] = _single_threaded(torch, torch_fwd)
    label = f"fwd {reduce} {list(arr_shape)}<-{list(idx_shape)} axis={axis}"
    return Case("put_along_axis", label, candidates, repeats=repeats)


def _backward_case(arr_shape, idx_shape, axis, reduce, repeats):
    key = (tuple(arr_shape), tuple(idx_shape), axis)

    def run(fn):
        def step():
            arr, idx, vals = _data(*key)[1]
            arr, vals = arr.detach(), vals.detach()
            arr.stop_gradient = vals.stop_gradient = False
            out = fn(arr, idx, vals, axis, reduce=reduce)
            return paddle.grad(out, [arr, vals])

        return step

    candidates = {"paddle_ext": run(paddle_ext.put_along_axis), "paddle": run(paddle.put_along_axis)}
    torch = torch_or_none()
    if torch is not None:
        def torch_step():
            arr, idx, vals = (torch.from_numpy(a) for a in _data(*key)[0])
            arr, vals = arr.detach().requires_grad_(), vals.detach().requires_grad_()
            out = _torch_scatter(torch, arr, axis, idx, vals, reduce)
            return torch.autograd.grad(out, [arr, vals], grad_outputs=torch.ones_like(out))

        candidates["torch"] = torch_step
        candidates["torch 1 thread"] = _single_threaded(torch, torch_step)
    label = f"fwd+bwd {reduce} {list(arr_shape)}<-{list(idx_shape)} axis={axis}"
    return Case("put_along_axis", label, candidates, repeats=repeats)


def cases(quick: bool):
    n = 100_000 if quick else 1_000_000
    graph = ((n, 64), (2 * n, 64), 0)
    square = ((1024, 1024), (1024, 1024), 1)
    repeats = 3 if quick else 2
    out = [_forward_case(*graph, r, repeats) for r in REDUCES]
    out += [_backward_case(*graph, r, repeats) for r in REDUCES]
    out += [_forward_case(*square, r, 5) for r in REDUCES]
    out += [_backward_case(*square, r, 5) for r in ("add", "mean", "amax")]
    return out
