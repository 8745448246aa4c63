"""Machine code (raw bytes or a kernel ELF) -> assembly text that reassembles to the same bytes.

Raw code gets generated labels (``L_<offset>``) at branch targets.  A kernel
object keeps exactly its own symbols (a generated label would add a symbol on
reassembly), so branch targets without a symbol are written ``.+N``; the
symbol operand of ``la`` and ``.word`` is written from the relocation.

``comments`` (instruction index -> text) appends ``# text`` to instructions,
e.g. where each run of a generated kernel's expression tags starts
(``ExprTags.starts()``, as ``vpuc inspect`` shows them).
"""

from __future__ import annotations

from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.encoding import WORD_BYTES, DecodeError, Decoded, decode_word, unpack_words
from vpuc.shave.isa import REG_LR, REG_SP
from vpuc.shave.kobject import DEFAULT_ALIGN, SECTIONS, KernelObject
from vpuc.shave.literals import format_float, format_int

_REG_NAMES = {("s", REG_SP): "sp", ("s", REG_LR): "lr"}
_BYTES_PER_LINE = 16
_COMMENT_COLUMN = 40


def _commented(line: str, comment: str | None) -> str:
    return line if comment is None else f"{line:<{_COMMENT_COLUMN - 1}} # {comment}"


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _register(regfile: str, number: int) -> str:
    return _REG_NAMES.get((regfile, number), f"{regfile}{number}")


def format_instruction(dec: Decoded, pc: int, labels: dict[int, str] | None = None,
                       symbol: tuple[str, int] | None = None) -> str:
    """One instruction as text.  ``pc`` is its offset in .text; ``labels`` maps
    offsets to label names; ``symbol`` is the (name, addend) of a relocation on
    its imm field."""
    words = []
    imm = dec.fields["imm"]
    for op in dec.info.operands:
        kind = op.kind
        if kind == "mem":
            words.append(f"{format_int(imm)}({_register('s', dec.fields[op.field])})")
        elif op.field:
            words.append(_register(kind[0], dec.fields[op.field]))
        elif kind == "imm":
            words.append(format_int(imm))
        elif kind in ("f32", "f16"):
            words.append(format_float(imm, int(kind[1:])))
        elif kind == "sym":
            if symbol is None:
                words.append(f"{imm:#x}")
            else:
                name, addend = symbol
                words.append(name + (f"+{addend}" if addend > 0 else f"{addend}" if addend else ""))
        else:  # label
            target = pc + _signed(imm)
            if labels and target in labels:
                words.append(labels[target])
            else:
                offset = _signed(imm)
                words.append(f".+{offset}" if offset >= 0 else f".-{-offset}")
    return f"{dec.info.mnemonic} {', '.join(words)}".rstrip()


def _decode_all(code: bytes, file: str) -> list[Decoded]:
    try:
        words = unpack_words(code)
    except DecodeError as exc:
        raise VpucError(str(exc), BinLoc(file, ".text", len(code))) from None
    decoded = []
    for i, word in enumerate(words):
        try:
            decoded.append(decode_word(word))
        except DecodeError as exc:
            raise VpucError(f"invalid instruction {word:#018x}: {exc}",
                            BinLoc(file, ".text", i * WORD_BYTES)) from None
    return decoded


def disassemble(code: bytes, file: str = "<bytes>",
                comments: dict[int, str] | None = None) -> str:
    """Raw .text bytes -> assembly, with generated labels at branch targets."""
    decoded = _decode_all(bytes(code), file)
    labels: dict[int, str] = {}
    for i, dec in enumerate(decoded):
        if any(op.kind == "label" for op in dec.info.operands):
            target = i * WORD_BYTES + _signed(dec.fields["imm"])
            if 0 <= target <= len(code) and target % WORD_BYTES == 0:
                labels.setdefault(target, f"L_{target:04x}")
    lines = ["    .text"]
    for i, dec in enumerate(decoded):
        pc = i * WORD_BYTES
        if pc in labels:
            lines.append(f"{labels[pc]}:")
        lines.append(_commented(f"    {format_instruction(dec, pc, labels)}",
                                (comments or {}).get(i)))
    if len(code) in labels:
        lines.append(f"{labels[len(code)]}:")
    return "\n".join(lines) + "\n"


def disassemble_object(obj: KernelObject, comments: dict[int, str] | None = None) -> str:
    """A kernel object -> assembly that reassembles to the same ELF bytes."""
    lines = [f"// {obj.name}"]
    for sym in obj.symbols:
        if sym.is_global:
            lines.append(f"    .global {sym.name}")
    for section in SECTIONS:
        labels = [s for s in obj.symbols if s.section == section]
        content = obj.sections[section]
        if not content and not labels and section != ".text":
            continue
        lines.append(f"    {section}")
        if obj.alignments[section] > DEFAULT_ALIGN[section]:
            lines.append(f"    .align {obj.alignments[section]}")
        by_offset: dict[int, list[str]] = {}
        for sym in labels:
            by_offset.setdefault(sym.value, []).append(sym.name)
        relocs = {r.offset: (r.symbol, r.addend) for r in obj.relocations if r.section == section}
        if section == ".text":
            lines += _text_lines(obj, by_offset, relocs, comments or {})
        else:
            lines += _data_lines(content, by_offset, relocs)
    return "\n".join(lines) + "\n"


def _text_lines(obj: KernelObject, by_offset: dict[int, list[str]],
                relocs: dict[int, tuple[str, int]], comments: dict[int, str]) -> list[str]:
    first_label = {offset: names[0] for offset, names in by_offset.items()}
    lines = []
    decoded = _decode_all(obj.text, obj.name)
    for i, dec in enumerate(decoded):
        pc = i * WORD_BYTES
        lines += [f"{name}:" for name in by_offset.get(pc, [])]
        lines.append(_commented(
            f"    {format_instruction(dec, pc, first_label, relocs.get(pc + 4))}",
            comments.get(i)))
    lines += [f"{name}:" for name in by_offset.get(len(obj.text), [])]
    return lines


def _data_lines(content: bytes, by_offset: dict[int, list[str]],
                relocs: dict[int, tuple[str, int]]) -> list[str]:
    lines = []
    offset = 0
    while offset < len(content):
        lines += [f"{name}:" for name in by_offset.get(offset, [])]
        if offset in relocs:
            name, addend = relocs[offset]
            suffix = f"+{addend}" if addend > 0 else f"{addend}" if addend else ""
            lines.append(f"    .word {name}{suffix}")
            offset += 4
            continue
        end = min(len(content), offset + _BYTES_PER_LINE)
        for stop in range(offset + 1, end):
            if stop in by_offset or stop in relocs:
                end = stop
                break
        lines.append("    .byte " + ", ".join(f"{b:#04x}" for b in content[offset:end]))
        offset = end
    lines += [f"{name}:" for name in by_offset.get(len(content), [])]
    return lines


def disassemble_elf(data: bytes, filename: str = "<kernel>") -> str:
    return disassemble_object(KernelObject.from_elf(data, filename))
