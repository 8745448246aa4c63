"""The ELF container's big record sections read a column at a time.

``vpuc.blob.reader_elf.ElfReader`` reads the header, kernels and small tables a
record at a time.  The sections that grow with the program (tensors, barriers, DMA tasks,
DPU invariants and variants, ACT invocations and their scalars) are read here as
numpy structured arrays whose fields are the records' spec-named fields
(``elf_records``: names, struct codes and offsets), and each check is made on a
whole column: every (start, count) list inside its pool, every string offset
inside ``.vpuc.strtab``, every invocation image inside ``.vpuc.kernelParams``,
every DPU task's variants its own.  A failure is reported by the row-wise code
for the first bad row, so it carries the message and the place it always had.
The records are the row-wise reader's, equal field for field.  The task sections
are read as tables whose records are made on request (``vpuc.blob.elf_tasks``).
"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np

from vpuc.blob import elf_records as R
from vpuc.blob.content import InvocationRec, Number, ScalarRec
from vpuc.blob.sync_columns import ListSync, barrier_table, flat_lists
from vpuc.blob.tensor_table import INT64_LIMIT, TensorTable, unsigned_column
from vpuc.blob.tensor_table import table as tensor_table

_DTYPE_OF_CODE = {"B": "u1", "b": "i1", "H": "<u2", "h": "<i2", "I": "<u4", "i": "<i4",
                  "Q": "<u8", "q": "<i8"}


@lru_cache(maxsize=None)
def record_dtype(record) -> np.dtype:
    """The numpy layout of an ``elf_records`` record: its fields at their packed offsets."""
    names = [name for name, _ in record.fields]
    formats = [_DTYPE_OF_CODE.get(code) or "S" + code[:-1] for _, code in record.fields]
    return np.dtype(dict(names=names, formats=formats,
                         offsets=[record.offsets[name] for name in names],
                         itemsize=record.size))


def _make(record_type):
    return partial(tuple.__new__, record_type)


def row_record(table: np.ndarray, row: int, record):
    """Row ``row`` of a structured array as the record's namedtuple (the row-wise form)."""
    return record.record._make(table[row].tolist())


def _split(flat: list, counts: list[int]) -> list[tuple]:
    """``flat`` cut into consecutive tuples of ``counts`` items."""
    if counts and min(counts) == max(counts):
        width = counts[0]
        return list(zip(*[iter(flat)] * width)) if width else [()] * len(counts)
    out, at = [], 0
    for count in counts:
        out.append(tuple(flat[at:at + count]))
        at += count
    return out


