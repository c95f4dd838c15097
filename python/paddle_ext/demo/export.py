"""Export a trained layer and check that the static copies compute what the dygraph layer does."""

from __future__ import annotations

import pathlib

import numpy as np
import paddle


def export_and_compare(layer: paddle.nn.Layer, inputs: dict[str, np.ndarray], out_dir, log=print) -> float:
    """to_static → jit.save → jit.load and a paddle.inference predictor; returns the max |diff|
    of both against the dygraph layer (inf when an output is missing)."""
    import paddle.inference as paddle_infer  # noqa: PLC0415

    import paddle_ext  # noqa: F401,PLC0415  (the op library must be loaded in this process)

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = str(out_dir / "model")
    layer.eval()
    tensors = [paddle.to_tensor(v) for v in inputs.values()]
    with paddle.no_grad():
        expected = layer(*tensors)
    expected = [e.numpy() for e in (expected if isinstance(expected, (tuple, list)) else [expected])]
    specs = [paddle.static.InputSpec(list(v.shape), str(v.dtype), name=k) for k, v in inputs.items()]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=specs, full_graph=True), prefix)
    loaded = paddle.jit.load(prefix)
    got = loaded(*tensors)
    got = [g.numpy() for g in (got if isinstance(got, (tuple, list)) else [got])]
    model_file = prefix + ".json" if pathlib.Path(prefix + ".json").exists() else prefix + ".pdmodel"
    config = paddle_infer.Config(model_file, prefix + ".pdiparams")
    config.disable_gpu()
    config.disable_glog_info()
    predictor = paddle_infer.create_predictor(config)
    for name, value in zip(predictor.get_input_names(), inputs.values()):
        predictor.get_input_handle(name).copy_from_cpu(np.ascontiguousarray(value))
    predictor.run()
    served = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
    if len(got) != len(expected) or len(served) != len(expected):
        return float("inf")
    diff = max(float(np.max(np.abs(a - b), initial=0.0)) for pair in (zip(got, expected), zip(served, expected))
               for a, b in pair)
    log(f"   exported to {prefix}.*: jit.load and paddle.inference match dygraph, max |diff| = {diff:.2e}")
    return diff
