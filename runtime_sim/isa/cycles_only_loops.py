"""Counted loops in a cycles-only run: trips x body, with only the last iteration's scalars.

The interpreter calls ``TimingLoops`` at each taken backward branch, and its
``enter`` where it reaches a loop head otherwise, as it calls the fast path
(``fastpath.FastLoops``) in a full run.  The loop's body (inner
counted loops unrolled, as ``loop_plan.unrolled_body`` does) must be straight
line, and every scalar register it carries from one iteration to the next
that the cycles depend on (``cycles_slice``) must be an induction variable;
vector registers and the scalars nothing depends on are not looked at, so a
loop the full run cannot batch (a recurrence) often batches here.

Per entry, the trip count and every access's bytes come from the same affine
walk as the fast path's (``fastpath._affine_pass``, ``loop_bounds``): the batch
stops before the first iteration that could fault, the step limit or the
cycle budget, leaving it to the interpreter.  No memory is read or written for
the batch, except the last iteration's scalar loads (checked as the slice
says); the bytes the batch's stores would write are marked as not computed.
The cycles are ``loop_timing.LoopTiming``'s extrapolation, the fast path's.
"""

from __future__ import annotations

import weakref
from collections import Counter
from operator import is_

import numpy as np

from runtime_sim.isa.cycles_only_path import run_path_cycles
from runtime_sim.isa.entry_cache import EntryCache
from runtime_sim.isa.fastpath import (_affine_pass, _Decline, _induction, _loop_entries,
                                      _step_value)
from runtime_sim.isa.loop_bounds import MOD, Affine, first_outside
from runtime_sim.isa.loop_pipelined import register_name
from runtime_sim.isa.loop_plan import (LoopPlan, NotBatchable, _induction_step, body_ops,
                                       register_uses)
from runtime_sim.isa.loop_timing import LoopTiming
from runtime_sim.isa.memory import accessible_ranges
from runtime_sim.isa.path_batch import MAX_PATH_REFUSALS, MIN_PATH_ITERATIONS
from runtime_sim.isa.semantics import SEMANTICS, operand_access
from vpuc.shave.isa import NUM_SREGS, REG_SP

MIN_ITERATIONS = 2
# A loop refused this many times in a row (its trip count or an address is not
# affine) is left to the interpreter for the rest of the run.
MAX_REFUSALS = 8
# A loop without calls or inner loops is offered to the path batch from this many taken
# back-edges on (``TimingLoops._walk_later``).
WALK_AFTER = 8
_MASK32 = 0xFFFFFFFF

# Plans per TimingProgram (cycles_only.timing_program caches those per Program).
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# A plan depends only on the body's words (decoded words are shared: ``decode_word``)
# and the critical registers at its head, so kernels whose loops are the same code (a
# model's elementwise kernels at other sizes: MobileNetV3's 49 loops are 15 bodies)
# share one.  Keyed by the words' ids, the words kept so the ids stay theirs; bounded.
_SHARED: dict[tuple, tuple] = {}
MAX_SHARED = 1024


def plan_timing_loop(program, head: int, branch: int, critical_at_head: int) -> LoopPlan:
    """The plan of ``head .. branch`` for a cycles-only run; ``critical_at_head``: the
    scalar registers (bits) the cycles depend on at the head.  Raises NotBatchable."""
    ops, origins = body_ops(program, head, branch)
    back = ops[-1]
    first_use, writers = register_uses(ops)
    written = frozenset(writers)
    induction = {}
    for key, ops_writing in writers.items():
        if key >= NUM_SREGS or first_use[key] != "read":
            continue
        steps = {op.position: _induction_step(op, key, written) for op in ops_writing}
        if None not in steps.values():
            induction[key] = steps
        elif critical_at_head >> key & 1:
            raise NotBatchable(f"{register_name(key)} is carried between iterations and "
                               "decides control flow or an address")
    if back.kind == "loop" and back.writes[0] not in induction:
        raise NotBatchable(f"the loop counter {register_name(back.writes[0])} is redefined "
                           "in the body")
    tails = getattr(program, "tails", None)             # the words' issue inputs, unpacked
    timing = (LoopTiming([program.steps[head + o] for o in origins]) if tails is None
              else LoopTiming(None, tails=[tails[head + o] for o in origins]))
    return LoopPlan(ops, induction, written, timing, None, tuple(origins), {})


def shared_plan(program, head: int, branch: int, critical_at_head: int) -> LoopPlan | str:
    """``plan_timing_loop``'s plan, or why it refuses, shared by identical loop bodies."""
    body = tuple(program.decoded[head:branch + 1])
    key = (tuple(map(id, body)), critical_at_head)
    found = _SHARED.get(key)
    if found is not None and all(map(is_, found[0], body)):
        return found[1]
    plan = _refused_early(program, head, branch)
    if plan is None:
        try:
            plan = plan_timing_loop(program, head, branch, critical_at_head)
        except NotBatchable as why:
            plan = str(why)
    if len(_SHARED) >= MAX_SHARED:
        _SHARED.clear()
    _SHARED[key] = (body, plan)
    return plan


