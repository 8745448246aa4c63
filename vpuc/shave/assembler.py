"""Text assembly -> KernelObject.

One statement per line: optional labels (``name:``), then a directive or an
instruction.  Comments start with ``//`` or ``#`` and run to the end of the
line.  ``.include "path"`` assembles another file in place (``asm_include``);
``.macro``/``.endm`` define macros, expanded before assembly (``asm_macro``).
All errors of a file are collected and raised together, each located
``file:line:col`` with what was expected -- in the included file for its lines,
with notes saying where it was included from (and which macro expansion).  The syntax is documented in
``docs/shave-isa.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import struct
from collections.abc import Iterable

from vpuc.diagnostics import Diagnostic, Loc, VpucError
from vpuc.fileio import not_utf8
from vpuc.shave.asm_include import expand
from vpuc.shave.asm_macro import expand_macros, split_commas
from vpuc.shave.asm_substitute import strip_comment
from vpuc.shave.asm_resolve import build_object, resolve
from vpuc.shave.asm_state import (IDENT, MAX_OBJECT_BYTES, LineError, PendingInsn, State, Text,
                                  int_operand, looks_like_symbol, shift)
from vpuc.shave.encoding import encode_fields, pack_word
from vpuc.shave.literals import ExprError, parse_float
from vpuc.shave.isa import BY_MNEMONIC, REGISTER_ALIASES, REGISTER_COUNTS, SIGNED_OR_UNSIGNED_32
from vpuc.shave.isa_operands import KINDS, format_placeholders
from vpuc.shave.kobject import SECTIONS, KernelObject

_LABEL = re.compile(rf"\s*({IDENT})\s*:")
_REGISTER = re.compile(r"([svm])(\d{1,9})")
_MEM = re.compile(r"^(.*)\(\s*([A-Za-z0-9_]+)\s*\)\s*$", re.S)
REGFILE_NAMES = {"s": "scalar", "v": "vector", "m": "mask"}
DIRECTIVES = (".text", ".rodata", ".data", ".section", ".global", ".globl", ".align",
              ".byte", ".half", ".word", ".dword", ".float", ".float16", ".zero", ".equ", ".set",
              ".include", ".macro", ".endm")
DATA_SIZES = {".byte": (1, "<B"), ".half": (2, "<H"), ".word": (4, "<I"), ".dword": (8, "<Q")}
_NOP = pack_word(encode_fields({"opcode": BY_MNEMONIC["nop"].opcode}))


def _is_register_name(name: str) -> bool:
    return bool(_REGISTER.fullmatch(name)) or name in REGISTER_ALIASES


def assemble(text: str, filename: str = "<asm>",
             include_path: Iterable[str | os.PathLike] = ()) -> KernelObject:
    """Assemble SHAVE assembly text into a kernel object; errors raise VpucError.

    ``filename`` names the text in diagnostics and is where relative ``.include``
    paths start: its directory (the current one for ``"<asm>"``), then each
    directory of ``include_path``.
    """
    st = State(filename)
    columns: dict[tuple, tuple[int, ...]] = {}
    for line in expand_macros(expand(text, filename, include_path, st.bag), st.bag):
        st.file, st.via = line.file, line.via
        if line.cols is not None:
            columns[(line.file, line.number, line.via)] = line.cols
        try:
            _assemble_line(st, line.text, line.number)
        except LineError as err:
            st.bag.error(err.loc, err.message, st.via)
        if sum(map(len, st.data.values())) > MAX_OBJECT_BYTES:
            st.bag.error(Loc(line.file, line.number, 1), "the object outgrows the "
                         f"{MAX_OBJECT_BYTES >> 20} MiB window it is loaded into "
                         f"({', '.join(f'{n} {len(b):,} bytes' for n, b in st.data.items())}); "
                         "assembly stopped here", st.via)
            break
    resolve(st)
    if columns and st.bag.items:
        st.bag.items = [_body_column(d, columns) for d in st.bag.items]
    st.bag.raise_if_errors()
    return build_object(st)


def _body_column(diag: Diagnostic, columns: dict[tuple, tuple[int, ...]]) -> Diagnostic:
    """``diag`` located in a macro body line: its column in the expanded text mapped
    back to the body line's."""
    loc = diag.loc
    if not isinstance(loc, Loc):
        return diag
    for k in range(len(diag.notes) + 1):
        cols = columns.get((loc.file, loc.line, diag.notes[k:]))
        if cols is not None:
            col = cols[min(max(loc.col - 1, 0), len(cols) - 1)] + 1
            return dataclasses.replace(diag, loc=Loc(loc.file, loc.line, col))
    return diag


