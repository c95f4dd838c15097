"""Compiles paddle_ext's native code in two parts, and says what it is doing.

1. The kernel library `libpaddle_ext_kernels.so`: paddle_ext/cpu (and paddle_ext/gpu with CUDA). It
   includes no Paddle header, so one build serves every Paddle release; it runs its OpenMP regions on
   the OpenMP runtime Paddle's wheel ships (libiomp5, found by its soname once `import paddle` loaded it).
2. One binding `paddle_ext_ops.so` per Paddle release: the registration units generated from ops/*.yaml
   (which include paddle_ext/binding/<family>.cc), compiled against that release's headers with the
   flags `paddle.utils.cpp_extension` uses, and linked to the kernel library. Its Paddle symbols resolve
   at load time against the `libpaddle.so` the running process already holds (it names that soname), so
   building it needs a release's headers only: taken from the installed Paddle when it is that release,
   else from its wheel (`pip download`, headers extracted into build/paddle-sdk/).

Objects are rebuilt only when their source, a header they include (gcc's depfiles) or their command
line changed; ccache is used where it is installed; MAX_JOBS compile jobs run at once (default: all
cores). Nothing carries debug sections.

With PADDLE_EXT_SANITIZE=1 (`make test-sanitize`) the same libraries are built with AddressSanitizer and
UBSan (and debug sections, for the reports' source lines) into build/sanitize/, beside the normal build.

With --manylinux (`make wheel`) the libraries are linked for older distributions (tools/manylinux.py).

    python tools/native_build.py kernels [--cuda] [--manylinux]
    python tools/native_build.py binding [--release 3.2.2 ...] [--cuda] [--manylinux]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
GENERATED = BUILD / "generated"
KERNEL_LIBRARY = "libpaddle_ext_kernels.so"
BINDING_LIBRARY = "paddle_ext_ops.so"
# Every CPU release on PyPI that a wheel carries a binding for.
RELEASES = ("3.0.0", "3.1.0", "3.1.1", "3.2.0", "3.2.1", "3.2.2", "3.3.0", "3.3.1")
CUDA_ARCHS = ("80", "90")

SANITIZE = os.environ.get("PADDLE_EXT_SANITIZE", "0") not in ("", "0")
# Where the objects and libraries go: the sanitized build has a folder of its own.
OUT = BUILD / "sanitize" if SANITIZE else BUILD
# The sanitized build: no -fwrapv (UBSan must see signed overflow), -O0 (no check optimised away), frame
# pointers for the reports' stacks, and address errors reported without stopping, so that one run counts
# every report.
SANITIZE_FLAGS = ["-fsanitize=address,undefined,float-cast-overflow", "-fsanitize-recover=address",
                  "-fno-omit-frame-pointer"]
if SANITIZE:
    BASE_FLAGS = ["-O0", "-g", "-std=c++17", "-fPIC", "-fopenmp", "-DNDEBUG", "-w", *SANITIZE_FLAGS]
    LINK_FLAGS = SANITIZE_FLAGS
else:
    BASE_FLAGS = ["-O3", "-std=c++17", "-fPIC", "-fopenmp", "-DNDEBUG", "-fwrapv", "-g0", "-w"]
    LINK_FLAGS = ["-s"]


def say(message: str) -> None:
    print(f"[paddle_ext build] {message}", file=sys.stderr, flush=True)


def jobs() -> int:
    return max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 2))


def cuda_home() -> pathlib.Path | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (pathlib.Path(candidate) / "bin" / "nvcc").exists():
            return pathlib.Path(candidate)
    nvcc = shutil.which("nvcc")
    return pathlib.Path(nvcc).resolve().parents[1] if nvcc else None


def _launcher() -> list[str]:
    ccache = shutil.which("ccache")
    return [ccache] if ccache else []


@dataclasses.dataclass
class Unit:
    source: pathlib.Path
    obj: pathlib.Path
    command: list[str]

    def stale(self) -> bool:
        """Whether the object is missing or older than its source, a header it included, or its command."""
        stamp = self.obj.with_suffix(".cmd")
        if not self.obj.exists() or not stamp.exists() or stamp.read_text() != shlex.join(self.command):
            return True
        built = self.obj.stat().st_mtime
        depfile = self.obj.with_suffix(".d")
        deps = [self.source]
        if depfile.exists():
            text = depfile.read_text().replace("\\\n", " ")
            deps = [pathlib.Path(p) for p in text.split(":", 1)[-1].split()]
        return any(not p.exists() or p.stat().st_mtime > built for p in deps)


def _weight(source: pathlib.Path, seen=None) -> int:
    """Bytes of a source and the project headers it includes: how long it compiles, roughly."""
    seen = set() if seen is None else seen
    if source in seen or not source.is_file():
        return 0
    seen.add(source)
    total = source.stat().st_size
    for line in source.read_text(errors="ignore").splitlines():
        if line.startswith("#include \""):
            name = line.split('"')[1]
            for base in (source.parent, ROOT / "paddle_ext" / "include", ROOT):
                if (base / name).is_file():
                    total += _weight(base / name, seen)
                    break
    return total


def _compile_all(part: str, units: list[Unit]) -> bool:
    """Compiles the stale units on `jobs()` workers, printing a line when each unit starts and one when it
    finishes; returns whether anything was compiled."""
    todo = sorted((u for u in units if u.stale()), key=lambda u: -_weight(u.source))  # long ones first
    if not todo:
        say(f"{part}: {len(units)} objects up to date")
        return False
    workers = min(jobs(), len(todo))
    say(f"{part}: compiling {len(todo)} of {len(units)} sources on {workers} job(s)"
        + (" with ccache" if _launcher() else ""))
    start = time.monotonic()
    started = [0]
    lock = threading.Lock()

    def run(unit: Unit):
        unit.obj.parent.mkdir(parents=True, exist_ok=True)
        with lock:
            started[0] += 1
            label = f"[{started[0]}/{len(todo)}] {unit.source.relative_to(ROOT)}"
        say(f"  {label} ...")
        began = time.monotonic()
        proc = subprocess.run(unit.command, capture_output=True, text=True)
        with lock:
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout + proc.stderr)
                raise SystemExit(f"paddle_ext build: compiling {unit.source.relative_to(ROOT)} failed "
                                 f"(exit {proc.returncode}):\n  {shlex.join(unit.command)}")
            unit.obj.with_suffix(".cmd").write_text(shlex.join(unit.command))
            say(f"  {label} done ({time.monotonic() - began:.0f} s, {time.monotonic() - start:.0f} s elapsed)")

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run, u) for u in todo]
        try:
            for future in futures:
                future.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the first failure stops the build
            raise
    return True


def _link(part: str, output: pathlib.Path, objects: list[pathlib.Path], args: list[str], relink: bool) -> None:
    command = ["g++", "-shared", *LINK_FLAGS, "-o", str(output), *map(str, objects), *args]
    stamp = output.with_suffix(".cmd")
    if not relink and output.exists() and stamp.exists() and stamp.read_text() == shlex.join(command):
        return
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"paddle_ext build: linking {output.name} failed:\n  {shlex.join(command)}")
    stamp.write_text(shlex.join(command))
    say(f"{part}: linked {output.relative_to(ROOT)} ({output.stat().st_size / 2**20:.1f} MiB, "
        f"{time.monotonic() - start:.0f} s)")


def _omp_runtime_dir() -> pathlib.Path | None:
    """The folder of the libiomp5.so that the Paddle installed here ships (every Paddle 3.x CPU wheel on
    Linux does); None where it ships none (then GCC's libgomp is linked)."""
    spec = importlib.util.find_spec("paddle")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = pathlib.Path(list(spec.submodule_search_locations)[0]) / "libs"
    return libs if (libs / "libiomp5.so").is_file() else None


def _manylinux_link_args(cuda: bool) -> list[str]:
    if cuda:
        raise SystemExit("paddle_ext build: the manylinux link is for the CPU wheel; build CUDA kernels without it")
    spec = importlib.util.spec_from_file_location("manylinux_link", pathlib.Path(__file__).with_name("manylinux.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.link_args(BUILD, say)


# The CPU kernels are templates on a lane width, instantiated inside functions compiled for AVX2 or AVX-512
# (simd::dispatch). A helper they call with 256- or 512-bit vectors must be inlined there: an out-of-line copy
# is compiled for the baseline instruction set, which passes such vectors in memory instead of registers, so
# caller and copy disagree on the arguments. The optimizer usually inlines small helpers anyway; an -O0 build
# shows the bug. Every build checks its objects for such copies (Itanium mangling of a vector: Dv<lanes>_<type>).
_VECTOR = re.compile(r"Dv(\d+)_([a-z])")
_ELEMENT_BYTES = {"d": 8, "x": 8, "y": 8, "l": 8, "m": 8, "f": 4, "i": 4, "j": 4, "s": 2, "t": 2, "a": 1, "h": 1,
                  "c": 1}


def wide_vector_functions(objects) -> list[str]:
    """The demangled names of the functions defined in `objects` that take or return a vector of 32+ bytes."""
    found = set()
    for obj in objects:
        listing = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
        for parts in map(str.split, listing.stdout.splitlines()):
            if len(parts) == 3 and parts[1] in "TtWw" and any(
                    int(lanes) * _ELEMENT_BYTES.get(kind, 0) >= 32 for lanes, kind in _VECTOR.findall(parts[2])):
                found.add(parts[2])
    if not found:
        return []
    return subprocess.run(["c++filt"], input="\n".join(sorted(found)), capture_output=True, text=True,
                          check=True).stdout.splitlines()


# ------------------------------------------------------------------------------------------- kernels

def kernels(cuda: bool = False, manylinux: bool = False) -> pathlib.Path:
    """Builds (when stale) and returns build/kernels/<cpu|cuda>/libpaddle_ext_kernels.so."""
    out = OUT / "kernels" / ("cuda" if cuda else "cpu")
    includes = [f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}"]
    defines = []
    home = cuda_home() if cuda else None
    if cuda:
        if home is None:
            raise SystemExit("paddle_ext build: a CUDA build needs nvcc (set CUDA_HOME)")
        defines = ["-DPADDLE_EXT_WITH_CUDA", f"-I{home / 'include'}"]  # the family headers declare launchers
    units = []
    for source in sorted((ROOT / "paddle_ext" / "cpu").rglob("*.cc")):
        obj = out / source.relative_to(ROOT / "paddle_ext").with_suffix(".o")
        units.append(Unit(source, obj, [*_launcher(), "g++", *BASE_FLAGS, *defines, *includes,
                                        "-MMD", "-MF", str(obj.with_suffix(".d")), "-c", str(source), "-o", str(obj)]))
    link_args = []
    if cuda:
        arch = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in CUDA_ARCHS]
        for source in sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cu")):
            obj = out / source.relative_to(ROOT / "paddle_ext").with_suffix(".o")
            units.append(Unit(source, obj, [*_launcher(), str(home / "bin" / "nvcc"), "-O3", "-std=c++17",
                                            "--expt-relaxed-constexpr", "-DPADDLE_EXT_WITH_CUDA", "-DNDEBUG",
                                            "-Xcompiler", "-fPIC", *arch, *includes, "-MD", "-MF",
                                            str(obj.with_suffix(".d")), "-c", str(source), "-o", str(obj)]))
        # the CUDA runtime a CUDA wheel of Paddle brings (nvidia-cuda-runtime), else the toolkit's
        link_args += [f"-L{home / 'lib64'}", "-lcudart", "-Wl,-rpath,$ORIGIN/../../nvidia/cuda_runtime/lib"]
    omp = _omp_runtime_dir()
    # Paddle's own OpenMP runtime: found by soname once Paddle is loaded, else next to Paddle's libraries.
    link_args += ([f"-L{omp}", "-l:libiomp5.so", "-Wl,-rpath,$ORIGIN/../../paddle/libs"] if omp else ["-fopenmp"])
    link_args += ["-ldl"]  # gemm.cc finds the oneDNN Paddle loaded (dlopen/dlsym; in libc itself from glibc 2.34)
    link_args += _manylinux_link_args(cuda) if manylinux else []
    compiled = _compile_all("kernel library", units)
    misplaced = wide_vector_functions(u.obj for u in units if u.source.suffix == ".cc") if compiled else []
    if misplaced:
        raise SystemExit("paddle_ext build: functions that take AVX vectors were compiled out of line (mark them "
                         "PE_FORCEINLINE / PE_VINLINE):\n  " + "\n  ".join(misplaced))
    library = out / KERNEL_LIBRARY
    _link("kernel library", library, [u.obj for u in units], [*link_args, f"-Wl,-soname,{KERNEL_LIBRARY}"], compiled)
    return library


# ------------------------------------------------------------------------------------------ bindings

def installed_paddle() -> tuple[str, pathlib.Path] | None:
    """(version, package folder) of the Paddle importable here, read without importing it."""
    spec = importlib.util.find_spec("paddle")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    version_file = folder / "version" / "__init__.py"
    for line in version_file.read_text().splitlines() if version_file.exists() else []:
        if line.startswith("full_version"):
            return line.split("=", 1)[1].strip().strip("'\""), folder
    return None


def paddle_headers(release: str) -> pathlib.Path:
    """The `include` folder of Paddle `release`: the installed one's, or extracted from its wheel."""
    here = installed_paddle()
    if here and here[0] == release and (here[1] / "include").is_dir():
        return here[1] / "include"
    sdk = BUILD / "paddle-sdk" / release
    include = sdk / "paddle" / "include"
    if (sdk / ".complete").exists():
        return include
    wheels = BUILD / "paddle-sdk" / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"paddlepaddle-{release}-*.whl"
    if not list(wheels.glob(pattern)):
        say(f"binding {release}: fetching paddlepaddle=={release} for its headers (pip download)")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--disable-pip-version-check",
                               "--only-binary=:all:", "-d", str(wheels), f"paddlepaddle=={release}"],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not list(wheels.glob(pattern)):
            raise SystemExit(f"paddle_ext build: could not download paddlepaddle=={release}:\n{proc.stderr[-2000:]}")
    wheel = sorted(wheels.glob(pattern))[0]
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(sdk, [n for n in archive.namelist() if n.startswith("paddle/include/")])
    (sdk / ".complete").write_text(wheel.name + "\n")
    return include


def _include_dirs(include: pathlib.Path) -> list[pathlib.Path]:
    """The include folders `paddle.utils.cpp_extension` passes for an include root (those that exist)."""
    candidates = [include, include / "third_party", include / "paddle" / "phi" / "api" / "include" / "compat",
                  include / "paddle" / "phi" / "api" / "include" / "compat" / "torch" / "csrc" / "api" / "include"]
    return [p for p in candidates if p.is_dir()]


def _paddle_soname_stub() -> pathlib.Path:
    """An empty library whose soname is `libpaddle.so`: linking to it records the dependency on the
    running Paddle's core library without needing that 250 MB file at build time."""
    stub = BUILD / "paddle-sdk" / "stub" / "libpaddle.so"
    if not stub.exists():
        stub.parent.mkdir(parents=True, exist_ok=True)
        empty = stub.with_name("empty.c")
        empty.write_text("/* the soname is all that matters */\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libpaddle.so", "-o", str(stub), str(empty)], check=True)
    return stub


