"""Differential fuzz suite: every op x mode x dtype on adversarial inputs (unittests/fuzz_cases.py) through
the Paddle API, forward and grads, against the float64 references of unittests/refs.

Comparison rules (assert_matches): NaN, +inf and -inf exactly where the reference (rounded to the output
dtype) has them; finite values within rtol * |ref| + atol, where rtol is 1e-12 for float64, 1e-5 for
float32 (the reference runs on the same rounded inputs), 2e-3 / 1.6e-2 for float16 / bfloat16, and atol
is rtol times the data's scale (outputs such as m + log(sum) carry the absolute error of m). put_along_axis
bounds each slot by its own contributors (fc.put_slot_bounds): exact for assign / amin / amax, c * eps *
sum|terms| for add and mean, (c + 2) * (eps * |result| + tiny) for products and the mul grads (eps, tiny:
the accumulation's unit roundoff and smallest subnormal, float32's for the 16-bit types).

Fast paths reached (the CPU kernels pick them from sizes, values, PADDLE_EXT_SIMD and the thread
count): logcumsumexp's blocked row scan (kChunk = 512) and strided column scan (kColumns = 256) with
their per-chunk fallbacks (NaN / +inf / > 640 in log space), float lanes with the double redo, the
single long row split over two threads; put_along_axis's flat (last axis) and generic kernels, the
row-uniform ("graph") rows, AVX-512 masked gathers (float32 / int64 add grads); mutual_information's
16-cell block scan, the banded wavefront (B = 1, large S x T, two threads) and items in parallel;
adaptive_log_softmax's vector rows (every remainder of the lane count) and the scalar fallback rows,
rows split over threads. test_fast_paths_under_other_widths_and_threads reruns the kernel-level cases
with PADDLE_EXT_SIMD=avx2 and one thread, and with PADDLE_EXT_SIMD=sse2 and two threads (this process:
the widest width the CPU has, and two threads where OMP gives two), and the put_along_axis cases with
PADDLE_EXT_PUT_TILE=small at one and two threads (tiny partition tiles: the destination-partitioned
forward and backward passes, which otherwise need > 2 MiB of destination per thread).

Planted bugs the suite is known to catch (each planted in the kernel, rebuilt, seen to fail here, reverted;
the last three planted through the Python API):
  * logcumsumexp row scan, the > kMaxRange chunk fallback disabled (cpu/logcumsumexp/, the double
    chunk scan): lcse-block-0 (wide chunk edge), lcse-threads (64, 1100) spread700, x1e3 rows.
  * logcumsumexp strided column scan, its > kMaxRange lane-block fallback disabled (ForwardColumns):
    x1e3 / spread700 cases on axis 0 with 300 columns, lcse-threads (1100, 64).
  * float-lane horizontal reduce missing one butterfly step at SSE2's width only (L == 4): caught
    only by the PADDLE_EXT_SIMD=sse2 subprocess (float32 +inf cases), not at AVX2 / AVX-512.
  * put_along_axis row-uniform detection always true (every index row treated as one destination):
    every put-path-scattered case and random-pattern cases with inner > 1.
  * put_along_axis AVX-512 masked gather without the wrap of negative indices: put-path-flat-add-
    float32-int64 (values grad).
  * put_along_axis destination-partitioned pass (bucket_part) dropping the last entry of each block's
    list: caught only by the PADDLE_EXT_PUT_TILE=small subprocesses (38 cases fail at 1 thread, 30 at 2:
    put-path-bucket_columns, -bucket_outer, -scattered, -row_uniform with negative indices), not by this
    process (234 put_along_axis cases pass).
  * put_along_axis partition split by index rows (bucket_rows), the threads' lists of a block applied in
    reverse thread order: caught only by the PADDLE_EXT_PUT_TILE=small subprocess at 2 threads (4 cases:
    put-path-bucket_columns and -bucket_hot with assign).
  * mutual_information banded wavefront, a row skipped at each band boundary (two threads, B = 1):
    mi-band-B1S127T1100 (the other band cases fail for known bug 1 on spread700 data).
  * mutual_information scan_block without the non-finite py check: -inf / +inf mixtures (mi-18, mi-19,
    mi-23, mi-57, mi-band-B4 neginf).
  * adaptive_log_softmax sum_row dropping the last element of a partial vector (remainder lanes): ~20
    target/full cases in every dtype, and the rows split over threads.
  * put_along_axis float16 / bfloat16 add and mean accumulating in their own dtype: put-74-float16-mean.
  * put_along_axis mul values grad 0.1% off: 19 mul cases (float32 and float64, every path).
  * put_along_axis add / mean dropping the last contribution of each slot hit twice or more: 41 cases.
  Not caught, because it is not a bug: letting +inf / all -inf rows take the vector lse (als_lse handles
  an infinite maximum the same way), planted as a candidate and seen to change no output.

Long mode: PADDLE_EXT_FUZZ=long (or pytest --fuzz=long) runs ~20x the cases with larger shapes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import fuzz_cases as fc
import fuzz_cases_complex as fcc
import paddle_ext
import refs
from paddle_ext.nn.functional import adaptive_log_softmax_with_loss
from paddle_ext.rnnt_loss.common import NO_CLAMP

SUBPROCESS = bool(os.environ.get("PADDLE_EXT_FUZZ_SUBPROCESS"))


def _params(cases):
    return [pytest.param(c, id=c["id"]) for c in cases]


def _tensor(x, dtype, view=None, grad=False):
    """A Paddle tensor of dtype holding x; view 'transpose' / 'stride' makes it a non-contiguous view."""
    x = np.asarray(x)
    if view == "transpose" and x.ndim >= 2:
        t = paddle.to_tensor(np.ascontiguousarray(np.swapaxes(x, 0, -1))).astype(dtype).transpose(
            [x.ndim - 1] + list(range(1, x.ndim - 1)) + [0])
    elif view == "stride" and x.ndim >= 1:
        big = np.repeat(x, 2, axis=-1)
        t = paddle.to_tensor(big).astype(dtype)[..., ::2]
    else:
        t = paddle.to_tensor(x).astype(dtype)
    if grad:
        t.stop_gradient = False
    return t


def _np(t):
    return t.astype("float64").numpy() if t.dtype not in (paddle.int32, paddle.int64, paddle.int16, paddle.uint8) \
        else t.numpy().astype(np.int64)


# ---------------------------------------------------------------------------------------- logcumsumexp
LCSE = _params(list(fc.logcumsumexp_cases()) + list(fc.logcumsumexp_block_cases()))
LCSE_THREADS = _params(fc.logcumsumexp_thread_cases())


def _check_logcumsumexp(c, grad_rows=None):
    x, g, axis, dtype = c["x"], c["g"], c["axis"], c["dtype"]
    t = _tensor(x, dtype, c["view"], grad=True)
    out = paddle_ext.logcumsumexp(t, axis=axis, exclusive=c["exclusive"], reverse=c["reverse"])
    ref = refs.logcumsumexp(x, axis, c["exclusive"], c["reverse"])
    scale = fc.finite_scale(x)
    fc.assert_matches(_np(out), ref, dtype, scale, "logcumsumexp")
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g.reshape(ref.shape)).astype(dtype))
    got = _np(gx)
    n = x.size if axis is None else (x.shape[axis] if x.ndim else 1)
    if n > 4096:
        return  # the split single row is a forward path; the dense reference needs n^2 memory
    if axis is None:
        ref_g = refs.logcumsumexp_grad_dense(x.reshape(-1), g.reshape(-1), 0, c["exclusive"], c["reverse"])
        ref_g = ref_g.reshape(x.shape)
    elif grad_rows is not None and x.ndim == 2:  # the big cases: a sample of lines
        a = axis % 2
        lines = np.unique(np.linspace(0, x.shape[1 - a] - 1, grad_rows).astype(int))
        take = (lambda z: np.take(z, lines, axis=1 - a))
        ref_g = refs.logcumsumexp_grad_dense(take(x), take(g), axis, c["exclusive"], c["reverse"])
        got = take(got)
    elif x.size == 0 or x.ndim == 0 or x.size // n * n * n <= int(2e8):
        ref_g = refs.logcumsumexp_grad_dense(x, g, axis, c["exclusive"], c["reverse"])
    else:
        # the dense reference costs n^2 per line: past ~2e8 terms, check an evenly spaced sample of lines
        xl, gl, got_l = (np.moveaxis(z, axis, -1).reshape(-1, n) for z in (x, g.reshape(x.shape), got))
        lines = np.unique(np.linspace(0, xl.shape[0] - 1, max(1, int(2e8) // (n * n))).astype(int))
        xl, gl, got = xl[lines], gl[lines], got_l[lines]
        ref_g = refs.logcumsumexp_grad_dense(xl, gl, 1, c["exclusive"], c["reverse"])
    # grads are sums of up to n terms g * exp(x - out), each with the absolute error of x - out
    fc.assert_matches(got, ref_g, dtype, scale * fc.finite_scale(g) * max(1.0, np.sqrt(n)), "logcumsumexp grad")


@pytest.mark.parametrize("case", LCSE)
def test_logcumsumexp(case):
    _check_logcumsumexp(case)


@pytest.mark.parametrize("case", LCSE_THREADS)
def test_logcumsumexp_threads(case):
    _check_logcumsumexp(case, grad_rows=6)


# -------------------------------------------------------------------------------- complex logcumsumexp
LCSE_COMPLEX = _params(fcc.logcumsumexp_complex_cases())
MAX_GRAD_TERMS = int(2e7)  # the reference grad is n^2 per line: check a sample of lines past this


@pytest.mark.parametrize("case", LCSE_COMPLEX)
def test_logcumsumexp_complex(case):
    x, g, axis, dtype, flags = case["x"], case["g"], case["axis"], case["dtype"], (case["exclusive"], case["reverse"])
    t = _tensor(x, dtype, case["view"], grad=True)
    out = paddle_ext.logcumsumexp(t, axis=axis, exclusive=flags[0], reverse=flags[1])
    assert out.dtype == getattr(paddle, dtype)
    ref = refs.logcumsumexp(x, axis, *flags)
    fcc.assert_complex_matches(out.numpy(), ref, fcc.forward_bound(x, ref, axis, *flags, dtype), "logcumsumexp")
    (gx,) = paddle.grad(out, t, grad_outputs=paddle.to_tensor(g.reshape(ref.shape)).astype(dtype))
    got = gx.numpy()
    if axis is None:
        x, g, got, axis = x.reshape(-1), g.reshape(-1), got.reshape(-1), 0
    n = x.shape[axis] if x.ndim else 1
    if n > 4096:
        return  # the reference grad needs n^2 memory
    if x.ndim and n and x.size // n * n * n > MAX_GRAD_TERMS:  # an evenly spaced sample of lines
        x, g, got = (np.moveaxis(z, axis, -1).reshape(-1, n) for z in (x, g, got))
        lines = np.unique(np.linspace(0, x.shape[0] - 1, max(1, MAX_GRAD_TERMS // (n * n))).astype(int))
        x, g, got, axis = x[lines], g[lines], got[lines], 1
    ref_out = refs.logcumsumexp(x, axis, *flags)
    ref_g = refs.logcumsumexp_grad(x, g, axis, *flags)
    bound = fcc.grad_bound(x, g, ref_out, ref_g, axis, *flags, dtype)
    fcc.assert_complex_matches(got, ref_g, bound, "logcumsumexp grad", phase=False)


# -------------------------------------------------------------------------------------- put_along_axis
PUT = _params(list(fc.put_along_axis_cases()) + list(fc.put_along_axis_path_cases())
              + list(fc.put_along_axis_broadcast_values_cases()))


def _put_inputs(c):
    arr, idx, vals, axis = c["arr"], c["indices"], c["values"], c["axis"]
    ax = axis % arr.ndim
    if c["broadcast"]:
        target = list(arr.shape)
        target[ax] = idx.shape[ax]
        idx_full, vals_full = np.broadcast_to(idx, target), np.broadcast_to(vals, target)
    else:
        idx_full, vals_full = idx, vals
    return arr, idx, vals, ax, idx_full, vals_full


@pytest.mark.parametrize("case", PUT)
def test_put_along_axis(case):
    c = case
    dtype, floating = c["dtype"], c["dtype"] in fc.FLOAT_DTYPES
    arr, idx, vals, ax, idx_full, vals_full = _put_inputs(c)
    grad = floating and dtype in ("float64", "float32") and not c["scalar_values"]
    ta = _tensor(arr, dtype, c["view"], grad=grad)
    ti = paddle.to_tensor(idx.astype(c["index_dtype"]))
    scalar = vals.reshape(-1)[0].item() if vals.size else 0.0
    if c["scalar_values"]:
        scalar = float(scalar) if floating else int(scalar)
        vals_full = np.full(idx_full.shape, scalar if floating else scalar, dtype=vals.dtype)
        tv = scalar
    else:
        tv = _tensor(vals, dtype, grad=grad)
    out = paddle_ext.put_along_axis(ta, ti, tv, c["axis"], reduce=c["reduce_arg"], include_self=c["include_self"],
                                    broadcast=c["broadcast"])
    ref_in = arr if floating else arr.astype(dtype)
    ref = refs.put_along_axis(ref_in, idx_full, vals_full if floating else vals_full.astype(dtype), ax, c["reduce"],
                              c["include_self"], broadcast=False)
    if floating:
        g = fc.round_to(np.random.default_rng(0).normal(size=arr.shape), dtype)
        ref_ga, ref_gv = refs.put_along_axis_grad(arr, idx_full, vals_full, g, ax, c["reduce"], c["include_self"]) \
            if grad else (np.zeros(arr.shape), np.zeros(idx_full.shape))
        atol, atol_ga, atol_gv = fc.put_slot_bounds(arr, idx_full, vals_full, ax, c["reduce"], c["include_self"],
                                                    dtype, ref, ref_ga, ref_gv)
        fc.assert_matches(_np(out), ref, dtype, 0.0, "put_along_axis", atol=atol)
    else:
        fc.assert_matches(_np(out), ref, dtype, 0.0, "put_along_axis", rtol=0.0)
    if not grad:
        return
    ga, gv = paddle.grad(out, [ta, tv], grad_outputs=paddle.to_tensor(g).astype(dtype), allow_unused=True)
    _assert_put_grads(c, ga, gv, arr, vals, ref_ga, ref_gv, atol_ga, atol_gv)


def _assert_put_grads(c, ga, gv, arr, vals, ref_ga, ref_gv, atol_ga, atol_gv):
    """The grads against the references of the positions' grads, folded to the values passed."""
    dtype = c["dtype"]
    gv_terms = None  # values broadcast by the op: their grad sums the positions' (bounded by the terms' sum)
    if c["broadcast"]:
        if ref_gv.shape != vals.shape:
            lead = ref_gv.ndim - vals.ndim
            axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(vals.shape) if s == 1)
            squeeze = lambda z: z.sum(axis=axes, keepdims=True).reshape(vals.shape)
            gv_terms, ref_gv, atol_gv = squeeze(np.abs(ref_gv)), squeeze(ref_gv), squeeze(atol_gv)
    elif ref_gv.shape != vals.shape:  # the unused part of bigger values gets no grad
        padded, padded_atol = np.zeros(vals.shape), np.zeros(vals.shape)
        padded[tuple(slice(0, s) for s in ref_gv.shape)] = ref_gv
        padded_atol[tuple(slice(0, s) for s in ref_gv.shape)] = atol_gv
        ref_gv, atol_gv = padded, padded_atol
    fc.assert_matches(_np(ga) if ga is not None else np.zeros(arr.shape), ref_ga, dtype, 0.0, "arr grad",
                      atol=atol_ga)
    fc.assert_matches(_np(gv) if gv is not None else np.zeros(vals.shape), ref_gv, dtype, 0.0, "values grad",
                      abs_scale=gv_terms, atol=atol_gv)


