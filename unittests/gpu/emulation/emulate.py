"""Builds the CUDA kernels and the GPU suite's shims for the CPU, on the emulated CUDA runtime in this folder
(docs/gpu_emulation.md).

The sources are copied into the build folder with each `kernel<<<grid, block, shared, stream>>>(args)` spelled
as a call of the runtime's launcher (the one thing a C++ compiler cannot parse); nothing else changes, and
`#line` keeps diagnostics and fault reports on the original files. Compiled with g++ and
-fsanitize=bounds, whose out-of-bounds handler (runtime.cc) turns an index out of a __shared__ array into a
launch fault.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import pathlib
import shutil
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
# -fsanitize=thread: its instrumentation's calls are answered by runtime.cc's shared-memory race check (no
# ThreadSanitizer runtime is linked); volatile accesses get calls of their own, which the check ignores.
FLAGS = ["-std=c++17", "-O1", "-g1", "-fPIC", "-fsanitize=bounds", "-fno-sanitize-recover=bounds", "-fsanitize=thread",
         "--param=tsan-distinguish-volatile=1", "--param=tsan-instrument-func-entry-exit=0", "-DPADDLE_EXT_WITH_CUDA",
         "-Wno-attributes"]


def _matching(text: str, start: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at `start` (parentheses nest inside)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in open_:
            depth += 1
        elif text[i] in close:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {open_} at offset {start}")


def _kernel_start(text: str, end: int) -> int:
    """Start of the kernel expression that ends before `end` (a name, maybe qualified, maybe a template-id)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if text[i - 1] == ">":
        depth = 0
        while True:
            i -= 1
            depth += {">": 1, "<": -1}.get(text[i], 0)
            if depth == 0:
                break
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text: str) -> str:
    """`k<<<c>>>(a)` -> `::pe_emu::launch_kernel("k", ::pe_emu::config(c), [&](auto&... p) { k(p...); }, a)`,
    newlines kept."""
    out, pos = [], 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        start = _kernel_start(text, at)
        close = text.index(">>>", at)
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        assert text[paren] == "(", f"a launch without arguments near {text[start:paren + 20]!r}"
        end = _matching(text, paren, "(", ")")
        kernel, cfg, args = text[start:at], text[at + 3:close], text[paren + 1:end]
        name = " ".join(kernel.split())
        sep = ", " if args.strip() else ""
        out.append(text[pos:start])
        out.append(f'::pe_emu::launch_kernel("{name}", ::pe_emu::config({cfg}), '
                   f'[&](auto&... pe_arg) {{ {kernel}(pe_arg...); }}{sep}{args})')
        pos = end + 1


_SHARED = re.compile(r"^(\s*)__shared__\s+([^;]*);", re.M)


