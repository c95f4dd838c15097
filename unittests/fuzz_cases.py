"""Seeded generators of adversarial inputs for every op, NumPy only (the GPU runtime suite imports this
module on machines without Paddle).

Each generator yields plain dicts of NumPy arrays and Python values, one per case, fully determined by
(generator, seed). `PADDLE_EXT_FUZZ=long` (or pytest's `--fuzz=long`, see conftest.py) multiplies the
case counts and lets shapes grow. Values are produced in float64 and rounded to the case's dtype by
`round_to` before anything sees them, so the float64 references run on exactly the kernels' inputs.

Value mixtures (MIXES): normal, x1e3, +-1e4 spikes, +-700 spreads, -inf, +inf, NaN, denormals,
all-equal, ties, and all of them at once. Shapes have size-1 and empty dims and long rows placed on and
around the kernels' block boundaries (logcumsumexp: kChunk = 512 elements per row chunk, kColumns = 256
strided columns; mutual_information: kBlock = 16 cells per scan block, 128-column wavefront chunks).
"""

from __future__ import annotations

import os

import numpy as np

MIXES = ("normal", "x1e3", "spikes", "spread700", "neginf", "posinf", "nan", "denormal", "all_equal", "ties",
         "mixed")
FINITE_MIXES = ("normal", "x1e3", "spikes", "spread700", "denormal", "all_equal", "ties")
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
PUT_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "uint8")
REDUCES = ("assign", "add", "mul", "mean", "amin", "amax")
# Every spelling paddle.put_along_axis accepts for a reduce; the cases pass each in turn as `reduce_arg`.
REDUCE_SPELLINGS = {"mul": ("mul", "multiply")}


def reduce_spelling(reduce: str, turn: int) -> str:
    spellings = REDUCE_SPELLINGS.get(reduce, (reduce,))
    return spellings[turn % len(spellings)]


# The transducer losses' string options (rnnt_type, reduction) take exactly their names, which Paddle's own
# losses compare by value: so a name as a plain str or as NumPy's str_; the cases pass each in turn.
def option_spelling(option: str, turn: int):
    return (option, np.str_(option))[turn % 2]
# Row lengths on and around the block sizes of the CPU kernels (see the module docstring).
LONG_ROWS = (15, 16, 17, 255, 256, 257, 511, 512, 513, 1024, 1025, 1500)


def mode() -> str:
    """'ci' (default) or 'long' (PADDLE_EXT_FUZZ=long)."""
    return "long" if os.environ.get("PADDLE_EXT_FUZZ", "").lower() == "long" else "ci"


def count(ci: int, long: int | None = None) -> int:
    return ci if mode() == "ci" else (long if long is not None else 20 * ci)


def rng_for(name: str, seed: int) -> np.random.Generator:
    """One stream per (generator, seed): adding a generator never changes another's cases."""
    return np.random.default_rng([seed, sum(ord(c) * 131 ** i for i, c in enumerate(name)) % (2 ** 32)])


# ---------------------------------------------------------------------------------------------- values
def to_bfloat16(x) -> np.ndarray:
    """float64 -> the nearest bfloat16 value (round to nearest even), as float64; NaN stays NaN."""
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
    out = rounded.view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, out)


def round_to(x, dtype: str) -> np.ndarray:
    """x as the case's dtype would hold it, back in float64 (integers: int64)."""
    x = np.asarray(x)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "bfloat16":
            return to_bfloat16(x)
        if dtype in ("float16", "float32", "float64"):
            return x.astype(dtype).astype(np.float64)
    return x.astype(dtype).astype(np.int64)


def values(rng: np.random.Generator, shape, mix: str, dtype: str = "float64") -> np.ndarray:
    """float64 array of `shape` with the value mixture `mix`, already rounded to `dtype`."""
    shape = tuple(int(s) for s in shape)
    x = rng.normal(0.0, 2.0, size=shape)
    flat = x.reshape(-1)
    n = flat.size

    def some(frac, at_least=1):
        k = min(n, max(at_least, int(frac * n))) if n else 0
        return rng.choice(n, size=k, replace=False) if k else np.zeros(0, dtype=np.int64)

    tiny = 1e-310 if dtype == "float64" else (1e-40 if dtype in ("float32", "bfloat16") else 3e-6)
    if mix == "x1e3":
        flat *= 1e3
    elif mix == "spikes":
        idx = some(0.05)
        flat[idx] = rng.choice([-1e4, 1e4], size=idx.size)
    elif mix == "spread700":
        flat[:] = rng.uniform(-700.0, 700.0, size=n)
    elif mix == "neginf":
        flat[some(0.3)] = -np.inf
        if n > 4 and rng.random() < 0.5:  # a run of -inf: whole blocks that nothing reaches
            a = int(rng.integers(0, n - 1))
            flat[a:a + int(rng.integers(1, n - a + 1))] = -np.inf
    elif mix == "posinf":
        flat[some(0.02)] = np.inf
    elif mix == "nan":
        flat[some(0.02)] = np.nan
    elif mix == "denormal":
        flat[:] = rng.choice([-1.0, 1.0], size=n) * rng.uniform(0.0, tiny, size=n)
        flat[some(0.1)] = 0.0
    elif mix == "all_equal":
        flat[:] = rng.choice([0.0, 3.5, -700.0, 1e4, -1e4])
    elif mix == "ties":
        flat[:] = rng.integers(-2, 3, size=n).astype(np.float64)
    elif mix == "mixed":
        flat *= rng.choice([1.0, 1e3], size=n)
        for v, frac in ((1e4, 0.02), (-1e4, 0.02), (700.0, 0.03), (-700.0, 0.03), (-np.inf, 0.1),
                        (np.inf, 0.01), (np.nan, 0.01), (tiny, 0.02)):
            idx = some(frac, at_least=0)
            flat[idx] = v
    elif mix != "normal":
        raise ValueError(mix)
    if dtype in ("float16",):  # keep the mixture's character inside the half range (65504)
        flat[np.isfinite(flat)] = np.clip(flat[np.isfinite(flat)], -6e4, 6e4)
    return round_to(x, dtype) if dtype in FLOAT_DTYPES else x


