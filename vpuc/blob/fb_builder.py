"""A faster flatbuffers.Builder: the same algorithm, its hot paths inlined.

The pure-Python builder spends most of a 100k-task blob in a few small
methods (``Prep``, ``Place``, ``PrependSlot``, ``PrependUOffsetTRelative``),
each going through two or three more calls and a range check per scalar.
``FastBuilder`` overrides exactly those with code that computes the same
thing in one frame: the same alignment, the same bytes at the same places.
Range checks are left to ``struct`` (an out-of-range value raises
``struct.error``, which ``write_blob`` reports).  Growing the buffer and
everything else is the stock builder's.  tests/blob/test_schema.py checks that
both builders write byte-identical blobs.
"""

from __future__ import annotations

import struct

import flatbuffers
from flatbuffers import number_types as N

_U32 = struct.Struct("<I").pack_into
_I32 = struct.Struct("<i").pack_into


class FastBuilder(flatbuffers.Builder):
    def Prep(self, size, additionalBytes):
        if size > self.minalign:
            self.minalign = size
        head = self.head
        align = (head - len(self.Bytes) - additionalBytes) & (size - 1)
        if head < align + size + additionalBytes:
            return super().Prep(size, additionalBytes)      # grows the buffer
        if align:
            self.Bytes[head - align:head] = bytes(align)
            self.head = head - align

    def Place(self, x, flags):
        self.head -= flags.bytewidth
        flags.packer_type.pack_into(self.Bytes, self.head, x)

    def PrependSlot(self, flags, o, x, d):
        if x != d or (self.forceDefaults and d is not None):
            width = flags.bytewidth
            self.Prep(width, 0)
            self.head -= width
            flags.packer_type.pack_into(self.Bytes, self.head, x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    def PrependUOffsetTRelative(self, off):
        self.Prep(4, 0)
        offset = len(self.Bytes) - self.head
        if off > offset:
            raise flatbuffers.builder.OffsetArithmeticError(
                "flatbuffers: Offset arithmetic error.")
        self.head -= 4
        _U32(self.Bytes, self.head, offset - off + 4)

    def PrependUOffsetTRelativeSlot(self, o, x, d):
        if x != d or self.forceDefaults:
            self.PrependUOffsetTRelative(x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    def PlaceUOffsetT(self, x):
        self.head -= 4
        _U32(self.Bytes, self.head, x)

    def PlaceSOffsetT(self, x):
        self.head -= 4
        _I32(self.Bytes, self.head, x)


def _typed_slot(flags):
    def prepend(self, o, x, d):
        self.PrependSlot(flags, o, x, d)
    return prepend


for _name, _flags in (("Bool", N.BoolFlags), ("Byte", N.Uint8Flags), ("Uint8", N.Uint8Flags),
                      ("Uint16", N.Uint16Flags), ("Uint32", N.Uint32Flags),
                      ("Uint64", N.Uint64Flags), ("Int8", N.Int8Flags), ("Int16", N.Int16Flags),
                      ("Int32", N.Int32Flags), ("Int64", N.Int64Flags),
                      ("Float32", N.Float32Flags), ("Float64", N.Float64Flags)):
    setattr(FastBuilder, f"Prepend{_name}Slot", _typed_slot(_flags))
