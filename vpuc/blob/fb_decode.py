"""A verifying FlatBuffer decoder: every offset checked before it is followed.

It walks a buffer with the layouts of ``vpuc.blob.fb_schema`` and returns
namedtuples.  The checks are the C++ ``flatbuffers::Verifier``'s:

- the root offset and every table, vector and string start are inside the
  buffer and 4-byte aligned;
- a table's vtable is inside the buffer, 2-byte aligned, of even size >= 4,
  and the table's inline size (from the vtable) is inside the buffer;
- every field present in the vtable lies inside its table's inline size;
- a vector's elements, a string's bytes and its NUL terminator are inside the
  buffer; strings are UTF-8.

Any failure is a one-line ``VpucError`` naming the table and field being read
and the byte offset.  The budget caps the elements decoded (shared or
overlapping objects could otherwise make a small blob expand without bound);
objects reached again at the same offset are decoded once.  With ``columns=True``
vectors of tables go through ``vpuc.blob.fb_columns`` (the same records and
checks, a column at a time).  For ``vpuc inspect`` the decoder also counts the bytes of every object under each field of
the root table.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from vpuc.blob.fb_schema import FieldType, Schema, TableDef
from vpuc.diagnostics import BinLoc, VpucError

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_VT_HEAD = struct.Struct("<HH")
MAX_BLOB_BYTES = 1 << 31          # a FlatBuffer cannot address more
_SCALAR, _STRUCT, _TABLE, _STRING, _VECTOR = range(5)


class Decoder:
    def __init__(self, schema: Schema, buf: bytes, file: str, budget: int | None = None,
                 columns: bool = False) -> None:
        self.schema = schema
        self.buf = buf
        self.n = len(buf)
        self.file = file
        self.budget = budget if budget is not None else 4 * self.n + 4096
        self.sizes: dict[str, int] = defaultdict(int)   # bytes per root field
        self._part = "root"
        self._cache: dict[tuple, object] = {}
        self._vt_seen: set[int] = set()
        self._vt_formats: dict[int, struct.Struct] = {}
        self._plans: dict[str, list[tuple]] = {}
        if self.n > MAX_BLOB_BYTES:
            raise VpucError(f"blob is {self.n} bytes; a FlatBuffer holds at most {MAX_BLOB_BYTES}",
                            BinLoc(file, "buffer", 0))
        # Vectors of tables through the columnar decoder (fast; counts no sizes per part).
        self.columns = None
        if columns:
            from vpuc.blob.fb_columns import ColumnDecoder
            self.columns = ColumnDecoder(self)

    def fail(self, where: str, offset: int, message: str) -> VpucError:
        return VpucError(message, BinLoc(self.file, where, offset))

    def _spend(self, count: int, where: str, offset: int) -> None:
        self.budget -= count
        if self.budget < 0:
            raise self.fail(where, offset, "blob refers to more objects than it can hold "
                            "(overlapping or repeated offsets); refusing to decode it")

    # --- entry points -------------------------------------------------------------

    def root(self, only: tuple[str, ...] | None = None):
        """Decode the root table (just the fields in ``only`` if given)."""
        pos = self.root_position()
        tdef = self.schema.tables[self.schema.root]
        return self.table(tdef, pos, f"root {tdef.name}", only, split_sizes=True)

    def _vtable(self, tdef: TableDef, pos: int, where: str) -> tuple[tuple[int, ...], int, int]:
        """Check a table's vtable; returns (field offsets, slot count, table size)."""
        buf, n = self.buf, self.n
        if pos & 3 or pos + 4 > n:
            raise self.fail(where, pos, f"{tdef.name} table offset {pos:#x} is outside the "
                            f"buffer ({n} bytes) or misaligned")
        vt = pos - _I32.unpack_from(buf, pos)[0]
        if vt < 0 or vt & 1 or vt + 4 > n:
            raise self.fail(where, pos, f"{tdef.name} vtable at {vt:#x} is outside the buffer "
                            "or misaligned")
        vsize, tsize = _VT_HEAD.unpack_from(buf, vt)
        if vsize < 4 or vsize & 1 or vt + vsize > n or tsize < 4 or pos + tsize > n:
            raise self.fail(where, pos, f"{tdef.name} vtable at {vt:#x} (size {vsize}, table "
                            f"size {tsize}) does not fit the buffer")
        slots = (vsize - 4) >> 1
        fmt = self._vt_formats.get(slots)
        if fmt is None:
            fmt = self._vt_formats[slots] = struct.Struct(f"<{slots}H")
        if vt not in self._vt_seen:
            self._vt_seen.add(vt)
            self.sizes[self._part] += vsize
        return fmt.unpack_from(buf, vt + 4), slots, tsize

    def slot(self, tdef: TableDef, pos: int, name: str, size: int) -> int | None:
        """Where field ``name`` (``size`` bytes inline) of the table at ``pos`` is; None
        if absent."""
        voffsets, slots, tsize = self._vtable(tdef, pos, tdef.name)
        fdef = next(f for f in tdef.fields if f.name == name)
        voff = voffsets[fdef.index] if fdef.index < slots else 0
        if voff == 0:
            return None
        if voff + size > tsize:
            raise self.fail(f"{tdef.name}.{name}", pos + voff,
                            f"field runs past its table ({tsize} bytes)")
        return pos + voff

    def follow(self, at: int) -> int:
        """The target of the offset stored at ``at`` (inside the buffer, checked by the caller)."""
        return at + _U32.unpack_from(self.buf, at)[0]

    def locate(self, tdef: TableDef, pos: int, name: str) -> int | None:
        """Where the table (or vector, string) in field ``name`` starts; None if absent."""
        at = self.slot(tdef, pos, name, 4)
        return None if at is None else self.follow(at)

    def table_size(self, tdef: TableDef, pos: int, where: str) -> int:
        """A table's inline size (from its checked vtable), for ``vpuc inspect --section``."""
        return self._vtable(tdef, pos, where)[2]

    def length(self, pos: int, width: int, where: str, what: str) -> int:
        """A checked vector or string length: its elements lie inside the buffer."""
        return self._length(pos, width, where, what)

    def root_position(self) -> int:
        if self.n < 8:
            raise self.fail("buffer", 0, f"blob is {self.n} bytes; a FlatBuffer has at least 8")
        return _U32.unpack_from(self.buf, 0)[0]

    def _plan(self, tdef: TableDef) -> list[tuple]:
        """Per field: (slot, kind, inline size, unpack, argument, default, name, where),
        built once per table type."""
        plan = self._plans.get(tdef.name)
        if plan is None:
            plan = []
            for f in tdef.fields:
                t, unpack, arg = f.type, None, None
                if t.kind == "scalar":
                    kind, size = _SCALAR, t.inline_size
                    unpack = struct.Struct("<" + t.code).unpack_from
                elif t.kind == "struct":
                    sdef = self.schema.structs[t.name]
                    kind, size = _STRUCT, sdef.size
                    unpack, arg = struct.Struct(sdef.format).unpack_from, sdef.record._make
                else:
                    kind, size = {"table": _TABLE, "string": _STRING, "vector": _VECTOR}[t.kind], 4
                    arg = self.schema.tables[t.name] if t.kind == "table" else t.element
                plan.append((f.index, kind, size, unpack, arg, f.default, f.name,
                             f"{tdef.name}.{f.name}"))
            self._plans[tdef.name] = plan
        return plan

    def table(self, tdef: TableDef, pos: int, where: str, only=None, split_sizes=False):
        key = (tdef.name, pos)
        if only is None:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
        buf = self.buf
        voffsets, slots, tsize = self._vtable(tdef, pos, where)
        plan = self._plans.get(tdef.name) or self._plan(tdef)
        self.budget -= len(plan)
        if self.budget < 0:
            self._spend(0, where, pos)
        self.sizes[self._part] += tsize
        values = []
        append = values.append
        for index, kind, size, unpack, arg, default, fname, fwhere in plan:
            voff = voffsets[index] if index < slots else 0
            if voff == 0 or (only is not None and fname not in only):
                append(default)
                continue
            if voff + size > tsize:
                raise self.fail(fwhere, pos + voff, f"field runs past its table ({tsize} bytes)")
            at = pos + voff
            if kind == _SCALAR:
                append(unpack(buf, at)[0])
                continue
            if kind == _STRUCT:
                append(arg(unpack(buf, at)))
                continue
            if split_sizes:
                self._part = fname
            target = at + _U32.unpack_from(buf, at)[0]
            if kind == _TABLE:
                append(self.table(arg, target, fwhere))
            elif kind == _STRING:
                append(self.string(target, fwhere))
            else:
                append(self.vector(arg, target, fwhere))
        record = tdef.record._make(values)
        if only is None:
            self._cache[key] = record
        return record

    def object(self, ftype: FieldType, pos: int, where: str):
        kind = ftype.kind
        if kind == "table":
            return self.table(self.schema.tables[ftype.name], pos, where)
        if kind == "string":
            return self.string(pos, where)
        return self.vector(ftype.element, pos, where)

    def _length(self, pos: int, width: int, where: str, what: str) -> int:
        if pos & 3 or pos + 4 > self.n:
            raise self.fail(where, pos, f"{what} offset {pos:#x} is outside the buffer "
                            f"({self.n} bytes) or misaligned")
        count = _U32.unpack_from(self.buf, pos)[0]
        if pos + 4 + count * width > self.n:
            raise self.fail(where, pos, f"{what} of {count} x {width} bytes runs past the end "
                            f"of the buffer ({self.n} bytes)")
        return count

    def string(self, pos: int, where: str) -> str:
        key = ("string", pos)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        count = self._length(pos, 1, where, "string")
        end = pos + 4 + count
        if end >= self.n or self.buf[end] != 0:
            raise self.fail(where, pos, "string is not NUL-terminated")
        self._spend(1, where, pos)
        try:
            text = self.buf[pos + 4:end].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(where, pos, "string is not valid UTF-8") from None
        self.sizes[self._part] += count + 5
        self._cache[key] = text
        return text

    def vector(self, element: FieldType, pos: int, where: str):
        key = ("vector", element.kind, element.name or element.code, pos)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        buf = self.buf
        if element.kind == "scalar":
            width = element.inline_size
            count = self._length(pos, width, where, "vector")
            if element.code == "B":
                value = bytes(buf[pos + 4:pos + 4 + count])
                self._spend(1 + count // 64, where, pos)
            else:
                self._spend(count, where, pos)
                value = struct.unpack_from(f"<{count}{element.code}", buf, pos + 4)
        elif element.kind == "struct":
            sdef = self.schema.structs[element.name]
            width = sdef.size
            count = self._length(pos, width, where, "vector")
            self._spend(count, where, pos)
            make = sdef.record._make
            value = tuple(make(t) for t in struct.iter_unpack(
                sdef.format, buf[pos + 4:pos + 4 + count * width])) if count else ()
        elif self.columns is not None and element.kind == "table":
            value = self.columns.vector_of_tables(self.schema.tables[element.name], pos, where)
            self._cache[key] = value
            return value
        else:
            width = 4
            count = self._length(pos, 4, where, "vector")
            self._spend(count, where, pos)
            offsets = struct.unpack_from(f"<{count}I", buf, pos + 4)
            at = pos + 4
            value = tuple(self.object(element, at + 4 * i + off, where)
                          for i, off in enumerate(offsets))
        self.sizes[self._part] += 4 + count * width
        self._cache[key] = value
        return value
