"""Writes a PEP 503 package index for the release in dist/: dist/simple/index.html and
dist/simple/paddle-ext/index.html, linking the wheel and the sdist of the current version with their
sha256 (`make release`). `pip install --index-url file://<abs path>/dist/simple paddle-ext` installs
from it as it would from a package index.

    python tools/package_index.py dist
"""

import hashlib
import html
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = "paddle-ext"


def version() -> str:
    text = (ROOT / "python" / "paddle_ext" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M)[1]


def main(argv) -> int:
    dist = pathlib.Path(argv[1] if len(argv) > 1 else ROOT / "dist").resolve()
    files = sorted(dist.glob(f"paddle_ext-{version()}-*.whl")) + sorted(dist.glob(f"paddle_ext-{version()}.tar.gz"))
    if not any(f.suffix == ".whl" for f in files) or not any(f.name.endswith(".tar.gz") for f in files):
        sys.exit(f"package_index: dist/ needs the wheel and the sdist of {version()} (make wheel sdist); found "
                 f"{[f.name for f in files]}")
    page = dist / "simple" / PROJECT / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="../../{html.escape(f.name)}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
                    f'{html.escape(f.name)}</a><br>\n' for f in files)
    page.write_text(f"<!DOCTYPE html>\n<html><body>\n<h1>Links for {PROJECT}</h1>\n{links}</body></html>\n")
    (dist / "simple" / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body>\n<a href="{PROJECT}/">{PROJECT}</a>\n</body></html>\n')
    for f in files:
        print(f"package_index: {page.relative_to(dist.parent)} -> {f.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
