"""The per-call floor: each public function on tiny tensors (dygraph, float32) against the registered ops it
is built on, called directly, and Paddle's built-in where there is one.

A row times a loop of calls and reports µs per call (median of the repeats; the candidates of a row are
timed in turns). "raw op" is the chain of
registered ops (``_library.ops().pe_*``) the function runs for these arguments, plus the Paddle ops it
cannot avoid (a loss's reduction); its fwd+bwd goes through the registered grad ops. Ratios are
other / raw op: how much the Python wrapper adds to the dispatch floor (1.00x = nothing).
"""

from __future__ import annotations

import numpy as np
import paddle

import paddle_ext
from paddle_ext import _library
from paddle_ext.rnnt_loss.common import NO_CLAMP

from . import Case

CALLS, QUICK_CALLS = 2000, 20  # calls per timed sample


def _tensor(array, grad=False):
    t = paddle.to_tensor(array)
    t.stop_gradient = not grad
    return t


def _loop(fn, calls):
    def run():
        for _ in range(calls):
            fn()
    return run


def _fwd_bwd(fn, inputs, grad_outputs=None):
    """One forward and its grads w.r.t. ``inputs`` (paddle.grad, grad_outputs ones unless given)."""
    def step():
        out = fn()
        return paddle.grad(out, inputs, grad_outputs=grad_outputs)
    return step


def _case(family, kind, candidates, calls, note=""):
    # candidates timed in turns: the ratio is the point, and a shared machine's drift then hits them alike
    return Case("overhead", f"{family} {kind}", {k: _loop(f, calls) for k, f in candidates.items() if f},
                baseline="raw op", note=note, calls=calls, unit="us", alternate=True)


def _pair(family, calls, fwd, bwd, note=""):
    """The fwd and fwd+bwd rows of a family: fwd / bwd map a candidate name to its step."""
    return [_case(family, "fwd", fwd, calls, note), _case(family, "fwd+bwd", bwd, calls, note)]


def _logcumsumexp(calls):
    ops = _library.ops()
    x, xg = (_tensor(np.random.default_rng(0).normal(size=(4, 8)).astype("float32"), g) for g in (False, True))
    return _pair("logcumsumexp [4, 8]", calls, {
        "paddle_ext": lambda: paddle_ext.logcumsumexp(x, axis=1),
        "raw op": lambda: ops.pe_logcumsumexp(x, 1, False, False, False),
        "paddle": lambda: paddle.logcumsumexp(x, axis=1),
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.logcumsumexp(xg, axis=1), [xg]),
        "raw op": _fwd_bwd(lambda: ops.pe_logcumsumexp(xg, 1, False, False, False), [xg]),
        "paddle": _fwd_bwd(lambda: paddle.logcumsumexp(xg, axis=1), [xg]),
    })


def _put_along_axis(calls):
    ops = _library.ops()
    rng = np.random.default_rng(0)
    arr_np, values_np = rng.normal(size=(4, 8)).astype("float32"), rng.normal(size=(4, 2)).astype("float32")
    idx = _tensor(rng.integers(0, 8, size=(4, 2)).astype("int64"))
    arr, values = _tensor(arr_np), _tensor(values_np)
    arr_g, values_g = _tensor(arr_np, True), _tensor(values_np, True)
    rows = _pair("put_along_axis [4, 8]<-[4, 2]", calls, {
        "paddle_ext": lambda: paddle_ext.put_along_axis(arr, idx, values, 1),
        "raw op": lambda: ops.pe_put_along_axis(arr, idx, values, 1, "assign", True, False),
        "paddle": lambda: paddle.put_along_axis(arr, idx, values, 1),
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.put_along_axis(arr_g, idx, values_g, 1), [arr_g, values_g]),
        "raw op": _fwd_bwd(lambda: ops.pe_put_along_axis(arr_g, idx, values_g, 1, "assign", True, False),
                           [arr_g, values_g]),
        "paddle": _fwd_bwd(lambda: paddle.put_along_axis(arr_g, idx, values_g, 1), [arr_g, values_g]),
    })
    target = arr.clone()  # written again and again: the same values each time
    rows.append(_case("put_along_axis_ [4, 8]<-[4, 2]", "fwd", {
        "paddle_ext": lambda: paddle_ext.put_along_axis_(target, idx, values, 1),
        "raw op": lambda: ops.pe_put_along_axis_(target, idx, values, 1, "assign", True, False),
        "paddle": lambda: target.put_along_axis_(idx, values, 1),
    }, calls))
    return rows


