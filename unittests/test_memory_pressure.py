"""Under an address-space cap (``ulimit -v``, RLIMIT_AS) every op raises a MemoryError, never aborts.

Each case runs an op (forward, or the backward of a forward run before the cap; in dygraph, and
put_along_axis also in a to_static program) in a child process whose address space is capped just above
what the call's outputs need, so that what fails is the op's own allocation: its scratch (put_along_axis's
partitioned passes for every reduce, MI's band rows, the RNN-T scratch, grad rows summed inside a parallel
region), or, for the ops that allocate nothing but their outputs (logcumsumexp's row and column paths, the
joint RNN-T logprobs, the adaptive softmax), an output. The child reports how each call ended; the parent
checks a MemoryError (or, from a PyLayer's backward, Paddle's wrapping of it) that says memory ran out,
names the op and the bytes, and that the child lived on to the end. Two more tests: an uncaught MemoryError
ends a process with its traceback (exit status 1, no signal), and the kernels' threads start at import
under a cap (the OpenMP runtime aborts where it cannot start one later).

The cap is relative: the child measures its address space (VmSize) after importing Paddle and building the
case's inputs, and allows the outputs plus half the scratch on top. The allocator is made predictable for
that accounting: every block of 1 MiB or more is its own mapping (MALLOC_MMAP_THRESHOLD_, so freed blocks do
not linger in the heap), one malloc arena (no per-thread 64 MiB reservations), no output cache, and two
kernel threads on any machine (the partitioned passes then allocate inside a parallel region).

Run by hand: ``python unittests/test_memory_pressure.py CASE...`` runs cases in this process and prints one
JSON line each; ``--raise`` lets the first error end the process.
"""

from __future__ import annotations

import concurrent.futures
import gc
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status")

MiB = 1 << 20
ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(MiB),
    "MALLOC_ARENA_MAX": "1",
    "PADDLE_EXT_OUTPUT_CACHE_MB": "0",
    "PADDLE_EXT_NUM_THREADS": "2",
    "OMP_NUM_THREADS": "1",  # Paddle's own ops
    "GLOG_minloglevel": "2",
}

# ------------------------------------------------------------------------------------------------ cases
# Each case: (family, op named in the message, whether the failure is the op's scratch, setup). setup() builds
# the inputs (and runs the forward of a backward case) without a cap and returns (run, outputs, scratch):
# run() is the capped call, `outputs` the bytes its outputs take, `scratch` a lower bound of what it then
# allocates besides (for the output-only ops: the output it must fail to get).

REDUCES = ["assign", "add", "mul", "mean", "amin", "amax"]
CASES = {}


def case(name, family, op, scratch, setup):
    CASES[name] = (family, op, scratch, setup)


def _nbytes(*tensors):
    return sum(int(np.prod(t.shape)) * t.element_size() for t in tensors)


def _paddle():
    import paddle  # noqa: PLC0415

    return paddle


def _tensor(array, grad=False):
    t = _paddle().to_tensor(array)
    t.stop_gradient = not grad
    return t


def _backward(outputs, *inputs):
    """(run, bytes): run() for a backward case, the grads of `outputs` (a list) from ones made now, before the
    cap; bytes: what the backward engine allocates before the op (its copy of those ones). run() holds the
    inputs, as a caller does (else the graph would free them as the backward starts, making room)."""
    paddle = _paddle()
    grads = [paddle.ones_like(o) for o in outputs]

    def run():
        paddle.autograd.backward(outputs, grads)
        return inputs

    return run, _nbytes(*outputs)


# put_along_axis, the partitioned passes (independent indices into a destination past L2): arr [16384, 64]
# scattered along axis 0 from [131072, 64] positions, on two column blocks (one part per thread). Each part's
# entry pool is 4M entries of 8 bytes (32 MiB); the gathers of the backward add 8 MiB of block numbers each.
PUT_N, PUT_M, PUT_W = 16384, 131072, 64


_PUT_ARRAYS = []  # made once per child, for every reduce


def _put_inputs(grad):
    if not _PUT_ARRAYS:
        rng = np.random.default_rng(0)
        _PUT_ARRAYS.extend([rng.standard_normal((PUT_N, PUT_W), dtype=np.float32),
                            rng.integers(0, PUT_N, (PUT_M, PUT_W), dtype=np.int32),
                            rng.standard_normal((PUT_M, PUT_W), dtype=np.float32)])
    arr, idx, values = _PUT_ARRAYS
    return _tensor(arr, grad), _tensor(idx), _tensor(values, grad)


def _put_forward(reduce):
    import paddle_ext  # noqa: PLC0415

    arr, idx, values = _put_inputs(grad=False)
    return lambda: paddle_ext.put_along_axis(arr, idx, values, 0, reduce=reduce), _nbytes(arr), 8 * PUT_M * PUT_W


