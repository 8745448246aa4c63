"""Import-time folding of a per-output-channel scale and shift after a Conv into its
weights and bias.

Caffe2-exported models (the ``onnx`` package's Inception v2 and DenseNet-121) write a
BatchNorm as ``Mul(y, s)`` then ``Add(., t)`` after the Conv, ``s`` and ``t`` of one value
per output channel, often computed by ``ConstantOfShape`` and ``Unsqueeze`` nodes rather
than stored.  Left as they are they run as ACT SHAVE segments over whole maps between
the Conv and its readers.  As OpenVINO's ``ConvolutionMultiplyFusion`` and
``ConvAddFusion`` and onnxruntime's ``ConvMulFusion`` / ``ConvAddFusion`` do, a Conv
``y = w * x + b`` read by such a Mul alone becomes ``w' = w s``, ``b' = b s``; read by
such an Add alone, ``b' = b + t``; a chain folds step by step.

Rounding (what changes against the unfolded graph): the scaled weights and bias are
computed in float64 from the f32 initializers (an f32 times an f32 is exact there) and
rounded once to f32, then, in an f16 program, once to f16 as any weights are.  The
unfolded f16 program instead rounds the Conv's output, the product and the sum to f16:
three roundings of the output against one rounding of each weight.

A constant here is an initializer, or the output of a ``Constant``, ``ConstantOfShape``,
``Unsqueeze``, ``Reshape``, ``Squeeze``, ``Identity``, ``Expand`` or ``Cast`` node over
constants, evaluated with ``onnx.reference`` (the standard's own definition); the nodes
that computed it stay in the graph and fold to unused constants.

A BatchNormalization that no Conv precedes (DenseNet's pre-activation blocks, after a
Concat) takes such a Mul and Add into its gamma and beta the same way, so the block's
normalization is one per-channel scale and shift of ``[1, C, 1, 1]`` constants, which
an NHWC ACT segment reads as they are (``vpuc/fusion/schedule_layouts.py``).
"""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import.builder import onnx_node
from vpuc.onnx_import.fold import _conv_before, _folded_conv, _node_maps, _weights_and_bias

# the shape and copy ops whose output is constant when their inputs are
CONSTANT_OPS = ("Constant", "ConstantOfShape", "Unsqueeze", "Reshape", "Squeeze", "Identity",
                "Expand", "Cast")


class Constants:
    """The values of constant ONNX values: initializers, or small chains of ``CONSTANT_OPS``
    over them, each evaluated once by ``onnx.reference``."""

    def __init__(self, known: dict[str, np.ndarray], producer: dict, opset: int):
        self.known, self.producer, self.opset = known, producer, opset
        self.evaluated: dict[str, np.ndarray | None] = {}

    def get(self, name: str) -> np.ndarray | None:
        if name in self.known:
            return self.known[name]
        if name not in self.evaluated:
            self.evaluated[name] = None          # a cycle or a failure stays unknown
            self.evaluated[name] = self._evaluate(name)
        return self.evaluated[name]

    def _evaluate(self, name: str) -> np.ndarray | None:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        node = self.producer.get(name)
        if node is None or node.op_type not in CONSTANT_OPS or node.domain not in ("", "ai.onnx"):
            return None
        feeds = {}
        for i in node.input:
            if i:
                value = self.get(i)
                if value is None:
                    return None
                feeds[i] = np.asarray(value)
        inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                  for i, a in feeds.items()]
        outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
        model = helper.make_model(helper.make_graph([node], "constant", inputs, outputs),
                                  opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            results = ReferenceEvaluator(model).run(None, feeds)
        except Exception:                       # left to the import, which reports it located
            return None
        return np.asarray(dict(zip([o for o in node.output if o], results))[name])


def per_channel(value: np.ndarray | None, channels: int, rank: int) -> np.ndarray | None:
    """``value`` as ``channels`` float64 factors when it broadcasts against a Conv output of
    ``rank`` dims and ``channels`` channels along the channel axis alone (a scalar counts),
    the output's shape unchanged; else None."""
    if value is None or not np.issubdtype(value.dtype, np.floating) or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for axis, d in enumerate(shape) if axis != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.astype(np.float64).reshape(-1), (channels,))


