"""Builds the paddle_ext op library and installs it with the Python package.

    pip install --no-build-isolation .

1. python/paddle_ext/codegen/opgen.py turns ops/*.yaml into PD_BUILD_OP registration units
   (build/generated/<family>.ops.cc, each including paddle_ext/binding/<family>.cc) and a manifest.
2. paddle.utils.cpp_extension compiles binding/, cpu/ (and gpu/ when Paddle has CUDA) into one
   library, `paddle_ext_lib`, with a generated Python stub; `paddle_ext` imports it.

PADDLE_EXT_WITH_CUDA=1/0 overrides the CUDA choice (default: paddle.is_compiled_with_cuda()).
MAX_JOBS sets the number of parallel compile jobs (default: all cores).
"""

import importlib.util
import json
import os
import pathlib
import sys

import paddle
from paddle.utils.cpp_extension import CppExtension, CUDAExtension, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
GENERATED = ROOT / "build" / "generated"
LIBRARY = "paddle_ext_lib"


def _load_opgen():
    spec = importlib.util.spec_from_file_location("opgen", ROOT / "python/paddle_ext/codegen/opgen.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["opgen"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _with_cuda() -> bool:
    flag = os.environ.get("PADDLE_EXT_WITH_CUDA")
    if flag is not None:
        return flag.lower() in ("1", "true", "on", "yes")
    return paddle.is_compiled_with_cuda()


class BuildPyWithManifest(build_py):
    """Ships the op manifest and build facts (read by `paddle-ext info` and the tests) in the package."""

    def run(self):
        super().run()
        package = pathlib.Path(self.build_lib) / "paddle_ext"
        (package / "ops_manifest.json").write_text((GENERATED / "ops_manifest.json").read_text())
        info = {"with_cuda": with_cuda, "paddle": paddle.__version__}
        (package / "build_info.json").write_text(json.dumps(info) + "\n")


ops = _load_opgen().generate(ROOT / "ops", GENERATED)
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))

with_cuda = _with_cuda()
sources = [str((GENERATED / f"{family}.ops.cc").relative_to(ROOT)) for family in sorted({op.family for op in ops})]
sources += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").glob("cpu/*.cc"))
cxx_flags = ["-O3", "-fopenmp", "-std=c++17", "-Wno-deprecated-declarations"]
nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-std=c++17", "-DPADDLE_EXT_WITH_CUDA"]
if with_cuda:
    sources += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").glob("gpu/*.cu"))
    cxx_flags.append("-DPADDLE_EXT_WITH_CUDA")
# Every header and binding file: the generated units include them, so a change must rebuild.
depends = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").rglob("*") if p.suffix in (".h", ".cuh", ".cc"))
extension = (CUDAExtension if with_cuda else CppExtension)(
    sources=sources,
    depends=depends,
    include_dirs=[str(ROOT / "paddle_ext" / "include"), str(ROOT), str(GENERATED)],
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags} if with_cuda else {"cxx": cxx_flags},
    extra_link_args=["-fopenmp"],
)

setup(
    name=LIBRARY,
    version="0.1.0",
    description="Fast, exact custom operators for PaddlePaddle",
    ext_modules=extension,
    packages=["paddle_ext", "paddle_ext.codegen", "paddle_ext.nn", "paddle_ext.benchmarks", "paddle_ext.demo"],
    package_dir={"": "python"},
    cmdclass={"build_py": BuildPyWithManifest},
    entry_points={"console_scripts": ["paddle-ext = paddle_ext.cli:main"]},
    python_requires=">=3.9",
)
