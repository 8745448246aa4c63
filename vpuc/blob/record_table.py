"""A task list's records kept as columns, each record made only when asked.

A decoder that has a task list as columns (``elf_columns``) checks every field
on the columns (bounds, strings, pools) and hands the list over as a
``RecordTable``: it iterates, indexes, slices and compares as the tuple of
records it stands for, but a column is made into Python values only when a
reader of the records needs it (``column``), and a record only when it is
iterated or indexed.  ``rebuild`` and ``verify_columns`` read the columns they
check (``columns``) and make records only for the tasks they build.

A column is a list, a numpy array (made a list on request) or a function of the
rows wanted (a numpy array of row indices, or None for all) returning their values.
"""

from __future__ import annotations

from functools import partial

import numpy as np


class RecordTable:
    __slots__ = ("record", "count", "_columns", "_made", "sync")

    def __init__(self, record, count: int, columns: dict, sync=None) -> None:
        self.record, self.count, self._columns = record, count, columns
        self._made: dict[str, list] = {}
        self.sync = sync

    def column(self, name: str) -> list:
        """A column's values (a field of the record, or an extra column the decoder kept)."""
        made = self._made.get(name)
        if made is None and name not in self._columns and "." in name:
            group, field = name.split(".")       # a field of every row's sub-items
            made = self._made[name] = [getattr(item, field) for row in self.column(group)
                                       for item in row]
        if made is None:
            source = self._columns[name]
            if isinstance(source, np.ndarray):
                made = source.tolist()
            elif callable(source):
                made = source(None)
            else:
                made = source
            self._made[name] = made
        return made

    def has(self, name: str) -> bool:
        return name in self._columns

    def array(self, name: str) -> np.ndarray | None:
        """A numpy column as it is (None for another kind of column)."""
        source = self._columns.get(name)
        return source if isinstance(source, np.ndarray) else None

    def take(self, rows: np.ndarray) -> "RecordTable":
        """The records of ``rows`` (row indices), as a table."""
        def part(source):
            if isinstance(source, np.ndarray):
                return source[rows]
            if callable(source):
                return lambda wanted, f=source: f(rows if wanted is None else rows[wanted])
            picked = rows.tolist()
            return [source[i] for i in picked]
        # extra columns of the rows' sub-items (a DPU task's variants) are not taken
        return RecordTable(self.record, len(rows),
                           {name: part(self._columns[name]) for name in self.record._fields})

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        if not self.count:
            return iter(())
        return map(partial(tuple.__new__, self.record),
                   zip(*(self.column(name) for name in self.record._fields)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(self.count, dtype=np.int64)[index])
        row = range(self.count)[index]
        return next(iter(self.take(np.array([row], dtype=np.int64))))

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, list, RecordTable)) or hasattr(other, "columns"):
            return len(other) == self.count and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self):           # pickles as the plain tuple it equals
        return (tuple, (tuple(self),))


def columns(recs, *names: str) -> list:
    """The named columns of a task list's records: a ``RecordTable``'s own, else the
    records' fields zipped apart (a name with a dot, "variants.label", is a field of every
    DPU task's variants, in task order)."""
    if isinstance(recs, RecordTable):
        return [recs.column(name) for name in names]
    if not recs:
        return [[] for _ in names]
    fields = recs[0]._fields
    every = list(zip(*recs))
    out = []
    for name in names:
        if "." in name:
            group, field = name.split(".")
            items = [item for row in every[fields.index(group)] for item in row]
            out.append([getattr(item, field) for item in items])
        else:
            out.append(every[fields.index(name)])
    return out
