"""``Network.kept``: each value kept whole in CMX between segments, as its writers left it.

A value the schedule keeps in CMX (``vpuc/fusion/resident.py``) is written piecewise by
whichever engine produces it: DMA stores of its blocks, DPU tasks writing their rows in
place, ACT SHAVE kernels binding it as an output.  Once its readers are done, later
buffers may reuse its bytes, so the per-layer reference check (``layer_check.py``) reads
the copy recorded here: the buffer's bytes just before anything else writes them, or at
the end of the run.  Any write to a kept buffer only marks it pending (a later write to it
replaces nothing yet: the value is not complete); a write to other bytes sharing its own
(a DMA's destination, a DPU unit's output, an ACT SHAVE task's bound outputs) records it
first.  Copying after every write instead copied MobileNetV3's resident values 286 times
(18.8 MB a run).

ACT SHAVE numerics may run later than their start (``act_defer.py``): the queue runs
before any task touching bytes a queued invocation writes, so a record taken before such a
task's write holds every queued write to the value; the pending records are taken after
the final flush.  DMAs may be queued with them; a record runs the queue first when it
writes the buffer's bytes (``before_record``).

The buffers recorded (``kept_names``): with the program's source graph, the CMX buffers
named after its values (the ones the layer check reads); without one (a blob read back),
the CMX buffers that DMAs both write and read.
"""

from __future__ import annotations

import re
from typing import Callable

from runtime_sim.memory import Memory
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import Region

_UNSAFE = re.compile(r"[^A-Za-z0-9_.$]")


def value_buffer(value: str) -> str:
    """The program buffer lower-graph names after a graph value (its ``sanitize``)."""
    return _UNSAFE.sub("_", value)


def kept_names(program, dma_read: set[str], dma_written: set[str]) -> set[str]:
    """The CMX buffers to record (module docstring); ``dma_read``/``dma_written``: the CMX
    roots DMAs read and write."""
    graph = program.source_graph
    if graph is None:
        return dma_read & dma_written
    values = {value_buffer(op.result) for op in graph.ops if op.result is not None}
    return {b.name for b in program.module.buffers
            if b.kind is BufferKind.CMX and b.name in values}


class KeptValues:
    def __init__(self, network, memory: Memory, names: set[str]) -> None:
        self.network, self.memory, self.names = network, memory, names
        # pending buffer -> (memory key, first byte, past the last byte)
        self.pending: dict[str, tuple[tuple, int, int]] = {}
        self._spans: dict[str, tuple[tuple, int, int]] = {}
        # called with a buffer's span before it is recorded: deferred numerics that write
        # it run first (``act_defer.DeferredActs.flush_over``)
        self.before_record: Callable[[tuple, int, int], None] | None = None

    def before_write(self, region: Region) -> None:
        """Before a DMA or a DPU unit writes ``region``: record the pending buffers it
        overlaps but its own."""
        if not self.pending:
            return
        key, lo, hi = self.memory.span(region)
        own = region.root.name
        for name, (other, a, b) in list(self.pending.items()):
            if other == key and a < hi and lo < b and name != own:
                self._record(name)

    def written(self, region: Region) -> None:
        """After a DMA or a DPU unit wrote ``region`` (or an ACT SHAVE task started that
        writes it: its numerics run before anything reads or overwrites it)."""
        name = region.root.name
        if name in self.names:
            span = self._spans.get(name)
            if span is None:
                span = self._spans[name] = self.memory.span(self.memory_region(name))
            self.pending[name] = span

    def before_ranges(self, key: tuple, ranges, own: set[str]) -> None:
        """Before an ACT SHAVE task runs that may store to ``ranges`` ([lo, hi) bytes) of
        memory ``key``: its bound outputs (the sanitizer refuses any other CMX store), the
        buffers ``own`` (their roots)."""
        for name, (other, a, b) in list(self.pending.items()):
            if other == key and name not in own and any(a < hi and lo < b
                                                        for lo, hi in ranges):
                self._record(name)

    def finish(self) -> None:
        for name in list(self.pending):
            self._record(name)

    def memory_region(self, name: str) -> Region:
        return self.network.symbols.region(name)

    def _record(self, name: str) -> None:
        span = self.pending.pop(name)
        if self.before_record is not None:
            self.before_record(*span)
        self.network.keep(name)
