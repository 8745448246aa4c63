"""The schedule's per-unit and per-barrier tables, and the views callers read them through.

A schedule of 100k tasks has about 125k units and 100k barriers; a Python
object, tuple and list per unit and per barrier was most of the verifier's
memory.  So ``vpuc.analysis.schedule.Schedule`` keeps machine-int columns
(``array``) and compressed rows (CSR: a start offset per row into one flat
array), and hands out the objects callers use (``Unit``, a barrier's user
list) only when asked, built from the columns.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vpuc.diagnostics import Loc
from vpuc.ir.tasks import Executor


def unit_name(task, list_index: int, executor: Executor, variant: int | None = None) -> str:
    base = task.label or f"{executor.value.lower()}#{list_index}"
    if variant is None:
        return base
    label = task.variants[variant].label
    return f"{base}.{label}" if label else f"{base}.v{variant}"


def merge_barriers(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    """A DPU variant's barriers: the task's, then its own not already listed."""
    if not first:
        return tuple(second)
    return tuple(dict.fromkeys(first + tuple(second)))


@dataclass(slots=True)
class Unit:
    """One unit as callers see it; built on request from the schedule's columns."""

    index: int
    task: object                 # DmaTask | DpuTask | SwKernelTask
    variant: int | None          # DPU variant index
    queue: int
    position: int                # within its queue
    list_index: int              # within its task list
    executor: Executor           # of its task list

    @property
    def name(self) -> str:
        return unit_name(self.task, self.list_index, self.executor, self.variant)

    @property
    def waits(self) -> tuple[str, ...]:
        if self.variant is None:
            return tuple(self.task.waits)
        return merge_barriers(self.task.waits, self.task.variants[self.variant].waits)

    @property
    def updates(self) -> tuple[str, ...]:
        if self.variant is None:
            return tuple(self.task.updates)
        return merge_barriers(self.task.updates, self.task.variants[self.variant].updates)

    @property
    def loc(self) -> Loc:
        return self.task.loc if self.variant is None else self.task.variants[self.variant].loc


@dataclass(slots=True)
class Queue:
    key: tuple                   # ("DMA", channel) | ("DPU", tile) | ("ACT_SHAVE", tile)
    engines: int
    units: array                 # unit indices in queue order ('i')

    @property
    def serial(self) -> bool:
        return self.engines == 1

    def __str__(self) -> str:
        kind, index = self.key
        return f"{kind} channel {index}" if kind == "DMA" else f"{kind} tile {index}"


class UnitColumns:
    """The units as columns: what ``Unit`` holds, one array (or list) per field."""

    __slots__ = ("task", "variant", "queue", "position", "list_index", "executor", "executors")

    def __init__(self) -> None:
        self.task: list = []
        self.variant = array("i")        # -1: not a DPU variant
        self.queue = array("i")
        self.position = array("i")
        self.list_index = array("i")
        self.executor = array("i")       # index into ``executors``
        self.executors: list[Executor] = []


class UnitTable(Sequence):
    """``schedule.units``: a read-only sequence of ``Unit`` built from the columns."""

    __slots__ = ("_columns",)

    def __init__(self, columns: UnitColumns) -> None:
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns.task)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        c = self._columns
        if index < 0:
            index += len(c.task)
        variant = c.variant[index]
        return Unit(index, c.task[index], None if variant < 0 else variant, c.queue[index],
                    c.position[index], c.list_index[index], c.executors[c.executor[index]])

    def __iter__(self):
        c = self._columns
        executors = c.executors
        for index, (task, variant, queue, position, list_index, executor) in enumerate(
                zip(c.task, c.variant, c.queue, c.position, c.list_index, c.executor)):
            yield Unit(index, task, None if variant < 0 else variant, queue, position,
                       list_index, executors[executor])


class Rows:
    """Rows of ints in one flat array: row ``r`` is ``values[start[r]:start[r + 1]]``."""

    __slots__ = ("start", "values")

    def __init__(self) -> None:
        self.start = array("i", [0])
        self.values = array("i")

    def close_row(self) -> None:
        self.start.append(len(self.values))

    def __len__(self) -> int:
        return len(self.start) - 1

    def row(self, r: int) -> array:
        return self.values[self.start[r]:self.start[r + 1]]

    def size(self, r: int) -> int:
        return self.start[r + 1] - self.start[r]

    def transposed(self, columns: int) -> "Rows":
        """Row ``c`` of the result lists the rows ``r`` with ``c`` in row ``r``, ascending,
        once per occurrence (a counting sort)."""
        out = Rows()
        count = [0] * (columns + 1)
        for c in self.values:
            count[c + 1] += 1
        for c in range(columns):
            count[c + 1] += count[c]
        out.start = array("i", count)
        fill = count[:-1]
        placed = [0] * len(self.values)
        start, values = self.start, self.values
        for r in range(len(start) - 1):
            for j in range(start[r], start[r + 1]):
                c = values[j]
                placed[fill[c]] = r
                fill[c] += 1
        out.values = array("i", placed)
        return out


class BarrierUsers(Mapping):
    """``schedule.producers`` / ``schedule.consumers``: barrier name → its units, in unit
    order (a unit listing a barrier twice is there twice); only barriers with users."""

    __slots__ = ("_index", "_names", "_rows")

    def __init__(self, index: dict[str, int], names: list[str], rows: Rows) -> None:
        self._index = index
        self._names = names
        self._rows = rows

    def count(self, name: str) -> int:
        k = self._index.get(name)
        return 0 if k is None else self._rows.size(k)

    def __getitem__(self, name: str) -> list[int]:
        k = self._index.get(name)
        if k is None or not self._rows.size(k):
            raise KeyError(name)
        return list(self._rows.row(k))

    def get(self, name: str, default=None):
        k = self._index.get(name)
        if k is None or not self._rows.size(k):
            return default
        return list(self._rows.row(k))

    def __contains__(self, name) -> bool:
        return bool(self.count(name))

    def __iter__(self):
        for k, name in enumerate(self._names):
            if self._rows.size(k):
                yield name

    def __len__(self) -> int:
        return sum(1 for k in range(len(self._names)) if self._rows.size(k))


# ---------------------------------------------------------------- multi-engine clock entries
# A multi-engine queue's clock entry is (prefix, mask): positions up to ``prefix``
# have ended, and bit ``i`` of ``mask`` says position ``prefix + 1 + i`` has too.

MASK_BITS = 64  # how far past its prefix a multi-engine queue's clock remembers ended units


def _normalize(prefix: int, mask: int) -> tuple[int, int]:
    # Fold the run of ended positions just past the prefix into the prefix.
    run = (~mask & (mask + 1)).bit_length() - 1
    return prefix + run, (mask >> run) & ((1 << MASK_BITS) - 1)


def merge_multi(entries) -> tuple[int, int]:
    """Multi-engine queue clock entries (prefix, mask) merged: what any of them knows ended."""
    prefix = max(e[0] for e in entries)
    mask = 0
    for p, m in entries:
        if prefix - p < MASK_BITS:
            mask |= m >> (prefix - p)
    return _normalize(prefix, mask)


def mark_ended(entry: tuple[int, int], position: int) -> tuple[int, int]:
    """A multi-engine queue's clock entry with ``position`` ended too."""
    prefix, mask = entry
    offset = position - prefix - 1
    if offset < 0 or offset >= MASK_BITS:
        return entry  # already known, or too far ahead to remember (a search will confirm)
    return _normalize(prefix, mask | (1 << offset))
