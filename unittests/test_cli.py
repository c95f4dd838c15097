"""The command-line entry points: info lists the YAML ops, bench produces ratios, demo tasks train."""

import json
import sys
import types

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
    printed = capsys.readouterr()
    assert "| case | paddle_ext ms |" in printed.out
    for r in rows:  # each result printed once, in its table; stderr names the case, with no numbers
        assert printed.out.count(f"| {r['name']} |") == 1 and f"measured logcumsumexp: {r['name']}\n" in printed.err
    assert not any(line.startswith("logcumsumexp ") for line in printed.out.splitlines())  # no row lines besides


def test_bench_overhead_reports_microseconds_per_call_against_the_raw_ops(tmp_path, capsys):
    """`--op overhead`: a fwd and a fwd+bwd row per op family on tiny tensors, each public function next to the
    registered ops it runs (the baseline of the ratios) and Paddle's built-in where there is one."""
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--op", "overhead", "--quick", "--repeats", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    names = " ".join(r["name"] for r in rows)
    for family in ("logcumsumexp", "put_along_axis", "put_along_axis_", "mutual_information_recursion",
                   "joint_mutual_information_recursion", "rnnt_loss_simple", "rnnt_loss_pruned",
                   "get_rnnt_logprobs_joint", "adaptive_log_softmax_target", "nn.AdaptiveLogSoftmaxWithLoss"):
        assert f"{family} " in names, family
    assert all(r["unit"] == "us" and r["medians_ms"]["paddle_ext"] > 0 for r in rows)
    assert all(("raw op" in r["medians_ms"]) == ("paddle_ext" in r["ratios"]) for r in rows)
    assert {r["name"].split()[0] for r in rows if "paddle" in r["medians_ms"]} >= {"logcumsumexp", "put_along_axis"}
    assert "| case | paddle_ext µs | raw op µs | paddle µs |" in capsys.readouterr().out


def test_bench_case_filter_runs_only_matching_rows(tmp_path):
    """`--case broadcast`: only the put_along_axis rows with indices [2N, 1] (values [2N, C] or [2N, 1]), each
    with its materialised twin."""
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--op", "put_along_axis", "--quick", "--repeats", "1", "--case", "broadcast",
                     "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert [r["name"].split()[0] for r in rows] == ["fwd", "fwd+bwd"] * 3
    assert sum("values [" in r["name"] for r in rows) == 4
    assert all("broadcast" in r["name"] and "materialised" in r["ratios"] and "paddle" in r["ratios"] for r in rows)


@pytest.mark.parametrize("case", ["joiner + rnnt_loss", "joiner + multiblank_rnnt_loss"])
def test_bench_joiner_rows_time_and_measure_memory_in_fresh_processes(tmp_path, case):
    """`--op rnnt_loss --case joiner`: fused vs unfused (vs the GEMM floor), each candidate's peak memory from a
    fresh process and its difference from the fused op in the note."""
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--op", "rnnt_loss", "--quick", "--repeats", "1", "--case", case,
                     "--json", str(path)]) == 0
    (row,) = json.loads(path.read_text())
    assert {"unfused", "gemm floor"} <= set(row["ratios"])
    peaks = dict(part.rsplit(" ", 1) for part in row["note"].split("fresh process each): ")[1].split(";")[0]
                 .split(", "))
    assert set(peaks) >= {"paddle_ext", "unfused"} and all(float(v) >= 0 for v in peaks.values()), row["note"]
    assert "max rel diff loss/grads vs paddle_ext: unfused" in row["note"]


def test_every_benchmark_module_defines_cases():
    for name, module in benchmarks.modules():
        assert callable(module.cases), name
    assert [name for name, _ in benchmarks.modules()] == benchmarks.families()


@pytest.mark.parametrize("command,option,valid", [("bench", "--op", benchmarks.families()),
                                                   ("demo", "--task", list(demo.tasks()))])
def test_unknown_families_and_tasks_are_rejected_with_the_list(command, option, valid, capsys):
    assert len(valid) >= 4
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, option, valid[0], option, "nope"])
    assert exit_.value.code == 2  # argparse's usage error, before anything runs
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and all(repr(v) in err for v in valid)
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    assert ", ".join(valid) in " ".join(capsys.readouterr().out.split())  # (argparse wraps the lines)


def test_bench_run_rejects_unknown_families():
    with pytest.raises(ValueError, match="unknown op family nope; choose from adaptive_log_softmax, "):
        benchmarks.run(selected=["logcumsumexp", "nope"])


