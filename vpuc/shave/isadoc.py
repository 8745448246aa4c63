"""Render the instruction table into the generated sections of docs/shave-isa.md.

The document marks each generated section with
``<!-- BEGIN GENERATED: name -->`` ... ``<!-- END GENERATED: name -->``;
``replace_generated`` swaps a section's body, and a test checks that the
checked-in document equals its regenerated self.
"""

from __future__ import annotations

import re

from vpuc.shave.encoding import FIELDS
from vpuc.shave.isa import INSTRUCTIONS
from vpuc.shave.isa_operands import FORMAT_OPERANDS, FORMATS, format_placeholders

GROUPS = (
    (0x000, 0x00F, "Miscellaneous"),
    (0x010, 0x02F, "Scalar integer, register-register"),
    (0x030, 0x03F, "Scalar integer, immediate"),
    (0x040, 0x04F, "Moves and constants"),
    (0x050, 0x07F, "Scalar f32"),
    (0x080, 0x0BF, "Scalar memory"),
    (0x0C0, 0x0FF, "Control flow"),
    (0x100, 0x11F, "Vector memory"),
    (0x120, 0x13F, "Vector moves and lanes"),
    (0x140, 0x1FF, "Mask registers"),
    (0x200, 0x27F, "Vector f16 (8 lanes)"),
    (0x280, 0x2FF, "Vector f32 (4 lanes)"),
    (0x300, 0x37F, "Vector integer"),
    (0x380, 0x3FF, "Conversions"),
)


def fields_markdown() -> str:
    rows = ["| field | bits | width |", "|---|---|---|"]
    for name, (low, width) in FIELDS.items():
        rows.append(f"| `{name}` | {low + width - 1}..{low} | {width} |")
    return "\n".join(rows) + "\n"


def formats_markdown() -> str:
    rows = ["| format | operands | r1 | r2 | r3 | r4 | imm |", "|---|---|---|---|---|---|---|"]
    for name in FORMATS:
        cells = {"r1": "", "r2": "", "r3": "", "r4": "", "imm": ""}
        words = format_placeholders(name).split(", ") if FORMATS[name] else []
        for op, word in zip(FORMAT_OPERANDS[name], words):
            if op.field:
                cells[op.field] = f"`{word if op.kind != 'mem' else word[word.index('(') + 1:-1]}`"
            if op.uses_imm:
                cells["imm"] = "`off`" if op.kind == "mem" else f"{op.kind}"
        operands = ", ".join(f"`{w}`" for w in words) or "(none)"
        rows.append(f"| {name} | {operands} | " + " | ".join(cells.values()) + " |")
    return "\n".join(rows) + "\n"


def instructions_markdown() -> str:
    parts = []
    for low, high, title in GROUPS:
        members = [i for i in INSTRUCTIONS if low <= i.opcode <= high]
        if not members:
            continue
        parts.append(f"#### {title}\n")
        parts.append("| opcode | syntax | format | unit | operation |")
        parts.append("|---|---|---|---|---|")
        for ins in members:
            doc = ins.doc.replace("|", "\\|")
            if ins.imm_range:
                doc += f" (imm {ins.imm_range[0]}..{ins.imm_range[1]})"
            parts.append(f"| `{ins.opcode:#05x}` | `{ins.syntax}` | {ins.format} | {ins.unit} | "
                         f"{doc} |")
        parts.append("")
    return "\n".join(parts)


def replace_generated(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- BEGIN GENERATED: {re.escape(name)} -->\n).*?"
                         rf"(<!-- END GENERATED: {re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no generated section '{name}'")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def vpuc_sections() -> dict[str, str]:
    """The sections this package generates (the cycle table comes from runtime_sim)."""
    return {"fields": fields_markdown(), "formats": formats_markdown(),
            "instructions": instructions_markdown()}
