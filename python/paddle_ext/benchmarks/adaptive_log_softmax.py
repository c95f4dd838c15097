"""AdaptiveLogSoftmaxWithLoss forward+backward: paddle_ext's layer vs Paddle 3.3.1's own layer with its
O(K^2) CPU log_softmax patched out (``x - logsumexp(x)``), PyTorch's layer (when installed), and a full
softmax head (Linear + cross_entropy); at the large configuration also paddle_ext's layer with its
projections on Paddle's matmul instead of oneDNN's sgemm (``paddle_ext_paddle_matmul``). The large case's
label names the environment that decides Paddle's GEMM speed (MKL_DEBUG_CPU_TYPE, OMP_NUM_THREADS): run the
bench once as the user's environment comes, once with ``MKL_DEBUG_CPU_TYPE=5 OMP_NUM_THREADS=2``. Paddle's unpatched layer is not run: at the WikiText-103
configuration it takes ~1050 s per step on this machine type. The note of each case gives the peak RSS
growth of each candidate during its first (warm-up) call, sampled every 2 ms.

Threads: Paddle runs its CPU matmuls (MKL) on FLAGS_paddle_num_threads = 1 thread unless told otherwise,
PyTorch on one thread per core. Per core the two GEMMs are equally fast here (~135-175 GFLOP/s float32
at the head's shapes), so the Paddle candidates run with Paddle's math library set to PyTorch's thread
count (``paddle.base.core.set_num_threads``), restored to 1 after each call: the comparison is of the
layers, not of two thread counts."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time

import numpy as np
import paddle

import paddle_ext

from . import Case, torch_or_none

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class _PeakRss:
    """Peak resident-set growth during a block, by a sampling thread."""

    def __init__(self):
        self.peak = 0

    def __enter__(self):
        self._base, self._stop = _rss(), threading.Event()
        self.peak = self._base

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, _rss())
                time.sleep(0.002)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.growth_mib = (self.peak - self._base) / 2**20


@contextlib.contextmanager
def _patched_log_softmax():
    """Paddle's layer with F.log_softmax replaced by x - logsumexp(x) (the '3.5 s' composition)."""
    F = paddle.nn.functional
    original = F.log_softmax
    F.log_softmax = lambda x, axis=-1, dtype=None, name=None: x - paddle.logsumexp(x, axis=axis, keepdim=True)
    try:
        yield
    finally:
        F.log_softmax = original


def math_threads() -> int:
    """The thread count PyTorch uses here (one per core), which the Paddle candidates get too."""
    torch = torch_or_none()
    return torch.get_num_threads() if torch is not None else len(os.sched_getaffinity(0))


def with_paddle_threads(fn, threads):
    """fn run with Paddle's CPU math library on `threads` threads, then back to Paddle's default of 1
    (so that the other benchmark modules see Paddle as it comes)."""
    from paddle.base import core  # noqa: PLC0415

    def run():
        core.set_num_threads(threads)
        try:
            return fn()
        finally:
            core.set_num_threads(1)

    return run


def _environment_label() -> str:
    """The settings that decide Paddle's GEMM speed here: "default env" when neither is set."""
    from paddle_ext import _environment  # noqa: PLC0415

    set_ = [f"{k}={_environment.setting(k)}" for k in ("MKL_DEBUG_CPU_TYPE", "OMP_NUM_THREADS")
            if _environment.setting(k) is not None]
    return " ".join(set_) if set_ else "default env"


def _on_paddle_matmul(fn):
    """fn with paddle_ext's adaptive projections on Paddle's matmul, as before they ran on oneDNN's sgemm."""
    from paddle_ext.adaptive_log_softmax import projection  # noqa: PLC0415

    def run():
        fits = projection._gemm_fits
        projection._gemm_fits = lambda *args: False
        try:
            return fn()
        finally:
            projection._gemm_fits = fits

    return run


def zipf_labels(n_classes: int, size: int, seed=0) -> np.ndarray:
    """Labels drawn with p(rank r) ∝ 1/r (Zipf, s = 1), as word frequencies in a corpus."""
    p = 1.0 / np.arange(1, n_classes + 1)
    return np.random.default_rng(seed).choice(n_classes, size=size, p=p / p.sum()).astype(np.int64)


