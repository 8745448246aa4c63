"""The CMX room for values kept between segments, measured on a lowered program
(``--schedule default``).

``resident.resident_room`` leaves values kept in CMX (``resident.py``) what a tile's CMX
holds beside a segment's blocks and the next segment's early constants, counting the
blocks at the whole ``cmx_budget`` (half the tile's CMX on NPU37XX).  Most segments use
less: ResNet-50's stage-2 layers keep their blocks' peak well under it, yet its 802,816-byte
values (28 x 28 x 512 in f16) missed the 786,432-byte estimate by 16 KB and went through
DDR, each stored once and loaded twice (by the next 1x1 convolution and by the residual
Add) while stage 4's 51 MB of weights wanted the DDR too.

``measured_rooms`` reads a program lowered with that estimate: for each segment and tile,
the peak of the bytes its own CMX buffers (block slots, weights, and anything else named
under its prefix) hold at once, each buffer live from its first user's start to its last
user's end in the barrier schedule's topological order (``Schedule.topo_pos``).  The room
at that segment is the tile's CMX less that peak and the early constants' reserve
(``schedule_room.EARLY_CMX_BYTES``, which the prefetch may always take).  A segment the
program does not show by its own prefix (one fused into the layer before it,
``fuse_epilogue``) takes the conservative room.

``lower_graph.lower_block`` lowers again with these rooms when they keep more values in
CMX, and keeps that program only when allocate-cmx's trial places it: the measure is a
sweep over one linear order, not the allocator's first fit, so the trial decides.

Expects: a lowered, parsed module whose buffer names start with their segment's prefix.
Guarantees: nothing here changes the module.
"""

from __future__ import annotations

from bisect import bisect_right

from vpuc.analysis.liveness import unit_operands
from vpuc.analysis.schedule import Schedule
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable


def segment_peaks(module: Module, arch, prefixes: list[str]) -> dict[tuple[str, int], int]:
    """(segment prefix, tile) -> the peak bytes of that segment's own CMX buffers live at
    once on the tile (module docstring); ``prefixes``: the segments' task-label prefixes
    (``seg.`` form).  Buffers kept across segments (resident values, named without a
    segment prefix) count for none."""
    known = set(prefixes)
    schedule = Schedule(module, arch)
    symbols = SymbolTable(module)
    span: dict[str, tuple[int, int]] = {}        # root buffer -> (first start, last end)
    for unit in schedule.units:
        begin, end = schedule.topo_pos[2 * unit.index], schedule.topo_pos[2 * unit.index + 1]
        for name in unit_operands(unit.task):
            region = symbols.region(name) if symbols.is_buffer_like(name) else None
            if region is None or region.kind is not BufferKind.CMX:
                continue
            root = region.root.name
            lo, hi = span.get(root, (begin, end))
            span[root] = (min(lo, begin), max(hi, end))
    # per tile: every buffer a segment owns as (first start, last end, bytes); per segment
    # and tile the window from its first buffer's start to its last one's end
    owned: dict[int, list[tuple[int, int, int]]] = {}
    window: dict[tuple[str, int], tuple[int, int]] = {}
    for buffer in module.buffers:
        if buffer.kind is not BufferKind.CMX or buffer.name not in span:
            continue
        prefix = prefix_of(buffer.name, known)
        if prefix is None:
            continue
        lo, hi = span[buffer.name]
        owned.setdefault(buffer.tile, []).append((lo, hi, buffer.type.nbytes))
        key = (prefix, buffer.tile)
        a, b = window.get(key, (lo, hi))
        window[key] = (min(a, lo), max(b, hi))
    # live bytes per tile after each position where some buffer starts or ends
    steps: dict[int, tuple[list[int], list[int]]] = {}
    for tile, items in owned.items():
        changes = sorted([(lo, n) for lo, _, n in items] + [(hi + 1, -n) for _, hi, n in items])
        positions, live, total = [], [], 0
        for pos, delta in changes:
            total += delta
            if positions and positions[-1] == pos:
                live[-1] = total
            else:
                positions.append(pos)
                live.append(total)
        steps[tile] = (positions, live)
    peaks: dict[tuple[str, int], int] = {}
    for (prefix, tile), (lo, hi) in window.items():
        positions, live = steps[tile]
        first = max(0, bisect_right(positions, lo) - 1)
        last = bisect_right(positions, hi)
        peaks[(prefix, tile)] = max(live[first:last], default=0)
    return peaks


def prefix_of(name: str, known: set[str]) -> str | None:
    """The longest segment prefix ``name`` starts with (value names may hold dots)."""
    cut = [i + 1 for i, ch in enumerate(name) if ch == "." and name[:i + 1] in known]
    return name[:cut[-1]] if cut else None


def measured_rooms(peaks: dict[tuple[str, int], int], prefixes: list[str], tiles: int,
                   cmx_bytes: int, reserve: int, fallback: int) -> list[list[int]]:
    """Segment index -> tile -> the CMX bytes values kept in CMX may hold during it: the
    tile's CMX less the segment's measured peak (``segment_peaks``) and ``reserve`` (the
    early constants'), never below ``fallback`` (the conservative room), which a segment
    with no buffers of its own (fused into another) takes; ``prefixes[s]``: segment s's."""
    rooms = []
    for prefix in prefixes:
        seen = [(prefix, t) in peaks for t in range(tiles)]
        rooms.append([max(fallback, cmx_bytes - peaks[(prefix, t)] - reserve)
                      if any(seen) and (prefix, t) in peaks
                      else (max(fallback, cmx_bytes - reserve) if any(seen) else fallback)
                      for t in range(tiles)])
    return rooms


def value_spans(segments, prefixes: list[str], kept: set[str]) -> dict[str, list[str]]:
    """Value kept in CMX -> the prefixes of the segments from its first writer to its last
    reader (``segments``: ``schedule_layouts.SegmentValues``, ``prefixes[s]``: segment s's)."""
    touch: dict[str, list[int]] = {}
    for s, seg in enumerate(segments):
        for name in [*seg.writes, *seg.reads]:
            if name in kept:
                touch.setdefault(name, []).append(s)
    return {name: list(dict.fromkeys(prefixes[s] for s in range(min(at), max(at) + 1)))
            for name, at in touch.items()}