def _lattice(B=2, S=3, T=4, C=5, seed=0):
    rng = np.random.default_rng(seed)
    px = rng.normal(-2.0, 1.0, size=(B, S, T + 1)).astype("float32")
    px[:, :, T] = -np.inf
    py = rng.normal(-1.0, 1.0, size=(B, S + 1, T)).astype("float32")
    lm = rng.normal(size=(B, S + 1, C)).astype("float32")
    am = rng.normal(size=(B, T, C)).astype("float32")
    logits = rng.normal(size=(B, T, S + 1, C)).astype("float32")
    symbols = rng.integers(1, C, size=(B, S)).astype("int64")
    return px, py, lm, am, logits, symbols


def _mutual_information(calls):
    ops = _library.ops()
    px_np, py_np = _lattice()[:2]
    px, py = _tensor(px_np), _tensor(py_np)
    pxg, pyg = _tensor(px_np, True), _tensor(py_np, True)
    rows = _pair("mutual_information_recursion B=2 S=3 T=4", calls, {
        "paddle_ext": lambda: paddle_ext.mutual_information_recursion(px, py),
        "raw op": lambda: ops.pe_mutual_information(px, py, None)[0],
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.mutual_information_recursion(pxg, pyg), [pxg, pyg]),
        "raw op": _fwd_bwd(lambda: ops.pe_mutual_information(pxg, pyg, None)[0], [pxg, pyg]),
    })
    pxs, pys = [pxg, _tensor(px_np * 0.5, True)], [pyg, _tensor(py_np * 0.5, True)]
    xs, ys = [x.detach() for x in pxs], [y.detach() for y in pys]

    def joint_raw(x, y):  # the fused op on the stacked terms
        return lambda: ops.pe_joint_mutual_information(paddle.stack(x), paddle.stack(y), None)[0]

    rows += _pair("joint_mutual_information_recursion N=2", calls, {
        "paddle_ext": lambda: paddle_ext.joint_mutual_information_recursion(xs, ys),
        "raw op": joint_raw(xs, ys),
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.joint_mutual_information_recursion(pxs, pys), pxs + pys),
        "raw op": _fwd_bwd(joint_raw(pxs, pys), pxs + pys),
    }, note="raw op: the terms stacked (two paddle.stack) and the fused op")
    return rows


