"""QuantizeLinear and DequantizeLinear (vpuc/onnx_import/convert_quant.py): the fold of
quantized constants against ONNX's reference evaluator, bit for bit; fake quantization of
activations against onnxruntime; the golden import and lowering; the refusals.

Tolerance of a fake quantization ``y = (clamp(round(x / s) + zp) - zp) s``: both sides
divide the same f16-exact ``x`` by the same f32 ``s`` (correctly rounded in f32: vpuc's
generated kernel divides as IEEE does, so the quotient is bit-identical) and round half to
even, so ``q`` is the same integer; vpuc then rounds ``q s`` (f32) once to f16: the outputs
are within ``u16 |want|``.  Ties (``x / s`` exactly half-way) are tested exactly.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_testlib import assert_within
from vpuc import api
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_quant import fold_quantization
from vpuc.onnx_import.fold import attributes
from vpuc.onnx_import.attribute_use import AttributeUse
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.ir.types import ElemType
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16 = 2.0 ** -11
RNG = np.random.default_rng(11)


def _ints(dtype, shape):
    lo, hi = ml_dtypes.iinfo(dtype).min, ml_dtypes.iinfo(dtype).max
    return RNG.integers(lo, hi + 1, size=shape).astype(dtype)


def _scales(shape):
    return (RNG.uniform(0.001, 0.1, size=shape)).astype(np.float32)


# name: (x, scale, zero point or None, attributes, opset)
FOLDS = {
    "int8_tensor": (_ints(np.int8, (8, 4, 3, 3)), _scales(()), np.int8(-3), {}, 21),
    "uint8_axis0": (_ints(np.uint8, (8, 4, 3, 3)), _scales((8,)), _ints(np.uint8, (8,)),
                    {"axis": 0}, 21),
    "int8_axis_neg": (_ints(np.int8, (16, 8)), _scales((8,)), _ints(np.int8, (8,)),
                      {"axis": -1}, 21),
    "int32_bias": (RNG.integers(-2 ** 20, 2 ** 20, size=(16,)).astype(np.int32), _scales((16,)),
                   None, {"axis": 0}, 21),
    "int4_blocked": (_ints(ml_dtypes.int4, (6, 32)), _scales((6, 4)), _ints(ml_dtypes.int4, (6, 4)),
                     {"axis": 1, "block_size": 8}, 21),
    "uint4_blocked_ragged": (_ints(ml_dtypes.uint4, (30, 4)), _scales((4, 4)), None,
                             {"axis": 0, "block_size": 8}, 21),
    "uint8_f16_scale": (_ints(np.uint8, (4, 5)), _scales((5,)).astype(np.float16), None,
                        {"axis": 1}, 21),
}


def _dq_node(case):
    x, scale, zp, attrs, _ = FOLDS[case]
    inputs = ["x", "s"] + (["zp"] if zp is not None else [])
    return helper.make_node("DequantizeLinear", inputs, ["y"], name="dq", **attrs)


@pytest.mark.parametrize("case", sorted(FOLDS))
def test_dequantize_fold_is_the_reference_evaluators(case):
    """The fold is bit for bit what onnx.reference computes (f32 or the scale's type)."""
    from onnx.reference import ReferenceEvaluator
    x, scale, zp, _, opset = FOLDS[case]
    node = _dq_node(case)
    feeds = {"x": x, "s": scale, **({"zp": zp} if zp is not None else {})}
    model = helper.make_model(helper.make_graph(
        [node], "dq", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                       for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", 0, None)]), opset_imports=[helper.make_opsetid("", opset)])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    b = GraphBuilder("g", ElemType.F16, "m.onnx", opset)
    b.known.update(feeds)
    b.node = node
    got = fold_quantization(b, node, AttributeUse(attributes(node)))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), case


def test_dequantize_fold_at_opset_13_is_the_formula():
    """Before opset 19 onnx.reference has no DequantizeLinear: the fold is ONNX's formula,
    ``(x - zp) * scale`` in f32 per axis."""
    x, scale, zp = _ints(np.int8, (8, 4, 3, 3)), _scales((8,)), _ints(np.int8, (8,))
    node = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"], axis=0)
    b = GraphBuilder("g", ElemType.F16, "m.onnx", 13)
    b.known.update(x=x, s=scale, zp=zp)
    b.node = node
    got = fold_quantization(b, node, AttributeUse(attributes(node)))
    want = (x.astype(np.float32) - zp.astype(np.float32).reshape(8, 1, 1, 1)) * scale.reshape(8, 1, 1, 1)
    assert got.dtype == np.float32 and np.array_equal(got, want)


def _qdq_model(tmp_path, name, shape, scale, zp, opset=13, axis=None, constant_nodes=False):
    """x -> QuantizeLinear -> DequantizeLinear -> y, the parameters as initializers (or as
    Constant nodes, as PyTorch's export writes them)."""
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s")]
    inputs = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(np.asarray(zp), "zp"))
        inputs.append("zp")
    attrs = {} if axis is None else {"axis": axis}
    constants = [helper.make_node("Constant", [], [t.name], value=t) for t in inits] if constant_nodes else []
    inits = [] if constant_nodes else inits
    nodes = [*constants, helper.make_node("QuantizeLinear", inputs, ["q"], name="quant", **attrs),
             helper.make_node("DequantizeLinear", ["q"] + inputs[1:], ["y"], name="dequant", **attrs)]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    return path


def _onnxruntime(path, x):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0]


