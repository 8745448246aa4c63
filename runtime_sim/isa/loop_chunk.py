"""A loop plan's chunk as a fixed schedule of calls: the batch without its
per-instruction bookkeeping.

A batch of a short loop (a generated kernel's block: a few dozen to a few hundred
iterations) spent as long deciding where each operand comes from as in numpy:
per instruction, the register environment, the induction registers as the
instruction sees them (a walk over the updates above it), the pipelined
passes' sources.  All of that is fixed by the plan, so ``ChunkRunner`` decides
it once per plan: every value a chunk uses gets a slot (an immediate, an
invariant register, an induction register as some instruction sees it, an
instruction's result, a carried register one iteration back) and each
instruction becomes one step reading and writing slots.

A chunk runs exactly what the op-by-op batch ran: the same semantic functions on
the same operand batches in the same order, so every bit is the same:

* pass 1, every instruction that is not stage 2, in body order (all of them when
  the body is not software-pipelined): a register reads the last value an
  earlier pass-1 instruction wrote, else the invariant, immediate or induction
  value;
* pass 2, the stage-2 instructions in body order, each operand from the source
  ``loop_pipelined.analyse`` found: an earlier instruction's result, or a
  carried register's value one iteration back (``loop_pipelined.shifted``);
* induction updates are not run (their values come from the iteration number),
  an accumulator's instruction only captures its operand (``loop_scan`` folds
  it), and ``vld`` / ``vst`` at an induction register plus an immediate go
  straight to the memory's view of their rows when the rows form one
  (``memory.progression``).

(A generated Python function per plan was tried first: it ran a chunk faster
still, but compiling a few-hundred-instruction body took longer than the
batches of a model's run saved.)
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Affine, signed
from runtime_sim.isa.loop_pipelined import rows_of, shifted
from runtime_sim.isa.loop_views import MAX_TILED_ROWS  # noqa: F401 -- callers import it here
from runtime_sim.isa.loop_views import grouped_view as _view
from runtime_sim.isa.loop_views import loaded
from runtime_sim.isa.loop_views import progression_view  # noqa: F401 -- callers import it here
from runtime_sim.isa.loop_views import tiled as _tiled
from runtime_sim.isa.sem_vector import GENERAL
from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

# Accesses that go straight to the memory's rows when those form an arithmetic progression.
PROGRESSIONS = ("vld", "vst")

# step codes (_OP1, _OP2: an operation of one or two operands and one result, run as
# (code, fn, operand slots..., result slot, dead slots); the others as (code, step, dead))
_OP, _LOAD, _STORE, _CAPTURE, _VIEW_LOAD, _VIEW_STORE, _SHIFT, _OP1, _OP2 = range(9)



def step_value(step, R: list) -> int:
    """An induction update's signed amount (``loop_plan.Step``) with registers ``R``."""
    value = int(step.value) if step.source == "imm" else int(R[step.value])
    return step.sign * value