def int_values(rng, shape, mix, dtype):
    """Integer arr/values for put_along_axis: small (ties), extremes, or random in range."""
    info = np.iinfo(dtype)
    lo, hi = (0, 255) if dtype == "uint8" else (max(info.min, -30000), min(info.max, 30000))
    if mix == "ties":
        return rng.integers(max(lo, -2), 3, size=shape).astype(np.int64)
    if mix == "all_equal":
        return np.full(shape, int(rng.integers(max(lo, -3), 4)), dtype=np.int64)
    if mix == "small":  # products stay exact in the dtype
        return rng.integers(max(lo, -1), 3, size=shape).astype(np.int64)
    return rng.integers(lo, hi + 1, size=shape).astype(np.int64)


def random_boxes(B, S, T, rng):
    """A [B, 4] int64 boundary (s_begin, t_begin, s_end, t_end): the whole lattice first, then random boxes."""
    rows = [[0, 0, S, T]]
    for _ in range(B - 1):
        s0, s1 = sorted(rng.integers(0, S + 1, size=2))
        t0, t1 = sorted(rng.integers(0, T + 1, size=2))
        rows.append([s0, t0, s1, t1])
    return np.array(rows, dtype=np.int64)


def random_shape(rng, rank, long_dim=None, max_dim=7, empty_p=0.05):
    dims = []
    for _ in range(rank):
        r = rng.random()
        dims.append(0 if r < empty_p else 1 if r < 0.3 else int(rng.integers(2, max_dim + 1)))
    if long_dim is not None and rank:
        dims[int(rng.integers(0, rank))] = long_dim
    return tuple(dims)


# ------------------------------------------------------------------------------------- logcumsumexp
def logcumsumexp_cases(n=None):
    """x, axis (None, any axis, negative too), exclusive, reverse, dtype, g (upstream grad), view
    ('transpose' / 'stride' / None: how the Paddle suite presents x)."""
    name = "logcumsumexp"
    n = count(120) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = FLOAT_DTYPES[seed % 4] if seed % 3 else "float64"
        mix = MIXES[seed % len(MIXES)]
        rank = int(rng.integers(0, 4))
        long = rng.random() < 0.35 and rank > 0
        ld = int(rng.choice(LONG_ROWS)) if long else None
        if ld is not None and mode() == "long" and rng.random() < 0.3:
            ld = int(rng.choice([2047, 2048, 4100]))
        shape = random_shape(rng, rank, ld, max_dim=9 if mode() == "ci" else 40)
        if rank and long and rng.random() < 0.3:  # many strided columns: crosses kColumns = 256
            shape = tuple(300 if i == rank - 1 and i else d for i, d in enumerate(shape))
        axis = None if rank == 0 or rng.random() < 0.1 else int(rng.integers(-rank, rank))
        x = values(rng, shape, mix, dtype)
        g = values(rng, shape, "normal", dtype)
        view = None if rank < 2 else rng.choice([None, "transpose", "stride"], p=[0.6, 0.2, 0.2])
        yield dict(id=f"lcse-{seed}-{dtype}-{mix}-{shape}-ax{axis}", x=x, g=g, axis=axis,
                   exclusive=bool(rng.random() < 0.5), reverse=bool(rng.random() < 0.5), dtype=dtype, view=view)


def logcumsumexp_block_cases(n=None):
    """Float64 / float32 rows on the chunk boundaries with one chunk spanning > 640 (kMaxRange) in log
    space, and specials placed right at chunk edges (the per-chunk fallback checks)."""
    name = "logcumsumexp_block"
    n = count(16) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = ("float64", "float32")[seed % 2]
        length = int(rng.choice([511, 512, 513, 1023, 1024, 1025, 1537]))
        rows = int(rng.integers(1, 4))
        strided = seed % 4 >= 2
        x = values(rng, (rows, length), "normal", dtype)
        edge = int(rng.choice([0, 1, 511, 512, 513, length - 1])) % length
        kind = ("wide", "nan", "posinf", "neginf_run", "spike")[seed % 5]
        if kind == "wide":
            x[:, edge] = rng.choice([700.0, -700.0, 900.0])
        elif kind == "nan":
            x[:, edge] = np.nan
        elif kind == "posinf":
            x[:, edge] = np.inf
        elif kind == "neginf_run":
            x[:, :edge + 1] = -np.inf
        else:
            x[:, edge] = 1e4
        x = round_to(x, dtype)
        if strided:  # the scanned axis first: the column kernels (inner > 1)
            x = np.ascontiguousarray(x.T)
        g = values(rng, x.shape, "normal", dtype)
        yield dict(id=f"lcse-block-{seed}-{dtype}-{kind}-{x.shape}", x=x, g=g, axis=0 if strided else 1,
                   exclusive=bool(seed & 1), reverse=bool(seed & 4), dtype=dtype, view=None)


def logcumsumexp_thread_cases():
    """Big enough for parallel_for (>= 32k elements per thread) and the split single long row (2^16)."""
    rng = rng_for("logcumsumexp_threads", 0)
    for i, (shape, axis) in enumerate([((64, 1100), 1), ((1, 70000), 1), ((1100, 64), 0)]):
        for dtype in ("float64", "float32"):
            mix = ("spread700", "mixed")[i % 2] if dtype == "float64" else "normal"
            x = values(rng, shape, mix, dtype)
            yield dict(id=f"lcse-threads-{shape}-{dtype}-{mix}", x=x, g=values(rng, shape, "normal", dtype), axis=axis,
                       exclusive=bool(i & 1), reverse=dtype == "float32", dtype=dtype, view=None)


def logcumsumexp_tile_cases(n=None):
    """float32/float16/bfloat16 lines long enough for the CUDA float tiles (contiguous rows of >= 2048 in
    tiles of 4096 with a look-back; strided axes of >= 256 steps and >= 32 columns in tiles of 128 steps):
    lengths on the tile edges, every value mixture, one special on a tile edge (run by the GPU fuzz)."""
    name = "logcumsumexp_tile"
    n = count(24) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = ("float32", "float16", "bfloat16")[seed % 3]
        mix = MIXES[seed % len(MIXES)]
        strided = seed % 4 == 3
        if strided:
            length = int(rng.choice([256, 383, 384, 1000]))
            shape = (length, int(rng.choice([32, 45, 96])))
        else:
            length = int(rng.choice([2048, 4095, 4096, 4097, 8193, 12300]))
            shape = (int(rng.integers(1, 4)), length)
        x = values(rng, shape, mix, dtype)
        edge = int(rng.choice([0, 127, 128, 4095, 4096, length - 1])) % length
        special = float(rng.choice([np.nan, np.inf, -np.inf, 700.0, -700.0, 60.0]))
        if strided:
            x[edge, :] = special
        else:
            x[:, edge] = special
        x = round_to(x, dtype)
        yield dict(id=f"lcse-tile-{seed}-{dtype}-{mix}-{shape}-{special}@{edge}", x=x,
                   g=values(rng, shape, "normal", dtype), axis=0 if strided else 1,
                   exclusive=bool(rng.random() < 0.5), reverse=bool(rng.random() < 0.5), dtype=dtype, view=None)


