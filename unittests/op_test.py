"""Our OpTest: the conformance harness every paddle_ext op is tested with.

Paddle's own OpTest is not shipped in the wheel; this one reproduces its checks for custom ops:

* ``check_output``  — the op in dygraph and in a static program (program_guard + Executor; mode
  "legacy_static": a legacy-IR program, under paddle.pir_utils.OldIrGuard), against a NumPy float64 reference, with Paddle's per-dtype tolerances (float16/bfloat16 inputs are rounded
  to the dtype first, so the reference sees exactly what the op sees).
* ``check_grad``    — analytic grads (dygraph ``backward`` and static ``paddle.static.gradients``)
  against central-difference numeric grads of the same op in float64.
* ``check_export``  — ``paddle.jit.to_static`` → ``paddle.jit.save`` → ``paddle.jit.load`` and a
  ``paddle.inference`` predictor give the dygraph outputs.

An op under test is any callable ``fn(*tensors, **attrs)`` returning a Tensor or a tuple of Tensors;
``inputs`` is an ordered dict of NumPy arrays. Floating inputs are cast to the dtype under test;
integer inputs (indices, boundaries) are passed as they are.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile

import numpy as np
import paddle
import pytest

# Paddle's OpTest tolerances (docs/architecture.md, "Paddle's custom-op API"): relative, and an absolute
# floor for the half types.
RTOL = {"float64": 1e-7, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2, "complex128": 1e-7, "complex64": 1e-5}
ATOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2, "complex128": 1e-12, "complex64": 1e-6}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
COMPLEX_DTYPES = ("complex64", "complex128")


def round_to_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values a tensor of `dtype` holds after casting `array` to it."""
    array = np.asarray(array)
    if np.iscomplexobj(array):
        return array.astype(_input_dtype(array, dtype)).astype(np.complex128)
    if not np.issubdtype(array.dtype, np.floating):
        return array
    if dtype == "float16":
        return array.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        return paddle.to_tensor(array.astype(np.float32)).astype("bfloat16").astype("float64").numpy()
    if dtype == "float32":
        return array.astype(np.float32).astype(np.float64)
    return array.astype(np.float64)


def _is_float(array) -> bool:
    """Floating or complex: the inputs cast to the dtype under test and differentiated."""
    return np.issubdtype(np.asarray(array).dtype, np.inexact)


def _input_dtype(array, dtype: str) -> str:
    """The dtype an input runs in: a complex input in the complex dtype under test (complex128 otherwise)."""
    if np.iscomplexobj(array):
        return dtype if dtype in COMPLEX_DTYPES else "complex128"
    return dtype


def _wide(array) -> np.ndarray:
    """float64 (complex128 for complex) copy of a floating array."""
    return np.array(array, dtype=np.complex128 if np.iscomplexobj(array) else np.float64)


def _wrap_phase(d):
    """d in [-pi, pi): imaginary parts of logs compared modulo 2 pi (a complex log's branch)."""
    return (d + np.pi) % (2 * np.pi) - np.pi


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _to_numpy64(t) -> np.ndarray:
    if t.dtype in (paddle.float16, paddle.bfloat16):
        t = t.astype("float32")
    return _wide(t.numpy()) if _is_float(t.numpy()) else t.numpy()


def assert_close(actual, expected, dtype: str, rtol=None, atol=None, what="output"):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    if not _is_float(expected):
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    rtol = RTOL[dtype] if rtol is None else rtol
    atol = ATOL[dtype] if atol is None else atol
    # Non-finite values must match exactly (same inf sign, NaN where NaN).
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected), err_msg=f"{what}: NaN positions differ")
    inf = np.isinf(expected)
    np.testing.assert_array_equal(actual[inf], expected[inf], err_msg=f"{what}: inf values differ")
    finite = np.isfinite(expected)
    if np.iscomplexobj(expected):
        actual = actual.real + 1j * (expected.imag + _wrap_phase(actual.imag - expected.imag))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol, atol=atol, err_msg=what)


