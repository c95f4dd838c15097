"""paddle_ext inside a Paddle user's own pipeline.

* A process that only does ``import paddle, paddle_ext`` serves an exported model of every op family
  (``paddle.jit.load`` and a ``paddle.inference`` predictor), exported with dynamic dimensions and run
  at two sizes, matching dygraph.
* The import fails with a Python error that names paddle_ext when the op library cannot be loaded or
  was built against another Paddle.
* No registered op name collides with one of Paddle's; Paddle's own ``logcumsumexp`` keeps working in
  legacy-IR programs after our ops are loaded.
* Bad values that only exist at run time inside a static graph raise a Python exception that names
  the argument, the value and the valid range; the process lives on.
* The import and the first call of every op print nothing at Paddle's default log level.
* Our kernels run on the OpenMP runtime Paddle's own libraries use, on the thread count the user asked for
  (not Paddle's math-library count of 1).
* ``pip wheel .`` (isolated build from pyproject.toml) gives a wheel that installs and runs in a fresh
  venv and puts nothing loose in site-packages.

Everything whose failure mode is a crash runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile

import numpy as np
import paddle
import pytest

import paddle_ext
from paddle_ext import _library

import op_test
import pipeline_models

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(code: str, env_extra: dict | None = None, drop_env=(), timeout=300):
    """Runs `code` as a script file in a fresh interpreter (to_static needs the functions' source)."""
    env = dict(os.environ)
    for key in drop_env:
        env.pop(key, None)
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "script.py"
        script.write_text(textwrap.dedent(code))
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=tmp)


# --------------------------------------------------------------------------- load at import, serve

SERVE = """
    import json, sys
    import numpy as np
    import paddle, paddle_ext  # all a serving process does before loading a model
    import paddle.inference as infer

    job = json.load(open(sys.argv[-1]))
    prefix = job["prefix"]
    loaded = paddle.jit.load(prefix)
    if job["inference"]:
        config = infer.Config(prefix + ".json", prefix + ".pdiparams")
        config.disable_gpu()
        config.disable_glog_info()
        predictor = infer.create_predictor(config)
    worst = 0.0
    for case in job["cases"]:
        inputs, expected = np.load(case["inputs"]), np.load(case["expected"])
        arrays = [inputs[name] for name in job["names"]]
        got = loaded(*[paddle.to_tensor(a) for a in arrays])
        got = [g.numpy() for g in (got if isinstance(got, (list, tuple)) else [got])]
        want = [expected[f"out{i}"] for i in range(len(expected.files))]
        served = want
        if job["inference"]:
            for name, a in zip(job["names"], arrays):
                handle = predictor.get_input_handle(name)
                handle.reshape(list(a.shape))
                handle.copy_from_cpu(a)
            predictor.run()
            served = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
        assert len(got) == len(want) == len(served), (len(got), len(want), len(served))
        for g, s, w in zip(got, served, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(s, w, rtol=1e-5, atol=1e-5)
            worst = max(worst, float(np.max(np.abs(s - w))) if w.size else 0.0)
    print("SERVED", len(job["cases"]), worst)
"""


@pytest.mark.parametrize("family", list(pipeline_models.MODELS))
def test_a_process_that_only_imports_serves_an_exported_model(family, tmp_path):
    prefix = str(tmp_path / "model")
    expected = pipeline_models.export(family, prefix)
    names = [spec.name for spec in pipeline_models.MODELS[family][1]]
    cases = []
    for n, (inputs, outs) in expected.items():
        np.savez(tmp_path / f"in{n}.npz", **inputs)
        np.savez(tmp_path / f"out{n}.npz", **{f"out{i}": o for i, o in enumerate(outs)})
        cases.append({"inputs": str(tmp_path / f"in{n}.npz"), "expected": str(tmp_path / f"out{n}.npz")})
    job = tmp_path / "job.json"
    inference = os.path.exists(prefix + ".pdiparams") or op_test.inference_serves_parameterless_models()
    job.write_text(json.dumps({"prefix": prefix, "names": names, "cases": cases, "inference": inference}))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SERVE), str(job)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"serving {family} failed (rc {done.returncode}):\n{done.stderr[-3000:]}"
    assert f"SERVED {len(pipeline_models.SIZES)}" in done.stdout
    op_test.skip_inference_unless_served(prefix)


