"""The CUDA branch of the C++ glue (paddle_ext/binding/*.cc under PADDLE_EXT_WITH_CUDA) compiles.

PyPI's Paddle is the CPU build, so `make build` never compiles that branch. Its headers are the same
source headers as the CUDA build's, though, so each generated registration unit is compiled here with
g++ -fsyntax-only and PADDLE_WITH_CUDA defined, against the CUDA toolkit's headers (types, not a
driver), with PADDLE_NO_PYTHON as the build defines it (paddle/utils/pybind.h, which under PADDLE_WITH_CUDA
pulls in ATen compatibility headers that only the CUDA wheel ships, stays out).
"""

import concurrent.futures
import os
import pathlib
import shutil
import subprocess

import paddle
import pytest

from paddle_ext.codegen import opgen

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_HOME = next((p for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", "/usr/local/cuda-13.0")
                  if p and os.path.exists(os.path.join(p, "include", "cuda_runtime.h"))), None)
CXX = shutil.which(os.environ.get("CXX", "g++"))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if CUDA_HOME is None or CXX is None:
        pytest.skip("no CUDA toolkit headers or no C++ compiler")
    tmp = tmp_path_factory.mktemp("cuda_glue")
    generated = tmp / "generated"
    opgen.generate(ROOT / "ops", generated)
    paddle_include = pathlib.Path(paddle.__file__).parent / "include"
    includes = [pathlib.Path(CUDA_HOME) / "include", pathlib.Path(CUDA_HOME) / "include" / "cccl",
                paddle_include, paddle_include / "third_party",
                ROOT / "paddle_ext" / "include", ROOT, generated]
    flags = ["-std=c++17", "-fsyntax-only", "-DPADDLE_NO_PYTHON", "-DPADDLE_WITH_CUDA", "-DPADDLE_EXT_WITH_CUDA",
             *[f"-I{p}" for p in includes], "-idirafter", str(ROOT / "paddle_ext" / "include" / "paddle_ext" / "compat")]

    def run(unit):
        proc = subprocess.run([CXX, *flags, str(unit)], capture_output=True, text=True)
        return unit.name, proc.returncode, proc.stderr

    units = sorted(generated.glob("*.ops.cc"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return {name: (rc, err) for name, rc, err in pool.map(run, units)}


FAMILIES = sorted(p.stem for p in (ROOT / "ops").glob("*.yaml"))


@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_glue_compiles(compiled, family):
    rc, err = compiled[f"{family}.ops.cc"]
    assert rc == 0, err[-4000:]
