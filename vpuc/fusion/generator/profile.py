"""Per-expression cycle counters: where a generated kernel spends its cycles, by LIR expression.

Every instruction the generator emits carries the LIR expression it came from
(``Inst.tag``: an expression id, or ``prologue`` / ``epilogue``), and the
flattened kernel is exactly the ``.text`` (one instruction per 8 bytes).
``profile_kernel`` runs the kernel on the exact interpreter's timing model
(``runtime_sim.isa.cycles.issue``, one instruction at a time, as
``runtime_sim.isa.interpreter.run`` does with ``fast=False``) and charges each
instruction the pipeline time it takes: its stall, its issue cycles and, for a
taken branch, the branch penalty (the final drain goes to the last one), so
the per-pc cycles add up to the run's total exactly.  Summed per tag, they
give cycles per LIR expression; ``format_profile`` prints them beside the LIR.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from runtime_sim.isa.cycles import finish, issue, new_ready
from runtime_sim.isa.interpreter import (BAD_TARGET, HALT, default_stack_top, initial_registers,
                                         load_kernel)
from runtime_sim.isa.memory import WindowMemory
from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.run import ARCH, prepare


@dataclass
class Profile:
    cycles: int
    per_pc: list[int]                  # cycles charged to each instruction
    counts: list[int]                  # times each instruction ran
    per_tag: dict[object, int]         # cycles per LIR expression id (or prologue/epilogue)
    instructions: int


def _memory(kernel, inputs, output_shapes):
    _, cmx, image = prepare(kernel, inputs, output_shapes)
    obj = kernel.obj
    code = len(obj.text) + 16 + len(obj.rodata)
    win_d = np.zeros(code + (-code % 16), np.uint8)
    win_e = np.zeros(len(image.image) + (-len(image.image) % 16) + 16384, np.uint8)
    win_e[:len(image.image)] = np.frombuffer(image.image, np.uint8)
    return WindowMemory({"WIN_D": win_d, "WIN_E": win_e, "WIN_F": cmx}, ARCH), image


def profile_kernel(kernel, inputs: list[np.ndarray], output_shapes,
                   max_steps: int = 20_000_000) -> Profile:
    memory, image = _memory(kernel, inputs, output_shapes)
    loaded = load_kernel(kernel.obj, memory)
    program = loaded.program
    R = initial_registers(program, memory.base("WIN_E") + image.args_offset, image.args_size,
                          default_stack_top(memory))
    ready = new_ready()
    steps = program.steps
    per_pc = [0] * len(steps)
    counts = [0] * len(steps)
    now = executed = 0
    i = program.index_of(program.base + loaded.entry())
    with np.errstate(all="ignore"):
        while True:
            runner, sources, dests, cost = steps[i]
            executed += 1
            if executed > max_steps:
                raise VpucError(f"profile: more than {max_steps} instructions")
            counts[i] += 1
            before = now
            now, _ = issue(ready, now, sources, dests, cost)
            nxt = runner(R, memory)
            if nxt is None:
                per_pc[i] += now - before
                i += 1
                continue
            if nxt == HALT:
                per_pc[i] += now - before
                break
            if nxt == BAD_TARGET:
                raise VpucError("profile: a branch left .text")
            now += cost.taken_penalty
            per_pc[i] += now - before
            i = nxt
    total = finish(ready, now)
    per_pc[i] += total - now
    per_tag: dict[object, int] = defaultdict(int)
    for pc, cycles in enumerate(per_pc):
        per_tag[kernel.flat[pc].inst.tag] += cycles
    return Profile(total, per_pc, counts, dict(per_tag), executed)


def format_profile(kernel, prof: Profile) -> str:
    """Cycles per LIR expression, in LIR order, with the share of the total."""
    lines = [f"// cycles per LIR expression of @{kernel.name}: {prof.cycles} in total, "
             f"{prof.instructions} instructions"]
    insts: Counter = Counter()
    for pc, count in enumerate(prof.counts):
        insts[kernel.flat[pc].inst.tag] += count
    order = ["prologue"] + [e.id for e in kernel.lir.exprs] + ["epilogue"]
    kinds = {e.id: e for e in kernel.lir.exprs}
    for tag in order:
        cycles = prof.per_tag.get(tag, 0)
        if not cycles and tag not in prof.per_tag:
            continue
        what = tag if isinstance(tag, str) else f"e{tag} {kinds[tag].kind}"
        lines.append(f"{what:<28} {cycles:>10} cycles {cycles / max(prof.cycles, 1):6.1%}  "
                     f"{insts.get(tag, 0):>9} instructions")
    return "\n".join(lines) + "\n"
