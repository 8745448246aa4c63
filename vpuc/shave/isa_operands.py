"""The operands of the ACT SHAVE instructions: the operand kinds, the formats (the
operand signatures the instruction table's rows name) and where each operand of a
format is encoded (register fields r1..r4 in writing order, the one immediate-like
operand in the ``imm`` field).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- operand kinds -------------------------------------------------------------


@dataclass(frozen=True)
class OperandKind:
    name: str
    regfile: str | None     # "s", "v", "m" or None for immediates
    access: str             # "r", "w", "rw" for registers; "" otherwise
    placeholder: str        # how the reference documentation spells it
    description: str


KINDS = {k.name: k for k in (
    OperandKind("sd", "s", "w", "sd", "scalar register, written"),
    OperandKind("sa", "s", "r", "sa", "scalar register, read"),
    OperandKind("su", "s", "rw", "sa", "scalar register, read and written"),
    OperandKind("sd2", "s", "w", "sd", "even scalar register: the pair sd (low), sd+1 (high), written"),
    OperandKind("sa2", "s", "r", "sa", "even scalar register: the pair sa (low), sa+1 (high), read"),
    OperandKind("vd", "v", "w", "vd", "vector register, written"),
    OperandKind("va", "v", "r", "va", "vector register, read"),
    OperandKind("vu", "v", "rw", "vd", "vector register, read and written"),
    OperandKind("md", "m", "w", "md", "mask register, written"),
    OperandKind("ma", "m", "r", "ma", "mask register, read"),
    OperandKind("imm", None, "", "imm", "32-bit integer (expression)"),
    OperandKind("f32", None, "", "fimm", "float literal, stored as f32 bits"),
    OperandKind("f16", None, "", "fimm", "float literal, stored as f16 bits (upper 16 bits zero)"),
    OperandKind("sym", None, "", "symbol", "absolute address: symbol[+/-offset] (R_SHAVE_ABS32) or an integer"),
    OperandKind("label", None, "", "label", "branch target in .text, pc-relative byte offset"),
    OperandKind("mem", "s", "r", "off(sa)", "memory operand: address = sa + off"),
)}

IMM_KINDS = frozenset({"imm", "f32", "f16", "sym", "label", "mem"})
REGISTER_FIELDS = ("r1", "r2", "r3", "r4")

# --- formats: the operand signatures ---------------------------------------------

FORMATS: dict[str, tuple[str, ...]] = {
    "N": (),
    "SI": ("sd", "imm"),
    "SF32": ("sd", "f32"),
    "SF16": ("sd", "f16"),
    "SSYM": ("sd", "sym"),
    "S2": ("sd", "sa"),
    "S3": ("sd", "sa", "sa"),
    "S2I": ("sd", "sa", "imm"),
    "SLD": ("sd", "mem"),
    "SLD2": ("sd2", "mem"),
    "SST": ("sa", "mem"),
    "SST2": ("sa2", "mem"),
    "B2": ("sa", "sa", "label"),
    "B1": ("sa", "label"),
    "LOOP": ("su", "label"),
    "J": ("label",),
    "VLD": ("vd", "mem"),
    "VST": ("va", "mem"),
    "VLDS": ("vd", "mem", "sa"),
    "VSTS": ("va", "mem", "sa"),
    "VLDM": ("vd", "mem", "ma"),
    "VSTM": ("va", "mem", "ma"),
    "VLDSM": ("vd", "mem", "sa", "ma"),
    "VSTSM": ("va", "mem", "sa", "ma"),
    "VBC": ("vd", "sa"),
    "V2": ("vd", "va"),
    "V3": ("vd", "va", "va"),
    "V4": ("vd", "va", "va", "va"),
    "VSEL": ("vd", "va", "va", "ma"),
    "V2I": ("vd", "va", "imm"),
    "MVV": ("md", "va", "va"),
    "MS": ("md", "sa"),
    "M2": ("md", "ma"),
    "M3": ("md", "ma", "ma"),
    "SM": ("sd", "ma"),
    "SV": ("sd", "va"),
    "SVI": ("sd", "va", "imm"),
    "VINS": ("vu", "sa", "imm"),
}


@dataclass(frozen=True)
class Operand:
    kind: str
    field: str | None       # register field (r1..r4); None for pure immediates
    uses_imm: bool          # encoded (also) in the imm field


def _operand_layout(kinds: tuple[str, ...]) -> tuple[Operand, ...]:
    registers = iter(REGISTER_FIELDS)
    layout = []
    for kind in kinds:
        reg_field = next(registers) if KINDS[kind].regfile else None
        layout.append(Operand(kind, reg_field, kind in IMM_KINDS))
    if sum(op.uses_imm for op in layout) > 1:
        raise AssertionError(f"format {kinds} needs two immediates")
    return tuple(layout)


FORMAT_OPERANDS = {name: _operand_layout(kinds) for name, kinds in FORMATS.items()}


def format_placeholders(fmt: str) -> str:
    """The operand list as documentation writes it, e.g. ``vd, va, vb``."""
    counters = {"s": iter("abc"), "v": iter("abc"), "m": iter("abc")}
    words = []
    for kind in FORMATS[fmt]:
        info = KINDS[kind]
        if info.access in ("r", "rw") and kind not in ("vu", "mem"):
            words.append(info.regfile + next(counters[info.regfile]))
        elif kind == "mem":
            words.append(f"off(s{next(counters['s'])})")
        else:
            words.append(info.placeholder)
    return ", ".join(words)