@contextlib.contextmanager
def static_mode(legacy=False):
    """Static mode: PIR programs, or legacy-IR ones (``paddle.static.Program`` is then the old Program)."""
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard() if legacy else contextlib.nullcontext():
            yield
    finally:
        paddle.disable_static()


def _dygraph_inputs(inputs: dict, dtype: str, stop_gradient=True):
    tensors = []
    for array in inputs.values():
        t = paddle.to_tensor(np.asarray(array))
        if _is_float(array):
            t = t.astype(_input_dtype(array, dtype))
        t.stop_gradient = stop_gradient or not _is_float(array)
        tensors.append(t)
    return tensors


def run_dygraph(fn, inputs: dict, attrs: dict, dtype: str):
    outs = _as_tuple(fn(*_dygraph_inputs(inputs, dtype), **attrs))
    return [_to_numpy64(o) for o in outs]


def run_static(fn, inputs: dict, attrs: dict, dtype: str, legacy=False):
    """Builds a static program around fn (floating inputs fed as float32/64 and cast inside)."""
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            feeds, args = {}, []
            for name, array in inputs.items():
                array = np.asarray(array)
                feed_dtype = "float64" if dtype == "float64" or not _is_float(array) else "float32"
                if not _is_float(array):
                    feed_dtype = str(array.dtype)
                elif np.iscomplexobj(array):
                    feed_dtype = _input_dtype(array, dtype)
                var = paddle.static.data(name, list(array.shape), feed_dtype)
                args.append(var.astype(dtype) if _is_float(array) and feed_dtype != dtype else var)
                feeds[name] = array.astype(feed_dtype)
            outs = _as_tuple(fn(*args, **attrs))
            fetch = [o.astype("float32") if o.dtype in (paddle.float16, paddle.bfloat16) else o for o in outs]
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        results = exe.run(main, feed=feeds, fetch_list=fetch)
    return [_wide(r) if _is_float(r) else np.asarray(r) for r in results]


MODES = ("dygraph", "static", "legacy_static")


def run_in_mode(mode, fn, *arrays):
    """fn(*tensors) in `mode` (one of MODES) on NumPy arrays fed in their own dtypes; returns the outputs
    as NumPy arrays and their paddle dtypes (as the mode names them: a VarType in a legacy-IR program)."""
    if mode == "dygraph":
        outs = _as_tuple(fn(*[paddle.to_tensor(a) for a in arrays]))
        return [o.numpy() for o in outs], [o.dtype for o in outs]
    with static_mode(legacy=mode == "legacy_static"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            args = [paddle.static.data(f"in{i}", list(a.shape), str(a.dtype)) for i, a in enumerate(arrays)]
            outs = _as_tuple(fn(*args))
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        results = exe.run(main, feed={f"in{i}": a for i, a in enumerate(arrays)}, fetch_list=list(outs))
        return [np.asarray(r) for r in results], [o.dtype for o in outs]


def check_output(fn, inputs: dict, expected_fn, attrs: dict | None = None, dtype="float64", rtol=None, atol=None,
                 modes=MODES):
    """Runs fn in each mode and compares with expected_fn(*float64 inputs rounded to dtype, **attrs)."""
    attrs = attrs or {}
    ref_inputs = [round_to_dtype(a, dtype) for a in inputs.values()]
    expected = _as_tuple(expected_fn(*ref_inputs, **attrs))
    results = {}
    for mode in modes:
        if mode == "dygraph":
            outs = run_dygraph(fn, inputs, attrs, dtype)
        else:
            outs = run_static(fn, inputs, attrs, dtype, legacy=mode == "legacy_static")
        assert len(outs) == len(expected), f"{mode}: {len(outs)} outputs, expected {len(expected)}"
        for i, (actual, exp) in enumerate(zip(outs, expected)):
            assert_close(actual, np.asarray(exp), dtype, rtol, atol, what=f"{mode} output {i} ({dtype})")
        results[mode] = outs
    return results


def _loss_weights(shapes, seed=7, complex_outputs=()):
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(0.5, 1.5, size=s) * rng.choice([-1.0, 1.0], size=s) for s in shapes]
    # a complex output's weights get a random phase too (drawn after the real ones: those stay as they were)
    return [w * np.exp(1j * rng.uniform(-np.pi, np.pi, size=w.shape)) if c else w
            for w, c in zip(weights, list(complex_outputs) + [False] * len(weights))]


