"""The fast path: run a straight-line loop's iterations as one batch of numpy.

The exact interpreter (``interpreter.run(..., fast=True)``) calls ``FastLoops``
each time it takes a backward branch, i.e. with the machine at the loop head
(and ``FastLoops.enter`` when a taken forward transfer reaches a loop head, for
the loops only the path batch can run: ``path_batch``).
If the loop qualifies (``loop_plan``) and the values in the registers let us
prove it safe, the fast path runs the remaining iterations -- or as many as are
provably safe -- by calling the same ``SEMANTICS`` functions with one batch row
per iteration, then leaves the registers, the pipeline (``loop_timing``), the
instruction counts and the pc exactly as the interpreter would.  Otherwise it
declines and the interpreter carries on, so every result is the reference one.

Per entry, with registers known (``loop_bounds`` does the arithmetic):

* the trip count follows from the back-edge's operands, which must be affine in
  the iteration number; the batch stops short of the end if the step limit
  (``max_steps``) would be hit, so the interpreter raises it at the same place;
* every address must be affine; the batch stops before the first iteration
  whose (hull of) accessed bytes is not inside an accessible window -- or,
  with the memory sanitizer on, inside the ranges the invocation may load or
  store (``sanitizer.Bounds``) -- so a fault is raised by the interpreter
  replaying that iteration: same pc, instruction, address and message;
* no iteration may touch bytes another iteration stores (a later iteration's
  load would otherwise see a value a batch has not stored yet, or the reverse):
  checked exactly on the affine byte ranges; same-iteration overlap is fine
  because the batch keeps the body's instruction order -- except in a
  software-pipelined body (``loop_pipelined``), whose two passes reorder a
  stage-2 access before a later stage-1 one: those pairs must not overlap.
"""

from __future__ import annotations

import weakref
from collections import Counter

import numpy as np

from runtime_sim.isa.entry_cache import EntryCache, LoopFacts, entry_facts
from runtime_sim.isa.loop_bounds import (MOD, Affine, Footprint, affine_const, affine_op,
                                         first_exit, same_iteration_overlap, signed)
from runtime_sim.isa.loop_chunk import ChunkRunner
from runtime_sim.isa.loop_chunk import step_value as _step_value
from runtime_sim.isa.loop_plan import BodyOp, LoopPlan, NotBatchable, plan_loop
from runtime_sim.isa.loop_scan import fold
from runtime_sim.isa.memory import AccessFault, accessible_ranges
from runtime_sim.isa.semantics import SEMANTICS, operand_access
from runtime_sim.isa.path_batch import MIN_PATH_ITERATIONS, PathPending, run_path
from runtime_sim.isa.path_batch import execute_pending as execute_path
from vpuc.diagnostics import VpucError
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import NUM_SREGS

# A plan (and its cycle traces) depends only on the loop's code, so it is shared by
# every run of every Program holding the same body (invoke_kernel links afresh).
_PLANS: dict[tuple, LoopPlan | str] = {}
MAX_CACHED_PLANS = 4096
# ... and looked up by position once per Program (Programs are cached by load_kernel).
_BY_PROGRAM: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# Iterations per numpy batch: large enough to amortise the per-instruction Python
# overhead, small enough that a batch's temporaries stay in cache.
DEFAULT_CHUNK = 16384
# A loop refused this many times in a row for a reason that recurs on every
# back-edge (aliasing, an unprovable trip count, ...) is left to the interpreter
# for the rest of the run, so trying cannot cost more than interpreting.
MAX_REFUSALS = 8


class _Decline(Exception):
    """This entry of the loop stays with the interpreter (the reason is counted).
    ``recurs``: asking again at the next back-edge would most likely fail again."""

    def __init__(self, reason: str, recurs: bool = True) -> None:
        super().__init__(reason)
        self.recurs = recurs


