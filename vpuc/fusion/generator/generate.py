"""The generator's driver: a subgraph body to a kernel ELF object with its contract.

Stages, each timed (``GeneratedKernel.timings``) and, with ``print_after``,
followed by a print hook (how ``--print-lir`` / ``--print-after-all`` work;
nothing here prints):

1. ``dataflow``: the target's data-flow pipeline on a copy of the body;
2. ``lir``: ``lower_subgraph`` -- the control-flow and preparation passes
   (registers assigned, loops with work amounts and increments, tails);
3. ``emit``: the kernel emitter and the target machine's emitters (MIR);
4. the clean-ups (``cleanup/``), one pass at a time;
5. ``regalloc``: physical registers for the temporaries;
6. ``assemble``: the flattened MIR as assembly text, assembled into a
   ``KernelObject`` (the same ELF the hand-written kernels are), which also
   records the body as given, as VIR text (``kernel_graph.body_text``, the
   object's ``.note.vpuc.graph``): what the kernel computes, for
   ``vpuc run --reference`` and ``vpuc inspect``; and, in the same section,
   the LIR expression every instruction came from
   (``profile.expression_tags``), for ``vpuc run --kernel-profile``.

If the temporaries do not fit the register files after unrolling and
hoisting, the clean-ups run again with a smaller unroll factor, then without
moving vector values (no vector CSE or hoisting, no unroll or schedule), and
at last with only the local scalar clean-ups: correctness never depends on them.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

from vpuc.diagnostics import VpucError
from vpuc.fusion.dataflow import DataflowContext, pipeline_names, run_dataflow
from vpuc.fusion.generator.cleanup import CLEANUP_PIPELINE, CleanupConfig, run_cleanups
from vpuc.fusion.generator.contract import kernel_decl
from vpuc.fusion.generator.kernel_graph import body_text
from vpuc.fusion.generator.kernel_emitter import MirKernel, emit_kernel
from vpuc.fusion.generator.mir import Flat, count, flatten, loops, print_asm
from vpuc.fusion.generator.profile import expression_tags
from vpuc.fusion.generator.regalloc import AllocationError, allocate
from vpuc.fusion.generator.target_machine import SHAVE_TM, TargetMachine
from vpuc.fusion.lir.linear_ir import LinearIR, LoweringConfig
from vpuc.fusion.lir.pipeline import lower_subgraph
from vpuc.ir.graph import Graph
from vpuc.ir.module import KernelDecl
from vpuc.shave import KernelObject, assemble

# print_after(stage, text): the LIR passes print their LIR, MIR stages their MIR.
PrintHook = Callable[[str, str], None]


@dataclass
class GeneratedKernel:
    name: str
    source: Graph                    # the body as given: its Parameters and Results are the
                                     # kernel's interface (logical dims, dims orders)
    body: Graph                      # the data-flow-optimized body
    lir: LinearIR
    mir: MirKernel
    flat: list[Flat]
    asm: str
    obj: KernelObject
    decl: KernelDecl
    timings: list[tuple[str, float]] = field(default_factory=list)
    sizes: list[tuple[str, int]] = field(default_factory=list)    # instructions after each stage
    config: CleanupConfig | None = None

    @property
    def instructions(self) -> int:
        return len(self.flat)


def optimize_body(body: Graph, target: TargetMachine = SHAVE_TM,
                  passes: list[str] | None = None) -> Graph:
    """A data-flow-optimized copy of ``body``."""
    out = copy.deepcopy(body)
    run_dataflow(out, DataflowContext(target.fusion), passes or pipeline_names(target.fusion))
    return out


def generate(body: Graph, name: str, target: TargetMachine = SHAVE_TM, *,
             cleanups: list[str] | None = None, config: CleanupConfig | None = None,
             optimized: bool = False, print_after: PrintHook | None = None,
             lir_config: LoweringConfig | None = None) -> GeneratedKernel:
    """Generate the kernel ``name`` for a subgraph body (as the tokenizer made it, or already
    data-flow optimized with ``optimized=True``)."""
    timings: list[tuple[str, float]] = []
    clock = time.perf_counter()
    source = body
    if not optimized:
        body = optimize_body(body, target)
    timings.append(("dataflow", time.perf_counter() - clock))

    lir_hook = None
    if print_after is not None:
        from vpuc.fusion.lir.printer import print_lir
        lir_hook = lambda stage, lir: print_after(f"lir:{stage}", print_lir(lir))  # noqa: E731
    clock = time.perf_counter()
    lir = lower_subgraph(body, target.fusion, lir_config or LoweringConfig(target.fusion),
                         print_after=lir_hook)
    timings.append(("lir", time.perf_counter() - clock))

    ranks = [op.type.rank for op in source.results]
    names = list(CLEANUP_PIPELINE if cleanups is None else cleanups)
    attempts = _attempts(config or CleanupConfig())
    last_error: AllocationError | None = None
    ceiling = None          # after a failure: the factor the unroll pass actually used, halved
    for attempt in attempts:
        if ceiling is not None and attempt.unroll > max(ceiling, 1):
            continue
        stage_timings: list[tuple[str, float]] = []
        sizes: list[tuple[str, int]] = []
        clock = started = time.perf_counter()
        mir = emit_kernel(lir, target, ranks)
        stage_timings.append(("emit", time.perf_counter() - clock))
        sizes.append(("emit", count(mir.body) + len(mir.tail)))
        _show(print_after, "emit", mir)
        passes = names
        if attempt.unroll < 2 and not attempt.hoist_vectors:
            passes = [n for n in names if n not in ("unroll", "modulo-schedule", "pipeline",
                                                    "schedule")]
        if attempt.unroll < 0:          # the last resort: the emitters' code, barely cleaned
            passes = [n for n in names if n in ("simplify", "strength-reduction", "peephole")]
        run_cleanups(mir, passes, target, attempt, stage_timings, sizes,
                     (lambda stage, m: _show(print_after, stage, m)) if print_after else None)
        clock = time.perf_counter()
        try:
            allocate(mir.body, mir.tail)
        except AllocationError as exc:
            last_error = exc
            used = max((lp.info.get("unrolled", 1) for lp in loops(mir.body)), default=1)
            ceiling = used // 2
            if print_after is not None:
                why = exc.diagnostics[0].message
                print_after("retry", f"// register allocation failed ({why}); the clean-ups "
                                     "run again with a smaller unroll factor or fewer vector "
                                     "moves\n")
            # the time of an attempt that ran out of registers, so the stages add up
            timings.append((f"attempt unroll={attempt.unroll}, hoist_vectors="
                            f"{attempt.hoist_vectors}: out of registers, retried",
                            time.perf_counter() - started))
            continue
        stage_timings.append(("regalloc", time.perf_counter() - clock))
        _show(print_after, "regalloc", mir)
        break
    else:
        raise last_error  # type: ignore[misc]
    timings += stage_timings
    clock = time.perf_counter()
    flat = flatten(mir.body, mir.tail)
    asm = print_asm(name, flat, [f"generated by vpuc from @{body.name}"])
    obj = assemble(asm, f"<generated {name}>")
    obj.graph = body_text(name, source)
    if len(obj.text) != 8 * len(flat):
        raise VpucError(f"internal: @{name} assembled to {len(obj.text) // 8} instructions "
                        f"from {len(flat)}; the expression tags would not match .text")
    obj.tags = expression_tags(lir, flat)
    timings.append(("assemble", time.perf_counter() - clock))
    sizes.append(("final", len(flat)))
    if print_after is not None:
        print_after("asm", asm)
    return GeneratedKernel(name, source, body, lir, mir, flat, asm, obj, kernel_decl(name, source),
                           timings, sizes, attempt)


def _attempts(config: CleanupConfig) -> list[CleanupConfig]:
    out = [config]
    unroll = config.unroll
    while unroll > 1:
        unroll //= 2
        out.append(config.with_(unroll=unroll))
    out.append(config.with_(unroll=1, hoist_vectors=False))     # no unroll, no schedule
    out.append(config.with_(unroll=-1, hoist_vectors=False))    # no cse, licm either
    return out


def _show(hook, stage: str, mir: MirKernel) -> None:
    if hook is not None:
        from vpuc.fusion.generator.mir import print_mir
        hook(f"mir:{stage}", print_mir(mir.body) + print_mir(mir.tail))
