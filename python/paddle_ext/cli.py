"""paddle-ext demo | bench | info"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys


def _info(_args) -> int:
    import paddle  # noqa: PLC0415

    import paddle_ext  # noqa: PLC0415
    from paddle_ext import _environment, _library  # noqa: PLC0415

    lib = _library.ops()
    print(f"paddle_ext     {paddle_ext.__version__}")
    print(f"paddle         {paddle.__version__} (CUDA: {paddle.is_compiled_with_cuda()})")
    print(f"binding        {_library.library_path()} (releases here: {', '.join(_library.supported_releases())})")
    print(f"kernels        {_library.kernel_library_path()}")
    print(f"CUDA kernels   {'built' if _library.built_with_cuda() else 'not built (CPU-only Paddle)'}")
    print(f"machine        {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    vendor, model = _environment.cpu()
    threads = _environment.blas_threads()
    print(f"CPU            {model} ({vendor}), {_environment.cores()} usable cores")
    print(f"Paddle's BLAS  {_environment.blas()}{f' on {threads} thread(s)' if threads is not None else ''}; "
          f"OMP_NUM_THREADS={_environment.setting('OMP_NUM_THREADS') or 'unset (Paddle sets 1)'}, "
          f"MKL_DEBUG_CPU_TYPE={_environment.setting('MKL_DEBUG_CPU_TYPE') or 'unset'}")
    tips = _environment.advice()
    if tips:
        print("faster Paddle math here: set these before starting Python (paddle_ext never sets them)")
        for tip in tips:
            print(f"  {tip}")
    print(f"CPU threads    {_library.num_threads()} (PADDLE_EXT_NUM_THREADS, else OMP_NUM_THREADS, else one per core)")
    print(f"output cache   {_library.output_cache_bytes() >> 20} MiB held (big CPU buffers kept mapped between calls; "
          "PADDLE_EXT_OUTPUT_CACHE_MB, default 2048, 0 off)")
    print(f"adaptive GEMM  {_library.gemm_backend()} (float32 CPU projections of the adaptive softmax: oneDNN's sgemm "
          "from Paddle's libdnnl, else Paddle's matmul)")
    print("ops (from ops/*.yaml):")
    for op in _library.manifest():
        if op["forward"]:
            continue
        registered = "registered" if hasattr(lib, op["name"]) else "MISSING"
        args = ", ".join([i["name"] + ("?" if i["optional"] else "") for i in op["inputs"]]
                         + [f"{a['name']}:{a['type']}" for a in op["attrs"]])
        grad = f"grad {op['backward']}" if op["backward"] else "no grad"
        print(f"  {op['name']:<34} ({args}) -> {', '.join(op['outputs'])}; {grad}; {registered}")
    return 0


def _bench(args) -> int:
    from paddle_ext import benchmarks  # noqa: PLC0415

    import paddle  # noqa: PLC0415

    from paddle_ext import _environment  # noqa: PLC0415

    print(f"paddle-ext bench on {platform.machine()}, {os.cpu_count()} cores, paddle {paddle.__version__}; "
          "ratios = other / paddle_ext (higher means paddle_ext is faster; in the overhead table paddle_ext or "
          "paddle / the raw op)")
    environment = benchmarks.environment()
    print(f"environment: {environment}")
    for tip in _environment.advice():
        print(f"  Paddle's own math (the paddle and paddle_ext columns of matmul-bound rows) runs faster with: {tip}")
    # Each family's table as soon as it is measured (each result printed once); stderr names each case done.
    results = []
    for family in args.op or benchmarks.families():
        rows = benchmarks.run(selected=[family], quick=args.quick, repeats=args.repeats, matching=args.case,
                              log=lambda r: print(f"  measured {r.op}: {r.name}", file=sys.stderr, flush=True))
        if rows:
            print(f"\n{benchmarks.format_markdown(rows)}", flush=True)
        results += rows
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([r.to_json() for r in results], indent=1))
        print(f"\nwrote {path}")
    return 0


def _demo(args) -> int:
    from paddle_ext import demo  # noqa: PLC0415

    return demo.main(task=args.task, steps=args.steps, seed=args.seed, out_dir=args.out, nproc=args.nproc)


def main(argv=None) -> int:
    from paddle_ext import benchmarks, demo  # noqa: PLC0415  (the choices of --op and --task)

    parser = argparse.ArgumentParser(prog="paddle-ext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions, CUDA kernels, registered ops")
    p.set_defaults(func=_info)
    p = sub.add_parser("bench", help="benchmark the ops against Paddle, NumPy (and PyTorch)")
    families = benchmarks.families()
    p.add_argument("--op", action="append", choices=families, metavar="FAMILY",
                   help=f"only this op family (repeatable): {', '.join(families)}")
    p.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    p.add_argument("--case", action="append", metavar="TEXT",
                   help="only the cases whose name contains TEXT (repeatable), e.g. --case independent")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=_bench)
    p = sub.add_parser("demo", help="train small models with the ops, export and serve them")
    tasks = list(demo.tasks())
    p.add_argument("--task", action="append", choices=tasks, metavar="TASK",
                   help=f"run only this task (repeatable): {', '.join(tasks)}")
    p.add_argument("--steps", type=int, default=None, help="training steps per task (default: each task's own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="demo-out", help="directory for results.json, models and plots")
    p.add_argument("--nproc", type=int, default=1,
                   help="train data-parallel on N local processes (paddle.distributed: gloo on CPU, NCCL on GPU)")
    p.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
