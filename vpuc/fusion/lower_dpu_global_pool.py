"""Global pools whose window does not fit CMX: the window reduced in two levels.

A global average or max pool (``GlobalAveragePool`` as a ``ReduceMean`` over H and
W, ``AveragePool`` / ``MaxPool`` whose kernel is the whole input) makes one output
element per channel from all H x W input cells.  ``lower_dpu_nn.emit_jobs`` cuts
its channels into chunks of 16 and a row into blocks of columns, but one output
element of 16 channels still needs its whole window in CMX: 2 x 16 x H x W f16
bytes, double-buffered (1 MiB at 128 x 128, NPU37XX's default budget).  So the
window is reduced in two levels, as pooling layers compose:

1. a pool of ``a x b`` windows at stride ``a x b`` writes an ``ceil(H/a) x ceil(W/b)``
   tensor of partial results, NHWC in DDR: as few partials as the largest windows that
   fit make (so the second level is small, each side within the NCE's kernel limit of
   11), each side then the smallest that makes as many (``ceil(H / ceil(H/a))``), so the
   zero padding is less than one row (column) a window: the padded cells cost the DPU as
   much as real ones, and the bands of rows the tiles pool stay even (SqueezeNet's
   13 x 13 pool: 7 x 7 windows, bands of 7 and 6 rows, not 11 x 11 ones over 11 and 2);
2. the global pool over that tensor (itself split again if it still does not fit, or
   its window is beyond the kernel limit)
   writes the layer's output with its post-ops.

Max is exact: the max of partial maxes (the first level pads the ragged edge with
cells that never win, ``runtime_sim/dpu/ops.py``).  For the mean, when ``a`` divides
H and ``b`` divides W every partial mean has the same weight and the mean of the
means is the mean; otherwise the first level is a depthwise convolution with zero
padding at the end whose every weight is ``nh nw / (H W)`` (``nh x nw`` partial
results), so the second level's mean of the partial sums is the sum over H x W
divided by H W (the weight rounded to the layer's type: one more rounding of relative
size u).  Either way the partial results are rounded once to the layer's type before
the second level: one more rounding of relative size u of each partial value (the
tolerance the tests derive).
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import NHWC, DpuLayer
from vpuc.fusion.lower_dpu_nn_plan import CHANNEL_GRANULE, Job, Plan
from vpuc.fusion.lower_dpu_pool_levels import MAX_KERNEL, choose_levels, emit_levels
from vpuc.ir.types import TensorType

POOLS = ("avgpool", "maxpool")


def window_bytes(plan: Plan, x: Value, cells: int) -> int:
    """CMX bytes of a one-element block of 16 channels over ``cells`` window cells, double-
    buffered (its input cells and its output), plus a depthwise level's weights (double-
    buffered too when the channels make several jobs: each block loads its own)."""
    n, c, elem = x.type.dims[0], x.type.dims[1], x.type.elem.nbytes
    io = 2 * n * elem * CHANNEL_GRANULE * (cells + 1)
    weights = CHANNEL_GRANULE * cells * elem * (2 if c > CHANNEL_GRANULE else 1)
    return io + (weights if plan.dpu_op == "dwconv" else 0)


def is_global(plan: Plan, x: Value) -> bool:
    """A max or average pool over the whole H x W without padding."""
    return (plan.dpu_op in POOLS and plan.kernel == tuple(x.type.dims[2:])
            and not any(plan.begin + plan.end))


def needs_split(plan: Plan, x: Value, budget: int) -> bool:
    """A global pool too large for CMX, or beyond the NCE's kernel limit."""
    return is_global(plan, x) and (window_bytes(plan, x, math.prod(plan.kernel)) > budget
                                   or max(plan.kernel) > MAX_KERNEL)