INPLACE = _params([c for c in fc.put_along_axis_cases() if c["arr"].ndim >= 2 and not c["scalar_values"]][::3])


@pytest.mark.parametrize("case", INPLACE)
def test_put_along_axis_inplace_writes_through_views(case):
    """put_along_axis_ writes into the tensor passed (a transposed view: into its base too)."""
    c = case
    dtype = c["dtype"]
    arr, idx, vals, ax, idx_full, vals_full = _put_inputs(c)
    base = paddle.to_tensor(np.ascontiguousarray(np.swapaxes(arr, 0, -1))).astype(dtype)
    view = base.transpose([arr.ndim - 1] + list(range(1, arr.ndim - 1)) + [0])
    floating = dtype in fc.FLOAT_DTYPES
    ref = refs.put_along_axis(arr if floating else arr.astype(dtype), idx_full,
                              vals_full if floating else vals_full.astype(dtype), ax, c["reduce"], c["include_self"],
                              broadcast=False)
    paddle_ext.put_along_axis_(view, paddle.to_tensor(idx.astype(c["index_dtype"])), _tensor(vals, dtype), c["axis"],
                               reduce=c["reduce_arg"], include_self=c["include_self"], broadcast=c["broadcast"])
    atol = fc.put_slot_bounds(arr, idx_full, vals_full, ax, c["reduce"], c["include_self"], dtype, ref,
                              np.zeros(arr.shape), np.zeros(idx_full.shape))[0] if floating else None
    rtol = None if floating else 0.0
    fc.assert_matches(_np(view), ref, dtype, 0.0, "put_along_axis_ view", rtol, atol=atol)
    fc.assert_matches(np.swapaxes(_np(base), 0, -1), ref, dtype, 0.0, "put_along_axis_ base", rtol, atol=atol)


