"""Every error names the public function the user called, never one it is built on: rnnt_loss_simple's
errors say rnnt_loss_simple (not get_rnnt_logprobs, whose code it shares), get_rnnt_logprobs_joint's say
get_rnnt_logprobs_joint (not rnnt_loss), and so on. A bad argument reaching a shared check (the symbols'
dtype, the boundary rows, a label's dtype or range) is tried on each public entry point, in dygraph and
(for the checks that need no values) while building PIR and legacy-IR programs."""

import numpy as np
import paddle
import pytest

import paddle_ext
from op_test import static_mode
from paddle_ext.nn import AdaptiveEmbedding, AdaptiveLogSoftmaxWithLoss
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss

B, S, T, C, R = 2, 3, 4, 5, 2
rng = np.random.default_rng(0)
LM, AM = rng.normal(size=(B, S + 1, C)), rng.normal(size=(B, T, C))
LOGITS, PRUNED = rng.normal(size=(B, T, S + 1, C)), rng.normal(size=(B, T, R, C))
SYMBOLS = rng.integers(1, C, size=(B, S)).astype(np.int64)
FLOAT_SYMBOLS = SYMBOLS.astype(np.float32)
RANGES = np.broadcast_to(np.arange(R), (B, T, R)).astype(np.int64)
PX, PY = rng.normal(size=(B, S, T + 1)), rng.normal(size=(B, S + 1, T))
BAD_BOUNDARY = np.array([[0, 0, S + 1, T]] * B, np.int64)  # s_end > S
X = rng.normal(size=(6, 8)).astype(np.float32)
W, BIAS = rng.normal(size=(C, 6)), rng.normal(size=(6,))  # a joiner: am [B, T, C], lm [B, S+1, C] -> 6 outputs
LABELS, FLOAT_LABELS, BAD_LABELS = np.arange(6, dtype=np.int64), np.arange(6, dtype=np.float32), np.full(6, 99)


def _softmax():
    return AdaptiveLogSoftmaxWithLoss(8, 20, [4, 10])


def _functional(x, label):
    layer = _softmax()
    return adaptive_log_softmax_with_loss(x, label, layer.head_weight, [list(p) for p in layer.tail_weights],
                                          layer.cutoffs)


