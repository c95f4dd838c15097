"""A part of the GPU runtime suite on the emulated CUDA runtime (docs/gpu_emulation.md), in every `make test`:
the CUDA kernels and the shims built for the CPU, the emulation's own checks (unittests/gpu/test_emulation_gpu.py)
and every 4th case of the families that pass there whole. `make test-gpu-emulated` runs all of it."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = 4
MODULES = ["test_emulation_gpu.py", "test_rnnt_joint_logprobs_gpu.py", "test_transducer_jump_loss_gpu.py"]


def test_gpu_suite_runs_emulated():
    env = {**os.environ, "PADDLE_EXT_GPU_EMULATE": "1", "PADDLE_EXT_GPU_SAMPLE": str(SAMPLE)}
    env.pop("PADDLE_EXT_GPU_LIB", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", *[f"unittests/gpu/{m}" for m in MODULES], "-q", "-p",
                           "no:cacheprovider", "-rfEs"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 35, summary
    assert "failed" not in summary and "error" not in summary, summary
