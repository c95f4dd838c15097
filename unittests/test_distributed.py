"""Data parallelism: paddle.DataParallel over 2 CPU processes (gloo, loopback, ports
picked free at run time) trains every op family exactly as one process does on the concatenated batch,
the adaptive softmax under DataParallel's default settings included, and `paddle-ext demo` runs its
tasks data-parallel.

One spawn of 2 ranks runs everything (each rank starts a Python with Paddle: seconds), bounded by a
timeout that kills the ranks, so a stuck collective fails the test instead of hanging the suite.
"""

import json

import numpy as np
import paddle
import pytest

import paddle_ext
from paddle_ext import demo
from paddle_ext.demo._parallel import Ranks, run_ranks

STEPS = 3
TIMEOUT_S = 240  # the whole file takes ~12 s on a 2-core machine at load 5; generous for a loaded CI runner


class LogcumsumexpNet(paddle.nn.Layer):
    """Per-sequence Cox-style terms r - logcumsumexp(r, reverse=True) of linear scores."""

    def __init__(self):
        super().__init__()
        self.score = paddle.nn.Linear(4, 1)

    def forward(self, x):  # [B, L, 4]
        r = self.score(x).squeeze(-1)
        return (paddle_ext.logcumsumexp(r, axis=1, reverse=True) - r).mean()


class PutAlongAxisNet(paddle.nn.Layer):
    """Messages scattered to their destination rows with reduce 'mean' and 'amax' (no self), read out."""

    def __init__(self):
        super().__init__()
        self.message = paddle.nn.Linear(3, 3)
        self.readout = paddle.nn.Linear(3, 1)

    def forward(self, x, index):  # x [B, E, 3], index [B, E, 3] into 5 rows
        m = paddle.tanh(self.message(x))
        table = paddle.zeros([x.shape[0], 5, 3], dtype=x.dtype)
        mean = paddle_ext.put_along_axis(table, index, m, 1, reduce="mean", include_self=False)
        peak = paddle_ext.put_along_axis(table, index, m, 1, reduce="amax", include_self=False)
        return self.readout(mean + peak).square().mean()


class TransducerNet(paddle.nn.Layer):
    """rnnt_loss_simple (mutual_information_recursion) plus rnnt_loss_pruned on its prune ranges."""

    def __init__(self):
        super().__init__()
        self.am = paddle.nn.Linear(4, 5)
        self.lm = paddle.nn.Embedding(5, 5)

    def forward(self, x, symbols, boundary):  # [B, T, 4], [B, S], [B, 4]
        am = self.am(x)
        lm = self.lm(paddle.concat([paddle.zeros([symbols.shape[0], 1], "int64"), symbols], axis=1))
        simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(lm, am, symbols, 0, boundary, reduction="mean",
                                                                 return_grad=True)
        ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, 2)
        am_p, lm_p = paddle_ext.do_rnnt_pruning(am, lm, ranges)
        return simple + paddle_ext.rnnt_loss_pruned(am_p + lm_p, symbols, ranges, 0, boundary, reduction="mean")


class FusedJoinerNet(paddle.nn.Layer):
    """TransducerJoiner's fused losses: the full RNN-T loss with the grad clamp, the pruned one on the simple
    loss's ranges, and TDT with the grad clamp (each clamp applies the item's share of the mean after clamping)."""

    def __init__(self):
        super().__init__()
        self.simple_am = paddle.nn.Linear(4, 5)
        self.simple_lm = paddle.nn.Embedding(5, 5)
        self.decoder = paddle.nn.Embedding(5, 3)
        self.joiner = paddle_ext.nn.TransducerJoiner(4, 3, 6, 5)
        self.tdt_joiner = paddle_ext.nn.TransducerJoiner(4, 3, 6, 5 + 3)

    def forward(self, x, symbols, boundary):  # [B, T, 4], [B, S], [B, 4]
        context = paddle.concat([paddle.zeros([symbols.shape[0], 1], "int64"), symbols], axis=1)
        simple, (px_grad, py_grad) = paddle_ext.rnnt_loss_simple(self.simple_lm(context), self.simple_am(x), symbols,
                                                                 0, boundary, reduction="mean", return_grad=True)
        ranges = paddle_ext.get_rnnt_prune_ranges(px_grad, py_grad, boundary, 2)
        dec = self.decoder(context)
        full = self.joiner.rnnt_loss(x, dec, symbols, 0, boundary, reduction="mean", fastemit_lambda=0.2, clamp=0.05)
        pruned = self.joiner.rnnt_loss(x, dec, symbols, 0, boundary, reduction="mean", ranges=ranges)
        tdt = self.tdt_joiner.tdt_loss(x, dec, symbols, [0, 1, 2], 0, boundary, reduction="mean", clamp=0.05)
        return simple + full + pruned + tdt


