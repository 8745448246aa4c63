"""Batching a software-pipelined loop: values carried by one iteration to the next.

A software-pipelined body (the generator's ``pipeline`` clean-up) reads, early
in its body, registers that the *previous* iteration wrote late in its body:
stage 2 of iteration i-1 runs beside stage 1 of iteration i.  Such a register
is neither per-iteration nor an induction, but the iterations still do not
depend on each other through a recurrence, so the batch can run in two passes:

1. every instruction that does not depend on a carried value (stage 1), in
   body order, for all the iterations of the chunk;
2. every other instruction (stage 2), in body order, where a carried register
   reads the value its last writer (a stage-1 instruction) left in the
   previous iteration: that writer's batch shifted down by one row, the first
   row coming from the registers at the loop head.

Reads in pass 2 are resolved to the instruction that last wrote the register
before them in body order (``Source``), since pass 1 may have overwritten the
register since.  ``analyse`` refuses (``NotBatchable``) a carried register
whose last writer itself depends on a carried value: that is a recurrence (a
running sum), which the batch cannot run.  ``loop_chunk`` runs the two passes.
Memory is checked per entry by the fast path: besides the usual cross-iteration
test, a stage-2 access and a later stage-1 access (the pair the passes reorder)
must not touch the same bytes in one iteration when either stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.shave.isa import NUM_SREGS, NUM_VREGS


class Recurrence(Exception):
    """A carried register whose new value depends on its old one."""


@dataclass(frozen=True)
class Pipelined:
    """The two-pass schedule of a body with carried registers."""

    carried: dict[int, int]                   # register key -> position of its last writer
    stage2: frozenset[int]                    # positions run in pass 2
    sources: dict[int, tuple]                 # stage-2 position -> per read operand:
    #                                           ("pos", p) | ("carried", key) | None (as usual)
    final_writer: dict[int, int]              # register key -> position of its last writer


def analyse(ops, carried_keys: set[int], inductions=frozenset()) -> Pipelined:
    """``ops``: the body (``loop_plan.BodyOp``, back-edge last); ``carried_keys``: the
    registers read before written that are not inductions; ``inductions``: the
    induction registers (read through ``read_at`` wherever they are read: their
    updates are not run as instructions).  Raises ``Recurrence``."""
    holds_old = set(carried_keys)             # keys whose current value is last iteration's
    stage2: set[int] = set()
    last_writer: dict[int, int] = {}
    sources: dict[int, tuple] = {}
    for op in ops[:-1]:
        regs = [key for where, key in op.reads if where == "reg"]
        tainted = any(key in holds_old for key in regs)
        if not tainted:
            stage1_reads = [key for key in regs if key in last_writer
                            and last_writer[key] in stage2]
            tainted = bool(stage1_reads)
        if tainted:
            stage2.add(op.position)
            sources[op.position] = tuple(
                None if where == "reg" and key in inductions
                else _source(where, key, last_writer, carried_keys)
                for where, key in op.reads)
        for key in op.writes:
            last_writer[key] = op.position
            if tainted:
                holds_old.add(key)
            else:
                holds_old.discard(key)
    final = {key: last_writer[key] for key in carried_keys}
    for key, position in final.items():
        if position in stage2:
            raise Recurrence(f"register {register_name(key)} carries a value from one iteration to the "
                             "next that depends on its previous value (a recurrence)")
    return Pipelined(final, frozenset(stage2), sources, dict(last_writer))


def _source(where: str, key, last_writer: dict[int, int], carried: set[int]):
    if where != "reg":
        return None
    if key in last_writer:
        return ("pos", last_writer[key])
    if key in carried:
        return ("carried", key)
    return None                               # invariant or induction: read as usual


def batched(key: int, value) -> bool:
    """Whether ``value`` has one row per iteration (scalars: 1-D; vectors, masks: 2-D)."""
    return np.ndim(value) >= (1 if key < NUM_SREGS else 2)


def rows_of(key: int, value, rows: int) -> np.ndarray:
    """``value`` as a batch of ``rows`` rows."""
    if batched(key, value):
        return value
    value = np.asarray(value)
    return np.broadcast_to(value, (rows,) + value.shape)


def shifted(key: int, value, incoming, rows: int) -> np.ndarray:
    """The previous iteration's value of a carried register, per row."""
    batch = rows_of(key, value, rows)
    first = np.asarray(incoming, dtype=batch.dtype).reshape((1,) + batch.shape[1:])
    return np.concatenate([first, batch[:-1]])


def register_name(key: int) -> str:
    if key < NUM_SREGS:
        return f"s{key}"
    if key < NUM_SREGS + NUM_VREGS:
        return f"v{key - NUM_SREGS}"
    return f"m{key - NUM_SREGS - NUM_VREGS}"
