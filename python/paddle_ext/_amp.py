"""paddle_ext's ops under ``paddle.amp.auto_cast`` (docs/architecture.md, "Mixed precision").

Paddle's AMP picks an op's compute dtype by the op's name: black-list ops (exp, log_softmax, cumsum,
cross_entropy, ...) run in float32 at O1, white-list ops (matmul) in float16/bfloat16, and the rest
in their inputs' widest dtype ("promote"). It knows nothing of custom ops and passes them through
unchanged, so each public function applies the rule of its built-in counterpart itself, with these
helpers:

* ``float32_at_o1``: logsumexp-like ops (logcumsumexp, the adaptive-softmax ops), black-listed as
  cumsum/log_softmax are: float32 at O1 (and OD), their input's dtype at O2.
* ``promote``: put_along_axis, on no list (as paddle.put_along_axis): mixed floating dtypes are
  promoted to the widest.
* ``float32_op``: the lattice recursion and the RNN-T losses always compute in float32 (float64
  stays float64), with auto_cast off inside so that no step (e.g. a matmul) drops to 16 bits; a
  float16/bfloat16 input gives results in its dtype, and under auto_cast the results stay float32, as
  Paddle's losses (cross_entropy) return them. ``moved_in_float32``: do_rnnt_pruning, a gather.

Outside auto_cast every op returns its input's dtype; 16-bit inputs are computed in float32 inside.
On CPU, dygraph auto_cast has no effect (Paddle disables it there); static graphs (to_static with
auto_cast inside) do apply it on CPU.
"""

from __future__ import annotations

import contextlib
import sys

import paddle
from paddle.base import core
from paddle.base.core import DataType
from paddle.base.framework import _dygraph_tracer, in_pir_mode

from . import _library
from ._checks import FLOATING_DTYPES, TENSOR_TYPES, Dtypes, canonical_dtype, is_plain_float

HALF_DTYPES = Dtypes((DataType.FLOAT16, DataType.BFLOAT16))

# Every public call asks these questions, so they are answered cheaply on the common path (a dygraph
# float32 call outside auto_cast): dtypes are looked up in sets (comparing paddle dtypes by value
# costs microseconds) and the level is read from Paddle's state directly.


# paddle.amp.auto_cast's module (its name is shadowed by the function): every AMP level, dygraph and PIR, is
# set inside its amp_guard, which records its state there; None means no auto_cast is entered (level O0).
_amp_state = getattr(sys.modules.get("paddle.amp.auto_cast"), "amp_state", None)


_FLOAT32, _FLOAT64, _INT64 = DataType.FLOAT32, DataType.FLOAT64, DataType.INT64


def no_auto_cast_entered() -> bool:
    """True when no paddle.amp.auto_cast block is open, so the level is O0 (a cheap test; False where unsure)."""
    return _amp_state is not None and _amp_state() is None


def fast_lane(floats, others=()) -> bool:
    """Whether a call may take its family's fast lane: dygraph outside auto_cast and SOT tracing, ``floats``
    float32/float64 CPU tensors, ``others`` int64 CPU tensors (or None). The lane leaves shape, dtype and value
    checks to the CPU kernels; run it with ``first_try`` so that input they refuse goes through the full path,
    whose checks raise the Python errors. The mode comes first: under SOT no tensor attribute is read here
    (a read moves the graph breaks, and the compiled loss's last digits with them)."""
    if not (paddle.in_dynamic_mode() and no_auto_cast_entered() and not _library.in_sot_simulation_mode()):
        return False
    for x in floats:
        if x.__class__ is not paddle.Tensor:
            return False
        dtype = x.dtype
        if not (dtype is _FLOAT32 or dtype is _FLOAT64) or not _library.is_cpu(x):
            return False
    for t in others:
        if t is not None and (t.__class__ is not paddle.Tensor or t.dtype is not _INT64 or not _library.is_cpu(t)):
            return False
    return True


class TakeFullPath(Exception):
    """Raised by a fast lane for input that its kernels would accept but the full path's checks refuse."""


def first_try(fast, full, *args):
    """fast(*args), or full(*args) where fast raises what bad input raises (a kernel's refusal: ValueError,
    IndexError; a dispatcher's: TypeError; TakeFullPath). full runs every check first, so the user gets its
    errors, in its order; fast must have no effect that outlives it (no inplace write)."""
    try:
        return fast(*args)
    except (TypeError, ValueError, IndexError, TakeFullPath):
        pass
    return full(*args)