def _put_backward(reduce):
    import paddle_ext  # noqa: PLC0415

    arr, idx, values = _put_inputs(grad=True)
    out = paddle_ext.put_along_axis(arr, idx, values, 0, reduce=reduce)
    run, seeds = _backward([out], arr, idx, values)
    return run, seeds + _nbytes(arr, values), 8 * PUT_M * PUT_W


for _r in REDUCES:
    case(f"put_along_axis_{_r}_forward", "put_along_axis", "put_along_axis", True, lambda _r=_r: _put_forward(_r))
    case(f"put_along_axis_{_r}_backward", "put_along_axis", "put_along_axis", True, lambda _r=_r: _put_backward(_r))


# The same in a to_static program (Paddle's PIR executor, the registered grad op): run once uncapped at full
# size first, so that the executor's own worker threads have started.
def _put_mean(arr, idx, values):
    import paddle_ext  # noqa: PLC0415

    return paddle_ext.put_along_axis(arr, idx, values, 0, reduce="mean")


def _put_static(backward):
    arr, idx, values = _put_inputs(grad=backward)
    fn = _paddle().jit.to_static(_put_mean, full_graph=True)
    if not backward:
        fn(arr, idx, values)
        return lambda: fn(arr, idx, values), _nbytes(arr), 8 * PUT_M * PUT_W
    _paddle().autograd.backward([fn(arr, idx, values)])
    arr.clear_gradient(), values.clear_gradient()
    run, seeds = _backward([fn(arr, idx, values)], arr, idx, values)
    return run, seeds + _nbytes(arr, values), 8 * PUT_M * PUT_W


case("put_along_axis_to_static_forward", "put_along_axis", "put_along_axis", True, lambda: _put_static(False))
case("put_along_axis_to_static_backward", "put_along_axis", "put_along_axis", True, lambda: _put_static(True))


# logcumsumexp allocates nothing but its output: 32 MiB rows (along the last axis) and columns (axis 0).
def _lcse(axis, backward):
    import paddle_ext  # noqa: PLC0415

    shape = (32, 262144) if axis == 1 else (1024, 8192)
    x = _tensor(np.random.default_rng(0).standard_normal(shape, dtype=np.float32), backward)
    if not backward:
        return lambda: paddle_ext.logcumsumexp(x, axis=axis), 0, _nbytes(x)
    run, seeds = _backward([paddle_ext.logcumsumexp(x, axis=axis)], x)
    return run, seeds, _nbytes(x)


for _axis, _path in ((1, "rows"), (0, "columns")):
    for _bwd in (False, True):
        case(f"logcumsumexp_{_path}_{'backward' if _bwd else 'forward'}", "logcumsumexp", "logcumsumexp", False,
             lambda _axis=_axis, _bwd=_bwd: _lcse(_axis, _bwd))


# mutual_information: one sequence of S = T = 2048 (fewer sequences than threads: the band-parallel lattice).
# The forward allocates its outputs (p: 32 MiB of float64); the backward, p's grad on every row (32 MiB).
MI_S = MI_T = 2048


def _mi(backward):
    import paddle_ext  # noqa: PLC0415

    rng = np.random.default_rng(0)
    px = _tensor(rng.standard_normal((1, MI_S, MI_T + 1), dtype=np.float32), backward)
    py = _tensor(rng.standard_normal((1, MI_S + 1, MI_T), dtype=np.float32), backward)
    p_bytes = 8 * (MI_S + 1) * (MI_T + 1)
    if not backward:
        return lambda: paddle_ext.mutual_information_recursion(px, py), 0, p_bytes
    run, seeds = _backward([paddle_ext.mutual_information_recursion(px, py)], px, py)
    return run, seeds + _nbytes(px, py), 8 * (MI_S + 2) * (MI_T + 1)


case("mutual_information_forward", "mutual_information", "mutual_information", False, lambda: _mi(False))
case("mutual_information_backward", "mutual_information", "mutual_information", True, lambda: _mi(True))


# The RNN-T ops. rnnt_simple_logprobs (get_rnnt_logprobs): exp(am - max) scratch of am's size (T x C = 32 MiB).
def _simple(backward):
    import paddle_ext  # noqa: PLC0415

    rng = np.random.default_rng(0)
    S, T, C = 16, 4096, 2048
    lm = _tensor(rng.standard_normal((1, S + 1, C), dtype=np.float32), backward)
    am = _tensor(rng.standard_normal((1, T, C), dtype=np.float32), backward)
    symbols = _tensor(rng.integers(1, C, (1, S), dtype=np.int64))
    if not backward:
        return (lambda: paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0),
                4 * (S * (T + 1) + (S + 1) * T + (S + 1) * T), 4 * T * C)
    px, py = paddle_ext.get_rnnt_logprobs(lm, am, symbols, 0)
    run, seeds = _backward([px, py], lm, am, symbols)
    return run, seeds + _nbytes(lm, am), 4 * T * C


