"""Static data races: two units touching the same bytes, one of them writing, unordered.

What a unit touches (``unit_accesses``): a DMA reads its source and writes its
destination; an ACT SHAVE task reads its inputs and writes its outputs; a DPU
variant reads its inputs, weights and bias (whole: the window a variant needs
is not modelled here, which can only add races) and writes its box of the
output.  An operand becomes a *footprint* in its root buffer: a box of
elements, per root dim an arithmetic progression (start, step, count), so
views, slices with steps and DPU variant boxes are exact.  A dynamic buffer
is touched whole: its data at the upper bounds and, for a CMX buffer, the
shape metadata after it (the producer writes the dims, consumers read them).

Two footprints of one root share an element iff they share one in every dim,
and the progressions of a dim meet iff a congruence has a solution in range,
so the test is exact and costs O(rank).

The sweep takes the units in topological order of their starts, so an earlier
access can only happen before a later one, never after.  Each root buffer is
"painted" over byte hulls (``liveness.Painter``): a segment keeps the
accesses that may still race with a later one.  A dense write retires the
accesses it is ordered after (any later conflict with them is a conflict with
that write, or is ordered after both); a dense read retires the reads it is
ordered after.  A strided footprint is painted as its dense runs (a block of
rows of an NCHW tensor: one run per channel plane), each touched whole, so it
retires there too; otherwise a tensor written in row blocks, every block's
hull spanning nearly all of it, would keep every block live.  A pipeline that
reuses a buffer thousands of times keeps a few live accesses per buffer and
the sweep stays near-linear.  Races between
two different buffers sharing bytes are the overlap rule's (``liveness``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from math import gcd

from vpuc.analysis.liveness import Painter
from vpuc.analysis.schedule import Schedule
from vpuc.ir.module import Buffer
from vpuc.ir.symbols import Region, SymbolTable, buffer_footprint, shape_meta_offset
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask

Box = tuple[tuple[int, int, int], ...]   # per root dim: (start, step, count)


@dataclass(slots=True)
class Footprint:
    """The bytes an operand covers in its root buffer."""

    root: Buffer
    box: Box | None        # None: the whole buffer (a dynamic one)
    lo: int                # byte hull [lo, hi) from the root's start
    hi: int
    dense: bool            # every byte of the hull is touched


@dataclass(slots=True)
class Access:
    unit: int
    write: bool
    operand: str           # the buffer or view the task names
    footprint: Footprint


@dataclass(slots=True)
class Race:
    first: Access          # earlier in topological order
    second: Access
    lo: int                # the bytes both touch: [lo, hi) of the root
    hi: int


def unit_accesses(task, variant: int | None) -> list[tuple[str, bool, tuple | None]]:
    """(operand, writes, DPU variant box or None) for each operand of a unit, reads first."""
    if isinstance(task, DmaTask):
        return [(task.src, False, None), (task.dst, True, None)]
    if isinstance(task, DpuTask):
        scale = task.quant.scale if task.quant is not None else None
        reads = [(n, False, None) for n in (*task.inputs, task.weights, task.bias, scale)
                 if n is not None]
        v = task.variants[variant]
        # each output copy on another tile is written over the same box (same shape)
        return reads + [(out, True, (v.start, v.end))
                        for out in (task.output, *task.broadcast_outputs)]
    if isinstance(task, SwKernelTask):
        return ([(b.buffer, False, None) for b in task.inputs]
                + [(b.buffer, True, None) for b in task.outputs])
    return []


def region_box(region: Region) -> Box | None:
    """The region's elements as a box of its (static, dense) root; None for a dynamic root."""
    root = region.root.type
    if not root.is_static or region.type.rank != root.rank:
        return None
    bits = root.elem.bits
    strides = root.dense_strides()
    index = region.byte_offset * 8 // bits
    starts = [0] * root.rank
    for dim in root.order.perm:            # outermost first: mixed-radix digits
        starts[dim], index = divmod(index, strides[dim])
    return tuple((start, max(1, region.strides_bits[d] // (strides[d] * bits)), count)
                 for d, (start, count) in enumerate(zip(starts, region.type.bound_shape)))


def variant_box(box: Box, start: tuple, end: tuple) -> Box | None:
    """The part of an output box a DPU variant writes ((x, y, z) = (W, H, C), or (-, M, N))."""
    axes = {3: 0, 2: 1, 1: 2} if len(box) == 4 else {0: 1, 1: 2} if len(box) == 2 else None
    if axes is None:
        return None
    out = list(box)
    for dim, axis in axes.items():
        s, step, count = box[dim]
        a, b = start[axis], end[axis]
        if not 0 <= a <= b < count:
            return None                     # reported by the DPU rules; keep the whole output
        out[dim] = (s + a * step, step, b - a + 1)
    return tuple(out)


def make_footprint(root: Buffer, box: Box | None) -> Footprint:
    if box is None:
        return Footprint(root, None, 0, buffer_footprint(root), True)
    strides = root.type.dense_strides()
    size = root.type.elem.nbytes
    first = sum(s * st for (s, _, _), st in zip(box, strides))
    last = sum((s + (c - 1) * t) * st for (s, t, c), st in zip(box, strides))
    elements = 1
    for _, _, c in box:
        elements *= c
    lo, hi = first * size, (last + 1) * size
    return Footprint(root, box, lo, hi, hi - lo == elements * size)


# Past this many dense runs a strided footprint is painted as one hull: painting
# costs a split per run, and so fine a stride rarely repeats thousands of times.
MAX_RUNS = 256


def dense_runs(fp: Footprint) -> list[tuple[int, int]]:
    """The footprint as sorted disjoint byte ranges, each touched whole.

    A block of rows of an NCHW tensor is one run per channel plane: painting
    the runs, not the hull, lets later blocks retire earlier ones.  A footprint
    with more than ``MAX_RUNS`` runs (or sub-byte elements) is its hull."""
    if fp.dense or fp.box is None or fp.root.type.elem.bits % 8:
        return [(fp.lo, fp.hi)]
    kind = fp.root.type
    strides, shape, size = kind.dense_strides(), kind.bound_shape, kind.elem.nbytes
    run, outer = 1, []                     # elements per run; dims enumerating runs
    perm = kind.order.perm
    for depth in range(len(perm) - 1, -1, -1):
        dim = perm[depth]
        start, step, count = fp.box[dim]
        if run == strides[dim] and (count == 1 or step == 1):
            run = count * strides[dim]     # extends the contiguous run
            if count == shape[dim]:
                continue
            outer = [perm[d] for d in range(depth)]
            base = start * strides[dim]
            break
        outer = [perm[d] for d in range(depth + 1)]
        base = 0
        break
    else:
        return [(fp.lo, fp.hi)]
    total = 1
    for dim in outer:
        total *= fp.box[dim][2]
    if total > MAX_RUNS:
        return [(fp.lo, fp.hi)]
    offsets = [base]
    for dim in outer:                      # outermost first: offsets stay sorted
        start, step, count = fp.box[dim]
        offsets = [o + (start + i * step) * strides[dim] for o in offsets for i in range(count)]
    offsets.sort()
    return [(o * size, (o + run) * size) for o in offsets]


def shared_bytes(a: Footprint, b: Footprint) -> tuple[int, int] | None:
    """The byte hull of the elements both footprints touch, or None if they share none."""
    if a.hi <= b.lo or b.hi <= a.lo:
        return None
    if a.box is None or b.box is None:
        return max(a.lo, b.lo), min(a.hi, b.hi)
    common = []
    for p, q in zip(a.box, b.box):
        meet = _progressions_meet(p, q)
        if meet is None:
            return None
        common.append(meet)
    both = make_footprint(a.root, tuple(common))
    return both.lo, both.hi


def _progressions_meet(p: tuple[int, int, int], q: tuple[int, int, int]) -> tuple | None:
    """{s1 + i·t1} ∩ {s2 + j·t2} (within their counts) as (start, step, count), or None."""
    (s1, t1, c1), (s2, t2, c2) = p, q
    lo, hi = max(s1, s2), min(s1 + (c1 - 1) * t1, s2 + (c2 - 1) * t2)
    if lo > hi:
        return None
    if t1 == t2 == 1:
        return lo, 1, hi - lo + 1
    g = gcd(t1, t2)
    if (s2 - s1) % g:
        return None
    # x = s1 + t1·k with t1·k ≡ s2 - s1 (mod t2): solve (t1/g)·k ≡ (s2 - s1)/g (mod t2/g).
    m = t2 // g
    k = (s2 - s1) // g * pow(t1 // g % m, -1, m) % m if m > 1 else 0
    step = t1 // g * t2
    x = s1 + t1 * k
    x += -(-(lo - x) // step) * step        # the first common value >= lo
    if x > hi:
        return None
    return x, step, (hi - x) // step + 1


def metadata_bytes(root: Buffer) -> tuple[int, int] | None:
    """Where a dynamic CMX buffer's shape metadata sits, or None."""
    end = buffer_footprint(root)
    return (shape_meta_offset(root), end) if end > root.type.nbytes else None


class _Footprints:
    """Operand name (and DPU variant box) → footprint, resolved once."""

    def __init__(self, symbols: SymbolTable) -> None:
        self.symbols = symbols
        self.by_name: dict[str, Footprint | None] = {}
        self.by_variant: dict[tuple, Footprint | None] = {}

    def of(self, name: str, box: tuple | None) -> Footprint | None:
        whole = self.by_name.get(name, False)
        if whole is False:
            region = self.symbols.region(name)
            whole = None if region is None else make_footprint(region.root, region_box(region))
            self.by_name[name] = whole
        if box is None or whole is None or whole.box is None:
            return whole
        key = (name, box)
        found = self.by_variant.get(key, False)
        if found is False:
            part = variant_box(whole.box, *box)
            found = self.by_variant[key] = whole if part is None else make_footprint(whole.root, part)
        return found


class _RootAccesses:
    """The accesses of one root buffer, as columns: a tuple each was most of the
    check's memory at 100k tasks.  ``flags``: bit 0 writes, bit 1 a DPU variant's box."""

    __slots__ = ("units", "operands", "flags")

    def __init__(self) -> None:
        self.units = array("i")
        self.operands: list[str] = []
        self.flags = array("b")


def find_races(schedule: Schedule, symbols: SymbolTable) -> list[Race]:
    """Unordered pairs of units that touch a shared byte of a buffer, one writing.

    Every unit that races is reported with at least one partner (the sweep
    retires accesses that later ones stand for), each pair once."""
    # Group the operands by root; only roots that some unit writes, and that two units
    # touch, can race.  Those are then swept in topological order of the units' starts.
    by_root: dict[str, _RootAccesses] = {}
    written: set[str] = set()
    roots: dict[str, str | None] = {}
    for unit in schedule.units:
        for operand, write, box in unit_accesses(unit.task, unit.variant):
            root = roots.get(operand, False)
            if root is False:
                region = symbols.region(operand) if symbols.is_buffer_like(operand) else None
                root = roots[operand] = None if region is None else region.root.name
            if root is None:
                continue
            columns = by_root.get(root)
            if columns is None:
                columns = by_root[root] = _RootAccesses()
            columns.units.append(unit.index)
            columns.operands.append(operand)
            columns.flags.append(write | (box is not None) << 1)
            if write:
                written.add(root)
    del roots
    races: list[Race] = []
    reported: set[tuple[int, int]] = set()
    topo = schedule.topo_pos
    tasks = schedule.units
    for name in written:
        columns = by_root.pop(name)
        units = columns.units
        if all(u == units[0] for u in units):
            continue
        # Each operand belongs to one root: its footprints are needed for this root only.
        footprints = _Footprints(symbols)
        accesses = []
        for i in sorted(range(len(units)), key=lambda i: topo[2 * units[i]]):  # stable: reads first
            unit, flags, operand = units[i], columns.flags[i], columns.operands[i]
            box = None
            if flags & 2:
                variant = tasks[unit]
                v = variant.task.variants[variant.variant]
                box = (v.start, v.end)
            fp = footprints.of(operand, box)
            if fp is not None and fp.hi > fp.lo:
                accesses.append(Access(unit, bool(flags & 1), operand, fp))
        _sweep(schedule, accesses, races, reported)
    races.sort(key=lambda r: (r.second.unit, r.first.unit))
    return races


def _sweep(schedule: Schedule, accesses: list[Access], races: list[Race],
           reported: set[tuple[int, int]]) -> None:
    painter = Painter()
    happens_before = schedule.happens_before
    # Accesses that all cover the same bytes (a buffer used whole) need no painting.
    hull = (accesses[0].footprint.lo, accesses[0].footprint.hi) if accesses else None
    uniform = all((a.footprint.lo, a.footprint.hi) == hull for a in accesses)
    runs_of: dict[int, list[tuple[int, int]]] = {}
    cell: list[Access] = []
    for access in accesses:
        fp, unit, write = access.footprint, access.unit, access.write
        ordered: dict[int, bool] = {}
        if uniform:
            live, cell = cell, []
            _meet(access, live, cell, fp.dense, ordered, happens_before, races, reported)
            cell.append(access)
            continue
        runs = runs_of.get(id(fp))
        if runs is None:
            runs = runs_of[id(fp)] = dense_runs(fp)
        # Each run is painted on its own: the access touches all of it, so it may retire
        # what it is ordered after there, as a dense footprint does everywhere.
        dense = fp.dense or len(runs) > 1
        for lo, hi in runs:
            cell = []
            lists = [occupants for occupants, _, _ in painter.paint(lo, hi, cell)]
            if len(lists) == 1:
                live = lists[0]
            else:   # segments share accesses: each once
                live = list({id(a): a for occupants in {id(o): o for o in lists}.values()
                             for a in occupants}.values())
            _meet(access, live, cell, dense, ordered, happens_before, races, reported)
            cell.append(access)


def _meet(access: Access, live: list[Access], cell: list[Access], dense: bool,
          ordered: dict[int, bool], happens_before, races: list[Race],
          reported: set[tuple[int, int]]) -> None:
    """Report ``access`` against the live accesses of its bytes; keep those it cannot retire."""
    unit, write = access.unit, access.write
    for other in live:
        before = other.unit == unit
        if not before:
            before = ordered.get(other.unit)
            if before is None:
                before = ordered[other.unit] = happens_before(other.unit, unit)
            if not before and (other.write or write):
                pair = (other.unit, unit)
                if pair not in reported:
                    both = shared_bytes(other.footprint, access.footprint)
                    if both is not None:
                        reported.add(pair)
                        races.append(Race(other, access, *both))
        if not (before and dense and (write or not other.write)):
            cell.append(other)     # not retired: it may still race with a later access