def _with_native(tmp_path, write):
    """A copy of the installed package whose _native folder `write` alters, importable from tmp_path."""
    package = tmp_path / "paddle_ext"
    shutil.copytree(pathlib.Path(_library.__file__).parent, package, symlinks=True)
    write(package / "_native")
    return {"PYTHONPATH": str(tmp_path)}


def test_import_fails_clearly_when_the_op_library_cannot_load(tmp_path):
    def corrupt(native):
        binding = native / f"paddle_{paddle.__version__}" / "paddle_ext_ops.so"
        binding.unlink()
        binding.write_bytes(b"not a shared library")

    done = _run("import paddle_ext", env_extra=_with_native(tmp_path, corrupt))
    assert done.returncode != 0
    assert "ImportError: paddle_ext: the op library" in done.stderr and "failed to load" in done.stderr, done.stderr
    assert "pip install --no-build-isolation ." in done.stderr


def test_import_fails_clearly_when_the_kernel_library_is_missing(tmp_path):
    done = _run("import paddle_ext", env_extra=_with_native(
        tmp_path, lambda native: (native / "libpaddle_ext_kernels.so").unlink()))
    assert done.returncode != 0
    assert "ImportError: paddle_ext: the op library" in done.stderr and "libpaddle_ext_kernels.so" in done.stderr


def test_import_names_the_supported_releases_under_another_paddle():
    releases = _library.supported_releases()
    done = _run("import paddle; paddle.__version__ = '3.9.9'; import paddle_ext")
    assert done.returncode != 0
    assert "ImportError: paddle_ext: no op library for Paddle 3.9.9" in done.stderr, done.stderr
    assert f"(it has: {', '.join(releases)})" in done.stderr
    assert "pip install --no-build-isolation ." in done.stderr


# ------------------------------------------------------------------------------------- op names

