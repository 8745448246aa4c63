"""The exact SHAVE interpreter: one instruction at a time, with cycle counting.

A ``Program`` (``program.py``) is linked ``.text`` decoded once into runners;
``run`` issues them in order, counting cycles; ``load_kernel`` (``kernel_loader.py``)
links a kernel object into the windows.

Kernel entry (the ABI of docs/shave-isa.md): s0 = argsAddr, s1 = argsSize,
sp (s30) = top of the stack, lr (s31) = 0, the exit address; every other
register is zero.  The run ends at ``halt`` or at ``ret`` to address 0.

Limits: ``max_steps`` instructions; ``max_cycles``, checked at every taken
branch (a kernel that runs on and on loops or recurses, so it takes branches);
``sp`` inside the memory's ``stack`` after every instruction that writes it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from runtime_sim.isa.cycles import finish, new_ready
from runtime_sim.isa.kernel_loader import LoadedKernel, load_kernel  # noqa: F401 (re-export)
from runtime_sim.isa.memory import AccessFault, WindowMemory
from runtime_sim.isa.program import BAD_TARGET, HALT, BadTarget, Program, StackOverflow
from runtime_sim.isa.semantics import NUM_REGISTER_KEYS
from runtime_sim.isa.straight_blocks import Block, block, straight_blocks
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import (EXIT_ADDRESS, NUM_MREGS, NUM_SREGS, NUM_VREGS, REG_ARGS_ADDR,
                            REG_ARGS_SIZE, REG_LR, REG_SP, VECTOR_BYTES)
from vpuc.shave.kobject import KernelObject

DEFAULT_MAX_STEPS = 10_000_000


@dataclass
class RunResult:
    cycles: int
    instructions: int
    stall_cycles: int
    opcode_counts: dict[str, int]
    scalar_regs: list[int]
    vector_regs: list[bytes]
    mask_regs: list[int]
    exit_pc: int                     # address of the halt / ret that ended the run
    batched_iterations: int = 0      # loop iterations the fast path ran as batches


class CycleBudgetExceeded(VpucError):
    """The kernel ran past the cycles it was allowed (``run(max_cycles=...)``)."""

    def __init__(self, cycles: int, budget: float, where: str, loc: BinLoc) -> None:
        self.cycles, self.budget, self.where = cycles, budget, where
        super().__init__(f"still running after {cycles:,} cycles, past its budget of "
                         f"{budget:,.0f}; stopped at {where}", loc)


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def initial_registers(program: Program, args_addr: int, args_size: int, stack_top: int) -> list:
    zero_vector = np.zeros(VECTOR_BYTES, np.uint8)
    zero_mask = np.zeros(VECTOR_BYTES, bool)
    regs: list = ([np.uint32(0)] * NUM_SREGS + [zero_vector] * NUM_VREGS
                  + [zero_mask] * NUM_MREGS + list(program.constants))
    regs[REG_ARGS_ADDR] = np.uint32(args_addr)
    regs[REG_ARGS_SIZE] = np.uint32(args_size)
    regs[REG_SP] = np.uint32(stack_top)
    regs[REG_LR] = np.uint32(EXIT_ADDRESS)
    return regs


def default_stack_top(memory: WindowMemory) -> int:
    """The top of the WIN_E mapping, 16-byte aligned: where the loader puts the stack."""
    try:
        array = memory.array("WIN_E")
    except VpucError:
        return 0
    return (memory.base("WIN_E") + len(array)) & ~15


def run(program: Program, memory: WindowMemory, *, entry: int = 0, args_addr: int = 0,
        args_size: int = 0, stack_top: int | None = None,
        max_steps: int = DEFAULT_MAX_STEPS, max_cycles: float | None = None,
        fast=False) -> RunResult:
    """Run from byte offset ``entry`` of .text until halt or ret to the exit address.

    ``fast=True`` (or a ``fastpath.FastLoops``) lets the fast path run straight-line
    loops as numpy batches; the results, cycles and counts are the same.  Past
    ``max_cycles`` (checked at taken branches) the run stops with ``CycleBudgetExceeded``."""
    steps = run_steps(program, memory, entry, args_addr, args_size, stack_top, max_steps,
                      max_cycles, fast)
    try:
        while True:
            next(steps).execute_pending()
    except StopIteration as done:
        return done.value


def run_steps(program: Program, memory: WindowMemory, entry: int = 0, args_addr: int = 0,
              args_size: int = 0, stack_top: int | None = None,
              max_steps: int = DEFAULT_MAX_STEPS, max_cycles: float | None = None, fast=False,
              state: tuple | None = None):
    """``run`` as a generator returning its ``RunResult``; it yields the ``FastLoops``
    when its fast path holds a proven batch not run yet (``FastLoops.defer``), and goes
    on once the caller has run ``pending`` (``invoke.invoke_together``).  ``state``:
    (R, ready, now, stalls, executed, counts, index) of a run to go on with from that
    instruction, not yet issued (``lockstep``'s invocations, each alone again)."""
    if fast is True:
        from runtime_sim.isa.fastpath import FastLoops
        fast = FastLoops(program)
    loops = fast or None
    heads = loops.entries if loops is not None else {}
    flat = program.flat
    end = len(flat)
    if state is None:
        R = initial_registers(program, args_addr, args_size,
                              default_stack_top(memory) if stack_top is None else stack_top)
        ready, counts, now, stalls, executed = new_ready(), [0] * end, 0, 0, 0
        i = program.index_of(program.base + entry)
    else:
        R, ready, now, stalls, executed, counts, i = state
    budget = float("inf") if max_cycles is None else max_cycles
    # Fast mode: straight-line blocks (and the transfer ending one) issued as one step
    # (``straight_blocks``); the blocks run go to ``counts`` when the opcode counts are
    # read (a model's run never does).
    blocks = straight_blocks(program, heads) if loops is not None else None
    blocks_ran: list[Block] = []
    try:
        with np.errstate(all="ignore"):
            while True:
                blk = blocks[i] if blocks is not None else None
                if blk is not None and executed + (
                        blk.length if blk.__class__ is Block else blk - i) <= max_steps:
                    # a block: its instructions but the last straight-line, issued as one
                    blk = block(program, blocks, i)
                    for runner in blk.straight:
                        runner(R, memory)
                        i += 1
                    executed += blk.length
                    now, stalled = blk.issue(ready, now)
                    stalls += stalled
                    blocks_ran.append(blk)
                    penalty = blk.penalty
                    nxt = blk.last(R, memory)
                else:
                    runner, sources, dests, slot, other, busy, latency, closes, penalty = flat[i]
                    executed += 1
                    if executed > max_steps:
                        raise VpucError(f"kernel did not halt within {max_steps} instructions "
                                        f"(now at {_where(program, i)}); check the loop "
                                        "counters or raise max_steps",
                                        BinLoc(program.name, ".text", i * WORD_BYTES))
                    counts[i] += 1
                    # cycles.issue_steps, inline: each instruction runs between two issues
                    start = now
                    for key in sources:
                        if ready[key] > start:
                            start = ready[key]
                    operands = start
                    if other is not None and ready[slot] > start and ready[other] < ready[slot]:
                        slot = other
                    free = ready[slot]
                    if free > start:
                        start = free
                    ready[slot] = start + busy
                    done = start + latency
                    for key in dests:
                        ready[key] = done
                    stall = operands - (now + 1 if now + 1 > free else free)
                    if stall > 0:
                        stalls += stall
                    now = start + 1 if closes else start
                    nxt = runner(R, memory)
                if nxt is None:
                    i += 1
                    if i == end:
                        raise VpucError("execution ran past the end of .text (missing halt "
                                        "or ret?)", BinLoc(program.name, ".text", program.size))
                    if i in heads:
                        # Falling into a loop head: the fast path may run a straight-line
                        # loop from its first iteration (the back-edge would offer it from
                        # the second).
                        batch = loops.enter(i, R, ready, now, memory, counts,
                                            max_steps - executed, budget, paths=False)
                        if batch is not None:
                            if getattr(loops, "pending", None) is not None:
                                yield loops
                            now, i, ran, stalled = batch
                            executed += ran
                            stalls += stalled
                elif nxt == HALT:
                    break
                elif nxt == BAD_TARGET:
                    offset = _signed(program.decoded[i].imm)
                    raise BadTarget(f"branch target .{offset:+d} is outside .text or not on an "
                                     "instruction")
                else:
                    now += penalty
                    if now > budget:
                        raise CycleBudgetExceeded(now, budget, _where(program, i),
                                                  BinLoc(program.name, ".text", i * WORD_BYTES))
                    if loops is not None:
                        # At a loop head: the fast path may run iterations as a batch
                        # (entering a loop forward, only a loop for the path batch).
                        batch = (loops(nxt, i, R, ready, now, memory, counts,
                                       max_steps - executed, budget) if nxt <= i else
                                 loops.enter(nxt, R, ready, now, memory, counts,
                                             max_steps - executed, budget)
                                 if nxt in loops.entries else None)
                        if batch is not None:
                            if getattr(loops, "pending", None) is not None:
                                yield loops
                            now, nxt, ran, stalled = batch
                            executed += ran
                            stalls += stalled
                    i = nxt
    except (AccessFault, BadTarget, StackOverflow) as fault:
        message = fault.diagnostics[0].message
        raise VpucError(f"{_where(program, i)}: {message}",
                        BinLoc(program.name, ".text", i * WORD_BYTES)) from None
    return _LazyRunResult.made(
        program, R, counts, blocks_ran,
        cycles=finish(ready, now), instructions=executed, stall_cycles=stalls,
        scalar_regs=[int(v) for v in R[:NUM_SREGS]],
        exit_pc=program.base + i * WORD_BYTES,
        batched_iterations=loops.batched_iterations if loops is not None else 0)


_LAZY_FIELDS = frozenset(("opcode_counts", "vector_regs", "mask_regs"))


class _LazyRunResult(RunResult):
    """A ``RunResult`` whose opcode counts, vector and mask registers are worked out when
    one of them is first read (then all three, from the run's final registers and
    per-instruction counts): a model's run reads only the status and the cycles of each
    of its hundreds of invocations, and the three cost more than a short kernel's run."""

    @classmethod
    def made(cls, program: Program, R: list, counts: list[int], blocks: list[Block],
             **eager) -> "_LazyRunResult":
        result = cls.__new__(cls)
        result.__dict__.update(eager, _pending=(program, R, counts, blocks))
        return result

    def __getattr__(self, name: str):          # only for attributes not set
        pending = self.__dict__.get("_pending")
        if name not in _LAZY_FIELDS or pending is None:
            raise AttributeError(name)
        program, R, counts, blocks = pending
        for blk in blocks:                      # each instruction of a block ran once
            for index in range(blk.start, blk.start + blk.length):
                counts[index] += 1
        # the registers and counts as whole arrays
        masks = np.packbits(np.array(R[NUM_SREGS + NUM_VREGS:NUM_REGISTER_KEYS], bool),
                            axis=1, bitorder="little").view("<u2")[:, 0]
        self.__dict__.update(
            opcode_counts=_opcode_counts(program, counts),
            vector_regs=[v.tobytes() if v.dtype == np.uint8 else bytes(np.asarray(v, np.uint8))
                         for v in R[NUM_SREGS:NUM_SREGS + NUM_VREGS]],
            mask_regs=masks.tolist())
        del self.__dict__["_pending"]
        return self.__dict__[name]

    def __getstate__(self) -> dict:
        for name in _LAZY_FIELDS:
            getattr(self, name)
        return dict(self.__dict__)


# Per Program: each instruction's mnemonic as an index into the program's mnemonics.
_MNEMONICS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _opcode_counts(program: Program, counts: list[int]) -> dict[str, int]:
    """Instructions run per mnemonic (those run at least once), from per-index counts."""
    table = _MNEMONICS.get(program)
    if table is None:
        names = [dec.info.mnemonic for dec in program.decoded]
        order = sorted(set(names), key=names.index)           # first use in .text first
        table = _MNEMONICS[program] = (order, np.array([order.index(n) for n in names],
                                                       np.intp))
    order, ids = table
    totals = np.bincount(ids, weights=np.array(counts, np.float64), minlength=len(order))
    return {name: int(total) for name, total in zip(order, totals) if total}


def _where(program: Program, index: int) -> str:
    return (f"pc {program.base + index * WORD_BYTES:#010x} (.text+{index * WORD_BYTES:#x}) "
            f"'{program.text(index)}'")


def run_kernel(obj: KernelObject, memory: WindowMemory, *, entry: str | None = None,
               args_addr: int = 0, args_size: int = 0, text_addr: int | None = None,
               data_addr: int | None = None, stack_top: int | None = None,
               max_steps: int = DEFAULT_MAX_STEPS, max_cycles: float | None = None,
               fast=False) -> RunResult:
    """Load ``obj`` into ``memory`` and run one invocation of an entry point."""
    loaded = load_kernel(obj, memory, text_addr=text_addr, data_addr=data_addr)
    return run(loaded.program, memory, entry=loaded.entry(entry), args_addr=args_addr,
               args_size=args_size, stack_top=stack_top, max_steps=max_steps,
               max_cycles=max_cycles, fast=fast)
