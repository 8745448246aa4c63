"""Pools whose window side exceeds the NCE's 11 x 11 kernel as cascades of smaller pools.

``lower-graph`` calls ``expand_large_kernels`` before tokenizing, beside
``expand_linear_resizes``.  It is the NPU compiler's ``HandleLargeKernels``
(openvinotoolkit/npu_plugin, src/vpux_compiler/src/dialect/IE/passes/
handle_large_kernels.cpp; its lit test turns MaxPool 13x13 pads 6 into two
MaxPool 7x7 pads 3), restricted to the rewrites that compute the original op:

- **MaxPool**: max is idempotent, so stride-1 windows of k1 and k2 cover
  k1 + k2 - 1 inputs: a side of k becomes ceil((k - 1) / 10) levels whose
  (k_i - 1) add up to k - 1, each level taking part of the padding (-inf, at
  most k_i - 1 a side, so no window is padding only), the original stride on
  the last level.  Bit-exact: every level picks one of the inputs.  (MaxPool
  dilations are refused by the importer; the graph op has none.)
- **AvgPool**: a side k = a * b (a, b <= 11) becomes an a-window of stride a
  (non-overlapping means of a) then a b-window of stride s / a: the mean of b
  means of a is the mean of a * b.  Only when a divides the stride s (or the
  side has one output) and the side has no padding: padding would make some
  means of a count fewer inputs (exclude_pad) than the others.  A side within
  the limit goes whole to the second level (a = 1), padding and all.  The
  partial means are rounded to f16 once: exact up to that rounding and the f32
  accumulation.  Other average pools keep the located error (a prime side, a
  factor over 11, padding on the factored side).

A pool whose window is the whole H x W without padding becomes the ReduceMax or
ReduceMean over H and W it computes (strides and exclude_pad mean nothing for its
one output), the global pool ``lower_dpu_global_pool.py`` splits into levels.
Convolutions beyond the limit keep their error.

Expects: a typed graph.
Guarantees: every MaxPool and AvgPool above whose window has a side beyond
``MAX_KERNEL`` and that the rules above take is replaced by pools of the same
kind with windows within it (or by the global reduction), at the op's location and
provenance, the last one defining the op's value; the graph is re-typed.  Others are
left unchanged.
"""

from __future__ import annotations

from vpuc.ir.graph import Graph, GraphOp, fresh_in
from vpuc.verifier.dpu import MAX_KERNEL
from vpuc.verifier.graph import infer_graph


def expand_large_kernels(graph: Graph) -> bool:
    """Rewrite every pool of ``graph`` beyond the kernel limit that a cascade computes; True
    when one was."""
    index = graph.index()
    taken = {o.result for o in graph.ops}
    ops: list[GraphOp] = []
    changed = False
    for op in graph.ops:
        new = None
        if op.kind in ("MaxPool", "AvgPool") and max(op.attrs["kernel"]) > MAX_KERNEL:
            x = index.producer(op.operands[0]).type
            if x is not None and x.is_static and x.rank == 4:
                new = _replacement(op, tuple(x.dims[2:]), taken)
        ops += new or [op]
        changed = changed or new is not None
    if changed:
        graph.ops = ops
        infer_graph(graph)
    return changed


def _replacement(op: GraphOp, spatial: tuple, taken: set) -> list[GraphOp] | None:
    """The ops computing the pool ``op`` over an H x W ``spatial`` input; None: none exact."""
    if _is_global(op, spatial):
        # the window is the whole H x W: the global pool it is, which
        # lower_dpu_global_pool.py splits into levels over the tiles
        kind = "ReduceMax" if op.kind == "MaxPool" else "ReduceMean"
        return [GraphOp(kind, op.result, op.operands, {"axes": (2, 3), "keep_dims": True},
                        loc=op.loc, origin=op.origin)]
    levels = (max_pool_levels(op.attrs, spatial) if op.kind == "MaxPool"
              else avg_pool_levels(op.attrs, spatial))
    if levels is None:
        return None
    ops, value = [], op.operands[0]
    for i, attrs in enumerate(levels):
        last = i == len(levels) - 1
        result = op.result if last else fresh_in(f"{op.result}.level{i + 1}", taken)
        ops.append(GraphOp(op.kind, result, (value,), attrs, loc=op.loc, origin=op.origin))
        value = result
    return ops


