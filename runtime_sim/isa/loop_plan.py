"""Static analysis of a loop for the fast path: is its body straight-line code,
and what role does each register play?

A loop is the instructions ``head .. branch`` where ``branch`` is a backward
``loop`` or conditional branch to ``head``.  Registers the body touches are:

* **invariant**: read, never written in the body -- one unbatched value;
* **per-iteration**: written before any read in the body -- recomputed each
  iteration, so the batch computes one row per iteration;
* **induction**: read before written, and every write adds a loop-invariant
  amount (``addi r, r, imm``, ``add r, r, x``, ``sub r, r, x``, and the
  ``loop`` counter's decrement) -- an affine function of the iteration number;
* an inner counted loop (``loop`` to a label of the body, its counter set by
  ``li`` in the outer body) is unrolled: the plan is one outer iteration's
  instructions in the order they run (``origins``), so the outer loop batches;
* a vector register only ever updated as ``OP acc, acc, x`` (a sum, a max) is
  an **accumulator**, folded in order after the batch (``loop_scan``);
* anything else read before written is **loop-carried**: a software-pipelined
  value (its new value does not depend on its old one) is batched in two passes
  (``loop_pipelined``); a recurrence (a running sum) is not batched.

The plan is computed once per loop and cached; everything that depends on
register values (addresses, trip count) is decided per entry by ``fastpath``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from runtime_sim.isa.cycles import CYCLES
from runtime_sim.isa.loop_pipelined import Pipelined, Recurrence, analyse, register_name
from runtime_sim.isa.loop_scan import Accumulator, find_accumulators
from runtime_sim.isa.loop_timing import LoopTiming
from runtime_sim.isa.semantics import SEMANTICS, operand_access, register_key
from vpuc.shave.encoding import WORD_BYTES
from vpuc.shave.isa import NUM_SREGS, REG_SP, WIDTH

# An inner loop is unrolled into its outer loop's plan up to this many instructions
# per outer iteration (beyond, the inner loop is long enough to batch on its own).
MAX_UNROLLED = 512

# Bytes of one contiguous access, by mnemonic (strided ones are derived below).
_ACCESS_BYTES = {"lb": 1, "lbu": 1, "sb": 1, "lh": 2, "lhu": 2, "sh": 2, "lw": 4, "sw": 4,
                 "ld": 8, "sd": 8, "vld": 16, "vst": 16, "vld.m": 16, "vst.m": 16}
for _w, _size in WIDTH.items():
    _ACCESS_BYTES[f"vldb.{_w}"] = _size


@dataclass(frozen=True)
class MemoryShape:
    """Where an access goes: ``base + offset``, ``lanes`` elements of ``size``
    bytes, ``stride`` (a register key) apart when strided; ``mask``: the mask
    register of a contiguous masked access (``vld.m``, ``vst.m``), whose inactive
    bytes are not accessed."""

    base: int
    offset: int
    size: int
    lanes: int
    stride: int | None
    is_store: bool
    mask: int | None = None


@dataclass(frozen=True)
class BodyOp:
    position: int                            # index within the body
    mnemonic: str
    kind: str                                # op, load, store, nop, loop, branch
    fn: Callable | None
    reads: tuple[tuple[str, object], ...]    # ("reg", key) or ("imm", np.uint32)
    writes: tuple[int, ...]
    memory: MemoryShape | None


@dataclass(frozen=True)
class Step:
    """One induction update: add ``sign * value`` of an immediate or invariant register."""

    source: str          # "imm" or "reg"
    value: object        # np.uint32 immediate, or a register key
    sign: int


@dataclass
class LoopPlan:
    """What a loop body does, independent of where it sits in .text."""

    ops: list[BodyOp]                        # the body, back-edge last
    induction: dict[int, dict[int, Step]]    # key -> {position: step}
    written: frozenset[int]
    timing: LoopTiming
    pipelined: Pipelined | None = None       # carried registers: the two-pass schedule
    origins: tuple[int, ...] = ()            # per op: its instruction, relative to the head
    accumulators: dict[int, Accumulator] = field(default_factory=dict)   # key -> its scan

    updates: dict[int, int] = field(init=False)          # position -> induction key
    scans: dict[int, int] = field(init=False)            # position -> accumulator key
    affine_ops: list[BodyOp] = field(init=False)         # the body, less vector arithmetic
    # the body's chunk schedule (``loop_chunk.ChunkRunner``), made on the first batch
    runner: object = field(default=None, init=False, repr=False, compare=False)
    # the registers its affine pass reads, split (``entry_cache.pointer_registers``)
    pointers: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.updates = {pos: key for key, steps in self.induction.items() for pos in steps}
        self.scans = {pos: key for key, acc in self.accumulators.items() for pos in acc.positions}
        # what the per-entry affine walk needs: accesses and scalar writes (vector
        # arithmetic never makes an address or a trip count)
        self.affine_ops = [op for op in self.ops[:-1] if op.memory is not None
                           or op.position in self.updates
                           or any(key < NUM_SREGS for key in op.writes)]

    @property
    def length(self) -> int:
        return len(self.ops)


class NotBatchable(Exception):
    """Why a loop stays with the interpreter (a message for reports and tests)."""


def _memory_shape(dec, mnemonic: str, kind: str) -> MemoryShape:
    base = offset = stride = mask = None
    for op in dec.info.operands:
        if op.kind == "mem":
            base, offset = dec.fields[op.field], dec.imm
        elif base is not None and op.kind == "sa":
            stride = dec.fields[op.field]
        elif op.kind == "ma":
            mask = register_key("m", dec.fields[op.field])
    if stride is not None:                   # vlds.w / vsts.m.h ...: lanes of WIDTH bytes
        size = WIDTH[mnemonic[-1]]
        return MemoryShape(base, offset, size, 16 // size, stride, kind == "store")
    return MemoryShape(base, offset, _ACCESS_BYTES[mnemonic], 1, None, kind == "store", mask)


def _body_op(position: int, dec) -> BodyOp:
    """The op of ``dec`` at ``position``: its word's fields worked out once per word (an
    unrolled body repeats its inner loop's words), the op made without the frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` per field)."""
    found = _BODY_WORDS.get(id(dec))
    if found is None or found[0] is not dec:
        sem = SEMANTICS[dec.info.opcode]
        access = operand_access(dec)
        memory = (_memory_shape(dec, sem.mnemonic, sem.kind)
                  if sem.kind in ("load", "store") else None)
        if len(_BODY_WORDS) >= 1 << 16:
            _BODY_WORDS.clear()
        found = _BODY_WORDS[id(dec)] = (dec, {
            "position": None, "mnemonic": sem.mnemonic, "kind": sem.kind, "fn": sem.fn, "reads": access.reads,
            "writes": access.writes, "memory": memory})
    op = object.__new__(BodyOp)
    fields = op.__dict__
    fields.update(found[1])
    fields["position"] = position
    return op