# (the name the error must start with, the call, its arrays): symbols of a float dtype, or labels / ids / targets
DTYPE_CASES = [
    ("get_rnnt_logprobs", lambda lm, am, s: paddle_ext.get_rnnt_logprobs(lm, am, s, 0), (LM, AM, FLOAT_SYMBOLS)),
    ("rnnt_loss_simple", lambda lm, am, s: paddle_ext.rnnt_loss_simple(lm, am, s, 0), (LM, AM, FLOAT_SYMBOLS)),
    ("get_rnnt_logprobs_smoothed", lambda lm, am, s: paddle_ext.get_rnnt_logprobs_smoothed(lm, am, s, 0),
     (LM, AM, FLOAT_SYMBOLS)),
    ("rnnt_loss_smoothed", lambda lm, am, s: paddle_ext.rnnt_loss_smoothed(lm, am, s, 0), (LM, AM, FLOAT_SYMBOLS)),
    ("get_rnnt_logprobs_joint", lambda x, s: paddle_ext.get_rnnt_logprobs_joint(x, s, 0), (LOGITS, FLOAT_SYMBOLS)),
    ("rnnt_loss", lambda x, s: paddle_ext.rnnt_loss(x, s, 0), (LOGITS, FLOAT_SYMBOLS)),
    ("get_rnnt_logprobs_pruned", lambda x, s, r: paddle_ext.get_rnnt_logprobs_pruned(x, s, r, 0),
     (PRUNED, FLOAT_SYMBOLS, RANGES)),
    ("rnnt_loss_pruned", lambda x, s, r: paddle_ext.rnnt_loss_pruned(x, s, r, 0), (PRUNED, FLOAT_SYMBOLS, RANGES)),
    ("tdt_loss", lambda x, s: paddle_ext.tdt_loss(x, s, [0, 1], 0), (LOGITS, FLOAT_SYMBOLS)),
    ("multiblank_rnnt_loss", lambda x, s: paddle_ext.multiblank_rnnt_loss(x, s, [2], 4), (LOGITS, FLOAT_SYMBOLS)),
    ("rnnt_loss_fused_joiner", lambda a, l, w, b, s: paddle_ext.rnnt_loss_fused_joiner(a, l, w, b, s, 0),
     (AM, LM, W, BIAS, FLOAT_SYMBOLS)),
    ("rnnt_loss_fused_joiner", lambda a, l, w, b, s, r: paddle_ext.rnnt_loss_fused_joiner(a, l, w, b, s, 0, ranges=r),
     (AM, LM, W, BIAS, SYMBOLS, RANGES.astype(np.float32))),
    ("tdt_loss_fused_joiner", lambda a, l, w, b, s: paddle_ext.tdt_loss_fused_joiner(a, l, w, b, s, [0, 1], 0),
     (AM, LM, W, BIAS, FLOAT_SYMBOLS)),
    ("multiblank_rnnt_loss_fused_joiner",
     lambda a, l, w, b, s: paddle_ext.multiblank_rnnt_loss_fused_joiner(a, l, w, b, s, [2], 4),
     (AM, LM, W, BIAS, FLOAT_SYMBOLS)),
    ("rnnt_loss_fused_joiner", lambda a, l, w, s: paddle_ext.rnnt_loss_fused_joiner(a, l, w, None, s, 0),
     (AM, LM, W.astype(np.float32), SYMBOLS)),  # weight of another dtype
    ("do_rnnt_pruning", paddle_ext.do_rnnt_pruning, (SYMBOLS.reshape(B, S, 1), LM, RANGES)),  # an int am
    ("mutual_information_recursion", paddle_ext.mutual_information_recursion, (PX, PY.astype(np.float32))),
    ("joint_mutual_information_recursion", lambda px, py: paddle_ext.joint_mutual_information_recursion([px], [py]),
     (PX, PY.astype(np.float32))),
    ("adaptive_log_softmax_with_loss", _functional, (X, FLOAT_LABELS)),
    ("AdaptiveLogSoftmaxWithLoss", lambda x, y: _softmax()(x, y), (X, FLOAT_LABELS)),
    ("AdaptiveLogSoftmaxWithLoss", lambda y: _softmax().log_prob(y), (LABELS,)),  # an int input
    ("AdaptiveLogSoftmaxWithLoss", lambda y: _softmax().predict(y), (LABELS,)),
    ("AdaptiveEmbedding", lambda y: AdaptiveEmbedding(20, 8, [4, 10])(y), (FLOAT_LABELS,)),
    ("adaptive_log_softmax_target", paddle_ext.adaptive_log_softmax_target, (X, FLOAT_LABELS)),
    ("adaptive_log_softmax_full", paddle_ext.adaptive_log_softmax_full, (X[:, 0].astype(np.int64),)),  # int logits
]

