"""The RNN-T losses fwd+bwd (float32, grads of sum(loss) w.r.t. the float inputs) vs k2-fsa/fast_rnnt and
Paddle's ``F.rnnt_loss``: rnnt_loss_simple and rnnt_loss_smoothed (B=16 S=100 T=500 C=500),
rnnt_loss_pruned on given joiner logits (s_range=5), the whole pruned recipe (simple with return_grad +
get_rnnt_prune_ranges + do_rnnt_pruning + a sum joiner + pruned) and the full rnnt_loss (B=8 T=200 S=50
C=500; Paddle's ``F.rnnt_loss(log_softmax(x))`` next to it), and tdt_loss and multiblank_rnnt_loss on that
shape and two neighbours (a larger vocabulary, B=16 S=20 T=100 C=1000; a small one, B=8 S=80 T=300 C=50,
where the recursions over the extra arcs weigh most) next to the full rnnt_loss. Every candidate gets the
same numbers.
The FastEmit rows time ``fastemit_lambda=0.5`` against paddle_ext's own ``fastemit_lambda=0`` (the ratio is
FastEmit's cost: below 1 means it costs time) and, for the full loss, Paddle's FastEmit.

fast_rnnt is an optional column: it runs where ``import fast_rnnt`` works (the user installed it, with
torch) and is left out otherwise; nothing here builds it.

Threads: everybody runs on the same count, paddle_ext's (``OMP_NUM_THREADS`` when set, else one per core):
paddle_ext's kernels, Paddle's matmuls get it via ``core.set_num_threads`` (restored
to 1 after each call), torch via ``set_num_threads``. The note of each case gives each candidate's peak
RSS growth during its first call (sampled every 2 ms) and the largest relative difference of its
per-item losses and grads from paddle_ext's."""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import paddle
import paddle.nn.functional as F

import paddle_ext

from . import Case, _joiner, torch_or_none
from .adaptive_log_softmax import _PeakRss, math_threads, with_paddle_threads

TERM = 0


@functools.lru_cache(maxsize=1)
def fast_rnnt():
    """The installed fast_rnnt package, or None where ``import fast_rnnt`` fails (not installed, no torch)."""
    if torch_or_none() is None:
        return None
    try:
        import fast_rnnt as module  # noqa: PLC0415
    except ImportError:
        return None
    return module


def threads() -> int:
    """The thread count paddle_ext's kernels run on (PADDLE_EXT_NUM_THREADS, else OMP_NUM_THREADS as the
    process started, else one per core; see `paddle_ext._library.num_threads`)."""
    from paddle_ext import _library  # noqa: PLC0415

    return _library.num_threads()


