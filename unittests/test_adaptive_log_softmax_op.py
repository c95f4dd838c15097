"""adaptive_log_softmax: the fused per-cluster ops, through the OpTest harness."""

import numpy as np
import paddle
import pytest

import paddle_ext
import refs
from op_test import FLOAT_DTYPES, check_double_grad, check_export, check_grad, check_output, run_static

SHAPES = [(1, 1), (4, 1), (3, 5), (7, 33), (2, 1000), (5, 4097)]


def rand(shape, seed=0, scale=3.0):
    return np.random.default_rng(seed).normal(0, scale, size=shape)


def targets(m, k, seed=1):
    return np.random.default_rng(seed).integers(0, k, size=m).astype(np.int64)


def target_op(logits, target):
    return paddle_ext.adaptive_log_softmax_target(logits, target)


def full_op(logits, offset):
    return paddle_ext.adaptive_log_softmax_full(logits, offset)


@pytest.mark.parametrize("shape", SHAPES)
def test_target_forward_float64(shape):
    check_output(target_op, {"logits": rand(shape), "target": targets(*shape)}, refs.adaptive_log_softmax_target)


@pytest.mark.parametrize("shape", SHAPES)
def test_full_forward_float64(shape):
    check_output(full_op, {"logits": rand(shape), "offset": rand(shape[:1], seed=2)}, refs.adaptive_log_softmax_full)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_every_dtype(dtype):
    inputs = {"logits": rand((6, 300), seed=3), "target": targets(6, 300)}
    # the result is a difference of two O(10) numbers: tolerances absolute at the dtype's resolution
    atol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2, "bfloat16": 1.5e-1}[dtype]
    check_output(target_op, inputs, refs.adaptive_log_softmax_target, dtype=dtype, atol=atol)
    check_output(full_op, {"logits": inputs["logits"], "offset": rand((6,), seed=4)}, refs.adaptive_log_softmax_full,
                 dtype=dtype, atol=atol)


def test_very_wide_rows_float32_accuracy():
    # 140000 classes: the largest cluster of the WikiText-103 configuration
    x = rand((3, 140000), seed=5, scale=4.0).astype(np.float32)
    t = targets(3, 140000)
    out = paddle_ext.adaptive_log_softmax_target(paddle.to_tensor(x), paddle.to_tensor(t)).numpy()
    np.testing.assert_allclose(out, refs.adaptive_log_softmax_target(x.astype(np.float64), t), rtol=1e-6, atol=1e-6)
    full = paddle_ext.adaptive_log_softmax_full(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(np.exp(full.astype(np.float64)).sum(1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 9)])
def test_target_grad_matches_numeric(shape):
    check_grad(target_op, {"logits": rand(shape, seed=6, scale=2.0), "target": targets(*shape, seed=7)}, "logits")


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 9)])
def test_full_grad_matches_numeric(shape):
    check_grad(full_op, {"logits": rand(shape, seed=8, scale=2.0), "offset": rand(shape[:1], seed=9)},
               ["logits", "offset"])


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 9)])
def test_target_second_order_grads_match_numeric(shape):
    check_double_grad(target_op, {"logits": rand(shape, seed=6, scale=2.0), "target": targets(*shape, seed=7)},
                      "logits")


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 9)])
def test_full_second_order_grads_match_numeric(shape):
    check_double_grad(full_op, {"logits": rand(shape, seed=8, scale=2.0), "offset": rand(shape[:1], seed=9)},
                      ["logits", "offset"])


@pytest.mark.parametrize("op", ["target", "full"])
def test_first_order_grads_same_with_and_without_create_graph(op):
    x = paddle.to_tensor(rand((4, 7), seed=12), stop_gradient=False)
    other = paddle.to_tensor(targets(4, 7) if op == "target" else rand((4,), seed=13))
    fn = target_op if op == "target" else full_op
    w = paddle.to_tensor(rand((4,) if op == "target" else (4, 7), seed=14))
    g1 = paddle.grad((fn(x, other) * w).sum(), x)[0].numpy()
    g2 = paddle.grad((fn(x, other) * w).sum(), x, create_graph=True)[0].numpy()
    np.testing.assert_allclose(g2, g1, rtol=1e-12, atol=1e-14)


