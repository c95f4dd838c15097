"""The transducer step with its joiner (``paddle-ext bench --op rnnt_loss --case joiner``): icefall's joiner
``output_linear(tanh(am[:, :, None] + lm[:, None]))`` on projected encoder/predictor outputs am [B, T, J],
lm [B, S+1, J], then the loss, forward + backward (grads of am, lm, weight and bias):

* ``paddle_ext`` — the fused losses (``rnnt_loss_fused_joiner``, ``tdt_loss_fused_joiner``, the pruned form
  through ``ranges``): no [B, T, S+1, C] logits, no [B, T, S+1, J] activations;
* ``unfused`` — the joiner in Paddle's ops, then paddle_ext's loss on its logits;
* ``fast_rnnt`` — the joiner in PyTorch, then fast_rnnt's loss (where ``import fast_rnnt`` works);
* ``gemm floor`` — the fused step's four GEMM passes alone (forward, recompute, weight grad, input grad) on
  oneDNN's sgemm, in the kernel's blocks: what the fused step cannot go below.

Times are in-process medians with every candidate on paddle_ext's thread count (Paddle's matmuls through
``core.set_num_threads``, torch's through ``set_num_threads``). Peak memory is each candidate's step in a fresh
process: its VmHWM growth over the inputs (one step), so that no candidate's pools or the bench's own memory
count. The note gives them, and the largest relative difference of the loss and the four grads from the
fused op's."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import paddle
import paddle.nn.functional as F

import paddle_ext

from . import Case, torch_or_none

TERM = 0
DURATIONS = [0, 1, 2, 3, 4]
BIG_BLANKS = [2, 4, 8]  # multi-blank: units C-4 .. C-2 the big blanks, C-1 the standard blank
S_RANGE = 5
BLOCK_BYTES = 4 << 20  # joiner_blocks.h's kBlockBytes: the gemm floor's blocks are the kernel's


def _arrays(B, T, S, J, C, X, seed=0):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {"am": (rng.normal(size=(B, T, J)) * 0.5).astype(f32), "lm": (rng.normal(size=(B, S + 1, J)) * 0.5).astype(f32),
            "weight": (rng.normal(size=(J, X)) / np.sqrt(J)).astype(f32), "bias": np.zeros(X, f32),
            "am_simple": rng.normal(size=(B, T, X)).astype(f32), "lm_simple": rng.normal(size=(B, S + 1, X)).astype(f32),
            "symbols": rng.integers(1, C, size=(B, S)).astype(np.int64),
            "boundary": np.tile(np.array([0, 0, S, T], np.int64), (B, 1))}


def _paddle_inputs(a):
    return {k: paddle.to_tensor(v, stop_gradient=v.dtype != np.float32) for k, v in a.items()}


def _joiner(x, weight, bias):
    return F.linear(paddle.tanh(x), weight, bias)


def _ranges(p):
    """The pruned recipe's ranges, from the simple loss on am_simple / lm_simple (k2's recipe)."""
    simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(p["lm_simple"], p["am_simple"], p["symbols"], TERM,
                                                              p["boundary"], reduction="sum", return_grad=True)
    return simple, paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, p["boundary"], S_RANGE)


def paddle_step(loss, variant, p):
    """One step of `variant` ("paddle_ext" or "unfused") of `loss` ("rnnt", "tdt", "multiblank", "pruned") on inputs p:
    (loss, grads of the float inputs)."""
    joiner = [p["am"], p["lm"], p["weight"], p["bias"]]
    wrt = list(joiner)
    if loss == "rnnt":
        if variant == "paddle_ext":
            out = paddle_ext.rnnt_loss_fused_joiner(*joiner, p["symbols"], TERM, p["boundary"], reduction="sum")
        else:
            logits = _joiner(p["am"].unsqueeze(2) + p["lm"].unsqueeze(1), p["weight"], p["bias"])
            out = paddle_ext.rnnt_loss(logits, p["symbols"], TERM, p["boundary"], reduction="sum")
    elif loss in ("tdt", "multiblank"):  # (the blank last: after the durations, or after the big blanks)
        units, fused, unfused = ((DURATIONS, paddle_ext.tdt_loss_fused_joiner, paddle_ext.tdt_loss) if loss == "tdt" else
                                 (BIG_BLANKS, paddle_ext.multiblank_rnnt_loss_fused_joiner, paddle_ext.multiblank_rnnt_loss))
        blank = p["weight"].shape[1] - (len(DURATIONS) + 1 if loss == "tdt" else 1)
        if variant == "paddle_ext":
            out = fused(*joiner, p["symbols"], units, blank, p["boundary"], reduction="sum")
        else:
            logits = _joiner(p["am"].unsqueeze(2) + p["lm"].unsqueeze(1), p["weight"], p["bias"])
            out = unfused(logits, p["symbols"], units, blank, p["boundary"], reduction="sum")
    else:
        wrt += [p["am_simple"], p["lm_simple"]]
        simple, ranges = _ranges(p)
        if variant == "paddle_ext":
            pruned = paddle_ext.rnnt_loss_fused_joiner(*joiner, p["symbols"], TERM, p["boundary"], reduction="sum",
                                                       ranges=ranges)
        else:
            am_p, lm_p = paddle_ext.do_rnnt_pruning(p["am"], p["lm"], ranges)
            pruned = paddle_ext.rnnt_loss_pruned(_joiner(am_p + lm_p, p["weight"], p["bias"]), p["symbols"], ranges,
                                                 TERM, p["boundary"], reduction="sum")
        out = simple * 0.5 + pruned
    return out, paddle.grad(out, wrt)


def torch_step(loss, t, fr):
    """fast_rnnt's step with the joiner in PyTorch (rnnt and the pruned recipe)."""
    import torch  # noqa: PLC0415

    joiner = [t["am"], t["lm"], t["weight"], t["bias"]]
    wrt = list(joiner)

    def logits_of(x):
        return torch.nn.functional.linear(torch.tanh(x), t["weight"].t(), t["bias"])

    if loss == "rnnt":
        out = fr.rnnt_loss(logits_of(t["am"][:, :, None] + t["lm"][:, None]), t["symbols"], TERM, t["boundary"],
                           reduction="sum")
    else:
        wrt += [t["am_simple"], t["lm_simple"]]
        simple, (px_grad, py_grad) = fr.rnnt_loss_simple(t["lm_simple"], t["am_simple"], t["symbols"], TERM,
                                                         t["boundary"], reduction="sum", return_grad=True)
        ranges = fr.get_rnnt_prune_ranges(px_grad, py_grad, t["boundary"], S_RANGE)
        am_p, lm_p = fr.do_rnnt_pruning(t["am"], t["lm"], ranges)
        out = simple * 0.5 + fr.rnnt_loss_pruned(logits_of(am_p + lm_p), t["symbols"], ranges, TERM, t["boundary"],
                                                 reduction="sum")
    return out, torch.autograd.grad(out, wrt)