def _paddle_op_names() -> set[str]:
    """Paddle's own op names (op protos, PIR ops, kernels), read in a process without paddle_ext."""
    done = _run("""
        import json, paddle
        from paddle.base import core
        names = set(core.get_all_op_names()) | set(core._get_all_register_op_kernels())
        print(json.dumps(sorted(names)))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    names = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "logcumsumexp" in names and "put_along_axis" in names  # we really read Paddle's registry
    return names


def _our_registered_names() -> set[str]:
    names = set()
    for op in _library.manifest():
        names.add(op["name"])
        if op["backward"]:
            names.add(op["backward"])
        if op["double_grad"]:
            names.add(op["double_grad"])
    return names


def test_every_registered_op_follows_the_naming_rule():
    from paddle_ext.codegen import opgen  # noqa: PLC0415

    for name in _our_registered_names():
        assert name.startswith(opgen.OP_PREFIX), f"{name} lacks the {opgen.OP_PREFIX} prefix"


def test_no_registered_op_name_collides_with_paddles():
    clashes = _our_registered_names() & _paddle_op_names()
    assert not clashes, f"paddle_ext registers op names that Paddle owns: {sorted(clashes)}"


def test_legacy_ir_program_with_paddles_logcumsumexp_after_our_ops_loaded():
    done = _run("""
        import numpy as np
        import paddle, paddle_ext
        paddle_ext.logcumsumexp(paddle.ones([2, 3]), axis=1)  # our op in use in the same process
        paddle.enable_static()
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            x = paddle.static.data("x", [3, 4], "float32")
            y = paddle.logcumsumexp(x, axis=1)
        data = np.arange(12, dtype="float32").reshape(3, 4) / 3
        got, = paddle.static.Executor().run(main, feed={"x": data}, fetch_list=[y])
        np.testing.assert_allclose(got, np.logaddexp.accumulate(data, axis=1), rtol=1e-6)
        print("PADDLE_OP_OK")
    """, env_extra={"FLAGS_enable_pir_api": "0"})
    assert "PADDLE_OP_OK" in done.stdout, done.stderr[-3000:]


# ------------------------------------------------------------------- bad values in static graphs

BAD_VALUE_CASES = {
    "put_along_axis_to_static": ("""
        def f(a, i, v):
            return paddle_ext.put_along_axis(a, i, v, 0)
        f = paddle.jit.to_static(f, full_graph=True)
        f(paddle.zeros([3, 4]), paddle.to_tensor([[0, 7, 1, 2]]), paddle.ones([1, 4]))
    """, IndexError, "index 7 at indices[0, 1] is out of range for axis 0 of size 3 (expected -3 <= index < 3)"),
    "put_along_axis_executor": ("""
        paddle.enable_static()
        a = paddle.static.data("a", [3, 4], "float32")
        i = paddle.static.data("i", [1, 4], "int64")
        v = paddle.static.data("v", [1, 4], "float32")
        out = paddle_ext.put_along_axis(a, i, v, 0, reduce="add")
        paddle.static.Executor().run(feed={"a": np.zeros([3, 4], "float32"), "i": np.array([[0, 1, -4, 2]]),
                                           "v": np.ones([1, 4], "float32")}, fetch_list=[out])
    """, IndexError, "index -4 at indices[0, 2] is out of range for axis 0 of size 3"),
    "adaptive_softmax_layer_to_static": ("""
        layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12])
        f = paddle.jit.to_static(layer, full_graph=True)
        f(paddle.randn([4, 8]), paddle.to_tensor([1, 2, 23, 0]))
    """, IndexError, "label[2] = 23 is out of range [0, 20)"),
    "adaptive_softmax_target_op_executor": ("""
        paddle.enable_static()
        logits = paddle.static.data("logits", [2, 5], "float32")
        target = paddle.static.data("target", [2], "int64")
        out = paddle_ext.adaptive_log_softmax_target(logits, target)
        paddle.static.Executor().run(feed={"logits": np.zeros([2, 5], "float32"), "target": np.array([4, 5])},
                                     fetch_list=[out])
    """, IndexError, "target[1] = 5 is out of range [0, 5)"),
    "mutual_information_boundary_executor": ("""
        paddle.enable_static()
        px = paddle.static.data("px", [1, 2, 4], "float32")
        py = paddle.static.data("py", [1, 3, 3], "float32")
        boundary = paddle.static.data("boundary", [1, 4], "int64")
        ans = paddle_ext.mutual_information_recursion(px, py, boundary)
        paddle.static.Executor().run(feed={"px": np.zeros([1, 2, 4], "float32"), "py": np.zeros([1, 3, 3], "float32"),
                                           "boundary": np.array([[0, 0, 3, 3]])}, fetch_list=[ans])
    """, ValueError, "boundary row 0 = [0, 0, 3, 3] breaks 0 <= s_begin <= s_end <= S, 0 <= t_begin <= t_end <= T (S = 2, T = 3)"),
}


@pytest.mark.parametrize("case", list(BAD_VALUE_CASES))
def test_bad_values_in_static_graphs_raise_and_the_process_lives(case):
    body, error, message = BAD_VALUE_CASES[case]
    done = _run("""
        import numpy as np
        import paddle, paddle_ext
        try:
