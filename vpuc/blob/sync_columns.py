"""The barrier indices of a blob's task records, flattened once into numpy columns.

Reading checks three things about them, each over every task and DPU variant:
every index in range (``rebuild._list_checked``, per task list), each
barrier's producer and consumer count as ``Schedule`` counts its units
(``rebuild._counts``), and no row both waiting on and updating one barrier
(``verify_columns``).  Each used to flatten the records' tuples on its own;
here they are flattened once per list (tasks, then DPU variants, in record
order) and every check is arithmetic on the arrays.

``sync_columns`` returns None when a record is not a task record; the callers
then check row by row, for the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from vpuc.blob.content import ActTaskRec, BarrierRec, BlobContent, DmaRec, DpuRec
from vpuc.blob.record_table import RecordTable

_TASK_KINDS = (DmaRec, DpuRec, ActTaskRec)
_sync = attrgetter("waits", "updates")
_variants = attrgetter("variants")


@dataclass
class Flat:
    """One side (waits or updates) of a group of rows: each index with its row."""

    rows: np.ndarray
    barriers: np.ndarray

    def pairs(self, first_row: int = 0) -> np.ndarray:
        """(first_row + row) << 32 | barrier per index."""
        return ((self.rows + first_row) << 32) | self.barriers


@dataclass
class ListSync:
    """A task list's barrier indices: its tasks' and its DPU variants' (``variant_task``:
    each variant's task; ``variant_count``: each task's variants)."""

    tasks: int
    waits: Flat
    updates: Flat
    variant_waits: Flat | None = None
    variant_updates: Flat | None = None
    variant_task: np.ndarray | None = None
    variant_count: np.ndarray | None = None
    # The list's other fields as numpy columns, by record field name, when the decoder had
    # them so (``vpuc.blob.rebuild_tables``; a DPU list's "corners": each variant's start,
    # end and mode, in task order).
    fields: dict | None = None

    def in_range(self, n_barriers: int) -> bool:
        sides = [self.waits, self.updates, self.variant_waits, self.variant_updates]
        return all(not len(s.barriers) or (s.barriers.min() >= 0 and s.barriers.max() < n_barriers)
                   for s in sides if s is not None)


_BARRIER_NUMBERS = ("id", "physical_id", "producer_count", "consumer_count")


def barrier_table(columns: dict) -> RecordTable:
    """A reader's barrier records as columns (``BarrierRec`` fields: "name" a list, the
    rest numpy), made into records only when iterated."""
    return RecordTable(BarrierRec, len(columns["name"]), columns)


def barrier_columns(barriers) -> tuple:
    """(ids, physical ids, names, producer counts, consumer counts) of the barrier records:
    a ``barrier_table``'s own columns, else the records zipped apart (int64 arrays, the
    names a list)."""
    if isinstance(barriers, RecordTable):
        ids, physical, producers, consumers = map(barriers.array, _BARRIER_NUMBERS)
        if not any(a is None for a in (ids, physical, producers, consumers)):
            return ids, physical, barriers.column("name"), producers, consumers
    n = len(barriers)
    ids, physical, names, producers, consumers = zip(*barriers) if n else ((),) * 5
    return (*(np.fromiter(c, np.int64, n) for c in (ids, physical)), list(names),
            *(np.fromiter(c, np.int64, n) for c in (producers, consumers)))


def flat_lists(rows: int, counts: np.ndarray, barriers: np.ndarray) -> Flat:
    """``Flat`` from each row's count and every row's indices one after another."""
    return Flat(np.repeat(np.arange(rows, dtype=np.int64), counts.astype(np.int64)),
                barriers.astype(np.int64))


def _flat(groups: list[tuple[int, ...]]) -> Flat:
    counts = np.fromiter(map(len, groups), np.int64, len(groups))
    barriers = np.fromiter(chain.from_iterable(groups), np.int64, int(counts.sum()))
    return Flat(np.repeat(np.arange(len(groups), dtype=np.int64), counts), barriers)


def list_sync(recs: tuple) -> ListSync | None:
    """One task list's columns; None when a record is not a task record or the list mixes
    DPU tasks with others."""
    if not recs:
        return ListSync(0, _flat([]), _flat([]))
    kinds = set(map(type, recs))
    if not kinds <= set(_TASK_KINDS) or (DpuRec in kinds and len(kinds) > 1):
        return None
    waits, updates = zip(*map(_sync, recs))
    found = ListSync(len(recs), _flat(waits), _flat(updates))
    if DpuRec in kinds:
        per_task = list(map(_variants, recs))
        counts = np.fromiter(map(len, per_task), np.int64, len(recs))
        variants = list(chain.from_iterable(per_task))
        v_waits, v_updates = zip(*map(_sync, variants)) if variants else ((), ())
        found.variant_waits, found.variant_updates = _flat(list(v_waits)), _flat(list(v_updates))
        found.variant_task = np.repeat(np.arange(len(recs), dtype=np.int64), counts)
        found.variant_count = counts
    return found


def sync_columns(content: BlobContent) -> list[ListSync] | None:
    """Every task list's columns (content order); None: check row by row."""
    lists = []
    for tl in content.task_lists:
        found = getattr(tl.tasks, "sync", None)
        if found is None:
            found = list_sync(tl.tasks)
        if found is None:
            return None
        lists.append(found)
    return lists


