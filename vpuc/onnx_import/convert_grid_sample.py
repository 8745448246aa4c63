"""ONNX GridSample (opsets 16, 20, 22) on a 4-D input: each output pixel's source
coordinates computed at run time in f32 from the grid, its neighbours fetched by the ACT
SHAVE library kernel ``gather`` (the graph op ``IndexedGather``), weighted and summed.

The sampled image ``X [N, C, H, W]`` is seen as a table of ``N·H·W`` rows of ``C`` values
(a Transpose to NHWC, a Reshape); a neighbour ``(n, y, x)`` is row ``n·H·W + y·W + x``.
Per output pixel, as onnxruntime's CPU kernel computes it (``grid_sample.cc``):

- the grid's normalized ``g`` denormalized along each axis of size ``L``:
  ``((g + 1) / 2)·(L − 1)`` with ``align_corners``, else ``((g + 1)·L − 1) / 2``;
- the neighbours and their weights along each axis: nearest ``round(c)`` (half to even,
  ``std::nearbyint``), weight 1; linear ``i = floor(c)`` and ``i + 1``, weights
  ``(i + 1) − c`` and ``c − i``; cubic ``floor(c) − 1 + k`` for ``k`` in 0..3, Keys'
  coefficients (``A = −0.75``) of ``t = (c − (floor(c) − 1)) − 1``;
- each neighbour's index padded on its own, as onnxruntime pads them (not the
  coordinate): ``zeros`` an index outside ``[0, L)`` reads 0 (the row of a clamped index
  gathered, then a Select), ``border`` the index clamped to ``[0, L − 1]``,
  ``reflection`` the index reflected at the borders until inside: with
  ``align_corners`` about 0 and ``L − 1`` (period ``2(L − 1)``), else about −1/2 and
  ``L − 1/2`` (period ``2L``, the edge pixel repeated);
- the result ``Σ_y w_y Σ_x w_x p(y, x)`` in f32 (x first, as onnxruntime sums), rounded
  once to the graph's type.

Every index is an integer held exactly in f32 while ``N·H·W <= 2^24`` (refused beyond);
the reflection's ``floor(i / period)`` is corrected by one period where its quotient
rounded across an integer.  A gather reads every row of the table once per neighbour
(4 for linear, 16 for cubic; ``vpuc/cost/gather.py``); the elementwise steps are
generated ACT SHAVE kernels.
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
    rows = b.op("Reshape", [b.op("Transpose", [b.value(node.input[0])], {"order": (0, 2, 3, 1)})],
                {"shape": (n * height * width, channels)})
    grid = in_f32(b, b.value(node.input[1]))
    axes, consts = [], {}
    for component, size in enumerate((width, height)):
        g = b.op("Slice", [grid], {"begin": (0, 0, 0, component), "end": (n, out_h, out_w, component + 1),
                                   "step": (1, 1, 1, 1)})
        axis = Axis(b, size, align, consts)
        axes.append([axis.padded(i, padding) + (w,) for i, w in
                     axis.neighbours(axis.denormalized(g), mode)])
    width_const = Axis(b, width, align, consts).const(float(width))
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
            pixel = b.op("IndexedGather", [rows, flat], {"axis": 0})
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
    if elem is not ElemType.F32:
        total = b.op("Convert", [total], {"to": elem})
    b.op("Transpose", [total], {"order": (0, 3, 1, 2)}, out=node.output[0])


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
