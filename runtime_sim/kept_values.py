"""``Network.kept`` recorded when it must be, not at every DMA write.

A CMX buffer that DMAs both write and read (a value kept in CMX between segments) is
recorded as its last DMA write left it, for the layer check.  Copying the whole buffer
after every DMA write to it copied MobileNetV3's resident values 286 times (18.8 MB a
run, 22.9 MB for ResNet-18).  The record is the same if taken later, as long as nothing
has written the buffer's bytes since: so a DMA write only marks the buffer pending, and
its bytes are copied when something else is about to write them (a DPU unit's output or
another DMA's destination sharing its bytes, an ACT SHAVE task's bound outputs), or at
the end of the run.  A later DMA write to the
buffer itself replaces the pending record: the old one would have been overwritten.
ACT SHAVE numerics may run later than their start (``act_defer.py``): a buffer some
queued invocation writes is recorded at its DMA, before the queue runs; one the queue
does not write stays pending, and an ACT task starting later whose outputs share its
bytes records it (whenever that task's numerics run, they run after).
"""

from __future__ import annotations

from runtime_sim.memory import Memory
from vpuc.ir.symbols import Region


class KeptValues:
    def __init__(self, network, memory: Memory, names: set[str],
                 queued_write=lambda key, lo, hi: False) -> None:
        self.network, self.memory, self.names = network, memory, names
        self.queued_write = queued_write     # (memory key, lo, hi) -> a queued ACT writes
        # pending buffer -> (memory key, first byte, past the last byte)
        self.pending: dict[str, tuple[tuple, int, int]] = {}

    def written_by_dma(self, dst: Region) -> None:
        """Before a DMA writes ``dst``."""
        if self.pending:
            self.before_write(dst, keep=dst.root.name)

    def after_dma(self, dst: Region) -> None:
        name = dst.root.name
        if name in self.names:
            span = self.memory.span(self.memory_region(name))
            if self.queued_write(*span):
                self.pending.pop(name, None)
                self.network.keep(name)
            else:
                self.pending[name] = span

    def before_write(self, region: Region, keep: str | None = None) -> None:
        """Before something writes ``region``: record the pending buffers it overlaps (but
        ``keep``, which the write replaces)."""
        if not self.pending:
            return
        key, lo, hi = self.memory.span(region)
        for name, (other, a, b) in list(self.pending.items()):
            if other == key and a < hi and lo < b and name != keep:
                self._record(name)

    def before_ranges(self, key: tuple, ranges) -> None:
        """Before an ACT SHAVE task runs that may store to ``ranges`` ([lo, hi) bytes) of
        memory ``key``: its bound outputs (the sanitizer refuses any other CMX store)."""
        for name, (other, a, b) in list(self.pending.items()):
            if other == key and any(a < hi and lo < b for lo, hi in ranges):
                self._record(name)

    def finish(self) -> None:
        for name in list(self.pending):
            self._record(name)

    def memory_region(self, name: str) -> Region:
        return self.network.symbols.region(name)

    def _record(self, name: str) -> None:
        del self.pending[name]
        self.network.keep(name)
