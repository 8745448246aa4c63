"""The instruction table, the word layout, and one encode/decode round trip per instruction."""

import pytest

from runtime_sim.isa.cycles import CYCLES
from runtime_sim.isa.semantics import SEMANTICS
from shave_testlib import every_instruction_program
from vpuc.diagnostics import VpucError
from vpuc.shave import BY_MNEMONIC, INSTRUCTIONS, assemble, decode_word, disassemble
from vpuc.shave.encoding import FIELDS, DecodeError, encode_fields, unpack_words, used_fields
from vpuc.shave.isa_operands import FORMATS


def test_table_is_consistent():
    assert len({i.opcode for i in INSTRUCTIONS}) == len(INSTRUCTIONS)
    assert all(0 < i.opcode < (1 << FIELDS["opcode"][1]) for i in INSTRUCTIONS)
    assert all(i.format in FORMATS for i in INSTRUCTIONS)
    assert set(SEMANTICS) == set(CYCLES) == {i.opcode for i in INSTRUCTIONS}


def test_fields_tile_the_word():
    covered = 0
    for low, width in FIELDS.values():
        mask = ((1 << width) - 1) << low
        assert covered & mask == 0
        covered |= mask
    assert covered == (1 << 64) - 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_instruction_round_trips(seed):
    text = every_instruction_program(seed)
    obj = assemble(text, f"all{seed}.s")
    words = unpack_words(obj.text)
    assert [decode_word(w).info.mnemonic for w in words] == [i.mnemonic for i in INSTRUCTIONS]
    again = assemble(disassemble(obj.text), "dis.s")
    assert again.text == obj.text


def test_decode_rejects_stray_fields_and_bad_opcodes():
    nop = BY_MNEMONIC["nop"]
    with pytest.raises(DecodeError, match="does not use field"):
        decode_word(encode_fields({"opcode": nop.opcode, "r2": 3}))
    with pytest.raises(DecodeError, match="unknown opcode 0x000"):
        decode_word(0)
    slli = BY_MNEMONIC["slli"]
    with pytest.raises(DecodeError, match="outside 0..31"):
        decode_word(encode_fields({"opcode": slli.opcode, "r1": 1, "r2": 2, "imm": 40}))
    ld = BY_MNEMONIC["ld"]
    with pytest.raises(DecodeError, match="even register pair"):
        decode_word(encode_fields({"opcode": ld.opcode, "r1": 3, "r2": 2}))


def test_used_fields_match_formats():
    assert used_fields(BY_MNEMONIC["vlds.m.h"]) == {"opcode", "r1", "r2", "r3", "r4", "imm"}
    assert used_fields(BY_MNEMONIC["ret"]) == {"opcode"}
    assert used_fields(BY_MNEMONIC["vadd.f16"]) == {"opcode", "r1", "r2", "r3"}


def test_raw_disassembly_of_garbage_is_a_vpuc_error():
    with pytest.raises(VpucError, match="not a multiple of 8"):
        disassemble(b"\x01\x00\x00")
    with pytest.raises(VpucError, match=r"section \.text at offset 0x8: .*unknown opcode"):
        disassemble(bytes.fromhex("0100000000000000") + bytes(8))
