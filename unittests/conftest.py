import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")  # keep Paddle's interpreter chatter out of test logs
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded_dygraph():
    """Every test starts in dygraph mode with fixed seeds."""
    paddle.disable_static()
    paddle.seed(2024)
    np.random.seed(2024)
    yield
    paddle.disable_static()