INPLACE_GRADS = _params([c for c in list(fc.put_along_axis_cases()) + list(fc.put_along_axis_path_cases())
                         if c["dtype"] in ("float64", "float32") and not c["scalar_values"]
                         and c["reduce"] != "assign"][::2])


@pytest.mark.parametrize("case", INPLACE_GRADS)
def test_put_along_axis_inplace_grads(case):
    """put_along_axis_ on a tensor with history (arr * 1) gives the functional op's grads: for mul/amin/amax
    with include_self the backward must see arr's value before the write, whatever the reduce's spelling."""
    c = case
    dtype = c["dtype"]
    arr, idx, vals, ax, idx_full, vals_full = _put_inputs(c)
    ta, tv = _tensor(arr, dtype, grad=True), _tensor(vals, dtype, grad=True)
    out = paddle_ext.put_along_axis_(ta * 1.0, paddle.to_tensor(idx.astype(c["index_dtype"])), tv, c["axis"],
                                     reduce=c["reduce_arg"], include_self=c["include_self"], broadcast=c["broadcast"])
    ref = refs.put_along_axis(arr, idx_full, vals_full, ax, c["reduce"], c["include_self"], broadcast=False)
    g = fc.round_to(np.random.default_rng(1).normal(size=arr.shape), dtype)
    ref_ga, ref_gv = refs.put_along_axis_grad(arr, idx_full, vals_full, g, ax, c["reduce"], c["include_self"])
    atol, atol_ga, atol_gv = fc.put_slot_bounds(arr, idx_full, vals_full, ax, c["reduce"], c["include_self"],
                                                dtype, ref, ref_ga, ref_gv)
    fc.assert_matches(_np(out), ref, dtype, 0.0, "put_along_axis_", atol=atol)
    ga, gv = paddle.grad(out, [ta, tv], grad_outputs=paddle.to_tensor(g).astype(dtype), allow_unused=True)
    _assert_put_grads(c, ga, gv, arr, vals, ref_ga, ref_gv, atol_ga, atol_gv)


# ---------------------------------------------------------------------------------- mutual_information
MI = _params(fc.mutual_information_cases())
MI_BANDS = _params(fc.mutual_information_band_cases())


