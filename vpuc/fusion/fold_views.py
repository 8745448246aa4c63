"""Reshape and Transpose folded into a MatMul's own loads and stores (``--schedule default``).

A transformer's attention splits heads (``Reshape`` [1, S, W] -> [1, S, H, D], then
``Transpose`` to [1, H, S, D]), transposes K, and merges heads back after ·V.  As DMA
segments each is a DDR -> DDR copy (a permuting one at about an element a cycle) that
runs alone between two layers.  Yet a MatMul reads its operands block by block through
DDR views (``lower_dpu_matmul.load_matrix``), one 2-D matrix per batch item: head ``h``'s
rows ``r0:r1`` of Q are the view ``proj[0, r0:r1, h*D:(h+1)*D]`` of the projection's own
output, a strided copy.  So such a chain of copies is not made; the MatMul reads (or, for
the head merge, writes) the value the chain starts (ends) at through a ``FoldedValue``.

A folded value keeps its logical type; each logical axis names the base value's axis it
moves along and by how many base elements per step (``AxisMap``).  Reshapes that split an
axis, or merge axes laid out one inside the other in the base, and any Transpose keep
that form; anything else (a reshape mixing axes otherwise) ends the chain there.

Folded when (``fold_views``):

- *input side*: a MatMul operand produced by a chain of Reshape/Transpose DMA segments,
  each of whose results has that one reader, back to a value some other segment (or the
  network) provides;
- *output side*: a MatMul result whose one reader starts such a chain, each intermediate
  value with one reader, not a network output: the MatMul stores straight into the
  chain's last value;
- and in both, the matrix's two axes move along two different base axes, so every
  block (batch axes fixed, rows and columns ranges) is a VIR view of the base; or the
  matrix is one row whose columns move along one base axis (a CNN classifier's flatten
  of its pool's [1, C, 1, 1]: ResNet-18 1,733,414 -> 1,730,441 cycles, MobileNetV3-Small
  592,971 -> 590,847, the pool's value then kept in CMX and the Gemm's row a CMX copy).

Expects: ``lower-graph``'s segments (``Segment.dma`` / ``Segment.layer``).  Guarantees:
the returned segments drop every folded DMA segment; each folded MatMul segment maps its
operand or result graph value to the base value it reads or writes (``Segment.aliases``)
and lists the folded ops (``Segment.folded``, for provenance); the values computed are
the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.fusion.blocked_program import Value
from vpuc.ir.graph import Graph, GraphOp
from vpuc.ir.types import TensorType

FOLDABLE = ("Reshape", "Transpose")


@dataclass(frozen=True)
class AxisMap:
    """Where a logical axis moves in the base: index ``i`` adds ``i * scale`` to the base's
    ``axis`` (None: a size-1 axis, which moves nowhere)."""
    axis: int | None
    scale: int


Axes = tuple[AxisMap, ...]


@dataclass
class FoldedValue(Value):
    """A graph value that is not stored: its elements are those of the DDR value ``name``
    (of type ``base``) at the places ``axes`` says."""
    base: TensorType | None = None
    axes: Axes = ()


@dataclass(frozen=True)
class Alias:
    """A folded graph value: the graph value it lives in and where."""
    base: str
    axes: Axes
    ops: tuple[GraphOp, ...] = field(default=(), compare=False)   # the folded Reshape/Transposes


def identity(dims) -> Axes:
    return tuple(AxisMap(a if d != 1 else None, 1 if d != 1 else 0) for a, d in enumerate(dims))


def transposed(axes: Axes, perm) -> Axes:
    """The map of ``Transpose(x, perm)`` from ``x``'s."""
    return tuple(axes[p] for p in perm)


def reshaped(src_dims, axes: Axes, dst_dims) -> Axes | None:
    """The map of ``Reshape(x)`` to ``dst_dims`` from ``x``'s (dims ``src_dims``), or None
    when a group of the reshape mixes axes another way than splitting one or merging axes
    nested in the base."""
    src = [(d, m) for d, m in zip(src_dims, axes) if d != 1]
    dst = [(a, d) for a, d in enumerate(dst_dims) if d != 1]
    out = [AxisMap(None, 0)] * len(dst_dims)
    i = j = 0
    while i < len(src) or j < len(dst):
        if i >= len(src) or j >= len(dst):
            return None
        group_src, group_dst = [src[i]], [dst[j]]
        i, j = i + 1, j + 1
        ps, pd = group_src[0][0], group_dst[0][1]
        while ps != pd:
            if ps < pd:
                if i >= len(src):
                    return None
                group_src.append(src[i])
                ps, i = ps * src[i][0], i + 1
            else:
                if j >= len(dst):
                    return None
                group_dst.append(dst[j])
                pd, j = pd * dst[j][1], j + 1
        merged = _merged(group_src)
        if merged is None or (len(group_src) > 1 and len(group_dst) > 1):
            return None
        inner = 1
        for a, d in reversed(group_dst):     # split: the last axis moves fastest
            out[a] = AxisMap(merged.axis, merged.scale * inner)
            inner *= d
    return tuple(out)


def _merged(group: list[tuple[int, AxisMap]]) -> AxisMap | None:
    """One map for axes merged into one (outer first): all along one base axis, each
    outer one stepping over the whole of the next."""
    _, last = group[-1]
    for (_, outer), (inner_dim, inner) in zip(group, group[1:]):
        if outer.axis != inner.axis or outer.scale != inner.scale * inner_dim:
            return None
    return last


