"""logcumsumexp vs paddle.logcumsumexp, NumPy's np.logaddexp.accumulate and torch.logcumsumexp."""

from __future__ import annotations

import numpy as np
import paddle

import paddle_ext

from . import Case, torch_or_none


def _forward_case(shape, axis, dtype, quick):
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=shape).astype(np.float32 if dtype in ("float16", "bfloat16") else dtype)
    x = paddle.to_tensor(x_np).astype(dtype)
    label = f"fwd {list(shape)} axis={axis} {dtype}"
    candidates = {"paddle_ext": lambda: paddle_ext.logcumsumexp(x, axis=axis)}
    note = ""
    if dtype in ("float16", "bfloat16"):  # Paddle has no CPU half kernel: compare with our float32
        x32 = x.astype("float32")
        candidates["paddle_ext float32"] = lambda: paddle_ext.logcumsumexp(x32, axis=axis)
        note = "paddle.logcumsumexp has no CPU float16/bfloat16 kernel"
    else:
        candidates["paddle"] = lambda: paddle.logcumsumexp(x, axis=axis)
        candidates["numpy"] = lambda: np.logaddexp.accumulate(x_np, axis=axis)
        torch = torch_or_none()
        if torch is not None:
            xt = torch.from_numpy(x_np)
            candidates["torch"] = lambda: torch.logcumsumexp(xt, dim=axis)
    return Case("logcumsumexp", label, candidates, note=note, repeats=3 if not quick else 2)


def _backward_case(shape, axis, dtype):
    x = paddle.randn(shape, dtype)
    x.stop_gradient = False

    def run(fn):
        def step():
            out = fn(x, axis=axis)
            (g,) = paddle.grad(out, x, grad_outputs=paddle.ones_like(out))
            return g

        return step

    return Case("logcumsumexp", f"fwd+bwd {list(shape)} axis={axis} {dtype}",
                {"paddle_ext": run(paddle_ext.logcumsumexp), "paddle": run(paddle.logcumsumexp)}, repeats=3)


def cases(quick: bool):
    big = [((4096, 4096), -1), ((4096, 4096), 0), ((16, 1 << 20), -1)]
    small = [((512, 512), -1), ((512, 512), 0), ((4, 1 << 16), -1)]
    shapes = small if quick else big
    out = [_forward_case(s, a, "float32", quick) for s, a in shapes]
    out += [_forward_case(shapes[0][0], -1, d, quick) for d in ("float64", "float16", "bfloat16")]
    out += [_backward_case(s, a, "float32") for s, a in shapes[:2]]
    return out
