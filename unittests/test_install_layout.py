"""What an install put in site-packages, under whichever Paddle 3.x it serves: the `paddle_ext` package with
its native libraries (`_native/libpaddle_ext_kernels.so` and one binding per Paddle release), and nothing
else; no debug sections; one OpenMP runtime; the binding of the running Paddle is the one loaded."""

import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess

import paddle
import pytest

import elf_versions
import paddle_ext
from paddle_ext import _library


def _installed_files():
    try:
        files = importlib.metadata.distribution("paddle-ext").files
    except importlib.metadata.PackageNotFoundError:
        return None
    return [pathlib.PurePosixPath(str(f)) for f in files or []]


def test_the_loaded_library_is_the_binding_of_the_running_paddle():
    path = pathlib.Path(paddle_ext.library_path())
    assert path.name == "paddle_ext_ops.so", path
    assert path.parent.name == f"paddle_{paddle.__version__}" + ("_cuda" if paddle.is_compiled_with_cuda() else "")
    assert path.parent.parent == _library.kernel_library_path().parent
    assert paddle.__version__ in _library.supported_releases()
    assert _library.build_info()["releases"] == _library.supported_releases()


def test_nothing_loose_lands_in_site_packages():
    files = _installed_files()
    if files is None:  # running from a source tree without an install
        pytest.skip("paddle_ext is not installed as a distribution")
    in_site = [f for f in files if not str(f).startswith("..")]
    top = {f.parts[0] for f in in_site}
    assert {t for t in top if not t.endswith((".dist-info", ".egg-info"))} == {"paddle_ext"}, top
    assert not [f for f in in_site if f.suffix in (".o", ".obj", ".d", ".cmd") or f.name == "version.txt"]
    shared = sorted(str(f) for f in in_site if f.suffix == ".so")
    bindings = [f for f in shared if f.endswith("/paddle_ext_ops.so")]
    assert shared == sorted(["paddle_ext/_native/libpaddle_ext_kernels.so", *bindings]), shared
    assert len(bindings) == len(_library.supported_releases())


def _sections(path):
    done = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_installed_libraries_carry_no_debug_sections():
    libraries = [_library.kernel_library_path(), *_library.NATIVE.glob("paddle_*/paddle_ext_ops.so")]
    for library in libraries:
        assert ".debug_" not in _sections(library), library


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_the_binding_links_the_kernel_library_and_paddle_by_soname():
    done = subprocess.run(["readelf", "-d", paddle_ext.library_path()], capture_output=True, text=True, check=True)
    assert "[libpaddle_ext_kernels.so]" in done.stdout and "[libpaddle.so]" in done.stdout, done.stdout
    assert "$ORIGIN/.." in done.stdout  # relocatable: no path of the machine that built it
    assert "site-packages" not in done.stdout and "/build/" not in done.stdout


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_the_wheels_libraries_need_no_newer_glibc_or_libstdcxx_than_its_manylinux_policy():
    """`make wheel` links them with tools/manylinux.py: glibc 2.17's symbols, libstdc++'s up to the policy's;
    a binding's only unversioned references are Paddle's and the kernel library's."""
    if not _library.build_info().get("manylinux"):
        pytest.skip("a local build links this machine's glibc and libstdc++")
    elf_versions.assert_within_manylinux(_library.kernel_library_path())
    bindings = list(_library.NATIVE.glob("paddle_*/paddle_ext_ops.so"))
    assert len(bindings) == len(_library.supported_releases())
    for binding in bindings:
        elf_versions.assert_within_manylinux(binding, lambda name: re.search("paddle|phi|common", name) is not None)


def test_an_install_from_the_wheel_needs_no_compiler():
    """Set by tools/without_compilers.sh, which `make test-compat` runs the install and this suite under."""
    if os.environ.get("PADDLE_EXT_NO_COMPILER") != "1":
        pytest.skip("not running with compilers hidden")
    assert [tool for tool in ("gcc", "g++", "cc", "c++", "nvcc", "ld") if shutil.which(tool)] == []
