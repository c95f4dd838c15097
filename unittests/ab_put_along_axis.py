"""A/B corpus for put_along_axis: the same seeded cases through two builds of paddle_ext, compared byte
for byte (by SHA-256) (outputs, and for the float dtypes arr/values grads of the fused grad kernel).

    python unittests/ab_put_along_axis.py BASELINE_PYTHON   # compares this interpreter's build with it

Each interpreter runs the corpus at OMP_NUM_THREADS=1 and 2 (in subprocesses) and writes the results
to an .npz; every array must match exactly. Small cases cover every dtype x reduce x include_self x
index dtype x index pattern (with negative indices, duplicates, ±inf/NaN/ties in the values); large
cases (over the kernels' 2-thread grain and the partitioned path's size) cover float32/float64.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
import tempfile

import numpy as np

REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "int16", "uint8")
FLOATS = ("float16", "bfloat16", "float32", "float64")
PATTERNS = ("independent", "rows", "uniform", "mixed", "few")


def _indices(rng, pattern, n, shape, axis):
    """Indices along `axis` in [-n, n): independent per element, one destination per index row (broadcast
    over the other axes; "rows": each element's sign drawn on its own, so the raw values of a row differ,
    "uniform": one sign per row, every entry of a row the same value, the kernels' agreeing-row path),
    half the rows one then independent, or a few destinations (many duplicates)."""
    if pattern == "independent":
        k = rng.integers(0, n, size=shape)
    elif pattern == "few":
        k = rng.integers(0, min(n, 3), size=shape)
    else:
        row_shape = [s if d <= axis else 1 for d, s in enumerate(shape)]
        k = np.broadcast_to(rng.integers(0, n, size=row_shape), shape).copy()
        if pattern == "mixed":
            free = rng.integers(0, n, size=shape)
            pick = rng.random(size=row_shape) < 0.5
            k = np.where(np.broadcast_to(pick, shape), free, k)
    if pattern == "uniform":
        row_shape = [s if d <= axis else 1 for d, s in enumerate(shape)]
        negative = np.broadcast_to(rng.random(size=row_shape) < 0.3, shape)
    else:
        negative = rng.random(size=shape) < 0.3
    return np.where(negative, k - n, k)


def _values(rng, dtype, shape, adversarial):
    if dtype in FLOATS:
        if adversarial:  # ties (a few distinct values), ±inf, NaN, zeros
            pool = np.array([0.5, -1.0, 2.0, 0.0, np.inf, -np.inf, np.nan, 1.5], dtype=np.float32)
            v = pool[rng.integers(0, len(pool), size=shape)]
        else:
            v = (rng.random(size=shape) + 0.5).astype(np.float32) * np.where(rng.random(size=shape) < 0.5, -1, 1)
        return v
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -50), min(info.max, 50), size=shape, endpoint=True).astype(dtype)


def cases():
    """(key, spec) for the corpus; spec = (arr_shape, idx_shape, axis, dtype, index_dtype, reduce,
    include_self, pattern, adversarial, seed)."""
    small = [((7, 9), (11, 9), 0), ((5, 6, 40), (5, 13, 40), 1), ((300, 64), (500, 64), 0), ((6, 50), (6, 70), 1)]
    seed = 0
    for (a, i, axis), dtype, idt, reduce, inc, pattern in itertools.product(
            small, DTYPES, ("int32", "int64"), REDUCES, (True, False), PATTERNS):
        seed += 1
        adversarial = dtype in FLOATS and seed % 3 == 0
        yield f"s{seed}", (a, i, axis, dtype, idt, reduce, inc, pattern, adversarial, seed)
    # partitioned (one thread: > 2 MiB of destination) and two-thread (> 2^21 positions) sizes; "uniform" there
    # takes one thread over whole rows where the baseline split columns (choose_plan)
    # and a scatter along the last axis (flat rows) of two-thread size
    large = [((12000, 64), (18000, 64), 0), ((20000, 64), (40000, 64), 0), ((3, 6000, 48), (3, 15000, 48), 1),
             ((40, 30000), (40, 60000), 1)]
    for (a, i, axis), dtype, reduce, inc, pattern in itertools.product(
            large, ("float32", "float64"), REDUCES, (True, False), ("independent", "mixed", "uniform")):
        seed += 1
        yield f"l{seed}", (a, i, axis, dtype, "int64" if seed % 2 else "int32", reduce, inc, pattern, seed % 5 == 0, seed)


def _run_corpus(path):
    import paddle  # noqa: PLC0415

    from paddle_ext import _library  # noqa: PLC0415

    ops = _library.ops()
    out = {}
    for key, (a_shape, i_shape, axis, dtype, idt, reduce, inc, pattern, adversarial, seed) in cases():
        rng = np.random.default_rng(seed)
        n = a_shape[axis]
        arr = _values(rng, dtype, a_shape, adversarial)
        idx = _indices(rng, pattern, n, i_shape, axis).astype(idt)
        vals = _values(rng, dtype, i_shape, adversarial)
        pa = paddle.to_tensor(arr).astype(dtype) if dtype == "bfloat16" else paddle.to_tensor(arr.astype(dtype))
        pv = paddle.to_tensor(vals).astype(dtype) if dtype == "bfloat16" else paddle.to_tensor(vals.astype(dtype))
        pi = paddle.to_tensor(idx)
        res = ops.pe_put_along_axis(pa, pi, pv, axis, reduce, inc, False)
        out[key + "/out"] = _bytes(res)
        counted = reduce == "mean" and hasattr(ops, "pe_put_along_axis_counted")
        if counted:  # the dygraph API's mean (CPU): the same output, and counts for its backward
            res_c, counts = ops.pe_put_along_axis_counted(pa, pi, pv, axis, inc)
            _same(key, "counted forward", res_c, res)
            _same(key, "counts", counts, _reference_counts(a_shape, idx, axis))
        if dtype in FLOATS:
            g = paddle.to_tensor(_values(rng, "float32", a_shape, False)).astype(dtype)
            ag, vg = ops.pe_put_along_axis_vjp(pa, pi, pv, res, g, axis, reduce, inc)
            out[key + "/arr_grad"], out[key + "/values_grad"] = _bytes(ag), _bytes(vg)
            if counted:
                ag_c, vg_c = ops.pe_put_along_axis_counted_vjp(pa, pi, pv, g, counts, axis, inc)
                _same(key, "counted arr_grad", ag_c, ag)
                _same(key, "counted values_grad", vg_c, vg)
    np.savez(path, **out)


def _same(key, what, got, want):
    """Within one build: the counted mean's results must be the plain ops', byte for byte."""
    want = want if isinstance(want, np.ndarray) else want.numpy()
    if got.numpy().tobytes() != want.tobytes():
        raise AssertionError(f"{key}: {what} differs")


def _reference_counts(a_shape, idx, axis):
    """Each slot's number of contributions (every index of the corpus is in range)."""
    coords = list(np.indices(idx.shape, sparse=True))
    coords[axis] = np.mod(idx.astype(np.int64), a_shape[axis])
    counts = np.zeros(a_shape, np.int32)
    np.add.at(counts, tuple(coords), 1)
    return counts


def _bytes(t):
    """The tensor's bytes as a SHA-256 digest (the large cases would be GBs)."""
    return np.frombuffer(hashlib.sha256(t.numpy().tobytes()).digest(), dtype=np.uint8)


def results(python, threads, workdir):
    """Runs the corpus in `python` at `threads` OpenMP threads; returns the .npz's arrays."""
    path = os.path.join(workdir, f"{abs(hash(python))}-{threads}.npz")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), GLOG_minloglevel="2")
    subprocess.run([python, os.path.abspath(__file__), "--write", path], env=env, check=True)
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def compare(baseline_python, candidate_python=sys.executable):
    """Returns (number of cases, [mismatching array keys]) over 1 and 2 threads."""
    mismatches, count = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (1, 2):
            base = results(baseline_python, threads, tmp)
            cand = results(candidate_python, threads, tmp)
            assert base.keys() == cand.keys()
            count += len({k.split("/")[0] for k in base})
            mismatches += [f"{k}@{threads}t" for k in base if not np.array_equal(base[k], cand[k])]
    return count, mismatches


if __name__ == "__main__":
    if sys.argv[1] == "--write":
        _run_corpus(sys.argv[2])
    else:
        n, bad = compare(sys.argv[1])
        print(f"{n} cases (1 and 2 threads), {len(bad)} mismatching arrays")
        for k in bad[:50]:
            print("  ", k)
        sys.exit(1 if bad else 0)