def test_target_grad_is_onehot_minus_softmax_times_upstream():
    x, t, g = rand((5, 11), seed=10), targets(5, 11), rand((5,), seed=11)
    logits = paddle.to_tensor(x, stop_gradient=False)
    out = paddle_ext.adaptive_log_softmax_target(logits, paddle.to_tensor(t))
    (gx,) = paddle.grad(out, logits, grad_outputs=paddle.to_tensor(g))
    np.testing.assert_allclose(gx.numpy(), refs.adaptive_log_softmax_target_grad(x, t, g), rtol=1e-12, atol=1e-14)


def test_neg_inf_logits():
    x = np.array([[-np.inf, 0.5, 1.0, -np.inf], [2.0, -np.inf, -np.inf, -np.inf], [-np.inf] * 4])
    t = np.array([0, 0, 2])
    out = check_output(target_op, {"logits": x, "target": t}, refs.adaptive_log_softmax_target)["dygraph"][0]
    assert out[0] == -np.inf and out[1] == 0.0 and np.isnan(out[2])  # all -inf: undefined, NaN as in NumPy
    check_output(full_op, {"logits": x, "offset": np.zeros(3)}, refs.adaptive_log_softmax_full)
    # grad of the finite rows: softmax is exactly 0 on -inf logits; the target term is +g even at -inf
    logits = paddle.to_tensor(x[:2], stop_gradient=False)
    paddle_ext.adaptive_log_softmax_target(logits, paddle.to_tensor(t[:2])).sum().backward()
    grad = logits.grad.numpy()
    np.testing.assert_allclose(grad, refs.adaptive_log_softmax_target_grad(x[:2], t[:2], np.ones(2)), rtol=1e-12)
    assert grad[0, 0] == 1.0 and grad[0, 3] == 0.0 and np.all(grad[1] == 0.0)


def test_nan_and_pos_inf_rows():
    x = np.array([[0.0, np.nan, 1.0], [0.0, np.inf, 1.0], [0.0, 1.0, 2.0]])
    out = paddle_ext.adaptive_log_softmax_target(paddle.to_tensor(x), paddle.to_tensor([0, 0, 2])).numpy()
    assert np.isnan(out[0]) and np.isnan(out[1])  # +inf in a row: NaN, as torch (not -inf)
    np.testing.assert_allclose(out[2], refs.adaptive_log_softmax_target(x[2:], [2])[0], rtol=1e-14)


def test_large_logits_do_not_overflow():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -999.0]])
    for dtype in ("float32", "float64"):
        check_output(target_op, {"logits": x, "target": np.array([1, 2])}, refs.adaptive_log_softmax_target,
                     dtype=dtype, atol=1e-4)


def test_empty_rows():
    out = paddle_ext.adaptive_log_softmax_target(paddle.zeros([0, 7]), paddle.zeros([0], "int64"))
    assert out.shape == [0]
    assert paddle_ext.adaptive_log_softmax_full(paddle.zeros([0, 7])).shape == [0, 7]


def test_int32_target_and_non_contiguous_logits():
    x = rand((6, 8), seed=12)
    t = paddle.to_tensor(x).transpose([1, 0])  # [8, 6], strided
    tgt = targets(8, 6).astype(np.int32)
    out = paddle_ext.adaptive_log_softmax_target(t, paddle.to_tensor(tgt)).numpy()
    np.testing.assert_allclose(out, refs.adaptive_log_softmax_target(x.T, tgt), rtol=1e-13)


def test_errors():
    x = paddle.ones([2, 3])
    with pytest.raises(TypeError, match="logits must be a paddle.Tensor"):
        paddle_ext.adaptive_log_softmax_target(np.ones((2, 3)), paddle.to_tensor([0, 1]))
    with pytest.raises(ValueError, match=r"logits must be 2-D \[M, K\], got shape \[3\]"):
        paddle_ext.adaptive_log_softmax_target(paddle.ones([3]), paddle.to_tensor([0]))
    with pytest.raises(TypeError, match="target must be an integer tensor, got float32"):
        paddle_ext.adaptive_log_softmax_target(x, paddle.ones([2]))
    with pytest.raises(ValueError, match="target has 3 rows but logits has 2"):
        paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor([0, 1, 2]))
    with pytest.raises(IndexError, match=r"target value 3 is out of range \[0, 3\)"):
        paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor([0, 3]))
    with pytest.raises(IndexError, match=r"target value -1 is out of range"):
        paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor([-1, 0]))
    with pytest.raises(ValueError, match="offset has 3 rows but logits has 2"):
        paddle_ext.adaptive_log_softmax_full(x, paddle.ones([3]))
    with pytest.raises(TypeError, match="logits must be float16, bfloat16, float32 or float64, got int64"):
        paddle_ext.adaptive_log_softmax_full(paddle.ones([2, 3], "int64"))