def assemble_file(path: str | os.PathLike,
                  include_path: Iterable[str | os.PathLike] = ()) -> KernelObject:
    """Assemble a file (its ``.include``s relative to it); an unreadable file is a
    VpucError too."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc, "assembly") from None
    except OSError as exc:
        raise VpucError(f"cannot read assembly file {path}: {exc.strerror or exc}") from None
    return assemble(text, os.fspath(path), include_path)


# --- pass 1: lines ------------------------------------------------------------------

def _assemble_line(st: State, raw: str, number: int) -> None:
    line = strip_comment(raw).rstrip()
    pos = 0
    while (match := _LABEL.match(line, pos)) is not None:
        _define_label(st, match.group(1), Loc(st.file, number, match.start(1) + 1))
        pos = match.end()
    rest = line[pos:]
    if not rest.strip():
        return
    start = pos + len(rest) - len(rest.lstrip())
    word_match = re.compile(r"\S+").match(line, start)
    word = word_match.group(0)
    loc = Loc(st.file, number, start + 1)
    operands = _split_operands(line, word_match.end(), number, st.file)
    if word.startswith("."):
        _directive(st, word, operands, loc)
    else:
        _instruction(st, word, operands, loc)


def _split_operands(line: str, pos: int, number: int, file: str) -> list[Text]:
    """Split at top-level commas, keeping each operand's column."""
    pieces = []
    for piece, offset, last in split_commas(line[pos:]):
        loc = Loc(file, number, pos + offset + 1)
        if not piece:
            raise LineError(loc, "expected an operand after ','" if last
                            else "expected an operand before ','")
        pieces.append(Text(piece, loc))
    return pieces


def _define_label(st: State, name: str, loc: Loc) -> None:
    if _is_register_name(name):
        raise LineError(loc, f"'{name}' is a register name and cannot be a label")
    if name in st.labels:
        prev = st.labels[name][2]
        st.bag.error(loc, f"label '{name}' is already defined",
                     ((prev, "first defined here"),) + st.via)
        return
    st.labels[name] = (st.section, len(st.data[st.section]), loc)
    st.label_order.append(name)


def _directive(st: State, word: str, operands: list[Text], loc: Loc) -> None:
    if word not in DIRECTIVES:
        hint = difflib.get_close_matches(word, DIRECTIVES, n=1)
        raise LineError(loc, f"unknown directive '{word}'"
                        + (f"; did you mean '{hint[0]}'?" if hint else ""))
    if word in SECTIONS or word == ".section":
        name = word
        if word == ".section":
            if len(operands) != 1 or operands[0].text not in SECTIONS:
                raise LineError(loc, "expected '.section' followed by one of "
                                + ", ".join(SECTIONS))
            name = operands[0].text
        elif operands:
            raise LineError(operands[0].loc, f"'{word}' takes no operands")
        st.section = name
        return
    if word in (".global", ".globl"):
        if not operands:
            raise LineError(loc, f"expected a symbol name after '{word}'")
        for op in operands:
            if not re.fullmatch(IDENT, op.text):
                raise LineError(op.loc, f"expected a symbol name, got '{op.text}'")
            st.globals.setdefault(op.text, (op.loc, st.via))
        return
    if word in (".equ", ".set"):
        if len(operands) != 2 or not re.fullmatch(IDENT, operands[0].text):
            raise LineError(loc, f"expected '{word} name, value'")
        st.constants[operands[0].text] = int_operand(st, operands[1], (-(1 << 63), (1 << 64) - 1))
        return
    if word == ".align":
        _align(st, operands, loc)
        return
    if st.section == ".text":
        raise LineError(loc, f"'{word}' emits data, which belongs in .rodata or .data, "
                        "not .text")
    out = st.data[st.section]
    if not operands:
        raise LineError(loc, f"expected at least one value after '{word}'")
    if word == ".zero":
        if len(operands) != 1:
            raise LineError(loc, "expected '.zero count'")
        count = int_operand(st, operands[0], (0, 1 << 24))
        if sum(map(len, st.data.values())) + count > MAX_OBJECT_BYTES:
            raise LineError(operands[0].loc, f"'.zero {count}' makes the object outgrow the "
                            f"{MAX_OBJECT_BYTES >> 20} MiB window it is loaded into")
        out += bytes(count)
    elif word in (".float", ".float16"):
        bits = 32 if word == ".float" else 16
        for op in operands:
            out += struct.pack("<I" if bits == 32 else "<H", _float_bits(op, bits))
    else:
        size, code = DATA_SIZES[word]
        for op in operands:
            if word == ".word" and looks_like_symbol(st, op.text):
                st.data_refs.append((st.section, len(out), op, st.via))
                out += bytes(4)
                continue
            low, high = -(1 << (8 * size - 1)), (1 << (8 * size)) - 1
            out += struct.pack(code, int_operand(st, op, (low, high)) & ((1 << 8 * size) - 1))


