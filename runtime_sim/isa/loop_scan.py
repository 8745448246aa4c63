"""Batching a loop that accumulates: ``vadd.f32 acc, acc, x`` and friends.

A reduction loop (softmax's max and sum, the mean and variance of a layer
norm) carries vector accumulators from one iteration to the next.  Such a
register is a recurrence, which the batch cannot run row by row -- but when
every instruction touching it has the form ``OP acc, acc, x`` (the accumulator
first, ``x`` not depending on it) and nothing else reads it, the accumulator is
a *scan*: the batch runs the rest of the body (``x`` per iteration and
position, captured where the instruction stands), then folds the captured
values into the accumulator in program order: iteration 0 position a, 0 b, 1 a,
1 b, ...

The fold must give the bits the interpreter gives, one instruction at a time:

* ``vadd.f32`` is ``np.add.accumulate`` in float32: a strictly sequential loop
  with the accumulator as the first operand, as the instruction has it (a sum by
  ``np.add.reduce`` would be pairwise, and not identical);
* ``vmax`` / ``vmin`` (f32, f16) are ``np.maximum`` / ``np.minimum`` accumulated
  in float32: exact, since max and min return one of their operands, and an
  f16 value widened to f32 and rounded back is itself;
* a NaN anywhere (in the inputs or the result) is folded by the instruction's own
  semantic function, one vector at a time, as the interpreter would: NaN
  payloads are then the interpreter's by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.shave.isa import NUM_SREGS, NUM_VREGS

F16, F32 = np.float16, np.float32
# mnemonic -> (accumulating ufunc, lane type)
SCANS = {"vadd.f32": (np.add, F32), "vmax.f32": (np.maximum, F32), "vmin.f32": (np.minimum, F32),
         "vmax.f16": (np.maximum, F16), "vmin.f16": (np.minimum, F16)}


@dataclass(frozen=True)
class Accumulator:
    key: int                        # the vector register
    mnemonic: str
    fn: object                      # the instruction's semantic function (the NaN fold)
    positions: tuple[int, ...]      # its instructions in the body, in order


def find_accumulators(ops, carried: set[int]) -> dict[int, Accumulator]:
    """The carried vector registers that are scans (see the module docstring)."""
    found = {}
    for key in sorted(carried):
        if not NUM_SREGS <= key < NUM_SREGS + NUM_VREGS:
            continue
        touching = [op for op in ops if key in op.writes
                    or any(where == "reg" and k == key for where, k in op.reads)]
        first = touching[0].mnemonic if touching else None
        if first in SCANS and all(
                op.mnemonic == first and op.writes == (key,) and len(op.reads) == 2
                and op.reads[0] == ("reg", key) and op.reads[1] != ("reg", key)
                for op in touching):
            found[key] = Accumulator(key, first, touching[0].fn,
                                     tuple(op.position for op in touching))
    return found


def fold(acc: Accumulator, incoming: np.ndarray, captured: dict[int, object],
         rows: int) -> np.ndarray:
    """The accumulator after ``rows`` iterations, from its value ``incoming``
    and each position's captured operand (one row per iteration, or unbatched)."""
    start = np.asarray(incoming, np.uint8)
    sequence = np.empty((rows * len(acc.positions) + 1, 16), np.uint8)
    sequence[0] = start
    # row 1 + k*n + j: iteration k's operand at the accumulator's j-th instruction
    steps = sequence[1:].reshape(rows, len(acc.positions), 16)
    for j, p in enumerate(acc.positions):
        steps[:, j] = captured[p]
    inputs = sequence[1:]
    ufunc, lane = SCANS[acc.mnemonic]
    sequence = sequence.view(lane).astype(F32)
    if not np.isnan(sequence).any():
        total = ufunc.accumulate(sequence, axis=0)[-1]
        if not np.isnan(total).any():
            return np.ascontiguousarray(total.astype(lane)).view(np.uint8)
    value = start                   # NaNs: the interpreter's fold, vector by vector
    for row in inputs:
        value = acc.fn(value, np.ascontiguousarray(row))
    return value