class AdaptiveSoftmaxNet(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.encoder = paddle.nn.Linear(6, 16)
        self.head = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10], div_value=2.0)

    def forward(self, x, label):
        return self.head(paddle.tanh(self.encoder(x)), label)[1]


class AdaptiveInputNet(paddle.nn.Layer):
    """Adaptive input tied to the adaptive softmax (each shared Parameter gets grads from both layers), or
    untied (its tables' grads come from row gathers of transposed tables alone)."""

    def __init__(self, tied=True):
        super().__init__()
        self.head = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10], div_value=2.0)
        self.embed = paddle_ext.nn.AdaptiveEmbedding(20, 16, [4, 10], div_value=2.0, tied_to=self.head if tied else None)
        self.mix = paddle.nn.Linear(16, 16)

    def forward(self, ids, label):
        return self.head(paddle.tanh(self.mix(self.embed(ids))), label)[1]


# The adaptive softmax's labels per step (rank 0 gets the first half): a tail cluster without a label on
# one rank (steps 0 and 1, the two ranks in turn) and on both (step 2). Its parameters have no grad on
# that rank; under DataParallel's default settings that deadlocked or left them out of the all-reduce.
ALS_LABELS = [[0, 5, 1, 2], [1, 3, 12, 15], [0, 1, 2, 3]]
# The adaptive input's ids, likewise: a tail cluster without ids on rank 1, on rank 0, then on both.
ADAPTIVE_IDS = [[12, 4, 0, 1], [2, 1, 5, 17], [3, 0, 2, 1]]


def _batches(family, rng, step):
    """The whole batch of a step (every rank draws the same, then takes its shard)."""
    if family == "logcumsumexp":
        return [rng.normal(size=(4, 6, 4))]
    if family == "put_along_axis":
        index = np.repeat(rng.integers(0, 5, size=(4, 7, 1)), 3, axis=2)
        return [rng.normal(size=(4, 7, 3)), index]
    if family in ("rnnt", "fused_joiner"):
        t_len, s_len = rng.integers(3, 7, size=4), rng.integers(1, 4, size=4)
        boundary = np.stack([np.zeros(4, int), np.zeros(4, int), s_len, t_len], axis=1)
        return [rng.normal(size=(4, 6, 4)), rng.integers(1, 5, size=(4, 3)), boundary]
    if family.startswith("adaptive_input"):
        return [np.array(ADAPTIVE_IDS[step]), np.array(ALS_LABELS[step])]
    return [rng.normal(size=(4, 6)), np.array(ALS_LABELS[step])]


FAMILIES = {"logcumsumexp": LogcumsumexpNet, "put_along_axis": PutAlongAxisNet, "rnnt": TransducerNet,
            "adaptive_softmax": AdaptiveSoftmaxNet, "adaptive_input": AdaptiveInputNet,
            "adaptive_input_untied": lambda: AdaptiveInputNet(tied=False),
            "fused_joiner": FusedJoinerNet}


