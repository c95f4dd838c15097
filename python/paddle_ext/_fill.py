"""``paddle.full_like`` and ``paddle.zeros_like`` without Paddle's warning in static programs.

Given no ``device``, Paddle 3.3.1's ``full_like`` (which ``zeros_like`` calls) reads ``x.place``; a PIR
value has none, so building a program warns "Tensor do not have 'place' interface for pir graph mode"
and then gives the op ``core.Place()``, the place of every op in a PIR program (a legacy-IR
``fill_any_like`` takes no place). Passing that place builds the same op without the warning
(unittests/test_export_warnings.py compares the programs); dygraph calls, and releases whose ``full_like``
takes no ``device``, are Paddle's own calls. Code that may run in a static program (to_static, export)
fills through these two.
"""

from __future__ import annotations

import inspect

import paddle
from paddle.base import core

_TAKES_DEVICE = "device" in inspect.signature(paddle.full_like).parameters


def full_like(x, fill_value, dtype=None):
    if paddle.in_dynamic_mode() or not _TAKES_DEVICE:
        return paddle.full_like(x, fill_value, dtype)
    return paddle.full_like(x, fill_value, dtype, device=core.Place())


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)
