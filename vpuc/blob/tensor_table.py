"""A blob's tensor records kept as numpy columns, a record made only when asked.

A program of 100k tasks has 50,000 tensors, nearly all views of a handful of
buffers.  Both readers hand their tensor records over as a ``TensorTable``: a
``RecordTable`` of ``TensorRec`` (it iterates, indexes and compares as the tuple
of records it stands for) that also keeps the numbers as int64 columns
(``TensorArrays``): the scalar fields one entry per tensor, the dims, strides and
slices of every tensor one after another with each tensor's count.  ``rebuild``
checks the records on these columns and makes a ``View`` only when the module's
views are asked for; ``view_columns`` resolves the views on them;
``tensor_arrays`` makes the same columns from plain records (a content not read
from bytes).

The fields the schema declares unsigned 64-bit (a data offset, a stride) can
hold what int64 cannot: ``unsigned_column`` refuses such a record where it is
read, with the reader's location and the range expected, before any arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from vpuc.blob.content import SliceRec, TensorRec
from vpuc.blob.record_table import RecordTable

_FIELDS = TensorRec._fields
INT64_LIMIT = 1 << 63           # unsigned 64-bit fields must stay below (int64 columns)


@dataclass(eq=False)
class TensorArrays:
    """The tensor records' numbers as columns (int64; one entry per tensor unless noted)."""

    names: list
    location: np.ndarray
    tile: np.ndarray
    offset: np.ndarray
    data_offset: np.ndarray
    data_type: np.ndarray
    base: np.ndarray
    rank: np.ndarray                # len(dims)
    dims: np.ndarray                # every tensor's dims, one after another (rank each)
    strides_count: np.ndarray
    strides: np.ndarray             # every tensor's strides in bits (strides_count each)
    slice_count: np.ndarray
    slices: np.ndarray              # (total slices, 3): start, stop, step (slice_count each)
    dynamic_dims: list              # each tensor's dynamic flags (() for none: most)
    order: np.ndarray               # every tensor's dims order, one after another
    order_count: np.ndarray
    _padded: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.base)

    def padded(self, which: str, fill: int = -1) -> np.ndarray:
        """``dims``, ``order`` or ``strides`` as an (n, widest) matrix, short rows filled with ``fill``
        (made once: rebuild and view_columns both read it; not to be written)."""
        made = self._padded.get((which, fill))
        if made is None:
            flat, count = {"dims": (self.dims, self.rank), "order": (self.order, self.order_count),
                           "strides": (self.strides, self.strides_count)}[which]
            made = self._padded[which, fill] = padded(flat, count, fill)
        return made

    def slice_rows(self, rows: np.ndarray) -> np.ndarray:
        """The slices of ``rows`` (all of one slice count r) as an (len(rows), r, 3) array."""
        firsts = np.cumsum(self.slice_count) - self.slice_count
        r = int(self.slice_count[rows[0]]) if len(rows) else 0
        return self.slices[firsts[rows][:, None] + np.arange(r)]


def padded(flat: np.ndarray, count: np.ndarray, fill: int = -1) -> np.ndarray:
    """Rows of ``count`` values one after another (``flat``) as a matrix of the widest row."""
    n = len(count)
    width = int(count.max()) if n else 0
    if n and int(count.min()) == width:      # one rank: the values are the matrix
        return flat.astype(np.int64).reshape(n, width)
    out = np.full((n, width), fill, np.int64)
    if len(flat):
        row = np.repeat(np.arange(n, dtype=np.int64), count)
        column = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(count) - count,
                                                                  count)
        out[row, column] = flat
    return out


class TensorTable(RecordTable):
    """The tensor records as columns (``RecordTable``), with their ``TensorArrays``."""

    __slots__ = ("arrays",)

    def __init__(self, columns: dict, arrays: TensorArrays) -> None:
        super().__init__(TensorRec, len(arrays), columns)
        self.arrays = arrays

    def __reduce__(self):           # pickles as the plain tuple it equals
        return (tuple, (tuple(self),))