def _is_complex_tensor(t) -> bool:
    return t.dtype in (paddle.complex64, paddle.complex128) or str(t.dtype).endswith(("COMPLEX64", "COMPLEX128"))


def _weighted_loss(outs, weights):
    """sum_k sum(w_k * out_k) over finite outputs: random weights catch grads that a plain mean hides. A
    complex output adds sum(Re(conj(w_k) * out_k)): a real loss whose grad w.r.t. a complex x, in Paddle's
    convention, is dL/dRe(x) + i dL/dIm(x) (what numeric_grads computes)."""
    legacy = not (paddle.in_dynamic_mode() or paddle.framework.in_pir_mode())
    total = 0
    for o, w in zip(outs, weights):
        if np.iscomplexobj(w):
            re, im = paddle.real(o), paddle.imag(o)
            finite = (re > float("-inf")) & (re < float("inf")) & (im > float("-inf")) & (im < float("inf"))
            if paddle.in_dynamic_mode():  # a complex sum, whose grad (grad_outputs 1) is its real part's:
                # paddle.real has no double grad
                total = total + paddle.sum(paddle.where(finite, o, paddle.zeros_like(o)) * paddle.to_tensor(np.conj(w)))
                continue
            re, im = (paddle.where(finite, part, paddle.zeros_like(part)) for part in (re, im))
            # Re(conj(w) * o) with real constants (a legacy-IR program holds no complex constant)
            weighted = re * paddle.to_tensor(w.real, dtype=re.dtype) + im * paddle.to_tensor(w.imag, dtype=im.dtype)
            total = total + (paddle.mean(weighted) * int(np.prod(o.shape)) if legacy else paddle.sum(weighted))
            continue
        # paddle.isfinite and paddle.sum fail on a legacy-IR program's variables in Paddle 3.3.1
        finite = (o > float("-inf")) & (o < float("inf")) if legacy else paddle.isfinite(o)
        weighted = paddle.where(finite, o, paddle.zeros_like(o)) * paddle.to_tensor(w, dtype=o.dtype)
        total = total + (paddle.mean(weighted) * int(np.prod(o.shape)) if legacy else paddle.sum(weighted))
    return total


def analytic_grads(fn, inputs: dict, attrs: dict, wrt, output_indices=None, dtype="float64"):
    tensors = _dygraph_inputs(inputs, dtype, stop_gradient=False)
    names = list(inputs)
    outs = _as_tuple(fn(*tensors, **attrs))
    outs = [outs[i] for i in output_indices] if output_indices is not None else list(outs)
    weights = _loss_weights([tuple(o.shape) for o in outs], complex_outputs=[_is_complex_tensor(o) for o in outs])
    _weighted_loss(outs, weights).backward()
    grads = []
    for name in wrt:
        g = tensors[names.index(name)].grad
        grads.append(np.zeros(np.shape(inputs[name])) if g is None else _to_numpy64(g))
    return grads, weights


def static_grads(fn, inputs: dict, attrs: dict, wrt, weights, output_indices=None, legacy=False):
    with static_mode(legacy):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            args, feeds = [], {}
            for name, array in inputs.items():
                array = np.asarray(array)
                var_dtype = _wide(array).dtype if _is_float(array) else array.dtype
                var = paddle.static.data(name, list(array.shape), str(var_dtype))
                var.stop_gradient = not _is_float(array)
                args.append(var)
                feeds[name] = _wide(array) if _is_float(array) else array
            outs = _as_tuple(fn(*args, **attrs))
            outs = [outs[i] for i in output_indices] if output_indices is not None else list(outs)
            loss = _weighted_loss(outs, weights)
            grads = paddle.static.gradients([loss], [args[list(inputs).index(n)] for n in wrt])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        return [np.asarray(g) for g in exe.run(main, feed=feeds, fetch_list=grads)]


