"""The emulated CUDA runtime in every `make test` (docs/gpu_emulation.md): its planted-bug kernels
(unittests/gpu/emulation/planted.cu), each caught with the right error, and a sampled slice of the GPU runtime
suite on it (every PADDLE_EXT_GPU_SAMPLE-th case of each test function, every family). `make test-gpu-emulated`
runs the whole suite."""

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every SAMPLE-th case of each test function (its first included): the slice's share of CI's time.
SAMPLE = 10


def _run_emulated(args, extra_env=None):
    env = {**os.environ, "PADDLE_EXT_GPU_EMULATE": "1", **(extra_env or {})}
    env.pop("PADDLE_EXT_GPU_LIB", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-rfE"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    tail = proc.stdout[-8000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    return summary


def test_emulated_runtime_catches_the_planted_bugs():
    summary = _run_emulated(["unittests/gpu/test_emulation_gpu.py"])
    assert int(re.search(r"(\d+) passed", summary).group(1)) >= 14, summary
    assert "skipped" not in summary, summary


def test_a_sample_of_every_gpu_family_passes_emulated():
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "unittests" / "gpu").glob("test_*_gpu.py")
                   if p.name != "test_emulation_gpu.py")
    assert len(files) >= 8, files
    summary = _run_emulated(files, {"PADDLE_EXT_GPU_SAMPLE": str(SAMPLE)})
    assert int(re.search(r"(\d+) passed", summary).group(1)) >= 300, summary
