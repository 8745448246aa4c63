"""A kernel's linked ``.text`` decoded once for the exact interpreter.

A ``Program`` decodes the words into a list of steps ``(runner, sources, dests,
cost)``; a runner is a small closure calling the instruction's semantic function
on the register file ``R`` (a Python list: the 72 registers, then the program's
constants).  It returns ``None`` to fall through, a target index to branch,
``HALT`` or ``BAD_TARGET``; an instruction writing ``sp`` checks it against the
memory's stack.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Callable, NamedTuple

import numpy as np

from runtime_sim.isa.cycles import CYCLES, Cost
from runtime_sim.isa.semantics import NUM_REGISTER_KEYS, SEMANTICS, operand_access
from runtime_sim.isa.unbatched import MEMORY as UNBATCHED_MEMORY
from runtime_sim.isa.unbatched import OPS as UNBATCHED_OPS
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.disassembler import format_instruction
from vpuc.shave.encoding import WORD_BYTES, DecodeError, Decoded, decode_word, unpack_words
from vpuc.shave.isa import EXIT_ADDRESS, REG_LR, REG_SP

HALT = -1
BAD_TARGET = -2


class Step(NamedTuple):
    runner: Callable            # runner(R, memory) -> None | next index | HALT | BAD_TARGET
    sources: tuple[int, ...]    # register keys read (for stalls)
    dests: tuple[int, ...]      # register keys written
    cost: Cost


class BadTarget(VpucError):
    """A branch or call to an address outside the kernel's .text."""


class StackOverflow(VpucError):
    """``sp`` left the task's stack."""


def _stack_checked(inner: Callable) -> Callable:
    """``inner`` (an instruction writing sp), then sp checked against the memory's stack."""
    def run(R, mem):
        nxt = inner(R, mem)
        stack = getattr(mem, "stack", None)
        if stack is not None and not stack[0] <= R[REG_SP] <= stack[1]:
            sp, (lo, hi) = int(R[REG_SP]), stack
            raise StackOverflow(f"stack {'overflow' if sp < lo else 'underflow'}: sp = {sp:#010x} "
                                f"left the task's stack ({lo:#010x}..{hi - 1:#010x}, "
                                f"{hi - lo:,} bytes)")
        return nxt
    return run


class Program:
    """Linked .text at ``base``, decoded once and ready to run."""

    def __init__(self, code: bytes, base: int, name: str = "<kernel>",
                 labels: dict[int, str] | None = None) -> None:
        self.base = base
        self.name = name
        self.labels = labels or {}       # .text offset -> label, for messages
        self.size = len(code)
        try:
            words = unpack_words(bytes(code))
        except DecodeError as exc:
            raise VpucError(str(exc), BinLoc(name, ".text", len(code))) from None
        self.decoded: list[Decoded] = []
        for i, word in enumerate(words):
            try:
                self.decoded.append(decode_word(word))
            except DecodeError as exc:
                raise VpucError(f"invalid instruction {word:#018x}: {exc}",
                                BinLoc(name, ".text", i * WORD_BYTES)) from None
        self.constants: list[np.uint32] = []
        self.steps = [self._compile(i, dec) for i, dec in enumerate(self.decoded)]
        # The run loop's view of each step: the runner and ``cycles.issue``'s inputs
        # unpacked, so that issuing is inline (no call, no attribute look-ups).
        self.flat = [(s.runner, s.sources, s.dests, s.cost.slots[0],
                      s.cost.slots[1] if len(s.cost.slots) > 1 else None, s.cost.issue,
                      s.cost.latency, s.cost.closes_bundle, s.cost.taken_penalty)
                     for s in self.steps]

    def text(self, index: int) -> str:
        return format_instruction(self.decoded[index], index * WORD_BYTES, self.labels)

    def index_of(self, address: int) -> int:
        offset = address - self.base
        if offset % WORD_BYTES or not 0 <= offset < self.size:
            raise BadTarget(f"jump to {address:#010x}, which is not an instruction of .text "
                             f"({self.base:#010x}..{self.base + self.size - 1:#010x})")
        return offset // WORD_BYTES

    def _constant(self, value: np.uint32) -> int:
        self.constants.append(value)
        return NUM_REGISTER_KEYS + len(self.constants) - 1

    def _compile(self, index: int, dec: Decoded) -> Step:
        sem = SEMANTICS[dec.info.opcode]
        access = operand_access(dec)
        # Immediates live in R after the registers, so every operand is an index into R.
        reads = [value if where == "reg" else self._constant(value)
                 for where, value in access.reads]
        writes = list(access.writes)
        target = BAD_TARGET
        if access.branch is not None and access.branch % WORD_BYTES == 0:
            if 0 <= index + access.branch // WORD_BYTES < len(self.decoded):
                target = index + access.branch // WORD_BYTES
        sources = tuple(key for where, key in access.reads if where == "reg")
        if sem.mnemonic == "ret":
            sources = (REG_LR,)
        dests = tuple(writes) + ((REG_LR,) if sem.mnemonic == "call" else ())
        runner = self._runner(sem, index, reads, writes, target)
        if REG_SP in dests:
            runner = _stack_checked(runner)
        return Step(runner, sources, dests, CYCLES[dec.info.opcode])

    def _runner(self, sem, index: int, reads: list[int], writes: list[int], target: int):
        """A closure running one instruction on R; returns None (fall through), the
        index to branch to, HALT, or BAD_TARGET (a taken branch leaving .text)."""
        kind = sem.kind
        fn = UNBATCHED_OPS.get(sem.mnemonic) or UNBATCHED_MEMORY.get(sem.mnemonic) or sem.fn
        get = itemgetter(*reads) if len(reads) > 1 else (
            (lambda R, k=reads[0]: (R[k],)) if reads else (lambda R: ()))
        if kind in ("op", "load"):
            prefix = (True,) if kind == "load" else ()
            if len(writes) == 1:
                d = writes[0]
                if prefix:
                    def run(R, mem):
                        R[d] = fn(mem, *get(R))
                else:
                    def run(R, mem):
                        R[d] = fn(*get(R))
            else:
                def run(R, mem):
                    values = fn(mem, *get(R)) if prefix else fn(*get(R))
                    for key, value in zip(writes, values):
                        R[key] = value
            return run
        if kind == "store":
            def run(R, mem):
                fn(mem, *get(R))
            return run
        if kind == "branch":
            def run(R, mem):
                return target if fn(*get(R)) else None
            return run
        if kind == "loop":
            counter = writes[0]

            def run(R, mem):
                R[counter], taken = fn(R[counter])
                return target if taken else None
            return run
        if kind == "jump":
            return lambda R, mem: target
        if kind == "call":
            link = np.uint32(self.base + (index + 1) * WORD_BYTES)

            def run(R, mem):
                R[REG_LR] = link
                return target
            return run
        if kind == "ret":
            def run(R, mem):
                address = int(R[REG_LR])
                return HALT if address == EXIT_ADDRESS else self.index_of(address)
            return run
        if kind == "halt":
            return lambda R, mem: HALT
        return lambda R, mem: None           # nop