class FastLoops:
    """The fast path of one run: called by the interpreter on backward branches.

    With ``defer``, a proven batch is not run but left in ``pending`` (plan, registers,
    memory, iterations; a path batch's ``path_batch.PathPending``) for the caller of ``interpreter.run_steps`` to run, alone
    (``execute_pending``) or with other invocations' batches of the same plan
    (``loop_chunk_many.execute_together``); its timing and counts are the call's as ever."""

    defer = False
    pending: tuple | None = None
    together = 0                        # batches run with other invocations' batches

    def __init__(self, program, *, min_iterations: int = 2, chunk: int = DEFAULT_CHUNK,
                 min_path_iterations: int = MIN_PATH_ITERATIONS) -> None:
        self.program = program
        self.plans: dict[tuple, LoopPlan | str] = _BY_PROGRAM.setdefault(program, {})
        self.min_iterations = max(1, min_iterations)
        self.min_path_iterations = max(self.min_iterations, min_path_iterations)
        if "entries" not in self.plans:
            self.plans["entries"] = _loop_entries(program)
            self.plans["proofs"] = EntryCache()      # per-entry proofs (``entry_cache``)
        self.proofs: EntryCache = self.plans["proofs"]
        self.entries: dict[int, int] = self.plans["entries"]   # loop head -> its back-edge
        self.chunk = chunk
        self.batched_iterations = 0         # iterations run as batches
        self.batches = 0                    # loop entries taken over
        self.declined: Counter = Counter()  # reason -> count
        self._refusals: Counter = Counter()

    # --- the interpreter's hook -----------------------------------------------------------

    def __call__(self, head: int, branch: int, R: list, ready: list[int], now: int, memory,
                 counts: list[int], budget: int, max_cycles: float = float("inf")):
        """Run iterations of the loop ``head .. branch`` from its head, at most ``budget``
        instructions and none whose back-edge would pass cycle ``max_cycles``.  Returns
        None to decline, else (now, next index, instructions run, stall cycles)."""
        if self._refusals[head, branch] >= MAX_REFUSALS:
            return None
        plan = self._plan(head, branch)
        if plan is None:
            return run_path(self, head, branch, R, ready, now, memory, counts, budget,
                            max_cycles)
        try:
            # the affine pass of this entry, remembered by the registers it reads (those
            # used only as moving pointers relocate the remembered footprints)
            facts = entry_facts(self.proofs, plan, (head, branch), R,
                                lambda bases: _affine_pass(plan, R, bases), _Decline)
            if facts.declined is not None:   # raised anew: a raised one keeps its frames
                raise _Decline(str(facts.declined), facts.declined.recurs)
            iterations, exits, footprints = self._bounds(plan, facts, branch, memory, budget)
            if max_cycles != float("inf"):
                # The interpreter stops at the first taken back-edge past max_cycles: leave
                # that iteration to it, so both stop at the same pc and cycle.
                within = plan.timing.within(ready, now, iterations, max_cycles)
                if within < iterations:
                    iterations, exits = within, False
                if iterations < self.min_iterations:
                    raise _Decline("too few iterations before the cycle budget", recurs=False)
            if not facts.independent(iterations):
                raise _Decline("an iteration accesses bytes another iteration stores")
            if plan.pipelined is not None:
                _check_passes(plan.pipelined, footprints, iterations)
        except _Decline as why:
            self.declined[str(why)] += 1
            self._refusals[head, branch] += why.recurs
            return None
        self._refusals[head, branch] = 0
        self.pending = (plan, R, memory, iterations)
        if not self.defer:
            self.execute_pending()
        now, stalls = plan.timing.advance(ready, now, iterations, exits)
        for origin in plan.origins:
            counts[head + origin] += iterations
        self.batched_iterations += iterations
        self.batches += 1
        return now, (branch + 1 if exits else head), iterations * plan.length, stalls

    def enter(self, head: int, R: list, ready: list[int], now: int, memory, counts: list[int],
              budget: int, max_cycles: float = float("inf"), paths: bool = True):
        """The interpreter's hook where it reaches a loop head other than by the loop's
        back-edge (falling into it, or a taken forward transfer): run the loop from its
        first iteration (the back-edge would only offer it from the second), as a batch
        of its plan or, for a loop only the path batch can run and ``paths``, as a path
        batch.  Same returns as a call.  (Falling in, the interpreter passes ``paths=False``:
        a library kernel's inner loops, reached that way once per row it interprets, would
        be walked and refused each time.)"""
        branch = self.entries.get(head)
        if branch is None:
            return None
        if self._plan(head, branch, count=False) is not None:
            return self(head, branch, R, ready, now, memory, counts, budget, max_cycles)
        if not paths:
            return None
        return run_path(self, head, branch, R, ready, now, memory, counts, budget, max_cycles)

    def _plan(self, head: int, branch: int, count: bool = True) -> LoopPlan | None:
        key = (head, branch)
        if key not in self.plans:
            code = tuple((d.info.opcode, tuple(d.fields.values()))
                         for d in self.program.decoded[head:branch + 1])
            if code not in _PLANS:
                if len(_PLANS) >= MAX_CACHED_PLANS:
                    _PLANS.clear()
                try:
                    _PLANS[code] = plan_loop(self.program, head, branch)
                except NotBatchable as why:
                    _PLANS[code] = str(why)
            self.plans[key] = _PLANS[code]
        plan = self.plans[key]
        if isinstance(plan, str):
            self.declined[plan] += count
            return None
        return plan

    # --- bounds: trip count, faults ---------------------------------------------------------

    def _bounds(self, plan: LoopPlan, facts: LoopFacts, branch: int, memory,
                budget: int) -> tuple[int, bool, list[Footprint]]:
        """(iterations to batch, whether the last one exits, memory footprints)."""
        footprints, exit_at = facts.footprints, facts.exit_at
        if exit_at is None:
            raise _Decline("trip count not provable from the back-edge")
        trip = exit_at + 1
        if trip < self.min_iterations:
            raise _Decline("the loop ends within min_iterations", recurs=False)
        iterations = min(trip, budget // plan.length)
        if iterations == trip and branch + 1 == len(self.program.steps):
            iterations -= 1         # leave the fall off the end of .text to the interpreter
        iterations = facts.inside(iterations, accessible_ranges(memory))
        if iterations < self.min_iterations:
            raise _Decline("too few iterations before a possible fault, max_steps or the end "
                           "of .text")
        return iterations, iterations == trip, footprints

    # --- the batch ------------------------------------------------------------------------------

    def execute_pending(self) -> None:
        """Run the batch ``__call__`` (or the path batch ``run_path``) proved
        (``pending``), alone."""
        if type(self.pending) is PathPending:
            pending, self.pending = self.pending, None
            execute_path(pending)
            return
        plan, R, memory, iterations = self.pending
        self.pending = None
        # The sanitizer's bounds were proven for the whole batch: not checked again.
        bounds, memory.bounds = memory.bounds, None
        try:
            self._execute(plan, R, memory, iterations)
        except AccessFault as fault:     # the bounds exclude this: a fast-path bug
            raise VpucError(f"internal error: the fast path faulted in a checked loop: "
                            f"{fault.diagnostics[0].message}") from None
        finally:
            memory.bounds = bounds

    def _execute(self, plan: LoopPlan, R: list, memory, iterations: int) -> None:
        """Run the body over iterations 0 .. iterations-1 in chunks, in order, and
        leave the registers as the last iteration does."""
        final = {key: np.uint32(_induction(plan, R, key).at(iterations)) for key in plan.induction}
        incoming = ({key: R[key] for key in plan.pipelined.carried}
                    if plan.pipelined is not None else {})
        sums = {key: R[key] for key in plan.accumulators}
        if plan.runner is None:              # the body's chunk schedule, once per plan
            plan.runner = ChunkRunner(plan)
        for first, rows in _chunks(iterations, self.chunk):
            captured: dict[int, object] = {}
            env = plan.runner(R, memory, first, rows, incoming, captured)
            for key, acc in plan.accumulators.items():
                sums[key] = fold(acc, sums[key], captured, rows)
        for key, value in env.items():
            R[key] = _last_row(key, value)
        for key, value in sums.items():
            R[key] = value
        for key, value in final.items():
            R[key] = value


# Chunks of more rows than this are cut to a multiple of it (the rest a chunk of its own):
# the semantics run a batch against one vector as long rows of whole vectors when the
# row count divides evenly (``sem_vector._lanewise``), else numpy broadcasts it one
# vector's lanes at a time, several times slower.
ROW_ALIGN = 256


def _chunks(iterations: int, chunk: int):
    """(first, rows) of each chunk of ``iterations``, in order."""
    first = 0
    while first < iterations:
        rows = min(chunk, iterations - first)
        if rows > ROW_ALIGN and rows % ROW_ALIGN:
            rows -= rows % ROW_ALIGN
        yield first, rows
        first += rows


def _induction(plan: LoopPlan, R: list, key: int) -> Affine:
    """An induction register at the loop head: its entry value and total step."""
    total = sum(_step_value(step, R) for step in plan.induction[key].values())
    return Affine(int(R[key]), total % MOD)




def _operand_affine(operand, aff: dict[int, Affine], plan: LoopPlan, R: list) -> Affine | None:
    where, value = operand
    if where == "imm":
        return affine_const(int(value))
    if value in aff:
        return aff[value]
    if value < NUM_SREGS and value not in plan.written:
        return affine_const(int(R[value]))
    return None


def _affine_pass(plan: LoopPlan, R: list,
                 bases: list | None = None) -> tuple[list[Footprint], int | None]:
    """Walk the body symbolically: each scalar that is affine in the iteration
    number.  Returns the memory footprints and the first iteration that exits;
    ``bases`` (when given) gets each footprint's address base + offset, mod 2^32."""
    aff = {key: _induction(plan, R, key) for key in plan.induction}
    footprints = []
    for op in plan.affine_ops:
        if op.memory is not None:
            footprint = _footprint(op, aff, plan, R, bases)
            if footprint is not None:
                footprints.append(footprint)
        key = plan.updates.get(op.position)
        if key is not None:                  # an induction update: shift the affine value
            shift = _step_value(plan.induction[key][op.position], R)
            aff[key] = Affine((aff[key].start + shift) % MOD, aff[key].step)
            continue
        args = [_operand_affine(r, aff, plan, R) for r in op.reads]
        result = (affine_op(op.mnemonic, args)
                  if op.kind == "op" and len(op.writes) == 1 and None not in args else None)
        for key in op.writes:
            if result is not None and key < NUM_SREGS:
                aff[key] = result
            else:
                aff.pop(key, None)
    back = plan.ops[-1]
    operands = [_operand_affine(r, aff, plan, R) for r in back.reads]
    if None in operands:
        return footprints, None
    if back.kind == "loop":                  # decrement, then continue while != 0
        counter = operands[0]
        return footprints, first_exit("bne", Affine((counter.start - 1) % MOD, counter.step),
                                      affine_const(0))
    if len(operands) == 1:
        operands.append(affine_const(0))
    return footprints, first_exit(back.mnemonic, *operands)


def _footprint(op: BodyOp, aff: dict[int, Affine], plan: LoopPlan, R: list,
               bases: list | None = None) -> Footprint | None:
    """The bytes ``op`` may touch per iteration; None when it touches none (a mask
    the body does not change, with no bit set)."""
    shape = op.memory
    base = _operand_affine(("reg", shape.base), aff, plan, R)
    if base is None:
        raise _Decline(f"address of '{op.mnemonic}' is not affine in the iteration number")
    low, length = (base.start + shape.offset) % MOD, shape.size
    based = low
    if shape.mask is not None and shape.mask not in plan.written:
        # Only active bytes are accessed (and can fault): the hull of the set bits.
        active = np.flatnonzero(R[shape.mask])
        if not len(active):
            return None
        low, length = low + int(active[0]), int(active[-1] - active[0]) + 1
    if shape.stride is not None:
        stride = _operand_affine(("reg", shape.stride), aff, plan, R)
        if stride is None or stride.step != 0:
            raise _Decline(f"stride of '{op.mnemonic}' varies between iterations")
        reach = (shape.lanes - 1) * signed(stride.start)
        low, length = low + min(0, reach), length + abs(reach)
    if bases is not None:
        bases.append(based)
    return Footprint(low, signed(base.step), length, shape.is_store, op.position)


def _check_passes(pipelined, footprints: list[Footprint], iterations: int) -> None:
    """A stage-2 access runs before a later stage-1 access of its own iteration."""
    for a in footprints:
        if a.position not in pipelined.stage2:
            continue
        for b in footprints:
            if (b.position > a.position and b.position not in pipelined.stage2
                    and (a.is_store or b.is_store) and same_iteration_overlap(a, b, iterations)):
                raise _Decline("a software-pipelined body reorders accesses to the same bytes")


def _last_row(key: int, value):
    """The last iteration's value of a register from its batch (or the unbatched value)."""
    batched = (value.ndim if type(value) is np.ndarray else np.ndim(value)) >= (
        1 if key < NUM_SREGS else 2)
    if not batched:
        return value
    row = value[-1]
    return row if key < NUM_SREGS else row.copy()


_BRANCHING = frozenset(op for op, sem in SEMANTICS.items() if sem.kind in ("branch", "loop"))


def _loop_entries(program) -> dict[int, int]:
    """Loop heads -> their back-edge: the targets of exactly one backward conditional
    branch or ``loop`` of the program."""
    edges: dict[int, list[int]] = {}
    for index, dec in enumerate(program.decoded):
        # the opcode first: most words branch nowhere, and need no operands worked out
        if dec.info.opcode not in _BRANCHING:
            continue
        access = operand_access(dec)
        if access.branch is not None and access.branch <= 0 and access.branch % WORD_BYTES == 0:
            edges.setdefault(index + access.branch // WORD_BYTES, []).append(index)
    return {head: back[0] for head, back in edges.items() if len(back) == 1 and head >= 0}
