"""Helpers the ONNX tests share."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def rounded_to_f16(model: str | onnx.ModelProto, out=None):
    """The model with every float initializer rounded to the nearest f16 value (kept f32),
    so onnxruntime sees the weights the NPU computes with.  Saved to ``out`` (returning its
    path) or returned as a ModelProto."""
    model = onnx.load(model) if not isinstance(model, onnx.ModelProto) else model
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(array.astype(np.float16).astype(np.float32), init.name))
    if out is None:
        return model
    onnx.save(model, str(out))
    return str(out)


def compiled_against_onnxruntime(case: str, build, tmp_path, capsys, seed: int = 1):
    """Build a one-input model with ``build(ModelBuilder)``, compile it with ``vpuc compile``,
    run the blob with ``--reference`` on an f16 input ``x`` and run onnxruntime on the same
    input with f16-rounded weights: (vpuc's output as f32, onnxruntime's, the input as f32)."""
    import onnxruntime as ort

    from vpuc.cli import main
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(seed=seed, opset=17)
    out = build(m)
    m.output(out)
    path = m.save(tmp_path / f"{case}.onnx", case)
    shape = [d.dim_value for d in m.inputs[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    blob = tmp_path / f"{case}.blob"
    assert main(["compile", path, "-o", str(blob)]) == 0
    assert main(["run", str(blob), "--input", f"x=@{tmp_path / 'x.npy'}", "--reference",
                 "--output-dir", str(tmp_path / "out")]) == 0
    assert "matches the numpy reference" in capsys.readouterr().out
    got = np.load(tmp_path / "out" / f"{out}.npy").astype(np.float32)
    session = ort.InferenceSession(rounded_to_f16(path, tmp_path / "rounded.onnx"),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x.astype(np.float32)})[0]
    assert got.shape == want.shape
    return got, want, x.astype(np.float32)


def simulated_against_reference(program, feeds: dict, output: str) -> np.ndarray:
    """Run ``program`` on ``feeds`` with the task-level reference; check it is race-free
    and that ``output`` agrees with the reference within the f16 layer tolerance
    (rtol 4e-3, atol 1e-4); return the simulated output."""
    from vpuc import api
    from vpuc.fusion.blocked_program import sanitize
    sim = api.simulate(program, feeds, reference=True)
    assert not sim.races
    got = sim.outputs[sanitize(output)]
    np.testing.assert_allclose(got.astype(np.float32),
                               sim.reference[sanitize(output)].astype(np.float32),
                               rtol=4e-3, atol=1e-4)
    return got


def assert_within(got, want, bound, what) -> None:
    """Every element of ``got`` within ``bound`` (broadcast) of ``want``; equal values, NaN
    beside NaN included, always pass, and a NaN on one side only always fails.  The message
    names the worst element."""
    assert got.shape == want.shape, (what, got.shape, want.shape)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        excess = np.where(same, -1.0, np.abs(got - want) - np.broadcast_to(bound, want.shape))
    excess = np.where(np.isnan(excess), np.inf, excess)
    worst = np.unravel_index(np.argmax(excess), want.shape)
    assert (excess <= 0).all(), f"{what}: got {got[worst]}, want {want[worst]} at {worst}"


def assert_shape_inferred(path, shape) -> None:
    """The imported graph's output type is the one ONNX's (strict) shape inference gives
    the model at ``path`` (the input's ``shape`` where inference leaves it open)."""
    from vpuc.onnx_import import import_onnx
    imported = import_onnx(path, precision="f16")
    output = next(iter(imported.outputs.values()))
    dims = next(op.type.dims for op in imported.module.graphs[0].ops if op.result == output)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output[0]
    want = tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim)
    assert tuple(dims) == (want or tuple(shape)), (dims, want)