def _trim_heap():
    """Give freed heap memory back to the OS first, so that a candidate's growth is not hidden by memory
    an earlier one freed (Paddle's allocator may still keep its own blocks: the first row is the cleanest)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _max_rel(a, b) -> float:
    a, b = (np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy(), np.float64) for x in (a, b))
    return float(np.max(np.abs(a - b), initial=0.0) / max(np.max(np.abs(b), initial=0.0), 1e-30))


class _Problem:
    """The NumPy inputs of one case, as paddle tensors (`p`) and torch tensors (`t`, when torch is there)."""

    def __init__(self, **arrays):
        self.np = arrays
        torch = torch_or_none()
        self.p = {k: paddle.to_tensor(v, stop_gradient=v.dtype != np.float32) for k, v in arrays.items()}
        self.t = {} if torch is None else {k: torch.from_numpy(v.copy()).requires_grad_(v.dtype == np.float32)
                                           for k, v in arrays.items()}


def _paddle_step(loss_fn, inputs, n_threads):
    def step():
        loss = loss_fn()
        return loss, paddle.grad(loss.sum(), inputs)

    return with_paddle_threads(step, n_threads)


def _torch_step(loss_fn, inputs, n_threads):
    import torch  # noqa: PLC0415

    def step():
        torch.set_num_threads(n_threads)
        loss = loss_fn()
        return loss, torch.autograd.grad(loss.sum(), inputs)

    return step


def _case(name, p_fn, p_inputs, f_fn=None, f_inputs=(), paddle_fn=None, quick=False, more=None, unrelated=(),
          alternate=False):
    """A Case with paddle_ext, fast_rnnt (where f_fn is given and fast_rnnt loads), Paddle's op (where
    paddle_fn is given) and `more` (name -> loss fn on p_inputs, or (loss fn, its own inputs)), each measured
    (RSS, outputs) on its first call; `alternate`: timed in turns (Case.alternate), 9 rounds."""
    n = threads()
    candidates = {"paddle_ext": _paddle_step(p_fn, p_inputs, n)}
    candidates.update({k: _paddle_step(*(fn if isinstance(fn, tuple) else (fn, p_inputs)), n)
                       for k, fn in (more or {}).items()})
    if f_fn is not None and fast_rnnt() is not None:
        candidates["fast_rnnt"] = _torch_step(f_fn, f_inputs, n)
    if paddle_fn is not None:
        candidates["paddle"] = _paddle_step(paddle_fn, p_inputs, n)
    case = Case("rnnt_loss", name, {}, repeats=3 if quick else 9 if alternate else 5, alternate=alternate)
    peaks, outputs = {}, {}

    def describe():
        diffs = []
        for k, (loss, grads) in outputs.items():
            if k != "paddle_ext" and "paddle_ext" in outputs and k not in unrelated:
                ref_loss, ref_grads = outputs["paddle_ext"]
                grad = max(_max_rel(g, r) for g, r in zip(grads, ref_grads))
                diffs.append(f"{k} {_max_rel(loss, ref_loss):.1e}/{grad:.1e}")
        case.note = (f"threads {n}; peak RSS growth MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items())
                     + ("; max rel diff loss/grad vs paddle_ext: " + ", ".join(diffs) if diffs else ""))

    def measured(key, fn):
        def run():
            if key in peaks:
                return fn()
            _trim_heap()
            with _PeakRss() as mem:
                out = fn()
            peaks[key], outputs[key] = mem.growth_mib, out
            describe()
            return out

        return run

    case.candidates = {k: measured(k, fn) for k, fn in candidates.items()}
    return case


def _lm_am(B, S, T, C, seed=0):
    rng = np.random.default_rng(seed)
    return _Problem(lm=rng.normal(size=(B, S + 1, C)).astype(np.float32),
                    am=rng.normal(size=(B, T, C)).astype(np.float32),
                    symbols=rng.integers(1, C, size=(B, S)).astype(np.int64),
                    boundary=np.tile(np.array([0, 0, S, T], np.int64), (B, 1)))


def _simple_cases(B, S, T, C, s_range, quick):
    d = _lm_am(B, S, T, C)
    p, t, fr = d.p, d.t, fast_rnnt()
    shape = f"B={B} S={S} T={T} C={C}"
    def simple(fastemit_lambda):
        return lambda: paddle_ext.rnnt_loss_simple(p["lm"], p["am"], p["symbols"], TERM, p["boundary"],
                                                   reduction="none", fastemit_lambda=fastemit_lambda)

    out = [
        _case(f"rnnt_loss_simple fwd+bwd {shape}", simple(0.0), [p["lm"], p["am"]],
              fr and (lambda: fr.rnnt_loss_simple(t["lm"], t["am"], t["symbols"], TERM, t["boundary"],
                                                  reduction="none")), [t.get("lm"), t.get("am")], quick=quick),
        _case(f"rnnt_loss_simple fwd+bwd {shape} fastemit_lambda=0.5", simple(0.5), [p["lm"], p["am"]],
              quick=quick, more={"paddle_ext(fastemit_lambda=0)": simple(0.0)}),
        _case(f"rnnt_loss_smoothed fwd+bwd {shape}",
              lambda: paddle_ext.rnnt_loss_smoothed(p["lm"], p["am"], p["symbols"], TERM, 0.1, 0.1, p["boundary"],
                                                    reduction="none"), [p["lm"], p["am"]],
              fr and (lambda: fr.rnnt_loss_smoothed(t["lm"], t["am"], t["symbols"], TERM, 0.1, 0.1, t["boundary"],
                                                    reduction="none")), [t.get("lm"), t.get("am")], quick=quick),
    ]

    # the pruned loss on given logits [B, T, s_range, C], with the ranges of paddle_ext's simple loss
    _, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(p["lm"], p["am"], p["symbols"], TERM, p["boundary"],
                                                        reduction="none", return_grad=True)
    ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, p["boundary"], s_range).numpy()
    R = ranges.shape[2]
    g = _Problem(logits=np.random.default_rng(1).normal(size=(B, T, R, C)).astype(np.float32), ranges=ranges)
    out.append(_case(
        f"rnnt_loss_pruned fwd+bwd (given logits) {shape} s_range={R}",
        lambda: paddle_ext.rnnt_loss_pruned(g.p["logits"], p["symbols"], g.p["ranges"], TERM, p["boundary"],
                                            reduction="none"), [g.p["logits"]],
        fr and (lambda: fr.rnnt_loss_pruned(g.t["logits"], t["symbols"], g.t["ranges"], TERM, t["boundary"],
                                            reduction="none")), [g.t.get("logits")], quick=quick))

    def recipe(lib, lm, am, symbols, boundary, joiner=lambda a, b: a + b):
        simple, (px_grad, py_grad) = lib.rnnt_loss_simple(lm, am, symbols, TERM, boundary, reduction="none",
                                                          return_grad=True)
        ranges = lib.get_rnnt_prune_ranges(px_grad, py_grad, boundary, s_range)
        am_pruned, lm_pruned = lib.do_rnnt_pruning(am, lm, ranges)
        logits = joiner(am_pruned, lm_pruned)
        return simple + lib.rnnt_loss_pruned(logits, symbols, ranges, TERM, boundary, reduction="none")

    out.append(_case(
        f"pruned recipe fwd+bwd {shape} s_range={R} (joiner: am+lm)",
        lambda: recipe(paddle_ext, p["lm"], p["am"], p["symbols"], p["boundary"]), [p["lm"], p["am"]],
        fr and (lambda: recipe(fr, t["lm"], t["am"], t["symbols"], t["boundary"])), [t.get("lm"), t.get("am")],
        quick=quick))
    return out


def _full_case(B, S, T, C, quick):
    rng = np.random.default_rng(2)
    symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
    d = _Problem(logits=rng.normal(size=(B, T, S + 1, C)).astype(np.float32), symbols=symbols,
                 boundary=np.tile(np.array([0, 0, S, T], np.int64), (B, 1)), labels=symbols.astype(np.int32),
                 t_len=np.full(B, T, np.int32), s_len=np.full(B, S, np.int32))
    p, t, fr = d.p, d.t, fast_rnnt()

    def ours(fastemit_lambda):
        return lambda: paddle_ext.rnnt_loss(p["logits"], p["symbols"], TERM, p["boundary"], reduction="none",
                                            fastemit_lambda=fastemit_lambda)

    def paddles(fastemit_lambda):
        return lambda: F.rnnt_loss(F.log_softmax(p["logits"], -1), p["labels"], p["t_len"], p["s_len"], blank=TERM,
                                   fastemit_lambda=fastemit_lambda, reduction="none")

    shape = f"B={B} S={S} T={T} C={C}"
    return [
        _case(f"rnnt_loss fwd+bwd {shape}", ours(0.0), [p["logits"]],
              fr and (lambda: fr.rnnt_loss(t["logits"], t["symbols"], TERM, t["boundary"], reduction="none")),
              [t.get("logits")], paddle_fn=paddles(0.0), quick=quick),
        _case(f"rnnt_loss fwd+bwd {shape} fastemit_lambda=0.5", ours(0.5), [p["logits"]], paddle_fn=paddles(0.5),
              quick=quick, more={"paddle_ext(fastemit_lambda=0)": ours(0.0)}),
    ]


BIG_BLANKS = [2, 4, 8]  # the multi-blank rows' big blanks (units TERM_MULTIBLANK - 1 - i)


def _jump_cases(B, S, T, C, D, quick):
    """tdt_loss (durations 0..D-1, logits [B, T, S+1, C + D]) and multiblank_rnnt_loss (big blanks BIG_BLANKS,
    logits [B, T, S+1, C]) next to our own full rnnt_loss on [B, T, S+1, C], timed in turns: the ratio column
    is rnnt_loss's time over the row's (TDT's goal: >= 1 / 1.5; multi-blank's: >= 1 / 1.2). Their losses
    differ by design, so no difference is reported."""
    rng = np.random.default_rng(3)
    symbols = rng.integers(1, C - len(BIG_BLANKS) - 1, size=(B, S)).astype(np.int64)
    d = _Problem(tdt=rng.normal(size=(B, T, S + 1, C + D)).astype(np.float32),
                 plain=rng.normal(size=(B, T, S + 1, C)).astype(np.float32), symbols=symbols,
                 boundary=np.tile(np.array([0, 0, S, T], np.int64), (B, 1)))
    p, blank, durations = d.p, C - 1, list(range(D))
    rnnt = ("paddle_ext rnnt_loss",
            (lambda: paddle_ext.rnnt_loss(p["plain"], p["symbols"], blank, p["boundary"], reduction="none"),
             [p["plain"]]))
    shape = f"B={B} S={S} T={T} C={C}"
    return [
        _case(f"tdt_loss fwd+bwd {shape} D={D}",
              lambda: paddle_ext.tdt_loss(p["tdt"], p["symbols"], durations, blank, p["boundary"], reduction="none"),
              [p["tdt"]], quick=quick, more=dict([rnnt]), unrelated=(rnnt[0],), alternate=True),
        _case(f"multiblank_rnnt_loss fwd+bwd {shape} big blanks {BIG_BLANKS}",
              lambda: paddle_ext.multiblank_rnnt_loss(p["plain"], p["symbols"], BIG_BLANKS, blank, p["boundary"],
                                                      reduction="none"),
              [p["plain"]], quick=quick, more=dict([rnnt]), unrelated=(rnnt[0],), alternate=True),
    ]


def _joiner_cases(quick):
    """The step with its joiner (benchmarks/_joiner.py): fused vs unfused vs fast_rnnt vs the GEMM floor, the
    full loss at B=8 T=250 S=50 J=512 C=2000 and its neighbours (C=500, C=5000, T=500), TDT, multi-blank and
    the pruned recipe at the first shape."""
    n = threads()
    shapes = [("rnnt", 2, 6, 3, 16, 12), ("tdt", 2, 6, 3, 16, 12), ("multiblank", 2, 6, 3, 16, 12),
              ("pruned", 2, 8, 6, 16, 12)] if quick else [
        ("rnnt", 8, 250, 50, 512, 2000), ("rnnt", 8, 250, 50, 512, 500), ("rnnt", 8, 250, 50, 512, 5000),
        ("rnnt", 8, 500, 50, 512, 2000), ("tdt", 8, 250, 50, 512, 2000), ("multiblank", 8, 250, 50, 512, 2000),
        ("pruned", 8, 250, 50, 512, 2000)]
    return [_joiner.case(*shape, quick, n, with_paddle_threads, fast_rnnt()) for shape in shapes]


def cases(quick: bool):
    if quick:
        return (_simple_cases(2, 5, 12, 8, 3, quick) + _full_case(2, 4, 6, 8, quick) + _jump_cases(2, 4, 6, 8, 3, quick)
                + _joiner_cases(quick))
    return (_simple_cases(16, 100, 500, 500, 5, quick) + _full_case(8, 50, 200, 500, quick)
            + _jump_cases(8, 50, 200, 500, 5, quick) + _jump_cases(16, 20, 100, 1000, 5, quick)
            + _jump_cases(8, 80, 300, 50, 5, quick) + _joiner_cases(quick))
