import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_runtime import release_pending  # noqa: E402


@pytest.fixture(autouse=True)
def _free_device_buffers_after_each_test():
    yield
    release_pending()
