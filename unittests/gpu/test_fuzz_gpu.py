"""The differential fuzz suite (unittests/fuzz_cases.py, test_fuzz.py) on the CUDA launchers: the same
seeded adversarial cases through the ctypes shims, against the float64 references (skips without a GPU;
needs no Paddle). PADDLE_EXT_FUZZ=long runs the long mode here too.

Covered: logcumsumexp forward and backward (every dtype; the float tiles' lines too; the backward of lines
longer than 2000 on an evenly spaced sample of lines), put_along_axis forward
(every dtype the shims take; cases whose indices the Python API would broadcast are expanded here, the
broadcast=False-with-smaller-indices cases are API-level and skipped), mutual_information forward and
backward, adaptive_log_softmax target/full forward and backward (every dtype).
"""

import ctypes

import numpy as np
import pytest

import fuzz_cases as fc
import refs
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, to_float64
from test_adaptive_log_softmax_gpu import _dev, _f, _lse_dtype, _target_forward
from test_logcumsumexp_gpu import _run as _lcse_run
from test_mutual_information_gpu import _gpu as _mi_gpu
from test_put_along_axis_gpu import _forward as _put_forward

# The GPU kernels may round differently (other summation orders, float lanes): 4x the CPU tolerances.
GPU_RTOL = {k: 4 * v for k, v in fc.RTOL.items()}


def _params(cases):
    return [pytest.param(c, id=c["id"]) for c in cases]


def _shape3(shape, axis):
    """(outer, n, inner) of a C-contiguous array scanned along axis (None: flattened)."""
    if axis is None:
        return 1, int(np.prod(shape)), 1
    if len(shape) == 0:
        return 1, 1, 1
    a = axis % len(shape)
    return int(np.prod(shape[:a])), int(shape[a]), int(np.prod(shape[a + 1:]))


@pytest.mark.parametrize("case", _params(list(fc.logcumsumexp_cases()) + list(fc.logcumsumexp_block_cases())
                                         + list(fc.logcumsumexp_thread_cases()) + list(fc.logcumsumexp_tile_cases())))