def test_alternating_cases_time_their_candidates_in_turns(monkeypatch):
    """Case.alternate: after one warm call each, every round times each candidate once, in order."""
    calls = []
    case = benchmarks.Case("fake", "fake row", {"paddle_ext": lambda: calls.append("a"),
                                                "other": lambda: calls.append("b")}, repeats=3, alternate=True)
    module = types.SimpleNamespace(cases=lambda quick: [case])
    monkeypatch.setattr(benchmarks, "modules", lambda: [("fake", module)])
    monkeypatch.setattr(benchmarks, "families", lambda: ["fake"])
    (result,) = benchmarks.run(log=lambda _: None)
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert set(result.medians_ms) == {"paddle_ext", "other"} and "other" in result.ratios


def test_demo_task_registry():
    tasks = demo.tasks()
    assert "survival" in tasks
    with pytest.raises(SystemExit, match="unknown task"):
        demo.main(task=["no-such-task"])


@pytest.mark.parametrize("matplotlib", [False, True])
def test_demo_plots_the_losses_or_says_how_to_get_the_plot(matplotlib, tmp_path, monkeypatch, capsys):
    if matplotlib:
        pytest.importorskip("matplotlib")
    else:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert demo.main(task=["survival"], steps=3, out_dir=tmp_path) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "results.json").exists()
    assert (tmp_path / "loss_curves.png").exists() == matplotlib
    assert ("and " + str(tmp_path / "loss_curves.png") in out) == matplotlib
    assert ("no loss_curves.png: matplotlib is not installed (`pip install matplotlib`" in out) != matplotlib


def test_survival_demo_learns_and_exports(tmp_path):
    result = demo.tasks()["survival"].run(steps=60, seed=1, out_dir=tmp_path, log=lambda *a: None)
    assert np.mean(result.losses[-5:]) < result.losses[0]
    assert result.after > result.before and result.after > 0.7
    assert result.export_match and result.max_abs_diff < 1e-4
    assert (tmp_path / "model.json").exists() or (tmp_path / "model.pdmodel").exists()


def test_rnnt_loss_bench_quick_rows_agree(tmp_path):
    """`paddle-ext bench --op rnnt_loss --quick`: the five loss rows and the two FastEmit rows (against
    fastemit_lambda=0), Paddle's F.rnnt_loss on the full ones, the TDT and multi-blank rows next to our full
    rnnt_loss, the peak-RSS note, and every other candidate's per-item losses within 1e-5 of paddle_ext's (the
    same numbers go in; FastEmit leaves the loss alone). fast_rnnt is a column only where `import fast_rnnt`
    works, and not on the jump rows (it has neither loss)."""
    from paddle_ext.benchmarks import rnnt_loss

    path = tmp_path / "bench.json"
    assert cli.main(["bench", "--op", "rnnt_loss", "--quick", "--repeats", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    # The joiner rows (fused vs unfused) have a test of their own below.
    rows = [r for r in rows if not r["name"].startswith("joiner + ")]
    names = [r["name"].split(" fwd+bwd")[0] + (" fastemit" if "fastemit_lambda=0.5" in r["name"] else "")
             for r in rows]
    assert names == ["rnnt_loss_simple", "rnnt_loss_simple fastemit", "rnnt_loss_smoothed", "rnnt_loss_pruned",
                     "pruned recipe", "rnnt_loss", "rnnt_loss fastemit", "tdt_loss", "multiblank_rnnt_loss"]
    fastemit = [r for r in rows if "fastemit" in r["name"]]
    jumps = rows[-2:]
    assert all("paddle_ext rnnt_loss" in r["ratios"] for r in jumps)
    peer = rnnt_loss.fast_rnnt() is not None
    for r in rows:
        assert r["medians_ms"]["paddle_ext"] > 0 and "peak RSS growth MiB: paddle_ext" in r["note"]
        assert ("fast_rnnt" in r["ratios"]) == (peer and r not in fastemit and r not in jumps)
        assert ("paddle_ext(fastemit_lambda=0)" in r["ratios"]) == (r in fastemit)
        for diff in r["note"].split("vs paddle_ext: ")[1:]:
            for cell in diff.split(", "):
                loss_diff = float(cell.split()[1].split("/")[0])
                assert loss_diff < 1e-5, (r["name"], cell)
    assert all(("paddle" in r["ratios"]) == r["name"].startswith("rnnt_loss fwd+bwd") for r in rows)


def test_rnnt_loss_bench_takes_fast_rnnt_only_where_it_imports(monkeypatch):
    """fast_rnnt is the installed package or nothing: a failing import leaves the column out."""
    from paddle_ext.benchmarks import rnnt_loss, torch_or_none

    installed = types.ModuleType("fast_rnnt")
    try:
        for module, want in ((None, None), (installed, installed if torch_or_none() is not None else None)):
            monkeypatch.setitem(sys.modules, "fast_rnnt", module)  # None: `import fast_rnnt` raises ImportError
            rnnt_loss.fast_rnnt.cache_clear()
            assert rnnt_loss.fast_rnnt() is want
    finally:
        rnnt_loss.fast_rnnt.cache_clear()