def gemm_floor_step(rows, R, J, X):
    """The fused step's four GEMM passes over `rows` lattice rows, in blocks of whole frames of R rows (the
    kernel's blocking), on pe_adaptive_matmul (oneDNN's sgemm)."""
    ops = paddle_ext._library.ops()
    frames = max(1, min(max(1, BLOCK_BYTES // (4 * X)) // R, rows // R))  # (as the kernel: at most the problem's)
    n = frames * R
    h, w = paddle.randn([n, J]), paddle.randn([J, X]) / J ** 0.5
    blocks = -(-rows // n)

    def step():
        for _ in range(blocks):
            z = ops.pe_adaptive_matmul(h, w, False, False)  # forward
            z = ops.pe_adaptive_matmul(h, w, False, False)  # recomputed in the backward
            ops.pe_adaptive_matmul(h, z, True, False)  # weight grad
            ops.pe_adaptive_matmul(z, w, False, True)  # input grad
        return None

    return step


_PEAK_SCRIPT = """
import json, re, sys
import numpy as np
def status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
job = json.loads(sys.argv[1])
from paddle_ext.benchmarks import _joiner as j
a = j._arrays(*job["shape"])
if job["variant"] == "fast_rnnt":
    import torch, fast_rnnt
    torch.set_num_threads(job["threads"])
    t = {k: torch.from_numpy(v).requires_grad_(v.dtype == np.float32) for k, v in a.items()}
    run = lambda: j.torch_step(job["loss"], t, fast_rnnt)
else:
    from paddle.base import core
    core.set_num_threads(job["threads"])
    p = j._paddle_inputs(a)
    run = lambda: j.paddle_step(job["loss"], job["variant"], p)
del a
open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS
before = status("VmRSS")
run()
print(status("VmHWM") - before)
"""


def peak_mib(loss, variant, shape, threads):
    """Peak RSS growth (MiB) of one step of `variant` in a fresh process (NaN where it fails)."""
    job = json.dumps({"loss": loss, "variant": variant, "shape": list(shape), "threads": threads})
    try:
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, job], capture_output=True, text=True, check=True,
                             timeout=1800)
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


def _max_rel(a, b) -> float:
    a, b = (np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy(), np.float64) for x in (a, b))
    return float(np.max(np.abs(a - b), initial=0.0) / max(np.max(np.abs(b), initial=0.0), 1e-30))


def case(loss, B, T, S, J, C, quick, threads, with_paddle_threads, fast_rnnt):
    """One row: fused vs unfused (vs fast_rnnt, vs the GEMM floor) on one shape."""
    X = C + {"tdt": len(DURATIONS), "multiblank": len(BIG_BLANKS) + 1}.get(loss, 0)
    shape = (B, T, S, J, C, X)
    a = _arrays(*shape)
    p = _paddle_inputs(a)
    candidates = {v: with_paddle_threads(lambda v=v: paddle_step(loss, v, p), threads) for v in ("paddle_ext", "unfused")}
    torch = torch_or_none()
    if fast_rnnt is not None and torch is not None and loss in ("rnnt", "pruned"):
        t = {k: torch.from_numpy(v).requires_grad_(v.dtype == np.float32) for k, v in a.items()}

        def torch_run():
            torch.set_num_threads(threads)
            return torch_step(loss, t, fast_rnnt)

        candidates["fast_rnnt"] = torch_run
    if loss != "pruned":
        candidates["gemm floor"] = gemm_floor_step(B * T * (S + 1), S + 1, J, X)
    name = {"rnnt": "rnnt_loss", "tdt": f"tdt_loss (durations 0-{len(DURATIONS) - 1})",
            "multiblank": f"multiblank_rnnt_loss (big blanks {BIG_BLANKS})",
            "pruned": f"pruned recipe (s_range={S_RANGE})"}[loss]
    row = Case("rnnt_loss", f"joiner + {name} fwd+bwd B={B} T={T} S={S} J={J} C={C}", {},
               repeats=3 if quick else 3)
    outputs = {}

    def describe():
        peaks = {k: peak_mib(loss, k, shape, threads) for k in candidates if k != "gemm floor"}
        diffs = []
        for k, (out, grads) in outputs.items():
            if k != "paddle_ext":
                ref_out, ref_grads = outputs["paddle_ext"]
                diffs.append(f"{k} {_max_rel(out, ref_out):.1e}/{max(_max_rel(g, r) for g, r in zip(grads, ref_grads)):.1e}")
        row.note = (f"threads {threads}; peak RSS growth MiB (a fresh process each): "
                    + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items())
                    + "; max rel diff loss/grads vs paddle_ext: " + ", ".join(diffs))

    def first_output(key, fn):
        def run():
            if key not in outputs and key != "gemm floor":
                outputs[key] = fn()
                if len(outputs) == len([k for k in candidates if k != "gemm floor"]):
                    describe()
                return outputs[key]
            return fn()

        return run

    row.candidates = {k: first_output(k, fn) for k, fn in candidates.items()}
    return row