# Per decoded word (shared, never changed): (dec, a BodyOp's fields but its position).
_BODY_WORDS: dict[int, tuple] = {}


def _induction_step(op: BodyOp, key: int, written: frozenset[int]) -> Step | None:
    """The step if ``op`` (which writes ``key``) adds an invariant amount to it."""
    if op.kind == "loop":
        return Step("imm", 1, -1)
    if op.writes != (key,) or len(op.reads) != 2:
        return None
    (kind_a, a), (kind_b, b) = op.reads
    if op.mnemonic == "addi" and a == key and kind_a == "reg":
        return Step("imm", b, 1)
    if op.mnemonic in ("add", "sub") and kind_a == kind_b == "reg":
        other = b if a == key else (a if b == key and op.mnemonic == "add" else None)
        if other is not None and other != key and other not in written:
            return Step("reg", other, 1 if op.mnemonic == "add" else -1)
    return None


def _count_down(loop: Callable) -> Callable:
    """An unrolled inner ``loop``: only its counter's decrement (the branch is unrolled)."""
    return lambda count: loop(count)[0]


def _inner_trip(program, head: int, start: int, end: int) -> int:
    """The iterations of the inner loop ``start .. end`` (``end`` its ``loop``), when
    the outer body sets its counter with ``li`` before it and nothing else writes it."""
    counter = operand_access(program.decoded[end]).writes[0]
    for i in range(start, end):
        if counter in operand_access(program.decoded[i]).writes:
            raise NotBatchable(f"the inner loop's counter {_name(counter)} is written in its body")
    for i in range(start - 1, head - 1, -1):
        dec = program.decoded[i]
        if counter in operand_access(dec).writes:
            if dec.info.mnemonic == "li" and dec.imm != 0:
                return dec.imm
            break
    raise NotBatchable(f"the inner loop's trip count ({_name(counter)}) is not set by li "
                       "in the outer body")


def unrolled_body(program, head: int, branch: int) -> list[int]:
    """The body ``head .. branch`` as the instructions one iteration runs, in order
    (indices relative to ``head``): an inner counted loop (``loop`` back to a label
    of the body, its counter set by ``li`` in the outer body) appears as many times
    as it iterates, its ``loop`` each time; a loop nested in it is repeated unrolled
    too.  Other control flow stays in the list (``plan_loop`` refuses it)."""
    order: list[int] = []
    first_pass: dict[int, int] = {}     # body index -> where its one pass starts in ``order``
    i = head
    while i <= branch:
        dec = program.decoded[i]
        access = operand_access(dec)
        if (i < branch and dec.info.mnemonic == "loop" and access.branch is not None
                and access.branch % WORD_BYTES == 0):
            start = i + access.branch // WORD_BYTES
            if head <= start <= i and CYCLES[dec.info.opcode].taken_penalty == 0:
                if start not in first_pass:
                    raise NotBatchable("an inner loop branches back to another loop's back-edge")
                trip = _inner_trip(program, head, start, i)
                # one pass as it runs (loops nested in it already unrolled), then its loop
                one_pass = order[first_pass[start]:] + [i - head]
                if len(order) + len(one_pass) * trip - len(one_pass) + 1 + (branch - i) \
                        > MAX_UNROLLED:
                    raise NotBatchable(f"the inner loop unrolls to more than {MAX_UNROLLED} "
                                       "instructions")
                order += [i - head] + one_pass * (trip - 1)
                i += 1
                continue
        first_pass[i] = len(order)
        order.append(i - head)
        i += 1
    return order


