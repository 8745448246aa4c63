"""The column decoder's results as rows (``vpuc.blob.fb_columns``).

``Columns`` (a vector of tables, one list per field), ``Grouped`` (a column of
vectors of tables), ``Scalars`` (a column of scalars with its numpy array) and
``Vectors`` (a column of vectors of scalars with its numbers) iterate, index and compare as the generic decoder's tuples of records;
``value_rows`` and ``split_rows`` cut a column's flat values into each row's tuple,
a block per distinct length in C, each distinct row made once when rows repeat.
"""

from __future__ import annotations

from functools import partial
from itertools import islice

import numpy as np

MAX_ROW_COUNTS = 32         # distinct vector lengths cut a block each; beyond, row by row
_SAMPLE_ROWS = 64           # rows that show whether a column's rows repeat


class Columns:
    """A vector of ``record`` tables as one list per field (``columns``, by schema name);
    iterates, indexes and compares as the tuple of its rows' records."""

    __slots__ = ("record", "columns", "count")

    def __init__(self, record, columns: dict, count: int) -> None:
        self.record, self.columns, self.count = record, columns, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        if not self.columns:
            return iter([self.record._make(())] * self.count)
        return map(partial(tuple.__new__, self.record), zip(*self.columns.values()))

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.count)
            return Columns(self.record, {k: c[index] for k, c in self.columns.items()},
                           len(range(start, stop, step)))
        return self.record._make(c[index] for c in self.columns.values())

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, list, Columns)):
            return len(other) == self.count and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(tuple(self))


class Grouped:
    """A column of vectors of tables: every row's tables one after another (``flat``,
    ``Columns``) and each row's ``counts``; iterates as each row's ``Columns``."""

    __slots__ = ("flat", "counts")

    def __init__(self, flat: Columns, counts: list[int]) -> None:
        self.flat, self.counts = flat, counts

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self):
        flat, at = self.flat, 0
        for count in self.counts:
            yield flat[at:at + count]
            at += count

    def __getitem__(self, index):
        counts = self.counts
        if isinstance(index, slice):
            start, stop, step = index.indices(len(counts))
            if step != 1:
                return list(self)[index]
            first = sum(counts[:start])
            part = counts[start:stop]
            return Grouped(self.flat[first:first + sum(part)], part)
        index = range(len(counts))[index]
        first = sum(counts[:index])
        return self.flat[first:first + counts[index]]


class Scalars(list):
    """A column of scalars: the list of its values, which also keeps them as the decoder's
    numpy array (``array``), for a reader that works on the numbers as columns."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray, values: list | None = None) -> None:
        super().__init__(array.tolist() if values is None else values)
        self.array = array

    def __getitem__(self, index):
        got = list.__getitem__(self, index)
        # A slice keeps its numbers (a task list's rows of the TaskList vector's tasks).
        return Scalars(self.array[index], got) if isinstance(index, slice) else got

    def __reduce__(self):           # pickles as the plain list it equals
        return (list, (list(self),))


class Vectors:
    """A column of vectors of scalars: every row's values one after another (``values``,
    numpy) and each row's ``counts``, for a reader that works on the numbers as columns
    (``reader_fb``'s barrier indices); ``missing`` marks rows without a vector (None when
    every row has one).  It indexes, iterates and compares as the list of each row's tuple
    (``default`` for a missing vector), made only when first asked (``rows``: given, or
    cut from the values then); an indexed row alone is cut without making the others."""

    __slots__ = ("values", "counts", "missing", "default", "_rows", "_firsts")

    def __init__(self, rows: list | None, values: np.ndarray, counts: np.ndarray,
                 missing: np.ndarray | None = None, default=None) -> None:
        self.values, self.counts, self.default = values, counts, default
        if rows is not None and missing is None and None in rows:
            missing = np.fromiter((r is None for r in rows), bool, len(rows))
        self.missing = missing if missing is not None and missing.any() else None
        self._rows, self._firsts = rows, None

    def rows(self) -> list:
        """Each row's tuple (``default`` for a missing vector), made once."""
        rows = self._rows
        if rows is None:
            if self.missing is None:
                rows = value_rows(self.values, self.counts)
            else:
                present = ~self.missing
                made = value_rows(self.values, self.counts[present])
                scattered = np.full(len(self.counts), self.default, object)
                scattered[present] = np.fromiter(made, object, len(made))
                rows = scattered.tolist()
            self._rows = rows
        return rows

    def missing_rows(self) -> np.ndarray | None:
        """Rows without a vector, or None when every row has one."""
        return self.missing

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self):
        return iter(self.rows())

    def _first(self) -> np.ndarray:
        """Each row's first value's index, and past the last (made once)."""
        if self._firsts is None:
            self._firsts = np.concatenate(([0], np.cumsum(self.counts, dtype=np.int64)))
        return self._firsts

    def __getitem__(self, index):
        if not isinstance(index, slice):
            if self._rows is not None:
                return self._rows[index]
            row = range(len(self.counts))[index]
            if self.missing is not None and self.missing[row]:
                return self.default
            firsts = self._first()
            return tuple(self.values[firsts[row]:firsts[row + 1]].tolist())
        start, stop, step = index.indices(len(self.counts))
        if step != 1:
            return self.rows()[index]
        stop = max(start, stop)
        firsts = self._first()
        return Vectors(None if self._rows is None else self._rows[start:stop],
                       self.values[firsts[start]:firsts[stop]], self.counts[start:stop],
                       None if self.missing is None else self.missing[start:stop],
                       self.default)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, Vectors)):
            return len(other) == len(self) and self.rows() == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self.rows())

    def __reduce__(self):           # pickles as the plain list it equals
        return (list, (self.rows(),))


