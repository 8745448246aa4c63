"""Which copies a data-movement op is: the plan ``lower_dma`` turns into DMA tasks.

Every op reads whole tensors and writes a whole tensor in DDR; its result is
a list of **phases**, each a list of ``Copy`` (a source part to a destination
part of the same element count).  The copies of one phase write disjoint
bytes and run in any order; a phase starts when the one before has ended.
A part is a buffer with one ``start:stop:step`` slice per logical dim (a VIR
view) or the whole buffer.  Where the two parts of a copy have the same
logical shape they are copied element for element (``permute`` when their
dims orders differ); otherwise the copy keeps the bytes in memory order (a
reshaping copy: both sides then lie in memory in the order of the result).

- Reshape: one reshaping copy (input and result in their identity order);
- Transpose: a ``permute`` into a DDR scratch whose dims order lists the
  result's axes outermost first -- its bytes are the result's -- then a
  reshaping copy into the result (through a flat scratch when the result has
  the input's dims, which a copy between equal shapes cannot express);
- Concat: each operand into its slice of the result;
- Slice, Gather, Interpolate (nearest): strided views; each axis's index list is
  cut into runs of a positive step, per residue class of the destination modulo a
  period (``strided_runs``: a resize by 2 is 2 runs per axis; a run per index at
  worst: a reversal);
- Pad (constant): the border from a ``const`` splat of the pad value, slab by
  slab, and the input (cropped by negative pads) into the interior, all in one phase;
- Pad (edge, reflect, wrap): strided views like Slice's, each axis's index list from
  ``graph_ops_copy.pad_sources``: a copy per run, a reflected border one per row it
  mirrors (a DMA step is positive), never one per element;
- Tile: the input into the first block, then per axis the filled part copied after
  itself, doubling: 1 + sum(ceil(log2 r)) copies, a phase each, where a gather would
  make prod(r) copies (Tile [1, 1, 8, 8] of 1x16x7x7: 7 copies and 17,589 cycles
  against 64 and 47,637);
- DepthToSpace, SpaceToDepth: block_size² strided copies, one per position in
  the block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product

from vpuc.diagnostics import VpucError
from vpuc.ir.graph import GraphOp
from vpuc.ir.graph_ops_copy import cropped, pad_sources
from vpuc.ir.types import DimsOrder, TensorType
from vpuc.reference.graph_nn import nearest_indices

DMA_OPS = ("Reshape", "Transpose", "Concat", "Slice", "Gather", "Pad", "DepthToSpace",
           "SpaceToDepth", "Interpolate", "Tile")
Span = tuple[int, int, int]              # start, stop (exclusive), step >= 1


@dataclass
class Part:
    buffer: str                          # a graph value, or a key of ``Plan.scratch``
    type: TensorType                     # the whole buffer's type
    spans: tuple[Span, ...] | None = None   # None: the whole buffer

    @property
    def dims(self) -> tuple[int, ...]:
        if self.spans is None:
            return tuple(self.type.dims)
        return tuple(len(range(*s)) for s in self.spans)

    @property
    def nbytes(self) -> int:
        return math.prod(self.dims) * self.type.elem.nbytes


@dataclass
class Copy:
    src: Part
    dst: Part

    @property
    def mode(self) -> str:
        """copy or permute (same logical shape, other dims order)."""
        same = self.src.dims == self.dst.dims
        return "permute" if same and self.src.type.order != self.dst.type.order else "copy"


@dataclass
class Plan:
    phases: list[list[Copy]]
    scratch: dict[str, TensorType] = field(default_factory=dict)       # ddr scratch buffers
    fills: dict[str, tuple[TensorType, float]] = field(default_factory=dict)   # const splats


def full(t: TensorType) -> tuple[Span, ...]:
    return tuple((0, d, 1) for d in t.dims)


def part(buffer: str, t: TensorType, changes: dict[int, Span]) -> Part:
    """``buffer`` sliced along the axes of ``changes``."""
    spans = list(full(t))
    for axis, span in changes.items():
        spans[axis] = span
    return Part(buffer, t, tuple(spans))


def runs(indices: list[int]) -> list[tuple[Span, int]]:
    """``indices`` (non-negative) as (source span, destination start) runs of a constant
    positive step, longest first from the left."""
    out, i = [], 0
    while i < len(indices):
        j = i + 1
        if j < len(indices) and indices[j] > indices[i]:
            step = indices[j] - indices[i]
            while j + 1 < len(indices) and indices[j + 1] - indices[j] == step:
                j += 1
            out.append(((indices[i], indices[j] + 1, step), i))
            i = j + 1
        else:
            out.append(((indices[i], indices[i] + 1, 1), i))
            i += 1
    return out


PERIODS = 16          # residue classes tried when cutting an index list into strided runs


def strided_runs(indices: list[int]) -> list[tuple[Span, Span]]:
    """``indices`` as (source span, destination span) pairs, the fewest found: the
    destination positions are cut into residue classes modulo a period (a resize by p
    repeats each index p times: p runs of step 1 in the source, step p in the
    destination) and each class into ``runs``."""
    best: list[tuple[Span, Span]] | None = None
    for period in range(1, min(PERIODS, len(indices)) + 1):
        pieces = []
        for r in range(period):
            for src, at in runs(indices[r::period]):
                count = len(range(*src))
                first = r + at * period
                step = period if count > 1 else 1
                pieces.append((src, (first, first + step * (count - 1) + 1, step)))
        if best is None or len(pieces) < len(best):
            best = pieces
    return best or []


def plan(op: GraphOp, x: str, xt: TensorType, y: str, yt: TensorType,
         operands: list[tuple[str, TensorType]]) -> Plan:
    """The copies of ``op`` reading ``x`` (its first operand; ``operands`` all of them)
    and writing ``y``; VpucError at the op when DMA cannot do it."""
    kind, a = op.kind, op.attrs
    if not xt.is_static or not yt.is_static:
        raise VpucError(f"{op.kind} {op.label} has run-time dims; DMA lowering needs static "
                        "shapes", op.loc)
    if kind == "Reshape":
        if xt.order != DimsOrder.identity(xt.rank):
            raise VpucError(f"Reshape {op.label} of a {xt.order} tensor: lowering a Reshape "
                            "of a tensor not in its identity order is not supported yet", op.loc)
        return Plan([[Copy(Part(x, xt), Part(y, yt))]])
    if kind == "Transpose":
        return _transpose(op, x, xt, y, yt, tuple(a["order"]))
    if kind == "Concat":
        axis = a["axis"] % yt.rank
        copies, at = [], 0
        for name, t in operands:
            n = t.dims[axis]
            copies.append(Copy(Part(name, t), part(y, yt, {axis: (at, at + n, 1)})))
            at += n
        return Plan([copies])
    if kind == "Slice":
        per_axis = []
        for size, b, e, s in zip(xt.dims, a["begin"], a["end"], a["step"]):
            per_axis.append(list(range(size)[slice(b, e, s)]))
        return Plan([_gathers(x, xt, y, yt, per_axis)])
    if kind == "Gather":
        axis = a["axis"] % xt.rank
        per_axis = [list(range(d)) for d in xt.dims]
        per_axis[axis] = [i % xt.dims[axis] for i in a["indices"]]
        return Plan([_gathers(x, xt, y, yt, per_axis)])
    if kind == "Pad" and a["mode"] == "constant":
        return _pad(x, xt, y, yt, tuple(a["pads_begin"]), tuple(a["pads_end"]), a["value"])
    if kind == "Pad":
        per_axis = [pad_sources(size, b, e, a["mode"])
                    for size, b, e in zip(xt.dims, a["pads_begin"], a["pads_end"])]
        return Plan([_gathers(x, xt, y, yt, per_axis)])
    if kind == "Tile":
        return _tile(x, xt, y, yt, tuple(a["repeats"]))
    if kind == "Interpolate" and a["mode"] == "nearest":     # every output copies one input
        per_axis = [nearest_indices(a, xt.dims, axis).tolist() for axis in range(xt.rank)]
        return Plan([_gathers(x, xt, y, yt, per_axis)])
    if kind in ("DepthToSpace", "SpaceToDepth"):
        return _space_depth(kind, x, xt, y, yt, a["block_size"], a.get("mode", "blocks_first"))
    raise VpucError(f"{op.kind} {op.label} has no DMA lowering", op.loc)


def _gathers(x, xt, y, yt, per_axis: list[list[int]]) -> list[Copy]:
    """Copies taking ``x[per_axis[0], per_axis[1], ...]`` (index lists) into ``y``."""
    options = [strided_runs(indices) for indices in per_axis]
    copies = []
    for choice in product(*options):
        src = tuple(span for span, _ in choice)
        dst = tuple(span for _, span in choice)
        copies.append(Copy(Part(x, xt, src), Part(y, yt, dst)))
    return copies


def _transpose(op, x, xt, y, yt, perm) -> Plan:
    if perm == tuple(range(len(perm))):
        return Plan([[Copy(Part(x, xt), Part(y, yt))]])
    if yt.order != DimsOrder.identity(yt.rank):
        raise VpucError(f"Transpose {op.label} into a {yt.order} tensor is not supported yet",
                        op.loc)
    staged = TensorType(xt.dims, xt.elem, DimsOrder(perm))   # the result's bytes, x's axes
    scratch = {f"{y}.permuted": staged}
    phases = [[Copy(Part(x, xt), Part(f"{y}.permuted", staged))]]
    if tuple(staged.dims) != tuple(yt.dims):
        phases.append([Copy(Part(f"{y}.permuted", staged), Part(y, yt))])
    else:                     # equal shapes: a copy would be read as a permute, go flat
        flat = TensorType((yt.num_elements,), yt.elem, DimsOrder.identity(1))
        scratch[f"{y}.flat"] = flat
        phases += [[Copy(Part(f"{y}.permuted", staged), Part(f"{y}.flat", flat))],
                   [Copy(Part(f"{y}.flat", flat), Part(y, yt))]]
    return Plan(phases, scratch)


def _pad(x, xt, y, yt, begin, end, value) -> Plan:
    kept = [cropped(d, b, e) for d, b, e in zip(xt.dims, begin, end)]
    interior = tuple((max(b, 0), max(b, 0) + stop - start, 1) for b, (start, stop) in zip(begin, kept))
    slabs = []
    for axis in range(yt.rank):       # axes before: interior only; after: everything
        for lo, hi in ((0, max(begin[axis], 0)), (yt.dims[axis] - max(end[axis], 0), yt.dims[axis])):
            if hi > lo:
                spans = list(interior[:axis]) + [(lo, hi, 1)] + list(full(yt)[axis + 1:])
                slabs.append(tuple(spans))
    copies = [Copy(Part(x, xt, tuple((start, stop, 1) for start, stop in kept)), Part(y, yt, interior))]
    fills = {}
    if slabs:
        dims = tuple(max(len(range(*s[i])) for s in slabs) for i in range(yt.rank))
        ft = TensorType(dims, yt.elem, yt.order)
        fills[f"{y}.fill"] = (ft, float(value))
        for spans in slabs:
            src = tuple((0, len(range(*s)), 1) for s in spans)
            copies.append(Copy(Part(f"{y}.fill", ft, src), Part(y, yt, spans)))
    return Plan([copies], fills=fills)


def _tile(x, xt, y, yt, repeats) -> Plan:
    """The input into the result's first block, then axis by axis the part filled so far
    copied after itself, doubling it (a phase each: the copy reads what the last wrote)."""
    spans = [(0, d, 1) for d in xt.dims]
    phases = [[Copy(Part(x, xt), Part(y, yt, tuple(spans)))]]
    for axis, (d, r) in enumerate(zip(xt.dims, repeats)):
        filled, total = d, d * r
        while filled < total:
            n = min(filled, total - filled)
            src, dst = list(spans), list(spans)
            src[axis], dst[axis] = (0, n, 1), (filled, filled + n, 1)
            phases.append([Copy(Part(y, yt, tuple(src)), Part(y, yt, tuple(dst)))])
            filled += n
        spans[axis] = (0, total, 1)
    return Plan(phases)


def _space_depth(kind, x, xt, y, yt, b, mode) -> Plan:
    """One copy per block position (i, j): a channel range (or stride) of the deep tensor
    to every b-th row and column of the wide one."""
    deep, deep_t, wide, wide_t = (x, xt, y, yt) if kind == "DepthToSpace" else (y, yt, x, xt)
    channels = wide_t.dims[1]
    copies = []
    for i, j in product(range(b), range(b)):
        if kind == "DepthToSpace" and mode == "depth_first":        # ONNX CRD
            chans = (i * b + j, deep_t.dims[1], b * b)
        else:                                                     # DCR, and SpaceToDepth
            chans = ((i * b + j) * channels, (i * b + j + 1) * channels, 1)
        d = part(deep, deep_t, {1: chans})
        w = part(wide, wide_t, {2: (i, wide_t.dims[2], b), 3: (j, wide_t.dims[3], b)})
        copies.append(Copy(d, w) if kind == "DepthToSpace" else Copy(w, d))
    return Plan([copies])
