"""The build driver (tools/native_build.py): what it recompiles, and the libraries it leaves."""

import importlib.util
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import elf_versions

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("native_build", ROOT / "tools" / "native_build.py")
native_build = importlib.util.module_from_spec(spec)
sys.modules["native_build"] = native_build
spec.loader.exec_module(native_build)


def _unit(tmp_path, command=("g++", "-c")):
    source, header, obj = tmp_path / "a.cc", tmp_path / "a.h", tmp_path / "a.o"
    source.write_text('#include "a.h"\n')
    header.write_text("\n")
    unit = native_build.Unit(source, obj, list(command))
    obj.write_text("object")
    obj.with_suffix(".d").write_text(f"{obj}: {source} \\\n {header}\n")
    obj.with_suffix(".cmd").write_text(" ".join(command))
    past = time.time() - 100
    for path in (source, header):
        os.utime(path, (past, past))
    return unit, source, header


def test_an_object_newer_than_its_source_and_headers_with_the_same_command_is_kept(tmp_path):
    unit, _, _ = _unit(tmp_path)
    assert not unit.stale()


@pytest.mark.parametrize("change", ["source", "header", "command", "object gone", "header gone"])
def test_an_object_is_rebuilt_when_what_made_it_changed(tmp_path, change):
    unit, source, header = _unit(tmp_path)
    if change == "source":
        source.touch()
    elif change == "header":
        header.touch()
    elif change == "command":
        unit.command = [*unit.command, "-O3"]
    elif change == "object gone":
        unit.obj.unlink()
    else:
        header.unlink()
    assert unit.stale()


def test_kernels_include_no_paddle_header():
    """What lets one kernel library serve every Paddle release."""
    sources = [p for d in ("cpu", "gpu", "include") for p in (ROOT / "paddle_ext" / d).rglob("*")
               if p.suffix in (".h", ".cc", ".cu", ".cuh")]
    assert sources
    offenders = [str(p.relative_to(ROOT)) for p in sources
                 if any(line.startswith("#include") and ('"paddle/' in line or "<paddle/" in line)
                        for line in p.read_text().splitlines())]
    assert offenders == []


def test_the_binding_needs_no_cpython_symbol():
    """The wheel is tagged py3-none: a CPython symbol in a binding would tie it to one Python."""
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    from paddle_ext import _library  # noqa: PLC0415

    if shutil.which("nm") is None:
        pytest.skip("no nm")
    for library in [_library.kernel_library_path(), *_library.NATIVE.glob("paddle_*/paddle_ext_ops.so")]:
        undefined = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                                   check=True).stdout.split()
        assert [s for s in undefined if s.startswith("Py") or s.startswith("_Py")] == [], library


@pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="no zig toolchain (requirements-wheel.txt)")
def test_the_manylinux_link_binds_old_symbol_versions_and_the_library_runs(tmp_path):
    """tools/manylinux.py on what the kernels and bindings use (libm, dlopen, shared_ptr, std::string, an
    ostringstream, exceptions caught through an exception_ptr): no glibc symbol newer than 2.17, no libstdc++
    symbol newer than the policy's (what is newer is linked in), nothing left unversioned; it loads and runs."""
    import ctypes  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    source = tmp_path / "probe.cc"
    source.write_text(r"""
#include <cmath>
#include <dlfcn.h>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
extern "C" double probe(double x) {
  auto values = std::make_shared<std::vector<double>>(3, x);
  auto copy = values;
  std::exception_ptr error;
  try {
    if (x < 10) throw std::runtime_error("small " + std::to_string(x));
  } catch (...) {
    error = std::current_exception();
  }
  std::exception_ptr kept = error;
  std::ostringstream text;
  try {
    std::rethrow_exception(kept);
  } catch (const std::runtime_error& e) {
    text << e.what();
  }
  void* self = dlopen(nullptr, RTLD_LAZY);
  return std::exp((*copy)[0]) + std::log(x) + std::hypot(x, x) + std::exp(static_cast<float>(x))
         + static_cast<double>(text.str().size()) + (self != nullptr);
}
""")
    obj, library = tmp_path / "probe.o", tmp_path / "probe.so"
    subprocess.run(["g++", *native_build.BASE_FLAGS, "-D_GLIBCXX_USE_CXX11_ABI=1", "-c", str(source), "-o", str(obj)],
                   check=True)
    subprocess.run(["g++", "-shared", "-s", "-o", str(library), str(obj), "-ldl",
                    *native_build._manylinux_link_args(False)], check=True)
    elf_versions.assert_within_manylinux(library)
    probe = ctypes.CDLL(str(library)).probe
    probe.restype, probe.argtypes = ctypes.c_double, [ctypes.c_double]
    x = 2.0
    expected = np.exp(x) + np.log(x) + np.hypot(x, x) + float(np.exp(np.float32(x))) + len("small 2.000000") + 1
    assert abs(probe(x) - expected) < 1e-5 * expected