def _check_mi(c):
    px, py, boundary, dtype = c["px"], c["py"], c["boundary"], c["dtype"]
    tpx, tpy = _tensor(px, dtype, grad=True), _tensor(py, dtype, grad=True)
    tb = None if boundary is None else paddle.to_tensor(boundary)
    ans, (ogx, ogy) = paddle_ext.mutual_information_recursion(tpx, tpy, tb, return_grad=True)
    ref_ans, _ = refs.mutual_information_wavefront(px, py, boundary)
    B, S, T = px.shape[0], px.shape[1], py.shape[2]
    scale = fc.finite_scale(px, py) * (S + T + 1)
    fc.assert_matches(_np(ans), ref_ans, dtype, scale, "ans")
    (gx, gy) = paddle.grad(ans, [tpx, tpy], grad_outputs=paddle.to_tensor(c["ans_grad"]).astype(dtype))
    rgx, rgy = refs.mutual_information_grad_wavefront(px, py, boundary, c["ans_grad"])
    fc.assert_matches(_np(gx), rgx, dtype, scale, "px grad")
    fc.assert_matches(_np(gy), rgy, dtype, scale, "py grad")
    ogx_ref, ogy_ref = refs.mutual_information_grad_wavefront(px, py, boundary)
    fc.assert_matches(_np(ogx), ogx_ref, dtype, scale, "occupation px")
    fc.assert_matches(_np(ogy), ogy_ref, dtype, scale, "occupation py")


@pytest.mark.parametrize("case", MI)
def test_mutual_information(case):
    _check_mi(case)


@pytest.mark.parametrize("case", MI_BANDS)
def test_mutual_information_bands(case):
    _check_mi(case)


@pytest.mark.parametrize("case", MI)
def test_joint_mutual_information(case):
    """The case's lattice split into two terms (px - d and d, d finite where px is): the fused joint op's rows
    and grads against the float64 recursion on the terms' sum (the reference sees the terms as the dtype holds them)."""
    px, py, boundary, dtype = case["px"], case["py"], case["boundary"], case["dtype"]
    rng = np.random.default_rng(px.size)
    terms = []
    for a in (px, py):
        d = fc.round_to(np.where(np.isfinite(a), rng.normal(size=a.shape), 0.0), dtype)
        terms.append(np.stack([fc.round_to(a - d, dtype), d]))
    (pxs, pys), B = terms, px.shape[0]
    xs, ys = [_tensor(t, dtype, grad=True) for t in pxs], [_tensor(t, dtype, grad=True) for t in pys]
    tb = None if boundary is None else paddle.to_tensor(boundary)
    rows = paddle_ext.joint_mutual_information_recursion(xs, ys, tb)
    occ_x, occ_y = refs.mutual_information_grad_wavefront(pxs.sum(0), pys.sum(0), boundary)
    ans, _ = refs.mutual_information_wavefront(pxs.sum(0), pys.sum(0), boundary)

    def inner(t, occ):
        with np.errstate(invalid="ignore"):
            return np.where(occ != 0, t * occ, 0.0).reshape(2, B, -1).sum(2)

    with np.errstate(invalid="ignore"):
        want = inner(pxs, occ_x) + inner(pys, occ_y)
        want[0] += ans - want.sum(0)
        magnitude = inner(np.abs(pxs), np.abs(occ_x)) + inner(np.abs(pys), np.abs(occ_y))
    S, T = px.shape[1], py.shape[2]
    scale = fc.finite_scale(pxs.sum(0), pys.sum(0)) * (S + T + 1)
    fc.assert_matches(_np(rows), want, dtype, scale, "rows", abs_scale=np.nan_to_num(magnitude) * (S + T + 1))
    out_grad = rng.normal(size=(2, B))
    grads = paddle.grad(rows, xs + ys, grad_outputs=paddle.to_tensor(out_grad).astype(dtype))
    for i, (g, occ) in enumerate(zip(grads, [occ_x] * 2 + [occ_y] * 2)):
        with np.errstate(invalid="ignore"):
            ref = np.where(occ != 0, out_grad[i % 2][:, None, None] * occ, 0.0)
        fc.assert_matches(_np(g), ref, dtype, scale, f"grad {i}")


def test_wavefront_references_equal_the_loop_references():
    """The vectorised references are the loop references, bit for bit (and the dense lcse grad)."""
    for c in fc.mutual_information_cases(24):
        a, p = refs.mutual_information(c["px"], c["py"], c["boundary"])
        b, q = refs.mutual_information_wavefront(c["px"], c["py"], c["boundary"])
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(p, q)
        for u, v in zip(refs.mutual_information_grad(c["px"], c["py"], c["boundary"], c["ans_grad"]),
                        refs.mutual_information_grad_wavefront(c["px"], c["py"], c["boundary"], c["ans_grad"])):
            np.testing.assert_array_equal(u, v)
    for c in fc.logcumsumexp_cases(24):
        if c["axis"] is None or c["x"].size > 2000:
            continue
        np.testing.assert_allclose(refs.logcumsumexp_grad_dense(c["x"], c["g"], c["axis"], c["exclusive"], c["reverse"]),
                                   refs.logcumsumexp_grad(c["x"], c["g"], c["axis"], c["exclusive"], c["reverse"]),
                                   rtol=1e-13, atol=0)


# -------------------------------------------------------------------------------- adaptive_log_softmax
ALS = _params(fc.adaptive_log_softmax_cases())
ALS_THREADS = _params(fc.adaptive_log_softmax_thread_cases())


def _check_als(c):
    logits, dtype = c["logits"], c["dtype"]
    t = _tensor(logits, dtype, c["view"], grad=True)
    g = paddle.to_tensor(c["g"]).astype(dtype)
    scale = fc.finite_scale(logits)
    if c["op"] == "target":
        out = paddle_ext.adaptive_log_softmax_target(t, paddle.to_tensor(c["target"]))
        fc.assert_matches(_np(out), refs.adaptive_log_softmax_target(logits, c["target"]), dtype, scale, "target")
        (gx,) = paddle.grad(out, t, grad_outputs=g)
        ref_g = refs.adaptive_log_softmax_target_grad(logits, c["target"], c["g"])
        fc.assert_matches(_np(gx), ref_g, dtype, fc.finite_scale(c["g"]) * scale, "target grad")
    else:
        off = _tensor(c["offset"], dtype, grad=True)
        out = paddle_ext.adaptive_log_softmax_full(t, off)
        fc.assert_matches(_np(out), refs.adaptive_log_softmax_full(logits, c["offset"]), dtype,
                       fc.finite_scale(logits, c["offset"]), "full")
        gx, goff = paddle.grad(out, [t, off], grad_outputs=g)
        ref_gx, ref_goff = refs.adaptive_log_softmax_full_grad(logits, c["g"])
        k = max(logits.shape[1], 1)
        fc.assert_matches(_np(gx), ref_gx, dtype, fc.finite_scale(c["g"]) * scale * k, "full grad")
        fc.assert_matches(_np(goff), ref_goff, dtype, fc.finite_scale(c["g"]) * k, "offset grad")


