"""Runs a command on paddle_ext's sanitized build (`make test-sanitize`) and sorts the sanitizers' reports.

    python tools/sanitize_run.py SITE -- python -m pytest unittests/test_fuzz.py ...

SITE holds the package installed with the sanitized libraries (PADDLE_EXT_SANITIZE=1, build/sanitize/); it goes
first on PYTHONPATH, so the command (and every subprocess it starts) imports that paddle_ext. What Python and
Paddle need to run under the sanitizers is set here and explained in docs/architecture.md (Testing, the
sanitizer build). Each process writes its reports to build/sanitize/logs/<asan|ubsan>.<pid>.

A report is ours when its location (UBSan), or its first frame outside the sanitizer runtimes and the C/C++
runtime libraries (AddressSanitizer), is in our sources or libraries; ours fail the run, the others (inside
Paddle or another library) are counted and their first lines printed.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "sanitize" / "logs"
OUR_SOURCES = (str(ROOT / "paddle_ext") + "/", str(ROOT / "build" / "generated") + "/")
OUR_LIBRARIES = ("libpaddle_ext_kernels.so", "paddle_ext_ops.so")
# Frames that say where a report was raised, not whose code it is.
RUNTIME_FRAMES = re.compile(r"libsanitizer|/libasan\.so|/libubsan\.so|/libc\.so|/libstdc\+\+\.so|/libgcc_s\.so|"
                            r"/libm\.so|sanitizer_common|asan_|ubsan_")
FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (.*)$")  # the location is its last word
UBSAN_REPORT = re.compile(r"^(\S+?):(\d+):(\d+): runtime error: (.*)$")
ASAN_REPORT = re.compile(r"^==\d+==ERROR: AddressSanitizer: (.*)$")

# detect_leaks=0: CPython and Paddle keep memory until exit by design, a leak report would list it all.
# alloc_dealloc_mismatch=0: Paddle's pir::IrContext frees, at every exit, ~1,800 blocks allocated with new[] by
# delete, and ASan cannot suppress that check for one library.
ASAN_OPTIONS = {"detect_leaks": "0", "alloc_dealloc_mismatch": "0", "halt_on_error": "0"}
UBSAN_OPTIONS = {"print_stacktrace": "1", "halt_on_error": "0"}


def runtimes() -> list[str]:
    """The GCC sanitizer runtimes the build links to (g++ knows where they are)."""
    found = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            raise SystemExit(f"sanitize_run: g++ has no {name} (install the compiler's libasan/libubsan)")
        found.append(os.path.realpath(path))
    return found


def _paddle_libs() -> list[str]:
    """Paddle's bundled libraries (paddle/libs), which it dlopens by bare name (libmklml_intel.so for a matmul)."""
    spec = importlib.util.find_spec("paddle")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [str(pathlib.Path(list(spec.submodule_search_locations)[0]) / "libs")]


def environment(site: pathlib.Path) -> dict:
    env = dict(os.environ)
    # AddressSanitizer must be the process's first library, to intercept malloc before anything allocates.
    env["LD_PRELOAD"] = " ".join([*runtimes(), *filter(None, [env.get("LD_PRELOAD")])])
    # Its dlopen interceptor makes itself the caller, so libpaddle.so's RUNPATH no longer finds the libraries
    # Paddle dlopens by bare name: they are put on the search path.
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*_paddle_libs(), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    env["ASAN_OPTIONS"] = ":".join(f"{k}={v}" for k, v in {**ASAN_OPTIONS, "log_path": LOGS / "asan"}.items())
    env["UBSAN_OPTIONS"] = ":".join(f"{k}={v}" for k, v in {**UBSAN_OPTIONS, "log_path": LOGS / "ubsan"}.items())
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _is_ours(location: str) -> bool:
    """`location`: a source path (relative ones, as ccache's base_dir leaves them, are from the root), or an
    ASan frame's `(library+offset)`."""
    if any(f"/{lib}+" in location for lib in OUR_LIBRARIES):
        return True
    path = location.strip("()").split(":")[0]
    return os.path.normpath(os.path.join(ROOT, path)).startswith(OUR_SOURCES)


def reports(text: str) -> list[tuple[bool, str, list[str]]]:
    """(ours, headline, lines) for each report in one process's log."""
    found = []
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if UBSAN_REPORT.match(line) or ASAN_REPORT.match(line)]
    for n, i in enumerate(starts):
        block = lines[i:starts[n + 1] if n + 1 < len(starts) else len(lines)]
        ubsan = UBSAN_REPORT.match(block[0])
        if ubsan:
            ours = _is_ours(ubsan.group(1))
            headline = f"{ubsan.group(1)}:{ubsan.group(2)}: {ubsan.group(4)}"
        else:
            frames = [m.group(1) for m in map(FRAME.match, block) if m]
            first = next((f for f in frames if not RUNTIME_FRAMES.search(f)), frames[0] if frames else "")
            ours = not frames or _is_ours(first.rsplit(" ", 1)[-1])  # a report with no stack cannot be cleared
            headline = f"{ASAN_REPORT.match(block[0]).group(1)} at {first}"
        found.append((ours, headline, block))
    return found


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv or argv.index("--") != 1:
        raise SystemExit("usage: python tools/sanitize_run.py SITE -- COMMAND ...")
    site, command = pathlib.Path(argv[0]).resolve(), argv[2:]
    if not (site / "paddle_ext" / "_native").is_dir():
        raise SystemExit(f"sanitize_run: no sanitized paddle_ext in {site} (make test-sanitize installs it)")
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    rc = subprocess.run(command, env=environment(site)).returncode
    ours, elsewhere = collections.Counter(), collections.Counter()
    examples = {}
    for log in sorted(LOGS.iterdir()):
        for is_ours, headline, block in reports(log.read_text(errors="replace")):
            (ours if is_ours else elsewhere)[headline] += 1
            examples.setdefault(headline, (log.name, block))
    print(f"\nsanitizers: {sum(ours.values())} reports in our code ({len(ours)} distinct), "
          f"{sum(elsewhere.values())} elsewhere ({len(elsewhere)} distinct); logs in {LOGS.relative_to(ROOT)}")
    for headline, count in elsewhere.most_common():
        print(f"  elsewhere x{count}: {headline}")
    for headline, count in ours.most_common():
        log, block = examples[headline]
        print(f"  OURS x{count}: {headline}  ({log})\n    " + "\n    ".join(block[:12]))
    if rc != 0:
        return rc
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
