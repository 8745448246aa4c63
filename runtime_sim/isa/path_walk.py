"""The executed path of an outer loop, walked symbolically for the path batch.

An outer loop whose body calls a routine, branches and runs inner loops (a
library kernel's per-row loop: softmax's max, exp-sum and scale passes) is not
straight-line code, so ``loop_plan`` refuses it.  Its iterations may still all
run the *same* instructions: the branches depend only on the row length and
the pointers, not on the data.  ``walk`` follows one iteration from the loop
head with the registers the interpreter holds there, and proves that:

* every scalar the path computes from the induction values is affine in the
  iteration number k (``Affine``): registers, and scalar words at a fixed
  address (a stack frame's row pointer: ``lw``, ``add``, ``sw``), which are
  *promoted*: the batch keeps them as values and writes their last value back;
* a value read before the path writes it (a carried register or word) steps by
  a constant per iteration: the walk is run with the steps found by a first
  walk, and the values at the end of iteration k must be the start values of
  iteration k + 1 (``Affine`` arithmetic is exact mod 2^32, so this is a proof
  by induction);
* each conditional branch, inner ``loop`` and scalar min/max chooses in every
  iteration what it chose in the first: a *guard* (a condition on affine
  operands), evaluated per iteration by the batch, which stops before the first
  iteration that would leave the path;
* every other access has an affine address: a ``Footprint``.  Masked accesses
  whose mask the path sets from a constant count only their active bytes.

Scalars computed from vectors or from loaded data (a row's max, its sum) are
*data*: batched per iteration, never an address, a branch operand or carried.
"""

from __future__ import annotations

import weakref

import numpy as np

from runtime_sim.isa.loop_bounds import MOD, Affine, Footprint, affine_const, affine_op, signed
from runtime_sim.isa.loop_pipelined import register_name
from runtime_sim.isa.memory import AccessFault
from runtime_sim.isa.path_ops import _Op, instructions
from runtime_sim.isa.path_records import Guard, PathRefused, PathStep, Walk
from vpuc.diagnostics import VpucError
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import EXIT_ADDRESS, NUM_SREGS, REG_LR

# Longest path batched: past it a row's inner loops are long enough to batch alone.
MAX_PATH = 4096
_SCALAR_ACCESS = {"lb": 1, "lbu": 1, "lh": 2, "lhu": 2, "lw": 4, "sb": 1, "sh": 2, "sw": 4}
# min/max of two affine values is one of them: which, is a guard (signed or not)
_CHOOSE = {"min": ("bge", 1), "max": ("bge", 0), "minu": ("bgeu", 1), "maxu": ("bgeu", 0)}


def walk(program, head: int, branch: int, R: list, memory, steps_seen: dict | None = None) -> Walk:
    """The path of one iteration from ``head`` with registers ``R``; raises ``PathRefused``.
    A first walk with every carried value constant finds the steps; the second proves them.
    ``steps_seen`` receives the carried registers' steps when the first walk gets that far;
    holding the steps of an earlier entry, it lets the walk try them first."""
    if steps_seen and "words" in steps_seen:       # an earlier entry's steps: proven below
        try:
            return _proven(program, head, branch, R, memory, steps_seen["registers"],
                           steps_seen["words"])
        except PathRefused:
            pass                    # those steps do not hold here: walk afresh below
    first = _walk(program, head, branch, R, memory, {}, {})
    steps = {key: (value.start - int(R[key])) % MOD for key, value in first.carried_end.items()}
    words = {a: (value.start - first.word_start[a]) % MOD
             for a, value in first.word_end.items()}
    if steps_seen is not None:
        steps_seen.update(registers=steps, words=words)
    if first.back is None:
        raise PathRefused("the loop ends after this iteration")
    return _proven(program, head, branch, R, memory, steps, words)