def test_target_of_a_shape_the_kernel_takes_is_refused_by_the_api():
    # the kernel counts target's elements only: the API refuses [M, 1]
    with pytest.raises(ValueError, match=r"target must be 1-D \[M\], got shape \[2, 1\]"):
        paddle_ext.adaptive_log_softmax_target(paddle.ones([2, 3]), paddle.to_tensor([[0], [1]]))


def test_static_program_rejects_bad_target_in_cpp():
    # Python cannot see values in a static program: the kernel's check is the last line of defence.
    # (raised as Paddle's OutOfRange error, so the static executor reports an IndexError with the message)
    with pytest.raises(IndexError, match=r"target\[1\] = 5 is out of range \[0, 3\)"):
        run_static(target_op, {"logits": rand((2, 3)), "target": np.array([0, 5])}, {}, "float64")


def test_export_round_trip():
    check_export(target_op, {"logits": rand((4, 9)).astype(np.float32), "target": targets(4, 9)})
    check_export(full_op, {"logits": rand((4, 9)).astype(np.float32), "offset": rand((4,)).astype(np.float32)})


@pytest.mark.parametrize("wants_grad", [False, True])
def test_target_values_checked_by_the_kernel_raise_the_python_error_alone(wants_grad):
    """CPU targets are checked by the op's kernel; its failure runs the Python check, whose error is raised with
    no kernel traceback chained to it, with and without autograd."""
    x = paddle.ones([2, 3])
    x.stop_gradient = not wants_grad
    with pytest.raises(paddle_ext.adaptive_log_softmax.LabelOutOfRangeError,
                       match=r"^adaptive_log_softmax_target: target value 7 is out of range \[0, 3\)$") as err:
        paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor([0, 7]))
    assert err.value.__context__ is None and err.value.__cause__ is None


def test_float32_accuracy_over_the_exp_range():
    # The CPU kernels use vec_math.h's vector exp: check it where float32's exp underflows (x - lse < -87.3)
    # and across the whole useful range, through the forward and both grads.
    x = np.linspace(-120.0, 30.0, 4001).reshape(1, -1)
    x = np.concatenate([x, x[:, ::-1], x * 0.1], axis=0)
    t = np.array([4000, 17, 2500])
    xt = paddle.to_tensor(x.astype(np.float32), stop_gradient=False)
    x32 = x.astype(np.float32).astype(np.float64)
    out = paddle_ext.adaptive_log_softmax_target(xt, paddle.to_tensor(t))
    np.testing.assert_allclose(out.numpy(), refs.adaptive_log_softmax_target(x32, t), rtol=1e-6, atol=2e-6)
    g = np.array([0.5, -1.0, 2.0])
    (gx,) = paddle.grad(out, xt, grad_outputs=paddle.to_tensor(g.astype(np.float32)))
    np.testing.assert_allclose(gx.numpy(), refs.adaptive_log_softmax_target_grad(x32, t, g), rtol=1e-5, atol=1e-7)
    full = paddle_ext.adaptive_log_softmax_full(xt).numpy()
    np.testing.assert_allclose(full, refs.adaptive_log_softmax_full(x32, np.zeros(3)), rtol=1e-6, atol=2e-5)


