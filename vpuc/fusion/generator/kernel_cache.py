"""Generated code kept per process: a body generated once is not generated again.

Design-space sweeps and test suites compile the same model many times, and a
model asks for the same body more than once (MobileNetV3's epilogue probes
generate the very body its ACT segment then generates under its own name), so
``generate`` keeps what it made for each input and returns it when the same
input comes again.

The key is everything the expensive stages (data-flow, LIR, emission,
clean-ups, register allocation) read, by exact content:

- the body as the canonical VIR printer writes it (``print_module``: every op,
  value name, attribute, type and constant, floats round-trippable), so two
  bodies differing in anything the generator reads print differently;
- the clean-up pass list and ``CleanupConfig`` (frozen, compared by value);
- whether the body came data-flow optimized;
- the target machine, by identity: the entry holds the target, so its id cannot
  be reused by another object while the entry lives.

The kernel's name is not in the key: it only enters the assembly, the object
and the contract, which ``generate`` makes afresh from the kept ``GeneratedCode``
for every call (so no two callers share a mutable ``KernelObject``).  A call
with a print hook or its own ``LoweringConfig`` is not kept: the hook must see
every stage run.  Entries are immutable by convention: the lowering reads a
kernel's LIR and MIR, never rewrites them.

``KEPT`` bounds the entries (least recently used dropped first); ``clear()``
forgets them all (a test that patches a generator stage clears it first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from vpuc.ir.graph import Graph
from vpuc.ir.module import Module
from vpuc.vir.printer import print_module

KEPT = 256      # MobileNetV3-Small makes 36 distinct kernels per compile, the encoder 9


@dataclass
class GeneratedCode:
    """What the expensive stages made for one input, shared by every equal request."""

    body: Graph                      # the data-flow-optimized body
    lir: object
    mir: object
    flat: list
    timings: list[tuple[str, float]]
    sizes: list[tuple[str, int]]
    config: object                   # the CleanupConfig attempt that allocated


@dataclass
class TargetMemo:
    """Results of a pure function, kept per process by an exact-content ``key`` and the
    target: the target is compared by identity and held with its entry, so its id cannot
    be reused by another object while the entry lives; the least recently used entry goes
    first beyond ``kept``.  Used for whole kernels (``GENERATED``) and for the clean-ups'
    per-block answers (``cleanup.analysis.block_key``)."""
    kept: int = KEPT
    entries: OrderedDict = field(default_factory=OrderedDict)
    hits: int = 0
    misses: int = 0

    def get(self, key: tuple, target):
        entry = self.entries.get((id(target),) + key)
        if entry is None or entry[0] is not target:
            self.misses += 1
            return None
        self.entries.move_to_end((id(target),) + key)
        self.hits += 1
        return entry[1]

    def put(self, key: tuple, target, value) -> None:
        full = (id(target),) + key
        self.entries[full] = (target, value)
        self.entries.move_to_end(full)
        while len(self.entries) > self.kept:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()
        self.hits = self.misses = 0


GENERATED = TargetMemo()


def generation_key(body: Graph, cleanups: list[str] | None, config,
                   optimized: bool) -> tuple:
    """The exact input of the generator's expensive stages but the target, which
    ``TargetMemo`` compares by identity."""
    text = print_module(Module("k", graphs=[body]))
    return (text, None if cleanups is None else tuple(cleanups), config, optimized)
