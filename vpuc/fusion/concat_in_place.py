"""``--schedule default``: a Concat operand that a DPU layer or another Concat writes is
written straight into its slice of the Concat's result.

A Concat is a DMA segment of DDR -> DDR copies (``lower_dma``): each operand read back
from DDR and written again into its slice of the result, after the layer that produced
it stored it.  SqueezeNet's fire modules (two expand convolutions, concatenated) and each
DenseNet-121 layer's new 32 channels pay that copy for every such operand.  The NPU
compiler's ``OptimizeConcatSlice`` / concat-in-place makes such an operand a view of the
result: here the operand's value is declared as a ``view`` of its slice (``Value.alias``),
the layer's stores (or the earlier Concat's copies) write through it, its other readers
(DPU layers only, whose loads take strided views) read it there, and the Concat copies
only the other operands (none: its segment has no task and is left out).  A chain of
Concats (a DenseNet dense block: each layer concatenates the one before with 32 new
channels) so fills one buffer, its earlier values prefixes of it, with no copy at all.

A Concat whose operands DPU layers alone write this way, and which only segments that
read resident values read (SqueezeNet's fire modules), may have its result held in CMX
(``resident_concats``, taken by ``resident.resident_values``): the expands' stores are then
CMX -> CMX copies into its slices and the next squeeze reads it in place, the value never
crossing DDR (the bound counts it so: a value that fits CMX could stay resident).

Expects: the block's values after ``ddr_layouts`` and ``resident_values``, and per
segment ``SegmentValues``.  Guarantees: an operand is aliased only when it is a DDR value
(not resident, not an output) of the result's dims order, written by one DPU segment or
Concat and read otherwise by DPU segments alone, and the result a DDR value, an output or
a resident value (unpadded) all of whose operands are aliased;
every byte of each result is written once, by the operand's writer or the Concat.
"""

from __future__ import annotations

from dataclasses import replace

from vpuc.fusion.blocked_program import Value
from vpuc.fusion.schedule_layouts import SegmentValues


def concat_aliases(values: list[Value], segments: list[SegmentValues], axes: dict[int, int]
                   ) -> tuple[list[Value], dict[int, set[str]]]:
    """``values`` with each Concat operand that can be written in place declared as a view
    of its slice of the result, and per Concat segment (``axes``: segment index -> its
    axis) the program names of the operands it no longer copies.  A result held in CMX
    (``resident_concats``) has every operand written in place, by the same test."""
    by_name = {v.name: v for v in values}
    users = value_users(segments)
    aliases: dict[str, tuple[str, tuple]] = {}
    in_place: dict[int, set[str]] = {}
    for i, axis in axes.items():
        seg = segments[i]
        result = by_name[seg.writes[0]]
        if result.kind not in ("ddr", "output") or result.alias \
                or result.tile is not None and result.padded:
            continue
        at = 0
        for name in seg.reads:
            v = by_name[name]
            n = v.type.dims[axis]
            if (in_place_operand(name, i, by_name, users, segments)
                    and name not in aliases and result.name not in aliases):
                spans = tuple((at, at + n) if a == axis else (0, d)
                              for a, d in enumerate(result.type.dims))
                aliases[name] = (result.name, spans)
                in_place.setdefault(i, set()).add(name)
            at += n
    # an operand of a result held in CMX lives on its tile: DPU blocks there write their
    # channels of its rows in place (``resident.in_place_blocks``), with no store
    home = {name: by_name[base].tile for name, (base, _) in aliases.items()}
    out = [replace(v, alias=aliases[v.name], tile=home[v.name]) if v.name in aliases else v
           for v in values]
    return out, in_place


def value_users(segments: list[SegmentValues]) -> dict[str, list[int]]:
    """Value name -> the segments that read or write it, in program order."""
    users: dict[str, list[int]] = {}
    for i, seg in enumerate(segments):
        for name in seg.reads + seg.writes:
            users.setdefault(name, []).append(i)
    return users


def in_place_operand(name: str, concat: int, by_name: dict[str, Value],
                     users: dict[str, list[int]], segments: list[SegmentValues]) -> bool:
    """Whether operand ``name`` of the Concat segment ``concat`` can be a view of its slice
    of the result (module docstring, "Guarantees")."""
    seg, v = segments[concat], by_name[name]
    result = by_name[seg.writes[0]]
    writers = [u for u in users[name] if name in segments[u].writes]
    others = [u for u in users[name] if u != concat and u not in writers]
    return (v.kind == "ddr" and v.tile is None and not v.also_output and v.type.is_static
            and v.type.order == result.type.order and v.type.elem == result.type.elem
            and seg.reads.count(name) == 1 and len(writers) == 1
            and _writes_in_place(segments[writers[0]])
            and all(segments[u].kind == "dpu" for u in others))


def resident_concats(values: list[Value], segments: list[SegmentValues]
                     ) -> dict[str, list[int]]:
    """Concat result -> the DPU segments that write its operands, for each Concat whose
    operands can all be written in place by DPU layers alone: such a result can be held in
    CMX like a DPU layer's output (``resident.resident_values``), its operands views of
    it, so no byte of the fire module's branches (SqueezeNet) crosses DDR."""
    by_name = {v.name: v for v in values}
    users = value_users(segments)
    out: dict[str, list[int]] = {}
    for i, seg in enumerate(segments):
        if seg.kind != "dma" or seg.op != "Concat" or len(seg.writes) != 1:
            continue
        writers = [u for name in seg.reads for u in users[name]
                   if name in segments[u].writes]
        if writers and all(segments[u].kind == "dpu" for u in writers) and all(
                in_place_operand(name, i, by_name, users, segments) for name in seg.reads):
            out[seg.writes[0]] = sorted(set(writers))
    return out


def _writes_in_place(seg: SegmentValues) -> bool:
    """Whether ``seg`` can write its value through a view of another: a DPU layer's
    stores, or a Concat's copies (a chain of Concats, DenseNet's, then fills one buffer)."""
    return seg.kind == "dpu" or seg.kind == "dma" and seg.op == "Concat"
