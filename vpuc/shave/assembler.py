"""Text assembly -> KernelObject.

One statement per line: optional labels (``name:``), then a directive or an
instruction.  Comments start with ``//`` or ``#`` and run to the end of the
line.  All errors of a file are collected and raised together, each located
``file:line:col`` with what was expected.  The syntax is documented in
``docs/shave-isa.md``.
"""

from __future__ import annotations

import difflib
import re
import struct
from dataclasses import dataclass, field

from vpuc.diagnostics import SOURCES, DiagnosticBag, Loc, VpucError
from vpuc.shave import elf_layout as elf
from vpuc.shave.encoding import encode_fields, pack_word
from vpuc.shave.literals import ExprError, parse_float, parse_int_expr
from vpuc.shave.isa import (BY_MNEMONIC, KINDS, REGISTER_ALIASES, REGISTER_COUNTS,
                            SIGNED_OR_UNSIGNED_32, Instruction, format_placeholders)
from vpuc.shave.kobject import (DEFAULT_ALIGN, R_SHAVE_ABS32, SECTIONS, KernelObject,
                                Relocation, Symbol)

IDENT = r"[A-Za-z_.$][A-Za-z0-9_.$]*"
_LABEL = re.compile(rf"\s*({IDENT})\s*:")
_REGISTER = re.compile(r"([svm])(\d+)")
_MEM = re.compile(r"^(.*)\(\s*([A-Za-z0-9_]+)\s*\)\s*$", re.S)
_SYMREF = re.compile(rf"^({IDENT})\s*(?:([+-])(.*))?$", re.S)
_PCREL = re.compile(r"^\.\s*([+-])(.*)$", re.S)
REGFILE_NAMES = {"s": "scalar", "v": "vector", "m": "mask"}
DIRECTIVES = (".text", ".rodata", ".data", ".section", ".global", ".globl", ".align",
              ".byte", ".half", ".word", ".dword", ".float", ".float16", ".zero", ".equ", ".set")
DATA_SIZES = {".byte": (1, "<B"), ".half": (2, "<H"), ".word": (4, "<I"), ".dword": (8, "<Q")}
_NOP = pack_word(encode_fields({"opcode": BY_MNEMONIC["nop"].opcode}))


def _is_register_name(name: str) -> bool:
    return bool(_REGISTER.fullmatch(name)) or name in REGISTER_ALIASES


@dataclass
class _Text:
    """One operand's text and where it starts."""

    text: str
    loc: Loc


@dataclass
class _PendingInsn:
    offset: int
    info: Instruction
    fields: dict[str, int]
    deferred: _Text | None = None      # a label or symbol operand resolved in pass 2
    deferred_kind: str = ""


@dataclass
class _State:
    file: str
    bag: DiagnosticBag = field(default_factory=DiagnosticBag)
    section: str = ".text"
    data: dict[str, bytearray] = field(default_factory=lambda: {s: bytearray() for s in SECTIONS})
    align: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_ALIGN))
    labels: dict[str, tuple[str, int, Loc]] = field(default_factory=dict)
    label_order: list[str] = field(default_factory=list)
    globals: dict[str, Loc] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)
    insns: list[_PendingInsn] = field(default_factory=list)
    data_refs: list[tuple[str, int, _Text]] = field(default_factory=list)
    relocations: list[Relocation] = field(default_factory=list)


class _LineError(Exception):
    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def assemble(text: str, filename: str = "<asm>") -> KernelObject:
    """Assemble SHAVE assembly text into a kernel object; errors raise VpucError."""
    SOURCES.add(filename, text)
    st = _State(filename)
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            _assemble_line(st, line, number)
        except _LineError as err:
            st.bag.error(err.loc, err.message)
    _resolve(st)
    st.bag.raise_if_errors()
    return _build_object(st)


