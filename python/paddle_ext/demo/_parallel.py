"""Data parallelism for the demo (and its test): N processes started by ``paddle.distributed.spawn``
(``paddle-ext demo --nproc N``) or by ``python -m paddle.distributed.launch``, each training on its
shard of every batch, the gradients all-reduced by ``paddle.DataParallel`` (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings

import paddle


def launched_world_size() -> int:
    """The number of ranks when this process was started by paddle.distributed (launch or spawn), else 1."""
    return int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place among the data-parallel ranks; ``Ranks()`` is a single process."""

    rank: int = 0
    world: int = 1

    @classmethod
    def init(cls) -> "Ranks":
        """Joins the process group when started by paddle.distributed, else a single process."""
        if launched_world_size() < 2:
            return cls()
        import paddle.distributed as dist  # noqa: PLC0415

        if not dist.is_initialized():
            dist.init_parallel_env()
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, batch):
        """This rank's rows of ``batch`` (a NumPy array or a Tensor): contiguous, near-equal parts (the
        first ``len % world`` ranks get one row more), so the shards of all ranks concatenate to the batch."""
        if self.world == 1:
            return batch
        n = batch.shape[0]
        start = self.rank * (n // self.world) + min(self.rank, n % self.world)
        stop = start + n // self.world + (self.rank < n % self.world)
        return batch[start:stop]

    def wrap(self, layer: paddle.nn.Layer, **options) -> paddle.nn.Layer:
        """``paddle.DataParallel(layer, **options)`` over several ranks; the layer itself in one process."""
        return paddle.DataParallel(layer, **options) if self.world > 1 else layer

    def mean(self, value: float) -> float:
        """The mean of a float over the ranks (for logging a loss of the whole batch)."""
        if self.world == 1:
            return float(value)
        t = paddle.to_tensor([float(value)], dtype="float64")
        paddle.distributed.all_reduce(t)
        return t.item() / self.world

    def param_spread(self, layer: paddle.nn.Layer) -> float:
        """max |p(rank r) - p(rank 0)| over every parameter and rank (0.0 in one process): 0.0 when the
        data-parallel ranks hold identical parameters. Every rank must call it (an all_gather)."""
        if self.world == 1:
            return 0.0
        flat = paddle.concat([p.detach().astype("float64").reshape([-1]) for p in layer.parameters()])
        gathered = []
        paddle.distributed.all_gather(gathered, flat)
        return max(float((g - gathered[0]).abs().max()) for g in gathered) if flat.shape[0] else 0.0

    def spread_extra(self, layer: paddle.nn.Layer) -> dict:
        """For TaskResult.extra: {"rank_param_max_abs_diff": param_spread(layer)} over several ranks."""
        return {"rank_param_max_abs_diff": self.param_spread(layer)} if self.world > 1 else {}

    def barrier(self):
        if self.world > 1:
            paddle.distributed.barrier()


def _rank_entry(fn, args, warning_filters):
    warnings.filters[:] = warning_filters  # the parent's, e.g. the CLI's silenced to_static warning
    return fn(Ranks.init(), *args)


def run_ranks(fn, nproc: int, args=(), timeout: float | None = None) -> list:
    """Runs ``fn(ranks, *args)`` in ``nproc`` processes started by ``paddle.distributed.spawn`` (free
    loopback ports picked at run time) and returns each rank's return value. A rank that fails stops the
    others and raises with its traceback; past ``timeout`` seconds every rank is killed and TimeoutError
    raised (so a stuck collective cannot hang the caller). ``fn`` must be a module-level function."""
    import paddle.distributed as dist  # noqa: PLC0415
    from paddle.distributed.fleet.launch_utils import logger  # noqa: PLC0415

    if launched_world_size() > 1:
        raise RuntimeError("run_ranks: this process is already one rank of a paddle.distributed job")
    logger.setLevel("WARNING")  # spawn logs the free ports it picked
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CPUONLY mode.*")  # gloo on a CPU-only Paddle: expected
        filters = list(warnings.filters)
        context = dist.spawn(_rank_entry, args=(fn, tuple(args), filters), nprocs=nproc, join=False)
    results = [None] * nproc
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            for i, q in enumerate(context.return_queues):  # drain, so that no rank blocks on a full pipe
                if not q.empty():
                    results[i] = q.get()
            if context.join(timeout=1.0):  # raises with the traceback of a failed rank
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run_ranks: {nproc} ranks still running after {timeout} s; killed")
    finally:
        for p in context.processes:
            if p.is_alive():
                p.terminate()
        for p in context.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    for i, q in enumerate(context.return_queues):
        if not q.empty():
            results[i] = q.get()
    return results

