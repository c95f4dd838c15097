"""ops/*.yaml -> PD_BUILD_OP / PD_BUILD_GRAD_OP registration code.

The YAML follows Paddle's ops.yaml / backward.yaml::

    - op : pe_logcumsumexp
      args : (Tensor x, int axis = -1, bool flatten = false, bool exclusive = false, bool reverse = false)
      output : Tensor(out)
      kernel : LogcumsumexpKernel
      backward : pe_logcumsumexp_grad
    - backward_op : pe_logcumsumexp_grad
      forward : pe_logcumsumexp (Tensor x, ...) -> Tensor(out)
      args : (Tensor x, Tensor out, Tensor out_grad, int axis, bool flatten, bool exclusive, bool reverse)
      output : Tensor(x_grad)
      kernel : LogcumsumexpGradKernel

Optional keys: ``inplace : (arr -> out)``, ``infer_shape : Fn`` and ``infer_dtype : Fn`` (functions in
the binding; by default every output takes the shape and dtype of the first input, and an output
``<name>_grad`` those of input ``<name>``, in grad ops and in plain ops that expose a grad kernel).
Inputs may be optional (``Tensor? boundary``). A backward op whose kernel has no derivative of its own
takes ``refuse_higher_order : <the public functions on it>``: a double-grad op (``PD_BUILD_DOUBLE_GRAD_OP``)
is registered whose kernel raises NotImplementedError naming them, so a second backward through the grads
of ``create_graph=True`` fails clearly instead of giving wrong (or no) grads, at no cost to first order.

For each ``ops/<family>.yaml`` the generator writes the translation unit ``<family>.ops.cc``: it
includes ``paddle_ext/binding/<family>.cc`` (the kernels) and then registers them. Every kernel is
checked with a ``static_assert`` against the signature the YAML implies, so a mismatch is a compile
error that names the YAML file, and registered as ``paddle_ext::Guarded<&Kernel, name>::run``
(binding/common.h), which turns what the kernel throws into Paddle's typed errors naming the op (an
allocation failure: a MemoryError). (setup.py compiles these units, not binding/*.cc directly; Paddle's
build also reads the op names for its Python stub from them.)

This module imports nothing outside the standard library and PyYAML: setup.py runs it before Paddle
compiles anything.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

import yaml

# YAML attr type -> (custom-op attr type string, C++ kernel parameter type)
ATTR_TYPES = {
    "bool": ("bool", "bool"),
    "int": ("int", "int"),
    "int64_t": ("int64_t", "int64_t"),
    "float": ("float", "float"),
    "str": ("std::string", "const std::string&"),
    "int[]": ("std::vector<int>", "const std::vector<int>&"),
    "int64_t[]": ("std::vector<int64_t>", "const std::vector<int64_t>&"),
    "float[]": ("std::vector<float>", "const std::vector<float>&"),
    "str[]": ("std::vector<std::string>", "const std::vector<std::string>&"),
}
TENSOR_TYPES = ("Tensor", "Tensor?")

# The naming rule: every op we register (forward, grad, helper) is named pe_<name>. Paddle owns a flat
# op namespace, and a custom op registered under one of its names replaces Paddle's op for every
# program in the process (legacy-IR programs and old inference models then break); the prefix keeps
# us out of it. A grad op is registered by Paddle as <forward>_grad, so that is its name here too.
OP_PREFIX = "pe_"


class OpSpecError(ValueError):
    pass


@dataclasses.dataclass
class Arg:
    type: str
    name: str
    default: str | None = None

    @property
    def is_tensor(self) -> bool:
        return self.type in TENSOR_TYPES

    @property
    def optional(self) -> bool:
        return self.type == "Tensor?"


@dataclasses.dataclass
class Op:
    name: str
    family: str
    inputs: list[Arg]
    attrs: list[Arg]
    outputs: list[str]
    kernel: str
    backward: str | None = None
    forward: str | None = None  # for backward ops: the forward op's name
    inplace: dict[str, str] = dataclasses.field(default_factory=dict)
    infer_shape: str | None = None
    infer_dtype: str | None = None
    refuse_higher_order: str | None = None  # backward ops: the public functions named by the refusal

    @property
    def is_backward(self) -> bool:
        return self.forward is not None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "inputs": [{"name": a.name, "optional": a.optional} for a in self.inputs],
            "attrs": [{"name": a.name, "type": a.type, "default": a.default} for a in self.attrs],
            "outputs": self.outputs,
            "backward": self.backward,
            "forward": self.forward,
            "inplace": self.inplace,
            "double_grad": f"{self.name}_grad" if self.refuse_higher_order else None,
        }


_ARG_RE = re.compile(r"^\s*(?P<type>[A-Za-z_][\w]*(?:\[\])?\??)\s+(?P<name>\w+)\s*(?:=\s*(?P<default>.+?))?\s*$")


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def parse_args(text: str, where: str) -> list[Arg]:
    text = text.strip()
    if not (text.startswith("(") and text.endswith(")")):
        raise OpSpecError(f"{where}: args must be written as (Type name, ...), got {text!r}")
    args = []
    for part in _split_top_level(text[1:-1]):
        m = _ARG_RE.match(part)
        if not m:
            raise OpSpecError(f"{where}: cannot parse argument {part.strip()!r}")
        arg = Arg(m["type"], m["name"], m["default"])
        if not arg.is_tensor and arg.type not in ATTR_TYPES:
            raise OpSpecError(
                f"{where}: argument {arg.name!r} has type {arg.type!r}; supported: "
                f"{', '.join(TENSOR_TYPES + tuple(ATTR_TYPES))}"
            )
        args.append(arg)
    seen_attr = False
    for a in args:
        if a.is_tensor and seen_attr:
            raise OpSpecError(f"{where}: tensor {a.name!r} comes after an attribute; tensors go first")
        seen_attr |= not a.is_tensor
    # int64_t[] attrs must come last and stay out of infer-shape functions, or PIR static aborts
    # (docs/architecture.md, "Paddle's custom-op API").
    kinds = [a.type == "int64_t[]" for a in args if not a.is_tensor]
    if any(kinds) and kinds != sorted(kinds):
        raise OpSpecError(f"{where}: int64_t[] attributes must be the last attributes")
    return args


def parse_outputs(text: str, where: str) -> list[str]:
    outs = []
    for part in _split_top_level(text):
        m = re.match(r"^\s*Tensor\((\w+)\)\s*$", part)
        if not m:
            raise OpSpecError(f"{where}: output must be Tensor(name), got {part.strip()!r}")
        outs.append(m[1])
    return outs


def parse_inplace(text: str, where: str) -> dict[str, str]:
    pairs = {}
    for part in _split_top_level(text.strip().strip("()")):
        m = re.match(r"^\s*(\w+)\s*->\s*(\w+)\s*$", part)
        if not m:
            raise OpSpecError(f"{where}: inplace must be (input -> output), got {part.strip()!r}")
        pairs[m[1]] = m[2]
    return pairs


def load_ops(ops_dir: pathlib.Path) -> list[Op]:
    ops: list[Op] = []
    for path in sorted(pathlib.Path(ops_dir).glob("*.yaml")):
        family = path.stem
        entries = yaml.safe_load(path.read_text()) or []
        for i, entry in enumerate(entries):
            where = f"{path.name}[{i}]"
            name = entry.get("op") or entry.get("backward_op")
            if not name:
                raise OpSpecError(f"{where}: needs 'op' or 'backward_op'")
            where = f"{path.name}: {name}"
            if not name.startswith(OP_PREFIX):
                raise OpSpecError(f"{where}: op names must start with {OP_PREFIX!r} (the naming rule: never take "
                                  f"over a name Paddle owns), e.g. {OP_PREFIX}{name}")
            for key in ("args", "output", "kernel"):
                if key not in entry:
                    raise OpSpecError(f"{where}: missing '{key}'")
            args = parse_args(entry["args"], where)
            forward = None
            if "backward_op" in entry:
                fwd = str(entry.get("forward", "")).strip()
                forward = fwd.split("(")[0].strip()
                if not forward:
                    raise OpSpecError(f"{where}: backward_op needs 'forward : name (...) -> ...'")
            op = Op(
                name=name,
                family=family,
                inputs=[a for a in args if a.is_tensor],
                attrs=[a for a in args if not a.is_tensor],
                outputs=parse_outputs(entry["output"], where),
                kernel=entry["kernel"],
                backward=entry.get("backward"),
                forward=forward,
                inplace=parse_inplace(entry["inplace"], where) if "inplace" in entry else {},
                infer_shape=entry.get("infer_shape"),
                infer_dtype=entry.get("infer_dtype"),
                refuse_higher_order=entry.get("refuse_higher_order"),
            )
            if op.refuse_higher_order is not None and not (op.is_backward and str(op.refuse_higher_order).strip()):
                raise OpSpecError(f"{where}: refuse_higher_order belongs to a backward_op and names the public "
                                  "functions built on it")
            ops.append(op)
    _check_links(ops)
    return ops


def _check_links(ops: list[Op]) -> None:
    by_name = {op.name: op for op in ops}
    if len(by_name) != len(ops):
        raise OpSpecError("duplicate op names in ops/*.yaml")
    for op in ops:
        names = [a.name for a in op.inputs]
        for src, dst in op.inplace.items():
            if src not in names or dst not in op.outputs:
                raise OpSpecError(f"{op.name}: inplace ({src} -> {dst}) must map an input to an output")
        if op.backward:
            bw = by_name.get(op.backward)
            if bw is None or bw.forward != op.name:
                raise OpSpecError(f"{op.name}: backward op {op.backward!r} is missing or names another forward")
        if op.is_backward:
            fw = by_name.get(op.forward)
            if fw is None:
                raise OpSpecError(f"{op.name}: forward op {op.forward!r} not found")
            if op.name != f"{op.forward}_grad":  # the name Paddle registers PD_BUILD_GRAD_OP(forward) under
                raise OpSpecError(f"{op.name}: a backward op must be named {op.forward}_grad")
            fw_attrs = {a.name: a.type for a in fw.attrs}
            for a in op.attrs:  # grad attrs: a subset, by name, of the forward's (Paddle's rule)
                if fw_attrs.get(a.name) != a.type:
                    raise OpSpecError(f"{op.name}: attr {a.name!r} is not a forward attr of the same type")
            fw_values = {a.name for a in fw.inputs} | set(fw.outputs)
            for a in op.inputs:
                base = a.name[: -len("_grad")] if a.name.endswith("_grad") else a.name
                if a.name.endswith("_grad") and base in fw.outputs:
                    continue
                if a.name not in fw_values:
                    raise OpSpecError(f"{op.name}: input {a.name!r} is not a forward input, output or output grad")
            for out in op.outputs:
                if not (out.endswith("_grad") and out[: -len("_grad")] in {a.name for a in fw.inputs}):
                    raise OpSpecError(f"{op.name}: output {out!r} must be <forward input>_grad")


# ---------------------------------------------------------------------------------------------
# C++ emission


def _grad_aware_name(op: Op, name: str) -> str:
    """Custom-op names: in a grad op, `out_grad` is paddle::Grad("out")."""
    if op.is_backward and name.endswith("_grad"):
        return f'paddle::Grad("{name[:-5]}")'
    return f'"{name}"'


def _input_decl(op: Op, a: Arg) -> str:
    name = _grad_aware_name(op, a.name)
    return f"paddle::Optional({name})" if a.optional else name


def kernel_signature(op: Op) -> str:
    params = []
    for a in op.inputs:
        if a.optional:
            params.append("const paddle::optional<paddle::Tensor>&")
        elif a.name in op.inplace:
            params.append("paddle::Tensor&")
        else:
            params.append("const paddle::Tensor&")
    params += [ATTR_TYPES[a.type][1] for a in op.attrs]
    return f"{kernel_return_type(op)} (*)({', '.join(params)})"


def kernel_return_type(op: Op) -> str:
    """Paddle's custom-op API: a kernel whose outputs are all inplace writes its inputs and returns void."""
    if op.inplace and set(op.outputs) <= set(op.inplace.values()):
        return "void"
    return "std::vector<paddle::Tensor>"


