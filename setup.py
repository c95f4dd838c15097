"""Builds the paddle_ext op library and installs it with the Python package.

    pip install .                         # isolated build (pyproject.toml declares the build requirements)
    pip install --no-build-isolation .    # against the Paddle already installed (what `make build` does)

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
import warnings


def _check_build_requirements():
    """A clear message instead of `No module named 'yaml'` / `invalid command 'bdist_wheel'` when a
    --no-build-isolation build runs in an environment without pyproject.toml's build requirements."""
    import setuptools  # noqa: PLC0415

    missing = [req for module, req in (("paddle", "paddlepaddle"), ("yaml", "pyyaml"))
               if importlib.util.find_spec(module) is None]
    old_setuptools = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit()) < (70, 1)
    if old_setuptools and importlib.util.find_spec("wheel") is None:
        missing.append("wheel")  # setuptools < 70.1 builds wheels through the `wheel` package
    if missing:
        sys.exit(f"paddle_ext: the build needs {', '.join(missing)} (pyproject.toml's build requirements); "
                 f"`pip install {' '.join(missing)}` first, or build without --no-build-isolation")


_check_build_requirements()
with warnings.catch_warnings():  # Paddle's import warns when ccache is missing; irrelevant here
    warnings.simplefilter("ignore")
    import paddle
    from paddle.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, setup
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


class BuildOpLibrary(BuildExtension.with_options(no_python_abi_suffix=True)):
    """Paddle's build_ext, made to give the same installed layout under every Paddle 3.x:

    - the library is rebuilt when the Paddle (or the CUDA choice) differs from the last build in this
      tree: it is compiled against that Paddle's headers and C++ ABI, and the sources alone look
      up to date;
    - the Python stub that registers the ops on import: Paddle >= 3.3's build_ext writes it (and its
      install step renames the library to `<name>_pd_.so` beside it); older ones leave it to the egg
      installer, which a wheel build never runs, so the library would install as a module without
      `PyInit_paddle_ext_lib`. There it is built as `paddle_ext_lib_pd_.so` and Paddle's own stub
      writer adds `paddle_ext_lib.py`;
    - nothing but the package lands in site-packages: not Paddle's compile-flag record `version.txt`,
      nor the object files that older releases compile into the library's folder;
    - Paddle < 3.3 names each object file after its source's file name alone, so two sources of one
      name in different folders would overwrite each other's object: that stops the build by name.
    """

    WRITES_STUB = hasattr(BuildExtension, "_generate_python_api_file")

    def get_ext_filename(self, fullname):
        name = super().get_ext_filename(fullname)
        if self.WRITES_STUB:
            return name
        stem, suffix = os.path.splitext(name)
        return f"{stem}_pd_{suffix}"

    def build_extension(self, ext):
        name_objects = self.compiler.object_filenames  # Paddle's naming; it puts the plain one back once called
        objects = name_objects(ext.sources, output_dir=self.build_temp)
        self.compiler.object_filenames = name_objects
        first = {}
        for source, obj in zip(ext.sources, objects):
            if obj in first:
                sys.exit(f"paddle_ext: {first[obj]} and {source} both compile to {obj} under Paddle "
                         f"{paddle.__version__}'s build_ext (it names objects by file name alone); "
                         "give one of them another file name")
            first[obj] = source
        super().build_extension(ext)

    def run(self):
        stamp = pathlib.Path(self.build_temp) / "paddle_ext_built_for.txt"
        built_for = f"paddle {paddle.__version__}, cuda={with_cuda}\n"
        if not stamp.exists() or stamp.read_text() != built_for:
            self.force = True
        # A library under the other release family's name, left by an earlier build in this tree, would be
        # installed too (a stale `paddle_ext_lib.so` shadows the stub).
        other = f"{LIBRARY}_pd_.so" if self.WRITES_STUB else f"{LIBRARY}.so"
        (pathlib.Path(self.build_lib) / other).unlink(missing_ok=True)
        super().run()
        if not self.WRITES_STUB:
            from paddle.utils.cpp_extension.extension_utils import custom_write_stub  # noqa: PLC0415

            library = pathlib.Path(self.get_ext_fullpath(LIBRARY))
            # The stub loads `<resource stem>_pd_<suffix>` from its own folder.
            custom_write_stub(library.name.replace("_pd_", ""), str(library.with_name(f"{LIBRARY}.py")))
        for stray in [pathlib.Path(self.build_lib) / "version.txt", *pathlib.Path(self.build_lib).glob("*.o")]:
            stray.unlink(missing_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(built_for)


ops = _load_opgen().generate(ROOT / "ops", GENERATED)
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 2))

with_cuda = _with_cuda()
sources = [str((GENERATED / f"{family}.ops.cc").relative_to(ROOT)) for family in sorted({op.family for op in ops})]
sources += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").glob("cpu/**/*.cc"))
# compat/ stands in for headers Paddle's wheel includes but does not ship; searched after every real one.
cxx_flags = ["-O3", "-fopenmp", "-std=c++17", "-Wno-deprecated-declarations",
             "-idirafter", str(ROOT / "paddle_ext" / "include" / "paddle_ext" / "compat")]
nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-std=c++17", "-DPADDLE_EXT_WITH_CUDA"]
if with_cuda:
    sources += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").glob("gpu/**/*.cu"))
    cxx_flags.append("-DPADDLE_EXT_WITH_CUDA")


def _openmp_link_args() -> list:
    """Our `#pragma omp` regions run on the OpenMP runtime Paddle's own libraries use: its bundled Intel
    libiomp5 (which also serves GCC's GOMP_* entry points) where the wheel ships one. Linked against GCC's
    libgomp instead, the process would hold two worker pools; once Paddle's math library runs on several
    threads, its workers spin for up to 200 ms after each of its regions (KMP_BLOCKTIME) on the cores our
    next region needs (on 2 cores: our RNN-T simple loss 25 -> 40-60 ms per call)."""
    iomp = pathlib.Path(paddle.__file__).parent / "libs" / "libiomp5.so"
    if iomp.is_file() and sys.platform.startswith("linux"):
        return [f"-L{iomp.parent}", "-l:libiomp5.so"]  # found at run time through the Paddle RUNPATH
    return ["-fopenmp"]


# Every header and binding file: the generated units include them, so a change must rebuild.
depends = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "paddle_ext").rglob("*") if p.suffix in (".h", ".cuh", ".cc"))
extension = (CUDAExtension if with_cuda else CppExtension)(
    sources=sources,
    depends=depends,
    include_dirs=[str(ROOT / "paddle_ext" / "include"), str(ROOT), str(GENERATED)],
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags} if with_cuda else {"cxx": cxx_flags},
    extra_link_args=_openmp_link_args(),
)

setup(
    name=LIBRARY,
    version="0.1.0",
    description="Fast, exact custom operators for PaddlePaddle",
    ext_modules=extension,
    packages=["paddle_ext", "paddle_ext.codegen", "paddle_ext.nn", "paddle_ext.benchmarks", "paddle_ext.demo"],
    package_dir={"": "python"},
    cmdclass={"build_py": BuildPyWithManifest, "build_ext": BuildOpLibrary},
    # The op library is compiled against this exact Paddle (its C++ ABI): require it at run time
    # (paddle_ext also checks it at import).
    install_requires=[f"{'paddlepaddle-gpu' if with_cuda else 'paddlepaddle'}=={paddle.__version__}"],
    entry_points={"console_scripts": ["paddle-ext = paddle_ext.cli:main"]},
    python_requires=">=3.9",
)