# A fresh process's peak RSS growth over one forward + backward, the inputs and weights made first: VmHWM reset
# to the resident size before the step (a child's ru_maxrss starts from its parent's peak at fork).
_PEAK_SCRIPT = """
import re, sys
from paddle_ext.benchmarks.adaptive_log_softmax import _step_for_peak
step = _step_for_peak(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(c) for c in sys.argv[4].split(",")],
                      int(sys.argv[5]))
def status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
step()
print(status("VmHWM") - before)
"""


def _step_for_peak(candidate, in_features, n_classes, cutoffs, batch):
    """One forward + backward of `candidate` ("paddle_ext" or "torch") with its inputs and weights made (in the
    bench's threads), for _PEAK_SCRIPT."""
    x_np = np.random.default_rng(0).normal(size=(batch, in_features)).astype(np.float32)
    y_np = zipf_labels(n_classes, batch)
    if candidate == "torch":
        torch = torch_or_none()
        layer = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)
        xt, yt = torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(y_np)
        return lambda: layer(xt, yt).loss.backward()
    paddle.seed(0)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)
    x, y = paddle.to_tensor(x_np, stop_gradient=False), paddle.to_tensor(y_np)
    return with_paddle_threads(lambda: layer(x, y)[1].backward(), math_threads())