def test_each_unit_is_named_when_it_starts_and_when_it_finishes(tmp_path, capsys, monkeypatch):
    """A long compile shows which unit it is from its start, not only when it is done."""
    monkeypatch.setattr(native_build, "ROOT", tmp_path)
    monkeypatch.setenv("MAX_JOBS", "1")
    units = []
    for name in ("a", "b"):
        source = tmp_path / f"{name}.cc"
        source.write_text("\n")
        obj = tmp_path / "out" / f"{name}.o"
        units.append(native_build.Unit(source, obj, [sys.executable, "-c", f"open({str(obj)!r}, 'w')"]))
    assert native_build._compile_all("part", units)
    lines = [line for line in capsys.readouterr().err.splitlines() if ".cc" in line]
    assert len(lines) == 4
    for name in ("a", "b"):
        start = lines.index(next(line for line in lines if f"{name}.cc ..." in line))
        assert f"{name}.cc done (" in lines[start + 1]  # one job: each unit's start, then its end


def test_sanitizer_reports_are_sorted_into_ours_and_elsewhere():
    """make test-sanitize fails on reports in our code only: UBSan by its location, ASan by its first frame
    outside the sanitizer and C/C++ runtimes."""
    spec = importlib.util.spec_from_file_location("sanitize_run", ROOT / "tools" / "sanitize_run.py")
    sanitize_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sanitize_run)
    ours_src = ROOT / "paddle_ext" / "cpu" / "a.cc"
    log = "\n".join([
        f"{ours_src}:10:5: runtime error: signed integer overflow: 1 + 2147483647 cannot be represented",
        "    #0 0x7f in f() (/x/site/paddle_ext/_native/libpaddle_ext_kernels.so+0x10)",
        "/paddle/paddle/phi/core/x.h:3:1: runtime error: load of value 7, which is not a valid value for type 'bool'",
        "=================================================================",
        "==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020",
        "    #0 0x7f in __interceptor_memcpy ../../../../src/libsanitizer/sanitizer_common/x.inc:827",
        f"    #1 0x7f in g() {ROOT / 'paddle_ext' / 'cpu' / 'b.cc'}:7",
        "==43==ERROR: AddressSanitizer: heap-use-after-free on address 0x6030",
        "    #0 0x7f in operator delete(void*) ../../../../src/libsanitizer/asan/asan_new_delete.cpp:152",
        "    #1 0x7f in h() (/v/site-packages/paddle/base/libpaddle.so+0x56)",
        f"    #2 0x7f in k() {ROOT / 'paddle_ext' / 'cpu' / 'c.cc'}:9",
        "paddle_ext/cpu/d.cc:3:1: runtime error: shift exponent 70 is too large for 64-bit type 'long int'",
        "==44==ERROR: AddressSanitizer: stack-buffer-overflow on address 0x7ff",
        "    #0 0x7f in paddle_ext::(anonymous namespace)::F<double>::run(long) const paddle_ext/cpu/e.cc:5",
    ])
    found = [(ours, headline.split(":")[0].split(" at ")[0]) for ours, headline, _ in sanitize_run.reports(log)]
    assert [ours for ours, _ in found] == [True, False, True, False, True, True]  # relative: from the root
    assert found[0][1] == str(ours_src) and found[2][1] == "heap-buffer-overflow on address 0x6020"


HELPER_CALLED_FROM_AVX2 = """
typedef double v4 __attribute__((vector_size(32)));
template <typename V> {inline} V twice(V v) {{ return v + v; }}
__attribute__((target("avx2"))) void run(double* p) {{
  v4 v; __builtin_memcpy(&v, p, 32); v = twice(v); __builtin_memcpy(p, &v, 32);
}}
"""


@pytest.mark.parametrize("inline, flagged", [("inline", True), ("__attribute__((always_inline)) inline", False)])
def test_helpers_taking_avx_vectors_out_of_line_are_found(tmp_path, inline, flagged):
    """At -O0 a helper called with a 256-bit vector from AVX2 code is emitted for the baseline ISA, which passes
    the vector elsewhere: the build refuses such objects; a forced-inline helper leaves none."""
    source, obj = tmp_path / "avx.cc", tmp_path / "avx.o"
    source.write_text(HELPER_CALLED_FROM_AVX2.format(inline=inline))
    subprocess.run(["g++", "-O0", "-w", "-c", str(source), "-o", str(obj)], check=True)
    found = native_build.wide_vector_functions([obj])
    assert found == (["double __vector(4) twice<double __vector(4)>(double __vector(4))"] if flagged else [])


def test_the_kernel_library_has_no_function_taking_avx_vectors():
    objects = sorted((ROOT / "build" / "kernels" / "cpu").rglob("*.o"))
    if not objects:
        pytest.skip("no kernel objects in build/kernels/cpu (built elsewhere)")
    assert native_build.wide_vector_functions(objects) == []
