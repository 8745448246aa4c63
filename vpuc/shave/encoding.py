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
    """The word's fields (``FIELDS`` spelled out: a comprehension over it took 2.5 us a
    word, most of a cold decode; ``tests/shave`` checks the two agree)."""
    return {"opcode": word & 0xFFF, "r1": word >> 12 & 0x1F, "r2": word >> 17 & 0x1F,
            "r3": word >> 22 & 0x1F, "r4": word >> 27 & 0x1F, "imm": word >> 32 & 0xFFFFFFFF}


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


class TextDecodeError(DecodeError):
    """A word of a .text that does not decode: ``index`` is its position, ``word`` its
    value (callers locate it at ``index * WORD_BYTES``)."""

    def __init__(self, message: str, index: int, word: int) -> None:
        super().__init__(message)
        self.index, self.word = index, word


def decode_text(code: bytes) -> tuple[Decoded, ...]:
    """Every word of ``code`` decoded.  A kernel's .text is decoded when its object is
    read (``kobject``'s check) and again when it is loaded (``runtime_sim``'s
    ``Program``, from the same bytes unless relocations patched them): the result is
    remembered by the bytes, so the second decode is one look-up.  Raises
    ``DecodeError`` for a size that is not whole words, ``TextDecodeError`` for a bad
    word."""
    code = bytes(code)
    found = _TEXTS.get(code)
    if found is None:
        words = unpack_words(code)
        get = _DECODED.get
        decoded = [get(word) for word in words]
        for i, dec in enumerate(decoded):
            if dec is None:
                try:
                    decoded[i] = decode_word(words[i])
                except DecodeError as exc:
                    raise TextDecodeError(str(exc), i, words[i]) from None
        if len(_TEXTS) >= MAX_TEXTS:
            _TEXTS.clear()
        found = _TEXTS[code] = tuple(decoded)
    return found


_TEXTS: dict[bytes, tuple[Decoded, ...]] = {}
MAX_TEXTS = 128


# Per opcode: (the table row, the word's bits its fields may use, the register-pair fields,
# whether its immediate is an f16): a word with a bit outside them names a field it does
# not use (``_decode``'s message says which).
_ALLOWED: dict[int, tuple[Instruction, int, tuple[str, ...], bool]] = {}


def _allowed_bits(info: Instruction) -> int:
    bits = 0
    for name in used_fields(info):
        low, width = FIELDS[name]
        bits |= ((1 << width) - 1) << low
    return bits


def _decode(word: int) -> Decoded:
    opcode = word & 0xFFF
    found = _ALLOWED.get(opcode)
    if found is None:
        info = BY_OPCODE.get(opcode)
        if info is None:
            raise DecodeError(f"unknown opcode {opcode:#05x}")
        found = _ALLOWED[opcode] = (
            info, _allowed_bits(info),
            tuple(op.field for op in info.operands if op.kind in ("sd2", "sa2")),
            any(op.kind == "f16" for op in info.operands))
    info, allowed, pairs, f16 = found
    values = field_values(word)
    if word & ~allowed:
        used = used_fields(info)
        stray = [name for name in FIELDS if values[name] and name not in used]
        raise DecodeError(f"'{info.mnemonic}' does not use field(s) {', '.join(stray)}, "
                          f"which must be zero")
    for name in pairs:
        if values[name] % 2:
            raise DecodeError(f"'{info.mnemonic}' needs an even register pair, "
                              f"got s{values[name]}")
    if f16 and values["imm"] >> 16:
        raise DecodeError(f"'{info.mnemonic}' immediate {values['imm']:#x} has bits above 16")
    if info.imm_range and not info.imm_range[0] <= values["imm"] <= info.imm_range[1]:
        low, high = info.imm_range
        raise DecodeError(f"'{info.mnemonic}' immediate {values['imm']} is outside {low}..{high}")
    return _new_decoded(info, values)


def _new_decoded(info: Instruction, values: dict[str, int]) -> Decoded:
    """``Decoded(info, values)`` without the frozen dataclass's ``__init__`` (an
    ``object.__setattr__`` per field): a cold run decodes ~900 words."""
    dec = object.__new__(Decoded)
    dec.__dict__.update(info=info, fields=values)
    return dec


def pack_word(word: int) -> bytes:
    return _WORD.pack(word)


def unpack_words(data: bytes) -> list[int]:
    if len(data) % WORD_BYTES:
        raise DecodeError(f"code size {len(data)} is not a multiple of {WORD_BYTES} bytes")
    return [w for (w,) in _WORD.iter_unpack(data)]