def _first_order(fn, values: dict, attrs: dict, wrt, weights, create_graph):
    """Tensors of values (wrt ones differentiable) and the grads of the weighted loss w.r.t. wrt."""
    tensors = _dygraph_inputs(values, "float64")
    names = list(values)
    for name in wrt:
        tensors[names.index(name)].stop_gradient = False
    loss = _weighted_loss(_as_tuple(fn(*tensors, **attrs)), weights)
    xs = [tensors[names.index(n)] for n in wrt]
    grads = paddle.grad(loss, xs, create_graph=create_graph, allow_unused=True)
    return xs, [paddle.zeros_like(x) if g is None else g for x, g in zip(xs, grads)]


def check_double_grad(fn, inputs: dict, wrt, attrs: dict | None = None, delta=1e-6, rtol=1e-6, atol=1e-8):
    """Second-order grads (dygraph, create_graph=True) in float64: the grad of sum_i v_i * dL/dx_i
    (L the random-weighted loss, v random) against central differences of the first-order grads."""
    attrs = attrs or {}
    wrt = [wrt] if isinstance(wrt, str) else list(wrt)
    values = {k: (_wide(v) if _is_float(v) else np.asarray(v)) for k, v in inputs.items()}
    with paddle.no_grad():
        outs = _as_tuple(fn(*_dygraph_inputs(values, "float64"), **attrs))
    weights = _loss_weights([tuple(o.shape) for o in outs], complex_outputs=[_is_complex_tensor(o) for o in outs])
    vs = _loss_weights([values[n].shape for n in wrt], seed=8,
                       complex_outputs=[np.iscomplexobj(values[n]) for n in wrt])

    def directional(create_graph):  # sum_i Re(conj(v_i) * dL/dx_i): real for complex x too
        xs, grads = _first_order(fn, values, attrs, wrt, weights, create_graph)
        products = [g * paddle.to_tensor(np.conj(v)) for g, v in zip(grads, vs)]
        return xs, sum((paddle.real(p) if _is_complex_tensor(p) else p).sum() for p in products)

    xs, total = directional(True)
    analytic = paddle.grad(total, xs, allow_unused=True)
    for name, x, a in zip(wrt, xs, analytic):
        a = np.zeros(x.shape) if a is None else a.numpy()
        flat, numeric = values[name].reshape(-1), np.zeros(a.size, dtype=values[name].dtype)
        for i in range(flat.size):
            orig = flat[i]
            for step in ((1.0, 1j) if np.iscomplexobj(flat) else (1.0,)):  # complex x: d/dRe + i d/dIm
                flat[i] = orig + delta * step
                plus = float(directional(False)[1])
                flat[i] = orig - delta * step
                minus = float(directional(False)[1])
                flat[i] = orig
                numeric[i] += step * (plus - minus) / (2 * delta)
        np.testing.assert_allclose(a.reshape(-1), numeric, rtol=rtol, atol=atol,
                                   err_msg=f"second-order grad w.r.t. {name}")


def numeric_grads(fn, inputs: dict, attrs: dict, wrt, weights, output_indices=None, delta=1e-5):
    """Central differences of the weighted loss, through the op itself in float64."""
    def loss_at(values):
        with paddle.no_grad():
            tensors = [paddle.to_tensor(np.asarray(v)) for v in values.values()]
            outs = _as_tuple(fn(*tensors, **attrs))
            outs = [outs[i] for i in output_indices] if output_indices is not None else list(outs)
            total = 0.0
            for o, w in zip(outs, weights):
                o = _wide(o.numpy())
                total += float(np.sum(np.real(np.where(np.isfinite(o), o, 0.0) * np.conj(w))))
            return total

    values = {k: (_wide(v) if _is_float(v) else np.asarray(v)) for k, v in inputs.items()}
    grads = []
    for name in wrt:
        x = values[name]
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            orig = flat[i]
            if not np.isfinite(orig):
                continue  # the grad at a non-finite input is checked by the op's own edge tests
            # complex x: dL/dRe + i dL/dIm (Paddle's convention for a real loss)
            for step in ((1.0, 1j) if np.iscomplexobj(flat) else (1.0,)):
                flat[i] = orig + delta * step
                plus = loss_at(values)
                flat[i] = orig - delta * step
                minus = loss_at(values)
                flat[i] = orig
                gflat[i] += step * (plus - minus) / (2 * delta)
        grads.append(g)
    return grads