def _rows_of(flat: np.ndarray, count: np.ndarray, make=tuple):
    """A column function (``RecordTable``) cutting ``flat`` into each wanted row's values,
    made into a record field by ``make``."""
    firsts = np.cumsum(count) - count

    def rows(wanted):
        picked = np.arange(len(count)) if wanted is None else wanted
        counts = count[picked]
        at = np.repeat(firsts[picked] - (np.cumsum(counts) - counts), counts) + \
            np.arange(int(counts.sum()), dtype=np.int64)
        values = iter(flat[at].tolist())
        return [make(next(values) for _ in range(c)) for c in counts.tolist()]
    return rows


def _slice_recs(words) -> tuple:
    """A row's slice words (start, stop, step, ... as rows of 3) as SliceRecs."""
    return tuple(SliceRec(*w) for w in words)


def table(names: list, ints: dict, rank: np.ndarray, dims: np.ndarray, strides_count,
          strides: np.ndarray, slice_count: np.ndarray, slices: np.ndarray, order: np.ndarray,
          order_count: np.ndarray, dynamic_dims: list, const_init: list) -> TensorTable:
    """The tensor table of a reader's checked columns: ``ints`` the scalar fields (location,
    tile, offset, data_offset, data_type, base) as int64 arrays; ``dims``/``strides`` flat
    int64 arrays with each row's count; ``slices`` the (total, 3) slice words with each
    row's count; ``order`` the flat dims orders with each row's count; ``dynamic_dims`` and
    ``const_init`` one value per row."""
    arrays = TensorArrays(names, *(ints[k] for k in ("location", "tile", "offset",
                                                        "data_offset", "data_type", "base")),
                          rank, dims, strides_count, strides, slice_count, slices,
                          dynamic_dims, order, order_count)
    columns = dict(ints)
    columns.update(name=names, dims=_rows_of(dims, rank),
                   strides=_rows_of(strides, strides_count),
                   dims_order=_rows_of(order, order_count),
                   slices=_rows_of(slices, slice_count, _slice_recs),
                   dynamic_dims=dynamic_dims, const_init=const_init)
    return TensorTable(columns, arrays)