def _peak_mib(candidate, in_features, n_classes, cutoffs, batch):
    """Peak RSS growth (MiB) of one step in a fresh process (NaN where the child fails)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    args = [candidate, str(in_features), str(n_classes), ",".join(map(str, cutoffs)), str(batch)]
    try:
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, *args], capture_output=True, text=True, check=True,
                             timeout=900)
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")


def _layer_case(in_features, n_classes, cutoffs, batch, quick):
    paddle.seed(0)
    rng = np.random.default_rng(0)
    x_np = rng.normal(size=(batch, in_features)).astype(np.float32)
    y_np = zipf_labels(n_classes, batch)
    x = paddle.to_tensor(x_np, stop_gradient=False)
    y = paddle.to_tensor(y_np)
    ours = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)
    theirs = paddle.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)
    full_head = paddle.nn.Linear(in_features, n_classes)

    def paddle_step(layer):
        def step():
            _, loss = layer(x, y)
            loss.backward()
            x.clear_gradient(False)
            layer.clear_gradients(False)
            return loss

        return step

    def patched_step():
        with _patched_log_softmax():
            _, loss = theirs(x, y)
        loss.backward()
        x.clear_gradient(False)
        theirs.clear_gradients(False)
        for pair in theirs.tail_weights:  # Paddle 3.3.1 leaves these out of parameters()
            for w in pair:
                w.clear_gradient(False)
        return loss

    def full_step():
        loss = paddle.nn.functional.cross_entropy(full_head(x), y)
        loss.backward()
        x.clear_gradient(False)
        full_head.clear_gradients(False)
        return loss

    threads = math_threads()
    candidates = {"paddle_ext": with_paddle_threads(paddle_step(ours), threads)}
    # The large case at N = 2048 also runs the same layer with its projections on Paddle's matmul (before
    # oneDNN); at N = 16384 only paddle_ext and torch run (the others take minutes and gigabytes a step).
    if batch == 2048:
        candidates["paddle_ext_paddle_matmul"] = with_paddle_threads(_on_paddle_matmul(paddle_step(ours)), threads)
    if batch <= 2048:
        candidates["paddle_patched"] = with_paddle_threads(patched_step, threads)
    torch = torch_or_none()
    if torch is not None:
        tl = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)
        xt = torch.from_numpy(x_np).requires_grad_()
        yt = torch.from_numpy(y_np)

        def torch_step():
            loss = tl(xt, yt).loss
            loss.backward()
            xt.grad = None
            tl.zero_grad(set_to_none=True)
            return loss

        candidates["torch"] = torch_step
    if batch <= 2048:
        candidates["paddle_full_softmax"] = with_paddle_threads(full_step, threads)

    label = f"fwd+bwd in={in_features} classes={n_classes} cutoffs={cutoffs} N={batch} f32"
    if batch >= 2048:  # the large case is run in both environments (docs): the row says which
        label += f" [{_environment_label()}]"
    # the large case: 3 timed runs (the full softmax alone is ~30 s a step on 2 cores)
    case = Case("adaptive_log_softmax", label, {}, repeats=3 if batch >= 2048 else 5,
                peak_mib={name: functools.partial(_peak_mib, name, in_features, n_classes, cutoffs, batch)
                          for name in ("paddle_ext", "torch") if name in candidates})
    peaks = {}

    def measured(name, fn):
        def run():
            if name in peaks:
                return fn()
            with _PeakRss() as mem:
                out = fn()
            peaks[name] = mem.growth_mib
            case.note = (f"math threads {threads}; peak RSS growth MiB: "
                         + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()))
            return out

        return run

    case.candidates = {name: measured(name, fn) for name, fn in candidates.items()}
    return case


def _fused_op_case(m, k, quick):
    rng = np.random.default_rng(1)
    logits = paddle.to_tensor(rng.normal(size=(m, k)).astype(np.float32), stop_gradient=False)
    target = paddle.to_tensor(rng.integers(0, k, size=m))

    def ours():
        out = paddle_ext.adaptive_log_softmax_target(logits, target)
        (g,) = paddle.grad(out.sum(), logits)
        return g

    def composition():  # x - logsumexp(x), then the target column: the patched path's per-cluster work
        lp = logits - paddle.logsumexp(logits, axis=1, keepdim=True)
        out = paddle.take_along_axis(lp, target.unsqueeze(1), axis=1)
        (g,) = paddle.grad(out.sum(), logits)
        return g

    threads = math_threads()
    candidates = {"paddle_ext": with_paddle_threads(ours, threads),
                  "paddle_patched": with_paddle_threads(composition, threads)}
    torch = torch_or_none()
    if torch is not None:
        lt = torch.from_numpy(logits.numpy()).requires_grad_()
        tt = torch.from_numpy(target.numpy())

        def torch_fn():
            out = torch.log_softmax(lt, dim=1).gather(1, tt.unsqueeze(1))
            (g,) = torch.autograd.grad(out.sum(), lt)
            return g

        candidates["torch"] = torch_fn
    return Case("adaptive_log_softmax", f"target op fwd+bwd [{m}, {k}] f32", candidates, repeats=5 if quick else 7)


def _projection_grad_case(m, n_in, k, quick):
    """One projection of a reduced loss's step (logits = x @ w, the target op, the grads of x and w for a unit
    out_grad): pe_adaptive_linear_target (in blocks of rows, the grads formed in the forward) against the
    same from pe_adaptive_matmul, the target op and its grad op, and two pe_adaptive_matmul calls ("composed",
    what a static program runs), Paddle's ops (matmul, softmax, one_hot on 2 threads) and NumPy."""
    ops = paddle_ext._library.ops()
    rng = np.random.default_rng(2)
    x_np, w_np = rng.normal(size=(m, n_in)).astype(np.float32), rng.normal(size=(n_in, k)).astype(np.float32)
    target_np = rng.integers(0, k, size=m)
    x, w, target, g = (paddle.to_tensor(a) for a in (x_np, w_np, target_np, np.ones(m, np.float32)))

    def composed():
        logits = ops.pe_adaptive_matmul(x, w, False, False)
        out, lse = ops.pe_adaptive_log_softmax_target(logits, target)
        d = ops.pe_adaptive_log_softmax_target_vjp(logits, target, lse, g)
        return out, ops.pe_adaptive_matmul(d, w, False, True), ops.pe_adaptive_matmul(x, d, True, False)

    def paddle_ops():
        logits = paddle.matmul(x, w)
        d = paddle.nn.functional.one_hot(target, k) - paddle.nn.functional.softmax(logits, axis=1)
        return paddle.matmul(d, w, transpose_y=True), paddle.matmul(x, d, transpose_x=True)

    def numpy_fn():
        logits = x_np @ w_np
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        d = -p / p.sum(axis=1, keepdims=True)
        d[np.arange(m), target_np] += 1
        return d @ w_np.T, x_np.T @ d

    threads = math_threads()
    candidates = {"paddle_ext": lambda: ops.pe_adaptive_linear_target(x, w, target, True),
                  "paddle_ext_composed": composed, "paddle": with_paddle_threads(paddle_ops, threads),
                  "numpy": numpy_fn}
    return Case("adaptive_log_softmax", f"projection fwd+grad [{m}, {n_in}] x [{n_in}, {k}] f32", candidates,
                repeats=5 if quick else 7)


