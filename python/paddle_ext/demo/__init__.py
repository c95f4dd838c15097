"""`paddle-ext demo`: small real models trained with paddle_ext's ops, exported and served.

Each module here defines ``TASK = DemoTask(...)``; its ``run(steps, seed, out_dir, log)`` trains in
dygraph, exports with to_static → jit.save, reloads with jit.load and a paddle.inference predictor,
and returns a ``TaskResult``. Every number is computed by the run.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pathlib
import pkgutil
import time
from typing import Callable

import paddle

from . import _parallel


@dataclasses.dataclass
class TaskResult:
    task: str
    metric: str
    before: float
    after: float
    train_seconds: float
    export_match: bool | None  # None: this model is not exported
    max_abs_diff: float | None
    losses: list[float]
    extra: dict = dataclasses.field(default_factory=dict)
    variant: str = ""  # a task that trains several models returns one result per model

    @property
    def label(self) -> str:
        return f"{self.task} ({self.variant})" if self.variant else self.task


@dataclasses.dataclass
class DemoTask:
    name: str
    title: str
    default_steps: int
    run: Callable[..., TaskResult | list[TaskResult]]


def train_steps(steps: int, compute_loss: Callable[[], object], optimizer, log, what: str,
                ranks: _parallel.Ranks = _parallel.Ranks()) -> tuple[list[float], float]:
    """Full-batch training: `steps` optimizer steps on compute_loss(), a status line every fifth of the
    run (the loss averaged over the ranks). Returns the losses and the training time in seconds."""
    losses, start = [], time.perf_counter()
    for step in range(steps):
        loss = compute_loss()
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(ranks.mean(float(loss)))
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            log(f"   step {step:4d}  {what} {losses[-1]:.4f}")
    return losses, time.perf_counter() - start


def tasks() -> dict[str, DemoTask]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "export":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        task = getattr(module, "TASK", None)
        if task is not None:
            found[task.name] = task
    return found


def _plot(results: list[TaskResult], path: pathlib.Path) -> bool:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    by_task = {}
    for r in results:
        by_task.setdefault(r.task, []).append(r)
    fig, axes = plt.subplots(1, len(by_task), figsize=(4 * len(by_task), 3), squeeze=False)
    for ax, (task, runs) in zip(axes[0], by_task.items()):
        for r in runs:
            ax.plot(r.losses, label=r.variant or None)
        if len(runs) > 1:
            ax.legend()
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
    fig.tight_layout()
    fig.savefig(path)
    return True


def main(task=None, steps=None, seed=0, out_dir="demo-out", nproc=1) -> int:
    """Runs the chosen tasks (all by default) and prints their table; ``nproc > 1`` trains each one
    data-parallel on that many local processes (``paddle.distributed.spawn``). Started by
    ``paddle.distributed.launch``, every process runs as one of the launched ranks."""
    available = tasks()
    chosen = task or list(available)
    unknown = [t for t in chosen if t not in available]
    if unknown:
        raise SystemExit(f"paddle-ext demo: unknown task {unknown}; available: {list(available)}")
    if not isinstance(nproc, int) or nproc < 1:
        raise SystemExit(f"paddle-ext demo: --nproc must be a positive int, got {nproc!r}")
    if nproc > 1:
        if _parallel.launched_world_size() > 1:
            raise SystemExit("paddle-ext demo: --nproc cannot be used under paddle.distributed.launch "
                             "(its --nproc_per_node sets the processes)")
        return _parallel.run_ranks(_run, nproc, args=(chosen, steps, seed, out_dir))[0]
    return _run(_parallel.Ranks.init(), chosen, steps, seed, out_dir)


def _run(ranks: _parallel.Ranks, chosen, steps, seed, out_dir) -> int:
    """Every rank trains each task on its shards; rank 0 logs, exports and writes the results."""
    log = print if ranks.main else (lambda *a, **k: None)
    available = tasks()
    out = pathlib.Path(out_dir)
    if ranks.main:
        out.mkdir(parents=True, exist_ok=True)
    if ranks.world > 1:
        log(f"data-parallel on {ranks.world} ranks ({paddle.distributed.get_backend().lower()}): each trains on its "
            f"shard of every batch, grads all-reduced by paddle.DataParallel\n")
    results = []
    for name in chosen:
        t = available[name]
        log(f"== {t.name}: {t.title}")
        start = time.perf_counter()
        result = t.run(steps=steps or t.default_steps, seed=seed, out_dir=out / t.name, log=log, ranks=ranks)
        results.extend(result if isinstance(result, list) else [result])
        ranks.barrier()  # the other ranks wait while rank 0 exports
        log(f"   done in {time.perf_counter() - start:.1f} s\n")
    if not ranks.main:
        return 0
    width = max(14, *(len(r.label) for r in results))
    header = (f"{'task':<{width}} {'metric':<26} {'before':>9} {'after':>9} {'train s':>8} {'export':>7} "
              f"{'max |diff|':>11}")
    print(header)
    print("-" * len(header))
    for r in results:
        export = "-" if r.export_match is None else "match" if r.export_match else "DIFFER"
        diff = "-" if r.export_match is None else f"{r.max_abs_diff:.2e}"
        print(f"{r.label:<{width}} {r.metric:<26} {r.before:9.4f} {r.after:9.4f} {r.train_seconds:8.1f} "
              f"{export:>7} {diff:>11}")
    ranks_agree = True
    if ranks.world > 1:
        spread = {r.label: r.extra["rank_param_max_abs_diff"] for r in results}
        ranks_agree = all(v == 0.0 for v in spread.values())
        if ranks_agree:
            print(f"\nparameters after training: identical on all {ranks.world} ranks for every task "
                  "(max |rank r - rank 0| = 0)")
        else:
            print(f"\nparameters after training DIFFER across the {ranks.world} ranks: max |rank r - rank 0| = "
                  + ", ".join(f"{k} {v:.2e}" for k, v in spread.items()))
    (out / "results.json").write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    plotted = _plot(results, out / "loss_curves.png")
    print(f"\nwrote {out / 'results.json'}" + (f" and {out / 'loss_curves.png'}" if plotted else ""))
    if not plotted:
        print("no loss_curves.png: matplotlib is not installed (`pip install matplotlib` into this environment, "
              "then run the demo again for the plot)")
    return 0 if ranks_agree and all(r.export_match is not False for r in results) else 1