def unit_counts(lists: list[ListSync], size: int) -> tuple[list[int], list[int]]:
    """Each barrier's producers and consumers as ``Schedule`` counts its units: a DPU task
    once per variant (its own barriers with the variant's), a barrier listed twice once."""
    return tuple(side.tolist() for side in unit_count_arrays(lists, size))


def unit_count_arrays(lists: list[ListSync], size: int) -> tuple[np.ndarray, np.ndarray]:
    """``unit_counts`` as int64 arrays."""
    updates, waits = [], []
    first = 0
    for sync in lists:
        if sync.variant_task is None:
            updates.append((sync.updates.rows + first, sync.updates.barriers))
            waits.append((sync.waits.rows + first, sync.waits.barriers))
            first += sync.tasks
            continue
        n_units = len(sync.variant_task)
        first_unit = np.cumsum(sync.variant_count) - sync.variant_count
        for task_side, variant_side, out in ((sync.updates, sync.variant_updates, updates),
                                             (sync.waits, sync.variant_waits, waits)):
            # A task's barriers, once for each of its variants' units.
            reps = sync.variant_count[task_side.rows]
            within = np.arange(int(reps.sum()), dtype=np.int64) - \
                np.repeat(np.cumsum(reps) - reps, reps)
            units = np.repeat(first_unit[task_side.rows], reps) + within
            out.append((units + first, np.repeat(task_side.barriers, reps)))
            out.append((variant_side.rows + first, variant_side.barriers))
        first += n_units
    return tuple(_units_per_barrier(side, size) for side in (updates, waits))


def _units_per_barrier(side: list[tuple[np.ndarray, np.ndarray]], size: int) -> np.ndarray:
    """Each barrier's number of distinct units among the (units, barriers) pairs: only the
    units listing more than one barrier can list one twice, so only theirs are sorted."""
    if not side:
        return np.zeros(size, np.int64)
    units = np.concatenate([u for u, _ in side])
    barriers = np.concatenate([b for _, b in side])
    if not len(units):
        return np.zeros(size, np.int64)
    multi = np.bincount(units)[units] > 1
    if not multi.any():
        return np.bincount(barriers, minlength=size).astype(np.int64)
    pairs = _distinct((units[multi] << 32) | barriers[multi])
    return (np.bincount(barriers[~multi], minlength=size) +
            np.bincount(pairs & 0xFFFFFFFF, minlength=size)).astype(np.int64)


def rows_disjoint(lists: list[ListSync]) -> bool:
    """No task and no DPU variant both waits on and updates one barrier."""
    waits, updates = [], []
    first = 0
    for sync in lists:          # task rows of every list, then variant rows
        waits.append((sync.waits.rows + first, sync.waits.barriers))
        updates.append((sync.updates.rows + first, sync.updates.barriers))
        first += sync.tasks
    for sync in lists:
        if sync.variant_task is not None:
            waits.append((sync.variant_waits.rows + first, sync.variant_waits.barriers))
            updates.append((sync.variant_updates.rows + first, sync.variant_updates.barriers))
            first += len(sync.variant_task)
    if not waits:
        return True
    w_rows, w_ids = (np.concatenate(c) for c in zip(*waits))
    u_rows, u_ids = (np.concatenate(c) for c in zip(*updates))
    if not len(w_rows) or not len(u_rows):
        return True
    # Rows of at most one wait and one update compared as two columns (-1/-2: none); the
    # rows listing more on a side as sorted (row, barrier) pairs.
    multi = (np.bincount(w_rows, minlength=first) > 1) | \
        (np.bincount(u_rows, minlength=first) > 1)
    wait_of = np.full(first, -1, np.int64)
    wait_of[w_rows] = w_ids
    update_of = np.full(first, -2, np.int64)
    update_of[u_rows] = u_ids
    if ((wait_of == update_of) & ~multi).any():
        return False
    if not multi.any():
        return True
    in_w, in_u = multi[w_rows], multi[u_rows]
    w_pairs = (w_rows[in_w] << 32) | w_ids[in_w]
    u_pairs = np.sort((u_rows[in_u] << 32) | u_ids[in_u])
    if not len(w_pairs) or not len(u_pairs):
        return True
    at = np.minimum(np.searchsorted(u_pairs, w_pairs), len(u_pairs) - 1)
    return not (u_pairs[at] == w_pairs).any()


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (np.unique, by one sort)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values
