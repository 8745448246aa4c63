"""assign-physical-barriers: give every virtual barrier a physical id, reusing ids.

Expects: a verified module (acyclic barrier schedule).
Guarantees: every barrier has a physical id below the architecture's count
(64 on NPU37XX); two virtual barriers share an id only if every task using the
first happens before every task using the second; ``module.barriers`` is
ordered by first use, which is the order the runtime reprograms each id; and a
replay of the task lists against the physical barriers (``barrier_sim``) runs
to completion, so the assignment cannot deadlock.  Barriers the source already
pinned to an id keep it, and their ids are left out of the pool.  When more
barriers are live at once than the hardware has, the error names the point and
the live barriers; in a lowered model, at the layer's source with its ONNX nodes
and the compile options that change it.
"""

from __future__ import annotations

from collections import deque

from vpuc.analysis.barrier_sim import replay
from vpuc.analysis.liveness import Lifetime, ordered_before
from vpuc.analysis.schedule import Schedule
from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Barrier, Module
from vpuc.ir.provenance import LayerIndex
from vpuc.passes.base import ModulePass, PassContext


class AssignPhysicalBarriersPass(ModulePass):
    name = "assign-physical-barriers"

    def run(self, module: Module, ctx: PassContext) -> None:
        schedule = Schedule(module, ctx.arch)
        if schedule.cycle_nodes:
            raise VpucError("assign-physical-barriers needs an acyclic schedule; run verify first")
        lives: dict[str, Lifetime] = {}
        for barrier in module.barriers:
            users = sorted(set(schedule.producers.get(barrier.name, []))
                           | set(schedule.consumers.get(barrier.name, [])))
            lives[barrier.name] = Lifetime.of(schedule, users)
        order = sorted(module.barriers, key=lambda b: (lives[b.name].start_pos, b.name))
        reserved = {b.physical for b in module.barriers if b.physical is not None}
        # Least recently assigned first: the id most likely to be free again.
        pool = deque(i for i in range(ctx.arch.barriers) if i not in reserved)
        holder: dict[int, Barrier] = {}
        for barrier in order:
            if barrier.physical is not None:
                continue
            barrier.physical = self._pick(barrier, pool, holder, lives, schedule, ctx, module)
        module.barriers[:] = order
        blocked = replay(module, schedule)
        if blocked:
            raise VpucError([Diagnostic(Severity.ERROR, module.loc,
                                        "the physical barrier assignment deadlocks; blocked: "
                                        + " | ".join(blocked))])
        module.attributes["barriers"] = "physical"

    def _pick(self, barrier: Barrier, pool: deque, holder: dict[int, Barrier],
              lives: dict[str, Lifetime], schedule: Schedule, ctx: PassContext,
              module: Module) -> int:
        life = lives[barrier.name]
        for pid in list(pool):
            previous = holder.get(pid)
            if previous is None or ordered_before(schedule, lives[previous.name], life):
                holder[pid] = barrier
                pool.remove(pid)
                pool.append(pid)  # now the most recently assigned
                return pid
        live = sorted(holder.values(), key=lambda b: b.name)
        first = schedule.units[life.first[0]].name if life.first else "?"
        names = ", ".join(f"%{b.name}" for b in live[:12]) + (" ..." if len(live) > 12 else "")
        detail = (f"%{barrier.name} (first used by {first}) needs a physical barrier while all "
                  f"{len(pool)} available ones are in use ({ctx.arch.name} has "
                  f"{ctx.arch.barriers}); live: {names}")
        layer = LayerIndex(module.layers).layer(first) if module.layers else None
        if layer is not None:
            # a lowered model's layer: the user can change the compile, not the tasks
            raise VpucError([Diagnostic(
                Severity.ERROR, layer.loc,
                f"too many live barriers in layer {layer.key or first} (from ONNX "
                f"{', '.join(str(n) for n in layer.nodes)}): its tasks and the ones running "
                f"beside them need more than the {len(pool)} physical barriers at once; "
                f"{detail}; compile with a larger --cmx-budget (fewer blocks) or with "
                "--schedule naive (layers one after another)")])
        raise VpucError([Diagnostic(
            Severity.ERROR, barrier.loc,
            f"too many live barriers: {detail}; expected at most {len(pool)} barriers live "
            "at once: add ordering between tasks or split the schedule")])
