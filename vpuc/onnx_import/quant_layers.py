"""QDQ convolutions as integer layers: ``DQ(x_q) -> Conv -> [Relu] -> Q`` as one
``QConvolution`` (``vpuc/ir/graph_ops_quant.py``) the DPU runs in its integer mode.

``integer_convolutions`` rewrites the ONNX node list before the constant Q/DQ are folded
(the weights are still int8 there).  A Conv is taken when:

- its input is a DequantizeLinear of a run-time uint8/int8 value (per tensor), whose
  integers the layer reads directly;
- its weights are a DequantizeLinear of a constant int8 OIHW tensor, zero point 0, per
  tensor or per output channel (axis 0), and its bias (if any) one of a constant int32
  vector of scale ``s_x * s_w`` and zero point 0, as ``quantize_static`` writes them;
- ``group`` is 1, ``auto_pad`` unset, the kernel within the NCE's 11 x 11, padding within
  the window, input and output channels multiples of 16 (the DPU's channel granule; other
  layers would need padded integer channels) and 16 output channels' weights within
  ``KSPLIT_BYTES`` (a layer needing its input channels split would need i32 partial sums:
  it stays in f16);
- its output (through at most one Relu) is read only by QuantizeLinears of one per-tensor
  uint8/int8 scale and zero point, and is no model output;
- the requantization scale ``s_x * s_w[o] / s_y`` has a fixed-point form on NPU37XX
  (``vpuc/ir/fixed_point.py``);
- it reads another such layer's output, feeds one, or shares its quantized input with
  one (``_in_chains``: a layer alone between float ops stays f16).

The Conv, Relu and QuantizeLinears become one node ``VpucQConvolution`` writing the (first)
QuantizeLinear's output, the others Identity of it.  The QuantizeLinear before the layer
then has a reader that is no DequantizeLinear, so it takes ``convert_quant``'s integer
half (its uint8/int8 result leaves the float graph), and the DequantizeLinears after the
layer dequantize a run-time integer value: integers flow only between such ops, and from
one integer layer straight into the next.  Anything else stays as it was: the f16 fake
quantization is the fallback.
"""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.ir.fixed_point import fixed_point_scale
from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder, onnx_node

OP_TYPE = "VpucQConvolution"
CHANNEL_GRANULE = 16
MAX_KERNEL = 11
KSPLIT_BYTES = 256 << 10       # a quarter of the default CMX budget (1 MiB)
EIGHT_BIT = {np.dtype(np.uint8): ElemType.U8, np.dtype(np.int8): ElemType.I8}


def _scalar(known: dict, name: str | None):
    value = known.get(name) if name else None
    return None if value is None or np.asarray(value).size != 1 else np.asarray(value).reshape(())


def _dq_parts(node, known: dict):
    """(input, scale, zero point or None) of a DequantizeLinear, scale and zero point known."""
    names = list(node.input) + [""] * (3 - len(node.input))
    scale = known.get(names[1])
    if scale is None or (names[2] and names[2] not in known):
        return None
    return names[0], np.asarray(scale), (np.asarray(known[names[2]]) if names[2] else None)


def _activation(node, known: dict):
    """(scale, zero point) of a per-tensor 8-bit Q or DQ on a run-time value, or None."""
    from vpuc.onnx_import.fold import attributes
    parts = _dq_parts(node, known)
    if parts is None or parts[1].size != 1 or parts[2] is None or parts[2].size != 1 \
            or np.dtype(parts[2].dtype) not in EIGHT_BIT or attributes(node).get("block_size", 0):
        return None
    return float(parts[1].reshape(())), parts[2].reshape(())


