"""Removing any one barrier entry from any example is a compile error or provably harmless.

Level: each example as the compile pipeline sees it before it checks and
places anything, i.e. after ``lower-graph`` for graph examples (task-level
examples as written).  For every ``waits``/``updates`` entry of every task and
DPU variant, a copy without that entry goes through the compile pipeline's
checking part (``verify, allocate-cmx, assign-physical-barriers, verify``).
Either that fails (a compile-time error), or the result is harmless: every
pair of units that touch a common byte, one of them writing, still has a
happens-before path.  That judgement is made here from scratch, not with the
verifier's code: the byte addresses each unit touches are enumerated with
numpy (after allocation, so buffers that share CMX are compared too), and
happens-before is a plain graph search over the barrier graph (FIFO order per
queue, ``end(u) -> barrier -> start(v)``).  A removal that compiles while a
conflicting pair lost its order is a silent wrong result; there must be none.
Conversely, a removal reported as a race must leave a conflicting pair unordered.

Counts on the eight examples (printed with ``-s``): 211 removals, 180 compile
errors (106 of them races, the others barriers waited on but never
updated or buffers sharing CMX while live), 31 harmless, 0 silent wrong results.  With the
race rule switched off, 106 of those removals compile silently into a race.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.ir.tasks import DmaTask, DpuTask, SwKernelTask
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_file

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.vir"))
CHECK = "verify,allocate-cmx,assign-physical-barriers,verify"


def lowered(path: Path):
    module = parse_file(str(path))
    arch = load_arch(module.arch)
    if module.graphs:
        PassManager(parse_pipeline("lower-graph")).run(module, PassContext(arch))
    return module, arch


def removal_sites(module) -> list[tuple]:
    """(holder path, field, entry) for every waits/updates entry of a task or a DPU variant."""
    sites = []
    for li, task_list in enumerate(module.task_lists):
        for ti, task in enumerate(task_list.tasks):
            holders = [((li, ti, None), task)]
            if isinstance(task, DpuTask):
                holders += [((li, ti, vi), v) for vi, v in enumerate(task.variants)]
            for where, holder in holders:
                for field in ("waits", "updates"):
                    sites += [(where, field, k) for k in range(len(getattr(holder, field)))]
    return sites


def without(module, site):
    (li, ti, vi), field, k = site
    mutant = copy.deepcopy(module)
    task = mutant.task_lists[li].tasks[ti]
    holder = task if vi is None else task.variants[vi]
    entries = getattr(holder, field)
    setattr(holder, field, tuple(entries[:k]) + tuple(entries[k + 1:]))
    return mutant


# ------------------------------------------------------------- brute force

def units_of(module, arch, runs):
    """(task, queue key, serial?, waits, updates, [(memory, byte runs, writes)]) in list order."""
    symbols = SymbolTable(module)

    def touch(name, writes, variant=None):
        root, rel = runs(symbols, name, variant)
        if root.kind is BufferKind.CMX and root.offset is not None:
            memory, base = ("cmx", root.tile), root.offset
        elif root.kind is BufferKind.DDR and root.offset is not None:
            memory, base = ("ddr scratch",), root.offset
        else:
            memory, base = ("object", root.name), 0
        return memory, rel + base, writes

    units = []
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, DmaTask):
                units.append((task, ("DMA", task.channel), True, task.waits, task.updates,
                              [touch(task.src, False), touch(task.dst, True)]))
            elif isinstance(task, DpuTask):
                scale = task.quant.scale if task.quant is not None else None  # integer mode
                reads = [touch(n, False) for n in (*task.inputs, task.weights, task.bias, scale)
                         if n is not None]
                for v in task.variants:
                    units.append((task, ("DPU", task.tile), arch.dpus_per_tile == 1,
                                  tuple(task.waits) + tuple(v.waits),
                                  tuple(task.updates) + tuple(v.updates),
                                  reads + [touch(task.output, True, v)]))
            elif isinstance(task, SwKernelTask):
                units.append((task, ("ACT", task.tile), arch.act_shaves_per_tile == 1,
                              task.waits, task.updates,
                              [touch(b.buffer, False) for b in task.inputs]
                              + [touch(b.buffer, True) for b in task.outputs]))
    return units


class ByteRuns:
    """Operand (and DPU variant box) -> (root, its bytes from the root's start as sorted
    [lo, hi) runs), enumerated element by element with numpy.  Placement is not part of
    it, so one instance serves every mutant of an example."""

    def __init__(self) -> None:
        self.cache: dict[tuple, tuple] = {}

    def __call__(self, symbols, name, variant=None):
        key = (name, None if variant is None else (variant.start, variant.end))
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._enumerate(symbols.region(name), variant)
        return symbols.buffers[found[0].name], found[1]

    @staticmethod
    def _enumerate(region, variant):
        root = region.root
        if not root.type.is_static:      # a dynamic buffer: data at bounds and shape metadata
            return root, np.array([[0, buffer_footprint(root)]])
        shape = region.type.bound_shape
        index = np.indices(shape).reshape(len(shape), -1).T
        grid = (index @ np.array(region.strides_bits) // 8 + region.byte_offset).reshape(shape)
        if variant is not None:          # the variant's box: (x, y, z) = (W, H, C) or (-, M, N)
            (x0, y0, z0), (x1, y1, z1) = variant.start, variant.end
            grid = (grid[:, z0:z1 + 1, y0:y1 + 1, x0:x1 + 1] if len(shape) == 4
                    else grid[y0:y1 + 1, z0:z1 + 1])
        size = region.type.elem.nbytes
        addresses = np.unique((grid.reshape(-1, 1) + np.arange(size)).reshape(-1))
        breaks = np.flatnonzero(np.diff(addresses) != 1)
        starts = addresses[np.r_[0, breaks + 1]]
        ends = addresses[np.r_[breaks, addresses.size - 1]] + 1
        return root, np.stack([starts, ends], axis=1)


def runs_meet(a, b) -> bool:
    """Whether two sorted lists of disjoint [lo, hi) runs share a byte."""
    first = np.searchsorted(b[:, 1], a[:, 0], side="right")   # first b run ending after a's start
    inside = first < len(b)
    return bool(np.any(b[first[inside], 0] < a[inside, 1]))


def reachable_starts(units) -> list[set[int]]:
    """For each unit u, the units whose start is reachable from the end of u."""
    n = len(units)
    succ: dict[object, list] = {}                 # nodes: ("s", u), ("e", u), ("b", name)
    producers = {b for *_, updates, _ in units for b in updates}

    def edge(a, b):
        succ.setdefault(a, []).append(b)
    last: dict[tuple, int] = {}
    for u, (_, queue, serial, waits, updates, _) in enumerate(units):
        edge(("s", u), ("e", u))
        for b in updates:
            edge(("e", u), ("b", b))
        for b in waits:
            if b in producers:
                edge(("b", b), ("s", u))
        if queue in last:
            edge(("e" if serial else "s", last[queue]), ("s", u))
        last[queue] = u
    result = []
    for u in range(n):
        seen, stack = {("e", u)}, [("e", u)]
        while stack:
            for t in succ.get(stack.pop(), ()):
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        result.append({v for kind, v in seen if kind == "s"})
    return result


def unordered_conflicts(module, arch, runs) -> list[tuple[str, str]]:
    units = units_of(module, arch, runs)
    reach = reachable_starts(units)
    found = []
    for u in range(len(units)):
        for v in range(u + 1, len(units)):
            if v in reach[u] or u in reach[v]:
                continue
            if any(ma == mb and (wa or wb) and runs_meet(a, b)
                   for ma, a, wa in units[u][5] for mb, b, wb in units[v][5]):
                found.append((units[u][0].label, units[v][0].label))
    return found


# ------------------------------------------------------------- the test

@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_single_barrier_removal_is_an_error_or_harmless(path, record_property):
    module, arch = lowered(path)
    base = copy.deepcopy(module)
    PassManager(parse_pipeline(CHECK)).run(base, PassContext(arch))
    runs = ByteRuns()
    assert unordered_conflicts(base, arch, runs) == [], "the example itself has a race"
    counts = {"removals": 0, "errors": 0, "of which races": 0, "harmless": 0}
    silent, false_races = [], []
    for site in removal_sites(module):
        mutant = without(module, site)
        counts["removals"] += 1
        try:
            PassManager(parse_pipeline(CHECK)).run(mutant, PassContext(arch))
        except VpucError as exc:
            counts["errors"] += 1
            if any(d.message.startswith("race on ") for d in exc.diagnostics):
                counts["of which races"] += 1
                # A reported race is a real one (judged on the unplaced buffers it names).
                if not unordered_conflicts(mutant, arch, runs):
                    false_races.append(site)
            continue
        conflicts = unordered_conflicts(mutant, arch, runs)
        if conflicts:
            silent.append((site, conflicts[:3]))
        else:
            counts["harmless"] += 1
    record_property("barrier_removals", counts)
    print(f"{path.stem}: {counts}, silent wrong results: {len(silent)}")
    assert counts["removals"] > 0
    assert silent == [], f"removals that compile but leave a race: {silent}"
    assert false_races == [], f"races reported where every conflict is ordered: {false_races}"
