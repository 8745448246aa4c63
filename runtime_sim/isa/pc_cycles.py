"""Per-instruction cycle accounting: the one stepping loop that says where a run's cycles go.

``run_per_pc(program, memory, ...)`` runs a kernel on the exact interpreter
(one instruction at a time, as ``interpreter.run`` does with ``fast=False``:
the same steps, the same ``cycles.issue`` / ``cycles.finish``, the same
errors) and charges every instruction the cycles **it advances the issue
clock**.  Under the in-order VLIW model (``cycles.py``) ``issue`` returns the
cycle the next instruction may issue: the instruction's own issue cycle (one
later for a control instruction, which closes its bundle).  So an instruction
is charged

- 0 when it co-issues in the bundle of the previous one (its slot differs and
  its operands are ready);
- the cycles it waits for its operands (a stall) or for its functional unit's
  slot (a non-pipelined unit still busy) beyond that;
- plus, for a control instruction, the one cycle that closes the bundle and,
  when taken, the branch penalty;

and the last one (the ``halt`` or ``ret``) also the final drain, until every
outstanding result is ready.  The charges add up to the run's total exactly
(``cycles == sum(per_pc)``), the total ``interpreter.run`` reports (and the
fast path, which is cycle-identical).  The counts say how often each
instruction ran.

Both the generator's ``profile.profile_kernel`` (one kernel, standalone) and
the simulator's ``kernel_profile`` (every ACT SHAVE task of a blob) use it;
summed over the instructions of one LIR expression (the kernel object's
``.note.vpuc.graph`` tags), the charges are the expression's cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_sim.isa.cycles import finish, issue, new_ready
from runtime_sim.isa.interpreter import (DEFAULT_MAX_STEPS, _signed, _where, default_stack_top,
                                         initial_registers)
from runtime_sim.isa.memory import AccessFault, WindowMemory
from runtime_sim.isa.program import BAD_TARGET, HALT, BadTarget, Program
from vpuc.diagnostics import BinLoc, VpucError
from vpuc.shave.encoding import WORD_BYTES


@dataclass
class PcCycles:
    cycles: int                # the run's total, as interpreter.run counts it
    per_pc: list[int]          # cycles charged to each .text instruction
    counts: list[int]          # times each instruction ran
    instructions: int          # instructions run (sum of counts)


def run_per_pc(program: Program, memory: WindowMemory, *, entry: int = 0, args_addr: int = 0,
               args_size: int = 0, stack_top: int | None = None,
               max_steps: int = DEFAULT_MAX_STEPS) -> PcCycles:
    """Run from byte offset ``entry`` of .text until halt or ret to the exit address,
    charging each instruction what it advances the clock (see the module docstring)."""
    R = initial_registers(program, args_addr, args_size,
                          default_stack_top(memory) if stack_top is None else stack_top)
    ready = new_ready()
    steps = program.steps
    per_pc = [0] * len(steps)
    counts = [0] * len(steps)
    now = executed = 0
    i = program.index_of(program.base + entry)
    try:
        with np.errstate(all="ignore"):
            while True:
                runner, sources, dests, cost = steps[i]
                executed += 1
                if executed > max_steps:
                    raise VpucError(f"kernel did not halt within {max_steps} instructions "
                                    f"(now at {_where(program, i)})",
                                    BinLoc(program.name, ".text", i * WORD_BYTES))
                counts[i] += 1
                before = now
                now, _ = issue(ready, now, sources, dests, cost)
                nxt = runner(R, memory)
                if nxt is None:
                    per_pc[i] += now - before
                    i += 1
                    if i == len(steps):
                        raise VpucError("execution ran past the end of .text (missing halt "
                                        "or ret?)", BinLoc(program.name, ".text", program.size))
                    continue
                if nxt == HALT:
                    per_pc[i] += now - before
                    break
                if nxt == BAD_TARGET:
                    offset = _signed(program.decoded[i].imm)
                    raise BadTarget(f"branch target .{offset:+d} is outside .text or not on an "
                                     "instruction")
                now += cost.taken_penalty
                per_pc[i] += now - before
                i = nxt
    except (AccessFault, BadTarget) as fault:
        message = fault.diagnostics[0].message
        raise VpucError(f"{_where(program, i)}: {message}",
                        BinLoc(program.name, ".text", i * WORD_BYTES)) from None
    total = finish(ready, now)
    per_pc[i] += total - now            # the drain: outstanding results become ready
    return PcCycles(total, per_pc, counts, executed)