def value_rows(values: np.ndarray, count: np.ndarray) -> list[tuple]:
    """``values`` cut into consecutive tuples of ``count`` items: the rows of one count are
    cut from one block (few counts: ranks, barriers per task), in C."""
    rows = len(count)
    if rows == 0:
        return []
    counts = distinct_counts(count)
    if counts is None:
        return split_rows(values.tolist(), count.tolist())
    if len(counts) == 1:
        return _block(values, counts[0], rows)
    firsts = np.cumsum(count) - count
    out = np.empty(rows, object)
    out.fill(())
    for c in counts:
        if c:
            which = np.flatnonzero(count == c)
            block = values[firsts[which][:, None] + np.arange(c)].reshape(-1)
            out[which] = np.fromiter(_block(block, c, len(which)), object, len(which))
    return out.tolist()


def distinct_counts(count: np.ndarray) -> list[int] | None:
    """The distinct values of ``count`` (not empty), ascending; None when there are more
    than ``MAX_ROW_COUNTS``."""
    low, high = int(count.min()), int(count.max())
    if low == high:
        return [low]
    counts = (np.flatnonzero(np.bincount(count - low)) + low).tolist() \
        if high - low < 4 * MAX_ROW_COUNTS else np.unique(count).tolist()
    return None if len(counts) > MAX_ROW_COUNTS else counts


def _block(values: np.ndarray, c: int, rows: int) -> list[tuple]:
    """``rows`` rows of ``c`` values each, one after another, as tuples; when the first rows
    repeat (dims, strides, a kernel's window), each distinct row is made once and shared."""
    if c == 0:
        return [()] * rows
    if rows > _SAMPLE_ROWS:
        block = np.ascontiguousarray(values.reshape(rows, c))
        keys = block.view(f"V{c * block.itemsize}").reshape(-1)
        if len(set(keys[:_SAMPLE_ROWS].tolist())) <= _SAMPLE_ROWS // 8:
            keys = keys.tolist()
            made = dict.fromkeys(keys)
            distinct = np.frombuffer(b"".join(made), block.dtype).tolist()
            made = dict(zip(made, zip(*[iter(distinct)] * c)))
            return list(map(made.__getitem__, keys))
    return list(zip(*[iter(values.tolist())] * c))


def split_rows(flat: list, counts: list[int]) -> list[tuple]:
    """``flat`` cut into consecutive tuples of ``counts`` items."""
    if counts and min(counts) == max(counts) > 0:      # one rank, one variant count: all in C
        return list(zip(*[iter(flat)] * counts[0]))
    items = iter(flat)
    return [tuple(islice(items, c)) for c in counts]


class StructArrays:
    """A column of vectors of int64-only structs or of scalars as numbers: every row's
    items one after another (``values``; a struct's fields a row each) and each row's
    ``counts`` (0: none or absent); a reader that asked for it (``ColumnDecoder``'s
    ``struct_arrays``, ``number_vectors`` in ``fb_columns``) makes its own records from them."""

    __slots__ = ("values", "counts")

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        self.values, self.counts = values, counts

    def __len__(self) -> int:
        return len(self.counts)
