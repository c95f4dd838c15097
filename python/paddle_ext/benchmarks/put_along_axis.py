"""put_along_axis vs paddle.put_along_axis and torch.scatter_reduce / scatter (when torch is installed).

A [N, 64] float32 feature table scattered along axis 0 by [2N, 64] indices, every reduce mode,
forward and forward + backward, with two index patterns: `rows` (the GNN case: one destination
row drawn per index row) and `independent` (every element drawn on its own), plus independent
forward + backward rows at neighbouring shapes ([2N, 32], [N/2, 128], and [N/5, 64] with ten values
per slot); the GNN call
with indices of shape [2N, 1] broadcast against values [2N, 64] next to the same indices materialised
(time, and peak memory in a fresh process), and with values [2N, 1] too (one value per edge, add and
assign) next to the same values materialised; and a [1024, 1024] table scattered along axis 1. `--quick`
shrinks N from 1e6 to 1e5. "torch" runs on its default threads, "torch 1 thread" on one.
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
def _data(arr_shape, idx_shape, axis, pattern="rows", seed=0):
    """One data set alive at a time (the full graph case is ~2 GB), made on a case's first (warm-up) call
    and shared by the cases of that shape: NumPy arrays (shared with torch) and paddle tensors."""
    rng = np.random.default_rng(seed)
    arr = rng.standard_normal(size=arr_shape, dtype=np.float32)
    if axis == 0 and pattern == "rows":  # graph style: one destination row per index row
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
    """torch single-threaded (the baseline these rows compare with): torch.set_num_threads(1) around the call."""

    def run():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(threads)

    return run


def _forward_case(arr_shape, idx_shape, axis, reduce, repeats, pattern="rows"):
    key = (tuple(arr_shape), tuple(idx_shape), axis, pattern)

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
    label = f"fwd {reduce} {list(arr_shape)}<-{list(idx_shape)} axis={axis}{_tag(axis, pattern)}"
    return Case("put_along_axis", label, candidates, repeats=repeats)


def _backward_case(arr_shape, idx_shape, axis, reduce, repeats, pattern="rows"):
    key = (tuple(arr_shape), tuple(idx_shape), axis, pattern)

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
    label = f"fwd+bwd {reduce} {list(arr_shape)}<-{list(idx_shape)} axis={axis}{_tag(axis, pattern)}"
    return Case("put_along_axis", label, candidates, repeats=repeats)


def _tag(axis, pattern):
    return f" {pattern}" if axis == 0 else ""


# The peak is the process's VmHWM, reset to the resident size before the call (ru_maxrss would not do: a
# child's starts from its parent's peak at fork, so the bench process's own memory showed through).
_PEAK_PRELUDE = """
import re
def _status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
def start_peak():
    open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
    return _status("VmRSS")
def peak_since(before):
    return _status("VmHWM") - before
"""

_PEAK_SCRIPT = _PEAK_PRELUDE + """
import sys, paddle, paddle_ext
n, broadcast = int(sys.argv[1]), sys.argv[2] == "1"
arr, vals = paddle.randn([n, 64]), paddle.rand([2 * n, 64])  # made by Paddle: no NumPy high-water mark
rows = paddle.randint(0, n, [2 * n, 1])
before = start_peak()
paddle_ext.put_along_axis(arr, rows if broadcast else paddle.broadcast_to(rows, [2 * n, 64]), vals, 0, reduce="add")
print(peak_since(before))
"""


def _peak_mib(n, broadcast):
    """Peak RSS growth (MiB) of one call in a fresh process: what the call itself allocates."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    try:
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(n), "1" if broadcast else "0"],
                             capture_output=True, text=True, check=True, timeout=600)
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


@functools.lru_cache(maxsize=1)
def _rows(n):
    """The graph case's indices as the GNN call passes them: [2n, 1] (paddle and torch)."""
    _, idx, _ = _data((n, 64), (2 * n, 64), 0, "rows")[0]
    rows = np.ascontiguousarray(idx[:, :1])
    return rows, paddle.to_tensor(rows)