def _conv_window(conv, kernel: tuple[int, int]):
    """(strides, pads_begin, pads_end, dilations) of a plain Conv, or None."""
    from vpuc.onnx_import.fold import attributes
    attrs = attributes(conv)
    if attrs.get("group", 1) != 1 or attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return None
    strides = tuple(attrs.get("strides", (1, 1)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
        return None
    begin, end = pads[:2], pads[2:]
    if max(kernel) > MAX_KERNEL or any(max(begin[a], end[a]) > dil[a] * (kernel[a] - 1)
                                       for a in (0, 1)):
        return None
    return strides, begin, end, dil


def _match(conv, producer: dict, readers: dict, known: dict, outputs: set):
    """The rewrite of ``conv`` as (node, removed nodes, identities), or None."""
    from onnx import helper
    ops = [producer.get(name) for name in conv.input]
    if len(ops) < 2 or any(p is None or p.op_type != "DequantizeLinear" for p in ops if p) \
            or ops[0] is None or ops[1] is None:
        return None
    dqx, dqw = ops[0], ops[1]
    x_params = _activation(dqx, known)
    wparts = _dq_parts(dqw, known)
    if x_params is None or dqx.input[0] in known or wparts is None:
        return None
    wq, wscale, wzp = known.get(dqw.input[0]), wparts[1].reshape(-1), wparts[2]
    if wq is None or wq.dtype != np.int8 or wq.ndim != 4 or (wzp is not None and np.any(wzp)):
        return None
    o, i, kh, kw = wq.shape
    if wscale.size not in (1, o) or (wscale.size == o and o > 1 and
                                     _axis(dqw) not in (0, -4)):
        return None
    window = _conv_window(conv, (kh, kw))
    if window is None or i % CHANNEL_GRANULE or o % CHANNEL_GRANULE \
            or CHANNEL_GRANULE * i * kh * kw > KSPLIT_BYTES:
        return None
    sx, zx = x_params
    bias = np.zeros(o, np.int32)
    if len(ops) > 2 and ops[2] is not None:
        bparts = _dq_parts(ops[2], known)
        bq = known.get(ops[2].input[0])
        if bparts is None or bq is None or bq.dtype != np.int32 or bq.shape != (o,) \
                or (bparts[2] is not None and np.any(bparts[2])):
            return None
        expected = np.broadcast_to(np.float32(sx) * wscale.astype(np.float32), (o,))
        if not np.allclose(np.broadcast_to(bparts[1].reshape(-1), (o,)), expected, rtol=1e-6):
            return None
        bias = bq
    chain, current = [conv], conv.output[0]
    users = readers.get(current, [])
    if len(users) == 1 and users[0].op_type == "Relu" and current not in outputs:
        chain.append(users[0])
        current = users[0].output[0]
        users = readers.get(current, [])
    if not users or current in outputs or any(u.op_type != "QuantizeLinear"
                                              or u.input[0] != current for u in users):
        return None
    y_params = [_activation(u, known) for u in users]
    if y_params[0] is None or any(p is None or p[0] != y_params[0][0] or p[1] != y_params[0][1]
                                  or p[1].dtype != y_params[0][1].dtype for p in y_params):
        return None
    sy, zy = y_params[0]
    requant = (np.float64(sx) * wscale.astype(np.float64) / np.float64(sy)).astype(np.float32)
    requant = np.broadcast_to(requant, (o,)).copy()
    try:
        for s in requant:
            fixed_point_scale(float(s))
    except VpucError:
        return None
    folded = bias.astype(np.int64) - int(zx) * wq.reshape(o, -1).astype(np.int64).sum(1)
    if np.abs(folded).max(initial=0) >= 2 ** 31:
        return None
    names = {part: f"{conv.output[0]}.q{part}" for part in ("weights", "bias", "scale")}
    known[names["weights"]], known[names["bias"]] = wq, np.asarray(bias, np.int32)
    known[names["scale"]] = requant
    strides, begin, end, dil = window
    node = helper.make_node(
        OP_TYPE, [dqx.input[0], names["weights"], names["bias"], names["scale"]],
        [users[0].output[0]], name=conv.name, strides=list(strides), pads=list(begin + end),
        dilations=list(dil), in_zero_point=int(zx), out_zero_point=int(zy),
        out_type=EIGHT_BIT[np.dtype(zy.dtype)].value, relu=int(len(chain) > 1))
    identities = [helper.make_node("Identity", [users[0].output[0]], [u.output[0]])
                  for u in users[1:]]
    return node, chain + users, identities


def _axis(node) -> int:
    from vpuc.onnx_import.fold import attributes
    return attributes(node).get("axis", 1)


def integer_convolutions(nodes: list, known: dict, outputs: set, merged_from: dict) -> list:
    """``nodes`` with each QDQ convolution this module takes as one ``VpucQConvolution``
    node (the module docstring says which); DequantizeLinears left unread dropped."""
    producer = {out: node for node in nodes for out in node.output}
    readers: dict[str, list] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = {}
    for node in nodes:
        if node.op_type == "Conv":
            match = _match(node, producer, readers, known, outputs)
            if match is not None:
                found[id(node)] = match
    replaced: dict[int, list] = {}
    removed: set[int] = set()
    for new, gone, identities in _in_chains(list(found.values())):
        first_quantize = gone[len(gone) - len(identities) - 1]   # before any reader of its output
        replaced[id(first_quantize)] = [new] + identities
        removed.update(id(n) for n in gone)
        merged_from[new.output[0]] = tuple(onnx_node(n) for n in gone[:len(gone) - len(identities)])
    if not replaced:
        return nodes
    out = []
    for node in nodes:
        if id(node) in replaced:
            out.extend(replaced[id(node)])
        elif id(node) not in removed:
            out.append(node)
    return _without_unread_dequantizations(out, outputs)


def _in_chains(matches: list) -> list:
    """The matches that read another match's integers, feed one, or share their quantized
    input with one.  An isolated layer between float layers would move both its
    neighbours' quantizations (the QuantizeLinear's integer half before it, the
    DequantizeLinear after it) into ACT SHAVE kernels of u8 loads and stores, which cost
    more than its DPU time saves (MobileNetV3-Small at 224: 2,701,309 cycles with its 18
    integer layers, 2,619,043 with the 10 in company, 2,586,566 in f16 only)."""
    writes = {}
    for new, _, identities in matches:
        for name in [new.output[0]] + [i.output[0] for i in identities]:
            writes[name] = new
    reads: dict[str, list] = {}
    for new, _, _ in matches:
        reads.setdefault(new.input[0], []).append(new)
    kept = []
    for match in matches:
        new, _, identities = match
        outs = [new.output[0]] + [i.output[0] for i in identities]
        if new.input[0] in writes or len(reads[new.input[0]]) > 1 \
                or any(name in reads for name in outs):
            kept.append(match)
    return kept


def _without_unread_dequantizations(nodes: list, outputs: set) -> list:
    read = {name for node in nodes for name in node.input} | outputs
    return [n for n in nodes if n.op_type != "DequantizeLinear" or n.output[0] in read]


def convert_qconvolution(b: GraphBuilder, node, attrs) -> None:
    from vpuc.onnx_import.convert_quant import _f32_constant
    x_name, w_name, bias_name, scale_name = node.input
    pads = list(attrs.get("pads"))
    b.op("QConvolution", [b.value(x_name), b.constant(b.array(w_name), w_name),
                          b.constant(b.array(bias_name), bias_name),
                          _f32_constant(b, b.array(scale_name), "requant")],
         {"strides": tuple(attrs.get("strides")), "pads_begin": tuple(pads[:2]),
          "pads_end": tuple(pads[2:]), "dilations": tuple(attrs.get("dilations")),
          "in_zero_point": int(attrs.get("in_zero_point")),
          "out_zero_point": int(attrs.get("out_zero_point")),
          "out": ElemType(attrs.get("out_type")), "relu": bool(attrs.get("relu"))},
         out=node.output[0])


QUANT_LAYER_CONVERTERS = {OP_TYPE: convert_qconvolution}