def _declarator_names(decl: str) -> list[str]:
    """The names a declaration `T a, b[4][2]` declares (commas inside <>, [] and () do not split)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(decl):
        depth += (ch in "<[(") - (ch in ">])")
        if ch == "," and depth == 0:
            parts.append(decl[start:i])
            start = i + 1
    parts.append(decl[start:])
    names = []
    for part in parts:
        names.append(re.findall(r"[A-Za-z_]\w*", part.split("[", 1)[0])[-1])
    return names


def rewrite_shared(text: str) -> str:
    """`__shared__ T a, b[4];` -> the same statics, then each registered with the runtime (on the same line):
    the first thread of a block to pass a declaration poisons the variable, and the race check learns it."""
    def one(m: re.Match) -> str:
        regs = "".join(f' ::pe_emu::shared_var(&{n}, sizeof({n}), "{n}");' for n in _declarator_names(m.group(2)))
        return f"{m.group(1)}static {m.group(2)};{regs}"
    return _SHARED.sub(one, text)


def sources() -> list[pathlib.Path]:
    return sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cu")) + sorted((ROOT / "unittests" / "gpu").glob("*.cu"))


def family_units(families: list[str]) -> list[pathlib.Path]:
    """The units the GPU tests of `families` (op family names, e.g. "logcumsumexp") need: each family's kernels
    (paddle_ext/gpu/<family>.cu or the folder's .cu files), its shim, and the common shim."""
    gpu, shims = ROOT / "paddle_ext" / "gpu", ROOT / "unittests" / "gpu"
    units = [shims / "shim_common.cu"]
    for family in families:
        kernels = sorted((gpu / family).glob("*.cu")) if (gpu / family).is_dir() else [gpu / f"{family}.cu"]
        units += [*kernels, shims / f"shim_{family}.cu"]
    missing = [str(u) for u in units if not u.exists()]
    if missing:
        raise ValueError(f"no such units for families {families}: {missing}")
    return units


def _inputs(units: list[pathlib.Path]) -> list[pathlib.Path]:
    return [*units, *sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cuh")), *sorted((ROOT / "unittests" / "gpu").glob("*.cuh")),
            *sorted((ROOT / "paddle_ext" / "include").rglob("*.h")), *sorted(HERE.rglob("*.cuh")),
            *sorted(HERE.rglob("*.h")), HERE / "runtime.cc", pathlib.Path(__file__)]


def build(build_dir: pathlib.Path, units: list[pathlib.Path] | None = None, name: str = "libpaddle_ext_gpu_emulated",
          jobs: int | None = None) -> pathlib.Path:
    """Compiles `units` (.cu files; by default the kernels and the shims) and the runtime into one shared library,
    cached by content."""
    units = sources() if units is None else [pathlib.Path(p).resolve() for p in units]
    digest = hashlib.sha1(" ".join(FLAGS).encode())
    for path in _inputs(units):
        digest.update(str(path).encode())
        digest.update(path.read_bytes())
    target = build_dir / f"{name}_{digest.hexdigest()[:12]}.so"
    if target.exists():
        return target
    src = build_dir / "src"
    obj = build_dir / "obj"
    # Every .cu/.cuh of the two source folders (headers included), plus the units from elsewhere.
    copies = {p: src / p.relative_to(ROOT) for folder in (ROOT / "paddle_ext" / "gpu", ROOT / "unittests" / "gpu")
              for p in [*folder.rglob("*.cu"), *folder.rglob("*.cuh")] if HERE not in p.parents}
    copies.update({p: src / "extra" / p.name for p in units if p not in copies})
    for path, dest in copies.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = f'#line 1 "{path}"\n' + rewrite_shared(rewrite_launches(path.read_text()))
        if not dest.exists() or dest.read_text() != text:
            dest.write_text(text)
    obj.mkdir(parents=True, exist_ok=True)
    cxx = [*(["ccache"] if shutil.which("ccache") else []), os.environ.get("CXX", "g++")]
    includes = [f"-I{HERE / 'include'}", f"-I{src}", f"-I{src / 'unittests' / 'gpu'}",
                f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}"]

    def compile_one(unit: pathlib.Path) -> pathlib.Path:
        out = obj / (hashlib.sha1(str(unit).encode()).hexdigest()[:10] + "_" + unit.stem + ".o")
        cmd = [*cxx, *FLAGS, *includes, "-x", "c++", "-c", str(copies[unit]), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}\n{proc.stderr[-6000:]}")
        return out

    runtime = obj / f"runtime_{target.stem}.o"
    with concurrent.futures.ThreadPoolExecutor(jobs or int(os.environ.get("MAX_JOBS", os.cpu_count() or 2))) as pool:
        objects = list(pool.map(compile_one, units))
        subprocess.run([*cxx, "-std=c++17", "-O2", "-fPIC", "-U_FORTIFY_SOURCE", f"-I{HERE / 'include'}", "-c",
                        str(HERE / "runtime.cc"), "-o", str(runtime)], check=True)
    tmp = target.with_suffix(".tmp")
    subprocess.run([os.environ.get("CXX", "g++"), "-shared", "-o", str(tmp), *map(str, objects), str(runtime)], check=True)
    tmp.rename(target)
    return target


if __name__ == "__main__":
    print(build(ROOT / "build" / "gpu_emulated"))
