"""Finds and loads the op library: the binding of the running Paddle release (`_native/paddle_<release>/
paddle_ext_ops.so`, which registers the ops) over the Paddle-free kernel library (`_native/
libpaddle_ext_kernels.so`), both built by setup.py (tools/native_build.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import linecache
import pathlib
import types
import warnings


@contextlib.contextmanager
def _without_ccache_warning():
    """Paddle warns that ccache (a compiler cache for building ops) is missing when it is imported
    and when an op library is loaded: noise for someone who only uses the ops."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No ccache found")
        yield


with _without_ccache_warning():
    import paddle

NATIVE = pathlib.Path(__file__).with_name("_native")
KERNEL_LIBRARY = "libpaddle_ext_kernels.so"
BINDING_LIBRARY = "paddle_ext_ops.so"
BUILD_HINT = ("or build paddle_ext from source against this Paddle: `pip install --no-build-isolation .` in a clone "
              "of its repository (needs g++)")


def _binding_folder(release: str, cuda: bool) -> str:
    return f"paddle_{release}" + ("_cuda" if cuda else "")


def supported_releases() -> list[str]:
    """The Paddle releases this installation carries a binding for (CPU ones; `<release>_cuda` for CUDA)."""
    found = [p.parent.name[len("paddle_"):] for p in NATIVE.glob(f"paddle_*/{BINDING_LIBRARY}")]
    return sorted(found, key=lambda r: [int(x) if x.isdigit() else x for x in r.replace("_", ".").split(".")])


def binding_path() -> pathlib.Path:
    """The binding of the running Paddle; an ImportError naming the supported releases when there is none."""
    cuda = paddle.is_compiled_with_cuda()
    path = NATIVE / _binding_folder(paddle.__version__, cuda) / BINDING_LIBRARY
    if not path.is_file():
        kind = "CUDA " if cuda else ""
        raise ImportError(f"paddle_ext: no op library for {kind}Paddle {paddle.__version__} in this installation "
                          f"(it has: {', '.join(supported_releases()) or 'none'}); install a supported Paddle "
                          f"release, {BUILD_HINT}")
    return path


def kernel_library_path() -> pathlib.Path:
    return NATIVE / KERNEL_LIBRARY


@functools.lru_cache(maxsize=None)
def ops():
    """The op functions, one per forward op of ops/*.yaml, every input and attr positional: written by the
    running Paddle's own custom-op code generator, as its build would write them into a stub module."""
    path = binding_path()
    try:
        with _without_ccache_warning():
            from paddle.utils.cpp_extension import extension_utils  # noqa: PLC0415

            extension_utils.load_op_meta_info_and_register_op(str(path))
    except Exception as err:  # noqa: BLE001  (a library that does not fit this Paddle fails to load)
        raise ImportError(f"paddle_ext: the op library {path} failed to load ({err}); reinstall paddle_ext, {BUILD_HINT}") from err
    names = [op["name"] for op in manifest() if not op["forward"]]
    registered = set(paddle.base.core.get_all_op_names())
    missing = [name for name in names if name not in registered]
    if missing:
        raise ImportError(f"paddle_ext: the op library {path} is stale, it lacks {missing}; reinstall paddle_ext, {BUILD_HINT}")
    return _OpModule(_api_module(path, names, extension_utils))


