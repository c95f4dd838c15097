"""Every op declared in ops/*.yaml is registered once paddle_ext is imported, and the codegen rejects
YAML that cannot be built."""

import pathlib

import pytest

import paddle_ext
from paddle_ext import _library
from paddle_ext.codegen import opgen

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_manifest_matches_source_yaml():
    source = [op.to_json() for op in opgen.load_ops(ROOT / "ops")]
    assert _library.manifest() == source, "the installed library is stale: run `make build`"


def test_every_forward_op_is_registered():
    lib = _library.ops()
    for op in _library.manifest():
        if not op["forward"]:
            assert callable(getattr(lib, op["name"], None)), f"{op['name']} is not registered"


def test_every_backward_is_declared_for_its_forward():
    names = {op["name"]: op for op in _library.manifest()}
    for op in names.values():
        if op["backward"]:
            assert names[op["backward"]]["forward"] == op["name"]


def test_library_path_and_build_info():
    assert pathlib.Path(paddle_ext.library_path()).exists()
    assert "with_cuda" in _library.build_info()


def _write(tmp_path, text):
    (tmp_path / "fam.yaml").write_text(text)
    return tmp_path


GOOD = """
- op : pe_foo
  args : (Tensor x, int axis = -1)
  output : Tensor(out)
  kernel : FooKernel
  backward : pe_foo_grad
- backward_op : pe_foo_grad
  forward : pe_foo (Tensor x, int axis) -> Tensor(out)
  args : (Tensor x, Tensor out_grad, int axis)
  output : Tensor(x_grad)
  kernel : FooGradKernel
"""


def test_codegen_emits_registration_and_signature_check(tmp_path):
    opgen.generate(_write(tmp_path, GOOD), tmp_path / "gen")
    text = (tmp_path / "gen" / "fam.ops.cc").read_text()
    assert '#include "paddle_ext/binding/fam.cc"' in text
    assert "PD_BUILD_OP(pe_foo)" in text and "PD_BUILD_GRAD_OP(pe_foo)" in text
    assert 'paddle::Grad("out")' in text and 'paddle::Grad("x")' in text
    assert "static_assert(std::is_same<decltype(&paddle_ext::FooKernel), std::vector<paddle::Tensor> (*)(const paddle::Tensor&, int)>" in text
    # every kernel is registered through the one error translation point, named without the prefix
    assert 'pe_foo_op_name[] = "foo";' in text and 'pe_foo_grad_op_name[] = "foo_grad";' in text
    assert "paddle_ext::Guarded<&paddle_ext::FooKernel, pe_foo_op_name>" in text
    assert ".SetKernelFn(PD_KERNEL(pe_foo_guarded::run))" in text and "PD_KERNEL(paddle_ext::" not in text


def test_codegen_emits_a_refusing_double_grad_op(tmp_path):
    refused = GOOD.replace("  kernel : FooGradKernel", "  kernel : FooGradKernel\n  refuse_higher_order : foo, foo_loss")
    ops = opgen.generate(_write(tmp_path, refused), tmp_path / "gen")
    text = (tmp_path / "gen" / "fam.ops.cc").read_text()
    assert "PD_BUILD_DOUBLE_GRAD_OP(pe_foo)" in text and "PD_BUILD_DOUBLE_GRAD_OP" not in GOOD
    # inputs: the grad op's, then the (optional) grad of its output; outputs: grads of the grad op's inputs
    assert ('.Inputs({"x", paddle::Grad("out"), paddle::Optional(paddle::Grad(paddle::Grad("x")))})\n'
            '    .Outputs({paddle::Grad("x"), paddle::Grad(paddle::Grad("out"))})\n'
            '    .Attrs({"axis: int"})') in text
    assert ("pe_foo_grad_refused(const paddle::Tensor&, const paddle::Tensor&, "
            "const paddle::optional<paddle::Tensor>&, int)") in text
    assert "::common::ErrorCode::UNIMPLEMENTED, \"foo, foo_loss: higher-order grads are not supported" in text
    assert [op.to_json()["double_grad"] for op in ops] == [None, "pe_foo_grad_grad"]
    opgen.generate(_write(tmp_path, GOOD), tmp_path / "plain")
    assert "PD_BUILD_DOUBLE_GRAD_OP" not in (tmp_path / "plain" / "fam.ops.cc").read_text()


