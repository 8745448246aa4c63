"""A columnar FlatBuffer decoder: a vector of tables decoded one field at a time.

``vpuc.blob.fb_decode.Decoder`` walks one table at a time in Python, which is
most of the time of reading a blob of 100k tasks.  Here every step works on all
the tables of a vector at once with numpy: their positions, vtables, each
field's slot, each offset followed.  The checks are the generic decoder's, made
on whole columns (a table start inside the buffer and aligned, its vtable
inside and well formed, every present field inside its table, every vector and
string inside the buffer, strings NUL-terminated and UTF-8), and a failure names
the first bad row the way the generic decoder would (``Table.field``, byte
offset).  Vectors of tables nested in rows (a DPU task's variants, a task's
bindings) are gathered from all rows and decoded as one column, then split back.
What depends only on a vtable (its checks, each field's offset and presence) is
done once per distinct vtable (writers share one between tables of one shape)
and spread over the rows; structs are read as rows of bytes, a block of words
per distinct length, and a record is made once per distinct bytes.

A vector of tables comes back as ``Columns`` (one list per field) and a column
of vectors of tables as ``Grouped`` (the flat columns and each row's count;
both in ``vpuc.blob.fb_rows``, imported from here by the readers):
both iterate, index and compare as the generic decoder's tuples of namedtuples,
equal field for field (tests compare both on every example blob), so a caller
may read either the rows or, without making a record per row, the columns
(``vpuc.blob.reader_fb``).  It spends the same work budget, counting an object
reached twice twice.  It does not count bytes per part (``vpuc
inspect`` uses the generic decoder for that).
"""

from __future__ import annotations

import struct
from functools import partial

import numpy as np

from vpuc.blob.fb_rows import (Columns, Grouped, Scalars, StructArrays, Vectors,
                               distinct_counts, split_rows)
from vpuc.blob.fb_schema import FieldType, TableDef

__all__ = ["ColumnDecoder", "Columns", "Grouped", "Vectors"]    # the readers import these

_WIDTH_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
_SHIFTS = {2: 1, 4: 2, 8: 3}
_FEW_VTABLES = 8            # distinct vtables found by comparing; beyond, by sorting