_SIMD_SCRIPT = """
import sys, numpy as np, paddle, paddle_ext
rng = np.random.default_rng(3)
results = {}
for dtype in ("float32", "float64"):
    # 5001 columns: a partial last vector at every width; row 1 has -inf logits (masked classes), row 3
    # spans exp's whole useful range, row 4 holds a NaN (the scalar path).
    x = rng.normal(0, 3, size=(5, 5001))
    x[1, ::3] = -np.inf
    x[3] = np.linspace(-100, 20, 5001)
    x[4, 7] = np.nan
    t = np.array([5000, 4, 2500, 17, 9])
    g = np.array([1.0, -2.0, 0.5, 3.0, 1.5])
    xt = paddle.to_tensor(x.astype(dtype), stop_gradient=False)
    out = paddle_ext.adaptive_log_softmax_target(xt, paddle.to_tensor(t))
    (gx,) = paddle.grad(out, xt, grad_outputs=paddle.to_tensor(g.astype(dtype)))
    off = paddle.to_tensor(g.astype(dtype), stop_gradient=False)
    full = paddle_ext.adaptive_log_softmax_full(xt, off)
    gf = rng.normal(size=x.shape)
    gfx, goff = paddle.grad(full, [xt, off], grad_outputs=paddle.to_tensor(gf.astype(dtype)))
    results.update({dtype + "_" + k: v.numpy() for k, v in
                    dict(out=out, gx=gx, full=full, gfx=gfx, goff=goff).items()})
    results.update({dtype + "_x": x, dtype + "_t": t, dtype + "_g": g, dtype + "_gf": gf})
np.savez(sys.argv[1], **results)
"""


@pytest.mark.parametrize("level", ["default", "avx2", "sse2"])
def test_every_simd_level_matches_the_reference(tmp_path, level):
    # The CPU kernels are compiled for AVX-512, AVX2 and SSE2 and picked at run time; PADDLE_EXT_SIMD caps
    # the choice, so each level runs here in a subprocess (on a CPU without AVX-512, "default" is AVX2).
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(_SIMD_SCRIPT)
    env = dict(os.environ)
    env.pop("PADDLE_EXT_SIMD", None)
    if level != "default":
        env["PADDLE_EXT_SIMD"] = level
    subprocess.run([sys.executable, str(script), str(tmp_path / "r.npz")], check=True, env=env, capture_output=True)
    r = np.load(tmp_path / "r.npz")
    for dtype, rtol in (("float32", 2e-6), ("float64", 1e-12)):
        x = r[dtype + "_x"].astype(dtype).astype(np.float64)
        t, g, gf = r[dtype + "_t"], r[dtype + "_g"].astype(dtype), r[dtype + "_gf"].astype(dtype)
        atol = 1e-12 if dtype == "float64" else 2e-5
        np.testing.assert_allclose(r[dtype + "_out"], refs.adaptive_log_softmax_target(x, t), rtol=rtol, atol=atol)
        np.testing.assert_allclose(r[dtype + "_gx"], refs.adaptive_log_softmax_target_grad(x, t, g), rtol=rtol * 5,
                                   atol=atol * 1e-2)
        np.testing.assert_allclose(r[dtype + "_full"], refs.adaptive_log_softmax_full(x, g), rtol=rtol, atol=atol)
        with np.errstate(invalid="ignore"):
            goff_ref = gf.astype(np.float64).sum(axis=1)
            gx_ref = gf - np.exp(x - refs.logsumexp_rows(x)[:, None]) * goff_ref[:, None]
        np.testing.assert_allclose(r[dtype + "_gfx"], gx_ref, rtol=rtol * 5, atol=atol)
        np.testing.assert_allclose(r[dtype + "_goff"], goff_ref, rtol=rtol * 5, atol=atol)
        assert np.isnan(r[dtype + "_gx"][4]).all() and np.isnan(r[dtype + "_out"][4])


def test_rows_split_across_threads():
    # >= 2M elements: the CPU kernels split the rows over the threads (below that they stay serial)
    x = rand((40, 60000), seed=13).astype(np.float32)
    t = targets(40, 60000, seed=14)
    g = rand((40,), seed=15).astype(np.float32)
    xt = paddle.to_tensor(x, stop_gradient=False)
    out = paddle_ext.adaptive_log_softmax_target(xt, paddle.to_tensor(t))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), refs.adaptive_log_softmax_target(x64, t), rtol=1e-6, atol=1e-5)
    (gx,) = paddle.grad(out, xt, grad_outputs=paddle.to_tensor(g))
    np.testing.assert_allclose(gx.numpy(), refs.adaptive_log_softmax_target_grad(x64, t, g), rtol=1e-5, atol=1e-7)
    full = paddle_ext.adaptive_log_softmax_full(paddle.to_tensor(x), paddle.to_tensor(g)).numpy()
    np.testing.assert_allclose(full, refs.adaptive_log_softmax_full(x64, g), rtol=1e-6, atol=2e-5)


