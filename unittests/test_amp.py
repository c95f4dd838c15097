"""Mixed precision: float16/bfloat16 inputs and paddle.amp.auto_cast (O1, O2) for every op family.

The contract (docs/architecture.md, "Mixed precision", and each op's page):

* Outside auto_cast every op accepts float16/bfloat16, computes in float32 inside, and returns its
  results (and its inputs' grads) in the input dtype, within that dtype's rounding of the float32
  result on the same rounded inputs.
* Under auto_cast each op follows the rule of its built-in counterpart in Paddle's AMP lists:
  logcumsumexp and the adaptive-softmax ops are float32 ops at O1 (as cumsum / log_softmax) and run in
  their input's dtype at O2; put_along_axis promotes mixed dtypes (as paddle.put_along_axis); the
  lattice recursion and the RNN-T losses, and the adaptive-softmax layer, compute and return float32.
* Models using each op train under auto_cast O1 and O2 (bfloat16), in dygraph and under to_static.

On CPU Paddle turns dygraph auto_cast (and amp.decorate) off, so the dygraph runs check that nothing
breaks; static programs (auto_cast inside a to_static forward) apply AMP on CPU too, and those runs
have bfloat16 matmuls feeding the ops.
"""

import warnings

import numpy as np
import paddle
import pytest

import paddle_ext
import op_test
from op_test import RTOL, _to_numpy64, assert_close, round_to_dtype
from paddle_ext.nn import AdaptiveEmbedding, AdaptiveLogSoftmaxWithLoss
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss

HALF = ["float16", "bfloat16"]
LEVELS = ["O1", "O2"]
B, T, S, C = 2, 5, 3, 4


@pytest.fixture(autouse=True)
def _quiet_amp():
    with warnings.catch_warnings():  # "amp_guard can only be enabled on CUDAPlace ..." on CPU
        warnings.simplefilter("ignore", UserWarning)
        yield


# ---------------------------------------------------------------------------------------------------
# 1. 16-bit inputs outside auto_cast: in dtype -> out dtype, grads in dtype, close to float32


def _boundary():
    return paddle.to_tensor(np.array([[0, 0, S, T], [0, 0, S - 1, T - 1]], np.int64))


def _symbols():
    return paddle.to_tensor(np.array([[1, 2, 3], [3, 1, 2]], np.int64))


def _ranges():
    lm, am = paddle.randn([B, S + 1, C]), paddle.randn([B, T, C])
    _, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(lm, am, _symbols(), 0, _boundary(), return_grad=True)
    return paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, _boundary(), 2)