def _default_infer(op: Op) -> tuple[str, str]:
    """Default infer functions: output k takes the meta of its source input."""
    names = [a.name for a in op.inputs]
    sources = []
    for out in op.outputs:
        if op.is_backward:
            src = out[: -len("_grad")]
            if src not in names:
                raise OpSpecError(
                    f"{op.name}: output {out!r} needs input {src!r} for its default shape; add infer_shape/infer_dtype"
                )
        elif out.endswith("_grad") and out[: -len("_grad")] in names:  # a plain op exposing a grad kernel
            src = out[: -len("_grad")]
        else:
            src = next((a.name for a in op.inputs if not a.optional), None)
            if src is None:
                raise OpSpecError(f"{op.name}: no required input to infer {out!r} from; add infer_shape/infer_dtype")
        sources.append(names.index(src))
    shape_params, dtype_params = [], []
    for i, a in enumerate(op.inputs):
        if a.optional:
            shape_params.append(f"const paddle::optional<std::vector<int64_t>>& in{i}")
            dtype_params.append(f"const paddle::optional<paddle::DataType>& in{i}")
        else:
            shape_params.append(f"const std::vector<int64_t>& in{i}")
            dtype_params.append(f"const paddle::DataType& in{i}")
    ident = re.sub(r"\W", "_", op.name)
    shape = (
        f"static std::vector<std::vector<int64_t>> {ident}_DefaultInferShape({', '.join(shape_params)}) {{\n"
        f"  return {{{', '.join(f'in{s}' for s in sources)}}};\n}}\n"
    )
    dtype = (
        f"static std::vector<paddle::DataType> {ident}_DefaultInferDtype({', '.join(dtype_params)}) {{\n"
        f"  return {{{', '.join(f'in{s}' for s in sources)}}};\n}}\n"
    )
    return shape, dtype