@pytest.mark.parametrize("bad,message", [
    (GOOD.replace("int axis = -1", "double axis"), "type 'double'"),
    (GOOD.replace("(Tensor x, Tensor out_grad, int axis)", "(Tensor x, Tensor out_grad, bool axis)"), "not a forward attr"),
    (GOOD.replace("Tensor(x_grad)", "Tensor(y_grad)"), "must be <forward input>_grad"),
    (GOOD.replace("backward : pe_foo_grad", "backward : pe_bar_grad"), "missing or names another forward"),
    (GOOD.replace("- op : pe_foo", "- op : foo"), "must start with 'pe_'"),
    (GOOD.replace("pe_foo_grad", "pe_foo_vjp"), "must be named pe_foo_grad"),
    (GOOD.replace("(Tensor x, int axis = -1)", "(int axis, Tensor x)"), "tensors go first"),
    (GOOD.replace("  kernel : FooKernel", "  kernel : FooKernel\n  refuse_higher_order : foo"), "belongs to a backward_op"),
])
def test_codegen_rejects_bad_yaml(tmp_path, bad, message):
    with pytest.raises(opgen.OpSpecError, match=message):
        opgen.load_ops(_write(tmp_path, bad))


def test_codegen_inplace_kernel_returns_void(tmp_path):
    # Paddle's custom-op API: a kernel whose outputs are all inplace takes `Tensor&` and returns void.
    inplace = GOOD.replace("  output : Tensor(out)\n  kernel : FooKernel", "  output : Tensor(out)\n  inplace : (x -> out)\n  kernel : FooKernel")
    opgen.generate(_write(tmp_path, inplace), tmp_path / "gen")
    text = (tmp_path / "gen" / "fam.ops.cc").read_text()
    assert '.SetInplaceMap({{"x", "out"}})' in text
    assert "std::is_same<decltype(&paddle_ext::FooKernel), void (*)(paddle::Tensor&, int)>" in text
    assert "std::is_same<decltype(&paddle_ext::FooGradKernel), std::vector<paddle::Tensor> (*)(const paddle::Tensor&, const paddle::Tensor&, int)>" in text


def _kernel_signature(op_type):
    """What Paddle's OpTest asks of an op to map its inputs and attrs onto the op's Python API."""
    from paddle.base.framework import _dygraph_tracer  # noqa: PLC0415

    inputs, attrs, outputs = _dygraph_tracer()._get_kernel_signature(op_type, {}, {}, {})
    return list(inputs), list(attrs), list(outputs)


@pytest.mark.parametrize("op", [op["name"] for op in _library.manifest()])
def test_kernel_signature_lookup_answers_for_every_op(op):
    from paddle.base.framework import OpProtoHolder  # noqa: PLC0415

    spec = next(o for o in _library.manifest() if o["name"] == op)
    grad = spec["forward"] is not None

    def proto_name(name, optional=False):  # Paddle's names: paddle::Grad("out") and paddle::Optional("x")
        name = f"{name[:-5]}@GRAD" if grad and name.endswith("_grad") else name
        return f"{name}@OPTIONAL" if optional else name

    inputs, attrs, outputs = _kernel_signature(op)
    assert inputs == [proto_name(i["name"], i["optional"]) for i in spec["inputs"]]
    assert attrs == [a["name"] for a in spec["attrs"]]
    assert outputs == [proto_name(o) for o in spec["outputs"]]
    if not grad:  # forward ops also have an OpProto to agree with
        proto = OpProtoHolder.instance().get_op_proto(op)
        assert inputs == [i.name for i in proto.inputs]
        assert outputs == [o.name for o in proto.outputs]
        assert set(attrs) <= {a.name for a in proto.attrs}


def test_kernel_signature_lookup_of_paddle_ops_is_unchanged_by_import():
    script = (
        "import paddle\n"
        "from paddle.base.framework import _dygraph_tracer\n"
        "def sig(op):\n"
        "    try:\n"
        "        return [list(part) for part in _dygraph_tracer()._get_kernel_signature(op, {}, {}, {})]\n"
        "    except Exception as err:\n"
        "        return type(err).__name__\n"
        "ops = ['logcumsumexp', 'put_along_axis', 'softmax', 'cumsum', 'matmul_v2']\n"
        "before = [sig(op) for op in ops]\n"
        "import paddle_ext\n"
        "print(before == [sig(op) for op in ops], before)\n"
    )
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    same, before = proc.stdout.strip().split(" ", 1)
    assert same == "True", proc.stdout
    assert "axis" in before  # the lookup answered for Paddle's own ops (not only errors on both sides)
