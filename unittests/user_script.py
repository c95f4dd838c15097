"""A user's script: every op family forward and backward in dygraph, then one model using all of them
through to_static → jit.save → jit.load in a fresh process. Run as `python user_script.py <folder>`; it
prints USER SCRIPT OK when everything matched. test_user_script.py runs it under each Paddle it is given.
"""

import subprocess
import sys

import numpy as np
import paddle

import paddle_ext

rng = np.random.default_rng(0)


def tensor(shape, dtype="float32", low=None, high=None, grad=True):
    data = rng.integers(low, high, size=shape) if low is not None else rng.normal(size=shape)
    t = paddle.to_tensor(data.astype(dtype))
    t.stop_gradient = not grad or low is not None
    return t


class EveryFamily(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.softmax = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0)

    def forward(self, x, indices, px, py, lm, am, symbols, logits, feats, label):
        scan = paddle_ext.logcumsumexp(x, axis=-1)
        scatter = paddle_ext.put_along_axis(x, indices, scan[:, :3], axis=1, reduce="add")
        mi = paddle_ext.mutual_information_recursion(px, py)
        simple = paddle_ext.rnnt_loss_simple(lm, am, symbols, termination_symbol=0, reduction="none")
        full = paddle_ext.rnnt_loss(logits, symbols, termination_symbol=0, reduction="none")
        _, adaptive = self.softmax(feats, label)
        return scan.sum() + scatter.sum() + mi.sum() + simple.sum() + full.sum() + adaptive


def inputs(B):
    S, T, C = 3, 4, 5
    return [tensor([B, 7]), tensor([B, 3], "int64", -7, 7), tensor([B, S, T + 1]), tensor([B, S + 1, T]),
            tensor([B, S + 1, C]), tensor([B, T, C]), tensor([B, S], "int64", 1, C), tensor([B, T, S + 1, C]),
            tensor([3 * B, 8]), tensor([3 * B], "int64", 0, 20)]


def main(folder):
    paddle.seed(1)
    model = EveryFamily()
    args = inputs(2)
    loss = model(*args)
    loss.backward()
    wanting = [a for a in args if not a.stop_gradient] + list(model.parameters())
    for t in wanting:
        assert t.grad is not None and np.isfinite(t.grad.numpy()).all(), t.name
        assert np.abs(t.grad.numpy()).sum() > 0, t.name
    # logcumsumexp against NumPy, as a user would check it
    x = args[0].numpy().astype("float64")
    np.testing.assert_allclose(paddle_ext.logcumsumexp(args[0], axis=-1).numpy(), np.logaddexp.accumulate(x, axis=-1),
                               rtol=1e-5, atol=1e-6)

    model.eval()
    specs = [paddle.static.InputSpec([None if i == 0 else d for i, d in enumerate(a.shape)], a.dtype) for a in args]
    prefix = f"{folder}/every_family"
    expected = {}
    for B in (2, 3):
        case = inputs(B)
        np.savez(f"{folder}/in{B}.npz", *[a.numpy() for a in case])
        expected[B] = float(model(*case))
    paddle.jit.save(paddle.jit.to_static(model, input_spec=specs, full_graph=True), prefix)
    served = subprocess.run([sys.executable, "-c", SERVE, prefix, folder], capture_output=True, text=True, timeout=600)
    assert served.returncode == 0, served.stderr[-3000:]
    for B, want in expected.items():
        got = float(served.stdout.split(f"B{B}=")[1].split()[0])
        assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), (B, got, want)
    print("USER SCRIPT OK")


SERVE = """
import sys
import numpy as np
import paddle, paddle_ext
prefix, folder = sys.argv[1], sys.argv[2]
loaded = paddle.jit.load(prefix)
for B in (2, 3):
    case = np.load(f"{folder}/in{B}.npz")
    print(f"B{B}={float(loaded(*[paddle.to_tensor(case[f'arr_{i}']) for i in range(len(case.files))]))!r}")
"""

if __name__ == "__main__":
    main(sys.argv[1])
