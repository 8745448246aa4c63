"""ONNX GridSample (vpuc/onnx_import/convert_grid_sample.py): its import (golden text), the
shapes it infers against ONNX's, its lowering (golden text), every mode, padding mode and
``align_corners`` against onnxruntime through the graph reference in f32, and compiled and
simulated in f16; refusals naming the node.

Tolerance.  vpuc computes each coordinate, neighbour index and weight with the f32
operations onnxruntime's CPU kernel performs, in its order, so both pick the same
neighbours and weights; they differ only in how the weighted neighbours are summed
(onnxruntime's zero-padding fast path adds the four products of precomputed weights).  Each
side's sum of at most 16 products of weights and pixels is within ``gamma_18 · S`` of the
exact one (Higham), ``S = Σ|w_x w_y p|`` at most ``(Σ|w|)² max|x|``, ``Σ|w| <= 1.375`` for
Keys' cubic coefficients (their absolute sum peaks at t = 1/2) and 1 otherwise; so both
sides agree within ``2 · gamma_18(f32) · 1.9 max|x|``.  Compiled in f16 the result is then
rounded once to f16: ``2^-11 |want|`` more (the input and grid are f16 on both sides).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_testlib import assert_within
from tests.tolerances import gamma
from vpuc import api
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.reference.graph import run_graph
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16 = 2.0 ** -11
WEIGHT_SUM = 1.9                        # (Σ|w|)² <= 1.375² for cubic, 1 otherwise


def _model(tmp_path, x_shape, grid_shape, opset=16, name="gs", **attrs) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      [x_shape[0], x_shape[1], grid_shape[1], grid_shape[2]])
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", **attrs)
    model = helper.make_model(helper.make_graph([node], name, [x, grid], [y]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _feeds(x_shape, grid_shape, seed=0, reach=1.6):
    """An f16-exact input and a grid reaching past the borders (``reach`` > 1), so that
    every padding mode is exercised."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float16).astype(np.float32)
    grid = rng.uniform(-reach, reach, grid_shape).astype(np.float16).astype(np.float32)
    return x, grid


def _onnxruntime(path, x, grid):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "grid": grid})[0].astype(np.float64)


def _f32_bound(x):
    return 2 * gamma(18, np.float32) * WEIGHT_SUM * np.abs(x).max()


MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}
COMBINATIONS = [(opset, mode, padding, align) for opset in (16, 20) for mode in MODES[opset]
                for padding in ("zeros", "border", "reflection") for align in (0, 1)]


@pytest.mark.parametrize("opset, mode, padding, align", COMBINATIONS)
def test_graph_against_onnxruntime(opset, mode, padding, align, tmp_path):
    """Imported in f32, run by the graph reference: every mode, padding and alignment, two
    images of a batch sampled by their own grids, a grid reaching 60% past the borders
    (reflection folds it back more than once on the 2-pixel axis)."""
    x_shape, grid_shape = (2, 3, 5, 2), (2, 4, 3, 2)
    path = _model(tmp_path, x_shape, grid_shape, opset, mode=mode, padding_mode=padding,
                  align_corners=align)
    x, grid = _feeds(x_shape, grid_shape, seed=opset + align, reach=3.0 if padding == "reflection" else 1.6)
    imported = import_onnx(path, precision="f32")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: x, imported.inputs["grid"]: grid},
                    tmp_path)[0]
    want = _onnxruntime(path, x, grid)
    assert_within(got.astype(np.float64), want, _f32_bound(x), f"{mode} {padding} {align}")


@pytest.mark.parametrize("mode, padding, align", [
    ("bilinear", "zeros", 0), ("nearest", "reflection", 1), ("bicubic", "border", 0),
    ("bilinear", "reflection", 1)])
def test_compiled_against_onnxruntime(mode, padding, align, tmp_path):
    """Compiled and simulated in f16: the gathers copy f16 pixels, the weights and sums are
    f32, one rounding to f16 at the end."""
    x_shape, grid_shape = (1, 3, 6, 7), (1, 4, 5, 2)
    path = _model(tmp_path, x_shape, grid_shape, mode=mode, padding_mode=padding, align_corners=align)
    x, grid = _feeds(x_shape, grid_shape, seed=7)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get("x", "x"): x.astype(np.float16),
                                 program.source_names.get("grid", "grid"): grid.astype(np.float16)})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x, grid)
    assert_within(got, want, U16 * np.abs(want) + _f32_bound(x), f"{mode} {padding} {align}")


def test_an_inf_pixel_outside_the_image_is_not_read(tmp_path):
    """With zero padding a neighbour outside the image reads 0 whatever the clamped row
    it was gathered from holds (a Select, not a zero weight: 0 · inf would be NaN)."""
    path = _model(tmp_path, (1, 1, 2, 2), (1, 1, 1, 2), mode="bilinear", padding_mode="zeros")
    x = np.array([[[[np.inf, 1.0], [2.0, 3.0]]]], np.float32)
    grid = np.array([[[[-2.0, 0.0]]]], np.float32)        # x = -1.5: columns -2 and -1, outside
    imported = import_onnx(path, precision="f32")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: x, imported.inputs["grid"]: grid},
                    tmp_path)[0]
    assert got.item() == _onnxruntime(path, x, grid).item() == 0.0


GOLDEN_CASES = {"bilinear_zeros": dict(mode="bilinear"),
                "nearest_reflection_align": dict(mode="nearest", padding_mode="reflection", align_corners=1),
                "bicubic_border": dict(mode="bicubic", padding_mode="border")}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(_model(tmp_path, (1, 2, 3, 4), (1, 2, 2, 2), name=case,
                                           **GOLDEN_CASES[case]), precision="f32").module)
    golden = GOLDEN / f"grid_sample_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_shapes_agree_with_onnx_inference(case, tmp_path):
    path = _model(tmp_path, (2, 3, 4, 5), (2, 6, 7, 2), name=case, **GOLDEN_CASES[case])
    imported = import_onnx(path)
    [output] = imported.outputs.values()
    otype = next(op.type for op in imported.module.graphs[0].ops if op.result == output)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output[0]
    assert tuple(otype.dims) == tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim) == (2, 3, 6, 7)


@pytest.mark.parametrize("mode, padding", [("nearest", "border"), ("bilinear", "zeros")])
def test_lowering_golden(mode, padding, tmp_path):
    """One gather (the library kernel ``gather``) of the NHWC rows (nearest) or of the
    padded image's 2x2 patches (bilinear), the index arithmetic and the weighting as
    generated ACT SHAVE kernels, the Transposes, Pads, Slices and Concats as DMAs."""
    path = _model(tmp_path, (1, 2, 3, 4), (1, 2, 2, 2), name=mode, mode=mode, padding_mode=padding)
    text, name, _ = onnx_as_vir(path, None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_grid_sample_{mode}_{padding}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


@pytest.mark.parametrize("x_shape, grid_shape, attrs, opset, message", [
    ((1, 2, 3, 4, 5), (1, 2, 2, 2, 3), {}, 20, "rank-5 input is not supported"),
    ((1, 1, 4097, 4097), (1, 1, 1, 2), {}, 16, "exceed 2\\^24"),
    ((1, 2, 3, 4), (1, 2, 2, 2), {"mode": "linear"}, 16, "mode 'linear' is not one of opset 16's"),
])
def test_refusals_name_the_node(x_shape, grid_shape, attrs, opset, message, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x_shape[:2] + grid_shape[1:-1]))
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", **attrs)
    model = helper.make_model(helper.make_graph([node], "r", [x, grid], [y]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / "r.onnx"
    onnx.save(model, str(path))
    with pytest.raises(VpucError, match=message) as caught:
        import_onnx(str(path))
    assert "node 'sample' (GridSample" in str(caught.value)


def test_a_large_output_is_gathered_in_bands(tmp_path):
    """2304 output pixels of 2x2 patches of 16 channels (295 KB in f16) pass the 256 KiB one
    gather writes: two bands of indices, Concatenated; the result as onnxruntime's."""
    from vpuc.onnx_import.convert_grid_sample import GATHER_OUTPUT_BYTES
    x_shape, grid_shape = (1, 16, 20, 20), (1, 48, 48, 2)
    path = _model(tmp_path, x_shape, grid_shape, name="bands", mode="bilinear")
    gathers = [op for op in import_onnx(path).module.graphs[0].ops if op.kind == "IndexedGather"]
    assert 48 * 48 * 4 * 16 * 2 > GATHER_OUTPUT_BYTES and len(gathers) == 2
    x, grid = _feeds(x_shape, grid_shape, seed=9)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get("x", "x"): x.astype(np.float16),
                                 program.source_names.get("grid", "grid"): grid.astype(np.float16)})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x, grid)
    assert_within(got, want, U16 * np.abs(want) + _f32_bound(x), "bands")


def test_gathers_from_a_table_in_ddr_share_cmx(tmp_path):
    """Bicubic over a [1,16,64,64] image: its 4x4 patch table (2.3 MB) stays in DDR, and 8
    bands of 256 KiB of gathered rows read the same indices' producer.  Each band's calls
    wait on its index load alone, so with every band's loads early all 8 ran at once and
    overflowed tile 0 (schedule_deps' rule 2 was not tried when ACT SHAVE tasks read DDR);
    the default schedule now compiles it, and the result is onnxruntime's."""
    x_shape, grid_shape = (1, 16, 64, 64), (1, 64, 64, 2)
    path = _model(tmp_path, x_shape, grid_shape, name="ddr_bands", mode="bicubic")
    x, grid = _feeds(x_shape, grid_shape, seed=11)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get("x", "x"): x.astype(np.float16),
                                 program.source_names.get("grid", "grid"): grid.astype(np.float16)})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x, grid)
    assert_within(got, want, U16 * np.abs(want) + _f32_bound(x), "ddr bands")


def test_early_gathers_stay_within_the_physical_barriers(tmp_path):
    """Bicubic zeros, [1,8,32,32] image sampled at 64x64: with every gather band's loads
    early, the stores they wait on held more than the 64 physical barriers live (failed at
    assign-physical-barriers); schedule_deps' trial now checks the barriers too."""
    x_shape, grid_shape = (1, 8, 32, 32), (1, 64, 64, 2)
    path = _model(tmp_path, x_shape, grid_shape, name="barriers", mode="bicubic")
    x, grid = _feeds(x_shape, grid_shape, seed=12)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get("x", "x"): x.astype(np.float16),
                                 program.source_names.get("grid", "grid"): grid.astype(np.float16)})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x, grid)
    assert_within(got, want, U16 * np.abs(want) + _f32_bound(x), "barriers")


def test_sixteen_gathers_stay_within_the_physical_barriers(tmp_path):
    """Bicubic reflection, [1,1,32,32] at 32x32: 16 gathers of single pixels (reflection
    has no patch table), each reading indices stored by the segments before; rule 1's waits
    on those stores held more than the 64 physical barriers live, even with every gate
    kept.  schedule_deps now keeps the lowered gates alone when that is so."""
    x_shape, grid_shape = (1, 1, 32, 32), (1, 32, 32, 2)
    path = _model(tmp_path, x_shape, grid_shape, name="reflect", mode="bicubic",
                  padding_mode="reflection")
    x, grid = _feeds(x_shape, grid_shape, seed=13)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get("x", "x"): x.astype(np.float16),
                                 program.source_names.get("grid", "grid"): grid.astype(np.float16)})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, x, grid)
    assert_within(got, want, U16 * np.abs(want) + _f32_bound(x), "reflection")
