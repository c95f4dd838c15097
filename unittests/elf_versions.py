"""The symbol versions a shared library needs (readelf), checked against what tools/manylinux.py allows: the
wheel's libraries must load on distributions as old as its manylinux policy."""

import importlib.util
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def versions_needed(library) -> dict:
    """{"GLIBC": {(2, 14), ...}, "GLIBCXX": ..., "": {unversioned non-weak undefined names}} of a library
    (versions without a number, libiomp5's VERSION, are left out)."""
    table = subprocess.run(["readelf", "--dyn-syms", "--wide", str(library)], capture_output=True, text=True,
                           check=True).stdout
    needed: dict = {}
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[6] != "UND" or fields[4] == "WEAK":
            continue
        name, _, version = fields[7].partition("@")
        match = re.fullmatch(r"([A-Z]+)_(\d+(?:\.\d+)*)", version)
        if match:
            needed.setdefault(match[1], set()).add(tuple(int(n) for n in match[2].split(".")))
        elif not version:
            needed.setdefault("", set()).add(name)
    return needed


def _manylinux():
    spec = importlib.util.spec_from_file_location("manylinux_link", ROOT / "tools" / "manylinux.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_within_manylinux(library, unversioned_allowed=lambda name: False):
    """No glibc or libstdc++ symbol newer than tools/manylinux.py allows, and no unversioned reference but those
    `unversioned_allowed` accepts (a binding's to Paddle and to the kernel library)."""
    manylinux = _manylinux()
    needed = versions_needed(library)
    glibc = tuple(int(n) for n in manylinux.GLIBC.split("."))
    assert max(needed.get("GLIBC", {(0,)})) <= glibc, (library, sorted(needed["GLIBC"]))
    for family, newest in manylinux.LIBSTDCXX_MAX.items():
        assert max(needed.get(family, {(0,)})) <= newest, (library, family, sorted(needed[family]))
    unversioned = {name for name in needed.get("", set()) if not unversioned_allowed(name)}
    assert unversioned == set(), (library, unversioned)
