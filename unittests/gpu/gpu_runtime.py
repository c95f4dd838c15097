"""Runs the CUDA launchers on a real GPU through the C ABI shims in this folder (ctypes, no CuPy).

`library()` compiles paddle_ext/gpu/*.cu and unittests/gpu/*.cu into one shared library with nvcc
(cached in build/gpu_tests/) and loads it; `DeviceBuffer` moves NumPy arrays to and from the device.
Everything skips cleanly where nvcc or a GPU is missing. With PADDLE_EXT_GPU_EMULATE=1 the same sources are
built for the CPU on the emulated CUDA runtime of emulation/ instead (docs/gpu_emulation.md; `make
test-gpu-emulated`), and the suite runs without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "gpu_tests"
DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4, "int64": 5, "complex64": 6,
               "complex128": 7}
ARCH_FLAGS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
              "-gencode", "arch=compute_90,code=compute_90"]


def _sources():
    return sorted((ROOT / "paddle_ext" / "gpu").rglob("*.cu")) + sorted((ROOT / "unittests" / "gpu").glob("*.cu"))


def emulated() -> bool:
    return os.environ.get("PADDLE_EXT_GPU_EMULATE", "") not in ("", "0")


def _driver_present() -> bool:
    """A CUDA driver is loadable: cheap, so machines without a GPU skip before any compile."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def build_library() -> pathlib.Path:
    """Compiles the shared library if its sources changed (also usable without a GPU, to build ahead).

    PADDLE_EXT_GPU_LIB names a library built elsewhere instead (say, an older commit's, for a before/after
    benchmark on the same GPU in one run). Emulated, PADDLE_EXT_GPU_EMULATE_FAMILIES (comma-separated family
    names) builds only those families' kernels and shims, for a run of their test files alone.
    """
    if os.environ.get("PADDLE_EXT_GPU_LIB"):
        return pathlib.Path(os.environ["PADDLE_EXT_GPU_LIB"])
    if emulated():
        from emulation import emulate
        families = [f for f in os.environ.get("PADDLE_EXT_GPU_EMULATE_FAMILIES", "").split(",") if f]
        return emulate.build(ROOT / "build" / "gpu_emulated", emulate.family_units(families) if families else None)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        pytest.skip("nvcc not found")
    digest = hashlib.sha1()
    for path in _sources() + sorted((ROOT / "paddle_ext").rglob("*.h")) + sorted((ROOT / "paddle_ext").rglob("*.cuh")):
        digest.update(path.read_bytes())
    target = BUILD / f"libpaddle_ext_gpu_{digest.hexdigest()[:12]}.so"
    if not target.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        cmd = [nvcc, "-std=c++17", "-O3", "--threads", "0", "--expt-relaxed-constexpr", "-DPADDLE_EXT_WITH_CUDA", "-shared",
               "-Xcompiler", "-fPIC", *ARCH_FLAGS, f"-I{ROOT / 'paddle_ext' / 'include'}", f"-I{ROOT}",
               f"-I{ROOT / 'unittests' / 'gpu'}", *map(str, _sources()), "-o", str(target)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
    return target


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    if not emulated() and not _driver_present():
        pytest.skip("no CUDA driver (no GPU on this machine)")
    lib = ctypes.CDLL(str(build_library()))
    lib.pe_malloc.restype = ctypes.c_void_p
    lib.pe_error_string.restype = ctypes.c_char_p
    for name in ("pe_free",):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.pe_h2d.argtypes = lib.pe_d2h.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.pe_malloc.argtypes = [ctypes.c_int64]
    if emulated():
        lib.pe_emu_last_fault.restype = ctypes.c_char_p
    if lib.pe_device_count() < 1:
        pytest.skip("no CUDA device")
    return lib


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bits (round to nearest even), as uint16. NaN stays a quiet NaN of its sign: rounding
    the bits of CUDA's canonical NaN (0x7FFFFFFF) would carry into the sign and give -0."""
    x32 = np.asarray(x, dtype=np.float32)
    f = x32.view(np.uint32).astype(np.uint64)
    rounded = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x32), ((f >> 16) | 0x0040).astype(np.uint16), rounded)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def host_array(x: np.ndarray, dtype: str) -> np.ndarray:
    """The host bytes of x as a tensor of `dtype`."""
    if dtype == "bfloat16":
        return to_bfloat16_bits(x)
    return np.ascontiguousarray(np.asarray(x).astype(dtype))


def to_float64(host: np.ndarray, dtype: str) -> np.ndarray:
    return (from_bfloat16_bits(host) if dtype == "bfloat16" else host).astype(np.float64)


# Device pointers of dropped buffers, freed after each test (conftest.py). A temporary such as
# `launch(ptr_of(DeviceBuffer(x)), ptr_of(DeviceBuffer(y)))` is collected before the launch runs: freeing
# it at once lets the next allocation reuse the memory under the kernel's feet (seen on an H200: wrong
# results, then illegal-address errors that poisoned the context).
_pending_frees: list = []


def release_pending() -> None:
    while _pending_frees:
        lib, ptr = _pending_frees.pop()
        lib.pe_free(ptr)


class DeviceBuffer:
    """A device copy of a host array; `.ptr` for the launchers, `.get()` to copy back."""

    def __init__(self, host: np.ndarray):
        self.lib = library()
        self.host = np.ascontiguousarray(host)
        self.ptr = self.lib.pe_malloc(self.host.nbytes)
        assert self.ptr, "cudaMalloc failed"
        check(self.lib.pe_h2d(self.ptr, self.host.ctypes.data, self.host.nbytes))

    @classmethod
    def empty(cls, shape, np_dtype):
        return cls(np.zeros(shape, dtype=np_dtype))

    def get(self) -> np.ndarray:
        out = np.empty_like(self.host)
        check(self.lib.pe_d2h(out.ctypes.data, self.ptr, out.nbytes))
        return out

    def __del__(self):
        if getattr(self, "ptr", None):
            _pending_frees.append((self.lib, self.ptr))


def check(code: int) -> None:
    """Asserts a shim call succeeded."""
    assert code == 0, f"CUDA call failed with {code}: {library().pe_error_string(code) if code > 0 else 'exception'}"