# rnnt_joint_logprobs (get_rnnt_logprobs_joint): its grad is as large as the logits (34 MiB), and all it allocates.
def _joint():
    import paddle_ext  # noqa: PLC0415

    rng = np.random.default_rng(0)
    S, T, C = 16, 512, 1024
    logits = _tensor(rng.standard_normal((1, T, S + 1, C), dtype=np.float32), True)
    symbols = _tensor(rng.integers(1, C, (1, S), dtype=np.int64))
    px, py = paddle_ext.get_rnnt_logprobs_joint(logits, symbols, 0)
    run, seeds = _backward([px, py], logits, symbols)
    return run, seeds, _nbytes(logits)


# rnnt_prune_gather's grad on 16-bit rows sums each work item's columns in float32 scratch allocated inside the
# parallel region (16 MiB per item here: 16385 rows x 256 columns, two items at a time).
def _prune_gather():
    from paddle_ext import _library  # noqa: PLC0415

    rng = np.random.default_rng(0)
    N, D, T, R = 16385, 1024, 512, 4
    x = _tensor(rng.standard_normal((1, N, D)).astype(np.float16), True)
    index = _tensor(rng.integers(0, N, (1, T, R), dtype=np.int64))
    out = _library.ops().pe_rnnt_prune_gather(x, index)
    run, seeds = _backward([out], x, index)
    return run, seeds + _nbytes(x), 4 * N * 256


# transducer_jump_loss (tdt_loss): the forward's arc weights, [B, T, S+1, K] float64 scratch (K = 9 arcs per
# node for durations 0..4: 72 bytes a node against the 48 of its outputs lse, alpha and beta).
JUMP_T, JUMP_S, JUMP_C, JUMP_DURATIONS = 2048, 255, 3, [0, 1, 2, 3, 4]


def _jump():
    import paddle_ext  # noqa: PLC0415

    rng = np.random.default_rng(0)
    width = JUMP_C + len(JUMP_DURATIONS)
    logits = _tensor(rng.standard_normal((1, JUMP_T, JUMP_S + 1, width), dtype=np.float32))
    symbols = _tensor(rng.integers(1, JUMP_C, (1, JUMP_S), dtype=np.int64))
    nodes = JUMP_T * (JUMP_S + 1)
    return (lambda: paddle_ext.tdt_loss(logits, symbols, JUMP_DURATIONS, 0, reduction="none"),
            nodes * 32 + 2 * (JUMP_T + 1) * (JUMP_S + 1) * 8 + 8, nodes * 9 * 8)


case("transducer_jump_loss_forward", "rnnt", "transducer_jump_loss", True, _jump)
case("rnnt_simple_logprobs_forward", "rnnt", "rnnt_simple_logprobs", True, lambda: _simple(False))
case("rnnt_simple_logprobs_backward", "rnnt", "rnnt_simple_logprobs", True, lambda: _simple(True))
case("rnnt_joint_logprobs_backward", "rnnt", "rnnt_joint_logprobs", False, _joint)
case("rnnt_prune_gather_backward", "rnnt", "rnnt_prune_gather", True, _prune_gather)


# The adaptive softmax's row log-softmax allocates its output ([2048, 4096]: 32 MiB) and, backward, the grad.
def _adaptive(backward):
    import paddle_ext  # noqa: PLC0415

    logits = _tensor(np.random.default_rng(0).standard_normal((2048, 4096), dtype=np.float32), backward)
    if not backward:
        return lambda: paddle_ext.adaptive_log_softmax_full(logits), 0, _nbytes(logits)
    run, seeds = _backward([paddle_ext.adaptive_log_softmax_full(logits)], logits)
    return run, seeds, _nbytes(logits)


for _bwd in (False, True):
    case(f"adaptive_log_softmax_{'backward' if _bwd else 'forward'}", "adaptive_log_softmax",
         "adaptive_log_softmax_full", False, lambda _bwd=_bwd: _adaptive(_bwd))

