import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")  # keep Paddle's interpreter chatter out of test logs
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

try:  # the GPU runtime suite (unittests/gpu) also runs on GPU machines that have no Paddle
    import paddle  # noqa: E402
except ImportError:
    paddle = None


@pytest.fixture(autouse=True)
def _seeded_dygraph():
    """Every test starts in dygraph mode with fixed seeds."""
    np.random.seed(2024)
    if paddle is None:
        yield
        return
    paddle.disable_static()
    paddle.seed(2024)
    yield
    paddle.disable_static()


def pytest_configure(config):
    config.addinivalue_line("markers", "install: builds a wheel and installs it into a fresh venv (minutes)")