def _proven(program, head: int, branch: int, R: list, memory, steps: dict[int, int],
            words: dict[int, int]) -> Walk:
    """The walk with carried registers and words stepping as given, checked by induction."""
    second = _walk(program, head, branch, R, memory, steps, words)
    if second.back is None:
        raise PathRefused("the loop ends after this iteration")
    for key, end in second.carried_end.items():
        d = steps.get(key, 0)
        if end != Affine((int(R[key]) + d) % MOD, d):
            raise PathRefused(f"s{key} does not step by a constant per iteration")
    for a, end in second.word_end.items():
        d = words.get(a, 0)
        if end != Affine((second.word_start[a] + d) % MOD, d):
            raise PathRefused(f"the word at {a:#x} does not step by a constant per iteration")
    carried = {key: Affine(int(R[key]), steps.get(key, 0)) for key in second.carried_end}
    return Walk(second.path, second.guards, second.footprints, second.promoted, carried,
                second.scalars, second.back, second.read_words, bases=second.bases)


class _State:
    def __init__(self) -> None:
        self.path: list[PathStep] = []
        self.guards: list[Guard] = []
        self.footprints: list[Footprint] = []
        self.bases: list[int] = []
        self.promoted: dict[int, int] = {}
        self.word_start: dict[int, int] = {}
        self.read_words: dict[int, bytes] = {}    # the walk's input from memory
        self.word_end: dict[int, Affine] = {}
        self.carried_end: dict[int, Affine] = {}
        self.scalars: dict[int, Affine | None] = {}
        self.back: Guard | None = None


def _walk(program, head: int, branch: int, R: list, memory, steps: dict[int, int],
          word_steps: dict[int, int]) -> _State:
    code = instructions(program)
    back = code[branch].kind
    if back not in ("branch", "loop"):
        raise PathRefused(f"the back-edge is a '{back}'", True)
    state = _State()
    scalars: dict[int, Affine | None] = {key: Affine(int(R[key]), steps.get(key, 0))
                                         for key in range(NUM_SREGS)}
    first_use: dict[int, str] = {}
    masks: dict[int, np.ndarray | None] = {}      # masks the path wrote: constant or None
    words: dict[int, Affine | None] = {}          # promoted words stored in this iteration
    loaded_first: set[int] = set()
    written: set[int] = set()
    i = head
    path, made, count = state.path, code._ops, len(program.decoded)
    runs = _plain_runs(program)
    while True:
        if len(path) >= MAX_PATH:
            raise PathRefused(f"the path is longer than {MAX_PATH} instructions", True)
        op = made[i] or code[i]
        if op.plain and i != branch:       # vector arithmetic: only its registers matter
            run = runs.get((i, branch)) or _plain_run(code, runs, i, branch)
            steps, uses, run_writes, i = run
            if len(path) + len(steps) > MAX_PATH:
                raise PathRefused(f"the path is longer than {MAX_PATH} instructions", True)
            path += steps
            for key, use in uses:
                if key not in first_use:
                    first_use[key] = use
            written.update(run_writes)
            if i == count:
                raise PathRefused("the path leaves .text")
            continue
        for key in op.first_reads:
            if key not in first_use:
                first_use[key] = "read"
        if op.moves_sp:
            raise PathRefused(f"the path moves sp ('{op.mnemonic}')", True)
        args = [payload if kind == 0 else scalars[payload] if kind == 1 else None
                for kind, payload in op.operands]
        step = PathStep(i, op, "run")
        path.append(step)
        nxt = i + 1
        kind = op.kind
        if kind in ("branch", "loop"):
            if kind == "loop":
                counter = args[0]
                if counter is None:
                    raise PathRefused("an inner loop's count is data")
                new = Affine((counter.start - 1) % MOD, counter.step)
                scalars[op.writes[0]] = new
                step.role, step.values = "affine", {op.writes[0]: new}
                condition, a, b = "bne", new, affine_const(0)
            else:
                if None in args:
                    raise PathRefused(f"'{op.mnemonic}' branches on data")
                # beqz a is beq a, 0: guards always compare two values
                condition, a = op.mnemonic.removesuffix("z"), args[0]
                b = args[1] if len(args) > 1 else affine_const(0)
                step.role = "skip"
            if kind == "loop":
                taken = new.start != 0
            else:
                taken = bool(op.fn(*[np.uint32(x.start) for x in args]))
            if i == branch:               # not taken: walk() refuses, with the steps found
                state.back = Guard(condition, a, b, True) if taken else None
                for key in op.writes:         # the back-edge's loop counter
                    first_use.setdefault(key, "write")
                    written.add(key)
                break
            state.guards.append(Guard(condition, a, b, taken))
            if taken:
                nxt, step.taken = _target(i, op.branch), True
        elif kind == "jump":
            step.role, step.taken = "skip", True
            nxt = _target(i, op.branch)
        elif kind == "call":
            link = affine_const(program.base + (i + 1) * WORD_BYTES)
            scalars[REG_LR] = link
            first_use.setdefault(REG_LR, "write")
            written.add(REG_LR)
            step.role, step.values, step.taken = "affine", {REG_LR: link}, True
            nxt = _target(i, op.branch)
        elif kind == "ret":
            first_use.setdefault(REG_LR, "read")
            lr = scalars[REG_LR]
            if lr is None or lr.step or lr.start == EXIT_ADDRESS:
                raise PathRefused("the path returns to an unknown address or exits")
            step.role, step.taken = "skip", True
            try:
                nxt = program.index_of(lr.start)
            except VpucError:
                raise PathRefused("the path returns outside .text") from None
        elif kind in ("halt", "nop"):
            if kind == "halt":
                raise PathRefused("the path halts")
            step.role = "skip"
        elif kind in ("load", "store"):
            _memory(op, args, step, scalars, masks, words, loaded_first, state, memory,
                    word_steps, R)
        else:
            _operation(op, args, step, scalars, masks, state)
        for key in op.writes:
            first_use.setdefault(key, "write")
            written.add(key)
        if i == branch:
            raise PathRefused("the back-edge falls through on the path")
        i = nxt
        if not 0 <= i < count:
            raise PathRefused("the path leaves .text")
    for key, use in first_use.items():
        if use != "read" or key not in written:
            continue
        if key >= NUM_SREGS:
            raise PathRefused(f"{register_name(key)} is carried from one iteration to the next")
        if scalars[key] is None:
            raise PathRefused(f"s{key} carries data from one iteration to the next")
        state.carried_end[key] = scalars[key]
    for address in loaded_first:
        if address in words:
            if words[address] is None:
                raise PathRefused("a promoted word carries data between iterations")
            state.word_end[address] = words[address]
    state.scalars = scalars
    return state


