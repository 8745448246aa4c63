"""Import-time folding: constant subgraphs, Shape of static tensors, BatchNorm and
HardSigmoid's scale and shift into Conv.

- **Constant subgraphs.** A node whose inputs are all known (initializers,
  Constant nodes, earlier folds) is evaluated at import with ``onnx.reference``
  (the ONNX project's own executable definition of every op, so the folded
  value is what the standard says, whatever the op).  This is how the Shape →
  Gather → Concat → Reshape chains exporters emit become plain constants.
- **Shape / Size** of a graph value: its static dims, known once the input
  shapes are fixed.
- **BatchNormalization after Conv** (inference form, one consumer): folded into
  the Conv's weights and bias, as OpenVINO's and onnxruntime's graph
  optimizers do: ``w' = w * s``, ``b' = (b - mean) * s + beta`` with
  ``s = gamma / sqrt(var + eps)``.
- **HardSigmoid after Conv** (one consumer): ``clamp(alpha * y + beta, 0, 1)`` of the
  Conv's output ``y = w * x + b`` is ``clamp(w' * x + b', 0, 1)`` with ``w' = alpha w``,
  ``b' = alpha b + beta``, as OpenVINO's ``ConvolutionMultiplyFusion``
  (src/common/transformations, ``common_optimizations/conv_mul_fusion``) and
  onnxruntime's ``ConvMulFusion`` and ``ConvAddFusion`` (onnxruntime/core/optimizer) fold a
  constant scale and shift after a convolution into its weights and bias.  The Conv then ends in a Clip to [0, 1], which the DPU applies as
  its post-op (``lower_dpu_support.DPU_ACTIVATIONS``), so the excitation of a
  squeeze-excite block (MobileNetV3's ``HardSigmoid(Conv(...))``) leaves the Conv as the
  product's per-channel factors with no ACT SHAVE task between them
  (``lower_dpu_scale``).  Folded in float64 from the f32 initializers and the f32 attributes and rounded once
  to the Conv's type, as the BatchNorm fold is: one rounding of the scaled weights where
  the unfolded graph rounded the Conv's output, the product by alpha and the sum.  (An
  f32 weight times the f32 alpha is exact in float64, so each folded weight is the
  correctly rounded f32 product.)
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder, onnx_node


def attributes(node) -> dict:
    from onnx import helper
    values = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, float):          # a float32 in the protobuf: its shortest spelling
            value = float(str(np.float32(value)))
        elif isinstance(value, list) and value and isinstance(value[0], float):
            value = [float(str(np.float32(v))) for v in value]
        values[attr.name] = value
    return values


def _f32_attribute(node, name: str, default: float) -> float:
    """A float attribute as the model holds it, a float32, exactly (``attributes`` gives its
    shortest decimal spelling, for printing: 1/6 as 0.16666667, 1.6e-9 off the float32 the
    model and onnxruntime compute with)."""
    from onnx import helper
    for attr in node.attribute:
        if attr.name == name:
            return float(np.float32(helper.get_attribute_value(attr)))
    return float(np.float32(default))


def _node_maps(nodes: list) -> tuple[Counter, dict]:
    """(how many nodes read each value, the node producing each value)."""
    consumers = Counter(name for node in nodes for name in node.input if name)
    return consumers, {out: node for node in nodes for out in node.output}


def _conv_before(node, op_type: str, maps: tuple[Counter, dict], keep: set[str],
                 known: dict[str, np.ndarray]):
    """The Conv ``node`` (an ``op_type``) reads when it can fold into it: the Conv's output
    read by ``node`` alone and not a graph output, its weights and bias known; else None."""
    consumers, producer = maps
    conv = producer.get(node.input[0]) if node.op_type == op_type and node.input else None
    if (conv is None or conv.op_type != "Conv" or consumers[conv.output[0]] != 1
            or conv.output[0] in keep or not all(n in known for n in conv.input[1:] if n)):
        return None
    return conv


def _weights_and_bias(conv, known: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The Conv's weights and bias (zeros when it has none) in float64, to fold exactly."""
    weights = known[conv.input[1]].astype(np.float64)
    bias = known[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
        else np.zeros(weights.shape[0])
    return weights, bias


def _folded_conv(conv, known: dict[str, np.ndarray], weights: np.ndarray, bias: np.ndarray,
                 output: str, names: tuple[str, str], name: str):
    """A Conv like ``conv``, named ``name``, of the folded ``weights`` and ``bias`` (rounded
    once to f32, ``known`` under ``names``: named after ``output``, not the weight tensor,
    since two Convs may share weights but not their folds) into ``output``."""
    from onnx import helper
    known[names[0]], known[names[1]] = weights.astype(np.float32), bias.astype(np.float32)
    folded = helper.make_node("Conv", [conv.input[0], *names], [output], name=name)
    folded.attribute.extend(conv.attribute)
    return folded


def fold_batch_norms(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                     merged_from: dict | None = None) -> list:
    """Nodes with every Conv → BatchNormalization pair merged into one Conv.

    ``known`` (the initializers) gains the new weights and biases; ``keep`` are
    values that must stay visible (the graph outputs); ``merged_from`` records both nodes
    under the merged node's output (provenance)."""
    maps = _node_maps(nodes)
    out = []
    for node in nodes:
        conv = _conv_before(node, "BatchNormalization", maps, keep, known)
        if (conv is None or len(node.output) > 1 and any(node.output[1:])
                or attributes(node).get("training_mode", 0)     # batch statistics: refused later
                or not all(n in known for n in node.input[1:5] if n)):
            out.append(node)
            continue
        gamma, beta, mean, var = (known[n].astype(np.float64) for n in node.input[1:5])
        eps = _f32_attribute(node, "epsilon", 1e-5)
        scale = gamma / np.sqrt(var + eps)
        weights, bias = _weights_and_bias(conv, known)
        merged = _folded_conv(conv, known, weights * scale.reshape(-1, *([1] * (weights.ndim - 1))),
                              (bias - mean) * scale + beta, node.output[0],
                              (f"{node.output[0]}.bn_weights", f"{node.output[0]}.bias"),
                              conv.name or node.name)
        if merged_from is not None:
            merged_from[node.output[0]] = (onnx_node(conv), onnx_node(node))
        out[out.index(conv)] = merged
    return out


def fold_hard_sigmoids(nodes: list, known: dict[str, np.ndarray], keep: set[str],
                       opset: int, merged_from: dict | None = None) -> list:
    """Nodes with every Conv → HardSigmoid pair (the Conv's weights and bias known, its
    output read by the HardSigmoid alone and not a graph output) turned into one Conv of
    scaled weights and bias and a Clip to [0, 1] (module docstring).  ``known`` gains the
    new weights, bias and (from opset 11, where Clip takes them as inputs) bounds;
    ``merged_from`` records the HardSigmoid under the Clip's output (provenance; the Conv
    keeps its own, a BatchNorm folded into it included)."""
    from onnx import helper
    maps = _node_maps(nodes)
    out = list(nodes)
    for node in nodes:
        conv = _conv_before(node, "HardSigmoid", maps, keep, known)
        if conv is None:
            continue
        alpha, beta = _f32_attribute(node, "alpha", 0.2), _f32_attribute(node, "beta", 0.5)
        weights, bias = _weights_and_bias(conv, known)
        # the Conv keeps its output's name (the HardSigmoid alone read it), now the scaled sum
        z, y = conv.output[0], node.output[0]
        scaled = _folded_conv(conv, known, weights * alpha, bias * alpha + beta, z,
                              (f"{z}.hsig_weights", f"{z}.hsig_bias"), conv.name or node.name)
        if opset >= 11:
            known[f"{y}.min"], known[f"{y}.max"] = np.float32(0.0), np.float32(1.0)
            clip = helper.make_node("Clip", [z, f"{y}.min", f"{y}.max"], [y], name=node.name)
        else:
            clip = helper.make_node("Clip", [z], [y], name=node.name, min=0.0, max=1.0)
        if merged_from is not None:
            merged_from[y] = (onnx_node(node),)
        out[out.index(conv)] = scaled
        out[out.index(node)] = clip
    return out


def fold_node(b: GraphBuilder, node, attrs: dict) -> bool:
    """Fold ``node`` if it can be: its outputs become known arrays.  Returns whether it did."""
    if node.op_type in ("Shape", "Size") and node.input[0] and not b.is_known(node.input[0]):
        shape = np.asarray(b.shape(node.input[0]), np.int64)
        if node.op_type == "Size":
            b.known[node.output[0]] = np.asarray(np.prod(shape), np.int64)
        else:
            start, end = attrs.get("start", 0), attrs.get("end", None)
            b.known[node.output[0]] = shape[start:end]
        return True
    if node.op_type == "Constant":
        b.known[node.output[0]] = _evaluate(b, node, [])[0]
        return True
    inputs = [name for name in node.input if name]
    if not inputs or not all(b.is_known(name) for name in inputs):
        return False
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):    # onnx.reference has them from 19
        from vpuc.onnx_import.convert_quant import fold_quantization
        results = [fold_quantization(b, node, attrs)]
    else:
        results = _evaluate(b, node, inputs)
    for name, value in zip(node.output, results):
        if name:
            b.known[name] = np.asarray(value)
    return True


def _evaluate(b: GraphBuilder, node, inputs: list[str]) -> list[np.ndarray]:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    feeds = {name: b.known[name] for name in inputs}
    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)
                    for name, arr in feeds.items()]
    outputs = [helper.make_tensor_value_info(name, 0, None) for name in node.output if name]
    model = helper.make_model(helper.make_graph([node], "fold", graph_inputs, outputs),
                              opset_imports=[helper.make_opsetid("", b.opset)])
    try:
        return ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:             # the reference raises whatever the op's numpy code raises
        raise b.error(f"cannot fold this node over its constant inputs: {exc}") from None