def _padded_case(in_features, n_classes, cutoffs, batch, padding, quick):
    """A batch whose last `padding` share of rows is padding (label -100): the layer with ignore_index
    against the same layer on the real rows only (what slicing the padding out before the layer gives)
    and against Paddle's composition nll_loss(log_prob) with reduction='none' (its 'mean'/'sum' corrupt
    the heap when a label is ignored)."""
    paddle.seed(0)
    rng = np.random.default_rng(0)
    real = int(batch * (1 - padding))
    x = paddle.to_tensor(rng.normal(size=(batch, in_features)).astype(np.float32), stop_gradient=False)
    y_np = np.concatenate([zipf_labels(n_classes, real), np.full(batch - real, -100)])
    y, x_real, y_real = paddle.to_tensor(y_np), x[:real].detach(), paddle.to_tensor(y_np[:real])
    x_real.stop_gradient = False
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0)

    def step(fn, inp):
        def run():
            loss = fn(inp)
            loss.backward()
            inp.clear_gradient(False)
            layer.clear_gradients(False)
            return loss

        return run

    def composition(inp):
        rows = paddle.nn.functional.nll_loss(layer.log_prob(inp), y, reduction="none")
        return rows.sum() / real

    threads = math_threads()
    candidates = {"paddle_ext": with_paddle_threads(step(lambda inp: layer(inp, y)[1], x), threads),
                  "paddle_ext_sliced": with_paddle_threads(step(lambda inp: layer(inp, y_real)[1], x_real), threads),
                  "paddle_nll_log_prob": with_paddle_threads(step(composition, x), threads)}
    return Case("adaptive_log_softmax", f"fwd+bwd ignore_index, {padding:.0%} padding, in={in_features} "
                f"classes={n_classes} cutoffs={cutoffs} N={batch} f32", candidates, repeats=5)


def _embedding_case(n_classes, dim, cutoffs, tokens, quick):
    """AdaptiveEmbedding forward+backward against Paddle's composition of the same model: per cluster, an
    embedding lookup of every token (ids outside the cluster clipped, then masked) and a matmul."""
    paddle.seed(0)
    ids = paddle.to_tensor(zipf_labels(n_classes, tokens, seed=1))
    emb = paddle_ext.nn.AdaptiveEmbedding(n_classes, dim, cutoffs, div_value=4.0)
    bounds = emb.cutoffs
    tables = [emb.head_weight.t().detach()] + [pair[1].t().detach() for pair in emb.tail_weights]
    for t in tables:
        t.stop_gradient = False
    projections = [None] + [pair[0] for pair in emb.tail_weights]

    def composition():
        out = 0
        for i, (table, proj) in enumerate(zip(tables, projections)):
            low = 0 if i == 0 else bounds[i - 1]
            inside = ((ids >= low) & (ids < bounds[i])).astype("float32").unsqueeze(1)
            e = paddle.nn.functional.embedding(paddle.clip(ids - low, 0, table.shape[0] - 1), table)
            out = out + (e if proj is None else paddle.matmul(e, proj, transpose_y=True)) * inside
        return out

    def step(fn):
        def run():
            out = fn()
            out.sum().backward()
            emb.clear_gradients(False)
            for t in tables:
                t.clear_gradient(False)
            return out

        return run

    threads = math_threads()
    candidates = {"paddle_ext": with_paddle_threads(step(lambda: emb(ids)), threads),
                  "paddle_composition": with_paddle_threads(step(composition), threads)}
    return Case("adaptive_log_softmax", f"AdaptiveEmbedding fwd+bwd classes={n_classes} dim={dim} cutoffs={cutoffs} "
                f"tokens={tokens} f32", candidates, repeats=5)


def cases(quick: bool):
    out = [_fused_op_case(256, 40000, quick), _layer_case(128, 20000, [2000, 6000, 15000], 512, quick),
           *(_padded_case(128, 20000, [2000, 6000, 15000], 512, padding, quick) for padding in (0.0, 0.3, 0.9)),
           _embedding_case(20000, 128, [2000, 6000, 15000], 4096, quick),
           *(_projection_grad_case(m, n_in, k, quick) for m, n_in, k in
             ((172, 128, 40000), (189, 32, 140000)) + (() if quick else ((2048, 512, 20003), (256, 512, 140000))))]
    if not quick:  # the WikiText-103 configuration: heavy on 2 cores (the full softmax ~40 s; N = 16384 ~10 s)
        out += [_layer_case(512, 267735, [20000, 60000, 200000], batch, quick) for batch in (2048, 16384)]
    return out