def _align(st: State, operands: list[Text], loc: Loc) -> None:
    if len(operands) != 1:
        raise LineError(loc, "expected '.align bytes'")
    n = int_operand(st, operands[0], (1, 4096))
    if n & (n - 1):
        raise LineError(operands[0].loc, f"alignment {n} is not a power of two")
    out = st.data[st.section]
    st.align[st.section] = max(st.align[st.section], n)
    pad = -len(out) % n
    # .text is padded with nops, so it still decodes.
    out += _NOP * (pad // 8) if st.section == ".text" else bytes(pad)


# --- instructions -----------------------------------------------------------------

def _instruction(st: State, mnemonic: str, operands: list[Text], loc: Loc) -> None:
    info = BY_MNEMONIC.get(mnemonic)
    if info is None:
        hint = difflib.get_close_matches(mnemonic, BY_MNEMONIC, n=1)
        raise LineError(loc, f"unknown mnemonic '{mnemonic}'"
                        + (f"; did you mean '{hint[0]}'?" if hint else ""))
    out = st.data[st.section]
    if st.section != ".text":
        out += bytes(8)
        raise LineError(loc, f"instruction '{mnemonic}' in {st.section}; instructions "
                        "belong in .text")
    pending = PendingInsn(len(out), info, {"opcode": info.opcode}, via=st.via)
    out += bytes(8)          # keeps later offsets right even if this line has errors
    expected = info.operands
    if len(operands) != len(expected):
        where = operands[len(expected)].loc if len(operands) > len(expected) else loc
        shape = f" ({format_placeholders(info.format)})" if expected else ""
        raise LineError(where, f"'{mnemonic}' takes {len(expected)} operand"
                        f"{'s' if len(expected) != 1 else ''}{shape}, got {len(operands)}")
    for position, (spec, text) in enumerate(zip(expected, operands), start=1):
        _operand(st, pending, spec, text, position)
    st.insns.append(pending)


def _describe(kind: str) -> str:
    info = KINDS[kind]
    if info.regfile and kind != "mem":
        count = REGISTER_COUNTS[info.regfile]
        pair = "an even " if kind in ("sd2", "sa2") else "a "
        names = f"{info.regfile}0..{info.regfile}{count - 1}"
        return f"{pair}{REGFILE_NAMES[info.regfile]} register ({names})"
    return {"imm": "an integer", "f32": "a float", "f16": "a float", "sym": "a symbol or address",
            "label": "a label", "mem": "a memory operand 'offset(sN)'"}[kind]


def _operand(st: State, insn: PendingInsn, spec, text: Text, position: int) -> None:
    kind, info = spec.kind, insn.info
    if kind == "mem":
        match = _MEM.match(text.text)
        if not match:
            raise LineError(text.loc, f"expected a memory operand 'offset(sN)' for operand "
                            f"{position} of '{info.mnemonic}', got '{text.text}'")
        insn.fields[spec.field] = _register(Text(match.group(2), shift(text.loc, text.text.rfind(
            "(") + 1)), "sa", info.mnemonic, position)
        offset = match.group(1).strip()
        insn.fields["imm"] = (int_operand(st, Text(offset, text.loc), SIGNED_OR_UNSIGNED_32)
                              & 0xFFFFFFFF) if offset else 0
    elif KINDS[kind].regfile:
        insn.fields[spec.field] = _register(text, kind, info.mnemonic, position)
    elif kind == "imm":
        value = int_operand(st, text, info.imm_range or SIGNED_OR_UNSIGNED_32, info.mnemonic)
        insn.fields["imm"] = value & 0xFFFFFFFF
    elif kind in ("f32", "f16"):
        insn.fields["imm"] = _float_bits(text, 32 if kind == "f32" else 16)
    else:  # label or sym: resolved once every label is known
        insn.fields["imm"] = 0
        insn.deferred, insn.deferred_kind = text, kind


def _register(text: Text, kind: str, mnemonic: str, position: int) -> int:
    want = KINDS[kind].regfile
    name = text.text
    if name in REGISTER_ALIASES:
        regfile, number = REGISTER_ALIASES[name]
    else:
        match = _REGISTER.fullmatch(name)
        if not match:
            raise LineError(text.loc, f"expected {_describe(kind)} for operand {position} of "
                            f"'{mnemonic}', got '{name}'")
        regfile, number = match.group(1), int(match.group(2))
    if regfile != want:
        raise LineError(text.loc, f"expected {_describe(kind)} for operand {position} of "
                        f"'{mnemonic}', got '{name}'")
    count = REGISTER_COUNTS[regfile]
    if number >= count:
        raise LineError(text.loc, f"register '{name}' out of range: {REGFILE_NAMES[regfile]} "
                        f"registers are {regfile}0..{regfile}{count - 1}")
    if kind in ("sd2", "sa2") and number % 2:
        raise LineError(text.loc, f"'{mnemonic}' needs an even register (the pair "
                        f"s{number}:s{number + 1} is not allowed)")
    return number


def _float_bits(text: Text, bits: int) -> int:
    try:
        return parse_float(text.text, bits)
    except ExprError as err:
        raise LineError(shift(text.loc, err.column), str(err)) from None


