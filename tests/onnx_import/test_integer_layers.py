"""QDQ convolutions as integer DPU layers (``vpuc/onnx_import/quant_layers.py``,
``QConvolution``, ``vpuc/fusion/lower_dpu_quant.py``) against onnxruntime.

onnxruntime runs the QDQ model as ONNX defines it (graph optimizations off: its Q/DQ ops
compute the standard's float formulas).  The input is f16-exact, so vpuc's QuantizeLinear
of it (``x / s_x`` in f32, rounded half to even) gives onnxruntime's integers.  The
integer layer's sum is exact, so its requantized value differs from onnxruntime's only in
the scale: the PPE's ``mult * 2^-shift`` is within 2^-14 relative of ``s_x s_w / s_y``,
and onnxruntime's f32 sum of ``n`` products and its two f32 scalings are within
``gamma_(n+2)`` relative of ``sum |x w|``.  Both are within a fraction of a step of the
exact value ``v`` (``|v| (2^-14 + gamma) < 0.5`` for every ``|v| <= 255``: beyond the
range both saturate), so the rounded integers differ by at most one, and only where ``v``
lies near a half-way point.  The dequantized output, ``(q - z_y) s_y`` in f32 stored in
f16, is then within ``s_y (1 + u16) + u16 |y|`` of onnxruntime's (its f32 result).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_testlib import assert_within
from qdq_models import conv_pair, hand_qdq_conv, quantize, single_conv, small_cnn
from vpuc import api
from vpuc.arch import load_arch
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16 = 2.0 ** -11


def _ort(path, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [v.astype(np.float64) for v in session.run(None, feeds)]


def _ops(path) -> list:
    return import_onnx(path).module.graphs[0].ops


def _probes(model) -> list:
    """The DequantizeLinears of each QuantizeLinear of a Conv's (or its Relu's) output: the
    integer layers' outputs, dequantized, in node order."""
    producer = {o: n for n in model.graph.node for o in n.output}
    return [n for n in model.graph.node if n.op_type == "DequantizeLinear"
            and n.input[0] in producer and producer[n.input[0]].op_type == "QuantizeLinear"
            and producer[n.input[0]].input[0] in producer
            and producer[producer[n.input[0]].input[0]].op_type in ("Conv", "Relu")]


