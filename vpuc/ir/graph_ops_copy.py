"""The graph dialect's copy ops: Pad (constant, edge, reflect, wrap; negative pads crop)
and Tile.

A Pad in any mode is a separable gather: output index ``i`` along an axis reads input
index ``f(i)`` along it, the same ``f`` whatever the other indices are, so it lowers to
strided DMA copies, one per run of ``f`` (``lower_dma_plan``), never one per element;
``pad_sources`` gives ``f`` per axis.  A Tile lowers by doubling what it has copied.  The
numpy reference (``vpuc/reference/graph_copy.py``) computes both with ``np.pad`` and
``np.tile`` instead, so it checks the lowering rather than repeating it.

Pad follows ONNX (opset 19) and onnxruntime: negative pads first crop the input, the
positive ones then pad what is left; ``reflect`` mirrors about the border element
(at most ``n - 1`` a side, ``n`` the cropped size), ``edge`` repeats it, ``wrap``
continues periodically (any width).  OpenVINO's Pad names the modes the same but has
no ``wrap``.  ``graph_ops.py`` adds ``COPY_SPECS`` to its table.
"""

from __future__ import annotations

from vpuc.ir.graph import GraphOp
from vpuc.ir.graph_ops import AttrSpec, InferError, OpSpec, _shape_text
from vpuc.ir.types import TensorType

PAD_MODES = ("constant", "edge", "reflect", "wrap")
FILL = -1          # pad_sources' index of a position the pad value fills


def cropped(size: int, begin: int, end: int) -> tuple[int, int]:
    """The [start, stop) of the input a Pad keeps along an axis (negative pads crop)."""
    return max(-begin, 0), size - max(-end, 0)


def pad_problem(size: int, begin: int, end: int, mode: str) -> str | None:
    """Why the pads of one axis cannot be applied (a phrase after "Pad by B and E on axis
    A"), or None.  What is kept is never empty, so neither is the result."""
    start, stop = cropped(size, begin, end)
    kept = stop - start
    if kept < 1:
        return f"crops all of its {size} elements"
    if mode == "reflect" and max(begin, end) > kept - 1:
        return (f"reflects {max(begin, end)} elements of the {kept} kept; a reflection "
                f"reaches at most {kept - 1}")
    return None


def pad_sources(size: int, begin: int, end: int, mode: str) -> list[int]:
    """The input index each output index of one axis reads (``FILL``: the pad value)."""
    start, stop = cropped(size, begin, end)
    kept, before = stop - start, max(begin, 0)
    out = []
    for i in range(size + begin + end):
        j = i - before                       # position relative to the kept run
        if 0 <= j < kept:
            out.append(start + j)
        elif mode == "constant":
            out.append(FILL)
        elif mode == "edge":
            out.append(start + min(max(j, 0), kept - 1))
        elif mode == "wrap":
            out.append(start + j % kept)
        else:                                # reflect: mirror about index 0 or kept - 1
            out.append(start + (-j if j < 0 else 2 * (kept - 1) - j))
    return out


def _static(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = ins[0]
    if not x.is_static:
        raise InferError(f"{op.kind} takes static shapes; got {x}")
    return x


def _pad(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = _static(op, ins)
    begin, end = tuple(op.attrs["pads_begin"]), tuple(op.attrs["pads_end"])
    if len(begin) != x.rank or len(end) != x.rank:
        raise InferError(f"Pad pads_begin/pads_end need {x.rank} values each")
    mode = op.attrs["mode"]
    for axis, (size, b, e) in enumerate(zip(x.dims, begin, end)):
        problem = pad_problem(size, b, e, mode)
        if problem:
            raise InferError(f"Pad ({mode}) by {b} and {e} on axis {axis} {problem}")
    return TensorType(tuple(d + b + e for d, b, e in zip(x.dims, begin, end)), x.elem, x.order)


def _tile(op: GraphOp, ins: list[TensorType]) -> TensorType:
    x = _static(op, ins)
    repeats = tuple(op.attrs["repeats"])
    if len(repeats) != x.rank or min(repeats, default=1) < 1:
        raise InferError(f"Tile repeats {list(repeats)} need {x.rank} counts >= 1 for "
                         f"{_shape_text(x.dims)}")
    return TensorType(tuple(d * r for d, r in zip(x.dims, repeats)), x.elem, x.order)


COPY_SPECS = [
    OpSpec("Pad", 1, "layer", _pad, (AttrSpec("pads_begin", "ints"), AttrSpec("pads_end", "ints"),
                                     AttrSpec("value", "float", 0.0),
                                     AttrSpec("mode", "enum:" + "|".join(PAD_MODES), "constant"))),
    OpSpec("Tile", 1, "layer", _tile, (AttrSpec("repeats", "ints"),)),
]