def assemble_file(path: str) -> KernelObject:
    """Assemble a file; an unreadable file is a VpucError too."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise VpucError(f"cannot read assembly file {path}: {exc}") from None
    return assemble(text, str(path))


# --- pass 1: lines ------------------------------------------------------------------

def _strip_comment(line: str) -> str:
    cut = len(line)
    for marker in ("//", "#"):
        pos = line.find(marker)
        if 0 <= pos < cut:
            cut = pos
    return line[:cut]


def _assemble_line(st: _State, raw: str, number: int) -> None:
    line = _strip_comment(raw).rstrip()
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


def _split_operands(line: str, pos: int, number: int, file: str) -> list[_Text]:
    """Split at top-level commas, keeping each operand's column."""
    body = line[pos:]
    if not body.strip():
        return []
    pieces, depth, begin = [], 0, 0
    for i, ch in enumerate(body + ","):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth <= 0:
            piece = body[begin:i]
            lead = len(piece) - len(piece.lstrip())
            col = pos + begin + lead + 1
            if not piece.strip():
                raise _LineError(Loc(file, number, col), "expected an operand before ','"
                                 if i < len(body) else "expected an operand after ','")
            pieces.append(_Text(piece.strip(), Loc(file, number, col)))
            begin = i + 1
    return pieces


def _define_label(st: _State, name: str, loc: Loc) -> None:
    if _is_register_name(name):
        raise _LineError(loc, f"'{name}' is a register name and cannot be a label")
    if name in st.labels:
        prev = st.labels[name][2]
        st.bag.error(loc, f"label '{name}' is already defined", ((prev, "first defined here"),))
        return
    st.labels[name] = (st.section, len(st.data[st.section]), loc)
    st.label_order.append(name)


def _directive(st: _State, word: str, operands: list[_Text], loc: Loc) -> None:
    if word not in DIRECTIVES:
        hint = difflib.get_close_matches(word, DIRECTIVES, n=1)
        raise _LineError(loc, f"unknown directive '{word}'"
                         + (f"; did you mean '{hint[0]}'?" if hint else ""))
    if word in SECTIONS or word == ".section":
        name = word
        if word == ".section":
            if len(operands) != 1 or operands[0].text not in SECTIONS:
                raise _LineError(loc, "expected '.section' followed by one of "
                                 + ", ".join(SECTIONS))
            name = operands[0].text
        elif operands:
            raise _LineError(operands[0].loc, f"'{word}' takes no operands")
        st.section = name
        return
    if word in (".global", ".globl"):
        if not operands:
            raise _LineError(loc, f"expected a symbol name after '{word}'")
        for op in operands:
            if not re.fullmatch(IDENT, op.text):
                raise _LineError(op.loc, f"expected a symbol name, got '{op.text}'")
            st.globals.setdefault(op.text, op.loc)
        return
    if word in (".equ", ".set"):
        if len(operands) != 2 or not re.fullmatch(IDENT, operands[0].text):
            raise _LineError(loc, f"expected '{word} name, value'")
        st.constants[operands[0].text] = _int(st, operands[1], (-(1 << 63), (1 << 64) - 1))
        return
    if word == ".align":
        _align(st, operands, loc)
        return
    if st.section == ".text":
        raise _LineError(loc, f"'{word}' emits data, which belongs in .rodata or .data, "
                         "not .text")
    out = st.data[st.section]
    if not operands:
        raise _LineError(loc, f"expected at least one value after '{word}'")
    if word == ".zero":
        if len(operands) != 1:
            raise _LineError(loc, "expected '.zero count'")
        out += bytes(_int(st, operands[0], (0, 1 << 24)))
    elif word in (".float", ".float16"):
        bits = 32 if word == ".float" else 16
        for op in operands:
            out += struct.pack("<I" if bits == 32 else "<H", _float_bits(op, bits))
    else:
        size, code = DATA_SIZES[word]
        for op in operands:
            if word == ".word" and _looks_like_symbol(st, op.text):
                st.data_refs.append((st.section, len(out), op))
                out += bytes(4)
                continue
            low, high = -(1 << (8 * size - 1)), (1 << (8 * size)) - 1
            out += struct.pack(code, _int(st, op, (low, high)) & ((1 << 8 * size) - 1))