# name -> (shapes of the floating inputs, fn(*floats)); the floats are all of the dtype under test
LM_AM = [[B, S + 1, C], [B, T, C]]
CASES = {
    "mutual_information_recursion": (
        [[B, S, T + 1], [B, S + 1, T]], lambda px, py: paddle_ext.mutual_information_recursion(px, py, _boundary())),
    "mutual_information_recursion(return_grad)": (
        [[B, S, T], [B, S + 1, T]], lambda px, py: paddle_ext.mutual_information_recursion(px, py, return_grad=True)),
    "joint_mutual_information_recursion": (
        [[B, S, T + 1], [B, S, T + 1], [B, S + 1, T], [B, S + 1, T]],
        lambda x0, x1, y0, y1: paddle_ext.joint_mutual_information_recursion([x0, x1], [y0, y1], _boundary())),
    "rnnt_loss_simple": (
        LM_AM, lambda lm, am: paddle_ext.rnnt_loss_simple(lm, am, _symbols(), 0, _boundary(), reduction="none")),
    "rnnt_loss_simple(return_grad)": (
        LM_AM, lambda lm, am: paddle_ext.rnnt_loss_simple(lm, am, _symbols(), 0, _boundary(), return_grad=True)),
    "rnnt_loss_smoothed": (
        LM_AM, lambda lm, am: paddle_ext.rnnt_loss_smoothed(lm, am, _symbols(), 0, 0.2, 0.1, _boundary(),
                                                             rnnt_type="modified", reduction="sum")),
    "rnnt_loss": (
        [[B, T, S + 1, C]], lambda x: paddle_ext.rnnt_loss(x, _symbols(), 0, _boundary(), delay_penalty=0.1)),
    "rnnt_loss_pruned": (
        [[B, T, 2, C]], lambda x: paddle_ext.rnnt_loss_pruned(x, _symbols(), _ranges(), 0, _boundary(), clamp=0.05)),
    "rnnt_loss(return_grad, fastemit_lambda)": (
        [[B, T, S + 1, C]], lambda x: paddle_ext.rnnt_loss(x, _symbols(), 0, _boundary(), return_grad=True,
                                                           fastemit_lambda=0.5)),
    "tdt_loss": (
        [[B, T, S + 1, C + 3]], lambda x: paddle_ext.tdt_loss(x, _symbols(), [0, 1, 2], 0, _boundary(), sigma=0.05,
                                                              fastemit_lambda=0.5)),
    "multiblank_rnnt_loss": (
        [[B, T, S + 1, C]], lambda x: paddle_ext.multiblank_rnnt_loss(x, _symbols() - 1, [2], 3, _boundary(),
                                                                      reduction="none")),
    "rnnt_loss_pruned(return_grad, fastemit_lambda)": (
        [[B, T, 2, C]], lambda x: paddle_ext.rnnt_loss_pruned(x, _symbols(), _ranges(), 0, _boundary(),
                                                              return_grad=True, fastemit_lambda=0.5)),
    "rnnt_loss_fused_joiner": (
        [[B, T, 6], [B, S + 1, 6], [6, C], [C]],
        lambda am, lm, w, b: paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, _symbols(), 0, _boundary(),
                                                               delay_penalty=0.1)),
    "rnnt_loss_fused_joiner(ranges)": (
        [[B, T, 6], [B, S + 1, 6], [6, C], [C]],
        lambda am, lm, w, b: paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, _symbols(), 0, _boundary(),
                                                               ranges=_ranges(), activation="relu", clamp=0.05)),
    "tdt_loss_fused_joiner": (
        [[B, T, 6], [B, S + 1, 6], [6, C + 2]],
        lambda am, lm, w: paddle_ext.tdt_loss_fused_joiner(am, lm, w, None, _symbols(), [0, 1], 0, _boundary())),
    "multiblank_rnnt_loss_fused_joiner": (
        [[B, T, 6], [B, S + 1, 6], [6, C], [C]],
        lambda am, lm, w, b: paddle_ext.multiblank_rnnt_loss_fused_joiner(am, lm, w, b, _symbols() - 1, [2], 3,
                                                                          _boundary(), reduction="none")),
    "get_rnnt_logprobs": (
        LM_AM, lambda lm, am: paddle_ext.get_rnnt_logprobs(lm, am, _symbols(), 0, boundary=_boundary())),
    "get_rnnt_logprobs_smoothed": (
        LM_AM, lambda lm, am: paddle_ext.get_rnnt_logprobs_smoothed(lm, am, _symbols(), 0)),
    "get_rnnt_logprobs_joint": (
        [[B, T, S + 1, C]], lambda x: paddle_ext.get_rnnt_logprobs_joint(x, _symbols(), 0, rnnt_type="constrained")),
    "get_rnnt_logprobs_pruned": (
        [[B, T, 2, C]], lambda x: paddle_ext.get_rnnt_logprobs_pruned(x, _symbols(), _ranges(), 0, _boundary())),
    "get_rnnt_prune_ranges": (  # (the inputs are made >= 0, as occupation grads are)
        [[B, S, T + 1], [B, S + 1, T]], lambda px, py: paddle_ext.get_rnnt_prune_ranges(px, py, _boundary(), 2)),
    "do_rnnt_pruning": (
        [[B, T, 6], [B, S + 1, 6]], lambda am, lm: paddle_ext.do_rnnt_pruning(am, lm, _ranges())),
    "logcumsumexp": (
        [[3, 7]], lambda x: paddle_ext.logcumsumexp(x, axis=1, reverse=True)),
    "put_along_axis": (
        [[3, 7], [3, 4]], lambda a, v: paddle_ext.put_along_axis(
            a, paddle.to_tensor(np.array([[0, 2, 2, 6]] * 3, np.int64)), v, 1, reduce="add")),
    "adaptive_log_softmax_target": (
        [[6, 5]], lambda x: paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor(np.array([0, 4, 2, 2, 1, 3])))),
    "adaptive_log_softmax_full": (
        [[6, 5], [6]], paddle_ext.adaptive_log_softmax_full),
    "adaptive_log_softmax_with_loss": (
        [[6, 8], [8, 5], [8, 4], [4, 6]], lambda x, head, w1, w2: adaptive_log_softmax_with_loss(
            x, paddle.to_tensor(np.array([0, 9, 3, 5, 8, 1])), head, [[w1, w2]], [4, 10])),
}