class ElfColumns:
    """Column-wise reading for ``reader`` (its sections, pools, strings and errors)."""

    def __init__(self, reader) -> None:
        self.r = reader
        self._known: tuple[np.ndarray, list[str]] | None = None   # string starts, texts
        self.tensor_table: np.ndarray | None = None     # the tensor records, once read
        self.u32 = np.frombuffer(reader.by_name[R.POOL32].data, dtype="<u4")
        self.i64 = np.frombuffer(reader.by_name[R.POOL64].data, dtype="<i8")

    # --- sections, strings, lists --------------------------------------------------

    def table(self, sec, record) -> np.ndarray:
        """A record section as a structured array, read with the blob's record size (the
        row-wise ``unpack`` does the same: shorter, older records padded with zeros)."""
        size, data = sec.header.sh_entsize, sec.data
        if size != record.size:
            data = b"".join(record.pack_values(*r) for r in self.r.unpack(sec, record))
        elif len(data) % record.size:
            record.unpack_all(data, self.r.file, sec.name)      # raises its error
        return np.frombuffer(data, dtype=record_dtype(record))

    def _string_starts(self) -> tuple[np.ndarray, list[str]]:
        """Every string of ``.vpuc.strtab`` with the offset where it starts (sorted); none
        when the table is not ASCII (then row by row)."""
        table = self.r._strtab
        if not table.isascii():
            return np.zeros(0, np.int64), []
        texts = table.decode("ascii").split("\0")[:-1]     # the tail has no NUL
        ends = np.flatnonzero(np.frombuffer(table, np.uint8) == 0)
        starts = np.zeros(len(texts), np.int64)
        starts[1:] = ends[:len(texts) - 1] + 1
        return starts, texts

    def strings(self, offsets: np.ndarray) -> list:
        if self._known is None:
            self._known = self._string_starts()
        starts, texts = self._known
        offsets = offsets.astype(np.int64)
        none = offsets == R.STR_NONE
        at = np.minimum(np.searchsorted(starts, offsets), max(len(starts) - 1, 0))
        if len(starts) and (none | (starts[at] == offsets)).all():
            found = list(map(texts.__getitem__, at.tolist()))
            for row in np.flatnonzero(none).tolist():
                found[row] = None
            return found
        if none.all():
            return [None] * len(offsets)
        # Inside a string, not valid UTF-8, or outside: row by row (its message).
        return list(map(self.r.string, offsets.tolist()))

    def _check_lists(self, wide: bool, starts, counts, none_ok: bool):
        pool, name = (self.r._i64, R.POOL64) if wide else (self.r._u32, R.POOL32)
        starts, counts = starts.astype(np.int64), counts.astype(np.int64)
        bad = starts + counts > len(pool)
        none = (starts == R.LIST_NONE) & (counts == 0) if none_ok else None
        if none is not None:
            bad &= ~none
        if bad.any():
            row = int(np.argmax(bad))
            self.r._list(pool, name, int(starts[row]), int(counts[row]), none_ok)
        return pool, starts, counts, none

    def lists(self, starts, counts, *, wide: bool = False, none_ok: bool = False) -> list:
        """Each row's (start, count) list of ``.vpuc.u32`` (``.vpuc.i64`` if ``wide``)."""
        pool, starts, counts, none = self._check_lists(wide, starts, counts, none_ok)
        ends = (starts + counts).tolist()
        if none is not None and none.any():
            return [None if skip else pool[a:b]
                    for a, b, skip in zip(starts.tolist(), ends, none.tolist())]
        return [pool[a:b] for a, b in zip(starts.tolist(), ends)]

    def elements(self, starts, counts, *, wide: bool = False) -> np.ndarray:
        """Every word of every row's ``.vpuc.u32`` list (``.vpuc.i64`` if ``wide``), rows one
        after another."""
        _, starts, counts, _ = self._check_lists(wide, starts, counts, False)
        total = int(counts.sum())
        firsts = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        return (self.i64 if wide else self.u32)[firsts + np.arange(total, dtype=np.int64)] \
            .astype(np.int64)

    # --- records -------------------------------------------------------------------

    def tensors(self, t: np.ndarray) -> TensorTable:
        """The tensor records as a ``TensorTable``: every list checked inside its pool, the
        numbers kept as int64 columns (a data offset past int64 refused at its field), a
        record made when asked."""
        self.tensor_table = t       # the relocation check reads its columns
        rank = t["rank"].astype(np.int64)
        bad = (t["dynamic_mask"].astype(np.int64) >> rank) != 0
        if bad.any():
            row = int(np.argmax(bad))
            self.r.tensor(row, row_record(t, row, R.TensorRecord))      # raises
        stride = self.r.by_name[R.TENSORS].header.sh_entsize        # the blob's record size

        def too_big(row: int, value: int):
            return self.r.fail(R.TENSORS, f"tensor #{row}: data offset {value} is out of range "
                               f"(0 to {INT64_LIMIT - 1} bytes)",
                               row * stride + R.TensorRecord.offsets["data_offset"])
        data_offset = unsigned_column(t["data_offset"], INT64_LIMIT, too_big)
        names = self.strings(t["name"])
        dims = self.elements(t["dims"], rank)
        strides = self.elements(t["strides"], rank, wide=True)
        order = self.elements(t["order"], rank)
        sliced = t["slices"] != R.LIST_NONE
        slice_count = np.where(sliced, rank, 0)
        # Every view's (start, stop, step) words at once.
        slices = self.elements(t["slices"][sliced], 3 * rank[sliced], wide=True).reshape(-1, 3)
        n = len(t)
        dynamic_dims, inits = [()] * n, [None] * n
        special = np.flatnonzero((t["dynamic_mask"] != 0) | (t["init_kind"] != -1))
        for row in special.tolist():        # dynamic dims and constant initializers: few
            whole = self.r.tensor(row, row_record(t, row, R.TensorRecord))
            dynamic_dims[row], inits[row] = whole.dynamic_dims, whole.const_init
        ints = {k: t[k].astype(np.int64) for k in ("location", "tile", "offset", "data_type",
                                                    "base")}
        ints["data_offset"] = data_offset
        return tensor_table(names, ints, rank, dims, rank, strides, slice_count, slices,
                            order, rank, dynamic_dims, inits)

    def barriers(self, b: np.ndarray):
        """The barrier records as columns, made when asked (``sync_columns.barrier_table``)."""
        return barrier_table({"name": self.strings(b["name"]), **{
            name: b[name].astype(np.int64) for name in
            ("id", "physical_id", "producer_count", "consumer_count")}})

    def _sync_sides(self, t: np.ndarray) -> tuple:
        """The wait and update barrier indices of a task or variant table, as ``Flat``s."""
        return tuple(flat_lists(len(t), t[f"{side}_count"],
                                self.elements(t[f"{side}_start"], t[f"{side}_count"]))
                     for side in ("waits", "updates"))

    def _sync(self, t: np.ndarray) -> ListSync:
        """A task table's barrier indices as ``sync_columns`` flattens them."""
        return ListSync(len(t), *self._sync_sides(t))

    def _scalars(self, t: np.ndarray, where: str) -> list:
        sec = self.r.section(R.SCALARS, R.RECORD_SECTIONS[R.SCALARS][0])
        s = self.table(sec, R.ScalarArgRecord)
        first = t["scalars_start"].astype(np.int64)
        count = t["scalars_count"].astype(np.int64)
        bad = first + count > len(s)
        if bad.any():
            row = int(np.argmax(bad))
            raise self.r.fail(R.SCALARS, f"scalars {first[row]}+{count[row]} run past the "
                              f"table ({len(s)} records)")
        flags = s["is_int"]
        used = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        bad = (flags[used] != 0) & (flags[used] != 1)      # a scalar no task uses is not read
        if bad.any():
            self.r.number(int(flags[used][np.argmax(bad)]), 0, where)         # raises
        numbers = [Number(1, v) if f == 1 else Number(0, x) for f, v, x in
                   zip(flags.tolist(), s["value"].tolist(), s["value"].view("<f8").tolist())]
        every = list(map(_make(ScalarRec), zip(self.strings(s["name"]), s["data_type"].tolist(),
                                               numbers)))
        return [tuple(every[a:a + c]) for a, c in zip(first.tolist(), count.tolist())]

    def _images(self, t: np.ndarray) -> list:
        images = [None] * len(t)
        rows = np.flatnonzero(t["has_image"] != 0)
        if not len(rows):
            return images
        data = self.r._data[R.KERNEL_PARAMS]
        offset = t["image_offset"][rows].astype(np.int64)
        size = t["image_size"][rows].astype(np.int64)
        bad = offset + size > len(data)
        if bad.any():
            row = int(rows[np.argmax(bad)])
            self.r.blob(R.KERNEL_PARAMS, int(t["image_offset"][row]),
                        int(t["image_size"][row]))                             # raises
        # Equal images are stored once: each distinct (offset, size) sliced once, shared.
        # (both checked above to lie in the section, a part of the blob: under 2**31)
        places, which = np.unique((offset << 32) | size, return_inverse=True)
        windows = [data[a:a + n] for a, n in zip((places >> 32).tolist(),
                                                 (places & 0xFFFFFFFF).tolist())]
        made = list(map(_make(InvocationRec), zip(
            map(windows.__getitem__, which.reshape(-1).tolist()),
            t["args_offset"][rows].tolist(), t["args_size"][rows].tolist())))
        if len(rows) == len(t):
            return made
        for row, image in zip(rows.tolist(), made):
            images[row] = image
        return images