def fold_channel_affines(nodes: list, known: dict[str, np.ndarray], keep: set[str], opset: int,
                         merged_from: dict | None = None, ranks: dict[str, int] | None = None
                         ) -> list:
    """Nodes with every Conv → Mul or Add of a per-output-channel constant (the Conv's output
    read by it alone, not a graph output; ``keep``) merged into one Conv of scaled weights
    and bias (module docstring), and every BatchNormalization → such a Mul or Add (a
    pre-activation block's, after a Concat) into one BatchNormalization of scaled gamma and
    beta (``ranks``: the ranks of graph values, the BatchNormalization's output's needed);
    chains fold in turn.  ``known`` gains the folded parameters; ``merged_from`` records
    every folded node under the merged node's output."""
    consumers, producer = _node_maps(nodes)
    constants = Constants(known, producer, opset)
    out = list(nodes)
    for node in nodes:
        if node.op_type not in ("Mul", "Add") or len(node.input) != 2:
            continue
        for side in (0, 1):
            source = producer.get(node.input[side])
            if source is None or consumers[source.output[0]] != 1 or source.output[0] in keep:
                continue
            if source.op_type == "Conv":
                merged = _into_conv(node, side, source, known, constants, consumers, producer, keep)
            elif source.op_type == "BatchNormalization":
                merged = _into_batch_norm(node, source, known, constants.get(node.input[1 - side]),
                                          (ranks or {}).get(source.output[0]))
            else:
                merged = None
            if merged is None:
                continue
            if merged_from is not None:
                merged_from[node.output[0]] = merged_from.pop(
                    source.output[0], (onnx_node(source),)) + (onnx_node(node),)
            out[out.index(source)] = merged
            out.remove(node)
            producer[node.output[0]] = merged
            break
    return out


def _into_conv(node, side: int, conv, known, constants: Constants, consumers, producer, keep):
    """The Conv ``conv`` with ``node`` (a Mul or Add reading it at ``side``) folded in, or
    None when the other operand is not a per-output-channel constant."""
    if _conv_before(_as_reader(node, side), node.op_type, (consumers, producer), keep,
                    known) is not conv:
        return None
    weights, bias = _weights_and_bias(conv, known)
    factors = per_channel(constants.get(node.input[1 - side]), weights.shape[0], weights.ndim)
    if factors is None:
        return None
    if node.op_type == "Mul":
        weights = weights * factors.reshape(-1, *([1] * (weights.ndim - 1)))
        bias = bias * factors
    else:
        bias = bias + factors
    y = node.output[0]
    return _folded_conv(conv, known, weights, bias, y, (f"{y}.affine_weights", f"{y}.affine_bias"),
                        conv.name or node.name)


def _into_batch_norm(node, norm, known, value: np.ndarray | None, rank: int | None):
    """The inference BatchNormalization ``norm`` with ``node`` (a Mul or Add of ``value``
    reading it) folded into its gamma and beta: ``BN(x) c = (x - mean) s c + beta c`` with
    ``s = gamma / sqrt(var + eps)``, so ``gamma' = gamma c``, ``beta' = beta c``; ``+ t``:
    ``beta' = beta + t``.  None when it cannot."""
    from onnx import helper
    from vpuc.onnx_import.fold import attributes
    if (rank is None or len(norm.input) < 5 or any(norm.output[1:])
            or attributes(norm).get("training_mode", 0)
            or not all(n in known for n in norm.input[1:5])):
        return None
    gamma, beta = (known[n].astype(np.float64) for n in norm.input[1:3])
    factors = per_channel(value, gamma.shape[0], rank)
    if factors is None:
        return None
    if node.op_type == "Mul":
        gamma, beta = gamma * factors, beta * factors
    else:
        beta = beta + factors
    y = node.output[0]
    known[f"{y}.gamma"], known[f"{y}.beta"] = gamma.astype(np.float32), beta.astype(np.float32)
    merged = helper.make_node("BatchNormalization",
                              [norm.input[0], f"{y}.gamma", f"{y}.beta", *norm.input[3:5]], [y],
                              name=norm.name or node.name)
    merged.attribute.extend(norm.attribute)
    return merged


def _as_reader(node, side: int):
    """``node`` with the input at ``side`` first, as ``_conv_before`` looks for the Conv."""
    if side == 0:
        return node
    from onnx import helper
    swapped = helper.make_node(node.op_type, [node.input[1], node.input[0]], list(node.output),
                               name=node.name)
    return swapped
