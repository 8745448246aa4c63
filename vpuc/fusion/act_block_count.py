"""Whether an ACT segment is worth cutting into blocks at all, by the cost model.

``lower_act._even_cuts`` cuts a segment into at least four blocks so that loads,
kernels and stores of consecutive blocks overlap and both tiles' ACT SHAVEs share
the work.  Each block pays fixed costs again: every operand's DMA (the runtime's
dispatch plus the transfer's setup latency, ``vpuc.cost.dma``: 893 cycles for 32
bytes read from DDR) on the loading channel, which runs its tasks one after another,
and every stage's ACT SHAVE invocation (the runtime's dispatch plus the kernel's
fixed cost).  A tiny segment (a CRNN's recurrent step: 64 elements a gate) has
almost no work to share, so its four blocks cost four times the latencies of one.

Mechanism (*block fixed cost against work shared*): the segment's makespan for
``n`` equal blocks is estimated as a three-stage flow shop of equal jobs (load on
one DMA channel, the kernels on a tile's ACT SHAVEs, store on the other channel;
``vpuc.cost.blocks``' recurrence with every block alike):

    T(n) = load(n) + act(n) + store(n) + (n - 1) * max(load(n), act(n) / min(n, tiles), store(n))
    load(n)  = sum over loaded operands of dma_task_cycles(bytes / n)      (vpuc.cost.dma)
    act(n)   = stages * (dispatch_ACT + INVOCATION_SHAVE_CYCLES * shave_cycle)
               + work / (n * parts)
    work     = elements * (generated ops * OP_SHAVE_CYCLES + library ops * LIBRARY_SHAVE_CYCLES)
               * shave_cycle

(``parts``: 2 when a block's halves go to a tile's two ACT SHAVEs, side by side, each
paying its invocation; 1 for one whole block).  ``n`` is the even cut's count and the
count ``act_split.choose_cut`` may offer instead with a tail block (two blocks a tile:
an axis of prime extent, a ViT's 197 rows, divides evenly only into single rows); one
block is kept where ``T(1)`` is at most both.  The work
per element is the costliest figure of ``docs/kernels.md`` and the invocation's fixed
cost its cheapest, so the estimate leans to cutting (the old choice) when unsure.
"""

from __future__ import annotations

import math

from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.cost.timing import Timing
from vpuc.fusion.act_split import MIN_BLOCKS_PER_TILE
from vpuc.fusion.blocked_program import Value, spans

# SHAVE cycles a generated op costs per element: VPUNN's VPUEM curve for Gelu, the
# costliest of docs/kernels.md's ("Against the hardware"); our chains run 0.25-0.57.
OP_SHAVE_CYCLES = 1.8
# ... and a library kernel: log_softmax over groups, the costliest measured (7.33).
LIBRARY_SHAVE_CYCLES = 7.33
# A kernel invocation's fixed SHAVE cycles: relu on one element, rank 1 (docs/kernels.md,
# "Fixed cost per invocation": 409 at rank 1, 625 at rank 4; the cheaper one).
INVOCATION_SHAVE_CYCLES = 409
# Double buffering: a constant that does not span the cut axis is loaded once per slot.
SLOTS = 2


def one_block_pays(values: list[Value], reads: set[str], writes: set[str], master: tuple,
                   axis: int, blocks: int, outermost: bool, ops: int, library_ops: int,
                   stages: int, tiles: int, timing: Timing) -> bool:
    """Whether one block (whole tensors) is estimated no slower than ``blocks`` blocks
    along ``axis`` (the module's formula); ``reads``/``writes``: the names of the
    segment's operands and results, ``ops``/``library_ops``: its generated ops per element
    and its library kernels, ``stages``: its kernels per block."""
    elements = math.prod(master)
    work = elements * (ops * OP_SHAVE_CYCLES + library_ops * LIBRARY_SHAVE_CYCLES) \
        * timing.shave_cycle
    invocation = timing.dispatch["ACT_SHAVE"] + INVOCATION_SHAVE_CYCLES * timing.shave_cycle
    rank = len(master)

    def makespan(n: int) -> float:
        chunk = master[axis] // n
        # a main run and a tail (n does not divide the axis): shared by both SHAVEs
        parts = 2 if n > 1 and outermost and (chunk % 2 == 0 or master[axis] % n) else 1
        load = store = 0.0
        for v in values:
            if v.name not in reads and v.name not in writes:
                continue
            cut = n > 1 and spans(v.type, axis, rank)
            moves = n if cut else min(n, SLOTS * tiles)
            cycles = _move_cycles(v, -(-v.type.nbytes // n) if cut else v.type.nbytes,
                                  v.name in writes, timing) * moves / n
            if v.name in writes:
                store += cycles
            else:
                load += cycles
        act = stages * invocation + work / (n * parts)
        return load + act + store + (n - 1) * max(load, act / min(n, tiles), store)

    counts = {blocks, min(blocks, MIN_BLOCKS_PER_TILE * tiles)}
    return makespan(1) <= min(makespan(n) for n in counts)


def _move_cycles(v: Value, nbytes: int, store: bool, timing: Timing) -> float:
    """One block's DMA of ``v``: DDR <-> CMX, or CMX -> CMX for a value held in a tile's
    CMX (``resident.py``); a temp that lives only in CMX moves nothing."""
    if not v.in_ddr:
        return 0.0
    ddr = v.tile is None
    src_ddr, dst_ddr = (False, ddr) if store else (ddr, False)
    transfer = transfer_cost(False, nbytes, v.type.elem.nbytes, src_ddr, nbytes, dst_ddr,
                             timing.dma)
    return dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)
