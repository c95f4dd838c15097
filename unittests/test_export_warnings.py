"""Exporting a model (to_static + jit.save) of any op family emits no warning from paddle_ext's code.

Paddle 3.3.1's ``paddle.zeros_like``/``full_like`` read ``x.place``, which warns in a static program
("Tensor do not have 'place' interface for pir graph mode"), and so does a static ``paddle.where`` whose
condition broadcasts (it fills three zeros_like tensors). A warning counts as ours when paddle_ext's code
is on the stack that issued it: a frame in the package's files, or in the copy of a function that
to_static's AST conversion rewrote and runs from its temp folder (here only paddle_ext's functions and the
test models' forward, which calls nothing else). Paddle's own warnings outside the traced code (jit.save
of a model without parameters says so) do not count.
"""

from __future__ import annotations

import os
import pathlib
import traceback
import warnings

import paddle
import pytest

import paddle_ext
import pipeline_models
from op_test import static_mode
from paddle.jit.dy2static.utils import get_temp_dir
from paddle_ext import _fill
from paddle_ext.nn import AdaptiveEmbedding
from pipeline_models import _spec

OURS = (str(pathlib.Path(paddle_ext.__file__).parent), get_temp_dir())


class LogProbAndPredict(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.softmax = pipeline_models._adaptive_softmax()

    def forward(self, x):
        return self.softmax.log_prob(x), self.softmax.predict(x)


class AdaptiveInputAndSoftmax(paddle.nn.Layer):
    def __init__(self, tied):
        super().__init__()
        self.softmax = pipeline_models._adaptive_softmax()
        self.embedding = AdaptiveEmbedding(20, 8, [5, 12], 2.0, tied_to=self.softmax if tied else None)

    def forward(self, ids, label):
        return self.softmax(self.embedding(ids), label)


class Functional(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.softmax = pipeline_models._adaptive_softmax()

    def forward(self, x, label):
        s = self.softmax
        return paddle_ext.nn.functional.adaptive_log_softmax_with_loss(
            x, label, s.head_weight, [list(pair) for pair in s.tail_weights], s.cutoffs, ignore_index=3)


class AdaptiveOps(paddle.nn.Layer):
    def forward(self, logits, target):
        return paddle_ext.adaptive_log_softmax_target(logits, target), paddle_ext.adaptive_log_softmax_full(logits)


class Joint(paddle.nn.Layer):
    def forward(self, px0, px1, py0, py1):
        return paddle_ext.joint_mutual_information_recursion([px0, px1], [py0, py1])


MODELS = {name: (factory, specs) for name, (factory, specs, _) in pipeline_models.MODELS.items()}
MODELS.update({
    "adaptive log_prob and predict": (LogProbAndPredict, [_spec([None, 8], name="x")]),
    "AdaptiveEmbedding tied": (lambda: AdaptiveInputAndSoftmax(True),
                               [_spec([None], "int64", "ids"), _spec([None], "int64", "label")]),
    "AdaptiveEmbedding untied": (lambda: AdaptiveInputAndSoftmax(False),
                                 [_spec([None], "int64", "ids"), _spec([None], "int64", "label")]),
    "adaptive_log_softmax_with_loss": (Functional, [_spec([None, 8], name="x"), _spec([None], "int64", "label")]),
    "adaptive ops": (AdaptiveOps, [_spec([None, 6], name="logits"), _spec([None], "int64", "target")]),
    "joint_mutual_information_recursion": (Joint, [_spec([None, None, None], name=n)
                                                  for n in ("px0", "px1", "py0", "py1")]),
})


@pytest.mark.parametrize("name", list(MODELS))
def test_export_emits_no_warning_from_our_code(name, tmp_path):
    factory, specs = MODELS[name]
    layer = factory()
    layer.eval()
    caught = []

    def record(message, category, filename, lineno, file=None, line=None):
        stack = traceback.extract_stack()[:-1]
        ours = [f for f in stack if f.filename.startswith(OURS)]
        if ours:
            caught.append(f"{category.__name__}: {message}\n  from {ours[-1].filename}:{ours[-1].lineno} "
                          f"{ours[-1].name}\n  issued at {filename}:{lineno}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=specs, full_graph=True), str(tmp_path / "model"))
    assert os.path.exists(tmp_path / "model.json") or os.path.exists(tmp_path / "model.pdmodel")
    assert not caught, "\n".join(caught)


def _fills(module):
    return lambda x: (module.zeros_like(x), module.full_like(x, float("-inf")), module.zeros_like(x, "int64"))


@pytest.mark.parametrize("legacy", [False, True])
def test_fills_build_the_program_paddle_builds_without_its_warning(legacy):
    """paddle_ext's zeros_like/full_like give the program of Paddle's (the same ops and attributes, the
    place included), and warn not, where Paddle's do."""
    def program(fill):
        with warnings.catch_warnings(record=True) as caught, static_mode(legacy), paddle.utils.unique_name.guard():
            warnings.simplefilter("always")
            main = paddle.static.Program()
            with paddle.static.program_guard(main, paddle.static.Program()):
                fill(paddle.static.data("x", [-1, 3], "float32"))
        return str(main), [str(w.message) for w in caught]

    theirs, their_warnings = program(_fills(paddle))
    ours, our_warnings = program(_fills(_fill))
    assert "full_like" in ours and ours == theirs
    assert our_warnings == []
    assert legacy or len(their_warnings) == 3  # (the reason for _fill: Paddle's warn in PIR)


def test_fills_in_dygraph_are_paddles():
    x = paddle.to_tensor([[1.0, float("nan")]])
    for ours, theirs in zip(_fills(_fill)(x), _fills(paddle)(x)):
        assert ours.dtype == theirs.dtype and ours.place == theirs.place
        assert ours.numpy().tolist() == theirs.numpy().tolist()