def _level():
    """Paddle's AmpLevel in force (its int is 0 for O0), or None (legacy static mode: no auto_cast)."""
    if in_pir_mode():
        return core._get_amp_attrs()._amp_level
    tracer = _dygraph_tracer()
    return tracer._amp_level if tracer is not None else None


def autocast() -> bool:
    """Whether auto_cast is in force (it is not in dygraph on CPU, where Paddle turns it off)."""
    if no_auto_cast_entered():
        return False
    level = _level()
    return level is not None and int(level) != 0


def amp_level() -> str:
    """'O0' outside auto_cast (or where it has no effect), else the level in force: 'O1', 'O2' or 'OD'."""
    return _level().name if autocast() else "O0"


def is_half(x) -> bool:
    return isinstance(x, TENSOR_TYPES) and x.dtype in HALF_DTYPES


def _is_float(x) -> bool:
    return isinstance(x, TENSOR_TYPES) and x.dtype in FLOATING_DTYPES


def float32(x):
    """x cast to float32 if it is float16/bfloat16 (a differentiable cast), else x."""
    return x.astype("float32") if is_half(x) else x


def float32_at_o1(x):
    """A black-list op's input: float16/bfloat16 becomes float32 at O1 and OD; O2 keeps it."""
    if no_auto_cast_entered():
        return x
    return float32(x) if is_half(x) and amp_level() in ("O1", "OD") else x


def promote(a, b):
    """(a, b) in the wider of their floating dtypes under auto_cast (Paddle's rule for an op on neither
    list); unchanged outside it, where a dtype mismatch stays the caller's error."""
    if not autocast() or not (_is_float(a) and _is_float(b)) or a.dtype == b.dtype:
        return a, b
    wide = max(a.dtype, b.dtype, key=lambda d: FLOATING_DTYPES.index(canonical_dtype(d)))  # narrow to wide
    return a.astype(wide), b.astype(wide)


def cast_like(values, arr):
    """An inplace op's values in arr's floating dtype under auto_cast (arr's dtype cannot change)."""
    if not autocast() or not (_is_float(values) and _is_float(arr)) or values.dtype == arr.dtype:
        return values
    return values.astype(arr.dtype)


def float32_op(fn, n, *args):
    """fn(*args) for a float32 op whose first n arguments are its floating tensors. With 16-bit inputs
    of one dtype, or under auto_cast, fn runs with auto_cast off on float32 casts of them (differentiable,
    so their grads come back in their dtype), and its floating results are cast to that 16-bit dtype,
    or stay float32 under auto_cast. Integer results (ranges) pass through. Otherwise fn(*args) as is."""
    floats = args[:n]
    if no_auto_cast_entered() and _all_plain_floats(floats):
        return fn(*args)  # the common case, told cheaply: dygraph float32/float64 tensors outside auto_cast
    on = autocast()
    if not on and not any(is_half(x) for x in floats):
        return fn(*args)  # the common case
    if not all(_is_float(x) for x in floats) or (not on and len({str(x.dtype) for x in floats}) > 1):
        return fn(*args)  # not floating tensors, or mixed dtypes outside auto_cast: fn's checks name them
    # (a legacy-IR program has no auto_cast, and Paddle refuses the guard there)
    with paddle.amp.auto_cast(enable=False) if _level() is not None else contextlib.nullcontext():
        out = fn(*[float32(x) for x in floats], *args[n:])
    return out if on else _cast_floats(out, floats[0].dtype)


@paddle.jit.not_to_static
def _all_plain_floats(tensors) -> bool:
    for x in tensors:
        if not is_plain_float(x):
            return False
    return True


def moved_in_float32(fn, n, *args):
    """fn(*args) for an op that only moves its first n floating tensors (no arithmetic), returning one
    result per such input: 16-bit inputs go through as float32 (Paddle's CPU gathers have no 16-bit
    kernels) and each result comes back in its input's dtype, exactly, with or without auto_cast."""
    if not any(is_half(x) for x in args[:n]):
        return fn(*args)
    out = fn(*[float32(x) for x in args[:n]], *args[n:])
    return tuple(o.astype(x.dtype) if is_half(x) else o for o, x in zip(out, args[:n]))


def _cast_floats(out, dtype):
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_floats(o, dtype) for o in out)
    return out.astype(dtype) if _is_float(out) and out.dtype != dtype else out