# Per Program: the runs of plain instructions (vector arithmetic) a
# walk passes through, by (first index, back-edge).  A plain step only notes its registers,
# so a run is worked out once: its steps (shared by every walk through it: a plain step
# is never changed after its walk), each register's first use in it, what it writes.
_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plain_runs(program) -> dict:
    runs = _RUNS.get(program)
    if runs is None:
        runs = _RUNS[program] = {}
    return runs


def _plain_run(code, runs: dict, start: int, branch: int) -> tuple:
    """(steps, (register, first use) in order, registers written, the index after) of the
    plain instructions from ``start`` up to the first other one, ``branch`` or .text's end."""
    steps, uses, seen, writes = [], [], set(), set()
    i, count = start, len(code)
    while i < count and i != branch:
        op = code[i]
        if not op.plain:
            break
        steps.append(PathStep(i, op, "run"))
        for key in op.first_reads:
            if key not in seen:
                seen.add(key)
                uses.append((key, "read"))
        for key in op.writes:
            if key not in seen:
                seen.add(key)
                uses.append((key, "write"))
        writes.update(op.writes)
        i += 1
    run = runs[start, branch] = (tuple(steps), tuple(uses), tuple(writes), i)
    return run


def _target(index: int, offset: int | None) -> int:
    if offset is None or offset % WORD_BYTES:
        raise PathRefused("a branch target is not an instruction")
    return index + offset // WORD_BYTES


