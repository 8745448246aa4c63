"""pipeline: software pipelining of unrolled loops in two stages.

ACT SHAVE issues in order, so in an unrolled body the first loads wait for
nothing while the vector units idle, and the last stores wait for the end of
the longest dependence chain while the loads of the next iteration could
already run: every iteration pays the chain's latency once.  Splitting each
iteration into two stages and overlapping stage 2 of iteration i-1 with
stage 1 of iteration i (a two-stage modulo schedule) pays it once per loop:

- stage of an instruction: 2 if its earliest start (ASAP over the body's
  dependences, latencies from the target's cycle table) is at least half the
  body's critical path, else 1 -- so no dependence goes from stage 2 to 1;
- prologue: stage 1 of the first iteration and the pointer increments;
- the loop runs ``T - 1`` times: stage 2 of the previous iteration (its
  addresses one step back, since the pointers already advanced), stage 1 of
  this one, the increments;
- epilogue: stage 2 of the last iteration.

Values stage 1 defines and stage 2 uses are carried across the back-edge in
their registers; stage 2 reads them before stage 1 redefines them (the
scheduler keeps that order).  Stage-2 instructions keep their copy's
``group``, stage-1 ones get ``group + U``: accesses of different iterations
never overlap, as for unrolled copies.  A loop qualifies when ``unroll``
unrolled it with a static trip count of at least 2 and every register its
body defines is defined once (SSA, as ``unroll`` leaves it).
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.cleanup.schedule import MEMORY_UNITS
from vpuc.fusion.generator.cleanup.unroll import _inductions, _is_step
from vpuc.fusion.generator.mir import Inst, Loop, Mem, walk_bodies


def _stages(core: list[Inst], target) -> list[int] | None:
    """1 or 2 per instruction, or None when the body does not split."""
    start = [0] * len(core)
    last_def: dict = {}
    memory: list[int] = []
    for j, inst in enumerate(core):
        earliest = 0
        for r in inst.uses():
            if r in last_def:
                i = last_def[r]
                earliest = max(earliest, start[i] + target.cost(core[i].op).latency)
        if inst.unit in MEMORY_UNITS:
            for i in memory:
                if (core[i].is_store or inst.is_store) and core[i].group == inst.group:
                    earliest = max(earliest, start[i])
            memory.append(j)
        start[j] = earliest
        for r in inst.defs():
            last_def[r] = j
    critical = max(s + target.cost(i.op).latency for s, i in zip(start, core))
    cut = (critical + 1) // 2
    stages = [2 if s >= cut else 1 for s in start]
    if 1 not in stages or 2 not in stages:
        return None
    return stages


def _shifted(inst: Inst, steps: dict) -> Inst:
    """A copy addressing one iteration back (its pointers advanced once more)."""
    out = inst.copy()
    out.args = [Mem(a.base, a.offset - steps[a.base]) if isinstance(a, Mem) and a.base in steps
                else a for a in out.args]
    return out


class PipelinePass(MirPass):
    name = "pipeline"

    def run(self, mir, target, config) -> bool:
        if config.unroll < 2:
            return False
        changed = False
        for nodes in list(walk_bodies(mir.body)):
            i = 1
            while i < len(nodes):
                n = nodes[i]
                replacement = (self._pipeline(nodes[i - 1], n, target)
                               if isinstance(n, Loop) else None)
                if replacement is not None:
                    nodes[i - 1:i + 1] = replacement
                    i += len(replacement) - 1
                    changed = True
                i += 1
        return changed

    def _pipeline(self, init, loop: Loop, target) -> list | None:
        u = loop.info.get("unrolled")
        if not u or loop.info.get("pipelined") or loop.guard or loop.slot is not None:
            return None
        if not (isinstance(init, Inst) and init.op == "li" and init.args[0] == loop.counter
                and isinstance(init.args[1], int) and init.args[1] >= 2):
            return None
        body = loop.body
        if not all(isinstance(x, Inst) for x in body):
            return None
        steps = _inductions(body)
        if steps is None:
            return None
        core = [n for n in body if not (_is_step(n) and n.args[0] in steps)]
        increments = [n for n in body if _is_step(n) and n.args[0] in steps]
        defined = [r for n in core for r in n.defs()]
        if len(defined) != len(set(defined)) or any(not r.virtual for r in defined):
            return None
        stages = _stages(core, target)
        if stages is None:
            return None
        first = [n for n, s in zip(core, stages) if s == 1]
        second = [n for n, s in zip(core, stages) if s == 2]
        looped: list[Inst] = []
        for n in second:
            looped.append(_shifted(n, steps))
        for n in first:
            m = n.copy()
            m.group = None if n.group is None else n.group + u
            looped.append(m)
        looped += [n.copy() for n in increments]
        prologue = [n.copy() for n in first] + [n.copy() for n in increments]
        epilogue = [_shifted(n, steps) for n in second]
        count = Inst("li", [loop.counter, init.args[1] - 1], init.tag, "trip count - 1")
        piped = Loop(loop.counter, looped, False, None, loop.tag,
                     f"{loop.name} pipelined", dict(loop.info, pipelined=True))
        return prologue + [count, piped] + epilogue