def train_families(ranks: Ranks, steps: int = STEPS):
    """Trains each family's model (float64, SGD) on this rank's shards, DataParallel with its default
    settings over several ranks; returns {family: {name: array}}: each parameter after training, and its
    grad at each step as "<parameter> grad <step>" (zeros where it got none: DataParallel's all-reduced grad
    on several ranks)."""
    default_dtype = paddle.get_default_dtype()
    paddle.set_default_dtype("float64")
    try:
        params = {}
        for i, (family, make) in enumerate(FAMILIES.items()):
            paddle.seed(i)
            model = make()
            trained = ranks.wrap(model)
            opt = paddle.optimizer.SGD(learning_rate=0.2, parameters=model.parameters())
            rng, grads = np.random.default_rng(i), {}
            for step in range(steps):
                loss = trained(*(paddle.to_tensor(ranks.shard(a)) for a in _batches(family, rng, step)))
                loss.backward()
                for name, p in model.named_parameters():
                    grads[f"{name} grad {step}"] = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
                opt.step()
                opt.clear_grad()
            params[family] = {**{name: p.numpy() for name, p in model.named_parameters()}, **grads}
        return params
    finally:
        paddle.set_default_dtype(default_dtype)


def _rank_work(ranks: Ranks, out_dir):
    """What each of the 2 ranks runs: the families, the parameters DataParallel holds for the tied adaptive
    input, then the demo's survival task data-parallel."""
    params = train_families(ranks)
    held = [p.name for p in ranks.wrap(AdaptiveInputNet()).parameters()]
    code = demo._run(ranks, ["survival"], 3, 0, out_dir)
    return params, code, held


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("demo-nproc2")
    results = run_ranks(_rank_work, 2, args=(str(out_dir),), timeout=TIMEOUT_S)
    return results, out_dir


@pytest.mark.parametrize("family", list(FAMILIES))
def test_ranks_agree_and_match_one_process_on_the_whole_batch(two_ranks, family):
    (rank0, *_), (rank1, *_) = two_ranks[0]
    one_process = train_families(Ranks())[family]
    initial = train_families(Ranks(), steps=0)[family]
    for name, expected in one_process.items():
        np.testing.assert_array_equal(rank1[family][name], rank0[family][name], err_msg=f"{family} {name}")
        np.testing.assert_allclose(rank0[family][name], expected, rtol=1e-10, atol=1e-12, err_msg=f"{family} {name}")
    assert any(not np.array_equal(one_process[n], initial[n]) for n in initial)  # the test trains something


def test_data_parallel_holds_each_tied_parameter_once(two_ranks):
    model = AdaptiveInputNet()
    shared = {id(p) for p in model.head.parameters()}
    assert all(id(p) in shared for p in model.embed.parameters())
    for _, _, held in two_ranks[0]:
        # the softmax's 5 weights (also the embedding's) and the Linear's 2, each once
        assert len(held) == len(set(held)) == len(model.parameters()) == 7


def test_adaptive_softmax_tail_without_labels_gets_zero_grads_only_under_data_parallel():
    """One process: a cluster without labels is skipped (no grad, as before); the zero grads exist only
    for DataParallel (checked with 2 ranks above)."""
    paddle.seed(0)
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10], div_value=2.0)
    layer(paddle.randn([3, 16]), paddle.to_tensor([0, 1, 5]))[1].backward()
    assert layer.tail_weights[0][0].grad is not None and layer.tail_weights[1][0].grad is None


def test_demo_runs_data_parallel(two_ranks):
    results, out_dir = two_ranks
    assert [code for _, code, _ in results] == [0, 0]
    rows = json.loads((out_dir / "results.json").read_text())
    assert [r["task"] for r in rows] == ["survival"]
    assert rows[0]["extra"]["rank_param_max_abs_diff"] == 0.0 and rows[0]["export_match"]


def test_shards_concatenate_to_the_batch():
    batch = np.arange(7)
    shards = [Ranks(r, 3).shard(batch) for r in range(3)]
    assert [len(s) for s in shards] == [3, 2, 2]
    np.testing.assert_array_equal(np.concatenate(shards), batch)
    assert Ranks().shard(batch) is batch


def test_demo_rejects_a_bad_nproc():
    with pytest.raises(SystemExit, match="--nproc must be a positive int, got 0"):
        demo.main(task=["survival"], nproc=0)
