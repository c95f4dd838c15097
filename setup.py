"""Builds paddle_ext's native libraries (tools/native_build.py) and installs them with the Python package.

    pip install --no-build-isolation .    # against the Paddle installed here (what `make build` does)
    pip install .                         # isolated build against paddlepaddle 3.3.1 (pyproject.toml)
    PADDLE_EXT_RELEASES=all PADDLE_EXT_MANYLINUX=1 pip wheel --no-build-isolation --no-deps . -w build/wheel
                                          # `make wheel` (then auditwheel tags it manylinux)

Installed: paddle_ext/_native/libpaddle_ext_kernels.so (the kernels, Paddle-free) and one binding
paddle_ext/_native/paddle_<release>/paddle_ext_ops.so per Paddle release built for: by default the
installed one, or those named in PADDLE_EXT_RELEASES ("3.0.0 3.2.2" or "all").
PADDLE_EXT_WITH_CUDA=1/0 overrides the CUDA choice (default: whether the installed Paddle has CUDA).
PADDLE_EXT_MANYLINUX=1 links the libraries for older distributions (tools/manylinux.py; CPU only).
MAX_JOBS sets the number of parallel compile jobs (default: all cores).
The version is `__version__` in python/paddle_ext/__init__.py, read from there.
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import sys
import warnings

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 builds wheels through the `wheel` package
    from wheel.bdist_wheel import bdist_wheel

ROOT = pathlib.Path(__file__).resolve().parent


def _load_native_build():
    spec = importlib.util.spec_from_file_location("native_build", ROOT / "tools" / "native_build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["native_build"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


native_build = _load_native_build()


def _check_build_requirements():
    """A clear message instead of `No module named 'yaml'` / `invalid command 'bdist_wheel'` when a
    --no-build-isolation build runs in an environment without pyproject.toml's build requirements."""
    missing = [req for module, req in (("paddle", "paddlepaddle"), ("yaml", "pyyaml"))
               if importlib.util.find_spec(module) is None]
    if "bdist_wheel" not in globals():
        missing.append("wheel")
    if missing:
        sys.exit(f"paddle_ext: the build needs {', '.join(missing)} (pyproject.toml's build requirements); "
                 f"`pip install {' '.join(missing)}` first, or build without --no-build-isolation")


def _with_cuda() -> bool:
    flag = os.environ.get("PADDLE_EXT_WITH_CUDA")
    if flag is not None:
        return flag.lower() in ("1", "true", "on", "yes")
    with warnings.catch_warnings():  # Paddle's import warns when ccache is missing; irrelevant here
        warnings.simplefilter("ignore")
        import paddle  # noqa: PLC0415

    return paddle.is_compiled_with_cuda()


def _releases() -> list:
    wanted = os.environ.get("PADDLE_EXT_RELEASES", "").replace(",", " ").split()
    if "all" in wanted:
        return list(native_build.RELEASES)
    return wanted or [native_build.installed_paddle()[0]]


class BuildPyWithNative(build_py):
    """Compiles the kernel library and the bindings, and ships them with the op manifest and the build facts
    (read by `paddle-ext info` and the tests) in the package."""

    def run(self):
        super().run()
        package = pathlib.Path(self.build_lib) / "paddle_ext"
        native = package / "_native"
        shutil.rmtree(native, ignore_errors=True)
        native.mkdir(parents=True)
        kernels = native_build.kernels(WITH_CUDA, MANYLINUX)
        shutil.copy2(kernels, native / native_build.KERNEL_LIBRARY)
        for release in RELEASES:
            binding = native_build.binding(release, kernels, WITH_CUDA, MANYLINUX)
            folder = native / (f"paddle_{release}" + ("_cuda" if WITH_CUDA else ""))
            folder.mkdir()
            shutil.copy2(binding, folder / native_build.BINDING_LIBRARY)
        (package / "ops_manifest.json").write_text((native_build.GENERATED / "ops_manifest.json").read_text())
        info = {"with_cuda": WITH_CUDA, "releases": RELEASES, "manylinux": MANYLINUX}
        (package / "build_info.json").write_text(json.dumps(info) + "\n")


class PlatformWheel(bdist_wheel):
    """One wheel for every Python: the libraries use no CPython API (Paddle's symbols only), so the tag is
    py3-none-<platform>."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


def _requirement() -> str:
    """The Paddle the bindings serve: the one release built for, or the 3.x range a multi-release wheel covers."""
    package = "paddlepaddle-gpu" if WITH_CUDA else "paddlepaddle"
    if len(RELEASES) == 1:
        return f"{package}=={RELEASES[0]}"
    return f"{package}>=3.0,<3.4"


def _version() -> str:
    text = (ROOT / "python" / "paddle_ext" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M)[1]


_check_build_requirements()
WITH_CUDA = _with_cuda()
RELEASES = _releases()
MANYLINUX = os.environ.get("PADDLE_EXT_MANYLINUX", "0").lower() in ("1", "true", "on", "yes")

setup(
    name="paddle-ext",
    version=_version(),
    description="Fast, exact custom operators for PaddlePaddle",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=["paddle_ext", "paddle_ext.adaptive_log_softmax", "paddle_ext.codegen", "paddle_ext.nn", "paddle_ext.rnnt_loss",
              "paddle_ext.benchmarks", "paddle_ext.demo"],
    package_dir={"": "python"},
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithNative, "bdist_wheel": PlatformWheel},
    install_requires=[_requirement(), "numpy"],
    entry_points={"console_scripts": ["paddle-ext = paddle_ext.cli:main"]},
    python_requires=">=3.9",
)
