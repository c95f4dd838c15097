"""`paddle-ext info` and the bench header report the CPU environment Paddle's math runs in, and advise
MKL_DEBUG_CPU_TYPE=5 (AMD with MKL) and OMP_NUM_THREADS only where they would help; paddle_ext never
sets either."""

import os
import subprocess
import sys

import pytest

from paddle_ext import _environment, cli


@pytest.mark.parametrize("vendor,debug_type,threads_set,blas_threads,expected", [
    ("AMD", None, None, 1, ["MKL_DEBUG_CPU_TYPE=5", "OMP_NUM_THREADS=4"]),
    ("AMD", "5", "4", 4, []),
    ("AMD", "5", None, 1, ["OMP_NUM_THREADS=4"]),
    ("Intel", None, "2", 2, []),  # MKL's fast paths run on Intel as they are; the user chose 2 threads
    ("Intel", None, None, 4, []),  # already on every core
])
def test_advice(monkeypatch, vendor, debug_type, threads_set, blas_threads, expected):
    start = {"MKL_DEBUG_CPU_TYPE": debug_type, "OMP_NUM_THREADS": threads_set}
    monkeypatch.setattr(_environment, "cpu", lambda: (vendor, "some CPU"))
    monkeypatch.setattr(_environment, "setting", start.get)
    monkeypatch.setattr(_environment, "blas", lambda: "MKL")
    monkeypatch.setattr(_environment, "blas_threads", lambda: blas_threads)
    monkeypatch.setattr(_environment, "cores", lambda: 4)
    tips = _environment.advice()
    assert [tip.split()[1] for tip in tips] == expected


def test_no_mkl_advice_without_mkl(monkeypatch):
    monkeypatch.setattr(_environment, "cpu", lambda: ("AMD", "some CPU"))
    monkeypatch.setattr(_environment, "blas", lambda: "OpenBLAS")
    monkeypatch.setattr(_environment, "blas_threads", lambda: None)
    assert _environment.advice() == []


def test_this_machine_is_described():
    vendor, model = _environment.cpu()
    assert vendor and model
    assert _environment.blas() in ("MKL", "OpenBLAS")
    threads = _environment.blas_threads()
    assert threads is None or threads >= 1
    line = _environment.summary()
    assert model in line and "OMP_NUM_THREADS" in line and "MKL_DEBUG_CPU_TYPE" in line


def test_settings_are_read_as_the_process_started_and_never_set():
    code = ("import os, paddle, paddle_ext; from paddle_ext import _environment, cli; cli.main(['info']); "
            "print('AFTER', os.environ.get('MKL_DEBUG_CPU_TYPE'), _environment.setting('OMP_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_DEBUG_CPU_TYPE", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # Paddle writes OMP_NUM_THREADS=1 at import; the report still shows the user's (unset) value
    assert "AFTER None None" in done.stdout
    assert "Paddle's BLAS" in done.stdout and "OMP_NUM_THREADS=unset" in done.stdout


def test_info_and_bench_state_the_environment(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "Paddle's BLAS" in out and _environment.cpu()[1] in out
    assert cli.main(["bench", "--op", "logcumsumexp", "--quick", "--repeats", "1", "--case", "fwd [512, 512] axis=-1 float32"]) == 0
    out = capsys.readouterr().out
    assert out.count(f"nvironment: {_environment.summary()}") == 1  # once, in the header above every table