""" + textwrap.indent(textwrap.dedent(body), " " * 12) + """
            print("NO ERROR")
        except Exception as err:
            print("RAISED", type(err).__name__)
            print(str(err))
        print("ALIVE")
    """)
    assert done.returncode == 0, f"the process died (rc {done.returncode}):\n{done.stderr[-3000:]}"
    assert "ALIVE" in done.stdout
    assert f"RAISED {error.__name__}" in done.stdout, done.stdout[-3000:]
    assert message in done.stdout, done.stdout[-3000:]


# --------------------------------------------------------------------------------- quiet import

def test_import_and_first_calls_print_nothing_at_paddles_default_log_level():
    done = _run("""
        import paddle_ext, paddle
        x = paddle.randn([3, 5])
        x.stop_gradient = False
        paddle_ext.logcumsumexp(x, axis=1).sum().backward()
        paddle_ext.put_along_axis(x, paddle.to_tensor([[0], [1], [2]]), 1.0, 1, reduce="add").sum().backward()
        px, py = paddle.randn([1, 2, 4]), paddle.randn([1, 3, 3])
        px.stop_gradient = False
        paddle_ext.mutual_information_recursion(px, py).sum().backward()
        paddle_ext.adaptive_log_softmax_target(x, paddle.to_tensor([0, 1, 4]))[0].sum().backward()
        paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(5, 10, [4])(x, paddle.to_tensor([0, 5, 9]))[1].backward()
    """, drop_env=("GLOG_minloglevel", "GLOG_v", "FLAGS_call_stack_level"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "" and done.stderr == "", f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"


# ----------------------------------------------------------------------------------- threads

def _gomp_parallel_providers(stderr: str) -> dict:
    """{library basename: basename of the library its GOMP_parallel calls bind to}, from LD_DEBUG=bindings."""
    found = {}
    for line in stderr.splitlines():
        if "`GOMP_parallel'" in line and "binding file" in line:
            user, provider = line.split("binding file ", 1)[1].split(" [0] to ", 1)
            found[os.path.basename(user.strip())] = os.path.basename(provider.split(" [", 1)[0].strip())
    return found


def test_our_parallel_regions_run_on_the_openmp_runtime_paddles_own_libraries_use():
    """One OpenMP runtime, one worker pool: a second runtime's workers would wait (spinning) on the cores the
    other one's next region needs, once Paddle's math library runs on several threads."""
    done = _run("""
        import paddle, paddle_ext
        paddle.base.core.set_num_threads(2)
        print(float(paddle_ext.logcumsumexp(paddle.randn([64, 4096]), axis=1).sum()))
    """, env_extra={"LD_DEBUG": "bindings", "LD_BIND_NOW": "1"})  # every symbol bound at load
    assert done.returncode == 0, done.stderr[-3000:]
    providers = _gomp_parallel_providers(done.stderr)
    ours = _library.kernel_library_path().name
    assert ours in providers, sorted(providers)
    paddles = {user: lib for user, lib in providers.items() if user.startswith(("libpaddle", "libphi", "libdnnl"))}
    assert paddles, sorted(providers)
    assert set(paddles.values()) == {providers[ours]}, (providers[ours], paddles)


@pytest.mark.parametrize("env, set_in_python, expected", [
    ({}, None, "cpus"),
    ({"OMP_NUM_THREADS": "1"}, None, 1),
    ({"OMP_NUM_THREADS": "3"}, None, 3),
    ({"OMP_NUM_THREADS": "1", "PADDLE_EXT_NUM_THREADS": "3"}, None, 3),
    ({}, "3", 3),  # os.environ set by the script before `import paddle`
], ids=["unset", "omp-1", "omp-3", "ours-over-omp", "set-in-python"])
def test_kernel_thread_count_follows_what_the_user_asked_for(env, set_in_python, expected):
    """Paddle writes OMP_NUM_THREADS=1 at import when it is unset and runs its own math library on one
    thread: neither may shrink our kernels' count."""
    done = _run(f"""
        import os
        if {set_in_python!r} is not None:
            os.environ["OMP_NUM_THREADS"] = {set_in_python!r}
        import paddle, paddle_ext
        from paddle_ext import _library
        print("THREADS", _library.num_threads(), len(os.sched_getaffinity(0)))
    """, env_extra=env, drop_env=("OMP_NUM_THREADS", "PADDLE_EXT_NUM_THREADS"))
    assert done.returncode == 0, done.stderr[-3000:]
    threads, cpus = (int(v) for v in done.stdout.split("THREADS", 1)[1].split())
    assert threads == (cpus if expected == "cpus" else expected)


# ------------------------------------------------------------------------------------ packaging

