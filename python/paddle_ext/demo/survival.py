"""Survival analysis: a Cox proportional-hazards MLP whose partial likelihood is a reversed logcumsumexp.

With samples sorted by time, the risk set of sample i is every sample still at risk at t_i, a suffix,
so log sum_{j at risk} exp(r_j) = logcumsumexp(r, reverse=True)[i]. The cohort is synthetic with a
known non-linear hazard; the metric is Harrell's concordance index on held-out patients.
"""

from __future__ import annotations


import numpy as np
import paddle

import paddle_ext

from . import DemoTask, TaskResult, train_steps
from ._parallel import Ranks
from .export import export_and_compare

FEATURES = 8


def make_cohort(n: int, rng: np.random.Generator):
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    log_hazard = 1.2 * x[:, 0] - 0.9 * x[:, 1] + 0.7 * x[:, 2] * x[:, 3] + np.sin(2 * x[:, 4])
    event_time = rng.exponential(1.0 / np.exp(log_hazard))
    censor_time = rng.exponential(2.0, size=n)
    time_obs = np.minimum(event_time, censor_time)
    event = (event_time <= censor_time).astype(np.float32)
    order = np.argsort(time_obs, kind="stable")  # ascending time: risk sets are suffixes
    return x[order], time_obs[order], event[order]


def concordance_index(risk: np.ndarray, time_obs: np.ndarray, event: np.ndarray) -> float:
    """Harrell's C: over comparable pairs (t_i < t_j, i had the event), how often risk_i > risk_j."""
    earlier = (time_obs[:, None] < time_obs[None, :]) & (event[:, None] > 0)
    higher = risk[:, None] > risk[None, :]
    ties = risk[:, None] == risk[None, :]
    return float((np.sum(earlier & higher) + 0.5 * np.sum(earlier & ties)) / max(np.sum(earlier), 1))


class RiskNet(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.mlp = paddle.nn.Sequential(paddle.nn.Linear(FEATURES, 32), paddle.nn.Tanh(), paddle.nn.Linear(32, 32),
                                        paddle.nn.Tanh(), paddle.nn.Linear(32, 1))

    def forward(self, x):
        return self.mlp(x).squeeze(-1)


class PartialLogLikelihood(paddle.nn.Layer):
    """Per-sample Cox terms r_i - log sum_{j >= i} exp(r_j) for a time-sorted batch (what gets exported)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        risk = self.net(x)
        return risk - paddle_ext.logcumsumexp(risk, axis=0, reverse=True)


def run(steps: int, seed: int, out_dir, log=print, ranks: Ranks = Ranks()) -> TaskResult:
    """Full-batch training; over several ranks each takes every world-th patient of the time-sorted cohort,
    so its shard stays time-sorted and its partial likelihood uses the risk sets within the shard (a Cox
    model stratified by rank), averaged over the ranks by DataParallel."""
    rng = np.random.default_rng(seed)
    paddle.seed(seed)
    x_train, t_train, e_train = make_cohort(3000, rng)
    x_test, t_test, e_test = make_cohort(1000, rng)
    net = RiskNet()
    model = PartialLogLikelihood(net)
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=net.parameters())
    trained = ranks.wrap(model)
    xt, et = paddle.to_tensor(x_train[ranks.rank::ranks.world]), paddle.to_tensor(e_train[ranks.rank::ranks.world])

    def c_index():
        with paddle.no_grad():
            return concordance_index(net(paddle.to_tensor(x_test)).numpy(), t_test, e_test)

    before = c_index()
    log(f"   cohort: {len(x_train)} train / {len(x_test)} test, {e_train.mean():.0%} events; C-index {before:.4f}")
    losses, train_seconds = train_steps(steps, lambda: -(trained(xt) * et).sum() / et.sum(), opt, log,
                                        "neg. partial log-likelihood", ranks)
    extra = ranks.spread_extra(model)
    after = c_index()
    log(f"   held-out C-index {before:.4f} -> {after:.4f}")
    diff = export_and_compare(model, {"x": x_test}, out_dir, log) if ranks.main else 0.0
    return TaskResult("survival", "held-out C-index", before, after, train_seconds, diff < 1e-4, diff, losses, extra)


TASK = DemoTask("survival", "Cox proportional-hazards MLP with logcumsumexp(reverse=True)", 300, run)
