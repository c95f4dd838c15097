"""GPU benchmark of the CUDA launchers through the test shims (run on a GPU machine; not a test).

    python unittests/gpu/bench_gpu.py [--json PATH] [--quick]

Times each launcher with CUDA events on the default stream (launches stay asynchronous: `pe_set_sync(0)`),
median of several repeats, and reports achieved bandwidth (bytes the kernel must read and write / time)
next to a device-to-device copy's, and the time of PyTorch's CUDA op when torch with CUDA is installed (and
fast_rnnt's mutual_information_recursion where `import fast_rnnt` works).
Paddle's GPU build is not needed (none is installed on the lent GPU machines).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_runtime import DTYPE_CODES, DeviceBuffer, check, host_array, library, release_pending, to_float64  # noqa: E402

I64 = ctypes.c_int64
REDUCE_CODES = {"assign": 0, "add": 1, "mul": 2, "mean": 3, "amin": 4, "amax": 5}
TORCH_REDUCE = {"add": "sum", "mul": "prod", "mean": "mean", "amin": "amin", "amax": "amax"}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def _p(buf):
    return ctypes.c_void_p(buf.ptr if buf is not None else 0)


def time_ms(launch, iters=20, repeats=5):
    """Median over repeats of the mean time of `iters` back-to-back launches (after a warm-up)."""
    lib = library()
    launch()
    check(lib.pe_synchronize())
    samples = []
    for _ in range(repeats):
        lib.pe_timer_start()
        for _ in range(iters):
            launch()
        samples.append(lib.pe_timer_stop() / iters)
    check(lib.pe_synchronize())
    return statistics.median(samples)


def torch_ms(fn, iters=20, repeats=5):
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / iters)
    return statistics.median(samples)


def cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def copy_bandwidth(rows):
    lib = library()
    nbytes = 1 << 30
    src, dst = DeviceBuffer.empty((nbytes,), np.uint8), DeviceBuffer.empty((nbytes,), np.uint8)
    ms = time_ms(lambda: lib.pe_d2d(_p(dst), _p(src), I64(nbytes)), iters=10)
    gbps = 2 * nbytes / ms / 1e6
    rows.append({"op": "copy", "case": "device-to-device copy 1 GiB", "ms": ms, "GB/s": gbps})
    return gbps


def bench_logcumsumexp(rows, torch, copy_gbps, quick):
    lib = library()
    shapes = [((4096, 4096), -1), ((4096, 4096), 0), ((16, 1 << 20), -1)]
    if quick:
        shapes = [((1024, 1024), -1), ((1024, 1024), 0)]
    cases = [(s, a, "float32") for s, a in shapes] + [(shapes[0][0], a, d) for a in (-1, 0)
                                                       for d in ("float64", "float16", "bfloat16")]
    cases += [(s, a, d) for s, a in shapes[2:] for d in ("float16", "bfloat16")]  # long rows, 16-bit too
    rng = np.random.default_rng(0)
    for shape, axis, dtype in cases:
        x = rng.standard_normal(size=shape).astype(np.float32) * 3
        outer, n, inner = (shape[0], shape[1], 1) if axis == -1 else (1, shape[0], shape[1])
        dx = DeviceBuffer(host_array(x, dtype))
        dout, dg, dgx = (DeviceBuffer(host_array(np.zeros(shape), dtype)) for _ in range(3))
        dg = DeviceBuffer(host_array(rng.standard_normal(size=shape), dtype))
        code = DTYPE_CODES[dtype]
        fwd = lambda: lib.pe_logcumsumexp_forward(code, _p(dx), _p(dout), I64(outer), I64(n), I64(inner), 0, 0)
        bwd = lambda: lib.pe_logcumsumexp_backward(code, _p(dx), _p(dout), _p(dg), _p(dgx), I64(outer), I64(n),
                                                   I64(inner), 0, 0)
        nbytes = x.size * ITEMSIZE[dtype]
        f_ms, b_ms = time_ms(fwd), time_ms(bwd)
        row = {"op": "logcumsumexp", "case": f"{list(shape)} axis={axis} {dtype}", "fwd ms": f_ms,
               "fwd GB/s": 2 * nbytes / f_ms / 1e6, "fwd % copy": 100 * 2 * nbytes / f_ms / 1e6 / copy_gbps,
               "bwd ms": b_ms, "bwd GB/s": 4 * nbytes / b_ms / 1e6}
        if torch is not None:
            tdt = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                   "bfloat16": torch.bfloat16}[dtype]
            tx = torch.from_numpy(x).to("cuda", tdt)
            row["torch fwd ms"] = torch_ms(lambda: torch.logcumsumexp(tx, axis))
            row["fwd speedup vs torch"] = row["torch fwd ms"] / f_ms
            tg = torch.randn(shape, device="cuda", dtype=tdt)
            txg = tx.clone().requires_grad_(True)

            def torch_fwd_bwd():
                return torch.autograd.grad(torch.logcumsumexp(txg, axis), txg, tg)

            row["torch fwd+bwd ms"] = torch_ms(torch_fwd_bwd)
            row["fwd+bwd speedup vs torch"] = row["torch fwd+bwd ms"] / (f_ms + b_ms)
        # accuracy of this run's output against float64 on the host (from the inputs as the dtype holds
        # them; float16/bfloat16 include the rounding of the output to the dtype, 2^-11 / 2^-8)
        if dtype != "float64":
            check(fwd())
            check(lib.pe_synchronize())
            got = to_float64(dout.get(), dtype)
            ref = np.logaddexp.accumulate(to_float64(host_array(x, dtype), dtype), axis=axis)
            row["max rel err vs float64"] = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)))
        rows.append(row)
        print(row, flush=True)
        release_pending()


def bench_put_along_axis(rows, torch, quick):
    """axis 0 float32, include_self: the graph case (one index per update row, repeated over the features),
    the same size with independent indices per element, and a small square case."""
    cases = [("rows", 100_000, 200_000, 64), ("elements", 100_000, 200_000, 64), ("rows", 1024, 2048, 1024)] if quick \
        else [("rows", 1_000_000, 2_000_000, 64), ("elements", 1_000_000, 2_000_000, 64), ("rows", 1024, 2048, 1024)]
    for pattern, n, m, inner in cases:
        _bench_put_along_axis_case(rows, torch, pattern, n, m, inner)


def _bench_put_along_axis_case(rows, torch, pattern, n, m, inner):
    lib = library()
    rng = np.random.default_rng(0)
    arr = rng.standard_normal(size=(n, inner), dtype=np.float32)
    if pattern == "rows":
        idx = np.ascontiguousarray(np.broadcast_to(rng.integers(0, n, size=(m, 1)), (m, inner))).astype(np.int64)
    else:
        idx = rng.integers(0, n, size=(m, inner), dtype=np.int64)
    vals = rng.random(size=(m, inner), dtype=np.float32) + 0.5
    darr, didx, dvals = DeviceBuffer(arr), DeviceBuffer(idx), DeviceBuffer(vals)
    dacc, dgrad, dag = (DeviceBuffer.empty((n, inner), np.float32) for _ in range(3))
    dvg = DeviceBuffer.empty((m, inner), np.float32)
    slots = n * inner
    # the scratch the binding allocates: assign's winner tables (uninitialised: the launcher prepares them),
    # counts (zeroed) for mean and the grads of mean/amin/amax, aux (zeroed) for amin/amax
    lib.pe_put_along_axis_winner_scratch.restype = ctypes.c_int64
    winner_bytes = lib.pe_put_along_axis_winner_scratch(I64(1), I64(n), I64(inner))
    winner = DeviceBuffer.empty((winner_bytes,), np.uint8)
    count, aux = DeviceBuffer.empty((slots,), np.int32), DeviceBuffer.empty((slots,), np.int32)
    lib.pe_put_along_axis_sorted_workspace.restype = ctypes.c_int64
    ws_bytes = lib.pe_put_along_axis_sorted_workspace(I64(m * inner), I64(slots))  # mul's grads sort by slot
    workspace = DeviceBuffer.empty((ws_bytes,), np.uint8)
    dout = DeviceBuffer.empty((n, inner), np.float32)
    abytes, ibytes, vbytes = arr.nbytes, idx.nbytes, vals.nbytes
    for reduce in REDUCE_CODES:
        r = REDUCE_CODES[reduce]

        def fwd():
            lib.pe_d2d(_p(dacc), _p(darr), I64(abytes))
            if reduce == "mean":
                lib.pe_memset(_p(count), 0, I64(slots * 4))
            return lib.pe_put_along_axis_forward(0, 5, r, _p(dacc), _p(dvals), _p(didx),
                                                 _p(count) if reduce == "mean" else _p(None),
                                                 _p(winner) if reduce == "assign" else _p(None),
                                                 I64(1), I64(n), I64(m), I64(inner), 1)

        def bwd():  # the scratch the binding prepares for this mode (include_self: add needs no counts)
            if reduce in ("mean", "amin", "amax"):
                lib.pe_memset(_p(count), 0, I64(slots * 4))
            if reduce in ("amin", "amax"):
                lib.pe_memset(_p(aux), 0, I64(slots * 4))
            uses_count = reduce in ("mean", "amin", "amax")
            return lib.pe_put_along_axis_backward(0, 5, r, _p(darr), _p(didx), _p(dvals), _p(dout), _p(dgrad),
                                                  _p(dag), _p(dvg), _p(winner), _p(count) if uses_count else _p(None),
                                                  _p(aux), _p(workspace), I64(ws_bytes), I64(1), I64(n), I64(m),
                                                  I64(inner), 1)

        check(fwd())
        check(lib.pe_synchronize())
        lib.pe_d2d(_p(dout), _p(dacc), I64(abytes))
        f_ms = time_ms(fwd, iters=5)
        b_ms = time_ms(bwd, iters=5)
        row = {"op": "put_along_axis",
               "case": f"{reduce} [{n},{inner}]<-[{m},{inner}] axis=0 float32 {pattern} indices",
               "fwd ms": f_ms, "fwd GB/s": (2 * abytes + ibytes + vbytes) / f_ms / 1e6, "bwd ms": b_ms}
        if torch is not None:
            ta, ti, tv = (torch.from_numpy(a).cuda() for a in (arr, idx, vals))

            def tfwd(ta=ta, tv=tv):
                if reduce == "assign":
                    return torch.scatter(ta, 0, ti, tv)
                return torch.scatter_reduce(ta, 0, ti, tv, TORCH_REDUCE[reduce])

            row["torch fwd ms"] = torch_ms(tfwd, iters=5)
            row["fwd speedup vs torch"] = row["torch fwd ms"] / f_ms
            tag, tvg = ta.clone().requires_grad_(True), tv.clone().requires_grad_(True)
            tg = torch.randn_like(ta)
            row["torch fwd+bwd ms"] = torch_ms(lambda: torch.autograd.grad(tfwd(tag, tvg), [tag, tvg], tg), iters=5)
            row["fwd+bwd speedup vs torch"] = row["torch fwd+bwd ms"] / (f_ms + b_ms)
            del ta, ti, tv, tag, tvg, tg
            torch.cuda.empty_cache()
        rows.append(row)
        print(row, flush=True)
        release_pending()


def bench_adaptive_log_softmax(rows, torch, quick):
    lib = library()
    copy_gbps = next((r["GB/s"] for r in rows if r["op"] == "copy"), None)
    shapes = [(2048, 20003), (256, 40000), (4096, 140000), (64, 140000), (8192, 8192)]
    for m, k in ([(256, 4000)] if quick else shapes):
        rng = np.random.default_rng(0)
        logits = rng.standard_normal(size=(m, k), dtype=np.float32)
        target = rng.integers(0, k, size=m).astype(np.int64)
        dl, dt = DeviceBuffer(logits), DeviceBuffer(target)
        dout, dlse, dog = (DeviceBuffer.empty((m,), np.float32) for _ in range(3))
        dog = DeviceBuffer(np.ones(m, np.float32))
        dlg = DeviceBuffer.empty((m, k), np.float32)
        fwd = lambda: lib.pe_als_target_forward(0, _p(dl), _p(dt), _p(dout), _p(dlse), I64(m), I64(k))
        check(fwd())
        bwd = lambda: lib.pe_als_target_backward(0, _p(dl), _p(dt), _p(dlse), _p(dog), _p(dlg), I64(m), I64(k))
        f_ms, b_ms = time_ms(fwd), time_ms(bwd)
        row = {"op": "adaptive_log_softmax", "case": f"target log-prob [{m},{k}] float32", "fwd ms": f_ms,
               "fwd GB/s": logits.nbytes / f_ms / 1e6, "bwd ms": b_ms, "bwd GB/s": 2 * logits.nbytes / b_ms / 1e6}
        if copy_gbps:  # the forward only reads: its share of the copy's read + write bandwidth
            row["fwd % copy"] = 100 * row["fwd GB/s"] / copy_gbps
        if torch is not None:
            tl, tt = torch.from_numpy(logits).cuda(), torch.from_numpy(target).cuda()
            row["torch fwd ms"] = torch_ms(lambda: torch.log_softmax(tl, 1).gather(1, tt[:, None]))
            row["fwd speedup vs torch"] = row["torch fwd ms"] / f_ms
            tlg = tl.clone().requires_grad_(True)
            og = torch.ones(m, 1, device="cuda")
            row["torch fwd+bwd ms"] = torch_ms(
                lambda: torch.autograd.grad(torch.log_softmax(tlg, 1).gather(1, tt[:, None]), tlg, og))
            row["fwd+bwd speedup vs torch"] = row["torch fwd+bwd ms"] / (f_ms + b_ms)
        rows.append(row)
        print(row, flush=True)
        release_pending()


def fast_rnnt_peer(torch):
    """The installed fast_rnnt package (the peer), or None where there is no CUDA torch or `import fast_rnnt`
    fails; nothing here builds it."""
    if torch is None:
        return None
    try:
        import fast_rnnt
    except ImportError:
        return None
    return fast_rnnt


def bench_mutual_information(rows, quick):
    # The RNN-T case (B=32 S=100 T=500) in both modes and dtypes, and neighbours that select the other
    # launcher branches: S=200 (the 16-warp band kernel), S=600 (the 16-warp band kernel in two passes),
    # B=1, long T.
    # Where fast_rnnt is installed (with a CUDA torch), its mutual_information_recursion runs side by side
    # (its p is in the input dtype; ours is float64); its backward is its fwd+bwd time less its forward.
    lib = library()
    torch = cuda_torch()
    peer = fast_rnnt_peer(torch)
    cases = [(4, 20, 50, "float32", False)] if quick else [
        (32, 100, 500, "float32", False), (32, 100, 500, "float32", True), (32, 100, 500, "float64", False),
        (8, 50, 1500, "float32", False), (1, 100, 500, "float32", False), (32, 200, 500, "float32", False),
        (8, 600, 500, "float32", False)]
    for B, S, T, dtype, modified in cases:
        rng = np.random.default_rng(0)
        px = rng.normal(-1.5, 1.0, size=(B, S, T if modified else T + 1)).astype(dtype)
        py = rng.normal(-1.0, 1.0, size=(B, S + 1, T)).astype(dtype)
        dpx, dpy = DeviceBuffer(px), DeviceBuffer(py)
        dp = DeviceBuffer.empty((B, S + 1, T + 1), np.float64)
        dans = DeviceBuffer.empty((B,), dtype)
        dgx, dgy = DeviceBuffer.empty(px.shape, dtype), DeviceBuffer.empty(py.shape, dtype)
        code = DTYPE_CODES[dtype]
        fwd = lambda: lib.pe_mutual_information_forward(code, _p(dpx), _p(dpy), _p(None), _p(dp), _p(dans), I64(B),
                                                        I64(S), I64(T), int(modified))
        check(fwd())
        bwd = lambda: lib.pe_mutual_information_backward(code, _p(dpx), _p(dpy), _p(None), _p(dp), _p(None), _p(dgx),
                                                         _p(dgy), I64(B), I64(S), I64(T), int(modified))
        row = {"op": "mutual_information", "case": f"B={B} S={S} T={T} {dtype}{' modified' if modified else ''}",
               "fwd ms": time_ms(fwd, iters=5), "bwd ms": time_ms(bwd, iters=5)}
        if peer is not None:
            tpx, tpy = torch.from_numpy(px).cuda(), torch.from_numpy(py).cuda()
            gpx, gpy = tpx.clone().requires_grad_(True), tpy.clone().requires_grad_(True)
            fwd_ms = torch_ms(lambda: peer.mutual_information_recursion(tpx, tpy), iters=5)
            both_ms = torch_ms(lambda: torch.autograd.grad(peer.mutual_information_recursion(gpx, gpy).sum(),
                                                           [gpx, gpy]), iters=5)
            row["fast_rnnt fwd ms"], row["fast_rnnt bwd ms"] = fwd_ms, max(both_ms - fwd_ms, 0.0)
            row["fwd speedup vs fast_rnnt"] = row["fast_rnnt fwd ms"] / row["fwd ms"]
            row["bwd speedup vs fast_rnnt"] = row["fast_rnnt bwd ms"] / row["bwd ms"]
            check(fwd())
            ours = dans.get().astype(np.float64)
            theirs = peer.mutual_information_recursion(tpx, tpy).double().cpu().numpy()
            row["max abs diff vs fast_rnnt"] = float(np.max(np.abs(ours - theirs)))
        rows.append(row)
        print(row, flush=True)
        release_pending()


def bench_transducer_jump_loss(rows, copy_gbps, quick):
    """TDT and multi-blank, float32: the loss and its logits grad (forward + backward) in one step, and in the two
    steps the fused-joiner forms run on CUDA (arc weights, then the loss on them; that shim also allocates its
    scratch and copies the items' grads in), with the bandwidth of the logits read twice and their grad written
    once, and the largest difference of the two steps' grad from the one step's."""
    lib = library()
    cases = [("tdt", 2, 20, 5, 50)] if quick else [
        ("tdt", 8, 250, 50, 2000), ("multiblank", 8, 250, 50, 2000), ("tdt", 32, 100, 20, 500),
        ("tdt", 4, 500, 100, 1000)]
    for kind, B, T, S, C in cases:
        lattice = np.array([0, 1, 2, 3, 4] if kind == "tdt" else [2, 4, 8], np.int64)
        X = C + (len(lattice) if kind == "tdt" else 0)
        rng = np.random.default_rng(0)
        logits = rng.normal(0, 2, size=(B, T, S + 1, X)).astype(np.float32)
        x = DeviceBuffer(logits)
        sy = DeviceBuffer(rng.integers(0, C - 4, size=(B, S)).astype(np.int64))
        upstream, item_grad = DeviceBuffer(np.ones(B, np.float32)), np.ones(B)
        dx = DeviceBuffer.empty(logits.shape, np.float32)
        lse = DeviceBuffer.empty((B, T, S + 1, 4), np.float64)
        alpha, beta = DeviceBuffer.empty((B, T + 1, S + 1), np.float64), DeviceBuffer.empty((B, T + 1, S + 1), np.float64)
        loss, loss64 = DeviceBuffer.empty((B,), np.float32), DeviceBuffer.empty((B,), np.float64)
        shape = (I64(B), I64(T), I64(S), I64(X), ctypes.c_int(kind == "multiblank"),
                 lattice.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.c_int(len(lattice)), I64(C - 1),
                 ctypes.c_double(0.0), ctypes.c_double(0.0), ctypes.c_double(np.inf))
        one = lambda: lib.pe_transducer_jump_loss(DTYPE_CODES["float32"], _p(x), _p(sy), _p(None), _p(upstream),
                                                  _p(lse), _p(alpha), _p(beta), _p(loss), _p(dx), *shape)
        two = lambda: lib.pe_transducer_jump_loss_two_steps(
            DTYPE_CODES["float32"], _p(x), _p(sy), _p(None), item_grad.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
            _p(upstream), _p(loss64), _p(dx), *shape)
        check(one())
        check(lib.pe_synchronize())
        grad_one, ms_one = dx.get(), time_ms(one, iters=3)
        row = {"op": "transducer_jump_loss", "case": f"{kind} B={B} T={T} S={S} C={C} float32",
               "one step ms": ms_one, "one step GB/s": 3 * logits.nbytes / 1e6 / ms_one, "copy GB/s": copy_gbps}
        if hasattr(lib, "pe_transducer_jump_loss_two_steps"):  # (an older build's library, BASELINE_LIB, has not)
            check(two())
            check(lib.pe_synchronize())
            row["max abs grad diff"] = float(np.max(np.abs(dx.get() - grad_one)))
            row["two steps ms"] = time_ms(two, iters=3)
        rows.append(row)
        print(row, flush=True)
        release_pending()


def to_markdown(rows):
    out = []
    for op in dict.fromkeys(r["op"] for r in rows):
        group = [r for r in rows if r["op"] == op]
        keys = list(dict.fromkeys(k for r in group for k in r if k != "op"))
        out += [f"**{op}**", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for r in group:
            cells = [f"{r[k]:.4g}" if isinstance(r.get(k), float) else str(r.get(k, "–")) for k in keys]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def compare(before_path, after_path):
    """Markdown rows of two runs' JSON (say, the previous build's and this one's on the same GPU): each time
    column before -> after and the speed-up."""
    with open(before_path) as f:
        before = {(r["op"], r["case"]): r for r in json.load(f)}
    with open(after_path) as f:
        after = json.load(f)
    out = ["| op | case | column | before | after | after vs before |", "|---|---|---|---|---|---|"]
    for r in after:
        b = before.get((r["op"], r["case"]), {})
        for k, v in r.items():
            if k.endswith(" ms") and not k.startswith(("torch", "fast_rnnt")) and isinstance(b.get(k), float):
                out.append(f"| {r['op']} | {r['case']} | {k} | {b[k]:.4g} | {v:.4g} | {b[k] / v:.2f}x |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--op", action="append", help="logcumsumexp, put_along_axis, adaptive_log_softmax, "
                                                      "mutual_information, transducer_jump_loss (default: all)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE_JSON", "AFTER_JSON"),
                        help="print the before/after table of two runs' --json output and exit (no GPU needed)")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return
    lib = library()
    lib.pe_d2d.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.pe_memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    lib.pe_timer_stop.restype = ctypes.c_float
    lib.pe_set_sync(0)
    torch = cuda_torch()
    ops = args.op or ["logcumsumexp", "put_along_axis", "adaptive_log_softmax", "mutual_information",
                      "transducer_jump_loss"]
    rows = []
    gbps = copy_bandwidth(rows)
    print(rows[-1], flush=True)
    try:
        if "logcumsumexp" in ops:
            bench_logcumsumexp(rows, torch, gbps, args.quick)
        if "adaptive_log_softmax" in ops:
            bench_adaptive_log_softmax(rows, torch, args.quick)
        if "mutual_information" in ops:
            bench_mutual_information(rows, args.quick)
        if "put_along_axis" in ops:
            bench_put_along_axis(rows, torch, args.quick)
        if "transducer_jump_loss" in ops:
            bench_transducer_jump_loss(rows, gbps, args.quick)
    finally:
        lib.pe_set_sync(1)
        print(to_markdown(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