def emit_family(ops: list[Op], family: str) -> str:
    lines = [
        f"// Generated from ops/{family}.yaml by python/paddle_ext/codegen/opgen.py. Do not edit.",
        f"// The kernels come from the binding; the registration below checks them against the YAML.",
        f'#include "paddle_ext/binding/{family}.cc"',
        "",
        "#include <type_traits>",
        "",
    ]
    for op in (o for o in ops if o.family == family):
        kernel = f"paddle_ext::{op.kernel}"
        sig = kernel_signature(op)
        readable = ", ".join(
            [f"{'optional ' if a.optional else ''}Tensor {a.name}" for a in op.inputs]
            + [f"{a.type} {a.name}" for a in op.attrs]
        )
        lines.append(
            f"static_assert(std::is_same<decltype(&{kernel}), {sig}>::value,\n"
            f'              "ops/{family}.yaml: op {op.name} needs kernel {op.kernel}({readable}) "\n'
            f'              "returning {kernel_return_type(op)}");'
        )
        infer_shape = f"paddle_ext::{op.infer_shape}" if op.infer_shape else None
        infer_dtype = f"paddle_ext::{op.infer_dtype}" if op.infer_dtype else None
        if infer_shape is None or infer_dtype is None:
            shape_src, dtype_src = _default_infer(op)
            ident = re.sub(r"\W", "_", op.name)
            if infer_shape is None:
                lines.append(shape_src)
                infer_shape = f"{ident}_DefaultInferShape"
            if infer_dtype is None:
                lines.append(dtype_src)
                infer_dtype = f"{ident}_DefaultInferDtype"
        # The kernel runs as Guarded<&Kernel, name>::run (binding/common.h): its failures become Paddle's typed
        # errors naming the op (name: the registered one without the pe_ prefix).
        ident = re.sub(r"\W", "_", op.name)
        lines.append(f'static constexpr char {ident}_op_name[] = "{op.name[len(OP_PREFIX):]}";')
        lines.append(f"using {ident}_guarded = paddle_ext::Guarded<&{kernel}, {ident}_op_name>;")
        macro = f"PD_BUILD_GRAD_OP({op.forward})" if op.is_backward else f"PD_BUILD_OP({op.name})"
        lines.append(macro)
        lines.append(f"    .Inputs({{{', '.join(_input_decl(op, a) for a in op.inputs)}}})")
        lines.append(f"    .Outputs({{{', '.join(_grad_aware_name(op, o) for o in op.outputs)}}})")
        if op.attrs:
            attrs = ", ".join(f'"{a.name}: {ATTR_TYPES[a.type][0]}"' for a in op.attrs)
            lines.append(f"    .Attrs({{{attrs}}})")
        if op.inplace:
            pairs = ", ".join(f'{{"{k}", "{v}"}}' for k, v in op.inplace.items())
            lines.append(f"    .SetInplaceMap({{{pairs}}})")
        lines.append(f"    .SetKernelFn(PD_KERNEL({ident}_guarded::run))")
        lines.append(f"    .SetInferShapeFn(PD_INFER_SHAPE({infer_shape}))")
        lines.append(f"    .SetInferDtypeFn(PD_INFER_DTYPE({infer_dtype}));")
        lines.append("")
        if op.refuse_higher_order:
            lines += _emit_refused_double_grad(op)
    lines += _emit_kernel_signatures([o for o in ops if o.family == family], family)
    return "\n".join(lines)


