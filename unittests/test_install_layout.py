"""What `pip install .` put in site-packages, under whichever Paddle 3.x it was built against: the
`paddle_ext` package and the op library (Paddle's generated stub next to `paddle_ext_lib_pd_.so`), and
nothing else (no object files, no compile-flag record)."""

import importlib.metadata
import pathlib

import paddle

import paddle_ext
from paddle_ext import _library


def _installed_files():
    try:
        files = importlib.metadata.distribution("paddle_ext_lib").files
    except importlib.metadata.PackageNotFoundError:
        return None
    return [pathlib.PurePosixPath(str(f)) for f in files or []]


def test_the_library_is_the_stubs_shared_object_and_was_built_against_this_paddle():
    path = pathlib.Path(paddle_ext.library_path())
    assert path.name == "paddle_ext_lib_pd_.so", path
    assert path.parent == pathlib.Path(_library.ops().__file__).parent
    assert _library.build_info()["paddle"] == paddle.__version__


def test_nothing_loose_lands_in_site_packages():
    files = _installed_files()
    if files is None:  # running from a source tree without an install
        return
    in_site = [f for f in files if not str(f).startswith("..")]
    top = {f.parts[0] for f in in_site}
    allowed = {"paddle_ext", "paddle_ext_lib", "paddle_ext_lib.py", "paddle_ext_lib_pd_.so", "__pycache__"}
    assert {t for t in top if not t.endswith((".dist-info", ".egg-info"))} <= allowed, top
    assert "paddle_ext" in top and ({"paddle_ext_lib"} <= top or {"paddle_ext_lib.py", "paddle_ext_lib_pd_.so"} <= top), top
    assert not [f for f in in_site if f.suffix in (".o", ".obj") or f.name == "version.txt"]