class ChunkRunner:
    """One plan's chunk schedule (see the module docstring); call it per chunk."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self.template: list = []                       # slot -> its value, constants filled
        self.invariants: list[tuple[int, int]] = []    # (slot, register)
        self.inductions: list[tuple[int, int, int]] = []   # (slot, register, updates before)
        self.steps: list[tuple] = []
        self.incoming: list[tuple[int, int]] = []      # (carried register, slot)
        self.final: list[tuple[int, int]] = []         # (register, slot of its last value)
        self._by_key: dict[tuple, int] = {}
        self.batch_forms: dict[int, bool] = {}         # id(step) of the batch-form ops
        self._build()
        del self._by_key
        needed = self._arrays_needed()
        self.arrays = [entry for entry in self.inductions if entry[0] in needed]
        self._drop_dead_values()
        self.tiled = self._tiled_invariants()
        del self.batch_forms
        self.groups = self._view_groups()
        self.run_steps = [self._run_step(step, dead, self.groups.get(id(step)))
                          for step, dead in zip(self.steps, self.dead)]
        del self.groups

    # --- building the schedule ----------------------------------------------------------

    def _slot(self, key: tuple, value=None) -> int:
        slot = self._by_key.get(key)
        if slot is None:
            slot = self._by_key[key] = len(self.template)
            self.template.append(value)
        return slot

    def _induction(self, key: int, position: int) -> int:
        """The slot of induction register ``key`` as the instruction at ``position`` sees
        it (after the updates above it)."""
        before = sum(1 for pos in self.plan.induction[key] if pos < position)
        fresh = ("induction", key, before) not in self._by_key
        slot = self._slot(("induction", key, before))
        if fresh:
            self.inductions.append((slot, key, before))
        return slot

    def _usual(self, operand, position: int) -> int:
        """An immediate, an induction register as ``position`` sees it, or an invariant."""
        where, key = operand
        if where == "imm":
            self.template.append(key)
            return len(self.template) - 1
        if key in self.plan.induction:
            return self._induction(key, position)
        fresh = ("reg", key) not in self._by_key
        slot = self._slot(("reg", key))
        if fresh:
            self.invariants.append((slot, key))
        return slot

    def _emit(self, op, args: list[int]) -> None:
        plan = self.plan
        if op.position in plan.scans:
            self.steps.append((_CAPTURE, op.position, args[1]))
            return
        outs = tuple(self._slot(("out", op.position, j)) for j in range(len(op.writes)))
        if (op.mnemonic in PROGRESSIONS and op.reads[-1][0] == "imm"
                and op.reads[-2][0] == "reg" and op.reads[-2][1] in plan.induction):
            # the base register is read as its induction value: its Affine is in the
            # same slot's entry of the chunk's affines
            base = self._induction(op.reads[-2][1], op.position)
            code = _VIEW_STORE if op.kind == "store" else _VIEW_LOAD
            self.steps.append((code, op.fn, tuple(args), outs, base, op.reads[-1][1]))
            return
        code = {"load": _LOAD, "store": _STORE}.get(op.kind, _OP)
        self.steps.append((code, op.fn, tuple(args), outs))
        if code == _OP and op.mnemonic in GENERAL:
            self.batch_forms[id(self.steps[-1])] = True

    def _build(self) -> None:
        plan = self.plan
        pipelined = plan.pipelined
        stage2 = pipelined.stage2 if pipelined is not None else frozenset()
        ops = plan.ops[:-1]
        env: dict[int, int] = {}              # pass 1: register -> the slot of its latest value
        for op in ops:
            if op.kind == "nop" or op.position in stage2 or op.position in plan.updates:
                continue
            args = [env[key] if where == "reg" and key in env
                    else self._usual((where, key), op.position) for where, key in op.reads]
            self._emit(op, args)
            if op.position not in plan.scans:
                for j, key in enumerate(op.writes):
                    env[key] = self._by_key[("out", op.position, j)]
        if pipelined is None:
            self.final = list(env.items())
            return

        def value_at(position: int, key: int) -> int:
            return self._by_key[("out", position, plan.ops[position].writes.index(key))]

        carried_now = {key: value_at(pos, key) for key, pos in pipelined.carried.items()}
        for op in ops:                        # pass 2: stage 2 in body order
            if op.position not in stage2:
                continue
            args = []
            for operand, source in zip(op.reads, pipelined.sources[op.position]):
                if source is None:
                    args.append(self._usual(operand, op.position))
                elif source[0] == "pos":
                    args.append(value_at(source[1], operand[1]))
                else:                         # the carried value one iteration back
                    key = source[1]
                    fresh = ("shifted", key) not in self._by_key
                    slot = self._slot(("shifted", key))
                    if fresh:
                        self.steps.append((_SHIFT, key, carried_now[key], slot))
                    args.append(slot)
            self._emit(op, args)
        self.incoming = list(carried_now.items())
        self.final = [(key, value_at(pos, key)) for key, pos in pipelined.final_writer.items()
                      if pos not in plan.updates]

    def _drop_dead_values(self) -> None:
        """Each step also names the slots no later step reads: a chunk frees a batch as
        soon as it is dead, so numpy reuses its memory (rows x 16 bytes per value: a
        large chunk's values all alive would not stay in cache)."""
        kept = {slot for _, slot in self.final} | {slot for _, slot in self.incoming}
        last: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            code = step[0]
            reads = step[2] if code in (_OP, _LOAD, _STORE, _VIEW_LOAD, _VIEW_STORE) else \
                (step[2],)
            for slot in reads:
                last[slot] = i
        dead: dict[int, list[int]] = {}
        for slot, i in last.items():
            if slot not in kept and self.template[slot] is None:   # not a constant
                dead.setdefault(i, []).append(slot)
        self.dead = [tuple(dead.get(i, ())) for i in range(len(self.steps))]

    @staticmethod
    def _run_step(step: tuple, dead: tuple, group) -> tuple:
        """``step`` as ``__call__`` runs it (see the step codes); a view's with its group."""
        if step[0] == _OP and len(step[3]) == 1 and len(step[2]) in (1, 2):
            code = _OP1 if len(step[2]) == 1 else _OP2
            return (code, step[1], *step[2], step[3][0], dead)
        if step[0] in (_VIEW_LOAD, _VIEW_STORE):
            return (step[0], step, dead, group)
        return (step[0], step, dead)

    def _view_groups(self) -> dict[int, tuple]:
        """id(view step) -> ((base slot, is store, lowest offset, span), its column): the
        views of a chunk at one base (loads apart from stores) at two or more offsets, taken
        as columns of one window (``progression_window``)."""
        by_base: dict[tuple, list] = {}
        for step in self.steps:
            if step[0] in (_VIEW_LOAD, _VIEW_STORE):
                by_base.setdefault((step[4], step[0] == _VIEW_STORE), []).append(step)
        groups = {}
        for (slot, is_store), steps in by_base.items():
            offsets = [signed(int(step[5]) % MOD) for step in steps]
            if len(set(offsets)) < 2:
                continue
            low = min(offsets)
            key = (slot, is_store, low, max(offsets) + 16 - low)
            for step, offset in zip(steps, offsets):
                groups[id(step)] = (key, offset - low)
        return groups

    def _tiled_invariants(self) -> list[tuple[int, int]]:
        """(slot, register) of the invariant vector registers read only by operations with
        a batch form (``sem_vector.GENERAL``: elementwise, fresh results) at least twice:
        a chunk repeats them to its rows, so those operations take their batch form on two
        batches of one shape instead of broadcasting one vector (several times slower in
        numpy; the same elements, so the same bits)."""
        uses: dict[int, int] = {}
        other: set[int] = set()
        for step in self.steps:
            code = step[0]
            reads = step[2] if code in (_OP, _LOAD, _STORE, _VIEW_LOAD, _VIEW_STORE) else \
                (step[2],)
            for slot in reads:
                if code == _OP and self.batch_forms.get(id(step)):
                    uses[slot] = uses.get(slot, 0) + 1
                else:
                    other.add(slot)
        kept = {slot for _, slot in self.final} | {slot for _, slot in self.incoming}
        return [(slot, key) for slot, key in self.invariants
                if NUM_SREGS <= key < NUM_SREGS + NUM_VREGS and uses.get(slot, 0) >= 2
                and slot not in other and slot not in kept]

    def _arrays_needed(self) -> set[int]:
        """The slots a chunk reads as values: an induction register that only bases
        progressions needs its Affine, not its (rows,) array, unless a view is refused."""
        needed = {slot for _, slot in self.final} | {slot for _, slot in self.incoming}
        for step in self.steps:
            code = step[0]
            if code in (_OP, _LOAD, _STORE):
                needed.update(step[2])
            elif code in (_VIEW_LOAD, _VIEW_STORE):
                needed.update(step[2][:-2])   # the stored value; not the base, the offset
            else:                             # _CAPTURE, _SHIFT: the slot they read
                needed.add(step[2])
        return needed

    # --- running a chunk --------------------------------------------------------------------

    def __call__(self, R: list, memory, first: int, rows: int, incoming: dict,
                 captured: dict) -> dict:
        """Iterations first .. first+rows-1.  ``incoming``: each carried register's value
        at the chunk's first iteration (updated for the next chunk); an accumulator's
        operands go to ``captured[position]``.  Returns register -> its batch (or
        unbatched value) as the body's last writer of it left it."""
        plan = self.plan
        v = self.template.copy()
        for slot, key in self.invariants:
            v[slot] = R[key]
        for slot, key in self.tiled:
            v[slot] = _tiled(R[key], rows)
        affines: dict[int, Affine] = {}
        if self.inductions:
            steps = {key: [step_value(s, R) for s in plan.induction[key].values()]
                     for key in {key for _, key, _ in self.inductions}}
            for slot, key, before in self.inductions:
                amounts = steps[key]
                affines[slot] = Affine((int(R[key]) + sum(amounts[:before])) % MOD,
                                       sum(amounts) % MOD)
            if self.arrays:
                k = np.arange(first, first + rows, dtype=np.uint32)
                for slot, _, _ in self.arrays:
                    v[slot] = np.uint32(affines[slot].start) + k * np.uint32(affines[slot].step)
        windows: dict[tuple, np.ndarray | None] = {}    # a view group's window, this chunk
        for step in self.run_steps:
            code = step[0]
            if code == _OP2:                  # the common case, with the fewest lookups
                v[step[4]] = step[1](v[step[2]], v[step[3]])
                for slot in step[5]:
                    v[slot] = None
                continue
            if code == _OP1:
                v[step[3]] = step[1](v[step[2]])
                for slot in step[4]:
                    v[slot] = None
                continue
            if code == _VIEW_LOAD or code == _VIEW_STORE:
                group = step[3]
            step, dead, outs = step[1], step[2], ()
            if code == _OP:
                result, outs = step[1](*[v[a] for a in step[2]]), step[3]
            elif code == _LOAD:
                result, outs = step[1](memory, *[v[a] for a in step[2]]), step[3]
            elif code == _STORE:
                step[1](memory, *[v[a] for a in step[2]])
            elif code == _VIEW_LOAD:
                view = _view(memory, windows, affines, first, rows, step, group, False)
                if view is None:
                    _base_rows(v, step[4], affines[step[4]], first, rows)
                    result = step[1](memory, *[v[a] for a in step[2]])
                else:
                    result = loaded(view)
                outs = step[3]
            elif code == _VIEW_STORE:
                view = _view(memory, windows, affines, first, rows, step, group, True)
                if view is None:
                    _base_rows(v, step[4], affines[step[4]], first, rows)
                    step[1](memory, *[v[a] for a in step[2]])
                else:
                    view[...] = v[step[2][0]]     # a batch of rows, or one vector for all
            elif code == _CAPTURE:
                captured[step[1]] = v[step[2]]
            else:                             # _SHIFT
                _, key, source, slot = step
                v[slot] = shifted(key, v[source], incoming[key], rows)
            if len(outs) == 1:
                v[outs[0]] = result
            elif outs:
                for slot, value in zip(outs, result):
                    v[slot] = value
            for slot in dead:                 # no later step reads it: let numpy reuse it
                v[slot] = None
        for key, slot in self.incoming:
            incoming[key] = rows_of(key, v[slot], rows)[-1]
        return {key: v[slot] for key, slot in self.final}


def batch_operands(args: list, rows: int) -> list:
    """The operands of an operation with a batch form (``sem_vector.GENERAL``): one vector
    among batches of ``rows`` rows repeated to them (``_tiled``), so the batch form runs;
    else as they are."""
    if not any(type(a) is np.ndarray and a.ndim == 2 and len(a) == rows for a in args):
        return args
    return [_tiled(a, rows) for a in args]


def _base_rows(v: list, slot: int, affine: Affine, first: int, rows: int) -> None:
    """A progression's base register as its (rows,) batch, made when a view is refused."""
    if v[slot] is None:
        v[slot] = (np.uint32(affine.start)
                   + np.arange(first, first + rows, dtype=np.uint32) * np.uint32(affine.step))
