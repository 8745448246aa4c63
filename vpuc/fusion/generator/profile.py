"""Per-expression cycle counters: where a generated kernel spends its cycles, by LIR expression.

Every instruction the generator emits carries the LIR expression it came from
(``Inst.tag``: an expression id, or ``prologue`` / ``epilogue``), and the
flattened kernel is exactly the ``.text`` (one instruction per 8 bytes).

- ``expression_tags(lir, flat)``: what the kernel object records of it
  (``KernelObject.tags``, the run-length tags note of ``.note.vpuc.graph``;
  ``vpuc.shave.kernel_notes``), each instruction labelled by
  ``expression_label`` (``e7 FMA``, ``prologue``, ``epilogue``), labels in
  ``label_order`` (prologue, LIR order, epilogue).  So ``vpuc run
  --kernel-profile`` can attribute a compiled blob's ACT SHAVE cycles to
  expressions (docs/simulator.md, "Per-expression cycle counters").
- ``profile_kernel`` runs one kernel standalone, on arrays, through
  ``runtime_sim.isa.pc_cycles.run_per_pc`` -- the one per-instruction cycle
  accounting, which the simulator uses too: on the exact interpreter's VLIW
  timing model each instruction is charged the cycles it advances the issue
  clock (0 when it co-issues in the previous instruction's bundle; its operand
  or slot wait beyond that; a control instruction's bundle close and taken
  penalty; the final drain to the last one), so the per-pc cycles add up to
  the run's total exactly.  Summed per tag, they give cycles per LIR
  expression; ``format_profile`` prints them in LIR order, with the labels
  the kernel object records.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from vpuc.shave.kernel_notes import ExprTags


@dataclass
class Profile:
    cycles: int
    per_pc: list[int]                  # cycles charged to each instruction
    counts: list[int]                  # times each instruction ran
    per_tag: dict[object, int]         # cycles per LIR expression id (or prologue/epilogue)
    instructions: int


# ------------------------------------------------------------------ the recorded tags

def expression_label(tag: object, kinds: dict[int, str]) -> str | None:
    """How an instruction's tag (``Inst.tag``: an expression id, or a kernel-level tag such
    as ``prologue``) is shown: ``e7 FMA``, ``prologue``; None for an untagged one."""
    if tag is None:
        return None
    if isinstance(tag, int):
        return f"e{tag} {kinds[tag]}" if tag in kinds else f"e{tag}"
    return str(tag)


def label_order(lir) -> list[str]:
    """Labels in the order profiles list them: the prologue, the LIR's order, the epilogue."""
    kinds = {e.id: e.kind for e in lir.exprs}
    return ["prologue"] + [expression_label(e.id, kinds) for e in lir.exprs] + ["epilogue"]


def expression_tags(lir, flat: list) -> ExprTags:
    """The expression tags of a generated kernel's .text (``flat``: one ``mir.Flat`` per
    instruction), labels listed in ``label_order``."""
    kinds = {e.id: e.kind for e in lir.exprs}
    return ExprTags.from_instructions([expression_label(f.inst.tag, kinds) for f in flat],
                                      label_order(lir))


# ------------------------------------------------------------------ one kernel, standalone

def profile_kernel(kernel, inputs: list[np.ndarray], output_shapes,
                   max_steps: int = 20_000_000) -> Profile:
    from runtime_sim.isa.interpreter import load_kernel
    from runtime_sim.isa.invoke import invocation_memory
    from runtime_sim.isa.pc_cycles import run_per_pc
    from vpuc.fusion.generator.run import ARCH, prepare
    _, cmx, image = prepare(kernel, inputs, output_shapes)
    memory = invocation_memory(kernel.obj, cmx, image.image, arch=ARCH)
    loaded = load_kernel(kernel.obj, memory)
    run = run_per_pc(loaded.program, memory, entry=loaded.entry(),
                     args_addr=memory.base("WIN_E") + image.args_offset,
                     args_size=image.args_size, max_steps=max_steps)
    per_tag: dict[object, int] = defaultdict(int)
    for pc, cycles in enumerate(run.per_pc):
        per_tag[kernel.flat[pc].inst.tag] += cycles
    return Profile(run.cycles, run.per_pc, run.counts, dict(per_tag), run.instructions)


def format_profile(kernel, prof: Profile) -> str:
    """Cycles per LIR expression, in LIR order, with the share of the total."""
    lines = [f"// cycles per LIR expression of @{kernel.name}: {prof.cycles} in total, "
             f"{prof.instructions} instructions"]
    insts: Counter = Counter()
    for pc, count in enumerate(prof.counts):
        insts[kernel.flat[pc].inst.tag] += count
    order = ["prologue"] + [e.id for e in kernel.lir.exprs] + ["epilogue"]
    kinds = {e.id: e.kind for e in kernel.lir.exprs}
    for tag in order:
        cycles = prof.per_tag.get(tag, 0)
        if not cycles and tag not in prof.per_tag:
            continue
        what = expression_label(tag, kinds)
        lines.append(f"{what:<28} {cycles:>10} cycles {cycles / max(prof.cycles, 1):6.1%}  "
                     f"{insts.get(tag, 0):>9} instructions")
    return "\n".join(lines) + "\n"