@pytest.mark.parametrize("case", ALS)
def test_adaptive_log_softmax(case):
    _check_als(case)


@pytest.mark.parametrize("case", ALS_THREADS)
def test_adaptive_log_softmax_threads(case):
    _check_als(case)


@pytest.mark.parametrize("case", _params(fc.adaptive_projection_grad_cases()))
def test_adaptive_projection_grad(case):
    """The projection + target op in blocks of rows: out, and x_grad = d @ w^T and w_grad = x^T @ d with d the
    target grad (float64 reference) for the unit out_grad formed in the forward and for any out_grad (the logits
    recomputed), within the target grad's float32 bound carried through the product plus the float32 GEMM
    bound (K terms)."""
    c = case
    ops = paddle_ext._library.ops()
    if paddle_ext._library.gemm_backend() != "onednn":
        pytest.skip("this Paddle has no oneDNN loaded")
    x, w = fc.round_to(c["x"], "float32"), fc.round_to(c["w"], "float32")
    tx, tw, target = paddle.to_tensor(x.astype("float32")), paddle.to_tensor(w.astype("float32")), paddle.to_tensor(c["target"])
    out, x_unit, w_unit = ops.pe_adaptive_linear_target(tx, tw, target, True)
    x_grad, w_grad = ops.pe_adaptive_linear_target_vjp(tx, tw, target, paddle.to_tensor(c["g"].astype("float32")))
    logits = x @ w  # rows of w, exactly
    ref_out = refs.adaptive_log_softmax_target(logits, c["target"])
    fc.assert_matches(_np(out), ref_out, "float32", fc.finite_scale(ref_out), "out")
    k = max(w.shape[1], 1)
    for g, xg, wg in ((np.ones(x.shape[0]), x_unit, w_unit), (c["g"], x_grad, w_grad)):
        d = refs.adaptive_log_softmax_target_grad(logits, c["target"], g)
        # the target grad's own bound, per element: its float32 lse is off by a few ulps of the row's largest logit
        spread = np.nan_to_num(np.abs(logits), posinf=0.0).max(axis=1, initial=0.0, keepdims=True)
        d_mag = np.abs(np.nan_to_num(d)) * (1 + spread * 2.0**-21 / 1e-5) + fc.finite_scale(g)
        for got, ref, mag in ((xg, d @ w.T, d_mag @ np.abs(w.T)), (wg, x.T @ d, np.abs(x.T) @ d_mag)):
            fc.assert_matches(_np(got), ref, "float32", 0.0, "projection grad", abs_scale=mag * (1 + k * 2.0**-24 / 1e-5))


@pytest.mark.parametrize("case", _params(fc.adaptive_ignore_cases()))
def test_adaptive_log_softmax_ignore_index(case):
    c = case
    x = paddle.to_tensor(c["x"], stop_gradient=False)
    weights = [paddle.to_tensor(c["head"])] + [paddle.to_tensor(w) for pair in c["tails"] for w in pair]
    out, loss = adaptive_log_softmax_with_loss(x, paddle.to_tensor(c["label"]), weights[0],
                                               [weights[1 + 2 * i:3 + 2 * i] for i in range(len(c["tails"]))],
                                               c["cutoffs"], ignore_index=c["ignore_index"], reduction=c["reduction"])
    ref_out, ref_loss = refs.adaptive_log_softmax_with_loss(c["x"], c["label"], c["head"], c["tails"], c["cutoffs"],
                                                            None, c["ignore_index"], c["reduction"])
    scale = fc.finite_scale(ref_out)
    fc.assert_matches(_np(out), ref_out, "float64", scale, "output")
    fc.assert_matches(_np(loss), np.asarray(ref_loss), "float64", scale * max(len(c["label"]), 1), "loss")
    assert (_np(out)[c["label"] == c["ignore_index"]] == 0).all()
    if len(c["label"]):
        (gx,) = paddle.grad(loss.sum(), x, allow_unused=True)
        ignored = c["label"] == c["ignore_index"]
        assert gx is not None and not _np(gx)[ignored].any()  # an ignored row gets exactly no grad


# --------------------------------------------------------------------------------------------- RNN-T
RNNT = _params(fc.rnnt_cases())


@pytest.mark.parametrize("case", RNNT)
def test_rnnt_losses(case):
    """Each loss (reduction 'none', float64) against its reference; grads finite wherever the loss is, and
    every loss is invariant to adding a constant to a row of logits (log-softmax), so each row of the
    grad sums to 0. An item without a path (e.g. pruned windows that leave none) is inf with zero grads."""
    c = case
    sym, bd = paddle.to_tensor(c["symbols"]), None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
    kw = dict(boundary=bd, rnnt_type=c["rnnt_type_arg"], reduction="none")
    term = c["termination_symbol"]
    if c["loss"] in ("simple", "smoothed"):
        inputs = [_tensor(c["lm"], "float64", grad=True), _tensor(c["am"], "float64", grad=True)]
        if c["loss"] == "simple":
            loss = paddle_ext.rnnt_loss_simple(*inputs, sym, term, **kw)
            ref = refs.rnnt_loss(c["lm"][:, None] + c["am"][:, :, None], c["symbols"], term, c["boundary"],
                                 c["rnnt_type"])
        else:
            loss = paddle_ext.rnnt_loss_smoothed(*inputs, sym, term, c["lm_only_scale"], c["am_only_scale"], **kw)
            ref = refs.rnnt_loss_smoothed(c["lm"], c["am"], c["symbols"], term, c["lm_only_scale"],
                                          c["am_only_scale"], c["boundary"], c["rnnt_type"])
    elif c["loss"] == "full":
        inputs = [_tensor(c["logits"], "float64", grad=True)]
        loss = paddle_ext.rnnt_loss(inputs[0], sym, term, **kw)
        ref = refs.rnnt_loss(c["logits"], c["symbols"], term, c["boundary"], c["rnnt_type"])
    else:
        inputs = [_tensor(c["pruned_logits"], "float64", grad=True)]
        ref = refs.rnnt_loss_pruned(c["pruned_logits"], c["symbols"], c["ranges"], term, c["boundary"],
                                    c["rnnt_type"])
        loss = paddle_ext.rnnt_loss_pruned(inputs[0], sym, paddle.to_tensor(c["ranges"]), term, **kw)
    S, T = c["symbols"].shape[1], c["am"].shape[1]
    scale = fc.finite_scale(*[x.numpy() for x in inputs]) * (S + T + 1) * 4
    fc.assert_matches(loss.numpy(), ref, "float64", scale, f"{c['loss']} loss", rtol=1e-10)
    finite = np.isfinite(loss.numpy())
    if not finite.all():
        no_path = paddle.where(paddle.to_tensor(finite), paddle.zeros_like(loss), loss).sum()
        for gr in paddle.grad(no_path, inputs, allow_unused=True, retain_graph=True):
            assert gr is None or (gr.numpy() == 0).all(), f"{c['loss']}: non-zero grads of an inf loss"
    weights = paddle.to_tensor(np.where(finite, 1.0, 0.0))
    grads = paddle.grad((paddle.where(paddle.to_tensor(finite), loss, paddle.zeros_like(loss)) * weights).sum(),
                        inputs, allow_unused=True)
    for x, gr in zip(inputs, grads):
        gr = np.zeros(x.shape) if gr is None else gr.numpy()
        assert np.isfinite(gr).all(), f"{c['loss']}: non-finite grads where the loss is finite"
        np.testing.assert_allclose(gr.sum(-1), 0.0, atol=1e-9 * max(1.0, np.abs(gr).max()) * gr.shape[-1],
                                   err_msg=f"{c['loss']}: a row of the logits grad does not sum to 0")