def _operation(op: _Op, args: list, step: PathStep, scalars: dict, masks: dict,
               state: _State) -> None:
    scalar_out = op.scalar_out
    for key in op.mask_out:                   # a mask set from a constant: its active bytes
        masks[key] = None
        if op.mnemonic.startswith(("vmask.", "mset")) and args[0] is not None \
                and args[0].step == 0:
            masks[key] = np.asarray(op.fn(np.uint32(args[0].start)), bool)
    if not scalar_out:
        return
    result = None
    if not op.reads_vectors and None not in args and len(scalar_out) == 1 == len(op.writes):
        result = affine_op(op.mnemonic, args)
        if result is None and all(a.step == 0 for a in args):
            result = affine_const(int(op.fn(*[np.uint32(a.start) for a in args])))
        if result is None and op.mnemonic in _CHOOSE:
            condition, pick_b = _CHOOSE[op.mnemonic]
            a, b = args
            # min(a, b) is a while b >= a; max(a, b) is a while a >= b
            left, right = (b, a) if pick_b else (a, b)
            holds = bool(op.fn(np.uint32(a.start), np.uint32(b.start)) == np.uint32(a.start))
            state.guards.append(Guard(condition, left, right, holds))
            result = a if holds else b
    for key in scalar_out:
        scalars[key] = result
    if result is not None:
        step.role, step.values = "affine", {scalar_out[0]: result}


def _memory(op: _Op, args: list, step: PathStep, scalars: dict, masks: dict, words: dict,
            loaded_first: set, state: _State, memory, word_steps: dict, R: list) -> None:
    shape = op.shape
    base = scalars[shape.base]
    if base is None:
        raise PathRefused(f"the address of '{op.mnemonic}' is data")
    low = (base.start + shape.offset) % MOD
    size = _SCALAR_ACCESS.get(op.mnemonic)
    if size is not None and base.step == 0:              # a promoted word
        if state.promoted.get(low, size) != size or _overlaps_other(state.promoted, low, size):
            raise PathRefused("promoted words of different sizes overlap")
        state.promoted[low] = size
        step.address, step.size = low, size
        if op.kind == "store":
            words[low] = args[0]
            step.role = "promoted_store"
            return
        if low in words:
            value = words[low]
        else:
            loaded_first.add(low)
            try:
                raw = memory.read(low, size)
            except AccessFault:             # the interpreter faults there, at its pc
                raise PathRefused("a promoted word is not accessible") from None
            state.read_words[low] = raw.tobytes()
            start = int(raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[size])[0])
            if op.mnemonic in ("lb", "lh"):
                bits = 8 * size
                start = (start ^ (1 << bits - 1)) - (1 << bits - 1)
            start %= MOD
            state.word_start[low] = start
            value = Affine(start, word_steps.get(low, 0))
            words[low] = value
        if value is None and op.mnemonic != "lw":
            raise PathRefused("a promoted word holding data is loaded in part")
        scalars[op.writes[0]] = value
        step.role = "promoted_load" if value is None else "affine"
        if value is not None:
            step.values = {op.writes[0]: value}
        return
    length, first = shape.size, low
    if shape.mask is not None:
        mask = masks[shape.mask] if shape.mask in masks else np.asarray(R[shape.mask], bool)
        if mask is not None:
            active = np.flatnonzero(mask)
            if not len(active):
                _written(op, scalars)
                return
            first, length = low + int(active[0]), int(active[-1] - active[0]) + 1
    if shape.stride is not None:
        stride = scalars[shape.stride]
        if stride is None or stride.step:
            raise PathRefused(f"the stride of '{op.mnemonic}' varies")
        reach = (shape.lanes - 1) * signed(stride.start)
        first, length = first + min(0, reach), length + abs(reach)
    state.footprints.append(Footprint(first, signed(base.step), length, shape.is_store,
                                      len(state.path) - 1))
    state.bases.append(low)
    _written(op, scalars)


def _written(op: _Op, scalars: dict) -> None:
    for key in op.writes:
        if key < NUM_SREGS:
            scalars[key] = None


def _overlaps_other(promoted: dict[int, int], low: int, size: int) -> bool:
    return any(a != low and a < low + size and low < a + s for a, s in promoted.items())