def _is_global(op: GraphOp, spatial) -> bool:
    return (tuple(op.attrs["kernel"]) == tuple(spatial)
            and not any(tuple(op.attrs["pads_begin"]) + tuple(op.attrs["pads_end"])))


def split_side(k: int) -> list[int]:
    """Stride-1 max windows within MAX_KERNEL covering k: as few as can, as even as can."""
    count = -(-(k - 1) // (MAX_KERNEL - 1)) if k > 1 else 1
    q, r = divmod(k - 1, count)
    return [q + 1 + (i < r) for i in range(count)]


def _spread(pad: int, sides: list[int]) -> list[int] | None:
    """``pad`` cells of padding over levels of these windows, at most k_i - 1 each (a window
    of padding only has no DPU form); None when they cannot take it."""
    out = []
    for k in sides:
        take = min(pad, k - 1)
        out.append(take)
        pad -= take
    return None if pad else out


def max_pool_levels(attrs: dict, spatial) -> list[dict] | None:
    """The attrs of the MaxPool levels computing a MaxPool of ``attrs`` over an input of
    H x W ``spatial``; None when its padding does not fit the levels."""
    sides = [split_side(k) for k in attrs["kernel"]]
    count = max(len(s) for s in sides)
    sides = [s + [1] * (count - len(s)) for s in sides]      # a 1-window: that side kept
    begin = [_spread(p, s) for p, s in zip(attrs["pads_begin"], sides)]
    end = [_spread(p, s) for p, s in zip(attrs["pads_end"], sides)]
    if None in begin or None in end:
        return None
    levels = []
    for i in range(count):
        last = i == count - 1
        levels.append({**attrs, "kernel": (sides[0][i], sides[1][i]),
                       "strides": tuple(attrs["strides"]) if last else (1, 1),
                       "pads_begin": (begin[0][i], begin[1][i]),
                       "pads_end": (end[0][i], end[1][i])})
    return levels


def _factor(k: int, stride: int, size: int, outputs: int) -> tuple[int, int] | None:
    """(a, b) with a * b == k, both within MAX_KERNEL, a dividing the stride (or one output);
    the largest a (the first level shrinks the data most)."""
    for a in range(min(k, MAX_KERNEL), 1, -1):
        b = k // a
        if k % a or b > MAX_KERNEL or (outputs > 1 and stride % a):
            continue
        second = size // a
        step = stride // a if outputs > 1 else 1
        if (second - b) // step + 1 == outputs:
            return a, b
    return None


def avg_pool_levels(attrs: dict, spatial) -> list[dict] | None:
    """The attrs of the two AvgPool levels computing an AvgPool of ``attrs`` over an input of
    H x W ``spatial``; None when a side beyond the limit does not factor exactly."""
    first, second, strides = [], [], []
    for axis in (0, 1):
        k, s, size = attrs["kernel"][axis], attrs["strides"][axis], spatial[axis]
        pb, pe = attrs["pads_begin"][axis], attrs["pads_end"][axis]
        outputs = (size + pb + pe - k) // s + 1
        if k <= MAX_KERNEL:
            first.append(1)
            second.append(k)
            strides.append(s)
            continue
        if pb or pe:
            return None
        ab = _factor(k, s, size, outputs)
        if ab is None:
            return None
        first.append(ab[0])
        second.append(ab[1])
        strides.append(s // ab[0] if outputs > 1 else 1)
    return [{**attrs, "kernel": tuple(first), "strides": tuple(first),
             "pads_begin": (0, 0), "pads_end": (0, 0)},
            {**attrs, "kernel": tuple(second), "strides": tuple(strides)}]