def _vpuc(path, x):
    return next(iter(api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs.values()))


def test_ties_round_half_to_even_and_saturate(tmp_path):
    """x / s exactly half-way between integers (s a power of 2), and values past the
    range: vpuc equals onnxruntime exactly (every q s is exact in f16)."""
    path = _qdq_model(tmp_path, "ties", [1, 2, 8, 33], 0.125, np.int8(3))
    halves = (np.arange(-140, 124) + 0.5) * 0.125
    x = np.concatenate([halves, np.arange(-140, 124) * 0.125, [-40.0, 40.0, 0.0, -0.0]])
    x = np.resize(x, (1, 2, 8, 33)).astype(np.float16)
    got, want = _vpuc(path, x), _onnxruntime(path, x)
    assert np.array_equal(got.astype(np.float32), want)


@pytest.mark.parametrize("constant_nodes", [False, True])
@pytest.mark.parametrize("kind", ["uint8_tensor", "int8_axis", "uint8_axis_zp"])
def test_fake_quantization_against_onnxruntime(kind, constant_nodes, tmp_path):
    """Random inputs and scales: the same integers on both sides, vpuc's f16 result one
    rounding of the f32 product (module docstring); the scale and zero point initializers
    or Constant nodes."""
    channels = 5
    if kind == "uint8_tensor":
        scale, zp, axis = np.float32(0.0239), np.uint8(128), None
    elif kind == "int8_axis":
        scale, zp, axis = _scales((channels,)) * 3, np.zeros(channels, np.int8), 1
    else:
        scale, zp, axis = _scales((channels,)) * 3, _ints(np.uint8, (channels,)), 1
    path = _qdq_model(tmp_path, kind, [1, channels, 6, 20], scale, zp, axis=axis,
                      constant_nodes=constant_nodes)
    x = (RNG.standard_normal((1, channels, 6, 20)) * 3).astype(np.float16)
    got, want = _vpuc(path, x).astype(np.float64), _onnxruntime(path, x).astype(np.float64)
    assert_within(got, want, U16 * np.abs(want), kind)


def test_import_golden(tmp_path):
    """The fake quantization's graph ops: f32 steps between Converts."""
    path = _qdq_model(tmp_path, "qdq", [1, 4, 8, 8], [0.1, 0.2, 0.3, 0.4], np.uint8([1, 2, 3, 4]),
                      axis=1)
    text = print_module(import_onnx(path).module)
    golden = GOLDEN / "qdq_axis.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_lowering_is_one_generated_kernel(tmp_path):
    """Every step of a fake quantization is elementwise: one generated ACT SHAVE kernel."""
    path = _qdq_model(tmp_path, "qdq", [1, 16, 8, 8], 0.05, np.int8(0))
    text, name, _ = onnx_as_vir(path, None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / "lowered_qdq.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()
    assert [k.name for k in module.kernels if k.source.kind.value != "library"] == ["main.sg0"]


def _refusal(capsys, path):
    assert main(["import", str(path)]) == 1
    return capsys.readouterr().err


def test_lone_quantize_to_int16_output_refused(tmp_path, capsys):
    """An int8/uint8 result may leave the float graph (test_quant_integer_io.py); an int16
    one cannot: vpuc computes no i16 values."""
    s = numpy_helper.from_array(np.float32(0.1), "s")
    zp = numpy_helper.from_array(np.int16(0), "zp")
    graph = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"],
                                                name="quant")],
                              "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("q", TensorProto.INT16, [1, 4])],
                              [s, zp])
    path = tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    err = _refusal(capsys, path)
    assert "node 'quant' (QuantizeLinear" in err and "its int16 output would leave" in err