def check_grad(fn, inputs: dict, wrt, attrs: dict | None = None, output_indices=None, delta=1e-5,
               max_relative_error=1e-6, modes=MODES):
    """Analytic vs numeric grads in float64, Paddle's rule: relative error, absolute below 1e-3.

    The loss is a random-weighted sum (not Paddle's mean), so it is larger and the central
    difference carries ~1e-10 absolute rounding error: hence 1e-6 rather than Paddle's 1e-7.
    """
    attrs = attrs or {}
    wrt = [wrt] if isinstance(wrt, str) else list(wrt)
    analytic, weights = analytic_grads(fn, inputs, attrs, wrt, output_indices)
    numeric = numeric_grads(fn, inputs, attrs, wrt, weights, output_indices, delta)
    found = {"dygraph": analytic}
    for mode in ("static", "legacy_static"):
        if mode in modes:
            found[mode] = static_grads(fn, inputs, attrs, wrt, weights, output_indices, legacy=mode == "legacy_static")
    for mode, grads in found.items():
        for name, a, n in zip(wrt, grads, numeric):
            assert a.shape == n.shape, f"{mode} grad of {name}: shape {a.shape} != {n.shape}"
            assert not np.isnan(a).any(), f"{mode} grad of {name} has NaN"
            scale = np.maximum(np.abs(n), 1e-3)
            err = np.max(np.abs(a - n) / scale) if a.size else 0.0
            assert err <= max_relative_error, (
                f"{mode} grad of {name}: max relative error {err:.3e} > {max_relative_error:.1e}\n"
                f"analytic={a.ravel()[:8]}\nnumeric={n.ravel()[:8]}"
            )
    return found


class _Wrapped(paddle.nn.Layer):
    """fn with its attrs bound, as a Layer; to_static needs a forward with named arguments."""

    def __init__(self, fn, attrs):
        super().__init__()
        self._fn, self._attrs = fn, attrs


class _Wrapped1(_Wrapped):
    def forward(self, a):
        return self._fn(a, **self._attrs)


class _Wrapped2(_Wrapped):
    def forward(self, a, b):
        return self._fn(a, b, **self._attrs)


class _Wrapped3(_Wrapped):
    def forward(self, a, b, c):
        return self._fn(a, b, c, **self._attrs)


class _Wrapped4(_Wrapped):
    def forward(self, a, b, c, d):
        return self._fn(a, b, c, d, **self._attrs)


_WRAPPERS = {1: _Wrapped1, 2: _Wrapped2, 3: _Wrapped3, 4: _Wrapped4}


@functools.lru_cache(maxsize=None)
def inference_serves_parameterless_models() -> bool:
    """Whether this Paddle's paddle.inference loads a model without parameters. Paddle 3.0.0's does not,
    built-in ops alike (jit.save writes no .pdiparams for it, and the predictor requires one); probed
    once with paddle.cumsum."""
    import paddle.inference as paddle_infer  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "model")
        paddle.jit.save(paddle.jit.to_static(_Cumsum(), input_spec=[paddle.static.InputSpec([None, 2], "float32", "x")],
                                             full_graph=True), prefix)
        model_file = prefix + ".json" if os.path.exists(prefix + ".json") else prefix + ".pdmodel"
        config = paddle_infer.Config(model_file, prefix + ".pdiparams")
        config.disable_gpu()
        config.disable_glog_info()
        try:
            paddle_infer.create_predictor(config)
        except RuntimeError:
            return False
    return True


_BFLOAT16_STATIC_PROBE = """
import paddle
layer = paddle.nn.Linear(8, 8)
def forward(x):
    with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
        return layer(x).astype("float32").mean()
print("PROBE", float(paddle.jit.to_static(forward, full_graph=True)(paddle.randn([4, 8]))))
"""