def _flat(out):
    return [t for o in out for t in _flat(o)] if isinstance(out, (tuple, list)) else [out]


def _run(fn, arrays, dtype):
    xs = [paddle.to_tensor(a.astype(np.float32)).astype(dtype) for a in arrays]
    for x in xs:
        x.stop_gradient = False
    outs = _flat(fn(*xs))
    floats = [o for o in outs if o.dtype in (paddle.float16, paddle.bfloat16, paddle.float32)]
    loss = sum(o.astype("float32").sum() * (i + 1) for i, o in enumerate(floats) if not o.stop_gradient)
    if isinstance(loss, paddle.Tensor):  # (ranges are integers: no grad)
        loss.backward()
    return outs, xs


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", list(CASES))
def test_half_inputs_give_results_and_grads_in_their_dtype_close_to_float32(name, dtype):
    shapes, fn = CASES[name]
    rng = np.random.default_rng(1)
    arrays = [round_to_dtype(rng.normal(size=s) * 2, dtype) for s in shapes]
    if name == "get_rnnt_prune_ranges":
        arrays = [np.abs(a) for a in arrays]
    paddle.seed(5)
    half_outs, half_xs = _run(fn, arrays, dtype)
    paddle.seed(5)
    ref_outs, ref_xs = _run(fn, arrays, "float32")  # float32 on the same rounded inputs
    for i, (got, ref) in enumerate(zip(half_outs, ref_outs)):
        want = getattr(paddle, dtype) if ref.dtype == paddle.float32 else ref.dtype
        assert got.dtype == want, f"output {i}: {got.dtype}, expected {want}"
        assert_close(_to_numpy64(got), _to_numpy64(ref), dtype, what=f"{name} output {i}")
    for i, (x, x_ref) in enumerate(zip(half_xs, ref_xs)):
        if x_ref.grad is None:
            assert x.grad is None
            continue
        assert x.grad.dtype == x.dtype, f"grad {i}: {x.grad.dtype}, expected {x.dtype}"
        ref = _to_numpy64(x_ref.grad)
        assert_close(_to_numpy64(x.grad), ref, dtype, atol=RTOL[dtype] * max(1.0, np.abs(ref).max()),
                     what=f"{name} grad {i}")


# ---------------------------------------------------------------------------------------------------
# 2. The dtype each op returns under auto_cast (static programs, where AMP applies on CPU too)


def _amp_program(level, build):
    """build(x_f32, x_bf16) inside auto_cast(level, bfloat16) in a static program; x_bf16 is a matmul's
    output (white list, so bfloat16 under AMP), as a model's activations are."""
    paddle.enable_static()
    try:
        with paddle.static.program_guard(paddle.static.Program(), paddle.static.Program()):
            x = paddle.static.data("x", [4, 6], "float32")
            w = paddle.static.create_parameter([6, 6], "float32")
            with paddle.amp.auto_cast(level=level, dtype="bfloat16"):
                h = paddle.matmul(x, w)
                assert h.dtype == paddle.bfloat16
                return build(x, h)
    finally:
        paddle.disable_static()


def _mi(px_src):
    px = px_src.reshape([1, 4, 6])
    return paddle_ext.mutual_information_recursion(px, paddle.concat([px, px[:, :1]], 1)[:, :, :5])


_IDX = lambda: paddle.zeros([4, 6], "int64")  # noqa: E731
_LABEL = lambda: paddle.zeros([4], "int64")  # noqa: E731