def test_blocked_activation_refused(tmp_path, capsys):
    path = _qdq_model(tmp_path, "blocked", [1, 4, 8], np.full((1, 4, 1), 0.1, np.float32),
                      np.zeros((1, 4, 1), np.int8), opset=21, axis=2)
    model = onnx.load(path)
    for node in model.graph.node:
        node.attribute.append(helper.make_attribute("block_size", 8))
    onnx.save(model, path)
    err = _refusal(capsys, path)
    assert "node 'quant' (QuantizeLinear" in err and "block_size" in err


def test_qoperator_refused_pointing_to_qdq(tmp_path, capsys):
    inits = [numpy_helper.from_array(np.ones((4, 4), np.int8), "w"),
             numpy_helper.from_array(np.int8(0), "zp")]
    node = helper.make_node("MatMulInteger", ["x", "w", "zp", "zp"], ["y"], name="mmi")
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4])], inits)
    path = tmp_path / "mmi.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    err = _refusal(capsys, path)
    assert "node 'mmi' (MatMulInteger" in err and "QDQ form" in err


def test_per_axis_scale_of_wrong_length_refused(tmp_path, capsys):
    path = _qdq_model(tmp_path, "wrong", [1, 4, 8], [0.1, 0.2, 0.3], np.zeros(3, np.int8), axis=1)
    err = _refusal(capsys, path)
    assert "scale of shape [3] does not fit axis 1 of [1, 4, 8]" in err