def view_slices(v: Value, slices: list[str]) -> tuple[str, list[str]]:
    """The buffer and slices of the view ``slices`` (one ``a:b`` or index per logical
    dim of ``v``) of ``v``, folded or not."""
    if not isinstance(v, FoldedValue):
        return v.name, slices
    starts = [0] * v.base.rank
    varying: dict[int, tuple[int, int]] = {}        # base axis -> (extent, scale)
    for text, m in zip(slices, v.axes):
        lo, _, hi = text.partition(":")
        lo = int(lo)
        extent = int(hi) - lo if hi else 1
        if m.axis is None:
            continue
        starts[m.axis] += lo * m.scale
        if extent > 1:
            if m.axis in varying:
                raise AssertionError("two ranges along one base axis (fold_views checks)")
            varying[m.axis] = (extent, m.scale)
    out = []
    for axis, start in enumerate(starts):
        if axis not in varying:
            out.append(str(start))
            continue
        extent, scale = varying[axis]
        stop = start + scale * (extent - 1) + 1
        out.append(f"{start}:{stop}" if scale == 1 else f"{start}:{stop}:{scale}")
    return v.name, out


def matrix_axes(v: Value, row_axis: int, col_axis: int) -> tuple[TensorType, int, int]:
    """The type whose dims order decides a matrix's CMX order, and the two axes in it."""
    if not isinstance(v, FoldedValue):
        return v.type, row_axis, col_axis
    return v.base, v.axes[row_axis].axis, v.axes[col_axis].axis


def folded_value(alias: Alias, base: Value, logical: TensorType) -> FoldedValue:
    return FoldedValue(base.name, logical, base.kind, base.init, base.also_output,
                       base=base.type, axes=alias.axes)


def _matrix_ok(axes: Axes, dims, base_rank: int, row_axis: int, col_axis: int) -> bool:
    """Rows and columns move along two different base axes (each more than one element),
    or one row along none and the columns along one, of a base of rank 3 or more: its
    views never have a matrix's shape, so they are copied in memory order, never element
    for element (a rank-2 base's square blocks would)."""
    r, c = axes[row_axis], axes[col_axis]
    if base_rank < 3 or dims[col_axis] <= 1 or c.axis is None:
        return False
    if dims[row_axis] == 1:
        return r.axis is None
    return r.axis is not None and r.axis != c.axis


def _step(op: GraphOp, src_dims, axes: Axes) -> Axes | None:
    if op.kind == "Transpose":
        return transposed(axes, op.attrs["order"])
    return reshaped(src_dims, axes, op.type.dims)


def fold_views(graph: Graph, segments: list) -> list:
    """``segments`` without the Reshape/Transpose segments folded into MatMuls, the MatMul
    segments given their ``aliases`` and ``folded`` ops (see the module docstring)."""
    index = graph.index()
    dma = {seg.dma.result: seg for seg in segments
           if seg.dma is not None and seg.dma.kind in FOLDABLE}
    type_of = {op.result: op.type for op in graph.ops if op.result is not None}
    dropped: set[int] = set()

    def single_user(v: str) -> GraphOp | None:
        users = index.users.get(v, [])
        return graph.ops[users[0]] if len(users) == 1 else None

    for seg in segments:
        layer = seg.layer
        if layer is None or layer.op.kind != "MatMul":
            continue
        op = layer.op
        ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
        for position, v in enumerate(op.operands[:2]):
            if op.operands.count(v) != 1:
                continue
            chain = []
            # (a chain another MatMul already stores through is that MatMul's: read its end)
            while v in dma and id(dma[v]) not in dropped and single_user(v) is (chain[-1] if chain else op):
                chain.append(dma[v].dma)
                v = dma[v].dma.operands[0]
            if not chain:
                continue
            axes = identity(type_of[v].dims)
            dims = type_of[v].dims
            for link in reversed(chain):
                axes = axes and _step(link, dims, axes)
                dims = link.type.dims
            rank = len(dims)
            flip = ta if position == 0 else not tb
            rows, cols = (rank - 1, rank - 2) if flip else (rank - 2, rank - 1)
            if axes is None or not _matrix_ok(axes, dims, len(type_of[v].dims), rows, cols):
                continue
            seg.aliases[op.operands[position]] = Alias(v, axes, tuple(chain))
            seg.folded += chain
            dropped.update(id(dma[link.result]) for link in chain)
        out, chain = layer.output, []
        nxt = single_user(out)
        while (nxt is not None and nxt.result in dma and dma[nxt.result].dma is nxt
               and id(dma[nxt.result]) not in dropped):
            chain.append(nxt)
            nxt = single_user(nxt.result)
        if not chain:
            continue
        end = chain[-1].result
        axes, dims = identity(type_of[end].dims), type_of[end].dims
        for link in reversed(chain):         # back from the end: the inverse ops
            src = type_of[link.operands[0]].dims
            if link.kind == "Transpose":
                perm = link.attrs["order"]
                inverse = [perm.index(a) for a in range(len(perm))]
                axes = transposed(axes, inverse)
            else:
                axes = reshaped(dims, axes, src)
            dims = src
            if axes is None:
                break
        rank = len(dims)
        if axes is None or not _matrix_ok(axes, dims, len(type_of[end].dims), rank - 2, rank - 1):
            continue
        seg.aliases[out] = Alias(end, axes, tuple(chain))
        seg.folded += chain
        dropped.update(id(dma[link.result]) for link in chain)
    return [seg for seg in segments if id(seg) not in dropped]

