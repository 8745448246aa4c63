"""``decode_text``: a .text decoded once for the object's check and the loader's Program."""

import pytest

from vpuc.shave import BY_MNEMONIC, assemble
from vpuc.shave.encoding import (WORD_BYTES, DecodeError, TextDecodeError, decode_text,
                                 decode_word, encode_fields, pack_word, unpack_words)

_SOURCE = """
    .global k
    .text
k:
    li   s2, 7
    addi s2, s2, 1
    ret
"""


def test_decode_text_is_decode_word_per_word_and_shared_by_the_bytes():
    text = assemble(_SOURCE).text
    decoded = decode_text(text)
    assert list(decoded) == [decode_word(w) for w in unpack_words(text)]
    assert decode_text(bytearray(text)) is decoded        # the loader's second decode


def test_decode_text_names_the_bad_word_and_its_index():
    nop = BY_MNEMONIC["nop"]
    bad = encode_fields({"opcode": nop.opcode, "r2": 3})
    text = pack_word(encode_fields({"opcode": nop.opcode})) * 2 + pack_word(bad)
    with pytest.raises(TextDecodeError, match="does not use field") as info:
        decode_text(text)
    assert (info.value.index, info.value.word) == (2, bad)
    with pytest.raises(DecodeError, match="not a multiple of 8"):
        decode_text(text[:-1])
    assert not isinstance(_raised(text[:-1]), TextDecodeError)
    assert len(text) == 3 * WORD_BYTES


def _raised(text: bytes) -> Exception:
    try:
        decode_text(text)
    except DecodeError as exc:
        return exc
    raise AssertionError("no error")


def test_field_values_spelled_out_are_the_fields_table():
    """``field_values`` spells ``FIELDS`` out (the cold decode's cost): every field of
    random words, and of words with all bits set, is ``FIELDS``' slice of the word."""
    import random

    from vpuc.shave.encoding import FIELDS, field_values
    rng = random.Random(0)
    for word in [0, (1 << 64) - 1] + [rng.getrandbits(64) for _ in range(500)]:
        assert field_values(word) == {name: (word >> low) & ((1 << width) - 1)
                                      for name, (low, width) in FIELDS.items()}


@pytest.mark.parametrize("case", ["odd pair", "f16 high bits", "imm range"])
def test_decode_checks_per_opcode_name_the_operand(case):
    """The per-opcode checks worked out once (register pairs even, an f16 immediate's 16
    bits, the immediate's range) still reject each word with its message."""
    from vpuc.shave.isa import INSTRUCTIONS
    if case == "odd pair":
        info = next(i for i in INSTRUCTIONS if any(op.kind in ("sd2", "sa2")
                                                  for op in i.operands))
        field = next(op.field for op in info.operands if op.kind in ("sd2", "sa2"))
        word, match = encode_fields({"opcode": info.opcode, field: 3}), "even register pair"
    elif case == "f16 high bits":
        info = next(i for i in INSTRUCTIONS if any(op.kind == "f16" for op in i.operands))
        word, match = encode_fields({"opcode": info.opcode, "imm": 1 << 16}), "bits above 16"
    else:
        info = next(i for i in INSTRUCTIONS if i.imm_range and i.imm_range[1] < (1 << 32) - 1)
        word = encode_fields({"opcode": info.opcode, "imm": info.imm_range[1] + 1})
        match = "is outside"
    with pytest.raises(DecodeError, match=match):
        decode_word(word)