def run_op(op: BodyOp, memory, args: list, env: dict) -> None:
    """Execute one batched body op on its operand batches ``args``: a store writes
    ``memory``; a load or an operation puts its results in ``env`` by register."""
    if op.kind == "store":
        op.fn(memory, *args)
        return
    result = op.fn(memory, *args) if op.kind == "load" else op.fn(*args)
    if len(op.writes) == 1:
        env[op.writes[0]] = result
    elif op.writes:
        env.update(zip(op.writes, result))


def body_ops(program, head: int, branch: int) -> tuple[list[BodyOp], list[int]]:
    """The straight-line body of ``head .. branch`` (inner counted loops unrolled, each
    kept only as its count-down) and each op's instruction offset from ``head``; raises
    ``NotBatchable`` when the body has control flow or moves sp."""
    origins = unrolled_body(program, head, branch)
    ops = [_body_op(p, program.decoded[head + o]) for p, o in enumerate(origins)]
    for p, op in enumerate(ops[:-1]):
        if op.kind == "loop":                # an unrolled inner loop: only its count-down
            ops[p] = BodyOp(p, "loop", "op", _count_down(op.fn), op.reads, op.writes, None)
    back = ops[-1]
    if back.kind not in ("loop", "branch"):
        raise NotBatchable(f"the back-edge '{back.mnemonic}' is not a loop or conditional branch")
    for op in ops[:-1]:
        if op.kind not in ("op", "load", "store", "nop"):
            raise NotBatchable(f"control flow inside the body ('{op.mnemonic}')")
        if REG_SP in op.writes:         # the interpreter checks sp against the stack
            raise NotBatchable(f"the body moves sp ('{op.mnemonic}')")
    return ops, origins


def register_uses(ops: list[BodyOp]) -> tuple[dict[int, str], dict[int, list[BodyOp]]]:
    """Per register: whether the body first reads or writes it, and the ops writing it."""
    first_use: dict[int, str] = {}
    writers: dict[int, list[BodyOp]] = {}
    for op in ops:                           # within an instruction, reads come first
        for where, key in op.reads:
            if where == "reg":
                first_use.setdefault(key, "read")
        for key in op.writes:
            first_use.setdefault(key, "write")
            writers.setdefault(key, []).append(op)
    return first_use, writers


def plan_loop(program, head: int, branch: int) -> LoopPlan:
    """Analyse ``head .. branch``; raises ``NotBatchable`` with the reason."""
    ops, origins = body_ops(program, head, branch)
    back = ops[-1]
    first_use, writers = register_uses(ops)
    written = frozenset(writers)

    induction: dict[int, dict[int, Step]] = {}
    carried: set[int] = set()
    for key, ops_writing in writers.items():
        if first_use[key] != "read":
            continue                         # per-iteration: defined before use
        steps = {op.position: _induction_step(op, key, written) for op in ops_writing}
        if key >= NUM_SREGS or None in steps.values():
            carried.add(key)
        else:
            induction[key] = steps
    if back.kind == "loop" and back.writes[0] not in induction:
        raise NotBatchable(f"the loop counter {_name(back.writes[0])} is redefined in the body")
    # Accumulators are folded after the batch (loop_scan): to the two-pass analysis
    # their instructions only read their operand.
    accumulators = find_accumulators(ops[:-1], carried)
    carried -= set(accumulators)
    scans = {p for acc in accumulators.values() for p in acc.positions}
    pipelined = None
    if carried:
        analysed = [BodyOp(op.position, op.mnemonic, op.kind, op.fn, op.reads, (), None)
                    if op.position in scans else op for op in ops]
        try:
            pipelined = analyse(analysed, carried, frozenset(induction))
        except Recurrence as why:
            raise NotBatchable(str(why)) from None
        if any(pos in pipelined.stage2 for steps in induction.values() for pos in steps):
            raise NotBatchable("an induction update depends on a carried value")

    tails = getattr(program, "tails", None)             # the words' issue inputs, unpacked
    timing = (LoopTiming([program.steps[head + o] for o in origins]) if tails is None
              else LoopTiming(None, tails=[tails[head + o] for o in origins]))
    return LoopPlan(ops, induction, written, timing, pipelined, tuple(origins), accumulators)


_name = register_name
