"""The command-line entry points: info lists the YAML ops, bench produces ratios, demo tasks train."""

import json

import numpy as np
import pytest

from paddle_ext import benchmarks, cli, demo


def test_info_lists_every_forward_op(capsys):
    assert cli.main(["info"]) == 0
    text = capsys.readouterr().out
    assert "logcumsumexp" in text and "registered" in text and "MISSING" not in text
    assert "CUDA kernels" in text


def test_bench_quick_reports_medians_and_ratios(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--op", "logcumsumexp", "--quick", "--repeats", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert rows and all(r["medians_ms"]["paddle_ext"] > 0 for r in rows)
    assert all(r["ratios"] for r in rows) and any("paddle" in r["ratios"] for r in rows)
    assert "| case | paddle_ext ms |" in capsys.readouterr().out


def test_every_benchmark_module_defines_cases():
    for name, module in benchmarks.modules():
        assert callable(module.cases), name


def test_demo_task_registry():
    tasks = demo.tasks()
    assert "survival" in tasks
    with pytest.raises(SystemExit, match="unknown task"):
        demo.main(task=["no-such-task"])


def test_survival_demo_learns_and_exports(tmp_path):
    result = demo.tasks()["survival"].run(steps=60, seed=1, out_dir=tmp_path, log=lambda *a: None)
    assert np.mean(result.losses[-5:]) < result.losses[0]
    assert result.after > result.before and result.after > 0.7
    assert result.export_match and result.max_abs_diff < 1e-4
    assert (tmp_path / "model.json").exists() or (tmp_path / "model.pdmodel").exists()
