"""QuantizeLinear and DequantizeLinear: the QDQ form quantized models are exported in.

NNCF, onnxruntime's ``quantize_static`` and PyTorch's quantization export write int8 (or
uint8, int4, ...) weights behind a DequantizeLinear, and a QuantizeLinear ->
DequantizeLinear pair on each activation.  vpuc computes in floats (f16, f32 sums), so:

- **Constants** (``fold_quantization``): a DequantizeLinear or QuantizeLinear whose
  inputs are all known is folded at import exactly as ONNX defines it (onnx.reference's
  formulas, which exist there only from opset 19): ``y = (x - zero_point) * scale`` in
  f32 (``x`` and ``zero_point`` converted to f32 first), in the scale's type or
  ``output_dtype``, then stored in the model's precision like any weight;
  ``q = saturate(round_half_even(x / scale) + zero_point)``.  Per tensor, per axis
  (``axis``) and blocked (``block_size``, opset 21: each scale serves ``block_size``
  consecutive elements along ``axis``).
- **Activations** (``fake_quantized_outputs``, ``_quantize``): a QuantizeLinear whose
  output only DequantizeLinears of the same scale and zero point read becomes one fake
  quantization in f32, every op of it elementwise, so the fusion pipeline turns it into
  (part of) one generated ACT SHAVE kernel, or a DPU layer's epilogue::

      v = clamp(x / scale, qmin - zp, qmax - zp)       # round is monotone and fixes
      y = ((v + M) - M) * scale                        # integers, so clamping first is
                                                       # the same as clamping after
  ``M = 1.5 * 2^23``: for ``|v| < 2^22`` the f32 sum ``v + M`` has no fraction bits, so
  the addition rounds ``v`` half to even (the ISA's f32 add rounds to nearest even), and
  subtracting ``M`` is exact.  The DequantizeLinears are that value.  A pair after a
  Reshape, Transpose, MaxPool (``MOVES``) of a pair of the same per-tensor 8-bit parameters
  is the identity there (``_on_its_grid``) and is left out.
- **Integer values at the boundary** (int8/uint8 model inputs and outputs): a
  DequantizeLinear of a run-time int8/uint8 value is ``(Convert(x, f32) - zero_point) *
  scale`` (per tensor or per axis), ONNX's formula; a QuantizeLinear to int8/uint8 whose
  result is not only dequantized again (a model output) is the fake quantization's
  integer half, ``(v + M) - M + zero_point``, an exact integer in range, converted to the
  integer type.  Anything else (another integer type leaving the float graph, blocked or
  float8 activations) is refused, naming the node.
- **onnxruntime's QOperator form**: QLinearConv and QLinearMatMul are rewritten into the
  QDQ form before import (``qoperator.py``); MatMulInteger, ConvInteger,
  DynamicQuantizeLinear (``quantize_dynamic``'s run-time scales) and the com.microsoft
  QLinear ops are refused with a pointer to the QDQ form (``qoperator_refusal``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from vpuc.ir.graph import CONSTANT, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.onnx_import.builder import INLINE_LIMIT, GraphBuilder

# The integer types a QuantizeLinear makes (and a DequantizeLinear reads), with their ranges.
QUANT_TYPES = {np.dtype(t): (int(ml_dtypes.iinfo(t).min), int(ml_dtypes.iinfo(t).max))
               for t in (np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4)}
DEQUANT_ONLY = (np.dtype(np.int32),)           # quantized biases: read, never produced
# the integer types a run-time value can have (model inputs and outputs: boundary_types.py)
INTEGER_RESULTS = {np.dtype(np.int8): ElemType.I8, np.dtype(np.uint8): ElemType.U8}
ROUNDING_MAGIC = 1.5 * 2.0 ** 23               # (v + M) - M rounds v half to even in f32
# ops that only move or select values: a value on a quantization grid stays on it
MOVES = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "MaxPool", "Identity", "Slice")
QOPERATOR_OPS = ("QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QLinearAdd",
                 "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                 "QLinearGlobalAveragePool", "QLinearConcat", "DynamicQuantizeLinear")


def qoperator_refusal(op_type: str) -> str | None:
    """Why an op of onnxruntime's QOperator (integer operator) form is not taken, or None."""
    if op_type not in QOPERATOR_OPS:
        return None
    return (f"{op_type} (onnxruntime's QOperator form) is not supported: vpuc takes quantized "
            "models with constant scales in the QDQ form, QuantizeLinear -> DequantizeLinear "
            "around float ops (onnxruntime.quantization.quantize_static(..., "
            "quant_format=QuantFormat.QDQ)), and QLinearConv and QLinearMatMul of constant "
            "per-tensor input scales, which it rewrites into that form (qoperator.py)")


def _inputs(node) -> tuple[str, str, str | None]:
    names = list(node.input) + [""] * (3 - len(node.input))
    return names[0], names[1], names[2] or None