def _broadcast_case(n, repeats, backward=False):
    """indices [2n, 1] against values [2n, 64] (the usual GNN call), `add`: ours reads them in place;
    "materialised" is the same call with the indices broadcast to [2n, 64] first; Paddle 3.3.1's own
    broadcast rejects [2n, 1] against [2n, 64] values, so it gets them materialised too; torch takes an
    `expand` view."""
    key = ((n, 64), (2 * n, 64), 0, "rows")

    def step(fn, materialise=False):
        def run():
            if not case.note:  # measured on the first (warm-up) call, not when the cases are listed
                case.note = f"peak MiB of one call: [2N,1] {_peak_mib(n, True):.0f}, [2N,64] {_peak_mib(n, False):.0f}"
            arr, _, vals = _data(*key)[1]
            rows = _rows(n)[1]
            idx = paddle.broadcast_to(rows, [2 * n, 64]) if materialise else rows
            if not backward:
                return fn(arr, idx, vals, 0, reduce="add")
            arr, vals = arr.detach(), vals.detach()
            arr.stop_gradient = vals.stop_gradient = False
            return paddle.grad(fn(arr, idx, vals, 0, reduce="add"), [arr, vals])

        return run

    candidates = {"paddle_ext": step(paddle_ext.put_along_axis), "materialised": step(paddle_ext.put_along_axis, True),
                  "paddle": step(paddle.put_along_axis, True)}
    torch = torch_or_none()
    if torch is not None:
        def torch_step():
            arr, _, vals = (torch.from_numpy(a) for a in _data(*key)[0])
            idx = torch.from_numpy(_rows(n)[0]).expand(-1, 64)
            if not backward:
                return torch.scatter_reduce(arr, 0, idx, vals, "sum")
            arr, vals = arr.detach().requires_grad_(), vals.detach().requires_grad_()
            out = torch.scatter_reduce(arr, 0, idx, vals, "sum")
            return torch.autograd.grad(out, [arr, vals], grad_outputs=torch.ones_like(out))

        candidates["torch"] = torch_step
        candidates["torch 1 thread"] = _single_threaded(torch, torch_step)
    label = f"{'fwd+bwd' if backward else 'fwd'} add {[n, 64]}<-indices {[2 * n, 1]} broadcast"
    case = Case("put_along_axis", label, candidates, repeats=repeats)
    return case


_PEAK_VALUES_SCRIPT = _PEAK_PRELUDE + """
import sys, paddle, paddle_ext
n, materialise, reduce, backward = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4] == "1"
arr, vals = paddle.randn([n, 64]), paddle.rand([2 * n, 1]) + 0.5  # made by Paddle: no NumPy high-water mark
rows = paddle.randint(0, n, [2 * n, 1])
arr.stop_gradient = vals.stop_gradient = not backward
before = start_peak()
out = paddle_ext.put_along_axis(arr, rows, paddle.broadcast_to(vals, [2 * n, 64]) if materialise else vals, 0,
                                reduce=reduce)
if backward:
    paddle.grad(out, [arr, vals])
print(peak_since(before))
"""


