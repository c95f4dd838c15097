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


def pytest_addoption(parser):
    parser.addoption("--fuzz", choices=("ci", "long"), default=None,
                     help="fuzz suite size (test_fuzz.py): 'long' runs ~20x the cases (as PADDLE_EXT_FUZZ=long)")


def pytest_configure(config):
    config.addinivalue_line("markers", "install: builds a wheel and installs it into a fresh venv (minutes)")
    # fuzz_cases reads the mode from the environment (also in the per-SIMD-width subprocesses)
    if config.getoption("--fuzz", default=None):
        os.environ["PADDLE_EXT_FUZZ"] = config.getoption("--fuzz")
