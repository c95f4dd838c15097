"""Every CUDA source compiles with nvcc for sm_80 and sm_90 (a build failure is a test failure).

The machines that run this suite have nvcc but no GPU; unittests/gpu/ runs the kernels where one exists.
"""

import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cu")) + sorted((ROOT / "unittests" / "gpu").glob("*.cu"))
ARCHS = ("sm_80", "sm_90")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
NVCC_FLAGS = ["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-DPADDLE_EXT_WITH_CUDA",
              f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}"]


def _compile(source: pathlib.Path, arch: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [NVCC, *NVCC_FLAGS, f"-arch={arch}", "-c", str(source), "-o", os.path.join(tmp, "out.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def compiled():
    """Compiles every (source, arch) pair, both cores busy, once for the module."""
    if NVCC is None:
        pytest.skip("nvcc not found")
    jobs = {(s, a): None for s in SOURCES for a in ARCHS}
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {pool.submit(_compile, s, a): (s, a) for (s, a) in jobs}
        for fut in concurrent.futures.as_completed(futures):
            jobs[futures[fut]] = fut.result()
    return jobs


def test_there_are_cuda_sources():
    assert any(s.is_relative_to(ROOT / "paddle_ext" / "gpu") for s in SOURCES)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nvcc_compiles(compiled, source, arch):
    code, log = compiled[(source, arch)]
    assert code == 0, f"nvcc -arch={arch} {source.name} failed:\n{log[-4000:]}"


@pytest.mark.parametrize("source", sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cu*")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_cuda_sources_include_no_paddle_header(source):
    text = source.read_text()
    assert '#include "paddle/' not in text and "#include <paddle/" not in text
