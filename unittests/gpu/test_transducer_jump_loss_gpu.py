"""tdt_loss / multiblank_rnnt_loss: the CUDA launchers (forward, then backward; in one step, and in the two steps
of the joiner composed in blocks: arc weights, then the loss on them) on a real GPU against the float64 lattice
references (the fuzz cases of fuzz_cases.transducer_jump_cases plus a realistic size; skips without a GPU)."""

import ctypes

import numpy as np
import pytest

import fuzz_cases as fc
import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64

_i64 = ctypes.c_int64


def _f(buf):
    return ctypes.c_void_p(buf.ptr) if buf is not None else ctypes.c_void_p(0)


def _run(c, dtype, steps):
    """(loss, logits_grad) of the launchers as float64, the grad of sum(weights * loss); steps 1 or 2."""
    logits = c["logits"]
    B, T, S1, X = logits.shape
    weights = np.linspace(0.5, 1.5, B)
    bound = c["clamp"] if c.get("clamp", -1) > 0 else np.inf
    x = DeviceBuffer(host_array(logits, dtype))
    sy = DeviceBuffer(np.ascontiguousarray(c["symbols"], np.int64))
    bd = None if c["boundary"] is None else DeviceBuffer(np.ascontiguousarray(c["boundary"], np.int64))
    lg = DeviceBuffer(host_array(weights, dtype))
    dx = DeviceBuffer(host_array(np.zeros(logits.shape), dtype))
    lattice = np.ascontiguousarray(c["lattice"], np.int64)
    shape = (_i64(B), _i64(T), _i64(S1 - 1), _i64(X), ctypes.c_int(c["kind"] == "multiblank"),
             lattice.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.c_int(len(lattice)), _i64(c["blank"]),
             ctypes.c_double(c["sigma"]), ctypes.c_double(c["fastemit_lambda"]), ctypes.c_double(bound))
    if steps == 1:
        lse = DeviceBuffer(np.zeros((B, T, S1, 4)))
        alpha, beta = DeviceBuffer(np.zeros((B, T + 1, S1))), DeviceBuffer(np.zeros((B, T + 1, S1)))
        loss = DeviceBuffer(host_array(np.zeros(B), dtype))
        check(library().pe_transducer_jump_loss(DTYPE_CODES[dtype], _f(x), _f(sy), _f(bd), _f(lg), _f(lse), _f(alpha),
                                                _f(beta), _f(loss), _f(dx), *shape))
        return to_float64(loss.get(), dtype), to_float64(dx.get(), dtype), weights
    # the loss on the weights gets each item's upstream grad, or with the clamp on 1 (then the arc weights' grad
    # scales by it)
    item_grad = np.ascontiguousarray(np.ones(B) if bound < np.inf else weights, np.float64)
    loss = DeviceBuffer(np.zeros(B))
    check(library().pe_transducer_jump_loss_two_steps(
        DTYPE_CODES[dtype], _f(x), _f(sy), _f(bd), item_grad.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), _f(lg),
        _f(loss), _f(dx), *shape))
    return to_float64(host_array(loss.get(), dtype), dtype), to_float64(dx.get(), dtype), weights


def _check(c, dtype, rtol, steps=1):
    logits = fc.round_to(c["logits"], dtype)
    c = dict(c, logits=logits)
    loss, grad, weights = _run(c, dtype, steps)
    tdt = c["kind"] == "tdt"
    args = (logits, c["symbols"], c["lattice"], c["blank"], c["boundary"], c["sigma"])
    ref = (refs.tdt_loss if tdt else refs.multiblank_loss)(*args)
    want = (refs.tdt_loss_grad if tdt else refs.multiblank_loss_grad)(*args, c["fastemit_lambda"], weights,
                                                                      c.get("clamp", -1.0))
    np.testing.assert_array_equal(np.isinf(loss), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(loss[finite], ref[finite], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(grad, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in fc.transducer_jump_cases()
                                  if c["logits"].size])
def test_fuzz_cases(case, steps):
    _check(case, "float64", 1e-9, steps)


@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("clamp", [-1.0, 0.01])
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-9), ("float32", 2e-5)])
@pytest.mark.parametrize("kind", ["tdt", "multiblank"])
def test_realistic_size(dtype, rtol, kind, clamp, steps):
    rng = np.random.default_rng(5)
    B, T, S, C = 2, 40, 12, 300
    lattice = [0, 1, 2, 3, 4] if kind == "tdt" else [2, 4, 8]
    X = C + (len(lattice) if kind == "tdt" else 0)
    case = dict(kind=kind, logits=rng.normal(0, 3, size=(B, T, S + 1, X)), lattice=lattice, blank=C - 1,
                symbols=rng.integers(0, C - 4, size=(B, S)).astype(np.int64),
                boundary=np.array([[0, 0, S, T], [1, 2, S - 3, T - 5]], np.int64), sigma=0.05, fastemit_lambda=0.1,
                clamp=clamp)
    _check(case, dtype, rtol, steps)
