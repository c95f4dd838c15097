"""BlockCache (paddle_ext/include/paddle_ext/memory.h): big CPU outputs (>= 32 MiB) are taken from and
given back to a cache of mapped blocks, so that an op called in a loop does not fault its outputs in anew on
every call. The cases that count what the cache holds run in a fresh process (the cache is per process and reads
its limit once)."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import paddle_ext
from op_test import check_export

_PRELUDE = """
import json, numpy as np, paddle, paddle_ext
from paddle_ext import _library
MIB = 1 << 20
x = paddle.to_tensor(np.random.default_rng(0).normal(size=(8, 1 << 20)).astype(np.float32))  # 32 MiB
want = paddle_ext.logcumsumexp(paddle.to_tensor(x.numpy()[:, :4]), axis=-1).numpy()  # small: not cached
"""


def _run(body, cache_mb=None):
    env = dict(os.environ, GLOG_minloglevel="2")
    env.pop("PADDLE_EXT_OUTPUT_CACHE_MB", None)
    if cache_mb is not None:
        env["PADDLE_EXT_OUTPUT_CACHE_MB"] = str(cache_mb)
    with tempfile.NamedTemporaryFile("w", suffix=".py") as script:  # a file: jit.save reads the Layer's source
        script.write(_PRELUDE + body)
        script.flush()
        run = subprocess.run([sys.executable, script.name], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_freed_big_output_is_reused_for_the_next_one():
    r = _run("""
out = paddle_ext.logcumsumexp(x, axis=-1)
first_ptr, first = out.data_ptr(), out.numpy()
held_while_alive = _library.output_cache_bytes()
del out
held_after_free = _library.output_cache_bytes()
out = paddle_ext.logcumsumexp(x * 2, axis=-1)
print(json.dumps(dict(same_block=out.data_ptr() == first_ptr, held_while_alive=held_while_alive,
                      held_after_free=held_after_free, held_in_use=_library.output_cache_bytes(),
                      first_ok=bool(np.array_equal(first[:, :4], want)),
                      second_ok=bool(np.allclose(out.numpy(), np.logaddexp.accumulate(2 * x.numpy().astype(np.float64), axis=-1),
                                                 rtol=1e-6, atol=0)))))
""")
    assert r["first_ok"] and r["second_ok"], r
    assert r["same_block"], r
    assert r["held_while_alive"] == 0 and r["held_after_free"] >= 32 * 2**20 and r["held_in_use"] == 0, r


def test_limit_zero_turns_the_cache_off():
    r = _run("""
out = paddle_ext.logcumsumexp(x, axis=-1)
ok = bool(np.array_equal(out.numpy()[:, :4], want))
del out
print(json.dumps(dict(ok=ok, held=_library.output_cache_bytes())))
""", cache_mb=0)
    assert r == {"ok": True, "held": 0}


def test_the_cache_holds_no_more_than_its_limit():
    r = _run("""
outs = [paddle_ext.logcumsumexp(x, axis=-1) for _ in range(3)]  # three 32 MiB blocks
del outs
print(json.dumps(dict(held=_library.output_cache_bytes())))
""", cache_mb=80)
    assert r["held"] == 64 * 2**20, r  # two of the three fit in 80 MiB; the oldest one went back to the OS


def test_cached_outputs_through_autograd_static_graphs_and_export():
    """Outputs made on cached blocks serve as grads (the backward's own big outputs), as a static program's
    fetched results, and in a jit.save'd model loaded back: the same values as a first, fresh call."""
    r = _run("""
import tempfile, os
xs = paddle.to_tensor(x.numpy(), stop_gradient=False)
results = {}
for trial in range(2):  # the second trial runs on blocks the first one gave back
    y = paddle_ext.logcumsumexp(xs, axis=-1)
    (g,) = paddle.grad(y.sum(), [xs])
    results[trial] = (y.numpy()[:, -3:], g.numpy()[:, :3])
    del y, g
dygraph_ok = all(np.array_equal(a, b) for a, b in zip(results[0], results[1]))
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    xv = paddle.static.data("x", [8, 1 << 20], "float32")
    yv = paddle_ext.logcumsumexp(xv, axis=-1)
exe = paddle.static.Executor(paddle.CPUPlace())
static = [exe.run(main, feed={"x": x.numpy()}, fetch_list=[yv])[0][:, -3:] for _ in range(2)]
paddle.disable_static()
static_ok = all(np.array_equal(s, results[0][0]) for s in static)

class Net(paddle.nn.Layer):
    def forward(self, v):
        return paddle_ext.logcumsumexp(v, axis=-1)

path = os.path.join(tempfile.mkdtemp(), "net")
paddle.jit.save(Net(), path, input_spec=[paddle.static.InputSpec([None, 1 << 20], "float32")])
loaded = paddle.jit.load(path)
export = [loaded(x).numpy()[:, -3:] for _ in range(2)]
export_ok = all(np.array_equal(e, results[0][0]) for e in export)
print(json.dumps(dict(dygraph_ok=dygraph_ok, static_ok=static_ok, export_ok=export_ok)))
""")
    assert r == {"dygraph_ok": True, "static_ok": True, "export_ok": True}


def test_rnnt_recipe_outputs_agree_with_and_without_the_cache():
    """The RNN-T pruned recipe's big outputs (pruning gathers, joint grad: 35 MiB each here) on cached blocks
    give the same loss and grads, call after call, as with the cache off."""
    body = """
B, S, T, C, R = 4, 20, 400, 1100, 5
rng = np.random.default_rng(3)
lm = paddle.to_tensor(rng.normal(size=(B, S + 1, C)).astype(np.float32), stop_gradient=False)
am = paddle.to_tensor(rng.normal(size=(B, T, C)).astype(np.float32), stop_gradient=False)
sym = paddle.to_tensor(rng.integers(1, C, size=(B, S)))
bd = paddle.to_tensor(np.tile(np.array([0, 0, S, T], np.int64), (B, 1)))
def recipe():
    simple, (pxg, pyg) = paddle_ext.rnnt_loss_simple(lm, am, sym, 0, bd, reduction="none", return_grad=True)
    ranges = paddle_ext.get_rnnt_prune_ranges(pxg, pyg, bd, R)
    amp, lmp = paddle_ext.do_rnnt_pruning(am, lm, ranges)
    loss = simple + paddle_ext.rnnt_loss_pruned(amp + lmp, sym, ranges, 0, bd, reduction="none")
    return [t.numpy() for t in [loss, *paddle.grad(loss.sum(), [lm, am])]]
runs = [recipe() for _ in range(3)]
print(json.dumps(dict(values=[a.tolist() for a in runs[0]],
                      repeat=all(np.array_equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r)),
                      held=_library.output_cache_bytes())))
"""
    cached, uncached = _run(body), _run(body, cache_mb=0)
    assert cached["repeat"] and uncached["repeat"]
    assert cached["held"] >= 3 * 32 * 2**20, cached["held"]  # am_pruned, lm_pruned and the joint grad, given back
    assert uncached["held"] == 0
    assert cached["values"] == uncached["values"]


def test_cached_outputs_serve_an_exported_model_in_paddle_inference():
    """A 32 MiB output through to_static, jit.save/load and paddle.inference, twice (the second export runs on
    blocks the first gave back): the dygraph values every time. In this process: the cache is on by default."""
    x = np.random.default_rng(4).normal(size=(8, 1 << 20)).astype(np.float32)
    for _ in range(2):
        check_export(lambda v: paddle_ext.logcumsumexp(v, axis=-1), {"x": x}, rtol=1e-6, atol=1e-6)