def _reduced(loss, reduction):
    with np.errstate(invalid="ignore"):
        return {"none": loss, "mean": np.mean(loss), "sum": np.sum(loss)}[reduction]


@pytest.mark.parametrize("case", RNNT)
def test_rnnt_losses_reduced(case):
    """Each loss with the case's reduction in its drawn spelling (a str or NumPy's str_; rnnt_type too) equals
    the reduced reference, and its grads are the weighted grads of reduction 'none'."""
    c = case
    sym, bd = paddle.to_tensor(c["symbols"]), None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
    term, rt = c["termination_symbol"], c["rnnt_type"]
    if c["loss"] in ("simple", "smoothed"):
        fn = paddle_ext.rnnt_loss_simple if c["loss"] == "simple" else paddle_ext.rnnt_loss_smoothed
        inputs = [c["lm"], c["am"]]
        extra = () if c["loss"] == "simple" else (c["lm_only_scale"], c["am_only_scale"])
        call = lambda xs, **kw: fn(*xs, sym, term, *extra, boundary=bd, **kw)  # noqa: E731
    elif c["loss"] == "full":
        inputs = [c["logits"]]
        call = lambda xs, **kw: paddle_ext.rnnt_loss(*xs, sym, term, boundary=bd, **kw)  # noqa: E731
    else:
        inputs = [c["pruned_logits"]]
        rg = paddle.to_tensor(c["ranges"])
        call = lambda xs, **kw: paddle_ext.rnnt_loss_pruned(*xs, sym, rg, term, boundary=bd, **kw)  # noqa: E731
    xs = [_tensor(x, "float64", grad=True) for x in inputs]
    got = call(xs, rnnt_type=c["rnnt_type_arg"], reduction=c["reduction_arg"])
    none = call([x.detach() for x in xs], rnnt_type=rt, reduction="none").numpy()
    np.testing.assert_array_equal(got.numpy(), _reduced(none, c["reduction"]))
    if not np.isfinite(none).all() or not none.size:
        return
    weights = {"none": np.linspace(0.5, 1.5, none.size), "mean": np.full(none.size, 1.0 / none.size),
               "sum": np.ones(none.size)}[c["reduction"]]
    grads = paddle.grad((got * paddle.to_tensor(weights)).sum() if c["reduction"] == "none" else got, xs)
    xs2 = [_tensor(x, "float64", grad=True) for x in inputs]
    want = paddle.grad((call(xs2, rnnt_type=rt, reduction="none") * paddle.to_tensor(weights)).sum(), xs2)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", _params(c for c in fc.rnnt_cases() if c["loss"] == "full"))