def _api_module(path: pathlib.Path, names: list[str], extension_utils) -> types.ModuleType:
    """A module of Paddle's generated op functions; their source is kept in linecache, so that to_static
    (which reads a function's source) sees them as it sees those of a stub file."""
    source = "\n\n".join(extension_utils._custom_api_content(name) for name in names)
    filename = f"<paddle_ext ops for Paddle {paddle.__version__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType("paddle_ext._ops")
    module.__file__ = str(path)
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102  (Paddle's own generated code)
    return module


class _OpModule:
    """The generated module with each op function run by ``_respecting_no_grad``; other attributes as is."""

    def __init__(self, module):
        self._module = module
        self.__file__ = module.__file__

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if callable(attr) and not name.startswith("_"):
            attr = _respecting_no_grad(attr)
        setattr(self, name, attr)  # looked up once
        return attr


@functools.lru_cache(maxsize=None)
def dygraph_op(name: str):
    """``fn(*inputs_and_attrs) -> list of outputs``: the op called straight through Paddle's custom-op dispatcher,
    for dygraph calls whose inputs want no grad (or with grads enabled: the registered grad op is recorded).
    Skips the generated function's mode test and result packing, and _respecting_no_grad, which such calls
    do not need; the generated function where a Paddle release's generator calls something else."""
    module = ops()._module
    generated = getattr(module, name)
    dispatch = getattr(module.__dict__.get("_C_ops"), "_run_custom_op", None)
    if dispatch is not None and f'_run_custom_op("{name}",' in "".join(linecache.getlines(generated.__code__.co_filename)):
        return functools.partial(dispatch, name)
    return lambda *args: _as_list(generated(*args))


def direct_call_fits(*tensors) -> bool:
    """Whether a call may go to ``dygraph_op``: dygraph with grads enabled (the registered grad op is then
    recorded just as by the generated function), or no input wanting a grad (else, under no_grad, the call
    needs _respecting_no_grad). ``tensors``: the op's tensor inputs, None for an absent optional one."""
    if not paddle.in_dynamic_mode():
        return False
    if paddle.is_grad_enabled():
        return True
    for t in tensors:
        if t is not None and not t.stop_gradient:
            return False
    return True


def call_op(name: str, grad_inputs, *args):
    """The registered op ``name`` on ``args``: through ``dygraph_op`` where ``direct_call_fits(*grad_inputs)``
    (``grad_inputs``: its inputs that may want grads), else through the generated function."""
    if direct_call_fits(*grad_inputs):
        return dygraph_op(name)(*args)
    return getattr(ops(), name)(*args)


try:
    from paddle.base.dygraph.base import in_sot_simulation_mode
except ImportError:  # a Paddle release without it: every dygraph call is taken as possibly traced by SOT
    def in_sot_simulation_mode() -> bool:
        return True


def _only_cpu() -> bool:
    """Whether this Paddle has no device but the CPU (no CUDA, ROCm, XPU or custom-device plugin)."""
    try:
        custom = paddle.device.get_all_custom_device_type()
    except Exception:  # noqa: BLE001  (a build without custom devices)
        custom = []
    return not (paddle.is_compiled_with_cuda() or paddle.is_compiled_with_rocm() or paddle.is_compiled_with_xpu()
                or custom)


_ONLY_CPU = _only_cpu()


def is_cpu(t) -> bool:
    """Whether dygraph tensor t is on the CPU; without a device in this Paddle, without reading its place."""
    return _ONLY_CPU or t.place.is_cpu_place()


def _as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _respecting_no_grad(op):
    """Under ``paddle.no_grad()`` in dygraph, Paddle 3.3.1 still records a grad node for a custom op whose
    inputs want grads, unlike for its own ops: the outputs want grads, a later backward through them
    writes grads into the inputs, and an inplace op on a parameter is refused ("Leaf Var ... can't use
    inplace strategy"). So there the call runs with its inputs' stop_gradient set, restored afterwards."""

    @functools.wraps(op)
    def call(*args):
        if paddle.is_grad_enabled() or not paddle.in_dynamic_mode():
            return op(*args)
        wanting = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,))
                   if isinstance(t, paddle.Tensor) and not t.stop_gradient]
        for t in wanting:
            t.stop_gradient = True
        try:
            return op(*args)
        finally:
            for t in wanting:
                t.stop_gradient = False

    return call


def load():
    """Registers every op with Paddle (called by ``import paddle_ext``), through the binding built for the
    running Paddle release (its C++ ABI)."""
    module = ops()
    _start_threads_if_capped()
    return module


def _start_threads_if_capped():
    """Under an address-space cap (RLIMIT_AS, `ulimit -v`) the kernels' OpenMP threads start now: the OpenMP
    runtime aborts the process when it cannot start one, and their first parallel region could come when the
    cap is nearly reached (docs/architecture.md, Memory)."""
    import ctypes  # noqa: PLC0415

    try:
        import resource  # noqa: PLC0415
    except ImportError:  # not a Unix
        return
    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        ctypes.CDLL(str(kernel_library_path())).paddle_ext_start_threads_if_capped()


def library_path() -> str:
    """Path of the op library that registers the ops (the running Paddle's binding)."""
    return str(binding_path())


def num_threads() -> int:
    """The thread count of paddle_ext's CPU kernels, fixed at their first use: PADDLE_EXT_NUM_THREADS,
    else OMP_NUM_THREADS as the process started (Paddle writes 1 into it at import when it is unset),
    else one per CPU the process may run on. Paddle's own math-library count (1 by default) is separate."""
    import ctypes  # noqa: PLC0415

    return int(ctypes.CDLL(str(kernel_library_path())).paddle_ext_num_threads())


