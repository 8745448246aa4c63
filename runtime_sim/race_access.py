"""The bytes each unit touches, for the race detector: resolved once, not per use.

A unit's accesses are (memory, first byte, past the last byte, rows) with the
name of the buffer or view and whether it writes; ``rows`` lists the exact
byte intervals of a strided region (None when it is dense).  They are
resolved once per buffer or view name (a DMA's source and destination, an ACT
task's bound buffers) and once per distinct DPU variant (operands, window and
output box), so a long pipeline over a few buffers resolves a few regions.

A view of a buffer is resolved by arithmetic on its slices (what
``vpuc.ir.symbols`` does, without building a ``Region``): the 100k-task
benchmark program has 50,000 views, each used by one DMA.  Strided views,
views of views and anything invalid take the ``Region`` path, which also
reports the errors.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.memory import Memory, byte_intervals
from runtime_sim.plan import DMA, DPU, Plan, dpu_operands
from runtime_sim.regions import Regions, slice_arithmetic
from vpuc.ir.symbols import Region

Span = tuple[tuple, int, int, "np.ndarray | None"]       # (memory, lo, hi, rows)
LazySpan = tuple[tuple, int, int, "Region | dpu_engine.Box | LazyRegion | None"]  # rows to compute


def region_span(memory: Memory, region: Region) -> Span:
    """The bytes a region may touch (a dynamic CMX buffer's dims and strides included);
    the memory sanitizer bounds ACT SHAVE kernels by the same spans."""
    key, lo, hi = memory.span(region)
    rows = None
    if region.span_bytes != region.type.nbytes and region.root.name not in memory.dynamic:
        rows = byte_intervals(region, lo)
        if len(rows) == 1:
            rows = None
    return key, lo, hi, rows


def lazy_region_span(memory: Memory, region: Region) -> LazySpan:
    """``region_span`` with a strided region's rows not computed: the region in their
    place, for ``strided_rows`` when (if ever) they are needed."""
    key, lo, hi = memory.span(region)
    strided = region.span_bytes != region.type.nbytes and region.root.name not in memory.dynamic
    return key, lo, hi, region if strided else None


def lazy_box_span(memory: Memory, box: "dpu_engine.Box") -> LazySpan:
    """``lazy_region_span`` of a DPU variant's box (``dpu_engine.variant_boxes``) by
    arithmetic on its operand's region, as ``sub_region`` would build it; the box itself
    stands for the region when strided."""
    region, starts, sizes = box
    if region.root.name in memory.dynamic or min(sizes, default=0) < 0:
        return lazy_region_span(memory, dpu_engine.sub_region(*box))   # its checks, its errors
    key, base = memory.placement[region.root.name]
    strides = region.strides_bits
    lo = base + region.byte_offset + sum(s * b // 8 for s, b in zip(starts, strides))
    bits = region.type.elem.bits
    count = 1
    for size in sizes:
        count *= size
    span = 0 if count == 0 else (sum((n - 1) * b for n, b in zip(sizes, strides)) + bits + 7) // 8
    return key, lo, lo + span, box if span != (count * bits + 7) // 8 else None


class LazyRegion:
    """A named region resolved when first asked (a strided view whose rows may never be)."""

    __slots__ = ("resolve", "name")

    def __init__(self, resolve: Callable[[str], Region], name: str) -> None:
        self.resolve, self.name = resolve, name


def strided_rows(region: "Region | dpu_engine.Box | LazyRegion", lo: int) -> np.ndarray | None:
    """The rows ``region_span`` gives the region (a DPU box, a lazy region) starting at
    byte ``lo``."""
    if type(region) is tuple:
        region = dpu_engine.sub_region(*region)
    elif type(region) is LazyRegion:
        region = region.resolve(region.name)
    rows = byte_intervals(region, lo)
    return None if len(rows) == 1 else rows


class Accesses:
    """``accesses(u)``: [(group, writes, name)] of unit ``u``, reads first.  ``group``
    turns a span into the detector's object for those bytes; with ``lazy``, a
    ``LazySpan`` (the proof computes a strided region's rows only where spans meet)."""

    def __init__(self, plan: Plan, memory: Memory, group: Callable[[Span], object],
                 lazy: bool = False, regions: Regions | None = None) -> None:
        self.plan, self.memory, self.group = plan, memory, group
        self.lazy = lazy
        self.spans = lazy_region_span if lazy else region_span
        # names -> regions, shared with whoever else resolves them (``simulator``)
        self._region = regions = regions if regions is not None else Regions(plan, memory)
        self.views, self.roots, self._root = regions.views, regions.roots, regions.root
        self.by_name: dict[str, object] = {}
        self.by_variant: dict[tuple, list] = {}
        self.operand_ids: dict[tuple, int] = {}      # a DPU task's operands and window -> id
        self.dpu_tasks: dict[int, int] = {}          # recent DPU tasks -> their operands' id
        self.dpu_regions: dict[int, dict] = {}       # operands' id -> their regions

    def __call__(self, u: int) -> list[tuple[object, bool, str]]:
        plan = self.plan
        kind, task = plan.kind[u], plan.task[u]
        if kind == DMA:
            return [(self.named(task.src), False, task.src), (self.named(task.dst), True, task.dst)]
        if kind == DPU:
            v = plan.variant[u]
            operands = self._operand_id(task)
            variant = task.variants[v]
            key = (operands, variant.start, variant.end)
            found = self.by_variant.get(key)
            if found is None:
                regions = self.operand_regions(task, operands)
                if self.lazy:        # spans by arithmetic: no Region per box
                    memory = self.memory
                    boxes, out = dpu_engine.variant_boxes(task, v, regions)
                    found = [(self.group(lazy_box_span(memory, b)), False, b[0].name)
                             for b in boxes]
                    found += [(self.group(lazy_box_span(memory, box)), True, box[0].name)
                              for box in (out, *dpu_engine.copy_boxes(out, regions))]
                else:
                    boxes, out = dpu_engine.variant_boxes(task, v, regions)
                    reads = [dpu_engine.sub_region(*b) for b in boxes]
                    writes = [dpu_engine.sub_region(*b)
                              for b in (out, *dpu_engine.copy_boxes(out, regions))]
                    found = ([(self.group(self.region_span(r)), False, r.name) for r in reads]
                             + [(self.group(self.region_span(w)), True, w.name) for w in writes])
                self.by_variant[key] = found
            return found
        return ([(self.named(b.buffer), False, b.buffer) for b in task.inputs]
                + [(self.named(b.buffer), True, b.buffer) for b in task.outputs])

    def _operand_id(self, task) -> int:
        """One number per distinct set of a DPU task's operands and window."""
        operands = self.dpu_tasks.get(id(task))
        if operands is None:
            if len(self.dpu_tasks) > 64:       # only the tasks running now matter
                self.dpu_tasks.clear()
            operands = self.dpu_tasks[id(task)] = self.operand_ids.setdefault(
                (id(task.op), task.inputs, task.output, task.broadcast_outputs, task.weights, task.bias, task.kernel,
                 task.stride, task.pad, task.dilation,
                 task.quant and task.quant.scale), len(self.operand_ids))
        return operands

    def operand_regions(self, task, operands: int | None = None) -> dict[str, Region]:
        """A DPU task's operand regions (``dpu_operands``), once per set of operands."""
        if operands is None:
            operands = self._operand_id(task)
        regions = self.dpu_regions.get(operands)
        if regions is None:          # once per task, not per variant
            regions = self.dpu_regions[operands] = dpu_operands(task, self._region)
        return regions

    # ------------------------------------------------------------ spans
    def named(self, name: str) -> object:
        found = self.by_name.get(name)
        if found is None:
            view = self.views.get(name)
            span = self._view_span(view) if view is not None else self._buffer_span(name)
            if span is None:
                span = self.region_span(self.plan.region(name))
            found = self.by_name[name] = self.group(span)
        return found

    def region_span(self, region: Region) -> Span | LazySpan:
        return self.spans(self.memory, region)

    def _buffer_span(self, name: str) -> Span | None:
        """A static buffer's bytes: its placement and dense size (a dense type's span is
        its ``nbytes``), without a ``Region``; None for a dynamic or unknown name."""
        memory = self.memory
        buffer = memory.buffers.get(name)
        if buffer is None or name in memory.dynamic:
            return None
        key, lo = memory.placement[name]
        return key, lo, lo + buffer.type.nbytes, None

    def _view_span(self, view) -> Span | None:
        """A view of a static buffer, by arithmetic: dense, or strided when ``lazy`` (its
    Region made only if its rows are asked); None for anything else."""
        root = self.roots.get(view.base, False)
        if root is False:
            root = self._root(view.base)
        if root is None:
            return None
        shape, strides, bits, key, base = root
        sliced = slice_arithmetic(view.slices, shape, strides)
        if sliced is None:
            return None
        dims, _, offset, last = sliced
        count = math.prod(dims)
        span = (last + bits + 7) // 8
        if offset % 8:
            return None
        lo = base + offset // 8
        if span == (count * bits + 7) // 8:
            return key, lo, lo + span, None
        if not self.lazy:
            return None                 # the online groups need the rows: the Region path
        return key, lo, lo + span, LazyRegion(self._region, view.name)

