"""Address-arithmetic clean-ups on the generated MIR, one pass per file.

After oneDNN's "GPU Convolution Kernel Generator" (§More Optimizations and IR Passes):
the emitters write straightforward code (every value computed where it is
used, every constant materialized where it is needed); these passes clean it:

0. fold-min-max: chains of vector max/min with constants become one clamp;
1. simplify: constant folding and algebraic identities on scalar arithmetic;
2. strength-reduction: multiplications, divisions and remainders by powers of
   two become shifts and masks;
3. cse: one computation of each pure instruction (constants, dims loads, address
   arithmetic, repeated loads of the same vector);
4. licm: loop-invariant instructions move to the loop's preheader;
5. peephole: ``addi r, r, 0``, chains of ``addi``, moves into the defining
   instruction, dead instructions;
6. unroll: innermost counted loops unrolled with renamed temporaries;
7. modulo-schedule: unrolled loops with a static trip count modulo-scheduled
   (one iteration started every II cycles, the stages of several in one trip)
   when that beats the next two passes;
8. pipeline: other unrolled loops software-pipelined in two stages (the next
   iteration's loads overlap this one's tail);
9. schedule: list scheduling of straight-line code by the cycle table and slots.

``CLEANUP_PASSES`` is the registry (file ``strength_reduction.py`` <->
``strength-reduction`` <-> ``StrengthReductionPass``), ``CLEANUP_PIPELINE``
the order.  Passes never print; ``run_cleanups`` times them and records the
instruction count after each.
"""

from __future__ import annotations

import time

from vpuc.fusion.generator.cleanup.base import CleanupConfig, MirPass
from vpuc.fusion.generator.cleanup.cse import CsePass
from vpuc.fusion.generator.cleanup.fold_min_max import FoldMinMaxPass
from vpuc.fusion.generator.cleanup.licm import LicmPass
from vpuc.fusion.generator.cleanup.modulo_schedule import ModuloSchedulePass
from vpuc.fusion.generator.cleanup.peephole import PeepholePass
from vpuc.fusion.generator.cleanup.pipeline import PipelinePass
from vpuc.fusion.generator.cleanup.schedule import SchedulePass
from vpuc.fusion.generator.cleanup.simplify import SimplifyPass
from vpuc.fusion.generator.cleanup.strength_reduction import StrengthReductionPass
from vpuc.fusion.generator.cleanup.unroll import UnrollPass
from vpuc.fusion.generator.mir import count

CLEANUP_PASSES: dict[str, type[MirPass]] = {
    cls.name: cls
    for cls in (FoldMinMaxPass, SimplifyPass, StrengthReductionPass, CsePass, LicmPass,
                PeepholePass, UnrollPass, ModuloSchedulePass, PipelinePass, SchedulePass)
}
# cse runs again after licm: constants hoisted out of sibling loops (a main body and its
# tail) meet in the preheader; peephole again after unroll, whose renamed copies are
# virtual registers written once, so copies between them can go.
CLEANUP_PIPELINE: list[str] = ["fold-min-max", "simplify", "strength-reduction", "cse", "licm",
                               "cse", "peephole", "unroll", "peephole", "modulo-schedule",
                               "pipeline", "schedule"]


def run_cleanups(mir, names: list[str], target, config: CleanupConfig, timings: list,
                 sizes: list, after=None) -> None:
    for name in names:
        clock = time.perf_counter()
        CLEANUP_PASSES[name]().run(mir, target, config)
        timings.append((name, time.perf_counter() - clock))
        sizes.append((name, count(mir.body) + len(mir.tail)))
        if after is not None:
            after(name, mir)


__all__ = ["CLEANUP_PASSES", "CLEANUP_PIPELINE", "CleanupConfig", "MirPass", "run_cleanups"]