def _rnnt(calls):
    ops = _library.ops()
    _, _, lm_np, am_np, logits_np, symbols_np = _lattice()
    lm, am, logits = _tensor(lm_np, True), _tensor(am_np, True), _tensor(logits_np, True)
    symbols = _tensor(symbols_np)
    B, T, S1, C = logits_np.shape
    ranges = _tensor((np.arange(T)[None, :, None] // 2 + np.arange(2)).repeat(B, 0).astype("int64"))
    pruned = _tensor(np.random.default_rng(1).normal(size=(B, T, 2, C)).astype("float32"), True)

    def simple_raw():
        px, py, _ = ops.pe_rnnt_simple_logprobs(lm, am, symbols, 0, False)
        return px, py

    def joint_raw(x, r):
        px, py, _, _ = ops.pe_rnnt_joint_logprobs(x, symbols, r, 0, NO_CLAMP)
        return px, py

    def loss_raw(logprobs):
        px, py = logprobs()
        return -paddle.sum(ops.pe_mutual_information(px, py, None)[0])

    rows = []
    for name, wrapper, raw, inputs in (
        ("rnnt_loss_simple", lambda: paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, reduction="sum"),
         lambda: loss_raw(simple_raw), [lm, am]),
        ("get_rnnt_logprobs", lambda: paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0), simple_raw, [lm, am]),
        ("rnnt_loss", lambda: paddle_ext.rnnt_loss(logits, symbols, 0, rnnt_type="modified", reduction="sum"),
         lambda: loss_raw(lambda: joint_raw(logits, None)), [logits]),
        ("get_rnnt_logprobs_joint", lambda: paddle_ext.get_rnnt_logprobs_joint(logits, symbols, 0, rnnt_type="modified"),
         lambda: joint_raw(logits, None), [logits]),
        ("rnnt_loss_pruned", lambda: paddle_ext.rnnt_loss_pruned(pruned, symbols, ranges, 0, rnnt_type="modified",
                                                                 reduction="sum"),
         lambda: loss_raw(lambda: joint_raw(pruned, ranges)), [pruned]),
    ):
        def detached(fn):
            def run():
                with paddle.no_grad():
                    return fn()
            return run

        rows += _pair(f"{name} B=2 S=3 T=4 C=5", calls, {"paddle_ext": detached(wrapper), "raw op": detached(raw)},
                      {"paddle_ext": _fwd_bwd(wrapper, inputs), "raw op": _fwd_bwd(raw, inputs)})
    return rows


def _adaptive(calls):
    ops = _library.ops()
    rng = np.random.default_rng(0)
    logits_np = rng.normal(size=(4, 8)).astype("float32")
    logits, logits_g = _tensor(logits_np), _tensor(logits_np, True)
    target = _tensor(rng.integers(0, 8, size=4).astype("int64"))
    rows = _pair("adaptive_log_softmax_target [4, 8]", calls, {
        "paddle_ext": lambda: paddle_ext.adaptive_log_softmax_target(logits, target),
        "raw op": lambda: ops.pe_adaptive_log_softmax_target(logits, target)[0],
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.adaptive_log_softmax_target(logits_g, target), [logits_g]),
        "raw op": _fwd_bwd(lambda: ops.pe_adaptive_log_softmax_target(logits_g, target)[0], [logits_g]),
    })
    offset = paddle.zeros([4], "float32")
    rows += _pair("adaptive_log_softmax_full [4, 8]", calls, {
        "paddle_ext": lambda: paddle_ext.adaptive_log_softmax_full(logits, offset),
        "raw op": lambda: ops.pe_adaptive_log_softmax_full(logits, offset)[0],
    }, {
        "paddle_ext": _fwd_bwd(lambda: paddle_ext.adaptive_log_softmax_full(logits_g, offset), [logits_g]),
        "raw op": _fwd_bwd(lambda: ops.pe_adaptive_log_softmax_full(logits_g, offset)[0], [logits_g]),
    })
    paddle.seed(0)
    ours = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [8, 14], div_value=2.0)
    theirs = paddle.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [8, 14], div_value=2.0)
    x = _tensor(rng.normal(size=(4, 16)).astype("float32"), True)
    label = _tensor(np.array([1, 9, 15, 3], dtype="int64"))
    rows += _pair("nn.AdaptiveLogSoftmaxWithLoss 16->20 N=4", calls, {
        "paddle_ext": lambda: ours(x.detach(), label),
        "paddle": lambda: theirs(x.detach(), label),
    }, {
        "paddle_ext": _fwd_bwd(lambda: ours(x, label)[1], [x]),
        "paddle": _fwd_bwd(lambda: theirs(x, label)[1], [x]),
    }, note="a layer of Paddle ops around the fused op: no raw op column")
    return rows


def cases(quick: bool):
    calls = QUICK_CALLS if quick else CALLS
    return [*_logcumsumexp(calls), *_put_along_axis(calls), *_mutual_information(calls), *_rnnt(calls),
            *_adaptive(calls)]