def _quant_type(b: GraphBuilder, node, attrs, zero_point: np.ndarray | None) -> np.dtype:
    """The integer type of a QuantizeLinear's output: its zero point's, else ``output_dtype``
    (opset 21), else uint8; types vpuc does not quantize to (float8, int32) are refused."""
    from onnx import helper
    wanted = attrs.get("output_dtype", 0)
    dtype = np.dtype(zero_point.dtype) if zero_point is not None else \
        np.dtype(helper.tensor_dtype_to_np_dtype(wanted)) if wanted else np.dtype(np.uint8)
    if wanted and np.dtype(helper.tensor_dtype_to_np_dtype(wanted)) != dtype:
        raise b.error(f"output_dtype {helper.tensor_dtype_to_np_dtype(wanted)} differs from the "
                      f"zero point's type {dtype}")
    if dtype not in QUANT_TYPES:
        raise b.error(f"quantizing to {dtype} is not supported; vpuc quantizes to "
                      f"{', '.join(str(t) for t in QUANT_TYPES)}")
    if not attrs.get("saturate", 1):
        raise b.error("saturate=0 applies to float8 types only, which vpuc does not quantize to")
    return dtype


def _broadcast(b: GraphBuilder, param: np.ndarray, rank: int, dims: tuple[int, ...], attrs,
               what: str) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a tensor of ``dims``: a scalar per
    tensor, a 1-D ``[dims[axis]]`` per axis, or (``block_size``) one value per block of that
    many elements along ``axis``, repeated."""
    param = np.asarray(param)
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = b.axis(attrs.get("axis", 1), rank)
    block = int(attrs.get("block_size", 0) or 0)
    if block <= 0:
        if param.ndim != 1 or param.shape[0] != dims[axis]:
            raise b.error(f"{what} of shape {list(param.shape)} does not fit axis {axis} of "
                          f"{list(dims)} (per tensor: one value; per axis: {dims[axis]})")
        return param.reshape(param.shape + (1,) * (rank - 1 - axis))
    blocks = -(-dims[axis] // block)
    want = dims[:axis] + (blocks,) + dims[axis + 1:]
    if param.shape != want:
        raise b.error(f"{what} of shape {list(param.shape)} does not fit blocks of {block} along "
                      f"axis {axis} of {list(dims)} (expected {list(want)})")
    return np.repeat(param, block, axis=axis).take(range(dims[axis]), axis=axis)


def _dequantize(b: GraphBuilder, node, attrs) -> np.ndarray:
    from onnx import helper
    x_name, scale_name, zp_name = _inputs(node)
    x, scale = b.array(x_name), b.array(scale_name)
    zero_point = b.array(zp_name) if zp_name else None
    if x.dtype not in QUANT_TYPES and x.dtype not in DEQUANT_ONLY:
        raise b.error(f"dequantizing {x.dtype} is not supported; vpuc dequantizes "
                      f"{', '.join(str(t) for t in (*QUANT_TYPES, *DEQUANT_ONLY))}")
    if zero_point is not None and zero_point.dtype != x.dtype:
        raise b.error(f"zero point of type {zero_point.dtype} for input of type {x.dtype}")
    scale32 = _broadcast(b, scale, x.ndim, x.shape, attrs, "scale").astype(np.float32)
    shifted = x.astype(np.float32)
    if zero_point is not None:
        shifted = shifted - _broadcast(b, zero_point, x.ndim, x.shape, attrs,
                                       "zero point").astype(np.float32)
    wanted = attrs.get("output_dtype", 0)
    out_type = helper.tensor_dtype_to_np_dtype(wanted) if wanted else scale.dtype
    return (shifted * scale32).astype(out_type)


def _quantize_array(b: GraphBuilder, node, attrs) -> np.ndarray:
    x_name, scale_name, zp_name = _inputs(node)
    x, scale = b.array(x_name), b.array(scale_name)
    zero_point = b.array(zp_name) if zp_name else None
    dtype = _quant_type(b, node, attrs, zero_point)
    qmin, qmax = QUANT_TYPES[dtype]
    scale32 = _broadcast(b, scale, x.ndim, x.shape, attrs, "scale").astype(np.float32)
    zp = 0.0 if zero_point is None else _broadcast(b, zero_point, x.ndim, x.shape, attrs,
                                                   "zero point").astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rounded = np.rint(x.astype(np.float32) / scale32).astype(np.float64)
    return np.clip(rounded + zp, qmin, qmax).astype(dtype)


def fold_quantization(b: GraphBuilder, node, attrs) -> np.ndarray | None:
    """The folded output of a QuantizeLinear or DequantizeLinear over known inputs."""
    return _dequantize(b, node, attrs) if node.op_type == "DequantizeLinear" \
        else _quantize_array(b, node, attrs)


def _same_params(known: dict, q, dq) -> bool:
    """Whether DequantizeLinear ``dq`` undoes QuantizeLinear ``q``: equal known scale and
    zero point (by value) and the same axis and block attributes."""
    from vpuc.onnx_import.fold import attributes
    q_in, dq_in = _inputs(q), _inputs(dq)
    for a, c in ((q_in[1], dq_in[1]), (q_in[2], dq_in[2])):
        if (a is None) != (c is None):
            return False
        if a is not None and (a not in known or c not in known
                              or known[a].dtype != known[c].dtype
                              or not np.array_equal(known[a], known[c])):
            return False
    q_attrs, dq_attrs = attributes(q), attributes(dq)
    return all(q_attrs.get(k, d) == dq_attrs.get(k, d) for k, d in (("axis", 1), ("block_size", 0)))


def fake_quantized_outputs(nodes: list, known: dict, keep: set[str]) -> dict[str, bool]:
    """The QuantizeLinear outputs that are only ever dequantized again, by DequantizeLinears
    of the same parameters, and are no model output: fake quantizations; each mapped to
    whether it is the identity (``_on_its_grid``)."""
    readers: dict[str, list] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    producer = {out: node for node in nodes for out in node.output}
    fake = {}
    for node in nodes:
        if node.op_type != "QuantizeLinear" or node.output[0] in keep:
            continue
        users = readers.get(node.output[0], [])
        if users and all(u.op_type == "DequantizeLinear" and u.input[0] == node.output[0]
                         and _same_params(known, node, u) for u in users):
            fake[node.output[0]] = _on_its_grid(node, known, producer, fake)
    return fake


def _on_its_grid(q, known: dict, producer: dict, fake: dict) -> bool:
    """Whether QuantizeLinear ``q`` reads values already on its grid: a move (``MOVES``) of a
    fake quantization of the same per-tensor parameters, of at most 256 levels.  Such a
    value is ``k scale`` rounded to f16 (or f32), within ``|k| 2^-11 <= 1/8`` of a step of
    ``k scale``, so quantizing it again gives it back: quantizers write these pairs around
    every Reshape, Transpose and MaxPool, and vpuc leaves them out."""
    move = producer.get(q.input[0])
    if move is None or move.op_type not in MOVES or not move.input:
        return False
    dq = producer.get(move.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in fake:
        return False
    scale = known.get(_inputs(q)[1])
    zero_point = known.get(_inputs(q)[2]) if _inputs(q)[2] else np.zeros((), np.uint8)
    return (scale is not None and zero_point is not None and np.asarray(scale).size == 1
            and np.asarray(zero_point).size == 1 and np.dtype(zero_point.dtype) in QUANT_TYPES
            and np.diff(QUANT_TYPES[np.dtype(zero_point.dtype)])[0] < 256
            and _same_params(known, q, dq))


def _f32_constant(b: GraphBuilder, array: np.ndarray, hint: str) -> str:
    """An f32 Constant even in an f16 graph: the scale and bounds of the f32 steps."""
    stored = np.asarray(array, np.float32)
    name = b.fresh(f"{b.node.output[0]}.{hint}")
    ttype = TensorType(tuple(stored.shape), ElemType.F32, DimsOrder.identity(stored.ndim))
    if stored.size <= INLINE_LIMIT:
        init = ConstInit(values=tuple(float(v) for v in stored.reshape(-1)))
    else:
        init = ConstInit(path=name + ".npy")
        b.arrays[name] = stored
    b.graph.ops.append(GraphOp(CONSTANT, name, type=ttype, const=init))
    b.types[name] = ttype
    return name


def _quantize(b: GraphBuilder, node, attrs) -> None:
    x_name, scale_name, zp_name = _inputs(node)
    fake = node.output[0] in b.fake_quantized
    if attrs.get("block_size", 0):
        raise b.error("blocked quantization (block_size) of a run-time value is not supported; "
                      "per tensor and per axis are")
    if fake and b.fake_quantized[node.output[0]]:   # on its grid already: the identity
        attrs.get("axis"), attrs.get("saturate"), attrs.get("output_dtype")
        b.alias(node.output[0], x_name)
        return
    x = b.value(x_name)
    dims = b.shape(x_name)
    zero_point = b.array(zp_name) if zp_name else None
    dtype = _quant_type(b, node, attrs, zero_point)
    if not fake and dtype not in INTEGER_RESULTS:
        raise b.error(f"its {dtype} output would leave the float graph (a model output, or read "
                      "by something other than a DequantizeLinear of the same scale and zero "
                      "point); vpuc computes integer values of type "
                      f"{', '.join(str(t) for t in INTEGER_RESULTS)} only, and runs other "
                      "QuantizeLinear -> DequantizeLinear pairs as fake quantization in floats")
    qmin, qmax = QUANT_TYPES[dtype]
    scale = _broadcast(b, b.array(scale_name), len(dims), dims, attrs, "scale").astype(np.float32)
    zp = np.zeros((), np.float64) if zero_point is None else \
        _broadcast(b, zero_point, len(dims), dims, attrs, "zero point").astype(np.float64)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise b.error("scale must be positive and finite")
    elem = b.types[x].elem
    xf = x if elem is ElemType.F32 else b.op("Convert", [x], {"to": ElemType.F32})
    scale_const = _f32_constant(b, scale, "scale")
    v = b.op("Divide", [xf, scale_const])
    if zp.ndim == 0:
        v = b.op("Clamp", [v], {"min": float(qmin - zp), "max": float(qmax - zp)})
    else:
        v = b.op("Maximum", [v, _f32_constant(b, qmin - zp, "low")])
        v = b.op("Minimum", [v, _f32_constant(b, qmax - zp, "high")])
    magic = _f32_constant(b, np.float32(ROUNDING_MAGIC), "round")
    steps = b.op("Subtract", [b.op("Add", [v, magic]), magic])
    out = node.output[0]
    if not fake:
        # the integer half: steps + zp is an integer in [qmin, qmax], exact in f32, so the
        # Convert's truncation keeps it
        if np.any(zp != 0):
            steps = b.op("Add", [steps, _f32_constant(b, zp, "zero_point")])
        b.op("Convert", [steps], {"to": INTEGER_RESULTS[dtype]}, out=out)
        return
    y = b.op("Multiply", [steps, scale_const], out=out if elem is ElemType.F32 else None)
    if elem is not ElemType.F32:
        b.op("Convert", [y], {"to": elem}, out=out)


def _dequantize_value(b: GraphBuilder, node, attrs) -> None:
    source = node.input[0]
    if source in b.fake_quantized:
        attrs.get("axis"), attrs.get("block_size")   # equal to the QuantizeLinear's (checked)
        b.alias(node.output[0], source)
        return
    x = b.value(source)
    elem = b.types[x].elem
    if elem not in INTEGER_RESULTS.values():
        raise b.error(f"'{source}' is a run-time {elem} value; vpuc dequantizes constants, "
                      "the output of a QuantizeLinear of the same scale and zero point (the "
                      "QDQ form), and run-time int8 and uint8 values")
    _, scale_name, zp_name = _inputs(node)
    dims = b.shape(source)
    zero_point = b.array(zp_name) if zp_name else None
    if zero_point is not None and INTEGER_RESULTS.get(np.dtype(zero_point.dtype)) is not elem:
        raise b.error(f"zero point of type {zero_point.dtype} for input '{source}' of type {elem}")
    scale = _broadcast(b, b.array(scale_name), len(dims), dims, attrs, "scale").astype(np.float32)
    # ONNX: y = (x - zero_point) * scale, both converted to f32 first; x - zp is exact in f32
    v = b.op("Convert", [x], {"to": ElemType.F32})
    if zero_point is not None and np.any(zero_point != 0):
        zp = _broadcast(b, zero_point, len(dims), dims, attrs, "zero point")
        v = b.op("Subtract", [v, _f32_constant(b, zp.astype(np.float32), "zero_point")])
    out = node.output[0]
    y = b.op("Multiply", [v, _f32_constant(b, scale, "scale")],
             out=out if b.elem is ElemType.F32 else None)
    if b.elem is not ElemType.F32:
        b.op("Convert", [y], {"to": b.elem}, out=out)


QUANT_CONVERTERS = {"QuantizeLinear": _quantize, "DequantizeLinear": _dequantize_value}


def fold_constant_quantizations(b: GraphBuilder, nodes: list) -> list:
    """``nodes`` without the QuantizeLinear and DequantizeLinear nodes over initializers
    (and over each other's folds), their outputs in ``b.known``: run before the import-time
    rewrites, so a BatchNormalization after a Conv of quantized weights still folds into it.
    A Constant node's tensor that a QuantizeLinear or DequantizeLinear reads (PyTorch's
    export writes scales and zero points so) is known from here on too; the node stays, and
    folds to the same array later."""
    from onnx import numpy_helper
    from vpuc.onnx_import.attribute_use import AttributeUse
    from vpuc.onnx_import.fold import attributes
    quant_inputs = {name for node in nodes if node.op_type in ("QuantizeLinear", "DequantizeLinear")
                    for name in node.input}
    out = []
    for node in nodes:
        if node.op_type == "Constant" and node.output[0] in quant_inputs \
                and [a.name for a in node.attribute] == ["value"]:
            b.known[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and \
                all(name in b.known for name in node.input if name):
            b.node = node
            b.known[node.output[0]] = fold_quantization(b, node, AttributeUse(attributes(node)))
        else:
            out.append(node)
    b.node = None
    return out
