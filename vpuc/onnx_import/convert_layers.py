"""ONNX layer ops → graph-dialect layers: Conv, Gemm, MatMul, pools, Softmax, shapes.

Shapes come from the graph values, never from ONNX's shape inference: the
graph dialect's own rules (``vpuc/ir/graph_ops.py``) type every op the
builder adds, so what is imported is what the verifier will accept.  Shape
arguments (Reshape's target, Squeeze's axes …) must be constants by the time a
node is converted: ``fold.py`` computes them from Shape subgraphs first.
"""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import.builder import GraphBuilder


def _pads_2d(b: GraphBuilder, attrs: dict, in_hw, kernel, strides, dilations):
    """(pads_begin, pads_end) for a 2-D window op, ``auto_pad`` included."""
    auto = attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise b.error(f"pads {pads}: expected 4 values for a 2-D window")
        return (pads[0], pads[1]), (pads[2], pads[3])
    if auto == "VALID":
        return (0, 0), (0, 0)
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


def _window_attrs(b, node, attrs, kernel):
    rank = len(b.shape(node.input[0]))
    if rank != 4 or len(kernel) != 2:
        raise b.error(f"only 2-D windows over NCHW tensors are supported; this one is "
                      f"{len(kernel)}-D over rank {rank}")
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    begin, end = _pads_2d(b, attrs, b.shape(node.input[0])[2:], kernel, strides, dilations)
    return strides, dilations, begin, end


def _conv(b, node, attrs):
    weights = b.array(node.input[1])
    group = attrs.get("group", 1)
    if group != 1:
        from vpuc.onnx_import.convert_nn import grouped_conv
        grouped_conv(b, node, attrs, weights, group)
        return
    strides, dilations, begin, end = _window_attrs(b, node, attrs, weights.shape[2:])
    x = b.value(node.input[0])
    conv = b.op("Convolution", [x, b.value(node.input[1])],
                {"strides": strides, "pads_begin": begin, "pads_end": end, "dilations": dilations},
                out=None if len(node.input) > 2 and node.input[2] else node.output[0])
    if len(node.input) > 2 and node.input[2]:
        bias = b.array(node.input[2]).reshape(1, -1, 1, 1)
        b.op("Add", [conv, b.constant(bias, node.input[2])], out=node.output[0])


def _matmul(b, node, attrs):
    a, c = (b.value(n) for n in node.input)
    if len(b.shape(node.input[0])) < 2 or len(b.shape(node.input[1])) < 2:
        raise b.error("MatMul of a rank-1 operand is not supported; reshape it to rank 2")
    b.op("MatMul", [a, c], out=node.output[0])


def _gemm(b, node, attrs):
    """Y = alpha * op(A) @ op(B) + beta * C."""
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))
    has_c = len(node.input) > 2 and bool(node.input[2])
    if b.is_known(node.input[1]) and trans_b:      # a constant B is stored transposed once
        rhs = b.constant(np.ascontiguousarray(b.array(node.input[1]).T), node.input[1] + ".T")
        trans_b = False
    else:
        rhs = b.value(node.input[1])
    last = not has_c and alpha == 1.0
    y = b.op("MatMul", [b.value(node.input[0]), rhs], {"transpose_a": trans_a, "transpose_b": trans_b},
             out=node.output[0] if last else None)
    if alpha != 1.0:
        scale = b.constant(np.asarray(alpha, np.float32), node.output[0] + ".alpha")
        y = b.op("Multiply", [y, scale], out=None if has_c else node.output[0])
    if has_c:
        if b.is_known(node.input[2]):
            c = b.constant(beta * b.array(node.input[2]).astype(np.float32), node.input[2])
        else:
            c = b.value(node.input[2])
            if beta != 1.0:
                c = b.op("Multiply", [c, b.constant(np.asarray(beta, np.float32), node.output[0] + ".beta")])
        b.op("Add", [y, c], out=node.output[0])


def _max_pool(b, node, attrs):
    if len(node.output) > 1 and node.output[1]:
        raise b.error("MaxPool's Indices output is not supported")
    kernel = tuple(attrs["kernel_shape"])
    strides, dilations, begin, end = _window_attrs(b, node, attrs, kernel)
    if dilations != (1, 1):
        raise b.error(f"MaxPool dilations {list(dilations)} are not supported")
    if attrs.get("ceil_mode", 0):
        # Padding with -inf at the end is what ceil_mode adds: one more window where the
        # last one would start inside the input or its left padding.
        h, w = b.shape(node.input[0])[2:]
        extra = [ceil_extra(size, bb, e, k, s) for size, bb, e, k, s in zip((h, w), begin, end, kernel, strides)]
        if any(x < 0 for x in extra):
            b.beside_shape_inference(node.output[0])
        end = tuple(e + max(x, 0) for e, x in zip(end, extra))
    b.op("MaxPool", [b.value(node.input[0])],
         {"kernel": kernel, "strides": strides, "pads_begin": begin, "pads_end": end}, out=node.output[0])


