"""The emulated CUDA runtime's own checks in every `make test` (docs/gpu_emulation.md): the planted-bug kernels of
unittests/gpu/emulation/planted.cu, each caught with the right error. `make test-gpu-emulated` runs the whole GPU
runtime suite on that runtime."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_emulated_runtime_catches_the_planted_bugs():
    env = {**os.environ, "PADDLE_EXT_GPU_EMULATE": "1"}
    env.pop("PADDLE_EXT_GPU_LIB", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "unittests/gpu/test_emulation_gpu.py", "-q", "-p",
                           "no:cacheprovider", "-rfEs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    assert int(re.search(r"(\d+) passed", summary).group(1)) >= 11, summary
    assert "failed" not in summary and "error" not in summary and "skipped" not in summary, summary
