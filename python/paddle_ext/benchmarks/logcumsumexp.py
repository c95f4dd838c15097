"""logcumsumexp vs paddle.logcumsumexp, NumPy's np.logaddexp.accumulate and torch.logcumsumexp."""

from __future__ import annotations

import numpy as np
import paddle

import paddle_ext

from . import Case, torch_or_none
from .put_along_axis import _single_threaded


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
    if dtype == "float32":  # accuracy: the worst element's relative error against a float64 reference
        ref = np.logaddexp.accumulate(x_np.astype(np.float64), axis=axis)
        got = paddle_ext.logcumsumexp(x, axis=axis).numpy().astype(np.float64)
        rel = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)))
        note = f"max rel err vs float64 {rel:.1e}"
    return Case("logcumsumexp", label, candidates, note=note, repeats=3 if not quick else 2)


def _backward_case(shape, axis, dtype):
    x = paddle.randn(shape, dtype)
    x.stop_gradient = False
    g_out = paddle.randn(shape, dtype)

    def run(fn):
        def step():
            out = fn(x, axis=axis)
            (g,) = paddle.grad(out, x, grad_outputs=g_out)
            return g

        return step

    candidates = {"paddle_ext": run(paddle_ext.logcumsumexp), "paddle": run(paddle.logcumsumexp)}
    torch = torch_or_none()
    if torch is not None:
        xt = torch.from_numpy(x.numpy()).requires_grad_(True)
        gt = torch.from_numpy(g_out.numpy())

        def torch_step():
            (g,) = torch.autograd.grad(torch.logcumsumexp(xt, dim=axis), xt, grad_outputs=gt)
            return g

        candidates["torch"] = torch_step
    return Case("logcumsumexp", f"fwd+bwd {list(shape)} axis={axis} {dtype}", candidates, repeats=3)


def _complex_case(shape, axis, backward, quick):
    """complex64 against the naive composition log(cumsum(exp(x))) (Paddle's logcumsumexp has no complex
    kernel; the composition overflows past |Re x| ~ 88, so the data stays small) and torch on one thread."""
    rng = np.random.default_rng(0)
    x_np = (rng.normal(size=shape) + 1j * rng.uniform(-np.pi, np.pi, size=shape)).astype(np.complex64)
    x = paddle.to_tensor(x_np, stop_gradient=not backward)
    g_out = paddle.to_tensor(x_np[::-1].copy())

    def naive(t, axis):
        return paddle.log(paddle.cumsum(paddle.exp(t), axis=axis))

    def run(fn):
        if not backward:
            return lambda: fn(x, axis=axis)
        return lambda: paddle.grad(fn(x, axis=axis), x, grad_outputs=g_out)[0]

    candidates = {"paddle_ext": run(paddle_ext.logcumsumexp), "paddle": run(naive)}
    if not backward:
        candidates["numpy"] = lambda: np.log(np.cumsum(np.exp(x_np), axis=axis))
    torch = torch_or_none()
    if torch is not None:
        xt = torch.from_numpy(x_np).requires_grad_(backward)
        gt = torch.from_numpy(g_out.numpy())
        step = ((lambda: torch.autograd.grad(torch.logcumsumexp(xt, dim=axis), xt, grad_outputs=gt)[0]) if backward
                else (lambda: torch.logcumsumexp(xt, dim=axis)))
        candidates["torch 1 thread"] = _single_threaded(torch, step)
    label = f"{'fwd+bwd' if backward else 'fwd'} {list(shape)} axis={axis} complex64"
    return Case("logcumsumexp", label, candidates, note="paddle: log(cumsum(exp(x)))", repeats=3 if not quick else 2)


def cases(quick: bool):
    big = [((4096, 4096), -1), ((4096, 4096), 0), ((16, 1 << 20), -1)]
    small = [((512, 512), -1), ((512, 512), 0), ((4, 1 << 16), -1)]
    shapes = small if quick else big
    out = [_forward_case(s, a, "float32", quick) for s, a in shapes]
    out += [_forward_case(s, a, "float64", quick) for s, a in shapes]
    out += [_forward_case(shapes[0][0], a, d, quick) for d in ("float16", "bfloat16") for a in (-1, 0)]
    out += [_backward_case(s, a, "float32") for s, a in shapes]
    out += [_backward_case(shapes[0][0], -1, "float64")]
    complex_shape = (512, 256) if quick else (4096, 1024)
    out += [_complex_case(complex_shape, a, backward, quick) for backward in (False, True) for a in (-1, 0)]
    return out
