"""Where ``--schedule default`` lays out the values between segments (``schedule.py``'s
decision 1): a 4-D value that only DPU window layers and layout-free ACT segments produce
and read is NHWC in DDR, the order the DPU reads and writes CMX, so its stores and loads
are plain copies instead of transposing DMAs; an ACT segment whose every value can be
NHWC runs NHWC, its kernels generated with NHWC ports.

Expects (``ddr_layouts``): the block's values and, per segment, the values it reads and
writes (``SegmentValues``, from ``lower_segments``).  Guarantees: only the dims order of
values changes, never their dims or element type; an ACT segment runs NHWC only when all
of its values do.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from vpuc.fusion.blocked_program import Value
from vpuc.ir.graph import PARAMETER, RESULT, Graph
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType
from vpuc.verifier.graph import infer_graph

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


@dataclass
class SegmentValues:
    """What ``ddr_layouts`` needs of one segment: its kind (``dpu``: a window or eltwise DPU
    layer, ``matmul``, ``dma``, ``library``, ``act``), the program names of the values it
    reads and writes, and, for an ACT segment, whether its kernels can be generated for any
    dims order (``layout_free``: fused elementwise ops only, every value 4-D, so one storage
    order for all its operands computes the same elements); ``op``: a DPU segment's layer
    op kind (``resident.py`` pads the channels of values only some layers write and read)."""
    kind: str
    reads: list[str]
    writes: list[str]
    layout_free: bool = False
    op: str = ""


# DMA segments whose copies are the same in any one dims order of all their values: a
# Concat's operands go to slices of its result, so with every side NHWC each copy is a
# strided copy of whole pixels' channels, not a permuting one element at a time
LAYOUT_FREE_DMA = ("Concat",)


def layout_free(seg: SegmentValues) -> bool:
    """Whether ``seg`` computes the same elements with all its values in one other order."""
    return (seg.kind == "act" and seg.layout_free
            or seg.kind == "dma" and seg.op in LAYOUT_FREE_DMA)


def ddr_layouts(values: list[Value], segments: list[SegmentValues]) -> tuple[list[Value], set[int]]:
    """``values`` with every 4-D ``ddr`` value whose producer and readers are all DPU window
    layers, layout-free ACT segments or Concats (``layout_free``) laid out NHWC, and the
    indices of the ACT segments and Concats that run NHWC (every 4-D value they touch,
    their CMX temporaries too, is then NHWC, so their kernels see one storage order).  An ACT segment runs NHWC only when all its
    values can: one that also touches a value another DMA, a MatMul or library segment (or
    the network's inputs and outputs) sees in the graph's order keeps that order throughout."""
    by_name = {v.name: v for v in values}
    touching: dict[str, list[int]] = {}
    for i, seg in enumerate(segments):
        for name in seg.reads + seg.writes:
            touching.setdefault(name, []).append(i)

    def movable(v: Value) -> bool:
        if v.type.rank != 4 or not v.type.is_static:
            return False
        # a per-channel constant ([1, C, 1, 1]: a folded-away BatchNorm's) has the same bytes
        # in NCHW and NHWC, so it follows its segment's order for free
        return v.kind in ("ddr", "temp") or v.kind == "const" and all(
            d == 1 for axis, d in enumerate(v.type.dims) if axis != 1)

    free = {i for i, seg in enumerate(segments) if layout_free(seg)
            and all(movable(by_name[n]) for n in seg.reads + seg.writes)}
    while True:
        # a CMX temporary belongs to its ACT segment, a constant to its readers: NHWC with
        # them, never alone
        nhwc = {name for name, users in touching.items()
                if movable(by_name[name]) and all(segments[i].kind == "dpu" or i in free
                                                  for i in users)
                and (by_name[name].kind == "ddr" or all(i in free for i in users))}
        kept = {i for i in free if all(n in nhwc for n in segments[i].reads + segments[i].writes)}
        if kept == free:
            break
        free = kept
    out = []
    for v in values:
        if v.name in nhwc and v.type.order != NHWC:
            v = replace(v, type=TensorType(v.type.dims, v.type.elem, NHWC))
        out.append(v)
    return out, free


def nhwc_ports(body: Graph) -> Graph:
    """A copy of a fused subgraph's body whose 4-D Parameters and Results are NHWC: its
    kernel then reads and writes NHWC buffers (canonicalization turns the ports into
    memory shapes of that order, ``vpuc/fusion/dataflow/canonicalization.py``)."""
    out = copy.deepcopy(body)
    for op in out.ops:
        if op.kind in (PARAMETER, RESULT) and op.type is not None and op.type.rank == 4:
            op.type = TensorType(op.type.dims, op.type.elem, NHWC)
    infer_graph(out)
    return out
