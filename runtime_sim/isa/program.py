"""A kernel's linked ``.text`` decoded once for the exact interpreter.

A ``Program`` decodes the words into a list of steps ``(runner, sources, dests,
cost)``; a runner is a small closure calling the instruction's semantic function
on the register file ``R`` (a Python list: the 72 registers, then the program's
constants).  It returns ``None`` to fall through, a target index to branch,
``HALT`` or ``BAD_TARGET``; an instruction writing ``sp`` checks it against the
memory's stack.  Decoding, operands and timing (``meta``) are worked out up front,
the runners on first use of ``steps`` or ``flat``: a cycles-only run makes its own
(``cycles_only.TimingProgram``), none for the vector arithmetic it skips.
"""

from __future__ import annotations

from functools import cached_property
from operator import itemgetter
from typing import Callable, NamedTuple

import numpy as np

from runtime_sim.isa.cycles import CYCLES, Cost
from runtime_sim.isa.semantics import NUM_REGISTER_KEYS, SEMANTICS, operand_access
from runtime_sim.isa.unbatched import MEMORY as UNBATCHED_MEMORY
from runtime_sim.isa.unbatched import OPS as UNBATCHED_OPS
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.disassembler import format_instruction
from vpuc.shave.encoding import WORD_BYTES, DecodeError, Decoded, TextDecodeError, decode_text
from vpuc.shave.isa import EXIT_ADDRESS, REG_LR, REG_SP

HALT = -1
BAD_TARGET = -2


class Step(NamedTuple):
    runner: Callable            # runner(R, memory) -> None | next index | HALT | BAD_TARGET
    sources: tuple[int, ...]    # register keys read (for stalls)
    dests: tuple[int, ...]      # register keys written
    cost: Cost


class StepTiming(NamedTuple):
    """A step without its runner: all the loops' timing reads (``loop_timing``)."""

    sources: tuple[int, ...]
    dests: tuple[int, ...]
    cost: Cost


def flat_step(runner: Callable, sources: tuple[int, ...], dests: tuple[int, ...],
              cost: Cost) -> tuple:
    """A step as the run loop reads it: (runner, sources, dests, slot, other slot, issue,
    latency, closes bundle, taken penalty)."""
    slots = cost.slots
    return (runner, sources, dests, slots[0], slots[1] if len(slots) > 1 else None,
            cost.issue, cost.latency, cost.closes_bundle, cost.taken_penalty)


# Decoded words are shared and never change (``encoding.decode_word``): a word's timing
# and immediates are worked out once, and its StepTiming is shared by every program.
_WORDS: dict[int, tuple] = {}


def _word(dec: Decoded) -> tuple:
    """(dec, StepTiming, immediates, its flat step but the runner) of one decoded word,
    remembered by its id."""
    access = operand_access(dec)
    sources, immediates = [], []
    for where, value in access.reads:           # one pass: a cold run meets ~900 words
        (sources if where == "reg" else immediates).append(value)
    opcode = dec.info.opcode
    kind = _KINDS[opcode]
    dests = access.writes
    if kind == "ret":
        sources = (REG_LR,)
    elif kind == "call":
        dests += (REG_LR,)
    sources = tuple(sources)
    cost = CYCLES[opcode]
    # ``StepTiming(...)`` and ``flat_step(None, ...)[1:]`` spelled out: once per word
    timing = _new_tuple(StepTiming, (sources, dests, cost))
    found = (dec, timing, tuple(immediates), (sources, dests) + _COST_TAILS[opcode])
    if len(_WORDS) >= 1 << 16:
        _WORDS.clear()
    _WORDS[id(dec)] = found
    return found


_new_tuple = tuple.__new__


def _cost_tail(cost: Cost) -> tuple:
    """``flat_step``'s fields after the sources and dests, which depend on the opcode only."""
    return flat_step(None, (), (), cost)[3:]


# Per opcode: its semantic kind, and the flat step's fields its Cost decides.
_KINDS: dict[int, str] = {opcode: sem.kind for opcode, sem in SEMANTICS.items()}
_COST_TAILS: dict[int, tuple] = {opcode: _cost_tail(cost) for opcode, cost in CYCLES.items()}


def _no_operands(R) -> tuple:
    return ()