# ------------------------------------------------------------------------------------ put_along_axis
INDEX_PATTERNS = ("random", "dup_heavy", "dup_free", "row_uniform", "negative")


def put_indices(rng, arr_shape, idx_shape, axis, pattern):
    n = arr_shape[axis]
    if n == 0 or int(np.prod(idx_shape)) == 0:
        return np.zeros(idx_shape, dtype=np.int64)
    if pattern == "dup_heavy":
        idx = rng.integers(0, min(n, 2), size=idx_shape)
    elif pattern == "dup_free":  # a permutation prefix per line (idx_shape[axis] <= n)
        moved = np.moveaxis(np.zeros(idx_shape, dtype=np.int64), axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        for r in range(flat.shape[0]):
            flat[r] = rng.permutation(n)[:flat.shape[1]]
        idx = np.moveaxis(flat.reshape(moved.shape), -1, axis)
    elif pattern == "row_uniform":  # each index row (all inner/outer positions of one k) hits one slot
        per_k = rng.integers(0, n, size=idx_shape[axis])
        shape = [1] * len(idx_shape)
        shape[axis] = idx_shape[axis]
        idx = np.broadcast_to(per_k.reshape(shape), idx_shape).copy()
    else:
        idx = rng.integers(0, n, size=idx_shape)
    if pattern == "negative" or rng.random() < 0.3:  # wrap some (or all) indices to [-n, 0)
        wrap = rng.random(idx_shape) < (1.0 if pattern == "negative" else 0.5)
        idx = np.where(wrap, idx - n, idx)
    return idx.astype(np.int64)


def put_along_axis_cases(n=None):
    """arr, indices (index_dtype int32/int64), values, axis (last = flat kernels; not last = generic
    and row-uniform kernels), reduce, include_self, broadcast, dtype, view ('transpose' on arr)."""
    name = "put_along_axis"
    n = count(144) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = PUT_DTYPES[seed % len(PUT_DTYPES)]
        reduce = REDUCES[(seed // len(PUT_DTYPES)) % len(REDUCES)]
        pattern = INDEX_PATTERNS[seed % len(INDEX_PATTERNS)]
        rank = int(rng.integers(1, 4))
        arr_shape = list(random_shape(rng, rank, None, max_dim=6 if mode() == "ci" else 24, empty_p=0.03))
        axis = int(rng.integers(-rank, rank))
        ax = axis % rank
        if pattern == "row_uniform" and rank > 1 and ax == rank - 1 and rng.random() < 0.7:
            axis = ax = int(rng.integers(0, rank - 1))
        if rng.random() < 0.15:  # a long scattered axis (crosses SIMD widths in the row kernels)
            arr_shape[ax] = int(rng.choice([17, 33, 70]))
        if rng.random() < 0.15 and ax != rank - 1:  # a wide inner block (the graph case: 64 features)
            arr_shape[-1] = 64
        arr_shape = tuple(arr_shape)
        idx_shape = list(arr_shape)
        m = int(rng.integers(0, 2 * max(arr_shape[ax], 1) + 2))
        if pattern == "dup_free":
            m = min(m, arr_shape[ax])
        elif pattern == "dup_heavy":
            m = max(m, 2 * arr_shape[ax] + 3)
        m = m if arr_shape[ax] else 0  # nothing can index an empty axis
        idx_shape[ax] = m
        broadcast = bool(rng.random() < 0.3)
        if broadcast:  # indices of size 1 off the axis, broadcast to arr
            for d in range(rank):
                if d != ax and rng.random() < 0.5:
                    idx_shape[d] = 1
        elif rng.random() < 0.5:  # broadcast=False with indices smaller than arr off the axis
            for d in range(rank):
                if d != ax and arr_shape[d] > 1 and rng.random() < 0.5:
                    idx_shape[d] = int(rng.integers(1, arr_shape[d]))
        idx_shape = tuple(idx_shape)
        idx = put_indices(rng, arr_shape, idx_shape, ax, pattern)
        if broadcast:
            full = list(arr_shape)
            full[ax] = m
            v_shape = tuple(full)
        else:
            v_shape = tuple(s + int(rng.random() < 0.2) for s in idx_shape)  # values may be bigger
        floating = dtype in FLOAT_DTYPES
        vmix = rng.choice(FINITE_MIXES + ("nan", "posinf", "neginf")) if floating else rng.choice(
            ["random", "ties", "all_equal", "small"])
        if reduce == "mul" and floating and vmix in ("x1e3", "spikes", "spread700"):
            vmix = "normal"  # products of hundreds of 1e3s are inf in float64 too: not informative
        if floating:
            arr = values(rng, arr_shape, str(vmix), dtype)
            vals = values(rng, v_shape, str(vmix), dtype)
        else:
            small = "small" if reduce == "mul" else str(vmix)
            arr = int_values(rng, arr_shape, small, dtype)
            vals = int_values(rng, v_shape, small, dtype)
        reduce_arg = reduce_spelling(reduce, seed // (len(PUT_DTYPES) * len(REDUCES)))
        yield dict(id=f"put-{seed}-{dtype}-{reduce_arg}-{pattern}-{arr_shape}-{idx_shape}-ax{axis}-b{int(broadcast)}",
                   arr=arr, indices=idx, values=vals, axis=axis, reduce=reduce, reduce_arg=reduce_arg,
                   include_self=bool(rng.random() < 0.6), broadcast=broadcast, dtype=dtype,
                   index_dtype=str(rng.choice(["int64", "int32"])), view="transpose" if rank >= 2 and rng.random() < 0.2 else None,
                   scalar_values=bool(rng.random() < 0.1))


def put_along_axis_broadcast_values_cases(n=None):
    """broadcast=True with values that need broadcasting, which the kernels read in place (strides of 0):
    a 0-d tensor, one value per index row ([E, 1]), one row for all ([1, C]), size 1 before the axis,
    size 1 in random dimensions (a part of mixed sizes is broadcast by the API), a lower rank; row
    indices (size 1 after the axis) in half the cases. The values grad is the positions' grad summed."""
    name = "put_along_axis_broadcast_values"
    n = count(72) if n is None else n
    kinds = ("scalar", "row", "shared", "outer", "random", "lower_rank")
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = PUT_DTYPES[seed % len(PUT_DTYPES)]
        reduce = REDUCES[(seed // len(PUT_DTYPES)) % len(REDUCES)]
        kind = kinds[int(rng.integers(len(kinds)))]
        pattern = INDEX_PATTERNS[int(rng.integers(len(INDEX_PATTERNS)))]
        rank = int(rng.integers(1, 4))
        arr_shape = list(random_shape(rng, rank, None, max_dim=6 if mode() == "ci" else 24, empty_p=0.03))
        axis = int(rng.integers(-rank, rank))
        ax = axis % rank
        if rng.random() < 0.3 and ax != rank - 1:  # the graph case: 64 features
            arr_shape[-1] = 64
        n_ax = arr_shape[ax]
        m = int(rng.integers(1, 2 * max(n_ax, 1) + 2)) if n_ax else 0
        m = min(m, n_ax) if pattern == "dup_free" else m
        idx_shape = list(arr_shape)
        idx_shape[ax] = m
        if rng.random() < 0.5:  # row indices
            idx_shape[ax + 1:] = [1] * (rank - ax - 1)
        idx = put_indices(rng, arr_shape, tuple(idx_shape), ax, pattern)
        target = list(arr_shape)
        target[ax] = m
        v_shape = {"scalar": (),
                   "row": [t if d <= ax else 1 for d, t in enumerate(target)],
                   "shared": [1 if d <= ax else t for d, t in enumerate(target)],
                   "outer": [1 if d < ax else t for d, t in enumerate(target)],
                   "random": [1 if rng.random() < 0.5 else t for t in target],
                   "lower_rank": target[int(rng.integers(1, rank + 1)):]}[kind]
        v_shape = tuple(v_shape)
        floating = dtype in FLOAT_DTYPES
        vmix = str(rng.choice(FINITE_MIXES + ("nan", "posinf", "neginf")) if floating else rng.choice(
            ["random", "ties", "all_equal", "small"]))
        if reduce == "mul" and floating and vmix in ("x1e3", "spikes", "spread700"):
            vmix = "normal"
        if floating:
            arr, vals = values(rng, tuple(arr_shape), vmix, dtype), values(rng, v_shape, vmix, dtype)
        else:
            small = "small" if reduce == "mul" else vmix
            arr, vals = int_values(rng, tuple(arr_shape), small, dtype), int_values(rng, v_shape, small, dtype)
        yield dict(id=f"put-bv-{seed}-{dtype}-{reduce}-{kind}-{pattern}-{tuple(arr_shape)}-{tuple(idx_shape)}-{v_shape}-ax{axis}",
                   arr=arr, indices=idx, values=vals, axis=axis, reduce=reduce,
                   reduce_arg=reduce_spelling(reduce, seed // (len(PUT_DTYPES) * len(REDUCES))),
                   include_self=bool(rng.random() < 0.6), broadcast=True, dtype=dtype,
                   index_dtype=str(rng.choice(["int64", "int32"])), view=None, scalar_values=False)


# -------------------------------------------------------------------------------- mutual_information
def mi_boundary(rng, B, S, T, modified):
    rows = []
    for _ in range(B):
        s0 = int(rng.integers(0, S + 1))
        s1 = int(rng.integers(s0, S + 1))
        t0 = int(rng.integers(0, T + 1))
        t1 = int(rng.integers(t0, T + 1))
        if modified and t1 - t0 < s1 - s0:  # modified needs frames for every symbol to reach the end
            t1 = min(T, t0 + (s1 - s0))
            s1 = min(s1, s0 + (t1 - t0))
        rows.append([s0, t0, s1, t1])
    return np.array(rows, dtype=np.int64)


def mi_values(rng, shape, mix, dtype):
    """px/py mixtures: log-probabilities are <= 0 in practice, but the op is defined for any value."""
    x = values(rng, shape, mix, dtype)
    if mix == "neginf":  # masks, as in pruned RNN-T
        x = np.where(rng.random(shape) < 0.3, -np.inf, x)
    return x


def mutual_information_cases(n=None):
    """px, py, boundary (None or random boxes), dtype (float64/float32); B>1 and B=1; both modes;
    T across several 16-cell scan blocks."""
    name = "mutual_information"
    n = count(96) if n is None else n
    mixes = ("normal", "x1e3", "spikes", "spread700", "neginf", "posinf", "nan", "all_equal", "ties", "mixed")
    for seed in range(n):
        rng = rng_for(name, seed)
        modified = bool(seed % 2)
        dtype = ("float64", "float32")[(seed // 2) % 2]
        mix = mixes[(seed // 4) % len(mixes)] if seed >= 4 else "normal"
        B = int(rng.choice([1, 1, 2, 3]))
        S = int(rng.integers(0, 6 if mode() == "ci" else 20))
        T = int(rng.choice([0, 1, 3, 15, 16, 17, 33])) if mode() == "ci" else int(rng.integers(0, 70))
        if modified:
            T = max(T, S)
        px = mi_values(rng, (B, S, T if modified else T + 1), mix, dtype)
        py = mi_values(rng, (B, S + 1, T), mix, dtype)
        boundary = mi_boundary(rng, B, S, T, modified) if rng.random() < 0.5 else None
        yield dict(id=f"mi-{seed}-{dtype}-{'mod' if modified else 'reg'}-{mix}-B{B}S{S}T{T}-bd{boundary is not None}",
                   px=px, py=py, boundary=boundary, dtype=dtype, modified=modified,
                   ans_grad=rng.uniform(0.5, 1.5, size=B))


def mutual_information_band_cases():
    """B = 1 and (rows >= 8 * threads, rows * cols >= 2^17): the banded wavefront path (use_bands in
    cpu/mutual_information.cc) when two threads are available; B = 4 with big items: items in parallel."""
    rng = rng_for("mutual_information_bands", 0)
    for i, (B, S, T, modified, box) in enumerate([(1, 127, 1100, False, None), (1, 130, 1030, True, [2, 5, 128, 1025]),
                                                 (4, 31, 1100, True, None)]):
        mix = ("normal", "spread700", "neginf")[i]
        px = mi_values(rng, (B, S, T if modified else T + 1), mix, "float64") - 1.0
        py = mi_values(rng, (B, S + 1, T), mix, "float64") - 1.0
        if mix == "spread700":  # log-probability-like: the spread is in the differences
            px, py = px - 700.0, py - 700.0
        boundary = None if box is None else np.array([box] * B, dtype=np.int64)
        yield dict(id=f"mi-band-B{B}S{S}T{T}-{'mod' if modified else 'reg'}-{mix}", px=px, py=py, boundary=boundary,
                   dtype="float64", modified=modified, ans_grad=np.ones(B))


# ------------------------------------------------------------------------------- adaptive_log_softmax
def adaptive_log_softmax_cases(n=None):
    """logits [M, K] (K across SIMD widths and remainders), target or offset, op 'target' / 'full'."""
    name = "adaptive_log_softmax"
    n = count(88) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        op = ("target", "full")[seed % 2]
        dtype = FLOAT_DTYPES[(seed // 2) % 4]
        mix = MIXES[(seed // 4) % len(MIXES)]
        M = int(rng.choice([0, 1, 2, 5, 9])) if rng.random() < 0.9 else 33
        K = int(rng.choice([1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257]))
        logits = values(rng, (M, K), mix, dtype)
        target = rng.integers(0, K, size=M).astype(np.int64)
        offset = values(rng, (M,), "normal" if rng.random() < 0.7 else "x1e3", dtype)
        yield dict(id=f"als-{seed}-{op}-{dtype}-{mix}-{M}x{K}", op=op, logits=logits, target=target, offset=offset,
                   g=values(rng, (M,) if op == "target" else (M, K), "normal", dtype), dtype=dtype,
                   view="stride" if rng.random() < 0.15 else None)


def adaptive_log_softmax_thread_cases():
    """>= 2^20 elements per thread: the rows are split over the threads (row_grain)."""
    rng = rng_for("adaptive_threads", 0)
    for op, dtype in (("target", "float64"), ("full", "float32")):
        M, K = 2100, 1000
        logits = values(rng, (M, K), "mixed" if dtype == "float64" else "spikes", dtype)
        yield dict(id=f"als-threads-{op}-{dtype}", op=op, logits=logits, target=rng.integers(0, K, size=M),
                   offset=values(rng, (M,), "normal", dtype), g=values(rng, (M,) if op == "target" else (M, K),
                                                                          "normal", dtype), dtype=dtype, view=None)


def adaptive_projection_grad_cases(n=None):
    """pe_adaptive_linear_target / _vjp (float32): x [M, n_in] one-hot rows (ones where n_in = 1), so that the
    logits x @ w are rows of w exactly, in any summation order and row block: w of every finite mix (and of
    every mix where n_in = 1: no 0 * inf), on each of the op's paths: the grad in place in the logits block
    (n_in >= 128) or in passes of columns (the last one partial), w copied transposed (M >= 512, n_in < 1024) or
    read in place, one block of rows or several (K = 300000: 27-row blocks)."""
    name = "adaptive_projection_grad"
    shapes = ((5, 8, 300), (600, 16, 4000), (520, 8, 2000), (64, 4, 33000), (512, 128, 300), (3, 128, 17),
              (7, 1024, 50), (0, 16, 40), (9, 3, 1), (520, 256, 700), (40, 1, 300000), (6, 1, 500))
    n = count(2 * len(shapes)) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        m, n_in, k = shapes[seed % len(shapes)]
        mixes = MIXES if n_in == 1 else FINITE_MIXES
        mix = mixes[(seed // len(shapes) + seed) % len(mixes)]
        x = np.zeros((m, n_in))
        x[np.arange(m), rng.integers(0, n_in, size=m)] = 1
        yield dict(id=f"als-proj-{seed}-{mix}-{m}x{n_in}x{k}", x=x, w=values(rng, (n_in, k), mix, "float32"),
                   target=rng.integers(0, k, size=m).astype(np.int64), g=values(rng, (m,), "normal", "float32"))


def adaptive_ignore_cases(n=None):
    """The adaptive softmax's layer math with ignore_index / reduction: random cluster layouts, inputs of
    every finite mix, some / no / all rows ignored (ignore_index -100, -1 or a class)."""
    name = "adaptive_ignore"
    n = count(24) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        in_features, n_classes = int(rng.choice([1, 3, 8])), int(rng.choice([2, 5, 17, 40]))
        cutoffs = sorted(rng.choice(np.arange(1, n_classes), size=min(int(rng.integers(1, 4)), n_classes - 1),
                                    replace=False).tolist()) + [n_classes]
        N = int(rng.choice([0, 1, 4, 13]))
        ignore_index = int(rng.choice([-100, -1, int(rng.integers(0, n_classes))]))
        share = (0.0, 0.3, 1.0)[seed % 3]
        label = rng.integers(0, n_classes, size=N)
        label[rng.random(N) < share] = ignore_index
        mix = FINITE_MIXES[(seed // 3) % len(FINITE_MIXES)]
        tails = [[rng.normal(size=(in_features, h)), rng.normal(size=(h, hi - lo))]
                 for lo, hi, h in zip(cutoffs, cutoffs[1:], rng.integers(1, 4, size=len(cutoffs) - 1))]
        yield dict(id=f"als-ignore-{seed}-{mix}-N{N}-share{share}-ii{ignore_index}",
                   x=values(rng, (N, in_features), mix),
                   label=label.astype(np.int64), head=rng.normal(size=(in_features, cutoffs[0] + len(cutoffs) - 1)),
                   tails=tails, cutoffs=cutoffs, ignore_index=ignore_index,
                   reduction=("mean", "sum", "none")[(seed // 2) % 3])


# ------------------------------------------------------------------------------------------- RNN-T
RNNT_LOSSES = ("simple", "smoothed", "pruned", "full")
RNNT_SCALES = {"normal": 1.0, "x30": 30.0, "x1e3": 1e3}


def rnnt_cases(n=None):
    """Small transducer problems: lm [B, S+1, C], am [B, T, C], logits [B, T, S+1, C] (full), pruned
    logits [B, T, R, C] with valid ranges, symbols, boundary; logits scaled by 1, 30 or 1e3; every spelling of
    rnnt_type and reduction (option_spelling)."""
    name = "rnnt"
    n = count(72) if n is None else n
    types = ("regular", "modified", "constrained")
    for seed in range(n):
        rng = rng_for(name, seed)
        loss = RNNT_LOSSES[seed % 4]
        rnnt_type = types[(seed // 4) % 3]
        scale_name = tuple(RNNT_SCALES)[(seed // 12) % 3]
        scale = RNNT_SCALES[scale_name]
        B = int(rng.integers(1, 3))
        S = int(rng.integers(0, 4))
        T = int(rng.integers(max(S, 1) if rnnt_type != "regular" else 1, 6))
        C = int(rng.integers(2, 6))
        lm = rng.normal(size=(B, S + 1, C)) * scale
        am = rng.normal(size=(B, T, C)) * scale
        logits = rng.normal(size=(B, T, S + 1, C)) * scale
        symbols = rng.integers(1, C, size=(B, S)).astype(np.int64)
        boundary = None
        if rng.random() < 0.5:
            rows = []
            for _ in range(B):
                s_end = int(rng.integers(0, S + 1))
                t_end = int(rng.integers(max(s_end, 1) if rnnt_type != "regular" else 1, T + 1))
                rows.append([0, 0, s_end, t_end])
            boundary = np.array(rows, dtype=np.int64)
        # pruned: a non-decreasing window start per frame, steps < R, ending where s_end fits
        R = int(rng.integers(2 if rnnt_type == "regular" else 1, S + 2)) if S else 1
        R = max(R, 2) if rnnt_type == "regular" and S else R
        R = min(R, S + 1)
        starts = np.zeros((B, T), dtype=np.int64)
        for b in range(B):
            cur = 0
            for t in range(T):
                if t:
                    cur = min(S + 1 - R, cur + int(rng.integers(0, R)))
                starts[b, t] = cur
        ranges = starts[..., None] + np.arange(R)
        pruned_logits = rng.normal(size=(B, T, R, C)) * scale
        reduction = ("none", "mean", "sum")[(seed // 2) % 3]
        yield dict(id=f"rnnt-{seed}-{loss}-{rnnt_type}-{scale_name}-B{B}S{S}T{T}C{C}-{reduction}", loss=loss,
                   rnnt_type=rnnt_type, rnnt_type_arg=option_spelling(rnnt_type, seed // 3),
                   reduction=reduction, reduction_arg=option_spelling(reduction, seed // 5),
                   lm=lm, am=am, logits=logits, pruned_logits=pruned_logits, ranges=ranges, symbols=symbols,
                   boundary=boundary, termination_symbol=0, lm_only_scale=float(rng.choice([0.0, 0.1, 0.25])),
                   am_only_scale=float(rng.choice([0.0, 0.1, 0.3])))



def transducer_jump_cases(n=None):
    """tdt_loss and multiblank_rnnt_loss problems: logits [B, T, S+1, C + D] (TDT, durations lists of 2 to 6
    entries holding 0 and 1 on even draws, any 1 to 6 distinct ints in [0, 8] with one >= 1 on odd ones: without
    0, without 1, unsorted) or [B, T, S+1, C] (multi-blank, 0 to 3 big blanks), scaled by 1, 30 or 1e4,
    some units and some whole nodes -inf; boundaries with any start, items without a path (T_b = 0 < S_b);
    frames of up to 10 nodes (several SIMD chunks); sigma, fastemit_lambda and the grad clamp (off, or
    0.01 / 0.3); every reduction in every spelling (option_spelling)."""
    name = "transducer_jump"
    n = count(48) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        kind = ("tdt", "multiblank")[seed % 2]
        scale = (1.0, 30.0, 1e4)[(seed // 2) % 3]
        B, T, S = int(rng.integers(1, 4)), int(rng.integers(0, 7)), int(rng.choice([0, 1, 2, 3, 5, 9]))
        if kind == "tdt" and (seed // 2) % 2 == 0:
            extra = rng.permutation(np.arange(2, 9))[: int(rng.integers(0, 5))]
            lattice = [int(d) for d in rng.permutation(np.concatenate([[0, 1], extra]))]
        elif kind == "tdt":
            lattice = [int(d) for d in rng.permutation(np.arange(9))[: int(rng.integers(1, 7))]]
            lattice = lattice if max(lattice) >= 1 else lattice + [int(rng.integers(1, 9))]
        if kind == "tdt":
            C = int(rng.integers(1, 6))
            units, blank = C + len(lattice), int(rng.integers(0, C))
        else:
            lattice = [int(d) for d in rng.permutation(np.arange(2, 7))[: int(rng.integers(0, 4))]]
            C = len(lattice) + int(rng.integers(1, 5))
            units, blank = C, C - 1 - int(rng.integers(0, C - len(lattice)))
        logits = rng.normal(size=(B, T, S + 1, units)) * scale
        if seed % 3 == 0 and logits.size:
            logits[rng.random(logits.shape) < 0.1] = -np.inf
        if seed % 5 == 0 and logits.size:
            logits[0, int(rng.integers(0, T)), int(rng.integers(0, S + 1)), :C] = -np.inf  # a node without arcs
        boundary = None
        if rng.random() < 0.6:
            rows = []
            for _ in range(B):
                s1, t1 = int(rng.integers(0, S + 1)), int(rng.integers(0, T + 1))
                rows.append([int(rng.integers(0, s1 + 1)), int(rng.integers(0, t1 + 1)), s1, t1])
            boundary = np.array(rows, dtype=np.int64)
        reduction = ("none", "mean", "sum")[(seed // 6) % 3]
        yield dict(id=f"jump-{seed}-{kind}-x{scale:g}-B{B}T{T}S{S}-{lattice}-{reduction}", kind=kind, logits=logits,
                   reduction=reduction, reduction_arg=option_spelling(reduction, seed // 18),
                   symbols=rng.integers(0, C, size=(B, S)).astype(np.int64), lattice=lattice, blank=blank,
                   boundary=boundary, sigma=float(rng.choice([0.0, 0.05, 0.5])),
                   fastemit_lambda=float(rng.choice([0.0, 0.3])), clamp=float(rng.choice([-1.0, 0.01, 0.3])))


def fused_joiner_cases(n=None):
    """The joiner fused into the losses: am [B, T, J], lm [B, S+1, J], weight [J, X], bias [X] (or none) of every
    finite mixture, NaN in am, -inf bias columns; each activation; the full, pruned (valid ranges), TDT and
    multi-blank losses, with boundaries; J and X across SIMD widths and remainders."""
    name = "fused_joiner"
    n = count(48) if n is None else n
    kinds, types = ("full", "pruned", "tdt", "multiblank"), ("regular", "modified", "constrained")
    for seed in range(n):
        rng = rng_for(name, seed)
        kind, activation = kinds[seed % 4], ("tanh", "relu", "identity")[(seed // 4) % 3]
        mix = (*FINITE_MIXES, "nan")[(seed // 12) % (len(FINITE_MIXES) + 1)] if seed >= 12 else "normal"
        rnnt_type = types[seed % 3] if kind in ("full", "pruned") else "regular"
        B, S = int(rng.integers(1, 3)), int(rng.integers(0, 4))
        T = int(rng.integers(max(S, 1), 6))
        J = int(rng.choice([1, 3, 8, 17]))
        durations = [0, 1, *[int(d) for d in rng.permutation(np.arange(2, 5))[: int(rng.integers(0, 3))]]]
        big = [int(d) for d in rng.permutation(np.arange(2, 5))[: int(rng.integers(0, 3))]]
        C = int(rng.choice([2, 5, 9, 16, 33]))
        X = C + len(durations) if kind == "tdt" else max(C, len(big) + 1)
        blank = int(rng.integers(0, C)) if kind != "multiblank" else X - 1
        bias = None if seed % 5 == 0 else rng.normal(size=X)
        if bias is not None and seed % 7 == 3:
            bias[rng.integers(0, X)] = -np.inf  # a unit no arc can take
        ranges, boundary = None, None
        if kind == "pruned":
            R = min(S + 1, max(2 if rnnt_type == "regular" else 1, int(rng.integers(1, S + 2))))
            starts = np.sort(rng.integers(0, S + 2 - R, size=(B, T)), axis=1)
            ranges = (starts[..., None] + np.arange(R)).astype(np.int64)
        if rng.random() < 0.5:
            ends = [(int(rng.integers(0, S + 1)),) for _ in range(B)]
            boundary = np.array([[0, 0, s, int(rng.integers(max(s, 1), T + 1))] for (s,) in ends], dtype=np.int64)
        yield dict(id=f"joiner-{seed}-{kind}-{rnnt_type}-{activation}-{mix}-B{B}T{T}S{S}J{J}X{X}", kind=kind,
                   rnnt_type=rnnt_type, activation=activation, am=values(rng, (B, T, J), mix),
                   lm=values(rng, (B, S + 1, J), mix if mix != "nan" else "normal"),
                   weight=rng.normal(size=(J, X)) / np.sqrt(J), bias=bias, ranges=ranges, boundary=boundary,
                   symbols=rng.integers(0, C if kind != "multiblank" else X - len(big), size=(B, S)).astype(np.int64),
                   blank=blank, durations=durations if kind == "tdt" else big)


def rnnt_joint_cases(n=None):
    """The fused joiner op (rnnt_joint_logprobs) on its own: full logits [B, T, S+1, C] or pruned [B, T, R, C]
    with valid ranges, every value mixture and dtype, C across SIMD widths and remainders; px/py grads."""
    name = "rnnt_joint"
    n = count(48) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        pruned = seed % 2 == 1
        dtype = FLOAT_DTYPES[(seed // 2) % 4]
        mix = MIXES[(seed // 8) % len(MIXES)] if seed >= 8 else MIXES[seed % len(MIXES)]
        B, T, S = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(0, 4))
        C = int(rng.choice([1, 2, 7, 8, 9, 16, 17, 33, 257]))
        R = min(int(rng.integers(1, S + 2)), S + 1) if pruned else S + 1
        ranges = None
        if pruned:
            starts = np.sort(rng.integers(0, S + 2 - R, size=(B, T)), axis=1)
            ranges = (starts[..., None] + np.arange(R)).astype(np.int64)
        yield dict(id=f"joint-{seed}-{'pruned' if pruned else 'full'}-{dtype}-{mix}-B{B}T{T}S{S}R{R}C{C}",
                   logits=values(rng, (B, T, R, C), mix, dtype), symbols=rng.integers(0, C, size=(B, S)).astype(np.int64),
                   ranges=ranges, termination_symbol=int(rng.integers(0, C)), dtype=dtype,
                   px_grad=values(rng, (B, S, T), "normal", dtype), py_grad=values(rng, (B, S + 1, T), "normal", dtype),
                   view="stride" if rng.random() < 0.2 else None)


def rnnt_prune_gather_cases(n=None):
    """do_rnnt_pruning's gather x[b, index[b, t, r]] for x [B, N, D] and its scatter-add grad: few rows N
    (each grad row sums many of the T*R out rows), D across the grad's column blocks of 64, every dtype,
    value mixtures in x and finite ones in the grads."""
    name = "rnnt_prune_gather"
    n = count(24) if n is None else n
    for seed in range(n):
        rng = rng_for(name, seed)
        dtype = FLOAT_DTYPES[seed % 4]
        mix = MIXES[seed % len(MIXES)]
        B, N, T, R = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(1, 7))
        D = int(rng.choice([1, 2, 7, 63, 64, 65, 130, 257]))
        yield dict(id=f"gather-{seed}-{dtype}-{mix}-B{B}N{N}T{T}R{R}D{D}", dtype=dtype,
                   x=values(rng, (B, N, D), mix, dtype), index=rng.integers(0, N, size=(B, T, R)).astype(np.int64),
                   out_grad=values(rng, (B, T, R, D), FINITE_MIXES[seed % len(FINITE_MIXES)], dtype),
                   view="stride" if rng.random() < 0.25 else None)


# ---------------------------------------------------------------------------------------- comparisons
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def finite_scale(*arrays) -> float:
    """max(1, the largest finite magnitude in the arrays): the scale of absolute errors."""
    vals = [np.abs(a[np.isfinite(a)]).max() for a in map(np.asarray, arrays) if np.isfinite(a).any()]
    return float(max([1.0] + vals))


# Unit roundoff of the accumulation (16-bit types accumulate in float32), and the smallest subnormal: the
# absolute rounding error of a result in the subnormal range, of the accumulation and of the output dtype.
ACC_EPS = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -24}
ACC_TINY = {"float64": 2.0 ** -1074, "float32": 2.0 ** -149, "float16": 2.0 ** -149, "bfloat16": 2.0 ** -149}
OUT_TINY = {"float64": 2.0 ** -1074, "float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}


def put_slot_bounds(arr, idx_full, vals_full, ax, reduce, include_self, dtype, ref_out, ref_arr_grad, ref_vals_grad,
                    flush_subnormals=False):
    """Absolute error bounds of put_along_axis (arr-shaped out and arr grad, values-shaped values grad), each
    from its own slot's contributors (c of them, the slot's value included when include_self): a sum's
    rounding is at most c * eps * sum|terms| (mean: that over c), a product's and the mul grads' at most
    (c + 2) * (eps * |result| + tiny) (eps, tiny: ACC_EPS, ACC_TINY of dtype); amin / amax / assign and the
    add / mean grads are exact up to the final rounding, which assert_matches' rtol * |ref| covers (plus one
    subnormal step of the output dtype for add, mean and mul). flush_subnormals: float32 accumulation that
    flushes subnormal partial sums to zero (CUDA's float atomics), up to the smallest normal per update."""
    arr, vals_full = np.asarray(arr, np.float64), np.asarray(vals_full, np.float64)
    vals_full = vals_full[tuple(slice(0, s) for s in idx_full.shape)]  # bigger values: the rest is unused
    shape = arr.shape
    zero_arr, zero_vals = np.zeros(shape), np.zeros(idx_full.shape)
    if arr.size == 0 or idx_full.size == 0:
        return zero_arr, zero_arr, zero_vals
    pos = list(np.indices(idx_full.shape))
    pos[ax] = np.asarray(idx_full, np.int64) % shape[ax]
    slot = np.ravel_multi_index(tuple(pos), shape)
    mag = lambda a: np.where(np.isfinite(a), np.abs(a), 0.0)  # a non-finite term makes the result non-finite
    count = np.bincount(slot.ravel(), minlength=arr.size).reshape(shape).astype(np.float64)
    abs_sum = np.bincount(slot.ravel(), weights=mag(vals_full).ravel(), minlength=arr.size).reshape(shape)
    if include_self:
        written = count > 0
        count, abs_sum = count + written, abs_sum + mag(arr) * written
    eps, tiny, out_tiny = ACC_EPS[dtype], ACC_TINY[dtype], OUT_TINY[dtype]
    if flush_subnormals and dtype != "float64":
        tiny = 2.0 ** -126
    if reduce == "add":
        return count * (eps * abs_sum + tiny) + out_tiny, zero_arr, zero_vals
    if reduce == "mean":
        return eps * abs_sum + tiny + 2 * out_tiny, zero_arr, zero_vals
    if reduce == "mul":
        c, cv = count + 2, (count + 2).ravel()[slot]
        return (c * (eps * mag(ref_out) + tiny) + out_tiny, c * (eps * mag(ref_arr_grad) + tiny) + out_tiny,
                cv * (eps * mag(ref_vals_grad) + tiny) + out_tiny)
    return zero_arr, zero_arr, zero_vals


def assert_matches(got, ref, dtype, scale=1.0, what="out", rtol=None, abs_scale=None, atol=None):
    """NaN, +inf and -inf exactly where the reference (rounded to dtype) has them; finite values within
    rtol * |ref| + rtol * scale (+ rtol * abs_scale, an array of ref's shape: e.g. the sum of the magnitudes
    of a sum's terms) (+ atol, an array of ref's shape: absolute bounds) (rtol: RTOL[dtype] unless given;
    integers: exact)."""
    got = np.asarray(got, dtype=np.float64)
    ref = round_to(np.asarray(ref, dtype=np.float64), dtype) if dtype in FLOAT_DTYPES else np.asarray(ref)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    for name, check in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        bad = check(got) != check(ref)
        assert not bad.any(), f"{what}: {name} positions differ at {np.argwhere(bad)[:5].tolist()}: " \
                              f"got {got[bad][:5]}, expected {ref[bad][:5]}"
    finite = np.isfinite(ref)
    rtol = RTOL.get(dtype, 0.0) if rtol is None else rtol
    err = np.abs(got[finite] - ref[finite])
    bound = rtol * np.abs(ref[finite]) + rtol * scale
    if abs_scale is not None:
        bound = bound + rtol * np.asarray(abs_scale, dtype=np.float64)[finite]
    if atol is not None:
        bound = bound + np.broadcast_to(np.asarray(atol, dtype=np.float64), ref.shape)[finite]
    if err.size and (err > bound).any():
        i = int(np.argmax(err - bound))
        where = np.argwhere(finite)[i].tolist()
        raise AssertionError(f"{what}: at {where} got {got[finite][i]!r}, expected {ref[finite][i]!r} "
                             f"(|err| {err[i]:.3g} > bound {bound[i]:.3g}; {int((err > bound).sum())} bad)")


def put_along_axis_path_cases():
    """One case per fast path, always present: the flat kernels (last axis; float32 + int64 add grads
    take the AVX-512 masked gathers, m = 37 leaves a partial mask), the row-uniform rows (graph case:
    axis 0 with 64 features: past L2, one thread over whole rows; `row_uniform_columns`, a destination
    that stays in cache, keeps the two threads' column blocks), and scattered rows that are not uniform (the per-slot bookkeeping). Under
    PADDLE_EXT_PUT_TILE=small the scattered layouts take the destination-partitioned passes: one part
    (one thread), column parts (`bucket_columns`, two threads) and outer-row parts (`bucket_outer`);
    `bucket_hot` gives slots ~300 contributions (mean's byte counts there carry past 255; finite values,
    so that a wrong count shows)."""
    rng = rng_for("put_along_axis_paths", 0)
    layouts = {"flat": ((3, 20), (3, 37), 1, "negative"), "row_uniform": ((20, 64), (37, 64), 0, "row_uniform"),
               "row_uniform_columns": ((2, 48), (37, 48), 0, "row_uniform"),
               "scattered": ((20, 6), (37, 6), 0, "random"), "bucket_columns": ((40, 24), (83, 24), 0, "random"),
               "bucket_outer": ((4, 30, 5), (4, 61, 5), 1, "random"),
               "bucket_hot": ((40, 24), (600, 24), 0, "dup_heavy")}
    for name, (arr_shape, idx_shape, axis, pattern) in layouts.items():
        for reduce in REDUCES:
            if name == "bucket_hot" and reduce == "mul":  # products of ~300 factors overflow the reference
                continue
            for turn, (dtype, index_dtype) in enumerate((("float32", "int64"), ("float64", "int32"))):
                idx = put_indices(rng, arr_shape, idx_shape, axis, pattern)
                mix = "ties" if reduce in ("amin", "amax") else "normal" if reduce == "mul" or name == "bucket_hot" else "spikes"
                yield dict(id=f"put-path-{name}-{reduce}-{dtype}-{index_dtype}", arr=values(rng, arr_shape, mix, dtype),
                           indices=idx, values=values(rng, idx_shape, mix, dtype), axis=axis - len(arr_shape) * (axis == 1),
                           reduce=reduce, reduce_arg=reduce_spelling(reduce, turn),
                           include_self=reduce != "assign" and bool(rng.random() < 0.5),
                           broadcast=False, dtype=dtype, index_dtype=index_dtype, view=None, scalar_values=False)