def unsigned_column(values, limit: int, fail) -> np.ndarray:
    """An unsigned 64-bit column (a numpy array, or a list of Python ints) as int64;
    ``fail(i, value)`` raises for the first value not below ``limit`` (its located error)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        big = values >= np.uint64(limit) if values.dtype == np.uint64 else None
        array = values
    else:
        try:
            return np.fromiter(values, np.int64, len(values))
        except OverflowError:       # a Python int past int64
            array = np.array([not 0 <= v < limit for v in values], bool)
            big = array
            values = list(values)
    if big is not None and big.any():
        i = int(np.argmax(big))
        raise fail(i, int(values[i]))
    return array.astype(np.int64)


def tensor_arrays(tensors) -> TensorArrays:
    """The ``TensorArrays`` of a table, or made from plain records (whose numbers are
    Python ints: ``rebuild`` checks the unsigned ones fit before asking)."""
    if isinstance(tensors, TensorTable):
        return tensors.arrays
    n = len(tensors)
    if not n:
        empty = np.zeros(0, np.int64)
        return TensorArrays([], *([empty] * 11), slices=np.zeros((0, 3), np.int64),
                            dynamic_dims=[], order=empty, order_count=empty)
    c = dict(zip(_FIELDS, zip(*tensors)))

    def ints(name):
        return np.fromiter(c[name], np.int64, n)

    def lengths(name):
        return np.fromiter(map(len, c[name]), np.int64, n)

    def flat(name, width=1):
        total = sum(map(len, c[name]))
        values = chain.from_iterable(c[name])
        if width > 1:
            values = chain.from_iterable(values)
        return np.fromiter(values, np.int64, total * width)

    return TensorArrays(list(c["name"]), *map(ints, ("location", "tile", "offset", "data_offset",
                                                     "data_type", "base")),
                        lengths("dims"), flat("dims"), lengths("strides"), flat("strides"),
                        lengths("slices"), flat("slices", 3).reshape(-1, 3),
                        list(c["dynamic_dims"]), flat("dims_order"), lengths("dims_order"))


def fb_table(c: dict, names: list, dynamic_dims: list, slice_rows, inits: list,
             fail) -> TensorTable:
    """The tensor table of a FlatBuffer decoder's columns (``c``, by schema field; the
    string, dynamic flags and initializer columns as the records hold them; the
    slices as the records hold them, or as ``fb_rows.StructArrays``).
    ``fail(row, field, element, message)``: the reader's error located at a tensor's field
    (its element ``element`` of a vector), for an unsigned 64-bit number past int64 (a data
    offset, a stride)."""
    n = len(names)
    ints = {k: np.array(c[k], np.int64) for k in ("location", "tile", "offset", "data_type",
                                                   "base")}
    ints["data_offset"] = unsigned_column(c["data_offset"], INT64_LIMIT, lambda row, v: fail(
        row, "data_offset", None,
        f"tensor #{row}: data offset {v} is out of range (0 to {INT64_LIMIT - 1} bytes)"))
    dims, rank = _flat_vectors(c["dims"], n)
    order = _byte_vectors(c["dims_order"], n)
    raw_strides, strides_count = _flat_vectors(c["strides"], n)
    firsts = np.cumsum(strides_count) - strides_count

    def bad_stride(at: int, value: int):
        row = int(np.searchsorted(firsts, at, "right")) - 1
        while strides_count[row] == 0:      # rows without strides start where the next does
            row += 1
        return fail(row, "strides", at - int(firsts[row]), f"tensor #{row}: stride {value} "
                    f"is out of range (0 to {INT64_LIMIT - 1} bits)")
    strides = unsigned_column(raw_strides, INT64_LIMIT, bad_stride)
    if hasattr(slice_rows, "values"):       # the column decoder's numbers (StructArrays)
        slice_count = np.asarray(slice_rows.counts, np.int64)
        return table(names, ints, rank, dims.astype(np.int64), strides_count, strides,
                     slice_count, slice_rows.values, *order, dynamic_dims, inits)
    # A view's slices: the decoder shares one tuple per distinct bytes, so each distinct
    # tuple is flattened once and the rows gathered from them.
    distinct = {id(row): row for row in slice_rows}
    index_of = dict(zip(distinct, range(len(distinct))))
    which = np.fromiter(map(index_of.__getitem__, map(id, slice_rows)), np.int64, n)
    lengths = np.fromiter(map(len, distinct.values()), np.int64, len(distinct))
    words = np.fromiter(chain.from_iterable(chain.from_iterable(distinct.values())), np.int64,
                        3 * int(lengths.sum())).reshape(-1, 3)
    slice_count = lengths[which]
    starts = (np.cumsum(lengths) - lengths)[which]
    at = np.repeat(starts - (np.cumsum(slice_count) - slice_count), slice_count) + \
        np.arange(int(slice_count.sum()), dtype=np.int64)
    return table(names, ints, rank, dims.astype(np.int64), strides_count, strides, slice_count,
                 words[at], *order, dynamic_dims, inits)


def _flat_vectors(column, n: int) -> tuple:
    """A column of int vectors (``fb_rows.Vectors`` or ``fb_rows.StructArrays``: with
    their numbers; or a tuple or None per row) as every
    row's values one after another (as decoded: unsigned stays unsigned) and each row's
    count."""
    values = getattr(column, "values", None)
    if values is not None and len(column.counts) == n:
        return np.asarray(values), np.asarray(column.counts, np.int64)
    rows = [d or () for d in column]
    counts = np.fromiter(map(len, rows), np.int64, n)
    return np.array(list(chain.from_iterable(rows)), dtype=object if any(
        v >= INT64_LIMIT for v in chain.from_iterable(rows)) else np.int64), counts


def _byte_vectors(column, n: int) -> tuple:
    """A column of [ubyte] vectors (bytes; None: absent) as every row's values one after
    another (int64) and each row's count."""
    rows = [b or b"" for b in column]
    return (np.frombuffer(b"".join(rows), np.uint8).astype(np.int64),
            np.fromiter(map(len, rows), np.int64, n))