def _align(st: _State, operands: list[_Text], loc: Loc) -> None:
    if len(operands) != 1:
        raise _LineError(loc, "expected '.align bytes'")
    n = _int(st, operands[0], (1, 4096))
    if n & (n - 1):
        raise _LineError(operands[0].loc, f"alignment {n} is not a power of two")
    out = st.data[st.section]
    st.align[st.section] = max(st.align[st.section], n)
    pad = -len(out) % n
    # .text is padded with nops, so it still decodes.
    out += _NOP * (pad // 8) if st.section == ".text" else bytes(pad)


def _looks_like_symbol(st: _State, text: str) -> bool:
    match = _SYMREF.match(text)
    return bool(match) and match.group(1) not in st.constants


# --- instructions -----------------------------------------------------------------

def _instruction(st: _State, mnemonic: str, operands: list[_Text], loc: Loc) -> None:
    info = BY_MNEMONIC.get(mnemonic)
    if info is None:
        hint = difflib.get_close_matches(mnemonic, BY_MNEMONIC, n=1)
        raise _LineError(loc, f"unknown mnemonic '{mnemonic}'"
                         + (f"; did you mean '{hint[0]}'?" if hint else ""))
    out = st.data[st.section]
    if st.section != ".text":
        out += bytes(8)
        raise _LineError(loc, f"instruction '{mnemonic}' in {st.section}; instructions "
                         "belong in .text")
    pending = _PendingInsn(len(out), info, {"opcode": info.opcode})
    out += bytes(8)          # keeps later offsets right even if this line has errors
    expected = info.operands
    if len(operands) != len(expected):
        where = operands[len(expected)].loc if len(operands) > len(expected) else loc
        shape = f" ({format_placeholders(info.format)})" if expected else ""
        raise _LineError(where, f"'{mnemonic}' takes {len(expected)} operand"
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


def _operand(st: _State, insn: _PendingInsn, spec, text: _Text, position: int) -> None:
    kind, info = spec.kind, insn.info
    if kind == "mem":
        match = _MEM.match(text.text)
        if not match:
            raise _LineError(text.loc, f"expected a memory operand 'offset(sN)' for operand "
                             f"{position} of '{info.mnemonic}', got '{text.text}'")
        insn.fields[spec.field] = _register(_Text(match.group(2), _shift(text.loc, text.text.rfind(
            "(") + 1)), "sa", info.mnemonic, position)
        offset = match.group(1).strip()
        insn.fields["imm"] = (_int(st, _Text(offset, text.loc), SIGNED_OR_UNSIGNED_32)
                              & 0xFFFFFFFF) if offset else 0
    elif KINDS[kind].regfile:
        insn.fields[spec.field] = _register(text, kind, info.mnemonic, position)
    elif kind == "imm":
        value = _int(st, text, info.imm_range or SIGNED_OR_UNSIGNED_32, info.mnemonic)
        insn.fields["imm"] = value & 0xFFFFFFFF
    elif kind in ("f32", "f16"):
        insn.fields["imm"] = _float_bits(text, 32 if kind == "f32" else 16)
    else:  # label or sym: resolved once every label is known
        insn.fields["imm"] = 0
        insn.deferred, insn.deferred_kind = text, kind


def _shift(loc: Loc, by: int) -> Loc:
    return Loc(loc.file, loc.line, loc.col + by)


def _register(text: _Text, kind: str, mnemonic: str, position: int) -> int:
    want = KINDS[kind].regfile
    name = text.text
    if name in REGISTER_ALIASES:
        regfile, number = REGISTER_ALIASES[name]
    else:
        match = _REGISTER.fullmatch(name)
        if not match:
            raise _LineError(text.loc, f"expected {_describe(kind)} for operand {position} of "
                             f"'{mnemonic}', got '{name}'")
        regfile, number = match.group(1), int(match.group(2))
    if regfile != want:
        raise _LineError(text.loc, f"expected {_describe(kind)} for operand {position} of "
                         f"'{mnemonic}', got '{name}'")
    count = REGISTER_COUNTS[regfile]
    if number >= count:
        raise _LineError(text.loc, f"register '{name}' out of range: {REGFILE_NAMES[regfile]} "
                         f"registers are {regfile}0..{regfile}{count - 1}")
    if kind in ("sd2", "sa2") and number % 2:
        raise _LineError(text.loc, f"'{mnemonic}' needs an even register (the pair "
                         f"s{number}:s{number + 1} is not allowed)")
    return number


def _int(st: _State, text: _Text, bounds: tuple[int, int], mnemonic: str | None = None) -> int:
    try:
        value = parse_int_expr(text.text, st.constants)
    except ExprError as err:
        raise _LineError(_shift(text.loc, err.column), str(err)) from None
    low, high = bounds
    if not low <= value <= high:
        owner = f" for '{mnemonic}'" if mnemonic else ""
        raise _LineError(text.loc, f"immediate {value} out of range{owner} ({low}..{high})")
    return value


def _float_bits(text: _Text, bits: int) -> int:
    try:
        return parse_float(text.text, bits)
    except ExprError as err:
        raise _LineError(_shift(text.loc, err.column), str(err)) from None


# --- pass 2: labels, symbols, object -------------------------------------------------

def _resolve(st: _State) -> None:
    text = st.data[".text"]
    for insn in st.insns:
        if insn.deferred is not None:
            try:
                if insn.deferred_kind == "label":
                    insn.fields["imm"] = _branch_offset(st, insn) & 0xFFFFFFFF
                else:
                    _symbol_operand(st, insn)
            except _LineError as err:
                st.bag.error(err.loc, err.message)
        text[insn.offset:insn.offset + 8] = pack_word(encode_fields(insn.fields))
    for section, offset, op in st.data_refs:
        try:
            name, addend = _symbol_ref(st, op)
        except _LineError as err:
            st.bag.error(err.loc, err.message)
            continue
        st.relocations.append(Relocation(section, offset, R_SHAVE_ABS32, name, addend))
    for name, loc in st.globals.items():
        if name not in st.labels:
            st.bag.error(loc, f"global symbol '{name}' is never defined")


def _branch_offset(st: _State, insn: _PendingInsn) -> int:
    op = insn.deferred
    pcrel = _PCREL.match(op.text)
    if pcrel:
        value = _int(st, _Text(pcrel.group(2), op.loc), SIGNED_OR_UNSIGNED_32)
        return -value if pcrel.group(1) == "-" else value
    if not re.fullmatch(IDENT, op.text):
        raise _LineError(op.loc, f"expected a label for operand of '{insn.info.mnemonic}', "
                         f"got '{op.text}'")
    if op.text not in st.labels:
        hint = difflib.get_close_matches(op.text, st.labels, n=1)
        raise _LineError(op.loc, f"undefined label '{op.text}'"
                         + (f"; did you mean '{hint[0]}'?" if hint else ""))
    section, offset, _ = st.labels[op.text]
    if section != ".text":
        raise _LineError(op.loc, f"branch target '{op.text}' is in {section}; branches need "
                         "a label in .text")
    return offset - insn.offset


def _symbol_operand(st: _State, insn: _PendingInsn) -> None:
    op = insn.deferred
    if not _looks_like_symbol(st, op.text):
        insn.fields["imm"] = _int(st, op, SIGNED_OR_UNSIGNED_32) & 0xFFFFFFFF
        return
    name, addend = _symbol_ref(st, op)
    st.relocations.append(Relocation(".text", insn.offset + 4, R_SHAVE_ABS32, name, addend))


def _symbol_ref(st: _State, op: _Text) -> tuple[str, int]:
    match = _SYMREF.match(op.text)
    name = match.group(1)
    if name not in st.labels:
        hint = difflib.get_close_matches(name, st.labels, n=1)
        raise _LineError(op.loc, f"undefined symbol '{name}'"
                         + (f"; did you mean '{hint[0]}'?" if hint else ""))
    addend = 0
    if match.group(2):
        rest = match.group(3)
        addend = _int(st, _Text(rest, _shift(op.loc, len(op.text) - len(rest))),
                      (-(1 << 31), (1 << 31) - 1))
        addend = -addend if match.group(2) == "-" else addend
    return name, addend


def _build_object(st: _State) -> KernelObject:
    obj = KernelObject(st.file)
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

