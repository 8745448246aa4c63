"""The CMX room for values kept between segments, measured on a lowered program
(``--schedule default``).

``resident.resident_room`` leaves values kept in CMX (``resident.py``) what a tile's CMX
holds beside a segment's blocks and the next segment's early constants, counting the
blocks at the whole ``cmx_budget`` (half the tile's CMX on NPU37XX).  Most segments use
less: ResNet-50's stage-2 values (28 x 28 x 512 in f16, 802,816 bytes) missed the
786,432-byte estimate by 16 KB and went through DDR, each stored once and loaded twice (by
the next 1x1 convolution and by the residual Add) while stage 4's weights wanted the DDR.

``measured_program`` takes the program lowered with that estimate (``Lowering``) and
measures, for each segment and tile, the peak of the bytes of CMX buffers live in the
segment's window (``segment_peaks``: each buffer live from its first user's start to its
last user's end in the barrier schedule's topological order; the segment's own buffers and
its neighbours' and early constants beside them, not the values kept in CMX).  The room at
that segment is the tile's CMX less that peak and the early constants' reserve
(``schedule_room.EARLY_CMX_BYTES``), never below the estimate (``measured_rooms``; a
segment fused into the layer before it takes that layer's).  The block is lowered again
with these rooms when they keep more values in CMX, the values they add pinned at the
bottom of their tiles' CMX (``pin_low``: placed where each first fits, they split the CMX
the blocks fill around them into pieces too small for a block's buffers).  The measure is a
sweep over one linear order, not allocate-cmx's first fit, so the trial decides: the new
program is taken only when ``schedule_deps.relax_gates``' trial places it keeping rule 3
for as many segments as before (a trial that fits only by giving overlap up everywhere
cost ResNet-50 more than the DDR copies saved: 5,027,039 cycles against 4,718,213) and no
two pinned values share bytes while both live (``pinned_conflicts``); else one added
value near the first buffer its trials found no room for (and ``first``'s did not) stays
in DDR, the one whose store and loads move the fewest bytes, and it is lowered again
(``_crowding``).

ResNet-50 (``bench/zoo_schedule_bench.py``): 4,718,213 cycles; 4,613,764 with three of its
six stage-2 values kept in CMX this way when every added value near a failure stayed in
DDR; 4,576,712 with five of them and the stem's pooled output (only stage 2's first
block's conv3 output, read by its Add alone, left in DDR).

Expects: lowered, parsed modules whose buffer names start with their segment's prefix.
Guarantees: a program it returns keeps every value the first one kept, allocate-cmx's
trial placed it, and its pinned buffers overlap no other buffer live with them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from vpuc.analysis.liveness import placed_cmx_conflicts, unit_operands
from vpuc.analysis.schedule import Schedule
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable

# Lowerings with the measured room, each keeping in DDR the added values near where
# allocate-cmx's trial found no room, and how near (segments: a segment overlaps the two
# before it, schedule_deps rule 3).
MEASURED_TRIALS = 3
MEASURED_REACH = 2


@dataclass
class Lowering:
    """One lowering of a block: the parsed program, the values it keeps in CMX, the CMX
    placement of ``schedule_deps``' trial (None without one), the segments' (prefix, gate)
    in order, the trial's ``outcome`` (``relax_gates``), each value kept in CMX's segment
    prefixes from its producer to its last reader and how many segments read it."""
    module: Module
    kept: list[str]
    placement: dict[str, int] | None
    order: list[tuple[str, str | None]]
    outcome: dict
    spans: dict[str, list[str]]
    reads: dict[str, int]


def measured_program(first: Lowering, arch, relower: Callable[[dict, set[str]], Lowering | None]
                     ) -> Lowering | None:
    """A lowering keeping more values in CMX than ``first`` by the room measured on it, or
    None (module docstring); ``relower(peaks, exclude)``: the block lowered again with those
    peaks (``segment_peaks``), the values ``exclude`` names in DDR, None when it keeps no
    value beyond ``first``'s."""
    prefixes = [f"{key}." for key, _ in first.order if key]
    position = {p: i for i, p in enumerate(prefixes)}
    peaks = segment_peaks(first.module, arch, prefixes)
    exclude: set[str] = set()
    for _ in range(MEASURED_TRIALS):
        again = relower(peaks, exclude)
        if again is None:
            return None
        added = [name for name in again.kept if name not in first.kept]
        if again.placement is not None \
                and again.outcome.get("two_back", 0) >= first.outcome.get("two_back", 0):
            # values pinned side by side whose segments the schedule overlaps after all
            clash = pinned_conflicts(again.module, arch, added)
            if not clash:
                return again
            exclude |= clash
            continue
        exclude |= _crowding(again, added, first.outcome["failed"], position)
    return None