@pytest.mark.parametrize("clamp", [0.01, 0.3])
def test_rnnt_loss_clamped_grads(case, clamp):
    """rnnt_loss's grad clamp (float64): each item's own logits grad clamped, then times its weight, against
    the float64 reference at 1e-9; the loss unchanged by it."""
    c = case
    x = _tensor(c["logits"], "float64", grad=True)
    bd = None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
    loss = paddle_ext.rnnt_loss(x, paddle.to_tensor(c["symbols"]), c["termination_symbol"], bd,
                                rnnt_type=c["rnnt_type"], reduction="none", clamp=clamp)
    plain = paddle_ext.rnnt_loss(x.detach(), paddle.to_tensor(c["symbols"]), c["termination_symbol"], bd,
                                 rnnt_type=c["rnnt_type"], reduction="none")
    np.testing.assert_array_equal(loss.numpy(), plain.numpy())
    weights = np.where(np.isfinite(loss.numpy()), np.linspace(0.5, 1.5, len(plain)), 0.0)
    (grad,) = paddle.grad((paddle.where(paddle.isfinite(loss), loss, paddle.zeros_like(loss))
                           * paddle.to_tensor(weights)).sum(), [x])
    with np.errstate(invalid="ignore"):
        want = refs.rnnt_loss_grad(c["logits"], c["symbols"], c["termination_symbol"], c["boundary"], c["rnnt_type"],
                                   loss_grad=weights, clamp=clamp)
    want[~np.isfinite(loss.numpy())] = 0.0
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", _params(c for c in fc.rnnt_cases() if c["loss"] == "pruned"))
@pytest.mark.parametrize("clamp", [0.01, 0.3])
def test_rnnt_loss_pruned_clamped_grads(case, clamp):
    """rnnt_loss_pruned's grad clamp (float64): each item's own pruned-logits grad (the unclamped loss's grad of
    that item alone, which the fuzz checks above hold to its reference) clamped, then times its weight; the loss
    unchanged by it."""
    c = case
    sym, rg = paddle.to_tensor(c["symbols"]), paddle.to_tensor(c["ranges"])
    bd = None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
    results = []
    for cl in (clamp, -1.0):
        x = _tensor(c["pruned_logits"], "float64", grad=True)
        loss = paddle_ext.rnnt_loss_pruned(x, sym, rg, c["termination_symbol"], bd, rnnt_type=c["rnnt_type"],
                                           reduction="none", clamp=cl)
        finite = np.isfinite(loss.numpy())
        weights = np.where(finite, np.linspace(0.5, 1.5, len(finite)), 0.0) if cl > 0 else finite.astype(float)
        (grad,) = paddle.grad((paddle.where(paddle.to_tensor(finite), loss, paddle.zeros_like(loss))
                               * paddle.to_tensor(weights)).sum(), [x], allow_unused=True)
        results.append((loss.numpy(), np.zeros(x.shape) if grad is None else grad.numpy(), weights))
    (loss, got, weights), (plain, own, _) = results
    np.testing.assert_array_equal(loss, plain)
    want = np.clip(own, -clamp, clamp) * weights[:, None, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


JUMP = _params(fc.transducer_jump_cases())


@pytest.mark.parametrize("case", JUMP)
def test_transducer_jump_losses(case):
    """tdt_loss / multiblank_rnnt_loss (float64; the case's reduction in its drawn spelling) against the lattice
    references: the loss and the grads (of a weighted sum for 'none'), at 1e-9; an item without a path is inf
    with zero grads."""
    c = case
    tdt = c["kind"] == "tdt"
    fn = paddle_ext.tdt_loss if tdt else paddle_ext.multiblank_rnnt_loss
    x = _tensor(c["logits"], "float64", grad=True)
    bd = None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
    loss = fn(x, paddle.to_tensor(c["symbols"]), c["lattice"], c["blank"], bd, reduction=c["reduction_arg"],
              sigma=c["sigma"], fastemit_lambda=c["fastemit_lambda"], clamp=c["clamp"])
    ref = (refs.tdt_loss if tdt else refs.multiblank_loss)(c["logits"], c["symbols"], c["lattice"], c["blank"],
                                                           c["boundary"], c["sigma"])
    fc.assert_matches(np.atleast_1d(loss.numpy()), np.atleast_1d(_reduced(ref, c["reduction"])), "float64",
                      1e-9 * max(1.0, np.abs(ref[np.isfinite(ref)]).sum(initial=0)), "loss", rtol=1e-9)
    B = len(ref)
    weights = {"none": np.linspace(0.5, 1.5, B), "mean": np.full(B, 1.0 / max(B, 1)), "sum": np.ones(B)}[c["reduction"]]
    if B and c["reduction"] == "none":
        (loss * paddle.to_tensor(weights)).sum().backward()
    elif B:
        loss.backward()
    want = (refs.tdt_loss_grad if tdt else refs.multiblank_loss_grad)(
        c["logits"], c["symbols"], c["lattice"], c["blank"], c["boundary"], c["sigma"], c["fastemit_lambda"], weights,
        c["clamp"])
    got = np.zeros_like(want) if x.grad is None else x.grad.numpy()
    assert np.isfinite(got).all(), "non-finite grads"
    assert (got[~np.isfinite(ref)] == 0).all(), "non-zero grads of an item without a path"
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


FUSED_JOINER = _params(fc.fused_joiner_cases())


@pytest.mark.parametrize("path", ["fused", "blocks"])
@pytest.mark.parametrize("case", FUSED_JOINER)
def test_fused_joiner_losses(case, path, monkeypatch):
    """rnnt_loss_fused_joiner (full and pruned), tdt_loss_fused_joiner, multiblank_rnnt_loss_fused_joiner
    (float64) against the same loss on the composed joiner act(am + lm) @ weight + bias: the loss and the grads
    of am, lm, weight and bias at 1e-9, NaN where the composition gives NaN; the grad clamp on two thirds of them
    (each loss's own clamp on the composed joiner). path 'blocks': the joiner composed in blocks of one frame
    (the path of CUDA tensors), forced on these CPU tensors."""
    if path == "blocks":
        from paddle_ext import transducer_jump_loss
        from paddle_ext.rnnt_loss import fused_joiner
        for module in (fused_joiner, transducer_jump_loss):
            monkeypatch.setattr(module, "fused_fits", lambda am: False)
        monkeypatch.setattr(fused_joiner, "BLOCK_BYTES", 1)
    c = case
    results = []
    clamp = {"relu": 0.1, "identity": 0.02}.get(c["activation"], -1.0)
    for fused in (True, False):
        am, lm, w = (_tensor(c[k], "float64", grad=True) for k in ("am", "lm", "weight"))
        b = None if c["bias"] is None else _tensor(c["bias"], "float64", grad=True)
        sym = paddle.to_tensor(c["symbols"])
        bd = None if c["boundary"] is None else paddle.to_tensor(c["boundary"])
        rg = None if c["ranges"] is None else paddle.to_tensor(c["ranges"])
        if fused and c["kind"] in ("full", "pruned"):
            loss = paddle_ext.rnnt_loss_fused_joiner(am, lm, w, b, sym, c["blank"], bd, c["rnnt_type"], 0.1, "none",
                                                     ranges=rg, activation=c["activation"], fastemit_lambda=0.2,
                                                     clamp=clamp)
        elif fused:
            fn = paddle_ext.tdt_loss_fused_joiner if c["kind"] == "tdt" else paddle_ext.multiblank_rnnt_loss_fused_joiner
            loss = fn(am, lm, w, b, sym, c["durations"], c["blank"], bd, "none", activation=c["activation"],
                      sigma=0.05, fastemit_lambda=0.2, clamp=clamp)
        else:
            x = am.unsqueeze(2) + lm.unsqueeze(1) if rg is None else paddle.add(*paddle_ext.do_rnnt_pruning(am, lm, rg))
            x = {"tanh": paddle.tanh, "relu": paddle.nn.functional.relu, "identity": lambda v: v}[c["activation"]](x)
            logits = paddle.nn.functional.linear(x, w, b)
            if c["kind"] == "full":
                loss = paddle_ext.rnnt_loss(logits, sym, c["blank"], bd, c["rnnt_type"], 0.1, "none",
                                            fastemit_lambda=0.2, clamp=clamp)
            elif c["kind"] == "pruned":
                loss = paddle_ext.rnnt_loss_pruned(logits, sym, rg, c["blank"], bd, c["rnnt_type"], 0.1, "none",
                                                   fastemit_lambda=0.2, clamp=clamp)
            else:
                fn = paddle_ext.tdt_loss if c["kind"] == "tdt" else paddle_ext.multiblank_rnnt_loss
                loss = fn(logits, sym, c["durations"], c["blank"], bd, "none", sigma=0.05, fastemit_lambda=0.2,
                          clamp=clamp)
        inputs = [t for t in (am, lm, w, b) if t is not None]
        finite = paddle.to_tensor(np.isfinite(loss.numpy()) | np.isnan(loss.numpy()))
        weights = paddle.to_tensor(np.linspace(0.5, 1.5, loss.shape[0]))
        total = (paddle.where(finite, loss, paddle.zeros_like(loss)) * weights).sum()
        grads = paddle.grad(total, inputs, allow_unused=True) if loss.shape[0] else [None] * len(inputs)
        results.append([loss.numpy()] + [np.zeros(x.shape) if g is None else g.numpy() for x, g in zip(inputs, grads)])
    for what, got, want in zip(("loss", "am", "lm", "weight", "bias"), *results):
        scale = np.abs(want[np.isfinite(want)]).max(initial=1.0)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale, err_msg=what)