_ALLOWED_IN_BODY = frozenset(("op", "load", "store", "nop"))


def _refused_early(program, head: int, branch: int) -> str | None:
    """``body_ops``'s refusal of a body without inner loops (its back-edge, control flow
    or sp inside), found from the words alone: most loops of a library kernel's driver
    are refused so, and building their ops first cost more than the rest of the plan.
    None when the body may be planned, or has an inner ``loop`` (``body_ops`` decides)."""
    decoded = program.decoded
    kinds = []
    for i in range(head, branch):
        sem = SEMANTICS[decoded[i].info.opcode]
        if decoded[i].info.mnemonic == "loop":
            return None                 # maybe an inner counted loop: unrolled first
        kinds.append(sem)
    back = SEMANTICS[decoded[branch].info.opcode]
    if back.kind not in ("loop", "branch"):
        return f"the back-edge '{back.mnemonic}' is not a loop or conditional branch"
    for i, sem in enumerate(kinds, head):
        if sem.kind not in _ALLOWED_IN_BODY:
            return f"control flow inside the body ('{sem.mnemonic}')"
        if REG_SP in operand_access(decoded[i]).writes:
            return f"the body moves sp ('{sem.mnemonic}')"
    return None


class TimingLoops:
    """The batched loops of one cycles-only run (the interpreter's ``fast`` hook)."""

    def __init__(self, timing) -> None:
        self.program = timing.program
        self.roles = timing.slice.roles
        self.critical = timing.slice.critical_at
        self.plans: dict[tuple, LoopPlan | str] = _PLANS.setdefault(timing, {})
        if "proofs" not in self.plans:
            self.plans["proofs"] = EntryCache()     # the path batches' walks, per entry
        self.proofs: EntryCache = self.plans["proofs"]
        self.min_path_iterations = MIN_PATH_ITERATIONS
        self.max_path_refusals = MAX_PATH_REFUSALS
        self.path_batches = 0
        self.batched_iterations = 0
        self.declined: Counter = Counter()
        self._refusals: Counter = Counter()
        self._taken: Counter = Counter()          # back-edges taken, of ``_walk_later``'s loops
        # The interpreter's forward hook (``enter``) is asked at these heads (loop head ->
        # its back-edge): a loop with a plan is batched from its first iteration, so the
        # interpreter never issues its body nor makes the runners of it (a generated
        # kernel's main loop: most of its instructions).
        if "entries" not in self.plans:
            self.plans["entries"] = _loop_entries(self.program)
        self.entries: dict[int, int] = self.plans["entries"]

    def enter(self, head: int, R: list, ready: list[int], now: int, memory, counts: list[int],
              budget: int, max_cycles: float = float("inf"), paths: bool = True):
        """Where the interpreter reaches a loop head other than by its back-edge: a loop
        with a plan as a batch from its first iteration (same returns as a call); reached
        by a taken forward transfer (``paths``), a loop with calls or inner loops as a path
        batch from its first row.  Loops without either wait for their back-edge
        (``_walk_later``), and so does any loop the interpreter falls into."""
        branch = self.entries.get(head)
        if branch is None or self._refusals[head, branch] >= MAX_REFUSALS:
            return None
        plan = self.plans.get((head, branch))
        if plan is None:
            plan = self.plans[head, branch] = shared_plan(self.program, head, branch,
                                                          self.critical[head])
        if not isinstance(plan, str):
            return self(head, branch, R, ready, now, memory, counts, budget, max_cycles)
        if not paths or self._plain(head, branch):
            return None
        return run_path_cycles(self, head, branch, R, ready, now, memory, counts, budget,
                               max_cycles)

    def _plan(self, head: int, branch: int) -> LoopPlan | None:
        plan = self.plans.get((head, branch))
        if plan is None:
            plan = self.plans[head, branch] = shared_plan(self.program, head, branch,
                                                          self.critical[head])
        if isinstance(plan, str):
            self.declined[plan] += 1
            return None
        return plan

    def __call__(self, head: int, branch: int, R: list, ready: list[int], now: int, memory,
                 counts: list[int], budget: int, max_cycles: float = float("inf")):
        """As ``FastLoops.__call__``: None to decline, else (now, next index,
        instructions run, stall cycles)."""
        if self._refusals[head, branch] >= MAX_REFUSALS:
            return None
        plan = self._plan(head, branch)
        if plan is None:         # calls, branches, inner loops: one proven path, maybe
            if self._walk_later(head, branch):
                return None
            return run_path_cycles(self, head, branch, R, ready, now, memory, counts,
                                   budget, max_cycles)
        try:
            footprints, exit_at = _affine_pass(plan, R)
        except _Decline as why:
            return self._decline(head, branch, str(why))
        if exit_at is None:
            return self._decline(head, branch, "trip count not provable from the back-edge")
        trip = exit_at + 1
        iterations = min(trip, budget // plan.length)
        if iterations == trip and branch + 1 == len(self.program.steps):
            iterations -= 1         # the fall off the end of .text: the interpreter's error
        regions = accessible_ranges(memory)
        for fp in footprints:
            iterations = min(iterations, first_outside(fp, iterations, regions[fp.is_store]))
        if max_cycles != float("inf") and iterations > 0:
            iterations = min(iterations, plan.timing.within(ready, now, iterations, max_cycles))
        if iterations < MIN_ITERATIONS:
            self.declined["too few iterations"] += 1
            return None
        data_low, data_high = memory.data_window
        for fp in footprints:
            low, high = fp.span(iterations)
            if (fp.is_store and not data_low <= low < high <= data_high
                    and not self.roles[head + plan.origins[fp.position]].vector_store):
                # a scalar store outside CMX: later loads may want its values, so the
                # interpreter runs it (the frames of the library's driver)
                self.declined["a scalar store outside CMX"] += 1
                return None
        self._refusals[head, branch] = 0
        exits = iterations == trip
        for fp in footprints:
            if fp.is_store:
                memory.mark_unknown(*fp.span(iterations))
            else:
                watched = self.roles[head + plan.origins[fp.position]].watched_load
                if watched:
                    memory.watch_load(watched, *fp.span(iterations))
        self._last_iteration(plan, self._last_ops(plan, head, branch), R, memory, iterations)
        now, stalls = plan.timing.advance(ready, now, iterations, exits)
        for origin in plan.origins:
            counts[head + origin] += iterations
        self.batched_iterations += iterations
        return now, (branch + 1 if exits else head), iterations * plan.length, stalls

    def _walk_later(self, head: int, branch: int) -> bool:
        """Whether a loop whose plan is refused waits before its path is walked: a body
        without calls or inner loops (forward branches in straight code: the library
        driver's loops over operands and dims) runs at most its own length per iteration,
        and such loops take their back-edge a few times, fewer than a walk (twice the path
        in steps, the ops made) costs.  Walked once taken ``WALK_AFTER`` times this run."""
        if not self._plain(head, branch):
            return False
        self._taken[head, branch] += 1
        return self._taken[head, branch] < WALK_AFTER

    def _plain(self, head: int, branch: int) -> bool:
        """Whether the body has no calls or inner loops (``_walk_later``)."""
        key = (head, branch, "plain")
        plain = self.plans.get(key)
        if plain is None:
            plain = self.plans[key] = not any(
                SEMANTICS[dec.info.opcode].kind in ("call", "loop")
                for dec in self.program.decoded[head:branch])
        return plain

    def _decline(self, head: int, branch: int, reason: str) -> None:
        self.declined[reason] += 1
        self._refusals[head, branch] += 1
        return None

    def _last_ops(self, plan: LoopPlan, head: int, branch: int) -> list[tuple]:
        """What ``_last_iteration`` runs of the body, once per loop: (op, the induction it
        updates or None, its role) for the inductions' updates and the scalar instructions
        the cycles-only run does not skip."""
        key = (head, branch, "last")
        found = self.plans.get(key)
        if found is None:
            found = []
            for op in plan.ops[:-1]:
                update = plan.updates.get(op.position)
                if update is not None:
                    found.append((op, update, None))
                    continue
                role = self.roles[head + plan.origins[op.position]]
                if (op.kind in ("op", "load") and not role.skip
                        and any(w < NUM_SREGS for w in op.writes)):
                    found.append((op, None, role))
            self.plans[key] = found
        return found

    def _last_iteration(self, plan: LoopPlan, ops: list[tuple], R: list, memory,
                        iterations: int) -> None:
        """The scalar registers as the last of ``iterations`` leaves them: the scalar
        instructions of one iteration, run with the inductions at that iteration."""
        k = iterations - 1
        final = {key: np.uint32(_induction(plan, R, key).at(iterations))
                 for key in plan.induction}
        current = {key: _induction(plan, R, key) for key in plan.induction}
        env: dict[int, object] = {}

        def read(where, key):
            if where == "imm":
                return key
            if key in env:
                return env[key]
            if key in current:
                return np.uint32(current[key].at(k))
            return R[key]

        for op, key, role in ops:
            if key is not None:
                shift = _step_value(plan.induction[key][op.position], R)
                current[key] = Affine((current[key].start + shift) % MOD, current[key].step)
                continue
            args = [read(where, key) for where, key in op.reads]
            if op.kind == "load":
                if role.checked_load:
                    base, offset = args[0], args[1]
                    memory.check_load((int(base) + int(offset)) & _MASK32,
                                      8 if len(op.writes) == 2 else op.memory.size)
                # a watched load's bytes were looked at over the whole batch (its footprint)
                result = op.fn(memory, *args)
            else:
                result = op.fn(*args)
            if len(op.writes) == 1:
                env[op.writes[0]] = result
            else:
                env.update(zip(op.writes, result))
        for key, value in env.items():
            R[key] = value
        for key, value in final.items():
            R[key] = value