def _matmul_models(tmp_path):
    """x -> QuantizeLinear -> QLinearMatMul (int8 weights per column) -> DequantizeLinear,
    and the same in the QDQ form."""
    w = _ints(np.int8, (12, 6))
    inits = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": w, "ws": _scales((6,)),
             "wz": np.zeros(6, np.int8), "ys": np.float32(0.05), "yz": np.uint8(120)}
    qop = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
           helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"],
                            name="qmm"),
           helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    qdq = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
           helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
           helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
           helper.make_node("MatMul", ["xd", "wd"], ["m"]),
           helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["yq"]),
           helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    paths = []
    for name, nodes in (("qop", qop), ("qdq", qdq)):
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 12])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 6])],
                                  [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        paths.append(str(tmp_path / f"{name}.onnx"))
        onnx.save(model, paths[-1])
    return paths


def test_qlinear_matmul_is_its_qdq_form(tmp_path):
    """QLinearMatMul rewritten (qoperator.py): the outputs of its QDQ form bit for bit, and
    within one output step (plus vpuc's f16 rounding of it) of onnxruntime's integer
    kernel, which requantizes the exact int32 sum: only vpuc's f16 sum can round across."""
    qop, qdq = _matmul_models(tmp_path)
    x = (RNG.standard_normal((5, 12)) * 1.5).astype(np.float16)
    got = _vpuc(qop, x)
    assert np.array_equal(got, _vpuc(qdq, x))
    want = ort.InferenceSession(qop, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0].astype(np.float64)
    assert_within(got.astype(np.float64), want, 0.05 + U16 * np.abs(want), "QLinearMatMul")


@pytest.mark.parametrize("case", ["int8_axis", "uint8_tensor", "int4_blocked", "no_zero_point"])
def test_quantize_fold_is_the_reference_evaluators(case):
    """A QuantizeLinear of a constant (float weights quantized in the graph) folds bit for bit
    as onnx.reference computes it, ties and saturation included."""
    from onnx.reference import ReferenceEvaluator
    x = np.concatenate([RNG.standard_normal(60) * 2, (np.arange(-20, 20) + 0.5) * 0.0625,
                        [1e6, -1e6]]).astype(np.float32).reshape(6, 17)
    scale, zp, attrs = {
        "int8_axis": (_f32(RNG.uniform(0.01, 0.05, 6)), _ints(np.int8, (6,)), {"axis": 0}),
        "uint8_tensor": (np.float32(0.0625), np.uint8(100), {}),
        "int4_blocked": (_f32(RNG.uniform(0.1, 0.5, (6, 3))), _ints(ml_dtypes.int4, (6, 3)),
                         {"axis": 1, "block_size": 6}),
        "no_zero_point": (np.float32(0.0625), None, {}),
    }[case]
    feeds = {"x": x, "s": scale, **({"zp": zp} if zp is not None else {})}
    node = helper.make_node("QuantizeLinear", list(feeds), ["y"], **attrs)
    model = helper.make_model(helper.make_graph(
        [node], "q", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                      for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", 0, None)]), opset_imports=[helper.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    b = GraphBuilder("g", ElemType.F16, "m.onnx", 21)
    b.known.update(feeds)
    b.node = node
    got = fold_quantization(b, node, AttributeUse(attributes(node)))
    assert got.dtype == want.dtype and np.array_equal(got.astype(np.int64), want.astype(np.int64)), case


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)


@pytest.mark.parametrize("precision", ["f32", "f16"])
def test_graph_reference_of_fake_quantization(precision, tmp_path):
    """vpuc's numpy graph reference (the oracle of ``vpuc run --reference``) computes the
    imported fake quantization as onnxruntime does: the same integers, in f16 one rounding
    of the product."""
    from vpuc.onnx_import import write_import
    from vpuc.reference.graph import run_graph
    from vpuc.vir.parser import parse_file
    path = _qdq_model(tmp_path, "ref", [1, 5, 6, 20], _scales((5,)) * 3, _ints(np.uint8, (5,)), axis=1)
    imported = import_onnx(path, precision=precision)
    vir = tmp_path / "out" / "ref.vir"
    write_import(imported, vir)
    x = (RNG.standard_normal((1, 5, 6, 20)) * 3).astype(np.float16).astype(np.float32)
    got = run_graph(parse_file(vir).graphs[0], {imported.inputs["x"]: x}, vir.parent)[0]
    want = _onnxruntime(path, x).astype(np.float64)
    u = U16 if precision == "f16" else 0.0
    assert_within(got.astype(np.float64), want, u * np.abs(want), precision)


def _moved_model(tmp_path, second_zero_point, dtype=np.uint8):
    """x -> fake quantization -> Transpose -> fake quantization (the second of the same
    scale and ``second_zero_point``) -> y: how quantizers wrap every Transpose."""
    inits = [numpy_helper.from_array(np.float32(0.0371), "s"),
             numpy_helper.from_array(np.asarray(7, dtype), "z1"),
             numpy_helper.from_array(np.asarray(second_zero_point, dtype), "z2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z1"], ["d1"]),
             helper.make_node("Transpose", ["d1"], ["t"], perm=[0, 2, 1]),
             helper.make_node("QuantizeLinear", ["t", "s", "z2"], ["q2"], name="again"),
             helper.make_node("DequantizeLinear", ["q2", "s", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "moved", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = str(tmp_path / "moved.onnx")
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("second_zero_point, dtype, pairs", [(7, np.uint8, 1), (9, np.uint8, 2),
                                                              (7, np.uint16, 2)])
def test_pair_after_a_move_of_its_grid_is_left_out(second_zero_point, dtype, pairs, tmp_path):
    """A fake quantization of values a Transpose moved off a fake quantization of the same
    per-tensor 8-bit parameters is the identity (convert_quant._on_its_grid) and is left
    out; another zero point, or 16 bits (too many levels for f16 to hold each exactly
    enough), keeps it.  Either way the result is onnxruntime's within one f16 rounding."""
    path = _moved_model(tmp_path, second_zero_point, dtype)
    kinds = [op.kind for op in import_onnx(path).module.graphs[0].ops]
    assert kinds.count("Divide") == pairs
    x = (RNG.standard_normal((1, 12, 40)) * 3).astype(np.float16)
    got, want = _vpuc(path, x).astype(np.float64), _onnxruntime(path, x).astype(np.float64)
    assert_within(got, want, U16 * np.abs(want), f"zero point {second_zero_point} {dtype.__name__}")