# name -> (fn(a, b) where a, b are float32 or bfloat16 inputs, {level: dtype out for (f32, bf16) inputs})
POLICY = {
    "logcumsumexp": (lambda x: paddle_ext.logcumsumexp(x, axis=1),
                     {"O1": ("float32", "float32"), "O2": ("float32", "bfloat16")}),
    "adaptive_log_softmax_target": (lambda x: paddle_ext.adaptive_log_softmax_target(x, _LABEL()),
                                    {"O1": ("float32", "float32"), "O2": ("float32", "bfloat16")}),
    "adaptive_log_softmax_full": (lambda x: paddle_ext.adaptive_log_softmax_full(x),
                                  {"O1": ("float32", "float32"), "O2": ("float32", "bfloat16")}),
    "mutual_information_recursion": (_mi, {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "rnnt_loss": (lambda x: paddle_ext.rnnt_loss(x.reshape([1, 2, 3, 4]), paddle.ones([1, 2], "int64"), 0),
                  {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "tdt_loss": (lambda x: paddle_ext.tdt_loss(x.reshape([1, 2, 3, 4]), paddle.ones([1, 2], "int64"), [0, 1], 0),
                 {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "multiblank_rnnt_loss": (lambda x: paddle_ext.multiblank_rnnt_loss(x.reshape([1, 2, 3, 4]),
                                                                       paddle.ones([1, 2], "int64"), [2], 3),
                             {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "joint_mutual_information_recursion": (lambda x: paddle_ext.joint_mutual_information_recursion(
        [x.reshape([1, 4, 6])[:, :, :5]] * 2, [paddle.concat([x, x[:1]]).reshape([1, 5, 6])[:, :, :4]] * 2),
        {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "rnnt_loss_simple": (lambda x: paddle_ext.rnnt_loss_simple(x.reshape([1, 3, 8]), x.reshape([1, 3, 8]),
                                                               paddle.ones([1, 2], "int64"), 0),
                         {"O1": ("float32", "float32"), "O2": ("float32", "float32")}),
    "put_along_axis(same dtype)": (lambda x: paddle_ext.put_along_axis(x, _IDX(), x, 1, reduce="add"),
                                   {"O1": ("float32", "bfloat16"), "O2": ("float32", "bfloat16")}),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(POLICY))
def test_dtype_returned_under_auto_cast(name, level):
    fn, expected = POLICY[name]
    got = _amp_program(level, lambda x, h: tuple(_flat(fn(t))[0].dtype for t in (x, h)))
    assert got == tuple(getattr(paddle, d) for d in expected[level])


@pytest.mark.parametrize("level", LEVELS)
def test_put_along_axis_promotes_mixed_dtypes_under_auto_cast(level):
    """As paddle.put_along_axis under AMP: the wider dtype; inplace, arr's dtype (it cannot change)."""
    def build(x, h):
        out = paddle_ext.put_along_axis(x, _IDX(), h, 1, reduce="add")
        out_bf16_arr = paddle_ext.put_along_axis(h, _IDX(), x, 1)
        inplace = paddle_ext.put_along_axis_(paddle.assign(h), _IDX(), x, 1)
        return out.dtype, out_bf16_arr.dtype, inplace.dtype
    assert _amp_program(level, build) == (paddle.float32, paddle.float32, paddle.bfloat16)


def test_put_along_axis_outside_auto_cast_still_rejects_mixed_dtypes():
    arr, values = paddle.zeros([2, 3]), paddle.ones([2, 3]).astype("bfloat16")
    with pytest.raises(TypeError, match="values has dtype bfloat16 but arr has dtype float32"):
        paddle_ext.put_along_axis(arr, paddle.zeros([2, 3], "int64"), values, 1)


@pytest.mark.parametrize("level", LEVELS)
def test_adaptive_layer_returns_float32_under_auto_cast(level):
    def build(x, h):
        layer = AdaptiveLogSoftmaxWithLoss(6, 10, [3, 6])
        return [t.dtype for t in (*layer(h, _LABEL()), layer.log_prob(h))]
    got = _amp_program(level, build)
    assert got == [paddle.float32] * 3


@pytest.mark.parametrize("level", LEVELS)
def test_adaptive_embedding_returns_what_paddle_embedding_does_under_auto_cast(level):
    """Its tail projections' matmuls follow auto_cast; the vectors keep the weights' dtype, as
    paddle.nn.Embedding's (lookup_table is black-listed)."""
    def build(x, h):
        ids = paddle.arange(12, dtype="int64").reshape([3, 4])  # the shortlist and both tail clusters
        return AdaptiveEmbedding(12, 6, [4, 8], div_value=2.0)(ids).dtype, paddle.nn.Embedding(12, 6)(ids).dtype
    assert _amp_program(level, build) == (paddle.float32, paddle.float32)


@pytest.mark.parametrize("level", LEVELS)
def test_tied_adaptive_input_under_auto_cast_is_close_to_float32(level):
    """Adaptive input tied to the adaptive softmax, a matmul between (bfloat16 under AMP): the loss and the
    grad of every shared parameter under auto_cast, against the same program's float32 computation."""
    op_test.skip_unless_bfloat16_static_matmul_works()
    rng = np.random.default_rng(3)
    feed = {"ids": rng.integers(0, 12, size=8), "labels": rng.integers(0, 12, size=8)}
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            softmax = AdaptiveLogSoftmaxWithLoss(8, 12, [4, 8], div_value=2.0)
            embedding = AdaptiveEmbedding(12, 8, [4, 8], div_value=2.0, tied_to=softmax)
            mix = paddle.static.create_parameter([8, 8], "float32")
            ids, labels = paddle.static.data("ids", [8], "int64"), paddle.static.data("labels", [8], "int64")
            with paddle.amp.auto_cast(level=level, dtype="bfloat16"):
                low = softmax(paddle.matmul(embedding(ids), mix), labels)[1]
            ref = softmax(paddle.matmul(embedding(ids), mix), labels)[1]
            params = [softmax.head_weight, *(w for pair in softmax.tail_weights for w in pair), mix]
            grads = paddle.static.gradients([low], params) + paddle.static.gradients([ref], params)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        res = exe.run(main, feed=feed, fetch_list=[low, ref] + grads)
    finally:
        paddle.disable_static()
    assert res[0].dtype == np.float32
    np.testing.assert_allclose(res[0], res[1], rtol=3e-2)
    n = len(params)
    for name, got, want in zip(["head_weight", "w1 0", "w2 0", "w1 1", "w2 1", "mix"], res[2:2 + n], res[2 + n:]):
        assert np.isfinite(got).all() and got.dtype == np.float32, name
        np.testing.assert_allclose(got, want, rtol=5e-2, atol=3e-2 * np.abs(want).max(), err_msg=name)


# ---------------------------------------------------------------------------------------------------
# 3. Training a small model on each family under auto_cast O1 / O2 (bfloat16), dygraph and to_static


class _Model(paddle.nn.Layer):
    """Embeddings -> Linear (bfloat16 outputs under AMP) -> the op -> a scalar loss."""

    def __init__(self, family):
        super().__init__()
        self.family, self.level = family, "O0"
        self.emb = paddle.nn.Embedding(8, 12)
        # no biases: a float32 bias would promote the matmuls' bfloat16 outputs back to float32
        self.enc = paddle.nn.Linear(12, 16, bias_attr=False)
        self.dec = paddle.nn.Linear(12, 16, bias_attr=False)
        self.joiner = paddle.nn.Linear(16, C, bias_attr=False)
        self.adaptive = AdaptiveLogSoftmaxWithLoss(16, 12, [4, 8], div_value=2.0)
        self.adaptive_input = AdaptiveEmbedding(12, 16, [4, 8], div_value=2.0, tied_to=self.adaptive)
        self.mix = paddle.nn.Linear(16, 16, bias_attr=False)

    def forward(self, tokens, symbols, boundary, labels):
        with paddle.amp.auto_cast(level=self.level, dtype="bfloat16"):
            return getattr(self, "_" + self.family)(tokens, symbols, boundary, labels)

    def _encode(self, tokens, symbols):
        enc = self.enc(self.emb(tokens))  # [B, T, 16]
        dec = self.dec(self.emb(paddle.concat([paddle.zeros([B, 1], "int64"), symbols], 1)))  # [B, S+1, 16]
        return enc, dec

    def _logcumsumexp(self, tokens, symbols, boundary, labels):
        enc, _ = self._encode(tokens, symbols)
        # the loss in float32: a bfloat16 mean as a to_static output hits a Paddle bug (conftest.py)
        return paddle_ext.logcumsumexp(enc, axis=1).astype("float32").mean()

    def _put_along_axis(self, tokens, symbols, boundary, labels):
        enc, _ = self._encode(tokens, symbols)
        arr = self.emb(tokens).reshape([B, -1])  # float32 (lookup_table is black-listed) into bfloat16 values
        out = paddle_ext.put_along_axis(arr, labels.reshape([B, -1]), enc[:, :, 0], 1, reduce="add")
        return out.square().mean()

    def _mutual_information(self, tokens, symbols, boundary, labels):
        enc, dec = self._encode(tokens, symbols)
        px = paddle.matmul(dec[:, :S], enc, transpose_y=True)  # [B, S, T]
        py = paddle.matmul(dec, enc, transpose_y=True)  # [B, S+1, T]
        return -paddle_ext.mutual_information_recursion(px, py, boundary).mean()

    def _rnnt_loss(self, tokens, symbols, boundary, labels):
        enc, dec = self._encode(tokens, symbols)
        logits = self.joiner(paddle.tanh(enc.unsqueeze(2) + dec.unsqueeze(1)))  # [B, T, S+1, C]
        return paddle_ext.rnnt_loss(logits, symbols, 0, boundary)

    def _rnnt_pruned(self, tokens, symbols, boundary, labels):
        """k2's recipe: the smoothed simple loss, its occupation grads -> ranges -> the pruned loss."""
        enc, dec = self._encode(tokens, symbols)
        simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_smoothed(
            self.joiner(dec), self.joiner(enc), symbols, 0, 0.1, 0.1, boundary, return_grad=True)
        ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, 2)
        enc_pruned, dec_pruned = paddle_ext.do_rnnt_pruning(enc, dec, ranges)
        logits = self.joiner(paddle.tanh(enc_pruned + dec_pruned))
        return simple + paddle_ext.rnnt_loss_pruned(logits, symbols, ranges, 0, boundary, fastemit_lambda=0.01)

    def _fused_joiner(self, tokens, symbols, boundary, labels):
        """The joiner fused into the loss, its am / lm from bfloat16 matmuls under AMP."""
        enc, dec = self._encode(tokens, symbols)
        return paddle_ext.rnnt_loss_fused_joiner(enc, dec, self.joiner.weight, None, symbols, 0, boundary)

    def _adaptive_layer(self, tokens, symbols, boundary, labels):
        enc, _ = self._encode(tokens, symbols)
        return self.adaptive(enc.reshape([-1, 16]), labels)[1]

    def _adaptive_input(self, tokens, symbols, boundary, labels):
        """The adaptive input tied to the adaptive softmax: each shared weight gets grads from both ends."""
        return self.adaptive(self.mix(self.adaptive_input(tokens)).reshape([-1, 16]), labels)[1]

    def _adaptive_functional(self, tokens, symbols, boundary, labels):
        enc, _ = self._encode(tokens, symbols)
        a = self.adaptive
        return adaptive_log_softmax_with_loss(enc.reshape([-1, 16]), labels, a.head_weight, a.tail_weights,
                                              a.cutoffs)[1]


FAMILIES = ["logcumsumexp", "put_along_axis", "mutual_information", "rnnt_loss", "rnnt_pruned", "fused_joiner",
            "adaptive_layer", "adaptive_functional", "adaptive_input"]


@pytest.mark.parametrize("mode", ["dygraph", "to_static"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("family", FAMILIES)
def test_small_model_trains_under_auto_cast(family, level, mode):
    if mode == "to_static":
        op_test.skip_unless_bfloat16_static_matmul_works()
    model = _Model(family)
    opt = paddle.optimizer.Adam(learning_rate=0.02, parameters=model.parameters())
    if level == "O2":  # (on CPU decorate leaves the parameters float32, as it does the auto_cast)
        model, opt = paddle.amp.decorate(model, opt, level="O2", dtype="bfloat16")
    model.level = level
    run = paddle.jit.to_static(model, full_graph=True) if mode == "to_static" else model
    rng = np.random.default_rng(0)
    batch = [paddle.to_tensor(a) for a in (rng.integers(0, 8, size=(B, T)), rng.integers(1, C, size=(B, S)),
                                           np.array([[0, 0, S, T], [0, 0, S - 1, T - 1]]), rng.integers(0, 12, B * T))]
    losses = []
    for _ in range(4):
        loss = run(*batch)
        assert np.isfinite(float(loss)), f"loss {loss}"
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(np.isfinite(_to_numpy64(g)).all() for g in grads)
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses
