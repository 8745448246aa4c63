"""ONNX RoiAlign (vpuc/onnx_import/convert_roi_align.py): run-time and constant rois and
batch indices, both modes, both coordinate transformations, fixed and adaptive sample
counts, against onnxruntime through the graph reference in f32 and compiled in f16; its
import and lowering (golden text); refusals naming the node.

Tolerance.  Every sample's coordinates, neighbours and weights are the f32 values
onnxruntime computes (the same operations in its order).  ``max`` takes the largest of the
same products: equal.  ``avg`` sums the ``4 S`` weighted neighbours of a bin's ``S``
samples in another order (onnxruntime sample by sample; vpuc each sample's four, then a
reduction over the samples), each sum within ``gamma_{4S}`` of ``Σ w |p| <= S max|x|``
(bilinear weights are non-negative and sum to 1), divided by ``S``: both within
``2 gamma_{4S+1} max|x|``.  Compiled in f16 the result is rounded once more: ``2^-11 |want|``
(the image and rois are f16 on both sides).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_testlib import assert_within
from tests.tolerances import gamma
from vpuc import api
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import import_onnx, write_import
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
X_SHAPE, ROIS = (2, 3, 8, 9), 5


def _rois(seed=1):
    """Boxes in 1/16ths (exact in f16) from 3 pixels before the image to past its end, of
    0.2 to 7 pixels (scaled by 1/2: some smaller than a bin, some beyond the image)."""
    rng = np.random.default_rng(seed)
    low, extent = rng.uniform(-3, 8, (ROIS, 2)), rng.uniform(0.2, 7, (ROIS, 2))
    boxes = np.round(np.concatenate([low, low + extent], 1) * 16) / 16
    return boxes.astype(np.float32), rng.integers(0, X_SHAPE[0], ROIS).astype(np.int64)


def _model(tmp_path, opset=16, constant=False, name="roi", **attrs) -> str:
    rois, batch = _rois()
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))]
    inits = []
    if constant:
        inits = [numpy_helper.from_array(rois, "rois"), numpy_helper.from_array(batch, "bi")]
    else:
        inputs += [helper.make_tensor_value_info("rois", TensorProto.FLOAT, [ROIS, 4]),
                   helper.make_tensor_value_info("bi", TensorProto.INT64, [ROIS])]
    dims = [ROIS, X_SHAPE[1], attrs.get("output_height", 1), attrs.get("output_width", 1)]
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], name="align", **attrs)
    graph = helper.make_graph([node], name, inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _feeds(path, x):
    rois, batch = _rois()
    names = {i.name for i in onnx.load(path).graph.input}
    return {"x": x, **({"rois": rois, "bi": batch} if "rois" in names else {})}


def _onnxruntime(path, feeds):
    """onnxruntime's result; RoiAlign-22, which onnxruntime 1.32 does not implement, by
    ONNX's reference (which agrees with onnxruntime bit for bit at opsets 10 and 16)."""
    if onnx.load(path).opset_import[0].version >= 22:
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(path).run(None, feeds)[0].astype(np.float64)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].astype(np.float64)


def _bound(attrs, x):
    if attrs.get("mode") == "max":
        return 0.0
    samples = max(attrs.get("sampling_ratio") or 4, 1) ** 2    # adaptive: at most 4 a side here
    return 2 * gamma(4 * samples + 1, np.float32) * np.abs(x).max()


def _image():
    return np.random.default_rng(2).standard_normal(X_SHAPE).astype(np.float16).astype(np.float32)


CASES = [(opset, mode, transform, ratio, constant)
         for opset in (10, 16, 22) for mode in ("avg", "max")
         for transform in ((None,) if opset == 10 else ("half_pixel", "output_half_pixel"))
         for ratio, constant in ((2, False), (1, False), (3, True), (0, True))]


@pytest.mark.parametrize("opset, mode, transform, ratio, constant", CASES)
def test_graph_against_onnxruntime(opset, mode, transform, ratio, constant, tmp_path):
    attrs = dict(mode=mode, output_height=3, output_width=2, sampling_ratio=ratio, spatial_scale=0.5)
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    path = _model(tmp_path, opset, constant, **attrs)
    x = _image()
    feeds = _feeds(path, x)
    imported = import_onnx(path, precision="f32")
    write_import(imported, tmp_path / "roi.vir")
    graph_feeds = {imported.inputs[k]: v.astype(np.int32) if k == "bi" else v for k, v in feeds.items()}
    got = run_graph(imported.module.graphs[0], graph_feeds, tmp_path)[0].astype(np.float64)
    assert_within(got, _onnxruntime(path, feeds), _bound(attrs, x), f"{opset} {mode} {transform} {ratio}")


@pytest.mark.parametrize("attrs, constant", [
    (dict(mode="avg", output_height=3, output_width=2, sampling_ratio=2, spatial_scale=0.5), False),
    (dict(mode="max", output_height=2, output_width=2, sampling_ratio=0, spatial_scale=0.5), True)])
def test_compiled_against_onnxruntime(attrs, constant, tmp_path):
    path = _model(tmp_path, 16, constant, **attrs)
    x = _image()
    feeds = _feeds(path, x)
    program = api.compile(path)
    sim = api.simulate(program, {program.source_names.get(k, k): v.astype(np.int32 if k == "bi" else np.float16)
                                 for k, v in feeds.items()})
    got = next(iter(sim.outputs.values())).astype(np.float64)
    want = _onnxruntime(path, feeds)
    assert_within(got, want, U16 * np.abs(want) + _bound(attrs, x), str(attrs))


def test_a_roi_of_no_samples_is_zero(tmp_path):
    """An adaptive count of 0 (a half_pixel box of no extent): onnxruntime divides the empty
    sum by 1, and its max starts from 0."""
    for mode in ("avg", "max"):
        rois = np.array([[1, 1, 1, 1], [0, 0, 4, 4]], np.float32)
        node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], mode=mode, sampling_ratio=0)
        graph = helper.make_graph(
            [node], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 1, 1])],
            initializer=[numpy_helper.from_array(rois, "rois"), numpy_helper.from_array(np.zeros(2, np.int64), "bi")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        model.ir_version = helper.find_min_ir_version_for(model.opset_import)
        path = str(tmp_path / f"{mode}.onnx")
        onnx.save(model, path)
        x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
        imported = import_onnx(path, precision="f32")
        write_import(imported, tmp_path / f"{mode}.vir")
        got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: x}, tmp_path)[0]
        want = _onnxruntime(path, {"x": x})
        assert (got[0] == 0).all() and (want[0] == 0).all()
        assert_within(got.astype(np.float64), want, 2 * gamma(65, np.float32) * np.abs(x).max(), mode)


GOLDEN_CASES = {"avg_runtime": (dict(mode="avg", output_height=2, output_width=2, sampling_ratio=2), False),
                "max_adaptive": (dict(mode="max", output_height=2, output_width=1, sampling_ratio=0,
                                      spatial_scale=0.5), True)}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_import_text(case, tmp_path):
    attrs, constant = GOLDEN_CASES[case]
    text = print_module(import_onnx(_model(tmp_path, 16, constant, name=case, **attrs), precision="f32").module)
    golden = GOLDEN / f"roi_align_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_shapes_agree_with_onnx_inference(case, tmp_path):
    attrs, constant = GOLDEN_CASES[case]
    path = _model(tmp_path, 16, constant, name=case, **attrs)
    imported = import_onnx(path)
    [output] = imported.outputs.values()
    otype = next(op.type for op in imported.module.graphs[0].ops if op.result == output)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True).graph.output[0]
    assert tuple(otype.dims) == tuple(d.dim_value for d in inferred.type.tensor_type.shape.dim)


def test_lowering_golden(tmp_path):
    """The four neighbours' gathers (the library kernel ``gather``), the sample arithmetic
    and weighting as generated ACT SHAVE kernels, the bin reduction."""
    path = _model(tmp_path, 16, False, name="lowered", mode="avg", output_height=1, output_width=2,
                  sampling_ratio=1)
    text, name, _ = onnx_as_vir(path, None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / "lowered_roi_align_avg.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


@pytest.mark.parametrize("attrs, message", [
    (dict(sampling_ratio=0), "sampling_ratio = 0 .* with run-time rois is not supported"),
    (dict(sampling_ratio=2, coordinate_transformation_mode="asymmetric"),
     "coordinate_transformation_mode 'asymmetric'"),
])
def test_refusals_name_the_node(attrs, message, tmp_path):
    with pytest.raises(VpucError, match=message) as caught:
        import_onnx(_model(tmp_path, 16, False, **attrs))
    assert "node 'align' (RoiAlign" in str(caught.value)
