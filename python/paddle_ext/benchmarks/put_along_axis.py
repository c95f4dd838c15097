"""put_along_axis vs paddle.put_along_axis and torch.scatter_reduce / scatter (when torch is installed).

The GNN-style case of issue 3: rows of a [N, 64] float32 feature table scattered along axis 0 by
[2N, 64] indices (a row drawn uniformly per index row), every reduce mode, forward and forward +
backward; and a [1024, 1024] table scattered along axis 1. `--quick` shrinks N from 1e6 to 1e5.
"""

from __future__ import annotations

import numpy as np
import paddle

import paddle_ext

from . import Case, torch_or_none

REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
TORCH_REDUCE = {"add": "sum", "mul": "prod", "mean": "mean", "amin": "amin", "amax": "amax"}


def _data(arr_shape, idx_shape, axis, seed=0):
    rng = np.random.default_rng(seed)
    arr = rng.normal(size=arr_shape).astype(np.float32)
    if axis == 0:  # graph style: one destination row per index row
        rows = rng.integers(0, arr_shape[0], size=(idx_shape[0], 1))
        idx = np.ascontiguousarray(np.broadcast_to(rows, idx_shape))
    else:
        idx = rng.integers(0, arr_shape[axis], size=idx_shape)
    vals = rng.uniform(0.5, 1.5, size=idx_shape).astype(np.float32)  # products stay finite
    return arr, idx.astype(np.int64), vals


def _forward_case(arr_shape, idx_shape, axis, reduce, repeats):
    arr_np, idx_np, vals_np = _data(arr_shape, idx_shape, axis)
    arr, idx, vals = paddle.to_tensor(arr_np), paddle.to_tensor(idx_np), paddle.to_tensor(vals_np)
    candidates = {
        "paddle_ext": lambda: paddle_ext.put_along_axis(arr, idx, vals, axis, reduce=reduce),
        "paddle": lambda: paddle.put_along_axis(arr, idx, vals, axis, reduce=reduce),
    }
    torch = torch_or_none()
    if torch is not None:
        ta, ti, tv = torch.from_numpy(arr_np), torch.from_numpy(idx_np), torch.from_numpy(vals_np)
        if reduce == "assign":
            candidates["torch"] = lambda: torch.scatter(ta, axis, ti, tv)
        else:
            candidates["torch"] = lambda: torch.scatter_reduce(ta, axis, ti, tv, TORCH_REDUCE[reduce])
    label = f"fwd {reduce} {list(arr_shape)}<-{list(idx_shape)} axis={axis}"
    return Case("put_along_axis", label, candidates, repeats=repeats)


def _backward_case(arr_shape, idx_shape, axis, reduce, repeats):
    arr_np, idx_np, vals_np = _data(arr_shape, idx_shape, axis)
    idx = paddle.to_tensor(idx_np)

    def run(fn):
        arr = paddle.to_tensor(arr_np, stop_gradient=False)
        vals = paddle.to_tensor(vals_np, stop_gradient=False)

        def step():
            out = fn(arr, idx, vals, axis, reduce=reduce)
            return paddle.grad(out, [arr, vals])

        return step

    candidates = {"paddle_ext": run(paddle_ext.put_along_axis), "paddle": run(paddle.put_along_axis)}
    torch = torch_or_none()
    if torch is not None:
        ti = torch.from_numpy(idx_np)

        def torch_step():
            ta = torch.from_numpy(arr_np).requires_grad_()
            tv = torch.from_numpy(vals_np).requires_grad_()
            out = (torch.scatter(ta, axis, ti, tv) if reduce == "assign"
                   else torch.scatter_reduce(ta, axis, ti, tv, TORCH_REDUCE[reduce]))
            return torch.autograd.grad(out, [ta, tv], grad_outputs=torch.ones_like(out))

        candidates["torch"] = torch_step
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
