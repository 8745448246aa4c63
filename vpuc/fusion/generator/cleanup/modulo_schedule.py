"""modulo-schedule: modulo scheduling of unrolled loops with a static trip count.

The two-stage pipeline (``pipeline.py``) followed by list scheduling of its
body (``schedule.py``) orders each loop trip as straight-line code: the list
scheduler does not see that the trip repeats, so the busiest slot idles where
one trip's dependence chains end and the next trip's have not started (on an
f16 HSwish, unrolled x4: 30 cycles a trip for 28 CMU instructions).  A modulo
schedule starts one iteration every ``II`` cycles, each instruction at its
time ``sigma`` in the iteration (``modulo_placement.py`` finds them:
dependences, slots modulo ``II``, no value living ``II`` cycles or more).
The loop body then holds stage ``s`` = ``sigma // II`` of iteration ``k - s``
for each instruction, in the order of ``sigma mod II`` -- on the in-order
machine every instruction issues in its row, one trip every ``II`` cycles --
with a prologue (the stages the first trips start) and an epilogue (the
stages the last trips finish) in straight line.  Pointer increments are
scheduled like the rest, after every access of their iteration through the
pointer (and last in their row); each access's offset is corrected by how
many increments of its pointer ran before it, counted on the emitted sequence.

A loop is taken only when the modulo schedule's trip is shorter than what the
two-stage pipeline and the list scheduler give it (both estimated with the
in-order issue model of the cycle table, ``steady_cycles``) and its values fit
the registers; other loops are left to ``pipeline``, and ``schedule`` leaves a
modulo-scheduled body as it is.  Qualifying loops have a static trip count of
at least the stage count and no loop-carried register but pointer increments
read as addresses; an unrolled body is SSA already, one that ``unroll`` left
alone (its copies would not fit the vector registers: Gelu's erf on f16) is
renamed as ``unroll``'s single copy and taken only if the whole kernel still
allocates.

Without renaming across iterations, a value read by two instructions far apart
bounds II from below: its register must last from the first to the last.
When II stays above the slot bound, a load read more than once is tried
loaded again before each later reader (the LSUs are mostly idle), and kept if
that schedules a smaller II: Gelu's x, read by the erf and by ``x * 0.5``
at the end, bounded the f16 loop at 48 cycles a vector, 42 after (VAU: 37).

At most two stages (``MAX_STAGES``): the simulator's fast path batches a loop
whose carried values come from instructions that read none
(``runtime_sim/isa/loop_pipelined.py``), which a third stage breaks; so an
iteration spans at most 2 II cycles (each instruction placed early enough for
the latency path after it).
"""

from __future__ import annotations

from vpuc.fusion.generator.cleanup.analysis import block_key
from vpuc.fusion.generator.cleanup.base import MirPass
from vpuc.fusion.generator.cleanup.modulo_placement import find_interval, slot_bound
from vpuc.fusion.generator.cleanup.pipeline import PipelinePass
from vpuc.fusion.generator.cleanup.schedule import schedule_block
from vpuc.fusion.generator.cleanup.unroll import UnrollPass, _inductions, _is_step
from vpuc.fusion.generator.kernel_cache import TargetMemo
from vpuc.fusion.generator.mir import (SP, Inst, Loop, Mem, Reg, copy_nodes, flatten,
                                      walk_bodies)
from vpuc.fusion.generator.regalloc import AllocationError, allocate, liveness

_TRIP_CYCLES = TargetMemo(1024)      # _baseline's cycles, by the loop's content

MAX_STAGES = 2          # the simulator batches two-stage loops only (runtime_sim/isa/loop_pipelined.py)


def steady_cycles(body: list[Inst], target, trips: int = 4) -> int:
    """Cycles of one trip of a loop over ``body`` in steady state, by the in-order issue
    model of ``runtime_sim.isa.cycles`` (operands, slots, the pair rule of the LSUs, the
    closing ``loop``): the distance between the starts of the last two of ``trips``."""
    ready: dict = {}
    slot_free: dict = {}
    now = 0
    starts = []
    for _ in range(trips):
        starts.append(now)
        for inst in body:
            cost = target.cost(inst.op)
            start = max([now] + [ready.get(r, 0) for r in inst.uses()])
            slot = cost.slots[0]
            if (len(cost.slots) > 1 and slot_free.get(slot, 0) > start
                    and slot_free.get(cost.slots[1], 0) < slot_free.get(slot, 0)):
                slot = cost.slots[1]
            start = max(start, slot_free.get(slot, 0))
            slot_free[slot] = start + cost.issue
            for r in inst.defs():
                ready[r] = start + cost.latency
            now = start
        now = max(now, slot_free.get("loop", 0)) + 1     # ``loop`` closes the bundle
        slot_free["loop"] = now
    return starts[-1] - starts[-2]


