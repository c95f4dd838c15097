"""Graph learning: GraphSAGE-style node classification whose neighbour aggregation is put_along_axis.

The graph is a generated stochastic block model (a few thousand nodes, one block per class, dense
inside blocks, sparse across); node features carry only a weak, noisy hint of the class, so a node
must pool its neighbourhood to be classified well. Each layer scatters the messages h[src] of every
edge to its destination row with ``put_along_axis(..., reduce='mean' / 'amax', include_self=False)``:
rows of a zero [nodes, features] table, indices [edges, 1] broadcast over the features. Nodes without
neighbours keep the table's zeros. The metric is the accuracy on the nodes not used for training.
"""

from __future__ import annotations


import numpy as np
import paddle

import paddle_ext
from paddle_ext import _fill

from . import DemoTask, TaskResult, train_steps
from ._parallel import Ranks
from .export import export_and_compare

CLASSES = 4
FEATURES = 16
HIDDEN = 32


def make_sbm(nodes: int, rng: np.random.Generator, p_in=0.012, p_out=0.0015, signal=0.4):
    """Labels, features and both directions of every edge of a stochastic block model."""
    labels = rng.integers(0, CLASSES, size=nodes)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(rng.random((nodes, nodes)) < np.where(same, p_in, p_out), k=1)
    a, b = np.nonzero(upper)
    src = np.concatenate([a, b]).astype(np.int64)
    dst = np.concatenate([b, a]).astype(np.int64)
    centers = rng.normal(size=(CLASSES, FEATURES))
    x = (signal * centers[labels] + rng.normal(size=(nodes, FEATURES))).astype(np.float32)
    return x, labels.astype(np.int64), src, dst


class SageLayer(paddle.nn.Layer):
    """h' = relu(W_self h + W_mean mean_{u->v} h_u + W_max max_{u->v} h_u)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.self_lin = paddle.nn.Linear(d_in, d_out)
        self.mean_lin = paddle.nn.Linear(d_in, d_out, bias_attr=False)
        self.max_lin = paddle.nn.Linear(d_in, d_out, bias_attr=False)

    def forward(self, h, src, dst):
        messages = paddle.gather(h, src)  # [edges, d]: the sender's features on every edge
        table = _fill.zeros_like(h)  # paddle.zeros_like(h), without its warning when the model is exported
        index = dst.unsqueeze(-1)  # [edges, 1], broadcast over the features by put_along_axis
        mean = paddle_ext.put_along_axis(table, index, messages, 0, reduce="mean", include_self=False)
        peak = paddle_ext.put_along_axis(table, index, messages, 0, reduce="amax", include_self=False)
        return paddle.nn.functional.relu(self.self_lin(h) + self.mean_lin(mean) + self.max_lin(peak))


class GraphSage(paddle.nn.Layer):
    """Two SAGE layers and a linear read-out: class logits per node (what gets exported)."""

    def __init__(self):
        super().__init__()
        self.layer1 = SageLayer(FEATURES, HIDDEN)
        self.layer2 = SageLayer(HIDDEN, HIDDEN)
        self.head = paddle.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, src, dst):
        h = self.layer1(x, src, dst)
        h = self.layer2(h, src, dst)
        return self.head(h)


def run(steps: int, seed: int, out_dir, log=print, ranks: Ranks = Ranks(), nodes: int = 3000) -> TaskResult:
    """Full-batch training; over several ranks each runs the model on the whole graph (a node's
    neighbourhood crosses any split) and takes the loss on its shard of the labelled nodes."""
    rng = np.random.default_rng(seed)
    paddle.seed(seed)
    x, labels, src, dst = make_sbm(nodes, rng)
    train = rng.random(nodes) < 0.3
    test = ~train
    model = GraphSage()
    opt = paddle.optimizer.Adam(learning_rate=1e-2, parameters=model.parameters())
    xt, st, dt = paddle.to_tensor(x), paddle.to_tensor(src), paddle.to_tensor(dst)
    trained = ranks.wrap(model)
    train_idx = paddle.to_tensor(ranks.shard(np.nonzero(train)[0]))
    train_labels = paddle.to_tensor(ranks.shard(labels[train]))

    def accuracy():
        with paddle.no_grad():
            predicted = model(xt, st, dt).argmax(-1).numpy()
        return float(np.mean(predicted[test] == labels[test]))

    before = accuracy()
    log(f"   SBM graph: {nodes} nodes, {len(src) // 2} edges, {CLASSES} blocks; "
        f"{train.sum()} labelled nodes; test accuracy {before:.4f}")
    losses, train_seconds = train_steps(
        steps, lambda: paddle.nn.functional.cross_entropy(paddle.gather(trained(xt, st, dt), train_idx), train_labels),
        opt, log, "cross-entropy", ranks)
    extra = {"nodes": nodes, "edges": int(len(src) // 2), **ranks.spread_extra(model)}
    after = accuracy()
    log(f"   test accuracy {before:.4f} -> {after:.4f}")
    diff = export_and_compare(model, {"x": x, "src": src, "dst": dst}, out_dir, log) if ranks.main else 0.0
    return TaskResult("graph", "test node accuracy", before, after, train_seconds, diff < 1e-4, diff, losses, extra)


TASK = DemoTask("graph", "GraphSAGE mean/max aggregation with put_along_axis on an SBM graph", 100, run)
