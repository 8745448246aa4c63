"""Every unit's accesses as numpy columns, for the race proof (``race_proof``).

One row per access that touches a byte: unit, memory (a small int), first
byte, past the last byte, whether it writes, sorted by unit.  A strided
access keeps what its exact byte intervals are computed from (``handle``),
for the few pairs whose spans meet.

The same bytes ``race_access.Accesses`` gives with ``lazy`` (the reference,
``of_accesses``, which the tests compare with): a buffer or view is resolved
once per name by ``Accesses.named``; a DPU variant's boxes
(``dpu_engine.variant_boxes``) are not turned into spans one at a time
(``lazy_box_span``) but all at once, a numpy product of starts and strides
per rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from runtime_sim.memory import Memory
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.plan import DMA, DPU, Plan
from runtime_sim.race_access import Accesses, lazy_box_span, strided_rows
from runtime_sim.regions import Regions


@dataclass
class Columns:
    unit: np.ndarray            # int64, sorted
    key: np.ndarray             # int64: memory, numbered
    lo: np.ndarray              # int64: first byte
    hi: np.ndarray              # int64: past the last byte (> lo)
    write: np.ndarray           # bool
    handles: list               # per row: what its byte intervals come from, None when dense
    memories: list              # memory number -> its key (``Memory.placement``)

    def rows(self, i: int) -> np.ndarray | None:
        """The exact byte intervals of row ``i`` (None: dense, its span)."""
        handle = self.handles[i]
        return None if handle is None else strided_rows(handle, int(self.lo[i]))


def _as_is(span):
    return span


def _columns(units: list[int], spans: list[tuple], writes: list[bool]) -> Columns:
    """Columns of accesses given as (key, lo, hi, handle) spans; empty spans dropped."""
    # memories numbered in the order they first appear (item getters and maps: in C)
    memories = list(map(itemgetter(0), spans))
    key_ids = {key: i for i, key in enumerate(dict.fromkeys(memories))}
    keys = list(map(key_ids.__getitem__, memories))
    lo = np.fromiter(map(itemgetter(1), spans), np.int64, len(spans))
    hi = np.fromiter(map(itemgetter(2), spans), np.int64, len(spans))
    unit = np.asarray(units, np.int64)
    keep = np.flatnonzero(hi > lo)              # an empty span touches no byte
    keep = keep[np.argsort(unit[keep], kind="stable")]
    handles = list(map(itemgetter(3), map(spans.__getitem__, keep.tolist())))
    return Columns(unit[keep], np.asarray(keys, np.int64)[keep] if keys else unit[keep],
                   lo[keep], hi[keep], np.asarray(writes, bool)[keep], handles, list(key_ids))


def of_accesses(unit_accesses: list[list[tuple]]) -> Columns:
    """The reference: columns of ``Accesses(..., Footprint, lazy=True)`` per unit."""
    units, spans, writes = [], [], []
    for u, accesses in enumerate(unit_accesses):
        for found, write, _ in accesses:
            units.append(u)
            spans.append((found.key, found.lo, found.hi, found._region))
            writes.append(write)
    return _columns(units, spans, writes)


def access_columns(plan: Plan, memory: Memory, regions: Regions | None = None) -> Columns:
    """Every unit's accesses (raises ``VpucError`` where one does not resolve)."""
    accesses = Accesses(plan, memory, _as_is, lazy=True, regions=regions)
    named = accesses.named
    kinds, tasks, variants = plan.kind, plan.task, plan.variant
    units: list[int] = []
    spans: list[tuple] = []
    writes: list[bool] = []
    boxes: dict[int, list] = {}                 # rank -> [(row, box)]
    regions, operand_id = accesses.operand_regions, accesses._operand_id
    first_rows: dict[tuple, tuple[int, list[bool]]] = {}   # a variant -> its first rows
    repeats: list[tuple[int, int, int]] = []    # (rows, as the rows from, count)
    for u in range(plan.size):
        kind, task = kinds[u], tasks[u]
        if kind == DMA:
            units += (u, u)
            spans += (named(task.src), named(task.dst))
            writes += (False, True)
        elif kind == DPU:
            v = variants[u]
            operands = operand_id(task)
            variant = task.variants[v]
            key = (operands, variant.start, variant.end)
            found = first_rows.get(key)
            if found is not None:       # the same boxes (a pipeline over a few buffers)
                first, written = found
                repeats.append((len(spans), first, len(written)))
                units += [u] * len(written)
                spans += [None] * len(written)
                writes += written
                continue
            task_regions = regions(task, operands)
            reads, out = dpu_engine.variant_boxes(task, v, task_regions)
            outs = [out, *dpu_engine.copy_boxes(out, task_regions)]   # copies on other tiles
            first_rows[key] = (len(spans), [False] * len(reads) + [True] * len(outs))
            for box, write in [(box, False) for box in reads] + [(box, True) for box in outs]:
                boxes.setdefault(len(box[1]), []).append((len(spans), box))
                units.append(u)
                spans.append(None)
                writes.append(write)
        else:
            for binding in task.inputs:
                units.append(u)
                spans.append(named(binding.buffer))
                writes.append(False)
            for binding in task.outputs:
                units.append(u)
                spans.append(named(binding.buffer))
                writes.append(True)
    for found in boxes.values():
        _box_spans(memory, found, spans)
    for row, first, count in repeats:
        spans[row:row + count] = spans[first:first + count]
    return _columns(units, spans, writes)


def _box_spans(memory: Memory, boxes: list, spans: list) -> None:
    """``lazy_box_span`` of boxes of one rank, written to ``spans`` at their rows: the
    start by its strides and the extent in numpy.  A box of a dynamic buffer or of a
    negative size takes ``lazy_box_span`` (its checks, its errors)."""
    placement, dynamic = memory.placement, memory.dynamic
    fast, base, bits, keys, strides, starts, sizes = [], [], [], [], [], [], []
    for row, box in boxes:
        region, start, size = box
        root = region.root.name
        if (root in dynamic or min(size, default=0) < 0
                or len(region.strides_bits) != len(start) or len(size) != len(start)):
            spans[row] = lazy_box_span(memory, box)
            continue
        key, offset = placement[root]
        fast.append((row, box))
        keys.append(key)
        base.append(offset + region.byte_offset)
        bits.append(region.type.elem.bits)
        strides.append(region.strides_bits)
        starts.append(start)
        sizes.append(size)
    if not fast:
        return
    rank = len(starts[0])
    shape = (len(fast), rank)
    stride = np.asarray(strides, np.int64).reshape(shape)
    size = np.asarray(sizes, np.int64).reshape(shape)
    elem = np.asarray(bits, np.int64)
    lo = np.asarray(base, np.int64) + (np.asarray(starts, np.int64).reshape(shape) * stride
                                       // 8).sum(axis=1)
    count = size.prod(axis=1)
    span = np.where(count == 0, 0, (((size - 1) * stride).sum(axis=1) + elem + 7) // 8)
    strided = span != (count * elem + 7) // 8
    for (row, box), key, first, extent, rows in zip(fast, keys, lo.tolist(), span.tolist(),
                                                    strided.tolist()):
        spans[row] = (key, first, first + extent, box if rows else None)
