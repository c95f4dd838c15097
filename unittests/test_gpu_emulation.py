"""A part of the GPU runtime suite on the emulated CUDA runtime (docs/gpu_emulation.md), in every `make test`:
the CUDA kernels and the shims built for the CPU, every test function of unittests/gpu on every 10th of its cases,
and the emulation's own checks (unittests/gpu/test_emulation_gpu.py). `make test-gpu-emulated` runs all of it."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = 10


def test_gpu_suite_runs_emulated():
    env = {**os.environ, "PADDLE_EXT_GPU_EMULATE": "1", "PADDLE_EXT_GPU_SAMPLE": str(SAMPLE)}
    env.pop("PADDLE_EXT_GPU_LIB", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "unittests/gpu", "-q", "-p", "no:cacheprovider", "-rfEs"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    # Every family (8 test modules and the emulation's own checks) contributes cases.
    assert passed >= 100, summary
    assert "failed" not in summary and "error" not in summary, summary