JOINT = _params(fc.rnnt_joint_cases())


@pytest.mark.parametrize("case", JOINT)
def test_rnnt_joint_logprobs(case):
    """px/py of the fused joiner op and its logits grad against the float64 log-softmax reference."""
    c, dtype = case, case["dtype"]
    logits = _tensor(c["logits"], dtype, c["view"], grad=True)
    ranges = None if c["ranges"] is None else paddle.to_tensor(c["ranges"])
    px, py, _, _ = paddle_ext._library.ops().pe_rnnt_joint_logprobs(logits, paddle.to_tensor(c["symbols"]), ranges,
                                                                    c["termination_symbol"], NO_CLAMP)
    ref_px, ref_py = refs.rnnt_joint_logprobs(c["logits"], c["symbols"], c["ranges"], c["termination_symbol"])
    scale = fc.finite_scale(c["logits"])
    fc.assert_matches(_np(px), ref_px, dtype, scale, "px")
    fc.assert_matches(_np(py), ref_py, dtype, scale, "py")
    (grad,) = paddle.grad([px, py], logits, [paddle.to_tensor(c["px_grad"]).astype(dtype),
                                             paddle.to_tensor(c["py_grad"]).astype(dtype)])
    with np.errstate(invalid="ignore", over="ignore"):
        ref_g = refs.rnnt_joint_logprobs_grad(c["logits"], c["symbols"], c["ranges"], c["termination_symbol"],
                                              c["px_grad"], c["py_grad"])
    fc.assert_matches(_np(grad), ref_g, dtype, fc.finite_scale(c["px_grad"], c["py_grad"]) * 2, "logits grad")


PRUNE_GATHER = _params(fc.rnnt_prune_gather_cases())


@pytest.mark.parametrize("case", PRUNE_GATHER)
def test_rnnt_joint_logprobs_prune_gather(case):
    """The pruning gather (do_rnnt_pruning's am/lm rows) and its scatter-add grad against NumPy: every dtype
    and value mixture, repeated rows (a grad row summed from up to T*R rows, in float32 for the half types),
    widths across the grad's column blocks, non-contiguous x."""
    c, dtype = case, case["dtype"]
    x = _tensor(c["x"], dtype, c["view"], grad=True)
    out = paddle_ext._library.ops().pe_rnnt_prune_gather(x, paddle.to_tensor(c["index"]))
    fc.assert_matches(_np(out), refs.rnnt_prune_gather(fc.round_to(c["x"], dtype), c["index"]), dtype, what="out")
    g = fc.round_to(c["out_grad"], dtype)
    (grad,) = paddle.grad(out, x, paddle.to_tensor(g).astype(dtype))
    with np.errstate(invalid="ignore", over="ignore"):
        ref = refs.rnnt_prune_gather_grad(c["x"].shape, c["index"], g)
    # a sum of up to T*R terms: its rounding is relative to the sum of their magnitudes
    scale = refs.rnnt_prune_gather_grad(c["x"].shape, c["index"], np.abs(np.nan_to_num(g, posinf=0, neginf=0)))
    fc.assert_matches(_np(grad), ref, dtype, 1.0, "x grad", rtol=None if dtype != "float64" else 1e-12,
                      abs_scale=scale)


RNNT_SIMPLE = _params(c for c in fc.rnnt_cases() if c["loss"] in ("simple", "smoothed"))


@pytest.mark.parametrize("case", RNNT_SIMPLE)
@pytest.mark.parametrize("shared_row", [False, True])
def test_rnnt_simple_logprobs_float32(case, shared_row):
    """The fused op behind the simple / smoothed losses in float32 (lm [B, S+1, C], or one row [B, 1, C] as
    the smoothed AM-only model uses it): px / py within float32 tolerance of the float64 log-softmax of the
    same float32 inputs, at logit scales 1, 30 and 1e3 (exp-space sums that underflow take the exact path)."""
    c = case
    lm = c["lm"].astype(np.float32)[:, :1] if shared_row else c["lm"].astype(np.float32)
    am = c["am"].astype(np.float32)
    modified = c["rnnt_type"] != "regular"
    px, py, _ = paddle_ext._library.ops().pe_rnnt_simple_logprobs(paddle.to_tensor(lm), paddle.to_tensor(am),
                                                                  paddle.to_tensor(c["symbols"]), 0, modified)
    S = c["symbols"].shape[1]
    lm64 = np.repeat(lm, S + 1, axis=1) if shared_row else lm
    ref_px, ref_py = refs.rnnt_simple_logprobs(lm64, am, c["symbols"], 0, modified)
    scale = fc.finite_scale(lm, am)
    fc.assert_matches(px.numpy(), ref_px, "float32", scale, "px")
    fc.assert_matches(py.numpy(), ref_py, "float32", scale, "py")


# ------------------------------------------------------------------------ other SIMD widths and threads
KERNEL_TESTS = ("test_logcumsumexp or test_put_along_axis or test_mutual_information_bands or test_adaptive_log_softmax"
                " or test_rnnt_joint_logprobs or test_rnnt_simple_logprobs")  # incl. test_rnnt_joint_logprobs_prune_gather


@pytest.mark.skipif(SUBPROCESS, reason="already a subprocess")
@pytest.mark.parametrize("simd,threads,tile", [("avx2", 1, None), ("sse2", 2, None), (None, 1, "small"),
                                               (None, 2, "small")])
def test_fast_paths_under_other_widths_and_threads(simd, threads, tile):
    """PADDLE_EXT_SIMD, OMP_NUM_THREADS and PADDLE_EXT_PUT_TILE are read once per process: rerun the
    kernel-level cases in a subprocess (the inplace test and this process's own cases excluded).
    PADDLE_EXT_PUT_TILE=small shrinks put_along_axis's partition tiles and thread grain, so that the
    small put_along_axis cases take the destination-partitioned forward and backward (several blocks,
    list chunks and rounds) on one and two threads: only those cases run there."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PADDLE_EXT_FUZZ_SUBPROCESS="1")
    env.pop("PADDLE_EXT_SIMD", None)
    env.pop("PADDLE_EXT_PUT_TILE", None)
    if simd:
        env["PADDLE_EXT_SIMD"] = simd
    if tile:
        env["PADDLE_EXT_PUT_TILE"] = tile
    tests = "test_put_along_axis" if tile else KERNEL_TESTS
    result = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "--tb=line", "-p", "no:cacheprovider",
                             "-k", f"({tests}) and not inplace", "-W", "ignore"],
                            env=env, capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