def _emit_refused_double_grad(op: Op) -> list[str]:
    """The double-grad op of a first-order-only grad op: its inputs are the grad op's and the grads of the
    grad op's outputs (optional: a second backward may reach some of them only), its outputs the grads of the
    grad op's differentiable inputs; its kernel raises Paddle's Unimplemented (a Python NotImplementedError)."""
    ident = re.sub(r"\W", "_", op.name)
    grads_of_outputs = [o[: -len("_grad")] for o in op.outputs]
    inputs = [_input_decl(op, a) for a in op.inputs]
    inputs += [f'paddle::Optional(paddle::Grad(paddle::Grad("{x}")))' for x in grads_of_outputs]
    outputs = [f'paddle::Grad("{x}")' for x in grads_of_outputs]
    outputs += [f'paddle::Grad(paddle::Grad("{a.name[: -len("_grad")]}"))' for a in op.inputs
                if a.name.endswith("_grad")]
    params = ["const paddle::optional<paddle::Tensor>&" if a.optional else "const paddle::Tensor&" for a in op.inputs]
    params += ["const paddle::optional<paddle::Tensor>&"] * len(grads_of_outputs)
    params += [ATTR_TYPES[a.type][1] for a in op.attrs]
    functions = " ".join(str(op.refuse_higher_order).split())
    message = (f"{functions}: higher-order grads are not supported (the grad of op {op.forward} has none of its "
               f"own: a backward through grads taken with create_graph=True reaches it); first-order grads are")
    lines = [
        f"static std::vector<paddle::Tensor> {ident}_refused({', '.join(params)}) {{",
        f'  PE_THROW_CODE(::common::ErrorCode::UNIMPLEMENTED, "{message}");',
        "}",
        f"PD_BUILD_DOUBLE_GRAD_OP({op.forward})",
        f"    .Inputs({{{', '.join(inputs)}}})",
        f"    .Outputs({{{', '.join(outputs)}}})",
    ]
    if op.attrs:
        attrs = ", ".join(f'"{a.name}: {ATTR_TYPES[a.type][0]}"' for a in op.attrs)
        lines.append(f"    .Attrs({{{attrs}}})")
    lines += [f"    .SetKernelFn(PD_KERNEL({ident}_refused));", ""]
    return lines


