"""One small exportable model per op family, with dynamic dimensions, for the pipeline tests.

Each entry: a Layer, the InputSpecs (None where a dimension is dynamic) and a function giving NumPy
inputs for a size ``n`` (the tests export once and run at two sizes).
"""

from __future__ import annotations

import numpy as np
import paddle

import paddle_ext


class Survival(paddle.nn.Layer):
    def forward(self, x):
        return paddle_ext.logcumsumexp(x, axis=1, reverse=True)


class Scatter(paddle.nn.Layer):
    def forward(self, arr, indices, values):
        return paddle_ext.put_along_axis(arr, indices, values, axis=1, reduce="mean", include_self=False)


class Lattice(paddle.nn.Layer):
    def forward(self, px, py):
        return paddle_ext.mutual_information_recursion(px, py)


class SimpleTransducer(paddle.nn.Layer):
    def forward(self, lm, am, symbols):
        return paddle_ext.rnnt_loss_simple(lm, am, symbols, termination_symbol=0, reduction="none")


class SmoothedTransducer(paddle.nn.Layer):
    def forward(self, lm, am, symbols, boundary):
        return paddle_ext.rnnt_loss_smoothed(lm, am, symbols, 0, 0.2, 0.1, boundary, delay_penalty=0.1,
                                             reduction="none")


class FullTransducer(paddle.nn.Layer):
    def forward(self, logits, symbols):
        return paddle_ext.rnnt_loss(logits, symbols, termination_symbol=0, reduction="none")


class PrunedTransducer(paddle.nn.Layer):
    """k2's pruned recipe: simple loss → ranges → pruning → pruned loss, all inside the graph."""

    def forward(self, lm, am, symbols, boundary):
        simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, reduction="none",
                                                                  return_grad=True)
        ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, s_range=2)
        am_pruned, lm_pruned = paddle_ext.do_rnnt_pruning(am, lm, ranges)
        pruned = paddle_ext.rnnt_loss_pruned(am_pruned + lm_pruned, symbols, ranges, 0, boundary,
                                             reduction="none")
        return simple, pruned


class JoinerTransducer(paddle.nn.Layer):
    """nn.TransducerJoiner's fused losses: RNN-T and TDT (durations 0 and 1) on one joiner."""

    def __init__(self):
        super().__init__()
        paddle.seed(11)
        self.joiner = paddle_ext.nn.TransducerJoiner(C, C, 6, C + 2)

    def forward(self, lm, am, symbols):
        return (self.joiner.rnnt_loss(am, lm, symbols, 0, reduction="none"),
                self.joiner.tdt_loss(am, lm, symbols, [0, 1], 0, reduction="none"))


def _adaptive_softmax():
    paddle.seed(7)
    return paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0)


def _rng(n):
    return np.random.default_rng(100 + n)


C = 5  # vocabulary of the transducer models


def _transducer_inputs(n):
    rng = _rng(n)
    B, S, T = n, n + 1, 2 * n + 1
    return {"lm": rng.normal(size=(B, S + 1, C)).astype("float32"),
            "am": rng.normal(size=(B, T, C)).astype("float32"),
            "symbols": rng.integers(1, C, size=(B, S)).astype("int64")}


def _bounded_inputs(n):
    inputs = _transducer_inputs(n)
    B, S = inputs["symbols"].shape
    T = inputs["am"].shape[1]
    ends = np.stack([np.full(B, S), np.full(B, T)], axis=1) - np.arange(B)[:, None] % 2  # ragged items
    inputs["boundary"] = np.concatenate([np.zeros((B, 2)), ends], axis=1).astype("int64")
    return inputs


def _full_inputs(n):
    rng = _rng(n)
    B, S, T = n, n + 1, 2 * n
    return {"logits": rng.normal(size=(B, T, S + 1, C)).astype("float32"),
            "symbols": rng.integers(1, C, size=(B, S)).astype("int64")}


def _spec(shape, dtype="float32", name=None):
    return paddle.static.InputSpec(shape=shape, dtype=dtype, name=name)


# name -> (layer factory, specs, inputs(n))
MODELS = {
    "logcumsumexp": (
        Survival,
        [_spec([None, 7], name="x")],
        lambda n: {"x": (_rng(n).normal(size=(n, 7)) * 3).astype("float32")},
    ),
    "put_along_axis": (
        Scatter,
        [_spec([None, 6], name="arr"), _spec([None, 3], "int64", "indices"), _spec([None, 3], name="values")],
        lambda n: {"arr": _rng(n).normal(size=(n, 6)).astype("float32"),
                   "indices": _rng(n).integers(-6, 6, size=(n, 3)).astype("int64"),
                   "values": _rng(n).normal(size=(n, 3)).astype("float32")},
    ),
    "mutual_information": (
        Lattice,
        [_spec([None, None, None], name="px"), _spec([None, None, None], name="py")],
        lambda n: {"px": _rng(n).normal(size=(n, n + 1, n + 3)).astype("float32"),
                   "py": _rng(n).normal(size=(n, n + 2, n + 2)).astype("float32")},
    ),
    "rnnt_loss_simple": (
        SimpleTransducer,
        [_spec([None, None, C], name="lm"), _spec([None, None, C], name="am"),
         _spec([None, None], "int64", "symbols")],
        _transducer_inputs,
    ),
    "rnnt_loss_smoothed": (
        SmoothedTransducer,
        [_spec([None, None, C], name="lm"), _spec([None, None, C], name="am"),
         _spec([None, None], "int64", "symbols"), _spec([None, 4], "int64", "boundary")],
        _bounded_inputs,
    ),
    "rnnt_loss": (
        FullTransducer,
        [_spec([None, None, None, C], name="logits"), _spec([None, None], "int64", "symbols")],
        _full_inputs,
    ),
    "rnnt_loss_pruned": (
        PrunedTransducer,
        [_spec([None, None, C], name="lm"), _spec([None, None, C], name="am"),
         _spec([None, None], "int64", "symbols"), _spec([None, 4], "int64", "boundary")],
        _bounded_inputs,
    ),
    "fused_joiner": (
        JoinerTransducer,
        [_spec([None, None, C], name="lm"), _spec([None, None, C], name="am"),
         _spec([None, None], "int64", "symbols")],
        _transducer_inputs,
    ),
    "adaptive_log_softmax": (
        _adaptive_softmax,
        [_spec([None, 8], name="input"), _spec([None], "int64", "label")],
        lambda n: {"input": _rng(n).normal(size=(3 * n, 8)).astype("float32"),
                   "label": _rng(n).integers(0, 20, size=(3 * n,)).astype("int64")},
    ),
}

SIZES = (2, 3)  # every model is exported once and run at both


def outputs(layer, inputs: dict) -> list[np.ndarray]:
    out = layer(*[paddle.to_tensor(a) for a in inputs.values()])
    out = out if isinstance(out, (tuple, list)) else [out]
    return [o.numpy() for o in out]


def export(name: str, prefix: str) -> dict:
    """Exports model `name` with its dynamic specs; returns {n: (inputs, dygraph outputs)}."""
    factory, specs, make_inputs = MODELS[name]
    layer = factory()
    layer.eval()
    expected = {n: (make_inputs(n), outputs(layer, make_inputs(n))) for n in SIZES}
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=specs, full_graph=True), prefix)
    return expected