def ceil_extra(size: int, begin: int, end: int, k: int, s: int) -> int:
    """The padding ceil_mode adds at the end of an axis; -1 where the spec's rule drops the
    window ceil_mode adds ("sliding windows that would start in the right padded region
    are ignored", as onnxruntime and PyTorch do) but ONNX's shape inference counts it."""
    padded = size + begin + end
    floor_out = (padded - k) // s + 1
    ceil_out = -(-(padded - k) // s) + 1
    if ceil_out == floor_out:
        return 0
    if (ceil_out - 1) * s < size + begin:
        return (ceil_out - 1) * s + k - padded
    return -1


def softmax_like(kind: str):
    """Softmax or LogSoftmax.  Before opset 13 both coerce the input to 2-D at ``axis``
    (default 1) and normalize over every dim from it on, not over one axis: a Reshape to
    [outer, inner], the op over the last axis and a Reshape back, as onnxruntime does."""
    def convert(b, node, attrs):
        shape = b.shape(node.input[0])
        rank = len(shape)
        axis = b.axis(attrs.get("axis", -1 if b.opset >= 13 else 1), rank)
        x = b.value(node.input[0])
        if b.opset >= 13 or axis == rank - 1:
            b.op(kind, [x], {"axis": axis}, out=node.output[0])
            return
        outer, inner = (int(np.prod(part, dtype=np.int64)) for part in (shape[:axis], shape[axis:]))
        flat = b.op("Reshape", [x], {"shape": (outer, inner)})
        y = b.op(kind, [flat], {"axis": 1})
        b.op("Reshape", [y], {"shape": tuple(shape)}, out=node.output[0])
    return convert


def _reshape_to(b, node, shape) -> None:
    b.op("Reshape", [b.value(node.input[0])], {"shape": tuple(int(d) for d in shape)}, out=node.output[0])


def _reshape(b, node, attrs):
    target = [int(d) for d in b.array(node.input[1])]
    source = b.shape(node.input[0])
    if not attrs.get("allowzero", 0):
        target = [source[i] if d == 0 else d for i, d in enumerate(target)]
    elif 0 in target:
        raise b.error("Reshape with allowzero to a zero-sized dim makes an empty tensor")
    _reshape_to(b, node, target)


def _flatten(b, node, attrs):
    shape = b.shape(node.input[0])
    rank = len(shape)
    axis = int(attrs.get("axis", 1))
    if not -rank <= axis <= rank:       # Flatten's axis may be the rank itself: [-r, r]
        raise b.error(f"axis {axis} is out of range for rank {rank} (expected {-rank} to {rank})")
    axis = axis + rank if axis < 0 else axis
    _reshape_to(b, node, (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))))


def _axes(b, node, attrs) -> list[int] | None:
    if "axes" in attrs:
        return list(attrs["axes"])
    if len(node.input) > 1 and node.input[1]:
        return [int(a) for a in b.array(node.input[1])]
    return None


def _squeeze(b, node, attrs):
    shape = list(b.shape(node.input[0]))
    axes = _axes(b, node, attrs)
    axes = [i for i, d in enumerate(shape) if d == 1] if axes is None else [b.axis(a, len(shape)) for a in axes]
    _reshape_to(b, node, [d for i, d in enumerate(shape) if i not in axes])


def _unsqueeze(b, node, attrs):
    shape = list(b.shape(node.input[0]))
    axes = _axes(b, node, attrs)
    rank = len(shape) + len(axes or [])
    for axis in sorted(b.axis(a, rank) for a in axes or []):
        shape.insert(axis, 1)
    _reshape_to(b, node, shape)


def _transpose(b, node, attrs):
    rank = len(b.shape(node.input[0]))
    perm = tuple(attrs.get("perm", range(rank - 1, -1, -1)))
    b.op("Transpose", [b.value(node.input[0])], {"order": perm}, out=node.output[0])


def _batch_norm(b, node, attrs):
    """y = (x - mean) / sqrt(var + eps) * scale + bias as one per-channel scale and shift
    (``fold.py`` folds it into the preceding Conv's weights when it can)."""
    scale, bias, mean, var = (b.array(n).astype(np.float64) for n in node.input[1:5])
    eps = float(attrs.get("epsilon", 1e-5))
    factor = scale / np.sqrt(var + eps)
    shift = bias - mean * factor
    rank = len(b.shape(node.input[0]))
    per_channel = (1, -1) + (1,) * (rank - 2)
    x = b.value(node.input[0])
    scaled = b.op("Multiply", [x, b.constant(factor.astype(np.float32).reshape(per_channel),
                                                 node.output[0] + ".scale")])
    b.op("Add", [scaled, b.constant(shift.astype(np.float32).reshape(per_channel),
                                     node.output[0] + ".shift")], out=node.output[0])


LAYER_CONVERTERS = {
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm, "MaxPool": _max_pool, "Softmax": softmax_like("Softmax"),
    "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Transpose": _transpose, "BatchNormalization": _batch_norm,
}