def first_level(plan: Plan, x: Value, budget: int) -> tuple[Plan, tuple[int, int]]:
    """The first level's plan and its output's H x W: the largest ``a x b`` windows that fit
    (b first: whole rows of the window are contiguous in an NHWC row)."""
    n, c, h, w = x.type.dims
    as_dw = Plan("dwconv", (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), [])   # weights counted

    def fits(cells: int) -> bool:
        return window_bytes(as_dw if plan.dpu_op == "avgpool" else plan, x, cells) <= budget

    # every side within the NCE's kernel limit; taller windows once b is all of a row, or
    # all the limit allows (not CMX)
    b = max((k for k in range(1, min(w, MAX_KERNEL) + 1) if fits(k)), default=0)
    a = max((k for k in range(1, min(h, MAX_KERNEL) + 1) if fits(k * b)), default=1) \
        if b == min(w, MAX_KERNEL) else 1
    if a * b < 2:               # windows of one cell would make no progress
        return None, (0, 0)
    # as many partials, windows as even as the sides allow: the padded cells cost the DPU as
    # much as real ones, and a band of few real rows leaves its tile idle
    a, b = math.ceil(h / math.ceil(h / a)), math.ceil(w / math.ceil(w / b))
    exact = plan.dpu_op == "maxpool" or (h % a == 0 and w % b == 0)
    if plan.dpu_op == "avgpool" and not exact:
        # whole divisors nearly as large keep the exact mean of means
        da = max(d for d in range(1, a + 1) if h % d == 0)
        db = max(d for d in range(1, b + 1) if w % d == 0)
        if 2 * da * db >= a * b:
            a, b, exact = da, db, True
    nh, nw = math.ceil(h / a), math.ceil(w / b)
    pads = (nh * a - h, nw * b - w)
    if exact:
        return Plan(plan.dpu_op, (a, b), (a, b), (0, 0), pads, (1, 1),
                    [Job((0, c), (0, c))]), (nh, nw)
    weights = np.full((c, 1, a, b), nh * nw / (h * w), np.float32)
    return Plan("dwconv", (a, b), (a, b), (0, 0), pads, (1, 1),
                [Job((0, c), (0, c), weights)]), (nh, nw)


def emit_global_pool(prog: ProgramText, layer: DpuLayer, plan: Plan, x: Value,
                     values: dict[str, Value], tiles: int, prefix: str, gate: tuple[str, ...],
                     finish: str | None, emit_jobs) -> None:
    """The two levels (module docstring); ``emit_jobs`` is ``lower_dpu_nn.emit_jobs``."""
    op = layer.op
    level, (nh, nw) = first_level(plan, x, prog.cmx_budget)
    if level is None:           # not even two cells: emit_jobs reports the layer
        emit_jobs(prog, layer, plan, x, values, tiles, prefix, gate, finish)
        return
    n, c = x.type.dims[:2]
    partial = Value(f"{prefix}partial", TensorType((n, c, nh, nw), x.type.elem, NHWC), "ddr")
    prog.buffers.append(f"ddr %{partial.name} : {n}x{c}x{nh}x{nw}x{x.type.elem} NHWC")
    prog.barriers.append(f"barrier %{prefix}partial.done")
    emit_jobs(prog, DpuLayer(op, [], None, ""), level, x, values, tiles, f"{prefix}l1.", gate,
              f"{prefix}partial.done", out=partial)
    second = Plan(plan.dpu_op, (nh, nw), (1, 1), (0, 0), (0, 0), (1, 1), [Job((0, c), (0, c))])
    emit_pool(prog, layer, second, partial, values, tiles, f"{prefix}l2.",
              (f"{prefix}partial.done",), finish, emit_jobs)


def emit_pool(prog: ProgramText, layer: DpuLayer, plan: Plan, x: Value,
              values: dict[str, Value], tiles: int, prefix: str, gate: tuple[str, ...],
              finish: str | None, emit_jobs) -> None:
    """``plan`` over ``x``: a global pool whose window exceeds the NCE's kernel limit in
    levels in CMX over the tiles when an exact split fits (``lower_dpu_pool_levels``), else
    in two levels through DDR when it is too large for CMX."""
    if is_global(plan, x) and max(plan.kernel) > MAX_KERNEL:
        levels = choose_levels(plan, x, values[layer.output], tiles, prog)
        if levels is not None:
            emit_levels(prog, layer, levels, plan.dpu_op, x, values, tiles, prefix, gate,
                        finish)
            return
    if needs_split(plan, x, prog.cmx_budget):
        emit_global_pool(prog, layer, plan, x, values, tiles, prefix, gate, finish, emit_jobs)
    else:
        emit_jobs(prog, layer, plan, x, values, tiles, prefix, gate, finish)