@pytest.mark.install
def test_isolated_wheel_build_installs_and_runs_in_a_fresh_venv(tmp_path):
    """`pip wheel .` (pyproject.toml's isolated build) → a fresh venv → `pip install` the wheel → use it."""
    pip_env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    wheel_dir = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT)],
                           capture_output=True, text=True, env=pip_env, timeout=1800)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel, = wheel_dir.glob("paddle_ext-*-py3-none-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {name.split("/")[0] for name in names} == {"paddle_ext", f"paddle_ext-{paddle_ext.__version__}.dist-info"}, names
    pinned = next(line.split("paddlepaddle==")[1].split('"')[0] for line in (ROOT / "pyproject.toml").read_text().splitlines()
                  if "paddlepaddle==" in line)
    assert f"paddle_ext/_native/paddle_{pinned}/paddle_ext_ops.so" in names
    assert "paddle_ext/_native/libpaddle_ext_kernels.so" in names
    assert f"Requires-Dist: paddlepaddle=={pinned}" in metadata
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True,
                               text=True, env=pip_env, timeout=1800)
    assert installed.returncode == 0, installed.stderr[-4000:]
    used = subprocess.run([str(python), "-c", "import paddle, paddle_ext; "
                           "print(float(paddle_ext.logcumsumexp(paddle.to_tensor([0.0, 0.0]), axis=0)[1]))"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert used.returncode == 0, used.stderr[-3000:]
    assert abs(float(used.stdout.strip()) - np.log(2.0)) < 1e-6


# --------------------------------------------------------------------------- paddle.no_grad()

def _no_grad_calls():
    """One call per op family on inputs that want grads: (name, fn(*inputs), inputs as NumPy)."""
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype("float32")  # noqa: E731
    B, S, T, C = 2, 3, 4, 5
    symbols = lambda: paddle.to_tensor(rng.integers(1, C, (B, S)))  # noqa: E731
    idx = lambda: paddle.to_tensor(np.array([[0, 1], [1, 0]]))  # noqa: E731
    layer = paddle_ext.nn.AdaptiveLogSoftmaxWithLoss(8, 20, cutoffs=[5, 10])
    return [
        ("logcumsumexp", lambda x: paddle_ext.logcumsumexp(x, axis=1), [f32(3, 4)]),
        ("put_along_axis", lambda a, v: paddle_ext.put_along_axis(a, idx(), v, 1, reduce="add"), [f32(2, 2), f32(2, 2)]),
        ("mutual_information", lambda px, py: paddle_ext.mutual_information_recursion(px, py),
         [f32(B, S, T + 1), f32(B, S + 1, T)]),
        ("rnnt_loss_simple", lambda lm, am: paddle_ext.rnnt_loss_simple(lm, am, symbols(), 0, reduction="sum"),
         [f32(B, S + 1, C), f32(B, T, C)]),
        ("rnnt_loss", lambda x: paddle_ext.rnnt_loss(x, symbols(), 0, reduction="sum"), [f32(B, T, S + 1, C)]),
        ("adaptive_log_softmax", lambda x: layer(x, paddle.to_tensor(np.array([1, 7, 15])))[1], [f32(3, 8)]),
    ]


@pytest.mark.parametrize("name,fn,arrays", _no_grad_calls(), ids=lambda v: v if isinstance(v, str) else "")
def test_under_no_grad_outputs_want_no_grad_and_inputs_get_none(name, fn, arrays):
    """As with Paddle's own ops: under paddle.no_grad() nothing is recorded, even for inputs that want grads
    (Paddle 3.3.1 records custom ops there unless told otherwise)."""
    inputs = [paddle.to_tensor(a, stop_gradient=False) for a in arrays]
    with paddle.no_grad():
        out = fn(*inputs)
    assert out.stop_gradient, name
    scale = paddle.to_tensor(1.0, stop_gradient=False)
    (scale * out.sum()).backward()  # a later backward through the output reaches no input
    assert all(x.grad is None for x in inputs), name
    assert all(not x.stop_gradient for x in inputs), f"{name}: the inputs' stop_gradient must be restored"


def test_inplace_put_along_axis_on_a_parameter_under_no_grad():
    """The usual in-place parameter update: Paddle's own put_along_axis_ allows it under no_grad and returns
    the parameter itself; ours did raise "Leaf Var ... can't use inplace strategy"."""
    w = paddle.create_parameter([2, 3], "float32", default_initializer=paddle.nn.initializer.Constant(1.0))
    values = paddle.to_tensor(np.full((2, 1), 5.0, "float32"), stop_gradient=False)
    with paddle.no_grad():
        result = paddle_ext.put_along_axis_(w, paddle.to_tensor(np.array([[2], [0]])), values, 1, reduce="add")
    assert result is w and not w.stop_gradient
    np.testing.assert_array_equal(w.numpy(), [[1, 1, 6], [6, 1, 1]])
    (w * 2).sum().backward()  # still a parameter that trains
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 2.0))