def _peak_values_mib(n, materialise, reduce, backward):
    """Peak RSS growth (MiB) of one call (with its backward) with values [2n, 1], in a fresh process."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    try:
        out = subprocess.run([sys.executable, "-c", _PEAK_VALUES_SCRIPT, str(n), "1" if materialise else "0", reduce,
                              "1" if backward else "0"], capture_output=True, text=True, check=True, timeout=600)
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


@functools.lru_cache(maxsize=1)
def _row_values(n):
    """One value per index row, [2n, 1] in [0.5, 1.5) (paddle and torch)."""
    vals = np.random.default_rng(1).random(size=(2 * n, 1), dtype=np.float32) + 0.5
    return vals, paddle.to_tensor(vals)


def _broadcast_values_case(n, repeats, reduce, backward=False):
    """indices [2n, 1] and values [2n, 1] (one value per edge) against arr [n, 64]: ours reads both in
    place; "materialised" is the same call with the values broadcast to [2n, 64] first (what the API did
    before); Paddle gets indices and values materialised; torch takes `expand` views."""
    key = ((n, 64), (2 * n, 64), 0, "rows")

    def step(fn, materialise=False, indices_too=False):
        def run():
            if not case.note:  # measured on the first (warm-up) call, not when the cases are listed
                case.note = (f"peak MiB of one call: values [2N,1] {_peak_values_mib(n, False, reduce, backward):.0f}, "
                             f"[2N,64] {_peak_values_mib(n, True, reduce, backward):.0f}")
            arr = _data(*key)[1][0]
            rows, vals = _rows(n)[1], _row_values(n)[1]
            idx = paddle.broadcast_to(rows, [2 * n, 64]) if indices_too else rows
            if not backward:
                return fn(arr, idx, paddle.broadcast_to(vals, [2 * n, 64]) if materialise else vals, 0, reduce=reduce)
            arr, vals = arr.detach(), vals.detach()
            arr.stop_gradient = vals.stop_gradient = False
            v = paddle.broadcast_to(vals, [2 * n, 64]) if materialise else vals
            return paddle.grad(fn(arr, idx, v, 0, reduce=reduce), [arr, vals])

        return run

    candidates = {"paddle_ext": step(paddle_ext.put_along_axis), "materialised": step(paddle_ext.put_along_axis, True),
                  "paddle": step(paddle.put_along_axis, True, True)}
    torch = torch_or_none()
    if torch is not None:
        def torch_step():
            arr = torch.from_numpy(_data(*key)[0][0])
            idx = torch.from_numpy(_rows(n)[0]).expand(-1, 64)
            vals = torch.from_numpy(_row_values(n)[0])
            if backward:
                arr, vals = arr.detach().requires_grad_(), vals.detach().requires_grad_()
            out = _torch_scatter(torch, arr, 0, idx, vals.expand(-1, 64), reduce)
            if not backward:
                return out
            return torch.autograd.grad(out, [arr, vals], grad_outputs=torch.ones_like(out))

        candidates["torch"] = torch_step
        candidates["torch 1 thread"] = _single_threaded(torch, torch_step)
    label = f"{'fwd+bwd' if backward else 'fwd'} {reduce} {[n, 64]}<-indices {[2 * n, 1]} values {[2 * n, 1]} broadcast"
    case = Case("put_along_axis", label, candidates, repeats=repeats)
    return case


def cases(quick: bool):
    n = 100_000 if quick else 1_000_000
    graph = ((n, 64), (2 * n, 64), 0)
    square = ((1024, 1024), (1024, 1024), 1)
    repeats = 3 if quick else 2
    out = [_forward_case(*graph, r, repeats) for r in REDUCES]
    out += [_backward_case(*graph, r, repeats) for r in REDUCES]
    out += [_forward_case(*graph, r, repeats, "independent") for r in REDUCES]
    out += [_backward_case(*graph, r, repeats, "independent") for r in REDUCES]
    # neighbours of the GNN shape (a benchmark case is a sample of the workload): half and double the
    # features, and ten values per slot instead of two
    for arr_shape, idx_shape in (((2 * n, 32), (4 * n, 32)), ((n // 2, 128), (n, 128)), ((n // 5, 64), (2 * n, 64))):
        out += [_backward_case(arr_shape, idx_shape, 0, r, repeats, "independent") for r in ("assign", "add", "mean")]
    out += [_broadcast_case(n, repeats), _broadcast_case(n, repeats, backward=True)]
    out += [_broadcast_values_case(n, repeats, r, backward) for r in ("add", "assign") for backward in (False, True)]
    # along the last axis (the flat kernels), long rows: mean against add
    out += [_forward_case((64, n), (64, 2 * n), 1, r, repeats, "independent") for r in ("add", "mean")]
    out += [_forward_case(*square, r, 5) for r in REDUCES]
    out += [_backward_case(*square, r, 5) for r in ("add", "mean", "amax")]
    return out