# Runners by what they do (``Program.make_runner``): bounded.
_RUNNERS: dict[tuple, Callable] = {}
MAX_RUNNERS = 1 << 14


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
        self.code = bytes(code)          # what a recorded slice is compared with (library_slices)
        try:
            self.decoded: list[Decoded] = list(decode_text(code))
        except TextDecodeError as exc:
            raise VpucError(f"invalid instruction {exc.word:#018x}: {exc}",
                            BinLoc(name, ".text", exc.index * WORD_BYTES)) from None
        except DecodeError as exc:
            raise VpucError(str(exc), BinLoc(name, ".text", len(code))) from None
        # Per instruction: its (sources, dests, cost), and where in R its first immediate
        # is (``make_runner``); the immediates join ``constants``.
        constants: list[np.uint32] = []
        first: list[int] = []
        meta: list[StepTiming] = []
        tails: list[tuple] = []
        get = _WORDS.get
        for dec in self.decoded:
            found = get(id(dec))
            if found is None or found[0] is not dec:
                found = _word(dec)
            first.append(NUM_REGISTER_KEYS + len(constants))
            if found[2]:
                constants += found[2]
            meta.append(found[1])
            tails.append(found[3])
        self.constants, self._first_constant, self.meta = constants, first, meta
        # per instruction: its flat step but the runner (``flat_entry``), shared per word
        self.tails = tails

    @cached_property
    def steps(self) -> list[Step]:
        return [Step(self.make_runner(i), *meta) for i, meta in enumerate(self.meta)]

    @cached_property
    def flat(self) -> list[tuple]:
        """The run loop's view of each step: the runner and ``cycles.issue``'s inputs
        unpacked, so that issuing is inline (no call, no attribute look-ups)."""
        return [(step[0],) + tail for step, tail in zip(self.steps, self.tails)]

    def flat_entry(self, runner: Callable, index: int) -> tuple:
        """``flat_step(runner, *meta[index])``, from the word's remembered issue inputs."""
        return (runner,) + self.tails[index]

    def text(self, index: int) -> str:
        return format_instruction(self.decoded[index], index * WORD_BYTES, self.labels)

    def index_of(self, address: int) -> int:
        offset = address - self.base
        if offset % WORD_BYTES or not 0 <= offset < self.size:
            raise BadTarget(f"jump to {address:#010x}, which is not an instruction of .text "
                             f"({self.base:#010x}..{self.base + self.size - 1:#010x})")
        return offset // WORD_BYTES

    def first_constant(self, index: int) -> int:
        """Where in R the first immediate of instruction ``index`` is (an instruction has
        at most one: a load's or store's is its offset)."""
        return self._first_constant[index]

    def make_runner(self, index: int) -> Callable:
        """The runner of instruction ``index`` (``steps`` holds the program's own)."""
        dec = self.decoded[index]
        access = operand_access(dec)
        # Immediates live in R after the registers, so every operand is an index into R.
        constant = self._first_constant[index]
        reads = []
        for where, value in access.reads:
            if where == "reg":
                reads.append(value)
            else:
                reads.append(constant)
                constant += 1
        target = BAD_TARGET
        if access.branch is not None and access.branch % WORD_BYTES == 0:
            if 0 <= index + access.branch // WORD_BYTES < len(self.decoded):
                target = index + access.branch // WORD_BYTES
        sem = SEMANTICS[dec.info.opcode]
        checked = REG_SP in self.meta[index][1]
        # A runner reads its immediates from R, so it depends only on what the key holds:
        # programs of one template (a model's generated kernels, the library kernels'
        # shared driver at the start of .text) share their runners.  Not ``ret``: it
        # looks the return address up in this program's .text.
        key = None
        if sem.kind != "ret":
            key = (dec.info.opcode, tuple(reads), access.writes, target, checked,
                   self.base + (index + 1) * WORD_BYTES if sem.kind == "call" else 0)
            found = _RUNNERS.get(key)
            if found is not None:
                return found
        runner = self._runner(sem, index, reads, list(access.writes), target)
        if checked:
            runner = _stack_checked(runner)
        if key is not None:
            if len(_RUNNERS) >= MAX_RUNNERS:
                _RUNNERS.clear()
            _RUNNERS[key] = runner
        return runner

    def _runner(self, sem, index: int, reads: list[int], writes: list[int], target: int):
        """A function running one instruction on R; returns None (fall through), the
        index to branch to, HALT, or BAD_TARGET (a taken branch leaving .text).  What it
        needs is bound as default arguments, not closed over: a kernel makes a runner per
        instruction, and cells would be as many more objects for the garbage collector."""
        kind = sem.kind
        fn = UNBATCHED_OPS.get(sem.mnemonic) or UNBATCHED_MEMORY.get(sem.mnemonic) or sem.fn
        get = itemgetter(*reads) if len(reads) > 1 else (
            (lambda R, k=reads[0]: (R[k],)) if reads else _no_operands)
        if kind in ("op", "load"):
            if len(writes) == 1:
                if kind == "load":
                    def run(R, mem, d=writes[0], fn=fn, get=get):
                        R[d] = fn(mem, *get(R))
                else:
                    def run(R, mem, d=writes[0], fn=fn, get=get):
                        R[d] = fn(*get(R))
            elif kind == "load":
                def run(R, mem, writes=writes, fn=fn, get=get):
                    for key, value in zip(writes, fn(mem, *get(R))):
                        R[key] = value
            else:
                def run(R, mem, writes=writes, fn=fn, get=get):
                    for key, value in zip(writes, fn(*get(R))):
                        R[key] = value
            return run
        if kind == "store":
            def run(R, mem, fn=fn, get=get):
                fn(mem, *get(R))
            return run
        if kind == "branch":
            def run(R, mem, target=target, fn=fn, get=get):
                return target if fn(*get(R)) else None
            return run
        if kind == "loop":
            def run(R, mem, counter=writes[0], target=target, fn=fn):
                R[counter], taken = fn(R[counter])
                return target if taken else None
            return run
        if kind == "jump":
            return lambda R, mem, target=target: target
        if kind == "call":
            def run(R, mem, link=np.uint32(self.base + (index + 1) * WORD_BYTES),
                    target=target):
                R[REG_LR] = link
                return target
            return run
        if kind == "ret":
            def run(R, mem, index_of=self.index_of):
                address = int(R[REG_LR])
                return HALT if address == EXIT_ADDRESS else index_of(address)
            return run
        if kind == "halt":
            return lambda R, mem: HALT
        return lambda R, mem: None           # nop
