"""`paddle-ext bench`: paddle_ext's ops side by side with Paddle's built-ins, NumPy and PyTorch.

Each module in this package defines ``cases(quick: bool) -> list[Case]``. A case names the
candidates that compute the same thing; the runner times each in this one process (median of
repeats after a warm-up) and reports every other candidate's time as a ratio to paddle_ext's
(``4.0x`` = paddle_ext is four times faster). Benchmarks are never tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import statistics
import time
from typing import Callable


@dataclasses.dataclass
class Case:
    op: str
    name: str
    candidates: dict[str, Callable[[], object]]  # "paddle_ext" first; others: "paddle", "numpy", "torch", ...
    baseline: str = "paddle_ext"
    note: str = ""
    repeats: int | None = None  # fewer for slow cases
    calls: int = 1  # calls each candidate makes per timed sample; the results are per call
    unit: str = "ms"  # how the results are shown: "ms", or "us" for per-call floors
    # Time the candidates in turns, one sample each per round, instead of one candidate's repeats after
    # another's: for candidates on one allocator whose ratio is the point (a shared machine's drift then
    # hits every candidate alike).
    alternate: bool = False
    # Candidate -> a function giving its peak memory in MiB (a fresh process's peak RSS growth over one call,
    # the inputs and weights made before): the table's "<candidate> peak MiB" columns.
    peak_mib: dict[str, Callable[[], float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Result:
    op: str
    name: str
    medians_ms: dict[str, float]
    ratios: dict[str, float]  # candidate time / baseline time
    note: str = ""
    unit: str = "ms"
    peak_mib: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def families() -> list[str]:
    """The op families `paddle-ext bench --op` takes: one module here each (named without importing them)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def modules():
    for name in families():
        yield name, importlib.import_module(f"{__name__}.{name}")


def time_median(fn: Callable[[], object], repeats: int, min_seconds: float = 0.0) -> float:
    samples, start = [], time.perf_counter()
    while len(samples) < repeats or (time.perf_counter() - start < min_seconds and len(samples) < 100):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def warm_up(fn: Callable[[], object], calls: int = 3, seconds: float = 0.2) -> None:
    """A few calls right before a candidate is timed (one when a call takes longer than `seconds`): the
    candidate timed before it leaves the allocator and the caches in its own state, and the first calls
    after it pay for that (measured: put_along_axis [1024, 1024] took 3.6, 2.4, 1.7 ms on its first
    three calls after Paddle's, then 1.1-1.2 ms; Paddle's and torch's first calls show the same)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
        if time.perf_counter() - start > seconds:
            break


def run(selected=None, quick=False, repeats=7, log=None, matching=None) -> list[Result]:
    """`selected`: op families (all when empty); `matching`: substrings; when given, only the cases whose
    name contains one of them run. `log(result)` is called as each case is measured (default: prints its row)."""
    log = log or (lambda r: print(format_row(r)))
    unknown = sorted(set(selected or ()) - set(families()))
    if unknown:
        raise ValueError(f"benchmarks.run: unknown op family {', '.join(unknown)}; "
                         f"choose from {', '.join(families())}")
    results = []
    for name, module in modules():
        if selected and name not in selected:
            continue
        for case in module.cases(quick):
            if matching and not any(m in case.name for m in matching):
                continue
            # Warm every candidate before timing any: library loads, caches, and the allocators' pools
            # (otherwise whichever candidate runs first in a process pays fresh-page faults).
            for fn in case.candidates.values():
                fn()
            medians = {}
            if case.alternate:
                samples = {cand: [] for cand in case.candidates}
                for _ in range(case.repeats or repeats):
                    for cand, fn in case.candidates.items():
                        t0 = time.perf_counter()
                        fn()
                        samples[cand].append(time.perf_counter() - t0)
                medians = {cand: statistics.median(v) * 1e3 / case.calls for cand, v in samples.items()}
            for cand, fn in case.candidates.items():
                if case.alternate:
                    break
                warm_up(fn)
                medians[cand] = time_median(fn, case.repeats or repeats) / case.calls
            base = medians.get(case.baseline)  # (a row may lack it: then no ratios)
            ratios = {k: v / base for k, v in medians.items() if k != case.baseline} if base else {}
            peaks = {cand: measure() for cand, measure in case.peak_mib.items()}
            results.append(Result(case.op, case.name, medians, ratios, case.note, case.unit, peaks))
            log(results[-1])
    return results


def environment() -> str:
    """What every benchmark table states it ran in: the CPU, Paddle, its BLAS and thread settings (Paddle's
    matmuls, and the rows built on them, move with MKL_DEBUG_CPU_TYPE and OMP_NUM_THREADS)."""
    from paddle_ext import _environment  # noqa: PLC0415

    return _environment.summary()


_SCALE = {"ms": 1.0, "us": 1e3}
_UNIT_LABEL = {"ms": "ms", "us": "µs"}


def format_row(r: Result) -> str:
    parts = [f"{r.op:<22} {r.name:<44}"]
    for cand, ms in r.medians_ms.items():
        ratio = f" ({r.ratios[cand]:.2f}x)" if cand in r.ratios else ""
        parts.append(f"{cand} {ms * _SCALE[r.unit]:9.3f} {_UNIT_LABEL[r.unit]}{ratio}")
    parts.extend(f"{cand} peak {mib:.0f} MiB" for cand, mib in r.peak_mib.items())
    return "  ".join(parts) + (f"  [{r.note}]" if r.note else "")


def format_markdown(results: list[Result]) -> str:
    """One table per op family: a row per case, ratios as 'other / paddle_ext'."""
    tables = []
    for op in dict.fromkeys(r.op for r in results):
        rows = [r for r in results if r.op == op]
        cands = list(dict.fromkeys(c for r in rows for c in r.medians_ms))
        peaked = list(dict.fromkeys(c for r in rows for c in r.peak_mib))
        unit = rows[0].unit
        lines = [f"**{op}**", "", "| case | " + " | ".join([f"{c} {_UNIT_LABEL[unit]}" for c in cands]
                                                          + [f"{c} peak MiB" for c in peaked]) + " |",
                 "|" + "---|" * (len(cands) + len(peaked) + 1)]
        for r in rows:
            cells = ["–" if c not in r.medians_ms else
                     f"{r.medians_ms[c] * _SCALE[unit]:.{3 if unit == 'ms' else 1}f}"
                     + (f" ({r.ratios[c]:.2f}×)" if c in r.ratios else "") for c in cands]
            cells += [f"{r.peak_mib[c]:.0f}" if c in r.peak_mib else "–" for c in peaked]
            lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def torch_or_none():
    """PyTorch when it happens to be installed (never a dependency)."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except ImportError:
        return None
