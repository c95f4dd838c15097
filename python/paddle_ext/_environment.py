"""The CPU environment Paddle's own math runs in (`paddle-ext info`, the header of `paddle-ext bench`).

Two settings decide how fast Paddle's matmuls are on a CPU, and with them every layer built on them
(the adaptive softmax): Paddle's bundled MKL takes a generic, slow code path on AMD CPUs unless
MKL_DEBUG_CPU_TYPE=5, and it runs on OMP_NUM_THREADS threads, which Paddle sets to 1 at import when it
is unset. Both are read when Paddle loads, so they belong in the environment that starts Python;
paddle_ext only reports and advises, it never sets them (that would change the user's Paddle).
"""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import platform


@functools.lru_cache(maxsize=None)
def cpu() -> tuple[str, str]:
    """(vendor, model name), e.g. ("AMD", "AMD EPYC 7B13"); ("unknown", platform.processor()) off Linux."""
    fields = {}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(fields.get("vendor_id", ""), fields.get("vendor_id", "unknown"))
    return vendor, fields.get("model name", platform.processor() or platform.machine())


@functools.lru_cache(maxsize=None)
def _start_environment() -> dict[str, str]:
    """The environment this process started with (Paddle rewrites OMP_NUM_THREADS at import)."""
    try:
        raw = pathlib.Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def setting(name: str) -> str | None:
    """A variable as the user set it when starting the process (None: unset)."""
    return _start_environment().get(name)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _paddle_libs() -> pathlib.Path:
    import paddle  # noqa: PLC0415

    return pathlib.Path(paddle.__file__).parent / "libs"


def blas() -> str:
    """The BLAS Paddle's CPU kernels call: "MKL" where the wheel bundles Intel's MKL, else "OpenBLAS"."""
    import paddle  # noqa: PLC0415

    with_mkl = getattr(paddle.version, "with_mkl", "OFF")
    return "MKL" if str(with_mkl).upper() == "ON" and (_paddle_libs() / "libmklml_intel.so").is_file() else "OpenBLAS"


def blas_threads() -> int | None:
    """The thread count of Paddle's bundled MKL as it stands in this process (None: not MKL)."""
    if blas() != "MKL":
        return None
    try:
        return int(ctypes.CDLL(str(_paddle_libs() / "libmklml_intel.so")).MKL_Get_Max_Threads())
    except (OSError, AttributeError):
        return None


def advice() -> list[str]:
    """What to set, before starting Python, where Paddle's math runs slower than it could here."""
    tips = []
    vendor, _ = cpu()
    if vendor == "AMD" and blas() == "MKL" and setting("MKL_DEBUG_CPU_TYPE") != "5":
        tips.append("export MKL_DEBUG_CPU_TYPE=5  # Paddle's MKL takes a generic, slow code path on AMD CPUs otherwise")
    threads, n = blas_threads(), cores()
    if threads is not None and threads < n and setting("OMP_NUM_THREADS") is None:
        tips.append(f"export OMP_NUM_THREADS={n}  # Paddle runs its math library on {threads} thread(s) otherwise "
                    "(paddle_ext's kernels use it too unless PADDLE_EXT_NUM_THREADS is set)")
    return tips


def summary() -> str:
    """One line naming everything above, for benchmark headers and tables."""
    import paddle  # noqa: PLC0415

    vendor, model = cpu()
    threads = blas_threads()

    def shown(name):
        value = setting(name)
        return f"{name}={value}" if value is not None else f"{name} unset"

    return (f"{model} ({vendor}), {cores()} cores; Paddle {paddle.__version__}, {blas()}"
            f"{f' on {threads} thread(s)' if threads is not None else ''}; "
            f"{shown('OMP_NUM_THREADS')}, {shown('MKL_DEBUG_CPU_TYPE')}")
