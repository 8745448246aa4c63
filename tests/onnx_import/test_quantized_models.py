"""A quantized model end to end: the zoo's ResNet-18 (width 16, 32 x 32, 10 classes)
quantized by onnxruntime's ``quantize_static`` in the QDQ format (per-channel int8
weights, uint8 activations, 4 random calibration samples), compiled and simulated by
vpuc, against onnxruntime running the same model as ONNX defines it (graph optimizations
off, so its Q/DQ ops compute the standard's float formulas, not int8 kernels).

Tolerance.  vpuc computes in f16 with f32 sums, onnxruntime in f32, so a value near a
rounding boundary of a fake quantization lands one quantization step apart, and the
step then propagates through every later layer (by the gain of the weights, in the worst
case exponentially).  So the model is compared segment by segment: each fake-quantized
activation (a QuantizeLinear -> DequantizeLinear pair's output) and each model output is
a probe, vpuc's probes are all read from one simulation, and onnxruntime runs each
segment (the ops between the probes it reads and the probe it makes, cut out by
``onnx.utils.extract_model``) on vpuc's values of the probes it reads.  Both sides then
start from the same numbers, and for a segment's pre-quantization value ``z``:

- ``S`` bounds ``sum |w| |x| + |b|`` of every sum on the segment's path: onnxruntime runs the
  segment with ``|w|``, ``|b|`` on ``|x|`` (its Relu, MaxPool, pooling and Adds are monotone
  on non-negative values, so each value of that run bounds the magnitude of the real one).
- ``|z_vpuc - z_ort| <= delta = (5 u16 + 2 gamma_n(f32)) S``: both sides' f32 sums of at
  most ``n`` terms (``gamma_n`` each, Higham's (3.5)), and at most five f16 roundings of
  values below ``S`` on vpuc's side (the weights, the stored sum, its bias, a residual Add,
  a pool's mean).
- A fake quantization is 1-Lipschitz up to its rounding: ``|FQ(a) - FQ(b)| <= |a - b| +
  step``, and vpuc stores it in f16: ``u16 |want|``.

Every Conv but the stem is an integer layer (``QConvolution``, the DPU's integer mode): its
sum is exact and its requantization within a fraction of a step of onnxruntime's
(``test_integer_layers.py``), so its probe too is within one step of it.

So each probe is within ``step + delta + u16 |want|`` (a model output that is not
quantized: ``delta + u16 |want|``).  The whole model's output is reported, not bounded:
measured once (another input), vpuc's logits were within 0.88 of onnxruntime's, of magnitude up to 29;
per segment, the largest error is 0.90 of its bound.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnx_testlib import assert_within
from tests.tolerances import gamma
from vpuc import api
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.zoo import resnet18

U16 = 2.0 ** -11
SIZE = 32
WEIGHTED = ("Conv", "Gemm", "MatMul")


@pytest.fixture(scope="module")
def quantized_resnet(tmp_path_factory) -> dict[str, object]:
    """The model quantized in the QDQ format and, from the same samples, in onnxruntime's
    QOperator format (QLinearConv, QLinearAdd, QGemm, ...: vpuc/onnx_import/qoperator.py)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    folder = tmp_path_factory.mktemp("qdq")
    resnet18(size=SIZE, width=16, classes=10).save(folder / "float.onnx", "resnet")
    # the pre-processing users run before quantizing: BatchNorms folded into the Convs
    quant_pre_process(str(folder / "float.onnx"), str(folder / "pre.onnx"), skip_symbolic_shape=True)
    made = {}
    for form in ("QDQ", "QOperator"):
        rng = np.random.default_rng(0)
        samples = iter([{"input": rng.standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)}
                        for _ in range(4)])

        class Samples(CalibrationDataReader):
            def get_next(self):
                return next(samples, None)

        logging.disable(logging.WARNING)      # its advice to pre-process, which we did
        try:
            quantize_static(str(folder / "pre.onnx"), str(folder / f"{form}.onnx"), Samples(),
                            quant_format=getattr(QuantFormat, form), per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        made[form] = folder / f"{form}.onnx"
    return made


def _fake_quantized(model) -> dict[str, onnx.NodeProto]:
    """Activation fake quantizations: each DequantizeLinear of a QuantizeLinear's output."""
    producer = {out: node for node in model.graph.node for out in node.output}
    return {node.output[0]: node for node in model.graph.node
            if node.op_type == "DequantizeLinear" and node.input[0] in producer
            and producer[node.input[0]].op_type == "QuantizeLinear"}


def _segment_inputs(model, target: str, probes) -> list[str]:
    """The probes and graph inputs the ops making ``target`` read, back to the nearest ones."""
    producer = {out: node for node in model.graph.node for out in node.output}
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = {value.name for value in model.graph.input} - initializers
    found, stack, seen = [], list(producer[target].input), set()
    while stack:
        name = stack.pop()
        if not name or name in initializers or name in seen:
            continue
        seen.add(name)
        if name in probes or name in graph_inputs:
            found.append(name)
        else:
            stack.extend(producer[name].input)
    return sorted(found)


def _dequantized(model, name: str) -> np.ndarray:
    """A constant's value: an initializer, or a DequantizeLinear of initializers (ONNX's formula)."""
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    if name in initializers:
        return initializers[name].astype(np.float64)
    node = next(n for n in model.graph.node if n.output[0] == name)
    x, scale = (initializers[n].astype(np.float64) for n in node.input[:2])
    zp = initializers[node.input[2]].astype(np.float64) if len(node.input) > 2 else np.zeros(())
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % max(x.ndim, 1)
    shape = [-1 if i == axis else 1 for i in range(x.ndim)] if scale.ndim else []
    return (x - zp.reshape(shape)) * scale.reshape(shape)


def _magnitude_model(segment, fake_quantization, out: str):
    """The segment with ``|w|`` and ``|b|`` in every weighted op, ending at the value its
    last fake quantization reads (``out``)."""
    model = onnx.ModelProto()
    model.CopyFrom(segment)
    for node in model.graph.node:
        if node.op_type in WEIGHTED:
            for i in range(1, len(node.input)):
                if node.input[i]:
                    name = f"abs.{node.input[i]}"
                    model.graph.initializer.append(numpy_helper.from_array(
                        np.abs(_dequantized(segment, node.input[i])).astype(np.float32), name))
                    node.input[i] = name
    if fake_quantization is not None:
        keep = [n for n in model.graph.node
                if n.output[0] not in (fake_quantization.input[0], fake_quantization.output[0])]
        del model.graph.node[:]
        model.graph.node.extend(keep)
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
    return model


def _terms(segment) -> int:
    """The most terms of any sum on the segment: a Conv's input channels times its window, a
    Gemm's or MatMul's inner dimension."""
    terms = [int(np.prod(_dequantized(segment, node.input[1]).shape[1:])) for node in segment.graph.node
             if node.op_type in ("Conv", "Gemm")]
    return max(terms, default=1)


def _run(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].astype(np.float64)


def test_quantized_resnet18_segment_by_segment(quantized_resnet, tmp_path):
    model = onnx.load(quantized_resnet["QDQ"])
    fake = _fake_quantized(model)
    outputs = [value.name for value in model.graph.output]
    probes = [name for name in fake if name not in outputs]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    model.graph.output.extend(inferred[name] for name in probes)
    probed = tmp_path / "probed.onnx"
    onnx.save(model, probed)

    x = np.random.default_rng(7).standard_normal((1, 3, SIZE, SIZE)).astype(np.float16)
    imported = import_onnx(probed)
    names = imported.outputs
    # every Conv but the stem (3 input channels) runs on the DPU's integer mode
    assert [op.kind for op in imported.module.graphs[0].ops].count("QConvolution") == 19
    simulated = api.simulate(api.compile(probed), {"input": x}).outputs
    values = {name: simulated[names[name]].astype(np.float32) for name in probes + outputs}
    values["input"] = x.astype(np.float32)
    assert len(probes) >= 20            # every Conv's output, the pool's, the Adds'

    for target in probes + outputs:
        inputs = _segment_inputs(model, target, set(probes))
        part = tmp_path / f"segment_{len(inputs)}.onnx"
        onnx.utils.extract_model(str(probed), str(part), inputs, [target])
        segment = onnx.load(part)
        feeds = {name: values[name] for name in inputs}
        want = _run(segment, feeds)
        dq = fake.get(target)
        pre = dq and next(n for n in model.graph.node if n.output[0] == dq.input[0]).input[0]
        magnitude = _run(_magnitude_model(segment, dq, pre or target),
                         {name: np.abs(v) for name, v in feeds.items()})
        delta = (5 * U16 + 2 * gamma(_terms(segment), np.float32)) * magnitude
        bound = delta + U16 * np.abs(want)
        if dq is not None:
            step = _dequantized(model, dq.input[1])
            axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
            bound = bound + (step.reshape([-1 if i == axis else 1 for i in range(want.ndim)])
                             if step.ndim else step)
        assert_within(values[target].astype(np.float64), want, bound, target)


def test_qoperator_form_runs_as_its_qdq_form(quantized_resnet):
    """onnxruntime's QOperator ResNet-18 (QLinearConv, QLinearAdd, QLinearGlobalAveragePool,
    QGemm, MaxPool and Reshape of the integers) is rewritten into the QDQ form: bit for bit
    the outputs of the QDQ model quantized from the same samples, whose fake quantizations
    the test above checks against onnxruntime."""
    x = np.random.default_rng(3).standard_normal((1, 3, SIZE, SIZE)).astype(np.float16)
    got = {form: next(iter(api.simulate(api.compile(path), {"input": x}).outputs.values()))
           for form, path in quantized_resnet.items()}
    assert np.array_equal(got["QOperator"], got["QDQ"])
    from collections import Counter
    ops = Counter(node.op_type for node in onnx.load(quantized_resnet["QOperator"]).graph.node)
    assert ops["QLinearConv"] == 20 and ops["QLinearAdd"] == 8 and ops["QGemm"] == 1
