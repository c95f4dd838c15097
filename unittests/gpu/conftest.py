import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_runtime import release_pending  # noqa: E402


@pytest.fixture(autouse=True)
def _free_device_buffers_after_each_test():
    yield
    release_pending()


def pytest_collection_modifyitems(config, items):
    """PADDLE_EXT_GPU_SAMPLE=N keeps every N-th case of each test function (its first included): the part of the
    emulated suite that `make test` runs (unittests/test_gpu_emulation.py)."""
    every = int(os.environ.get("PADDLE_EXT_GPU_SAMPLE", "1"))
    if every <= 1:
        return
    seen = collections.Counter()
    keep, drop = [], []
    for item in items:
        key = (item.nodeid.split("::")[0], getattr(item, "originalname", item.name))
        (keep if seen[key] % every == 0 else drop).append(item)
        seen[key] += 1
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