class ColumnDecoder:
    """Decodes vectors of tables for ``decoder`` (its buffer, schema, budget and errors)."""

    def __init__(self, decoder) -> None:
        self.dec = decoder
        self.buf = bytes(decoder.buf)      # slices are bytes (keys of the struct tables)
        self.n = decoder.n
        self.u8 = np.frombuffer(decoder.buf, dtype=np.uint8)
        # The buffer as little-endian words of each width, for aligned reads (most are).
        self._words = {w: self.u8[:len(self.u8) - len(self.u8) % w].view(_WIDTH_DTYPES[w])
                       for w in (2, 4, 8)}
        # The tuple type each struct is made as, by struct name (default: the schema's
        # record); a reader names its own record type here, so its structs need no copy.
        self.struct_types: dict[str, type] = {}
        # Structs of int64 fields only that a reader takes as numbers (``StructArrays``),
        # by struct name: none made as records (a tensor table's slices).
        self.struct_arrays: set[str] = set()
        # Vectors of scalars a reader takes as numbers likewise, by "Table.field".
        self.number_vectors: set[str] = set()

    # --- gathering ---------------------------------------------------------------

    def gather(self, at: np.ndarray, dtype: str, aligned: bool = False) -> np.ndarray:
        """The little-endian values of ``dtype`` at byte positions ``at`` (checked inside by
        the caller; ``aligned``: checked to be multiples of the width too)."""
        width = np.dtype(dtype).itemsize
        if width == 1:
            return self.u8[at].view(dtype)
        if aligned or not (at & (width - 1)).any():     # one word each
            return self._words[width][at >> _SHIFTS[width]].view(dtype)
        raw = self.u8[at[:, None] + np.arange(width)]
        return raw.view(dtype).reshape(-1)

    def _first_bad(self, bad: np.ndarray, at: np.ndarray, where: str, message) -> None:
        if bad.any():
            row = int(np.argmax(bad))
            pos = int(at[row])
            raise self.dec.fail(where, pos, message(row, pos))

    # --- tables ------------------------------------------------------------------

    def vector_of_tables(self, tdef: TableDef, pos: int, where: str):
        """The vector of ``tdef`` tables at ``pos``: ``Columns`` (``()`` when empty)."""
        count = self.dec.length(pos, 4, where, "vector")
        self.dec._spend(count, where, pos)
        starts = pos + 4 + 4 * np.arange(count, dtype=np.int64)
        targets = starts + self.gather(starts, "<u4", aligned=True).astype(np.int64)
        return self.tables(tdef, targets, where) if count else ()

    def tables(self, tdef: TableDef, pos: np.ndarray, where: str) -> Columns:
        count = len(pos)
        if count == 0:
            return Columns(tdef.record, {f.name: [] for f in tdef.fields}, 0)
        n = self.n
        if not _aligned_inside(pos, 4, n):      # then find the first bad row
            self._first_bad((pos & 3) != 0, pos, where, lambda _, p: (
                f"{tdef.name} table offset {p:#x} is outside the buffer ({n} bytes) or "
                "misaligned"))
            self._first_bad(pos + 4 > n, pos, where, lambda _, p: (
                f"{tdef.name} table offset {p:#x} is outside the buffer ({n} bytes) or "
                "misaligned"))
        vt = pos - self.gather(pos, "<i4", aligned=True).astype(np.int64)
        # A writer shares a vtable between tables of one shape: each distinct vtable is
        # checked and read once (``vts``) and its numbers reach the rows through ``rows``
        # (a length-1 array broadcasts when all rows share one).
        vts, inverse = _distinct(vt)
        rows = (lambda a: a) if inverse is None else (lambda a: a[inverse])
        of_row = (lambda a, _: a[0]) if inverse is None else (lambda a, row: a[inverse[row]])
        bad = (vts < 0) | ((vts & 1) != 0) | (vts + 4 > n)
        self._first_bad(rows(bad), pos, where, lambda row, _: (
            f"{tdef.name} vtable at {int(vt[row]):#x} is outside the buffer or misaligned"))
        vsize = self.gather(vts, "<u2").astype(np.int64)
        tsize = self.gather(vts + 2, "<u2").astype(np.int64)
        bad = (vsize < 4) | ((vsize & 1) != 0) | (vts + vsize > n) | (tsize < 4)
        self._first_bad(rows(bad) | (pos + rows(tsize) > n), pos, where, lambda row, _: (
            f"{tdef.name} vtable at {int(vt[row]):#x} (size {int(of_row(vsize, row))}, table "
            f"size {int(of_row(tsize, row))}) does not fit the buffer"))
        self.dec._spend(count * len(tdef.fields), where, int(pos[0]))
        # Every field's offset in every distinct vtable (0: absent, also past its slots).
        index = np.array([f.index for f in tdef.fields], np.int64)
        has = index < ((vsize - 4) >> 1)[:, None]
        slot_at = np.where(has, vts[:, None] + 4 + 2 * index, 0)
        voffs = np.where(has, self.gather(slot_at.reshape(-1), "<u2").reshape(has.shape), 0
                         ).astype(np.int64)
        columns = [self.field(tdef, fdef, pos, voffs[:, j], tsize, rows, of_row)
                   for j, fdef in enumerate(tdef.fields)]
        return Columns(tdef.record, dict(zip(tdef.record._fields, columns)), count)

    def field(self, tdef: TableDef, fdef, pos: np.ndarray, voff: np.ndarray, tsize: np.ndarray,
              rows, of_row) -> list:
        """One field's column; ``voff`` and ``tsize`` are per distinct vtable, ``rows``
        spreads such an array over the rows and ``of_row`` picks a row's value."""
        count = len(pos)
        ftype, default = fdef.type, fdef.default
        fwhere = f"{tdef.name}.{fdef.name}"
        size = self._inline_size(ftype)
        present = voff != 0
        at = pos + rows(voff)
        self._first_bad(rows(present & (voff + size > tsize)), at, fwhere, lambda row, _: (
            f"field runs past its table ({int(of_row(tsize, row))} bytes)"))
        if not present.any():       # never written (the default everywhere): numbers too
            full = _filled(count, default, np.dtype("<" + ftype.code)) \
                if ftype.kind == "scalar" else None
            return [default] * count if full is None else Scalars(full)
        everywhere = bool(present.all())
        if not everywhere:
            present = rows(present)
            at = at[present]
        # Tables start on a word (checked), so a field is aligned if its offsets are.
        aligned = size <= 4 and not (voff % size).any()
        if ftype.kind == "scalar":
            array = self._scalar_array(ftype.code, at, aligned)
            full = None if everywhere else _filled(count, default, array.dtype)
            if full is not None:
                full[present] = array
                return Scalars(full)
            if everywhere:
                return Scalars(array)
            values = array.tolist()
        elif ftype.kind == "struct":
            values = self.structs(self.dec.schema.structs[ftype.name], at)
        else:
            targets = at + self.gather(at, "<u4", aligned).astype(np.int64)
            if ftype.kind == "table":
                values = self.tables(self.dec.schema.tables[ftype.name], targets, fwhere)
            elif ftype.kind == "string":
                values = self.strings(targets, fwhere)
            else:
                values = self.vectors(ftype.element, targets, fwhere)
        if everywhere:
            return values
        if isinstance(values, Vectors):     # a missing vector holds no numbers
            counts = np.zeros(count, np.int64)
            counts[present] = values.counts
            return Vectors(None, values.values, counts, ~present, default)
        if isinstance(values, StructArrays):    # a missing vector holds no structs
            counts = np.zeros(count, np.int64)
            counts[present] = values.counts
            return StructArrays(values.values, counts)
        if isinstance(values, list):    # scattered in C (a Columns' rows are records)
            scattered = np.full(count, default, object)
            scattered[present] = np.fromiter(values, object, len(values))
            column = scattered.tolist()
        else:
            column = [default] * count
            for row, value in zip(np.flatnonzero(present).tolist(), values):
                column[row] = value
        return column

    def structs(self, sdef, at: np.ndarray) -> list:
        """The structs at positions ``at`` as records (checked inside by the caller)."""
        return self._records(sdef, self._byte_rows(at, at + sdef.size))

    def _struct_vectors(self, sdef, pos: np.ndarray, count: np.ndarray) -> list:
        """Each row's vector of structs as a tuple of records; a row's tuple is made once per
        distinct bytes (views of one shape share their slices), and so is each record."""
        keys = self._byte_rows(pos + 4, pos + 4 + count * sdef.size)
        rows = dict.fromkeys(keys)
        joined = b"".join(rows)
        records = self._records(sdef, np.frombuffer(joined, f"V{sdef.size}").tolist()) \
            if joined else []
        rows = dict(zip(rows, split_rows(records, [len(key) // sdef.size for key in rows])))
        return list(map(rows.__getitem__, keys))

    def _records(self, sdef, keys: list[bytes]) -> list:
        """The struct records of ``keys`` (each one's bytes), read as ``struct`` reads them (a
        bool byte other than 0 or 1 is True); one record per distinct bytes, shared."""
        make = partial(tuple.__new__, self.struct_types.get(sdef.name, sdef.record))
        made = dict.fromkeys(keys)
        made = dict(zip(made, map(make, struct.iter_unpack(sdef.format, b"".join(made)))))
        return list(map(made.__getitem__, keys))

    def _byte_rows(self, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """The buffer's bytes from each start to its end (inside, as checked by the caller):
        the rows of one length gathered as one block of words, in C."""
        if not len(starts):
            return []
        lengths = ends - starts
        distinct = distinct_counts(lengths)
        if distinct is None:
            return list(map(self.buf.__getitem__, map(slice, starts.tolist(), ends.tolist())))
        if len(distinct) == 1:
            return self._block_rows(starts, distinct[0])
        out = np.empty(len(starts), object)
        for length in distinct:
            which = np.flatnonzero(lengths == length)
            out[which] = np.fromiter(self._block_rows(starts[which], length), object, len(which))
        return out.tolist()

    def _block_rows(self, starts: np.ndarray, length: int) -> list[bytes]:
        """``length`` bytes from each start, gathered in the widest words they all align to."""
        if length == 0:
            return [b""] * len(starts)
        width = 8
        while width > 1 and (length % width or (starts & (width - 1)).any()):
            width //= 2
        if width > 1:
            raw = self._words[width][(starts >> _SHIFTS[width])[:, None] +
                                     np.arange(length // width)]
        else:
            raw = self.u8[starts[:, None] + np.arange(length)]
        return raw.view(f"V{length}").reshape(-1).tolist()

    def _inline_size(self, ftype: FieldType) -> int:
        if ftype.kind == "scalar":
            return ftype.inline_size
        if ftype.kind == "struct":
            return self.dec.schema.structs[ftype.name].size
        return 4

    def _scalar_array(self, code: str, at: np.ndarray, aligned: bool = False) -> np.ndarray:
        width = struct.calcsize("<" + code)
        raw = self.gather(at, _WIDTH_DTYPES[width], aligned)
        if code == "?":
            return raw != 0
        return raw.view("<" + code)

    # --- strings and vectors --------------------------------------------------------

    def _lengths(self, pos: np.ndarray, width: int, where: str, what: str) -> np.ndarray:
        n = self.n
        if not _aligned_inside(pos, 4, n):
            self._first_bad(((pos & 3) != 0) | (pos + 4 > n), pos, where, lambda _, p: (
                f"{what} offset {p:#x} is outside the buffer ({n} bytes) or misaligned"))
        count = self.gather(pos, "<u4", aligned=True).astype(np.int64)
        self._first_bad(pos + 4 + count * width > n, pos, where, lambda row, _: (
            f"{what} of {int(count[row])} x {width} bytes runs past the end of the buffer "
            f"({n} bytes)"))
        return count

    def strings(self, pos: np.ndarray, where: str) -> list:
        if not len(pos):
            return []
        count = self._lengths(pos, 1, where, "string")
        end = pos + 4 + count
        if int(end.max()) < self.n:         # every terminator inside: one gather
            bad = self.u8[end] != 0
        else:
            past = end >= self.n
            bad = past.copy()
            inside = ~past
            bad[inside] = self.u8[end[inside]] != 0
        self._first_bad(bad, pos, where, lambda *_: "string is not NUL-terminated")
        self.dec._spend(len(pos), where, int(pos[0]))
        buf = self.buf
        # All the strings with their terminating NULs, decoded at once and split at the NULs
        # (a NUL always ends a UTF-8 sequence, so the whole decodes iff each string does); a
        # string holding a NUL of its own, or bad UTF-8, is decoded one by one.
        sizes = count + 1
        firsts = np.cumsum(sizes) - sizes
        at = np.repeat(pos + 4 - firsts, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)
        try:
            texts = self.u8[at].tobytes().decode("utf-8").split("\0")
        except UnicodeDecodeError:
            texts = []
        if len(texts) == len(pos) + 1:
            texts.pop()
            return texts
        starts = (pos + 4).tolist()
        try:
            return [buf[s:e].decode("utf-8") for s, e in zip(starts, end.tolist())]
        except UnicodeDecodeError:
            for p, s, e in zip(pos.tolist(), starts, end.tolist()):
                try:
                    buf[s:e].decode("utf-8")
                except UnicodeDecodeError:
                    raise self.dec.fail(where, p, "string is not valid UTF-8") from None
            raise

    def vectors(self, element: FieldType, pos: np.ndarray, where: str) -> list:
        dec = self.dec
        first = int(pos[0]) if len(pos) else 0
        if element.kind == "scalar":
            width = element.inline_size
            count = self._lengths(pos, width, where, "vector")
            if element.code == "B":
                dec._spend(int((1 + count // 64).sum()), where, first)
                return self._byte_rows(pos + 4, pos + 4 + count)
            dec._spend(int(count.sum()), where, first)
            values = self._scalar_array(element.code, self._elements(pos, count, width),
                                        aligned=width <= 4)     # vectors start on a word
            if where in self.number_vectors:       # no tuple per row
                return StructArrays(values, count)
            return Vectors(None, values, count)       # each row's tuple made when asked
        if element.kind == "struct":
            sdef = dec.schema.structs[element.name]
            count = self._lengths(pos, sdef.size, where, "vector")
            dec._spend(int(count.sum()), where, first)
            if sdef.name in self.struct_arrays and set(sdef.format.lstrip("<")) == {"q"}:
                words = len(sdef.format) - 1
                at = (self._elements(pos, count, sdef.size)[:, None] +
                      8 * np.arange(words)).reshape(-1)
                return StructArrays(self.gather(at, "<i8").astype(np.int64).reshape(-1, words),
                                    count)
            return self._struct_vectors(sdef, pos, count)
        count = self._lengths(pos, 4, where, "vector")
        dec._spend(int(count.sum()), where, first)
        slot = self._elements(pos, count, 4)
        targets = slot + self.gather(slot, "<u4", aligned=True).astype(np.int64)
        if element.kind == "table":
            return Grouped(self.tables(dec.schema.tables[element.name], targets, where),
                           count.tolist())
        return split_rows(self.strings(targets, where), count.tolist())

    @staticmethod
    def _elements(pos: np.ndarray, count: np.ndarray, width: int) -> np.ndarray:
        """The position of every element of every row's vector, rows one after another."""
        total = int(count.sum())
        firsts = np.cumsum(count) - count
        # Each row's first element less its rank in the whole, spread over its elements.
        return np.repeat(pos + 4 - width * firsts, count) + \
            width * np.arange(total, dtype=np.int64)


def _filled(count: int, default, dtype: np.dtype) -> np.ndarray | None:
    """``count`` copies of an integer or bool field's default in the field's own dtype; None
    for a float (a float32 holds a default like 0.1 inexactly) or a default out of range."""
    if dtype.kind not in "iub":
        return None
    try:
        return np.full(count, default, dtype)
    except OverflowError:
        return None


def _aligned_inside(pos: np.ndarray, size: int, n: int) -> bool:
    """Every position a multiple of 4 with ``size`` bytes inside ``n`` (two reductions)."""
    return not len(pos) or (not int(np.bitwise_or.reduce(pos)) & 3 and
                            int(pos.max()) + size <= n)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The distinct ``values`` (in no particular order) and each one's index among them
    (None: all are the first).  A few are found by comparing (no sort), more by a sort."""
    rest = values != values[0]
    if not rest.any():
        return values[:1], None
    found, inverse = [values[0]], np.zeros(len(values), np.intp)
    while len(found) < _FEW_VTABLES:
        value = values[int(np.argmax(rest))]
        same = values == value
        inverse[same] = len(found)
        found.append(value)
        rest &= ~same
        if not rest.any():
            return np.array(found, values.dtype), inverse
    return np.unique(values, return_inverse=True)