def generate_registrations() -> list[str]:
    """ops/*.yaml → build/generated/<family>.ops.cc and ops_manifest.json; returns the families."""
    spec = importlib.util.spec_from_file_location("opgen", ROOT / "python" / "paddle_ext" / "codegen" / "opgen.py")
    opgen = importlib.util.module_from_spec(spec)
    sys.modules["opgen"] = opgen  # dataclasses look their module up
    spec.loader.exec_module(opgen)
    ops = opgen.generate(ROOT / "ops", GENERATED)
    return sorted({op.family for op in ops})


def binding_dir(release: str, cuda: bool = False) -> pathlib.Path:
    return OUT / "bindings" / (f"{release}-cuda" if cuda else release)


def binding(release: str, kernel_library: pathlib.Path, cuda: bool = False, manylinux: bool = False) -> pathlib.Path:
    """Builds (when stale) and returns the binding of Paddle `release`, linked to `kernel_library`."""
    include = paddle_headers(release)
    families = generate_registrations()
    out = binding_dir(release, cuda)
    # PADDLE_NO_PYTHON: paddle/extension.h leaves out its pybind11 layer (a binding registers ops, it defines
    # no Python module), so the binding needs no CPython symbol and serves every Python.
    flags = [*BASE_FLAGS, "-DPADDLE_WITH_CUSTOM_KERNEL", "-DPADDLE_NO_PYTHON", "-DPADDLE_EXTENSION_NAME=paddle_ext_ops",
             "-D_GLIBCXX_USE_CXX11_ABI=1", "-Wno-deprecated-declarations"]
    if cuda:
        flags += ["-DPADDLE_WITH_CUDA", "-DPADDLE_EXT_WITH_CUDA", f"-I{cuda_home() / 'include'}"]
    includes = [f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}", f"-I{GENERATED}",
                *[f"-I{p}" for p in _include_dirs(include)],
                # compat/ stands in for a header Paddle's wheel includes but does not ship; searched last.
                "-idirafter", str(ROOT / "paddle_ext" / "include" / "paddle_ext" / "compat")]
    units = []
    for family in families:
        source = GENERATED / f"{family}.ops.cc"
        obj = out / f"{family}.ops.o"
        units.append(Unit(source, obj, [*_launcher(), "g++", *flags, *includes, "-MMD", "-MF",
                                        str(obj.with_suffix(".d")), "-c", str(source), "-o", str(obj)]))
    compiled = _compile_all(f"binding for Paddle {release}", units)
    library = out / BINDING_LIBRARY
    stub = _paddle_soname_stub()
    link_args = [f"-L{kernel_library.parent}", f"-l:{KERNEL_LIBRARY}",
                 "-Wl,--no-as-needed", f"-L{stub.parent}", "-l:libpaddle.so", "-Wl,--as-needed",
                 # the kernel library sits one folder up, Paddle's core library in paddle/base
                 "-Wl,-rpath,$ORIGIN/..:$ORIGIN/../../../paddle/base"]
    link_args += _manylinux_link_args(cuda) if manylinux else []
    relink = compiled or not library.exists() or library.stat().st_mtime < kernel_library.stat().st_mtime
    _link(f"binding for Paddle {release}", library, [u.obj for u in units], link_args, relink)
    return library


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["kernels", "binding"])
    parser.add_argument("--release", action="append", help="a Paddle release (repeatable; 'all': every one "
                        "a wheel carries); default: the installed Paddle")
    parser.add_argument("--cuda", action="store_true", help="with the CUDA kernels")
    parser.add_argument("--manylinux", action="store_true", help="link for older distributions (the wheel's link)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    library = kernels(args.cuda, args.manylinux)
    if args.part == "binding":
        releases = args.release or [installed_paddle()[0]]
        if "all" in releases:
            releases = list(RELEASES)
        for release in releases:
            binding(release, library, args.cuda, args.manylinux)
    say(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