@functools.lru_cache(maxsize=None)
def gemm_backend() -> str:
    """What computes the adaptive softmax's float32 CPU projections: "onednn" when the kernel library found
    ``dnnl_sgemm`` in the oneDNN that Paddle loaded (libdnnl.so.3 of its CPU wheels), else "reference" (a
    plain loop, which the Python API never picks: it keeps Paddle's matmul then). Setting
    PADDLE_EXT_DISABLE_ONEDNN_GEMM=1 before the first call turns oneDNN off."""
    import ctypes  # noqa: PLC0415

    fn = ctypes.CDLL(str(kernel_library_path())).paddle_ext_gemm_backend
    fn.restype = ctypes.c_char_p
    return fn().decode()


def output_cache_bytes() -> int:
    """Bytes of freed big CPU outputs the op library keeps mapped for its next outputs (BlockCache in
    memory.h; at most PADDLE_EXT_OUTPUT_CACHE_MB, default 2048, 0 turns it off)."""
    import ctypes  # noqa: PLC0415

    fn = ctypes.CDLL(str(kernel_library_path())).paddle_ext_output_cache_bytes
    fn.restype = ctypes.c_size_t
    return int(fn())


def build_info() -> dict:
    """What setup.py recorded: whether CUDA kernels were compiled in, the Paddle releases bound, and whether the
    libraries were linked for manylinux (the wheel)."""
    path = pathlib.Path(__file__).with_name("build_info.json")
    return json.loads(path.read_text()) if path.exists() else {"with_cuda": False, "releases": []}


def built_with_cuda() -> bool:
    return bool(build_info().get("with_cuda"))


@functools.lru_cache(maxsize=None)
def manifest() -> list[dict]:
    """The ops declared in ops/*.yaml, as the build saw them."""
    installed = pathlib.Path(__file__).with_name("ops_manifest.json")
    if installed.exists():
        return json.loads(installed.read_text())
    source_ops = pathlib.Path(__file__).resolve().parents[2] / "ops"  # running from a source checkout
    if source_ops.is_dir():
        from .codegen import opgen  # noqa: PLC0415

        return [op.to_json() for op in opgen.load_ops(source_ops)]
    raise ImportError(f"paddle_ext: ops_manifest.json is missing; reinstall paddle_ext, {BUILD_HINT}")


def in_legacy_program() -> bool:
    """Whether ops are being added to a legacy-IR static program (paddle.pir_utils.OldIrGuard,
    FLAGS_enable_pir_api=0), where Paddle 3.3.1 lacks some of its APIs and custom-op features."""
    return not (paddle.in_dynamic_mode() or paddle.framework.in_pir_mode())


def unified(fn):
    """Marks a public function that works in dygraph and static programs alike, so that to_static's AST
    conversion (full_graph=True) calls it as it is instead of rewriting it: there is nothing in it to
    convert, and Paddle 3.0's rewrite drops keyword-only defaults ("missing 2 required keyword-only
    arguments"). SOT, to_static's default, traces it as before (the marker is AST-only)."""
    return paddle.jit.not_to_static(fn)


def sum_along(x, axis: int):
    """paddle.sum(x, axis), also in legacy-IR programs, where Paddle 3.3.1's sum takes no Variable
    (an einsum that drops the axis stands in there)."""
    if not in_legacy_program():
        return paddle.sum(x, axis=axis)
    axis = axis % len(x.shape)
    letters = "abcdefghijklmnopqrstuvwxyz"[: len(x.shape)]
    return paddle.einsum(f"{letters}->{letters.replace(letters[axis], '')}", x)


def named(out, name):
    """``out`` renamed ``<name>.tmp_<k>`` when it is a variable of a legacy-IR program, as Paddle's own ops
    name their outputs after their ``name`` argument there (PIR values and dygraph tensors have no such
    name)."""
    if name is None or not in_legacy_program():
        return out
    from paddle.base import unique_name  # noqa: PLC0415

    new_name = unique_name.generate_with_ignorable_key(f"{name}.tmp")
    out.block._rename_var(out.name, new_name)
    return out.block.var(new_name)


def legacy_grad_inputs(*tensors):
    """The differentiable inputs of a custom op, as its legacy-IR grad op needs them: when some but not all
    of them want a grad, the others are replaced by copies that want one (grads nobody reads), since Paddle
    3.3.1's legacy-IR backward fails to build the grad op of a custom op with an unneeded input grad
    ("vector::_M_range_check"). Dygraph and PIR take them as they are."""
    if not in_legacy_program() or all(t.stop_gradient for t in tensors) or not any(t.stop_gradient for t in tensors):
        return tensors
    copies = []
    for t in tensors:
        if t.stop_gradient:
            t = paddle.assign(t)
            t.stop_gradient = False
        copies.append(t)
    return tuple(copies)