# ------------------------------------------------------------------------------------------------ the child


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def run_cases(names, raise_first=False):
    """Runs the cases in this process, one JSON line each on stdout ({"start": name} first, so that a parent
    sees which case a signal ended)."""
    import resource  # noqa: PLC0415

    import paddle  # noqa: PLC0415
    import paddle_ext  # noqa: PLC0415

    paddle.set_device("cpu")  # (a GPU's driver maps more address space than any cap here leaves)
    # The kernels' OpenMP threads (their stacks) start here, as they would at a program's first op call.
    paddle_ext.put_along_axis(paddle.zeros([1 << 22]), paddle.zeros([1 << 22], "int64"), paddle.ones([1 << 22]), 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        run, outputs, scratch = CASES[name][3]()
        gc.collect()
        cap = _address_space() + outputs + scratch // 2
        error = None
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        try:
            run()
        except Exception as err:  # noqa: BLE001 - reported to the parent
            error = err
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if error is not None and raise_first:
            raise error
        print(json.dumps({"case": name, "cap_mib": cap // MiB, "error": type(error).__name__ if error else None,
                          "message": str(error) if error else ""}), flush=True)
        del run, error  # (the error's traceback holds the case's tensors)
        gc.collect()


def _child(names, raise_first=False, timeout=300):
    return subprocess.run([sys.executable, os.path.abspath(__file__), *(["--raise"] if raise_first else []), *names],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})


def _died(done):
    if done.returncode < 0:
        return f"was killed by {signal.Signals(-done.returncode).name}"
    return f"ended with exit status {done.returncode}"


def _outcomes_of(names):
    """The outcomes of `names`, from as few children as possible: a child that dies is replaced by one that runs
    the cases after the one it died in (recorded with the child's end and its stderr)."""
    results, pending = {}, list(names)
    while pending:
        done = _child(pending)
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if "case" in record:
                    results[record["case"]] = record
        unfinished = [name for name in pending if name not in results]
        if unfinished:
            results[unfinished[0]] = {"case": unfinished[0], "died": _died(done), "stderr": done.stderr[-3000:]}
        pending = unfinished[1:]
    return results


@pytest.fixture(scope="module")
def outcomes():
    """Every case's outcome: put_along_axis's cases in one child, the other families' in another, side by side."""
    put = [n for n in CASES if CASES[n][0] == "put_along_axis"]
    groups = [put, [n for n in CASES if n not in put]]
    with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
        results = {}
        for part in pool.map(_outcomes_of, groups):
            results.update(part)
    return results


def _says_out_of_memory(record, op, scratch):
    message = record["message"]
    assert "out of memory" in message, message
    assert op in message, message
    if scratch:  # our checked allocation failed, with the bytes it asked for
        assert "of scratch could not be allocated" in message, message
    else:  # the output: Paddle's allocator's message, with the bytes
        assert "Fail to alloc memory of" in message, message


@pytest.mark.parametrize("name", list(CASES))
def test_running_out_of_memory_raises_and_the_process_lives(outcomes, name):
    _family, op, scratch, _setup = CASES[name]
    record = outcomes[name]
    assert "died" not in record, f"{name}: the child {record.get('died')}\n{record.get('stderr')}"
    assert record["error"] is not None, f"{name}: the op ran to the end under a cap of {record['cap_mib']} MiB"
    # A dygraph op raises MemoryError; a PyLayer's backward reaches the caller as Paddle's OSError
    # "(External) ... MemoryError: ..." (docs/architecture.md, PyLayer pitfalls).
    if record["error"] == "OSError":
        assert "MemoryError" in record["message"], record["message"]
    else:
        assert record["error"] == "MemoryError", record
    _says_out_of_memory(record, op, scratch)


def test_kernel_threads_start_at_import_under_a_cap():
    # The OpenMP runtime aborts the process when it cannot start a thread. Under a cap set before the import,
    # paddle_ext starts its kernel threads at import, so a first parallel region near the cap just runs.
    code = "\n".join([
        "import resource",
        "resource.setrlimit(resource.RLIMIT_AS, (64 << 30, resource.RLIM_INFINITY))",
        "import paddle, paddle_ext",
        "from test_memory_pressure import _address_space",
        "paddle.set_device('cpu')",
        "x = paddle.zeros([256, 8192])",  # its 8 MiB logcumsumexp runs on 4 threads
        "resource.setrlimit(resource.RLIMIT_AS, (_address_space() + 10 * (1 << 20), resource.RLIM_INFINITY))",
        "paddle_ext.logcumsumexp(x, axis=1)",
        "print('ran')",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.abspath(__file__)),
                          env={**os.environ, **ENV, "PADDLE_EXT_NUM_THREADS": "4"})
    assert done.returncode == 0 and "ran" in done.stdout, f"{_died(done)}\n{done.stderr[-3000:]}"


def test_an_uncaught_memory_error_ends_the_process_with_its_traceback():
    done = _child(["put_along_axis_mean_backward"], raise_first=True)
    assert done.returncode == 1, f"{_died(done)}\n{done.stderr[-3000:]}"
    assert "Traceback (most recent call last)" in done.stderr
    assert "out of memory" in done.stderr and "put_along_axis" in done.stderr, done.stderr[-3000:]


if __name__ == "__main__":
    args = sys.argv[1:]
    raise_first = "--raise" in args
    run_cases([a for a in args if a != "--raise"], raise_first=raise_first)