# ===================================================================== rows holding +inf or NaN
# As torch's log_softmax: a row holding +inf has max +inf, x - max is NaN at the +inf and -inf elsewhere,
# and the logsumexp of that is NaN, so every output of the row is NaN, and so is every grad of the row.
# A NaN anywhere in a row does the same. Other rows are untouched; -inf entries stay ordinary.
BAD_ROWS = [[0.0, np.inf, 1.0], [np.inf, np.inf, -np.inf], [-np.inf, 2.0, np.inf], [0.0, np.nan, 1.0],
            [np.nan, np.inf, -np.inf]]
GOOD_ROW = [0.5, -np.inf, 2.0]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("bad", BAD_ROWS)
@pytest.mark.parametrize("target", [0, 1, 2])
def test_a_row_with_pos_inf_or_nan_is_nan_throughout(dtype, bad, target):
    x = np.array([GOOD_ROW, bad, GOOD_ROW])
    t = np.array([2, target, 0])
    xt = paddle.to_tensor(x, dtype=dtype, stop_gradient=False)
    off = paddle.to_tensor(np.array([0.25, -1.0, 0.5]), dtype=dtype, stop_gradient=False)
    out = paddle_ext.adaptive_log_softmax_target(xt, paddle.to_tensor(t))
    full = paddle_ext.adaptive_log_softmax_full(xt, off)
    (gx,) = paddle.grad(out, xt, grad_outputs=paddle.ones_like(out))
    gfx, goff = paddle.grad(full, [xt, off], grad_outputs=paddle.ones_like(full))
    out, full, gx, gfx, goff = (v.astype("float64").numpy() for v in (out, full, gx, gfx, goff))
    assert np.isnan(out[1]) and np.isnan(full[1]).all() and np.isnan(gx[1]).all() and np.isnan(gfx[1]).all()
    assert goff[1] == 3.0  # offset's grad is the sum of the upstream grads, whatever the logits
    good = [0, 2]
    atol = {"float64": 1e-12, "float32": 1e-6, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    np.testing.assert_allclose(out[good], refs.adaptive_log_softmax_target(x[good], t[good]), atol=atol)
    np.testing.assert_allclose(full[good], refs.adaptive_log_softmax_full(x[good], [0.25, 0.5]), atol=atol)
    np.testing.assert_allclose(gx[good], refs.adaptive_log_softmax_target_grad(x[good], t[good], np.ones(2)),
                               atol=atol)


@pytest.mark.parametrize("k", [3, 37, 5001])  # scalar rows, and rows long enough for every SIMD width
def test_pos_inf_anywhere_in_a_long_row_gives_nan(k):
    x = np.random.default_rng(7).normal(0, 3, size=(2, k))
    x[0, k // 2] = np.inf
    out = paddle_ext.adaptive_log_softmax_target(paddle.to_tensor(x), paddle.to_tensor([0, k - 1])).numpy()
    full = paddle_ext.adaptive_log_softmax_full(paddle.to_tensor(x)).numpy()
    assert np.isnan(out[0]) and np.isnan(full[0]).all()
    np.testing.assert_allclose(out[1], refs.adaptive_log_softmax_target(x[1:], [k - 1])[0], rtol=1e-13)


def test_layer_rows_with_pos_inf_logits_are_nan():
    # An input whose head logits overflow to +inf for two classes (the others stay finite): that row's
    # log-probabilities are all NaN, as torch's AdaptiveLogSoftmaxWithLoss gives; the other row is untouched.
    paddle.seed(0)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(4, 10, cutoffs=[3, 6], div_value=2.0, head_bias=False)
    w = layer.head_weight.numpy()
    w[0] = 0.0
    w[0, :2] = 2.0  # 2 * 3e38 overflows float32
    layer.head_weight.set_value(w)
    x = np.array([[3e38, 0.0, 0.0, 0.0], [0.1, -0.2, 0.3, 0.4]], np.float32)
    head = (x[:1] @ w)[0]
    assert np.isposinf(head[:2]).all() and np.isfinite(head[2:]).all()
    lp = layer.log_prob(paddle.to_tensor(x)).numpy()
    assert np.isnan(lp[0]).all() and np.isfinite(lp[1]).all()
    out, _ = layer(paddle.to_tensor(x), paddle.to_tensor([2, 8]))
    assert np.isnan(out.numpy()[0]) and np.isfinite(out.numpy()[1])
