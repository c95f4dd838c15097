"""put_along_axis against another build, bit for bit (unittests/ab_put_along_axis.py). Runs only with
PADDLE_EXT_BASELINE_PYTHON set to that build's interpreter (e.g. a checkout of main's .venv/bin/python)."""

import os
import sys

import pytest

import ab_put_along_axis

BASELINE = os.environ.get("PADDLE_EXT_BASELINE_PYTHON")


@pytest.mark.skipif(not BASELINE, reason="PADDLE_EXT_BASELINE_PYTHON is not set")
def test_outputs_and_grads_are_bit_identical_to_the_baseline_build():
    count, mismatches = ab_put_along_axis.compare(BASELINE, sys.executable)
    assert count > 0
    assert not mismatches, f"{len(mismatches)} of the arrays of {count} cases differ: {mismatches[:20]}"
