"""The graph demo: a few training steps lower the loss, and the export matches."""

import numpy as np

from paddle_ext import demo
from paddle_ext.demo import graph


def test_graph_task_is_registered():
    assert "graph" in demo.tasks()


def test_sbm_graph_is_symmetric_and_assortative():
    rng = np.random.default_rng(0)
    x, labels, src, dst = graph.make_sbm(600, rng)
    assert x.shape == (600, graph.FEATURES) and src.shape == dst.shape
    assert set(zip(src.tolist(), dst.tolist())) == set(zip(dst.tolist(), src.tolist()))
    assert np.mean(labels[src] == labels[dst]) > 0.6  # mostly within blocks


def test_graph_demo_learns_and_exports(tmp_path):
    result = graph.run(steps=15, seed=1, out_dir=tmp_path, log=lambda *a: None, nodes=800)
    assert np.mean(result.losses[-3:]) < result.losses[0]
    assert result.after > result.before
    assert result.export_match and result.max_abs_diff < 1e-4
    assert (tmp_path / "model.json").exists() or (tmp_path / "model.pdmodel").exists()