def _crowding(again: Lowering, added: list[str], usual: list[str],
              position: dict[str, int]) -> set[str]:
    """The added values to keep in DDR after ``again``'s trial failed: of those near the
    first buffer it found no room for that ``first``'s trial did not (``usual``), the one
    whose DDR transfers save the fewest bytes (its bytes times its store and loads); every
    added value near any failure when none is near that one."""
    sizes = {b.name: b.type.nbytes for b in again.module.buffers if b.name in added}

    def near(failed: str) -> list[str]:
        at = prefix_of(failed or "", set(position))
        return [name for name in added if name == failed
                or _reaches(again.spans.get(name, []), at, position)]

    fresh = [f for f in again.outcome["failed"] if f not in usual]
    if fresh and near(fresh[0]):
        return {min(near(fresh[0]), key=lambda name: (
            sizes.get(name, 0) * (1 + again.reads.get(name, 0)), -added.index(name)))}
    return {name for failed in again.outcome["failed"] for name in near(failed)} \
        or set(added)


def _reaches(span: list[str], prefix: str | None, position: dict[str, int]) -> bool:
    """Whether segment ``prefix`` lies within ``MEASURED_REACH`` segments of ``span``."""
    at = [position[p] for p in span if p in position]
    return prefix in position and bool(at) \
        and min(at) - MEASURED_REACH <= position[prefix] <= max(at) + MEASURED_REACH


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


def value_reads(segments, kept: set[str]) -> dict[str, int]:
    """Value kept in CMX -> how many segments read it: with its one store, the whole-value
    DDR transfers it saves (``segments``: ``schedule_layouts.SegmentValues``)."""
    reads: dict[str, int] = {}
    for seg in segments:
        for name in set(seg.reads) & kept:
            reads[name] = reads.get(name, 0) + 1
    return reads


def pin_low(module: Module, names: list[str], spans: dict[str, list[str]],
            alignment: int) -> None:
    """The buffers of the values ``names`` (kept in CMX by the measured room, in producer
    order) at the bottom of their tiles' CMX, each at the lowest offset no earlier one of
    them whose segments (``spans``) meet its own takes: long-lived buffers placed where
    each first fits, by allocate-cmx, split the CMX the segments' blocks fill around them
    (ResNet-50's stage 2)."""
    buffers = {b.name: b for b in module.buffers}
    placed: list[tuple[int, set[str], int, int]] = []      # (tile, segments, lo, hi)
    for name in names:
        b = buffers.get(name)
        if b is None or b.kind is not BufferKind.CMX:
            continue
        segs = set(spans.get(name, ()))
        offset = 0
        for tile, other, lo, hi in sorted(placed, key=lambda p: p[2]):
            if tile == b.tile and other & segs and lo < offset + b.type.nbytes:
                offset = max(offset, -(-hi // alignment) * alignment)
        b.offset = offset
        placed.append((b.tile, segs, offset, offset + b.type.nbytes))


def pinned_conflicts(module: Module, arch, names: list[str]) -> set[str]:
    """The values of ``names`` (pinned by ``pin_low``) that share bytes with another
    buffer placed before allocate-cmx (another of them, or a lead chunk ``schedule_lead``
    pins at the top) while both may be live in ``module``'s schedule as it now stands (two
    segments apart in order may still overlap in time: ``schedule_deps`` rule 3);
    allocate-cmx places the others around all of them but never checks them together."""
    return {name for c in placed_cmx_conflicts(module, Schedule(module, arch))
            for name in (c.earlier.name, c.later.name) if name in names}
