"""ONNX GridSample (opsets 16, 20, 22) on a 4-D input: each output pixel's source
coordinates computed at run time in f32 from the grid, its neighbours fetched by the ACT
SHAVE library kernel ``gather`` (the graph op ``IndexedGather``), weighted and summed.

Per output pixel, as onnxruntime's CPU kernel computes it (``grid_sample.cc``):

- the grid's normalized ``g`` denormalized along each axis of size ``L``:
  ``((g + 1) / 2)·(L − 1)`` with ``align_corners``, else ``((g + 1)·L − 1) / 2``;
- the neighbours and their weights along each axis: nearest ``round(c)`` (half to even,
  ``std::nearbyint``), weight 1; linear ``i = floor(c)`` and ``i + 1``, weights
  ``(i + 1) − c`` and ``c − i``; cubic ``floor(c) − 1 + k`` for ``k`` in 0..3, Keys'
  coefficients (``A = −0.75``) of ``t = (c − (floor(c) − 1)) − 1``;
- each neighbour's index padded on its own, as onnxruntime pads them (not the
  coordinate): ``zeros`` an index outside ``[0, L)`` reads 0, ``border`` the index clamped
  to ``[0, L − 1]``, ``reflection`` the index reflected at the borders until inside: with
  ``align_corners`` about 0 and ``L − 1`` (period ``2(L − 1)``), else about −1/2 and
  ``L − 1/2`` (period ``2L``, the edge pixel repeated);
- the result ``Σ_y w_y Σ_x w_x p(y, x)`` in f32 (x first, as onnxruntime sums), rounded
  once to the graph's type.

Two ways to fetch the neighbours:

- linear or cubic with zeros or border padding (optical flow's warp, PyTorch's default):
  one gather of 2x2 or 4x4 patches (``_patches``), a table row holding a patch's pixels
  (``4C`` or ``16C`` values) of the image padded by ``k - 1`` pixels, so one index
  fetches what 4 or 16 gathers of single pixels would (a gather's cost is mostly per
  index: ``vpuc/cost/gather.py``; and 16 gathers' index arithmetic made ACT segments of
  more outputs than the schedule's 64 barriers hold);
- nearest, and reflection padding (``_by_neighbour``): the image as ``N·H·W`` NHWC rows of
  ``C`` values, row ``n·H·W + y·W + x``, one gather per neighbour (1, 4 or 16), a
  padded-away one read as 0 by a Select on its clamped row.

Every index is an integer held exactly in f32 while ``N·H·W <= 2^24`` (refused beyond);
the reflection's ``floor(i / period)`` is corrected by one period where its quotient
rounded across an integer.  A gather whose output would pass ``GATHER_OUTPUT_BYTES`` is
cut into bands of indices (``gathered``).  The elementwise steps are generated ACT SHAVE
kernels.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import CONSTANT, GraphOp
from vpuc.ir.module import ConstInit
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_math import f32_constant, in_f32, odd

MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic",
         "cubic": "cubic"}
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75                  # Keys' coefficient, as onnxruntime and PyTorch take it
EXACT_INDICES = 2 ** 24          # integers an f32 holds exactly
# The bytes one gather writes: its output stays in CMX while the table streams through in
# chunks (lower_gather.py), so a larger one is cut into bands of indices, Concatenated: a
# quarter of an NPU37XX tile's 1 MiB leaves the table's chunks room.
GATHER_OUTPUT_BYTES = 256 * 1024


class Axis:
    """One spatial axis: its size and the f32 helpers of the node being converted
    (``consts``: the node's f32 scalar Constants by value, made once)."""

    def __init__(self, b: GraphBuilder, size: int, align: bool, consts: dict[float, str]) -> None:
        self.b, self.size, self.align, self.consts = b, size, align, consts

    def const(self, value: float) -> str:
        if value not in self.consts:
            self.consts[value] = f32_constant(self.b, value, "c")
        return self.consts[value]

    def op(self, kind: str, *operands: str, **attrs) -> str:
        return self.b.op(kind, list(operands), attrs or None)

    def denormalized(self, g: str) -> str:
        one, half = self.const(1.0), self.const(0.5)
        shifted = self.op("Add", g, one)
        if self.align:              # (g + 1) / 2 * (L - 1): the halving is exact
            return self.op("Multiply", self.op("Multiply", shifted, half), self.const(self.size - 1))
        scaled = self.op("Subtract", self.op("Multiply", shifted, self.const(self.size)), one)
        return self.op("Multiply", scaled, half)

    def neighbours(self, c: str, mode: str) -> list[tuple[str, str | None]]:
        """(index, weight) per neighbour along the axis; a weight of None is 1."""
        if mode == "nearest":
            return [(self.rounded(c), None)]
        down = self.op("Floor", c)
        if mode == "linear":
            up = self.op("Add", down, self.const(1.0))
            return [(down, self.op("Subtract", up, c)), (up, self.op("Subtract", c, down))]
        first = self.op("Subtract", down, self.const(1.0))
        t = self.op("Subtract", self.op("Subtract", c, first), self.const(1.0))
        indices = [first, down] + [self.op("Add", down, self.const(k)) for k in (1.0, 2.0)]
        return list(zip(indices, self.cubic_coefficients(t)))

    def rounded(self, c: str) -> str:
        """``c`` rounded half to even, as ``std::nearbyint`` (convert_math's Round)."""
        down = self.op("Floor", c)
        fraction = self.op("Subtract", c, down)
        half, zero = self.const(0.5), self.const(0.0)
        on_tie = self.op("Select", self.op("Equal", fraction, half),
                         odd(self.b, down, lambda v, hint: self.const(v)), zero)
        up = self.op("Select", self.op("Greater", fraction, half), self.const(1.0), on_tie)
        return self.op("Add", down, up)

    def cubic_coefficients(self, t: str) -> list[str]:
        """Keys' cubic convolution weights of the four neighbours at offset ``t`` in [0, 1),
        each written in onnxruntime's order of operations."""
        a, mul, add, sub = CUBIC_A, (lambda p, q: self.op("Multiply", p, q)), \
            (lambda p, q: self.op("Add", p, q)), (lambda p, q: self.op("Subtract", p, q))
        k = self.const

        def outer(s: str) -> str:          # ((A s - 5A) s + 8A) s - 4A, s in [1, 2]
            return sub(mul(add(mul(sub(mul(k(a), s), k(5 * a)), s), k(8 * a)), s), k(4 * a))

        def inner(s: str) -> str:          # ((A + 2) s - (A + 3)) s s + 1, s in [0, 1]
            return add(mul(mul(sub(mul(k(a + 2), s), k(a + 3)), s), s), k(1.0))

        one_minus = sub(k(1.0), t)
        return [outer(add(t, k(1.0))), inner(t), inner(one_minus), outer(sub(k(2.0), t))]

    def padded(self, index: str, padding: str) -> tuple[str, str | None]:
        """(an index within [0, L), the u8 mask of indices that were inside or None)."""
        if padding == "reflection":
            return self.reflected(index), None
        clamped = self.op("Clamp", index, min=0.0, max=float(self.size - 1))
        if padding == "zeros":
            return clamped, self.op("Equal", clamped, index)
        return clamped, None

    def reflected(self, index: str) -> str:
        align = self.align
        if align and self.size == 1:
            return self.const(0.0)
        period = 2 * (self.size - 1) if align else 2 * self.size
        p = self.const(float(period))
        m = self.op("Subtract", index,
                    self.op("Multiply", self.op("Floor", self.op("Divide", index, p)), p))
        zero = self.const(0.0)
        m = self.op("Select", self.op("Less", m, zero), self.op("Add", m, p), m)
        m = self.op("Select", self.op("GreaterEqual", m, p), self.op("Subtract", m, p), m)
        mirror = float(period if align else period - 1)       # the image of m past L - 1
        beyond = self.op("Greater", m, self.const(float(self.size - 1)))
        return self.op("Select", beyond, self.op("Subtract", self.const(mirror), m), m)


def grid_sample(b: GraphBuilder, node, attrs) -> None:
    shape, grid_shape = b.shape(node.input[0]), b.shape(node.input[1])
    if len(shape) != 4:
        raise b.error(f"GridSample of a rank-{len(shape)} input is not supported; expected a "
                      "4-D input [N, C, H, W]")
    n, channels, height, width = shape
    mode_name = attrs.get("mode", "bilinear" if b.opset < 20 else "linear")
    mode = MODES.get(mode_name)
    if mode is None or (b.opset >= 20) != (mode_name in ("linear", "cubic")) and mode != "nearest":
        raise b.error(f"GridSample mode '{mode_name}' is not one of opset {b.opset}'s modes")
    padding = attrs.get("padding_mode", "zeros")
    if padding not in PADDINGS:
        raise b.error(f"GridSample padding_mode '{padding}' is not one of {', '.join(PADDINGS)}")
    align = bool(attrs.get("align_corners", 0))
    if n * height * width > EXACT_INDICES:
        raise b.error(f"GridSample of {n}x{height}x{width} pixels: its row indices exceed 2^24, "
                      "beyond which f32 holds integers exactly")
    elem = b.types[b.value(node.input[0])].elem
    _, out_h, out_w, _ = grid_shape
    grid = in_f32(b, b.value(node.input[1]))
    consts: dict[float, str] = {}
    coordinates = []
    for component, size in enumerate((width, height)):
        g = b.op("Slice", [grid], {"begin": (0, 0, 0, component), "end": (n, out_h, out_w, component + 1),
                                   "step": (1, 1, 1, 1)})
        axis = Axis(b, size, align, consts)
        coordinates.append((axis, axis.denormalized(g)))
    if mode != "nearest" and padding != "reflection":
        total = _patches(b, node, shape, (out_h, out_w), coordinates, mode, padding == "zeros")
    else:
        total = _by_neighbour(b, node, shape, (out_h, out_w), coordinates, mode, padding)
    if elem is not ElemType.F32:
        total = b.op("Convert", [total], {"to": elem})
    b.op("Transpose", [total], {"order": (0, 3, 1, 2)}, out=node.output[0])


def _by_neighbour(b: GraphBuilder, node, shape, out_hw, coordinates, mode: str, padding: str) -> str:
    """One gather of the image's NHWC rows per neighbour (1, 4 or 16), each padded on its
    own; the f32 weighted sum, x first."""
    n, channels, height, width = shape
    out_h, out_w = out_hw
    rows = b.op("Reshape", [b.op("Transpose", [b.value(node.input[0])], {"order": (0, 2, 3, 1)})],
                {"shape": (n * height * width, channels)})
    axes = [[axis.padded(i, padding) + (w,) for i, w in axis.neighbours(c, mode)]
            for axis, c in coordinates]
    width_const = coordinates[0][0].const(float(width))
    batch_rows = batch_offsets(b, n, height * width) if n > 1 else None
    zero = b.constant(np.zeros((), np.float32), f"{node.output[0]}.zero")
    total = None
    for y_index, y_inside, y_weight in axes[1]:
        row_base = b.op("Multiply", [y_index, width_const])
        if batch_rows is not None:
            row_base = b.op("Add", [row_base, batch_rows])
        line = None
        for x_index, x_inside, x_weight in axes[0]:
            flat = b.op("Reshape", [b.op("Convert", [b.op("Add", [row_base, x_index])], {"to": ElemType.I32})],
                        {"shape": (n, out_h, out_w)})
            pixel = gathered(b, rows, flat)
            if x_inside is not None:
                inside = b.op("Minimum", [x_inside, y_inside])
                pixel = b.op("Select", [inside, pixel, zero])
            term = in_f32(b, pixel)
            if x_weight is not None:
                term = b.op("Multiply", [x_weight, term])
            line = term if line is None else b.op("Add", [line, term])
        if y_weight is not None:
            line = b.op("Multiply", [y_weight, line])
        total = line if total is None else b.op("Add", [total, line])
    return total


def _patches(b: GraphBuilder, node, shape, out_hw, coordinates, mode: str, zeros: bool) -> str:
    """Linear or cubic mode with zeros or border padding: one gather of k x k patches (k =
    2 or 4), each table row the ``k²·C`` values of the neighbours one output pixel reads,
    from the image padded by ``k - 1`` pixels on every side (zeros: zeros; border: the edge
    repeated).  A patch's first index ``s`` (``floor(c)``, cubic ``floor(c) - 1``) is
    clamped to ``[-(k - 1), L - 1]``: beyond, every neighbour along the axis lies outside,
    where border reads the edge pixel all the same and zeros reads 0 (a Select on the
    result).  So each neighbour is padded on its own, as onnxruntime pads it.  The weighted
    sum as onnxruntime's: per row ``Σ_x w_x p``, then ``Σ_y w_y row``."""
    n, channels, height, width = shape
    out_h, out_w = out_hw
    k = 2 if mode == "linear" else 4
    starts, weights, insides = [], [], []
    for axis, c in coordinates:
        neighbours = axis.neighbours(c, mode)
        first = neighbours[0][0]
        weights.append([w for _, w in neighbours])
        clamped = axis.op("Clamp", first, min=float(1 - k), max=float(axis.size - 1))
        if zeros:
            insides.append(axis.op("Equal", clamped, first))
        starts.append(axis.op("Add", clamped, axis.const(float(k - 1))))
    padded = b.op("Transpose", [b.value(node.input[0])], {"order": (0, 2, 3, 1)})
    pads = (0, k - 1, k - 1, 0)
    padded = b.op("Pad", [padded], {"pads_begin": pads, "pads_end": pads, "mode": "constant" if zeros else "edge"})
    plane_h, plane_w = height + k - 1, width + k - 1
    corners = [b.op("Slice", [padded], {"begin": (0, dy, dx, 0), "end": (n, dy + plane_h, dx + plane_w, channels),
                                        "step": (1, 1, 1, 1)}) for dy in range(k) for dx in range(k)]
    table = b.op("Reshape", [b.op("Concat", corners, {"axis": 3})],
                 {"shape": (n * plane_h * plane_w, k * k * channels)})
    x_axis = coordinates[0][0]
    flat = b.op("Add", [b.op("Multiply", [starts[1], x_axis.const(float(plane_w))]), starts[0]])
    if n > 1:
        flat = b.op("Add", [flat, batch_offsets(b, n, plane_h * plane_w)])
    flat = b.op("Reshape", [b.op("Convert", [flat], {"to": ElemType.I32})], {"shape": (n, out_h, out_w)})
    patches = gathered(b, table, flat)
    p = [in_f32(b, b.op("Slice", [patches], {"begin": (0, 0, 0, q * channels),
                                             "end": (n, out_h, out_w, (q + 1) * channels), "step": (1, 1, 1, 1)}))
         for q in range(k * k)]
    x_weights, y_weights = weights
    total = None
    for r, y_weight in enumerate(y_weights):
        line = None
        for j, x_weight in enumerate(x_weights):
            term = b.op("Multiply", [x_weight, p[r * k + j]])
            line = term if line is None else b.op("Add", [line, term])
        term = b.op("Multiply", [y_weight, line])
        total = term if total is None else b.op("Add", [total, term])
    if zeros:
        total = b.op("Select", [b.op("Minimum", insides), total, x_axis.const(0.0)])
    return total


def gathered(b: GraphBuilder, table: str, flat: str) -> str:
    """``IndexedGather`` of the ``table`` rows ``flat`` (i32, any shape) picks: one op, or
    bands of the flattened indices of at most ``GATHER_OUTPUT_BYTES`` of output each,
    Concatenated and reshaped back."""
    index_shape = b.types[flat].dims
    count, row = int(np.prod(index_shape)), b.types[table].dims[1] * b.types[table].elem.nbytes
    per_band = max(GATHER_OUTPUT_BYTES // row, 1)
    if count <= per_band:
        return b.op("IndexedGather", [table, flat], {"axis": 0})
    line = b.op("Reshape", [flat], {"shape": (count,)})
    bands = [b.op("IndexedGather", [table, b.op("Slice", [line], {"begin": (start,), "end": (min(start + per_band, count),),
                                                                  "step": (1,)})], {"axis": 0})
             for start in range(0, count, per_band)]
    return b.op("Reshape", [b.op("Concat", bands, {"axis": 0})], {"shape": tuple(index_shape) + (b.types[table].dims[1],)})


def batch_offsets(b: GraphBuilder, n: int, plane: int) -> str:
    """The f32 Constant ``[N, 1, 1, 1]`` of each image's first row, ``n·H·W`` (exact: below
    2^24), in f32 whatever the graph's type."""
    name = b.fresh(f"{b.node.output[0]}.batch_rows")
    ttype = TensorType((n, 1, 1, 1), ElemType.F32, DimsOrder.identity(4))
    b.graph.ops.append(GraphOp(CONSTANT, name, type=ttype,
                               const=ConstInit(values=tuple(float(k * plane) for k in range(n)))))
    b.types[name] = ttype
    return name


GRID_SAMPLE_CONVERTERS = {"GridSample": grid_sample}
