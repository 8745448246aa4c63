"""Helpers shared by the SHAVE tests: random instruction text, memories."""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.memory import WindowMemory
from runtime_sim.isa.sem_values import to_bytes
from runtime_sim.isa.semantics import SEMANTICS
from vpuc.shave import BY_MNEMONIC
from vpuc.shave.isa import INSTRUCTIONS, Instruction
from vpuc.shave.isa_operands import KINDS

WIN_D, WIN_E, WIN_F = 0x1D000000, 0x1E000000, 0x1F000000


def semantics_of(mnemonic: str):
    """The semantic function of the instruction ``mnemonic`` (runtime_sim.isa.semantics)."""
    return SEMANTICS[BY_MNEMONIC[mnemonic].opcode].fn


def u32(values) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def vec(values, dtype) -> bytes:
    """A vector register's bytes holding ``values`` as ``dtype``."""
    return to_bytes(np.array(values, dtype=dtype), dtype)


def random_operand(kind: str, ins: Instruction, rng: np.random.Generator) -> str:
    regfile = KINDS[kind].regfile
    if kind in ("sd2", "sa2"):
        return f"s{2 * int(rng.integers(0, 16))}"
    if kind == "mem":
        return f"{int(rng.integers(-4096, 4096))}(s{int(rng.integers(0, 32))})"
    if regfile:
        count = {"s": 32, "v": 32, "m": 8}[regfile]
        return f"{regfile}{int(rng.integers(0, count))}"
    if kind == "imm":
        low, high = ins.imm_range or (-(1 << 31), (1 << 32) - 1)
        return str(int(rng.integers(low, high + 1)))
    if kind == "f32":
        return repr(float(np.float32(rng.standard_normal() * 100)))
    if kind == "f16":
        return repr(float(np.float16(rng.standard_normal() * 10)))
    if kind == "sym":
        return "table+4"
    return "target"                                   # label


def every_instruction_program(seed: int = 0) -> str:
    """One line per instruction of the table, with random operands."""
    rng = np.random.default_rng(seed)
    lines = ["    .global entry", "entry:", "target:"]
    for ins in INSTRUCTIONS:
        ops = [random_operand(op.kind, ins, rng) for op in ins.operands]
        lines.append(f"    {ins.mnemonic} {', '.join(ops)}".rstrip())
    lines += ["    .rodata", "table:", "    .word 1, 2, 3"]
    return "\n".join(lines) + "\n"


def make_memory(d_size: int = 4096, e_size: int = 4096, f_size: int = 65536):
    arrays = {"WIN_D": np.zeros(d_size, np.uint8), "WIN_E": np.zeros(e_size, np.uint8),
              "WIN_F": np.zeros(f_size, np.uint8)}
    return WindowMemory(arrays), arrays
