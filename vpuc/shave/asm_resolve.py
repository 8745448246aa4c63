"""Pass 2 of the assembler: branch offsets, symbol operands and relocations once
every label is known, then the kernel object with its symbol table."""

from __future__ import annotations

import difflib
import re

from vpuc.shave import elf_layout as elf
from vpuc.shave.asm_state import (IDENT, SYMREF, LineError, PendingInsn, State, Text,
                                  int_operand, looks_like_symbol, shift)
from vpuc.shave.encoding import encode_fields, pack_word
from vpuc.shave.isa import SIGNED_OR_UNSIGNED_32
from vpuc.shave.kobject import R_SHAVE_ABS32, SECTIONS, KernelObject, Relocation, Symbol

_PCREL = re.compile(r"^\.\s*([+-])(.*)$", re.S)


def resolve(st: State) -> None:
    text = st.data[".text"]
    for insn in st.insns:
        if insn.deferred is not None:
            try:
                if insn.deferred_kind == "label":
                    insn.fields["imm"] = _branch_offset(st, insn) & 0xFFFFFFFF
                else:
                    _symbol_operand(st, insn)
            except LineError as err:
                st.bag.error(err.loc, err.message, insn.via)
        text[insn.offset:insn.offset + 8] = pack_word(encode_fields(insn.fields))
    for section, offset, op, via in st.data_refs:
        try:
            name, addend = _symbol_ref(st, op)
        except LineError as err:
            st.bag.error(err.loc, err.message, via)
            continue
        st.relocations.append(Relocation(section, offset, R_SHAVE_ABS32, name, addend))
    for name, (loc, via) in st.globals.items():
        if name not in st.labels:
            st.bag.error(loc, f"global symbol '{name}' is never defined", via)


def _branch_offset(st: State, insn: PendingInsn) -> int:
    op = insn.deferred
    pcrel = _PCREL.match(op.text)
    if pcrel:
        value = int_operand(st, Text(pcrel.group(2), op.loc), SIGNED_OR_UNSIGNED_32)
        return -value if pcrel.group(1) == "-" else value
    if not re.fullmatch(IDENT, op.text):
        raise LineError(op.loc, f"expected a label for operand of '{insn.info.mnemonic}', "
                        f"got '{op.text}'")
    if op.text not in st.labels:
        hint = difflib.get_close_matches(op.text, st.labels, n=1)
        raise LineError(op.loc, f"undefined label '{op.text}'"
                        + (f"; did you mean '{hint[0]}'?" if hint else ""))
    section, offset, _ = st.labels[op.text]
    if section != ".text":
        raise LineError(op.loc, f"branch target '{op.text}' is in {section}; branches need "
                        "a label in .text")
    return offset - insn.offset


def _symbol_operand(st: State, insn: PendingInsn) -> None:
    op = insn.deferred
    if not looks_like_symbol(st, op.text):
        insn.fields["imm"] = int_operand(st, op, SIGNED_OR_UNSIGNED_32) & 0xFFFFFFFF
        return
    name, addend = _symbol_ref(st, op)
    st.relocations.append(Relocation(".text", insn.offset + 4, R_SHAVE_ABS32, name, addend))


def _symbol_ref(st: State, op: Text) -> tuple[str, int]:
    match = SYMREF.match(op.text)
    name = match.group(1)
    if name not in st.labels:
        hint = difflib.get_close_matches(name, st.labels, n=1)
        raise LineError(op.loc, f"undefined symbol '{name}'"
                        + (f"; did you mean '{hint[0]}'?" if hint else ""))
    addend = 0
    if match.group(2):
        rest = match.group(3)
        addend = int_operand(st, Text(rest, shift(op.loc, len(op.text) - len(rest))),
                             (-(1 << 31), (1 << 31) - 1))
        addend = -addend if match.group(2) == "-" else addend
    return name, addend


def build_object(st: State) -> KernelObject:
    obj = KernelObject(st.name)
    obj.sections = {name: bytes(st.data[name]) for name in SECTIONS}
    obj.alignments = dict(st.align)
    function_starts = sorted(st.labels[n][1] for n in st.globals if st.labels[n][0] == ".text")
    text_size = len(st.data[".text"])
    symbols = []
    for order, name in enumerate(st.label_order):
        section, value, _ = st.labels[name]
        is_global = name in st.globals
        size = 0
        if section != ".text":
            typ = elf.STT_OBJECT
        elif is_global:
            typ = elf.STT_FUNC
            size = next((s for s in function_starts if s > value), text_size) - value
        else:
            typ = elf.STT_NOTYPE
        symbols.append((is_global, SECTIONS.index(section), value, order,
                        Symbol(name, section, value, size, is_global, typ)))
    # Canonical order: locals, then globals; by section and address, then definition.
    obj.symbols = [entry[-1] for entry in sorted(symbols, key=lambda e: e[:4])]
    obj.relocations = sorted(st.relocations, key=lambda r: (SECTIONS.index(r.section), r.offset))
    return obj