def test_logcumsumexp_gpu(case):
    c = case
    x, g, axis, dtype = c["x"], c["g"], c["axis"], c["dtype"]
    shape3 = _shape3(x.shape, axis)
    if 0 in shape3:
        pytest.skip("empty: the binding returns before any launch")
    ref = refs.logcumsumexp(x, axis, c["exclusive"], c["reverse"])
    got = _lcse_run("pe_logcumsumexp_forward", dtype, [x], shape3, c["exclusive"], c["reverse"])
    scale = fc.finite_scale(x)
    fc.assert_matches(got.reshape(ref.shape), ref, dtype, scale, "logcumsumexp", GPU_RTOL[dtype])
    # the backward gets the forward output in its dtype; the reference uses that same rounded output
    out = fc.round_to(ref, dtype).reshape(x.shape)
    got_g = _lcse_run("pe_logcumsumexp_backward", dtype, [x, out, g.reshape(x.shape)], shape3, c["exclusive"],
                      c["reverse"])
    outer, n, inner = shape3
    lines = lambda z: np.asarray(z, np.float64).reshape(shape3).transpose(0, 2, 1).reshape(outer * inner, n)
    xl, ol, gl, got_l = (lines(z) for z in (x, out, g, got_g))
    # the dense reference costs n^2 per line: past 2e8 terms, an evenly spaced sample of lines; past 4096 per
    # line, the O(n) scan reference, on the lines it covers (no NaN or +inf: those the dense one defines)
    take = np.unique(np.linspace(0, xl.shape[0] - 1, max(1, min(xl.shape[0], int(2e8) // (n * n)))).astype(int))
    if n > 4096:
        take = np.flatnonzero(~(np.isnan(xl) | np.isposinf(xl)).any(axis=1))
    if take.size == 0:
        pytest.skip("every line holds NaN or +inf and is longer than the dense reference allows")
    xl, ol, gl, got_l = xl[take], ol[take], gl[take], got_l[take]
    grad_ref = refs.logcumsumexp_grad_dense if n <= 4096 else refs.logcumsumexp_grad_scan
    ref_g = grad_ref(xl, gl, 1, c["exclusive"], c["reverse"], out=ol)
    if dtype in ("float64", "float32"):
        fc.assert_matches(got_l, ref_g, dtype, scale * fc.finite_scale(g) * np.sqrt(n), "logcumsumexp grad",
                          GPU_RTOL[dtype])
    else:  # 16-bit: float32 terms and sums, one rounding at the end. Each term exp(x - out) is off by the float32
        # rounding of x and out (|x| + |out| <= 2 (scale + log n) units), the sum by n units, of sum|terms|
        terms = grad_ref(xl, np.abs(gl), 1, c["exclusive"], c["reverse"], out=ol)
        units = n + 16 + 2 * (scale + np.log(max(n, 1)))
        fc.assert_matches(got_l, ref_g, dtype, 0.0, "logcumsumexp grad", GPU_RTOL[dtype],
                          atol=4 * units * fc.ACC_EPS[dtype] * np.nan_to_num(terms, posinf=0.0))


@pytest.mark.parametrize("case", _params(list(fc.put_along_axis_cases()) + list(fc.put_along_axis_path_cases())))
def test_put_along_axis_gpu(case):
    c = case
    dtype = c["dtype"]
    if dtype not in DTYPE_CODES:
        pytest.skip(f"the shims take no {dtype}")
    arr, idx, vals, axis = c["arr"], c["indices"], c["values"], c["axis"]
    ax = axis % arr.ndim
    target = list(arr.shape)
    target[ax] = idx.shape[ax]
    if c["broadcast"]:
        idx, vals = np.broadcast_to(idx, target), np.broadcast_to(vals, target)
    elif list(idx.shape) != target:
        pytest.skip("broadcast=False with indices smaller than arr: handled above the launchers")
    else:
        vals = vals[tuple(slice(0, s) for s in idx.shape)]
    outer, n, inner = _shape3(arr.shape, ax)
    m = idx.shape[ax]
    if outer * n * inner == 0:
        pytest.skip("empty")
    shape4 = (outer, n, m, inner)
    floating = dtype in fc.FLOAT_DTYPES
    a3 = arr.reshape(outer, n, inner) if floating else arr.reshape(outer, n, inner).astype(dtype)
    v3 = np.ascontiguousarray(vals).reshape(outer, m, inner)
    v3 = v3 if floating else v3.astype(dtype)
    i3 = np.ascontiguousarray(idx).reshape(outer, m, inner).astype(c["index_dtype"])
    got = _put_forward(dtype, c["reduce"], a3, i3, v3, shape4, c["include_self"])
    ref = refs.put_along_axis(a3, i3.astype(np.int64), v3, 1, c["reduce"], c["include_self"], broadcast=False)
    if floating:  # each slot's own contributors bound its error (fc.put_slot_bounds); 4x for other orders;
        # add / mean accumulate with float atomics, which flush subnormal sums to zero (float64's do not)
        atol = fc.put_slot_bounds(a3, i3, v3, 1, c["reduce"], c["include_self"], dtype, ref, np.zeros(a3.shape),
                                  np.zeros(i3.shape), flush_subnormals=True)[0]
        fc.assert_matches(got, ref, dtype, 0.0, "put_along_axis", GPU_RTOL[dtype], atol=4 * atol)
    else:
        fc.assert_matches(got, np.asarray(ref, dtype=np.int64), dtype, 0.0, "put_along_axis", 0.0)


def _mi_multi_warp_cases():
    """Every mix on shapes that give the CUDA band kernels several warps (S + 1 > 32: 2..5 bands, both
    instantiations, S + 1 = 128 and 129 at the switch; 512, 513 and 601 rows: one pass, two passes),
    both modes and dtypes, boxes or none."""
    mixes = ("normal", "x1e3", "spikes", "spread700", "neginf", "posinf", "nan", "all_equal", "ties", "mixed")
    for seed, mix in enumerate(mixes * 2):
        rng = fc.rng_for("mutual_information_gpu_warps", seed)
        modified = bool(seed % 2)
        dtype = ("float64", "float32")[(seed // 2) % 2]
        B = int(rng.choice([1, 2, 3]))
        S = int(rng.choice([32, 33, 64, 100, 127, 128, 150, 511, 512, 600]))
        T = int(rng.integers(S if modified else 0, S + 90))
        px = fc.mi_values(rng, (B, S, T if modified else T + 1), mix, dtype)
        py = fc.mi_values(rng, (B, S + 1, T), mix, dtype)
        boundary = fc.mi_boundary(rng, B, S, T, modified) if seed % 3 else None
        yield dict(id=f"mi-warps-{seed}-{dtype}-{'mod' if modified else 'reg'}-{mix}-B{B}S{S}T{T}-bd{boundary is not None}",
                   px=px, py=py, boundary=boundary, dtype=dtype, modified=modified,
                   ans_grad=rng.uniform(0.5, 1.5, size=B))


@pytest.mark.parametrize("case", _params(list(fc.mutual_information_cases()) + list(fc.mutual_information_band_cases())
                                         + list(_mi_multi_warp_cases())))
def test_mutual_information_gpu(case):
    c = case
    px, py, boundary, dtype = c["px"], c["py"], c["boundary"], c["dtype"]
    if px.shape[0] == 0:
        pytest.skip("empty batch")
    ans, gx, gy = _mi_gpu(px, py, boundary, dtype, c["ans_grad"], grad_fill=np.nan)  # every grad written
    ref_ans, _ = refs.mutual_information_wavefront(px, py, boundary)
    rgx, rgy = refs.mutual_information_grad_wavefront(px, py, boundary, c["ans_grad"])
    scale = fc.finite_scale(px, py) * (px.shape[1] + py.shape[2] + 1)
    fc.assert_matches(ans, ref_ans, dtype, scale, "ans", GPU_RTOL[dtype])
    fc.assert_matches(gx, rgx, dtype, scale, "px grad", GPU_RTOL[dtype])
    fc.assert_matches(gy, rgy, dtype, scale, "py grad", GPU_RTOL[dtype])


@pytest.mark.parametrize("case", _params(list(fc.adaptive_log_softmax_cases())
                                         + list(fc.adaptive_log_softmax_thread_cases())))
def test_adaptive_log_softmax_gpu(case):
    c = case
    x, dtype, g = c["logits"], c["dtype"], c["g"]
    m, k = x.shape
    if m == 0:
        pytest.skip("empty")
    scale = fc.finite_scale(x)
    rt = GPU_RTOL[dtype]
    lib = library()
    if c["op"] == "target":
        t = c["target"].astype(np.int64)
        out, lse = _target_forward(x, t, dtype)
        fc.assert_matches(out, refs.adaptive_log_softmax_target(x, t), dtype, scale, "target", rt)
        lse_d = _dev(lse, _lse_dtype(dtype))
        dx = _dev(np.zeros(x.shape), dtype)
        check(lib.pe_als_target_backward(DTYPE_CODES[dtype], _f(_dev(x, dtype)), _f(DeviceBuffer(t)), _f(lse_d),
                                         _f(_dev(g, dtype)), _f(dx), ctypes.c_int64(m), ctypes.c_int64(k)))
        fc.assert_matches(to_float64(dx.get(), dtype), refs.adaptive_log_softmax_target_grad(x, t, g), dtype,
                          scale * fc.finite_scale(g), "target grad", rt)
        return
    off = c["offset"]
    out, lse = _dev(np.zeros(x.shape), dtype), _dev(np.zeros(m), _lse_dtype(dtype))
    xd = _dev(x, dtype)
    check(lib.pe_als_full_forward(DTYPE_CODES[dtype], _f(xd), _f(_dev(off, dtype)), _f(out), _f(lse),
                                  ctypes.c_int64(m), ctypes.c_int64(k)))
    fc.assert_matches(to_float64(out.get(), dtype), refs.adaptive_log_softmax_full(x, off), dtype,
                      fc.finite_scale(x, off), "full", rt)
    dx, doff = _dev(np.zeros(x.shape), dtype), _dev(np.zeros(m), dtype)
    check(lib.pe_als_full_backward(DTYPE_CODES[dtype], _f(xd), _f(lse), _f(_dev(g, dtype)), _f(dx), _f(doff),
                                   ctypes.c_int64(m), ctypes.c_int64(k)))
    ref_gx, ref_goff = refs.adaptive_log_softmax_full_grad(x, g)
    fc.assert_matches(to_float64(dx.get(), dtype), ref_gx, dtype, fc.finite_scale(g) * scale * k, "full grad", rt)
    fc.assert_matches(to_float64(doff.get(), dtype), ref_goff, dtype, fc.finite_scale(g) * k, "offset grad", rt)