# checks of values, made in dygraph: a boundary row outside the lattice, a label out of range
VALUE_CASES = [
    ("get_rnnt_logprobs", lambda lm, am, s, b: paddle_ext.get_rnnt_logprobs(lm, am, s, 0, boundary=b),
     (LM, AM, SYMBOLS, BAD_BOUNDARY)),
    ("rnnt_loss_simple", lambda lm, am, s, b: paddle_ext.rnnt_loss_simple(lm, am, s, 0, b), (LM, AM, SYMBOLS, BAD_BOUNDARY)),
    ("get_rnnt_logprobs_smoothed", lambda lm, am, s, b: paddle_ext.get_rnnt_logprobs_smoothed(lm, am, s, 0, boundary=b),
     (LM, AM, SYMBOLS, BAD_BOUNDARY)),
    ("rnnt_loss_smoothed", lambda lm, am, s, b: paddle_ext.rnnt_loss_smoothed(lm, am, s, 0, boundary=b),
     (LM, AM, SYMBOLS, BAD_BOUNDARY)),
    ("get_rnnt_logprobs_joint", lambda x, s, b: paddle_ext.get_rnnt_logprobs_joint(x, s, 0, b),
     (LOGITS, SYMBOLS, BAD_BOUNDARY)),
    ("rnnt_loss", lambda x, s, b: paddle_ext.rnnt_loss(x, s, 0, b), (LOGITS, SYMBOLS, BAD_BOUNDARY)),
    ("get_rnnt_logprobs_pruned", lambda x, s, r, b: paddle_ext.get_rnnt_logprobs_pruned(x, s, r, 0, b),
     (PRUNED, SYMBOLS, RANGES, BAD_BOUNDARY)),
    ("rnnt_loss_pruned", lambda x, s, r, b: paddle_ext.rnnt_loss_pruned(x, s, r, 0, b),
     (PRUNED, SYMBOLS, RANGES, BAD_BOUNDARY)),
    ("tdt_loss", lambda x, s, b: paddle_ext.tdt_loss(x, s, [0, 1], 0, b), (LOGITS, SYMBOLS, BAD_BOUNDARY)),
    ("multiblank_rnnt_loss", lambda x, s, b: paddle_ext.multiblank_rnnt_loss(x, s, [2], 4, b),
     (LOGITS, SYMBOLS, BAD_BOUNDARY)),
    ("rnnt_loss_fused_joiner", lambda a, l, w, b, s, bd: paddle_ext.rnnt_loss_fused_joiner(a, l, w, b, s, 0, bd),
     (AM, LM, W, BIAS, SYMBOLS, BAD_BOUNDARY)),
    ("rnnt_loss_fused_joiner", lambda a, l, w, b, s, r: paddle_ext.rnnt_loss_fused_joiner(a, l, w, b, s, 0, ranges=r),
     (AM, LM, W, BIAS, SYMBOLS, RANGES + S)),  # ranges past S
    ("tdt_loss_fused_joiner", lambda a, l, w, b, s, bd: paddle_ext.tdt_loss_fused_joiner(a, l, w, b, s, [0, 1], 0, bd),
     (AM, LM, W, BIAS, SYMBOLS % 4, BAD_BOUNDARY)),
    ("multiblank_rnnt_loss_fused_joiner",
     lambda a, l, w, b, s, bd: paddle_ext.multiblank_rnnt_loss_fused_joiner(a, l, w, b, s, [2], 4, bd),
     (AM, LM, W, BIAS, SYMBOLS, BAD_BOUNDARY)),
    ("get_rnnt_prune_ranges", lambda px, py, b: paddle_ext.get_rnnt_prune_ranges(px, py, b, 2), (PX, PY, BAD_BOUNDARY)),
    ("do_rnnt_pruning", paddle_ext.do_rnnt_pruning, (AM, LM, RANGES + S)),  # ranges past S
    ("mutual_information_recursion", paddle_ext.mutual_information_recursion, (PX, PY, BAD_BOUNDARY)),
    ("joint_mutual_information_recursion", lambda px, py, b: paddle_ext.joint_mutual_information_recursion([px], [py], b),
     (PX, PY, BAD_BOUNDARY)),
    ("adaptive_log_softmax_with_loss", _functional, (X, BAD_LABELS)),
    ("AdaptiveLogSoftmaxWithLoss", lambda x, y: _softmax()(x, y), (X, BAD_LABELS)),
    ("AdaptiveEmbedding", lambda y: AdaptiveEmbedding(20, 8, [4, 10])(y), (BAD_LABELS,)),
    ("adaptive_log_softmax_target", paddle_ext.adaptive_log_softmax_target, (X, BAD_LABELS)),
]


def _ids(cases):
    return [f"{name}-{i}" for i, (name, _, _) in enumerate(cases)]


def _call(mode, fn, arrays):
    if mode == "dygraph":
        return fn(*(paddle.to_tensor(a) for a in arrays))
    with static_mode(legacy=mode == "legacy_static"):
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            return fn(*(paddle.static.data(f"in{i}", list(a.shape), str(a.dtype)) for i, a in enumerate(arrays)))


@pytest.mark.parametrize("mode", ["dygraph", "static", "legacy_static"])
@pytest.mark.parametrize("name,fn,arrays", DTYPE_CASES, ids=_ids(DTYPE_CASES))
def test_dtype_errors_name_the_function_called(name, fn, arrays, mode):
    with pytest.raises(TypeError, match=f"^{name}: "):
        _call(mode, fn, arrays)


@pytest.mark.parametrize("name,fn,arrays", VALUE_CASES, ids=_ids(VALUE_CASES))
def test_value_errors_name_the_function_called(name, fn, arrays):
    with pytest.raises(ValueError, match=f"^{name}: "):
        _call("dygraph", fn, arrays)


@pytest.mark.parametrize("name,fn,arrays", [
    ("get_rnnt_logprobs_joint", lambda x, s: paddle_ext.get_rnnt_logprobs_joint(x, s, 0), (LOGITS, SYMBOLS)),
    ("get_rnnt_logprobs_pruned", lambda x, s, r: paddle_ext.get_rnnt_logprobs_pruned(x, s, r, 0), (PRUNED, SYMBOLS, RANGES)),
])
def test_higher_order_grad_errors_name_the_function_called(name, fn, arrays):
    logits, *rest = (paddle.to_tensor(a) for a in arrays)
    logits.stop_gradient = False
    px, py = fn(logits, *rest)
    (g,) = paddle.grad(px.sum() + py.sum(), logits, create_graph=True)  # (the refusal comes with a backward through g)
    with pytest.raises(NotImplementedError, match=rf"{name}\b.*: higher-order grads are not supported"):
        paddle.grad((g * g).sum(), logits)