def _segment_source(model, target: str, probes: set) -> str:
    """The one probe or graph input the ops making ``target`` read (the models here are
    chains)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    initializers = {i.name for i in model.graph.initializer}
    found, stack, seen = set(), list(producer[target].input), set()
    while stack:
        name = stack.pop()
        if not name or name in initializers or name in seen:
            continue
        seen.add(name)
        if name in probes or name not in producer:
            found.add(name)
        else:
            stack.extend(producer[name].input)
    (source,) = found
    return source


def _check_layers(path, shape, tmp_path, seed=1) -> list:
    """Each integer layer's dequantized output within one step of onnxruntime run on vpuc's
    input to it (the probes' segments), and each probe bit for bit the graph oracle's
    (which computes the integer layers as the DPU does).  [(got, want, step)] per probe."""
    model = onnx.load(path)
    dqs = _probes(model)
    names = [n.output[0] for n in dqs]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    graph_outputs = {v.name for v in model.graph.output}
    # a probe a model output is an Identity of: read there (a value is one Result)
    shown = {n.input[0]: n.output[0] for n in model.graph.node
             if n.op_type == "Identity" and n.output[0] in graph_outputs}
    model.graph.output.extend(inferred[name] for name in names if name not in shown)
    probed = tmp_path / "probed.onnx"
    onnx.save(model, probed)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float16)
    outputs = import_onnx(probed).outputs
    sim = api.simulate(api.compile(probed), {"x": x}, reference=True)
    # bit for bit where exact by construction: the integer layers' sums are exact and their
    # Q / DQ are single IEEE roundings on both sides; a float layer's f32 sums (the Gemm
    # after them) may round in another order than the oracle's, so they are not compared here
    for name in {outputs[shown.get(p, p)] for p in names}:
        assert np.array_equal(sim.reference[name], sim.outputs[name]), name
    values = {p: sim.outputs[outputs[shown.get(p, p)]].astype(np.float32) for p in names}
    values["x"] = x.astype(np.float32)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    checked = []
    for dq, probe in zip(dqs, names):
        source = _segment_source(model, probe, set(names))
        part = tmp_path / f"segment.{probe}.onnx"
        onnx.utils.extract_model(str(probed), str(part), [source], [probe])
        want = _ort(part, {source: values[source]})[0]
        got, step = values[probe].astype(np.float64), float(inits[dq.input[1]])
        assert_within(got, want, step * (1 + U16) + U16 * np.abs(want), probe)
        checked.append((got, want, step))
    return checked


def _shape(model) -> list:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("kind, kwargs", [
    ("padded", {}),
    ("strided", {"stride": 2, "size": 13}),
    ("pointwise", {"kernel": 1, "pad": 0, "out_channels": 48}),
    ("5x5", {"kernel": 5, "pad": 2, "channels": 32, "size": 9}),
])
def test_conv_within_one_step_of_onnxruntime(kind, kwargs, tmp_path):
    model = conv_pair(**kwargs)
    path = quantize(model, tmp_path, _shape(model))
    assert [op.kind for op in _ops(path)].count("QConvolution") == 2
    for got, want, step in _check_layers(path, _shape(model), tmp_path):
        assert np.mean(np.abs(got - want) > step / 2) < 0.05     # ties only: a few at most


@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_activation_types(activations, tmp_path):
    path = quantize(conv_pair(), tmp_path, (1, 16, 12, 12), activations)
    layers = [op for op in _ops(path) if op.kind == "QConvolution"]
    assert {op.type.elem.value for op in layers} == {"u8" if activations == "QUInt8" else "i8"}
    _check_layers(path, (1, 16, 12, 12), tmp_path)


def test_relu_and_shared_quantizations(tmp_path):
    """A Relu between the Conv and its QuantizeLinear is the layer's relu (clamped at the
    output zero point); two QuantizeLinears of the same parameters read one integer value,
    the second layer reads it directly."""
    path = tmp_path / "hand.onnx"
    onnx.save(hand_qdq_conv(shared_outputs=2), path)
    ops = _ops(path)
    first, second = [op for op in ops if op.kind == "QConvolution"]
    assert first.attrs["relu"] and first.attrs["out_zero_point"] == 3
    assert not second.attrs["relu"] and second.operands[0] == first.result
    assert "Relu" not in [op.kind for op in ops]
    checked = _check_layers(path, (1, 16, 8, 8), tmp_path, seed=2)
    assert len(checked) == 3 and checked[0][0].min() >= 0


def test_unmatched_and_isolated_layers_stay_in_f16(tmp_path):
    """A Conv of 3 input channels (not a multiple of 16) is no integer layer, and so the
    1x1 Conv after it is one alone between float ops, as is a single Conv: fake
    quantization as before."""
    for model, shape in ((conv_pair(channels=3), (1, 3, 12, 12)),
                         (single_conv(), (1, 16, 12, 12))):
        kinds = [op.kind for op in _ops(quantize(model, tmp_path, shape))]
        assert "QConvolution" not in kinds and "Convolution" in kinds


def test_two_integer_layers_in_a_row(tmp_path):
    """conv-relu-conv-relu-maxpool-gemm: the second layer reads the first one's u8 integers
    (no Convert between), each layer within one step of onnxruntime run on vpuc's input to
    it."""
    path = quantize(small_cnn(), tmp_path, (1, 16, 16, 16))
    layers = [op for op in _ops(path) if op.kind == "QConvolution"]
    assert len(layers) == 2 and layers[1].operands[0] == layers[0].result
    assert len(_check_layers(path, (1, 16, 16, 16), tmp_path, seed=4)) == 2
    # the integer tasks' quant fields through both blob formats: the same outputs and cycles
    program = api.compile(path)
    x = {"x": np.random.default_rng(5).standard_normal((1, 16, 16, 16)).astype(np.float16)}
    direct = api.simulate(program, x)
    for form in ("fb", "elf"):
        again = api.simulate(api.read_blob(api.write_blob(program, form)), x)
        assert again.cycles == direct.cycles
        for name, value in direct.outputs.items():
            assert np.array_equal(again.outputs[name], value), (form, name)


def test_import_and_lowering_golden(tmp_path):
    """The imported graph of the hand-written QDQ Conv + Relu and 1x1 Conv, and its lowered
    program before allocation: the weights, i32 bias (input zero point folded in) and scale
    table loaded per tile, the row blocks' ``quant`` clauses, the second layer reading the
    first one's u8 output."""
    path = tmp_path / "hand.onnx"
    onnx.save(hand_qdq_conv(), path)
    text, name, _ = onnx_as_vir(path, None, "f16")
    mod = parse_text(text, name)
    assert print_module(parse_text(print_module(mod), name)) == print_module(mod)  # round trip
    PassManager(parse_pipeline("lower-graph")).run(mod, PassContext(load_arch(mod.arch)))
    for golden, content in (("qconv_import.expected", text),
                            ("qconv_lowered.expected", print_module(mod))):
        if UPDATE:
            (GOLDEN / golden).write_text(content)
        assert content == (GOLDEN / golden).read_text(), golden


QCONV_VIR = """module @q arch NPU37XX

graph @main {{
  %x = Parameter() : 1x16x8x8x{x} NCHW
  %w = Constant(file "w.npy") : 16x16x3x3xi8 NCHW
  %b = Constant(file "b.npy") : {bias}xi32
  %s = Constant(file "s.npy") : 16xf32
  %y = QConvolution{{pads_begin = [1, 1], pads_end = [1, 1], in_zero_point = {zx}, out_zero_point = 0, out = u8}}(%x, %w, %b, %s) : 1x16x8x8xu8 NCHW
  Result(%y)
}}
"""


@pytest.mark.parametrize("x, bias, zx, message", [
    ("f16", 16, 0, "QConvolution takes u8 or i8 data and i8 weights; got f16 and i8"),
    ("u8", 8, 0, "QConvolution bias must be 16xi32 (one per output channel); got 8xi32"),
    ("u8", 16, 300, "QConvolution in_zero_point 300 is outside u8's [0, 255]"),
    ("i8", 16, 200, "QConvolution in_zero_point 200 is outside i8's [-128, 127]"),
])
def test_graph_op_rules(x, bias, zx, message):
    from vpuc.diagnostics import VpucError
    with pytest.raises(VpucError) as info:
        parse_text(QCONV_VIR.format(x=x, bias=bias, zx=zx), "q.vir")
    assert message in str(info.value) and "q.vir:8:" in str(info.value)