def op_proto_names(op: Op) -> tuple[list[str], list[str], list[str]]:
    """The input, attr and output names Paddle gives the registered op (its OpProto): a grad op's
    `<name>_grad` is `<name>@GRAD`, an optional input `<name>@OPTIONAL`."""

    def proto(name: str, optional: bool = False) -> str:
        if op.is_backward and name.endswith("_grad"):
            name = f"{name[:-5]}@GRAD"
        return f"{name}@OPTIONAL" if optional else name

    return ([proto(a.name, a.optional) for a in op.inputs], [a.name for a in op.attrs],
            [proto(o) for o in op.outputs])


def _emit_kernel_signatures(ops: list[Op], family: str) -> list[str]:
    """Registers each op's kernel signature (its OpProto's inputs, attrs, outputs) where Paddle's
    kernel-signature lookup finds it (`Tracer._get_kernel_signature`, through which Paddle's OpTest
    maps an op's inputs and attrs onto its Python API). Custom ops have no such entry otherwise; the
    table is consulted only by that lookup, so how the op runs is unchanged."""
    lines = [
        # A CUDA build's op_utils.h also includes cuBLAS's headers (through enforce.h): needed too.
        '#if __has_include("paddle/phi/core/compat/op_utils.h") && \\',
        "    (!defined(PADDLE_WITH_CUDA) || __has_include(<cublas_v2.h>))",
        '#include "paddle/phi/core/compat/op_utils.h"',
        "",
        f"static const int pe_{family}_kernel_signatures = [] {{",
        "  auto& signatures = phi::DefaultKernelSignatureMap::Instance();",
    ]
    for op in ops:
        name = op.forward + "_grad" if op.is_backward else op.name
        inputs, attrs, outputs = (", ".join(f'"{n}"' for n in names) for names in op_proto_names(op))
        lines.append(f'  if (!signatures.Has("{name}"))')
        lines.append(f'    signatures.Insert("{name}", phi::KernelSignature("{name}", {{{inputs}}}, {{{attrs}}}, {{{outputs}}}));')
    lines += ["  return 0;", "}();", "#endif", ""]
    return lines


def generate(ops_dir: pathlib.Path, out_dir: pathlib.Path) -> list[Op]:
    """Write <family>.ops.cc for every ops/<family>.yaml and ops_manifest.json; return the ops."""
    ops = load_ops(ops_dir)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for family in sorted({op.family for op in ops}):
        text = emit_family(ops, family)
        target = out_dir / f"{family}.ops.cc"
        if not target.exists() or target.read_text() != text:  # keep mtimes stable for rebuilds
            target.write_text(text)
    write_manifest(ops, out_dir / "ops_manifest.json")
    return ops


def write_manifest(ops: list[Op], path: pathlib.Path) -> None:
    pathlib.Path(path).write_text(json.dumps([op.to_json() for op in ops], indent=1) + "\n")


if __name__ == "__main__":
    import sys

    root = pathlib.Path(__file__).resolve().parents[3]
    generated = generate(root / "ops", pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else root / "build" / "generated"))
    print("\n".join(op.name for op in generated))
