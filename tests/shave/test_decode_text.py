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