@functools.lru_cache(maxsize=None)
def bfloat16_static_matmul_works() -> bool:
    """Whether this Paddle runs a bfloat16 matmul in a static program on this CPU. Its oneDNN kernel needs
    AVX-512 there: on an AVX2-only CPU it raises dnnl::error and Paddle aborts the process (built-in ops
    alone, every 3.x release), so the probe runs in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "probe.py")
        with open(script, "w") as f:
            f.write(_BFLOAT16_STATIC_PROBE)
        done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300, cwd=tmp)
    return done.returncode == 0 and "PROBE" in done.stdout


def skip_unless_bfloat16_static_matmul_works():
    if not bfloat16_static_matmul_works():
        pytest.skip("this Paddle aborts on a bfloat16 matmul in a static program on this CPU (oneDNN without "
                    "AVX-512; built-in ops alike)")


class _Cumsum(paddle.nn.Layer):
    def forward(self, x):
        return paddle.cumsum(x, axis=1)


def skip_inference_unless_served(prefix: str):
    """After the jit.load checks: skip the paddle.inference part where this Paddle cannot serve the model."""
    if not os.path.exists(prefix + ".pdiparams") and not inference_serves_parameterless_models():
        pytest.skip("this Paddle's paddle.inference cannot load a model without parameters (Paddle 3.0.0, built-in "
                    "ops alike); jit.load was checked")


def check_export(fn_or_layer, inputs, attrs: dict | None = None, rtol=1e-6, atol=1e-6, directory=None):
    """to_static → jit.save → (jit.load, paddle.inference) reproduce the dygraph outputs. ``inputs`` is one
    dict of named arrays, or a list of such dicts (batches of different shapes): the model is then exported
    once, with every dimension that differs between them dynamic (None), and each batch is checked through
    the same loaded model and predictor. Returns the dygraph outputs of the first."""
    import paddle.inference as paddle_infer  # noqa: PLC0415

    import paddle_ext  # noqa: PLC0415  (loads the op library into this process)

    feeds = [[np.asarray(a) for a in batch.values()] for batch in (inputs if isinstance(inputs, list) else [inputs])]
    names = list((inputs[0] if isinstance(inputs, list) else inputs).keys())
    layer = fn_or_layer if isinstance(fn_or_layer, paddle.nn.Layer) else _WRAPPERS[len(names)](fn_or_layer, attrs or {})
    layer.eval()
    expected = [[o.numpy() for o in _as_tuple(layer(*(paddle.to_tensor(a) for a in arrays)))] for arrays in feeds]
    specs = [paddle.static.InputSpec(shape=[d if all(f[i].shape[k] == d for f in feeds) else None
                                            for k, d in enumerate(a.shape)], dtype=str(a.dtype), name=n)
             for i, (n, a) in enumerate(zip(names, feeds[0]))]
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        prefix = os.path.join(tmp, "model")
        static_layer = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
        paddle.jit.save(static_layer, prefix)
        loaded = paddle.jit.load(prefix)
        for b, (arrays, want) in enumerate(zip(feeds, expected)):
            got = [o.numpy() for o in _as_tuple(loaded(*(paddle.to_tensor(a) for a in arrays)))]
            assert len(got) == len(want), f"jit.load gave {len(got)} outputs, expected {len(want)}"
            for i, (g, e) in enumerate(zip(got, want)):
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"batch {b}: jit.load output {i}")
        skip_inference_unless_served(prefix)
        model_file = prefix + ".json" if os.path.exists(prefix + ".json") else prefix + ".pdmodel"
        config = paddle_infer.Config(model_file, prefix + ".pdiparams")
        config.disable_gpu()
        config.disable_glog_info()
        predictor = paddle_infer.create_predictor(config)
        for b, (arrays, want) in enumerate(zip(feeds, expected)):
            for name, array in zip(predictor.get_input_names(), arrays):
                handle = predictor.get_input_handle(name)
                handle.reshape(list(array.shape))
                handle.copy_from_cpu(array)
            predictor.run()
            inferred = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
            assert len(inferred) == len(want), f"inference gave {len(inferred)} outputs, expected {len(want)}"
            for i, (g, e) in enumerate(zip(inferred, want)):
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"batch {b}: paddle.inference output {i}")
    assert paddle_ext.library_path()
    return expected[0]
