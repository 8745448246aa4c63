"""The fixed 64-bit instruction word: bit fields as data, encode and decode.

Every instruction is one little-endian 64-bit word with the same fields::

    63              32 31   27 26   22 21   17 16   12 11        0
    +-----------------+-------+-------+-------+-------+-----------+
    |       imm       |  r4   |  r3   |  r2   |  r1   |  opcode   |
    +-----------------+-------+-------+-------+-------+-----------+

Which fields an instruction uses follows from its format (``isa_operands.FORMATS``);
fields it does not use must be zero, so every valid word has exactly one
spelling in assembly and disassembly reproduces the bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from vpuc.shave.isa import BY_OPCODE, Instruction

# field name -> (lowest bit, width in bits)
FIELDS: dict[str, tuple[int, int]] = {
    "opcode": (0, 12),
    "r1": (12, 5),
    "r2": (17, 5),
    "r3": (22, 5),
    "r4": (27, 5),
    "imm": (32, 32),
}
WORD_BYTES = 8
_WORD = struct.Struct("<Q")


@dataclass(frozen=True)
class Decoded:
    """One decoded word: the table row and the raw field values."""

    info: Instruction
    fields: dict[str, int]

    @property
    def imm(self) -> int:
        return self.fields["imm"]


class DecodeError(ValueError):
    """A word that is not a valid instruction (callers add location and raise VpucError)."""


def encode_fields(values: dict[str, int]) -> int:
    word = 0
    for name, value in values.items():
        low, width = FIELDS[name]
        if not 0 <= value < (1 << width):
            raise ValueError(f"field {name} value {value} does not fit in {width} bits")
        word |= value << low
    return word


def field_values(word: int) -> dict[str, int]:
    return {name: (word >> low) & ((1 << width) - 1) for name, (low, width) in FIELDS.items()}


def used_fields(info: Instruction) -> set[str]:
    used = {"opcode"}
    for op in info.operands:
        if op.field:
            used.add(op.field)
        if op.uses_imm:
            used.add("imm")
    return used


def decode_word(word: int) -> Decoded:
    """The word decoded; a ``Decoded`` is never changed, so equal words share one (the
    library kernels share their driver's code, and a kernel is decoded more than once)."""
    found = _DECODED.get(word)
    if found is None:
        if len(_DECODED) >= MAX_DECODED:
            _DECODED.clear()
        found = _DECODED[word] = _decode(word)
    return found


_DECODED: dict[int, Decoded] = {}
MAX_DECODED = 1 << 16


def _decode(word: int) -> Decoded:
    values = field_values(word)
    info = BY_OPCODE.get(values["opcode"])
    if info is None:
        raise DecodeError(f"unknown opcode {values['opcode']:#05x}")
    stray = [name for name in FIELDS if values[name] and name not in used_fields(info)]
    if stray:
        raise DecodeError(f"'{info.mnemonic}' does not use field(s) {', '.join(stray)}, "
                          f"which must be zero")
    for op in info.operands:
        if op.kind in ("sd2", "sa2") and values[op.field] % 2:
            raise DecodeError(f"'{info.mnemonic}' needs an even register pair, "
                              f"got s{values[op.field]}")
        if op.kind == "f16" and values["imm"] >> 16:
            raise DecodeError(f"'{info.mnemonic}' immediate {values['imm']:#x} has bits above 16")
    if info.imm_range and not info.imm_range[0] <= values["imm"] <= info.imm_range[1]:
        low, high = info.imm_range
        raise DecodeError(f"'{info.mnemonic}' immediate {values['imm']} is outside {low}..{high}")
    return Decoded(info, values)


def pack_word(word: int) -> bytes:
    return _WORD.pack(word)


def unpack_words(data: bytes) -> list[int]:
    if len(data) % WORD_BYTES:
        raise DecodeError(f"code size {len(data)} is not a multiple of {WORD_BYTES} bytes")
    return [w for (w,) in _WORD.iter_unpack(data)]