def _emit(body: list[Inst], sigma: list[int], ii: int, trips: int, steps: dict, unrolled: int):
    """(prologue, loop body, epilogue, stages): every instance of ``body`` in issue order,
    stage s of trip k - s in step k, offsets corrected by the increments run before."""
    stages = max(sigma) // ii + 1
    order = sorted(range(len(body)), key=lambda i: (sigma[i] % ii, _is_step(body[i]), i))
    ran = {p: 0 for p in steps}
    out: list[list[Inst]] = []
    for k in range(stages - 1 + stages):       # the first steps, then the last ones
        step = k if k < stages else trips - 1 + (k - stages + 1)
        if k == stages:         # the loop ran the full step trips - stages + 1 times
            ran = {p: c + trips - stages for p, c in ran.items()}
        insts = []
        for i in order:
            trip = step - sigma[i] // ii
            if not 0 <= trip < trips:
                continue
            inst = body[i].copy()
            if inst.group is not None:
                inst.group += (sigma[i] // ii) * unrolled
            if _is_step(inst):
                ran[inst.args[0]] += 1
            elif inst.mem is not None and inst.mem.base in steps:
                p = inst.mem.base
                inst.args = [a.moved((trip - ran[p]) * steps[p]) if isinstance(a, Mem) else a
                             for a in inst.args]
            insts.append(inst)
        out.append(insts)
    return [i for s in out[:stages - 1] for i in s], out[stages - 1], \
        [i for s in out[stages:] for i in s], stages


def _counter_init(nodes: list, i: int) -> int | None:
    """Where the loop at ``i`` gets its static trip count: the last instruction before it
    that touches its counter, a ``li`` of at least 2."""
    loop = nodes[i]
    at = i - 1
    while at >= 0 and isinstance(nodes[at], Inst) and loop.counter not in (
            nodes[at].defs() + nodes[at].uses()):
        at -= 1
    init = nodes[at] if at >= 0 else None
    if not (isinstance(init, Inst) and init.op == "li" and init.args[0] == loop.counter
            and isinstance(init.args[1], int) and init.args[1] >= 2):
        return None
    return at


def _addresses_only(body: list[Inst], steps: dict) -> bool:
    """Every pointer of ``steps`` is read as an address only (or by its increment)."""
    for n in body:
        if _is_step(n) and n.args[0] in steps:
            continue
        named = [a for a in n.args if isinstance(a, Reg)]
        if any(p in named or (p in n.uses() and (n.mem is None or n.mem.base != p)) for p in steps):
            return False
    return True


def _reloaded(body: list[Inst], mir) -> list[Inst] | None:
    """``body`` with a fresh ``vld`` before every reader of a loaded vector but its first,
    when no store of the same unrolled copy comes between (it could write those bytes:
    in-place operands); None when no load has a second reader."""
    loads: dict[Reg, int] = {}
    seen: set[Reg] = set()
    out: list[Inst] = []
    for j, inst in enumerate(body):
        fresh: dict[Reg, Reg] = {}
        for r in inst.uses():
            if r not in loads or r in fresh:
                continue
            if r not in seen:
                seen.add(r)
                continue
            load = body[loads[r]]
            if any(m.is_store and (m.group is None or m.group == load.group)
                   for m in body[loads[r]:j]):
                continue
            again = load.copy()
            fresh[r] = again.args[0] = mir.fresh("v")
            out.append(again)
        m = inst.copy()
        m.replace_regs(fresh)
        out.append(m)
        if inst.op == "vld":
            loads[inst.args[0]] = j
    return out if len(out) > len(body) else None


class ModuloSchedulePass(MirPass):
    name = "modulo-schedule"

    def run(self, mir, target, config) -> bool:
        if config.unroll < 1 or not config.hoist_vectors:
            return False            # the generator's last resorts keep the emitters' order
        self.mir = mir
        changed = False
        for nodes in list(walk_bodies(mir.body)):
            i = 0
            while i < len(nodes):
                n = nodes[i]
                at = _counter_init(nodes, i) if isinstance(n, Loop) else None
                replacement = None if at is None else self._schedule(nodes[at], n, target)
                if replacement is not None and not n.info.get("unrolled"):
                    # a loop the register file kept from unrolling: taken only if its
                    # renamed, overlapped iterations still fit the registers (else the
                    # generator's next attempt would hoist no constants at all)
                    trial = nodes[:at] + nodes[at + 1:i] + replacement + nodes[i + 1:]
                    old = nodes[:]
                    nodes[:] = trial
                    fits = self._allocates(mir)
                    nodes[:] = old
                    if not fits:
                        replacement = None
                if replacement is not None:
                    nodes[at:i + 1] = nodes[at + 1:i] + replacement
                    i += len(replacement) - 2
                    changed = True
                i += 1
        return changed

    @staticmethod
    def _allocates(mir) -> bool:
        try:
            allocate(copy_nodes(mir.body), copy_nodes(mir.tail))
        except AllocationError:
            return False
        return True

    def _renamed(self, loop: Loop, steps: dict) -> list[Inst] | None:
        """The body of a loop ``unroll`` left alone, its definitions renamed to registers
        written once (``unroll``'s one copy), or None when a value it defines is still
        read after the loop."""
        where: dict[int, int] = {}
        flat = flatten(self.mir.body, self.mir.tail, where)
        _, live_in = liveness(flat, with_in=True)
        at = where[id(loop)] + 1
        exit_live = live_in[at] if at < len(flat) else set()
        local = {r for n in loop.body for r in n.defs() if r not in steps}
        if local & exit_live:
            return None
        unroll = UnrollPass()
        unroll.mir = self.mir
        core = [n for n in loop.body if not (_is_step(n) and n.args[0] in steps)]
        return unroll._copy(core, local, steps, 0) + [n.copy() for n in loop.body
                                                      if _is_step(n) and n.args[0] in steps]

    def _schedule(self, init, loop: Loop, target) -> list | None:
        u = loop.info.get("unrolled")
        if loop.info.get("pipelined") or loop.guard or loop.slot is not None:
            return None
        body = loop.body
        if not all(isinstance(x, Inst) for x in body):
            return None
        steps = _inductions(body)
        if steps is None or not _addresses_only(body, steps):
            return None
        original = loop
        # the stack (an unrolled body's u8 scratch areas too): the same bytes every
        # iteration, which overlapped iterations would share
        if any(isinstance(a, Mem) and a.base == SP for n in body for a in n.args):
            return None
        if not u:
            body = self._renamed(loop, steps)
            if body is None:
                return None
            loop = Loop(loop.counter, body, loop.guard, loop.slot, loop.tag, loop.name,
                        dict(loop.info, unrolled=1))
            u = 1
        defined = [r for n in body if not _is_step(n) for r in n.defs()]
        if len(defined) != len(set(defined)) or any(not r.virtual for r in defined):
            return None
        trips = init.args[1]
        stages = min(MAX_STAGES, trips)
        found = find_interval(body, target, self._baseline(init, original, target), stages)
        if found is not None and found[0] > slot_bound(body, target):
            # values read far apart (Gelu's x, by the erf and by x / 2) hold II back: their
            # register must outlive the longest chain between their readers; a load read
            # twice is loaded again for its later readers instead (the LSUs idle)
            reloaded = _reloaded(body, self.mir)
            better = None if reloaded is None else find_interval(reloaded, target, found[0], stages)
            if better is not None:
                body, found = reloaded, better
        if found is None:
            return None
        ii, sigma = found
        prologue, kernel, epilogue, stages = _emit(body, sigma, ii, trips, steps, u)
        count = Inst("li", [loop.counter, trips - stages + 1], init.tag,
                     f"trip count - {stages - 1}" if stages > 1 else init.note)
        piped = Loop(loop.counter, kernel, False, None, loop.tag, f"{loop.name} modulo",
                     dict(loop.info, pipelined=True, modulo=ii, stages=stages))
        return prologue + [count, piped] + epilogue

    @staticmethod
    def _baseline(init, loop: Loop, target) -> int:
        """A trip's cycles under the two-stage pipeline and list scheduling.  ``init`` is the
        counter's ``li`` of at least 2 (``_counter_init``), so the pipelined body depends on
        the loop's body and what ``_pipeline`` reads of the loop, not on the trip count."""
        key = block_key(loop.body) + (loop.counter, loop.info.get("unrolled"),
                                      bool(loop.info.get("pipelined")), loop.guard, loop.slot)
        cycles = _TRIP_CYCLES.get(key, target)
        if cycles is None:
            piped = PipelinePass()._pipeline(init, loop, target)     # copies what it reads
            body = loop.body if piped is None else next(
                n for n in piped if isinstance(n, Loop)).body
            cycles = steady_cycles(schedule_block(list(body), target), target)
            _TRIP_CYCLES.put(key, target, cycles)
        return cycles
