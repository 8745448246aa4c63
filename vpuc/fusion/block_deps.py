"""Segments pipelined block by block (``--schedule default``): a load waits for the stores
it reads, not for the whole previous segment.

``lower-graph`` gates each segment's first loads on its predecessor's last store
(``<prefix>finished``), so a layer starts only once the one before has ended, even when
its first block needs just the first rows of that layer's output (a transformer's MLP:
the first GELU block needs the first 48 tokens of FC1, FC2's first rows the first GELU
block).  Here every DMA that loads a value the program computes (a ``ddr`` or ``output``
buffer, a value kept in CMX between segments (``resident.py``), or a network input) into CMX and waits on a gate waits instead on the barriers
of the stores that wrote the bytes it reads (exact strided footprints,
``vpuc/analysis/races.py``), so its segment's first blocks run beside the previous
segment's last ones.  Loads whose bytes no store wrote (a network input) just stop
waiting; they still sit in their channel's FIFO after every earlier task.

- A store that updates no barrier gets one of its own (``<store label>.written``);
  several stores of one segment that include its last store (the one updating its gate,
  which its channel runs after every other store of the segment) are waited on through
  that gate alone.
- Overlapping segments hold their CMX at once, which allocate-cmx must fit: a segment is
  pipelined only when its CMX buffers and those of the segments it may overlap (its
  predecessor, and the one before that when the predecessor is pipelined too) fit a
  tile's CMX with the schedule's prefetch room to spare.
- Tasks other than such loads keep their gates, and so does every segment's ``finished``
  barrier its meaning (its last store, after all its work).

Expects: a freshly lowered module (after ``schedule.overlap``) whose gate barriers are
named in ``gates``, DDR values written only by DMA.  Guarantees: every load waits (through
barriers) for every store of bytes it reads; every added wait is on a barrier updated by
tasks earlier in the DMA list, so the channels' FIFOs cannot deadlock on it.
"""

from __future__ import annotations

from vpuc.analysis.races import make_footprint, region_box, shared_bytes
from vpuc.fusion.resident import resident_use, segment_order, shared_buffers
from vpuc.ir.module import Barrier, BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor, SwKernelTask

COMPUTED = (BufferKind.DDR, BufferKind.OUTPUT)
READ_EARLY = COMPUTED + (BufferKind.INPUT,)


def _prefix_of(name: str, prefixes: list[str]) -> str:
    """The longest segment prefix ``name`` starts with; "" for the last segment, which
    updates no gate (its names carry a prefix too, but none of ``prefixes``)."""
    best = ""
    for p in prefixes:
        if name.startswith(p) and len(p) > len(best):
            best = p
    return best


def _cmx_use(module: Module, prefixes: list[str]) -> dict[tuple[str, int], int]:
    """(segment prefix, tile) -> the bytes of the segment's CMX buffers."""
    used: dict[tuple[str, int], int] = {}
    for b in module.buffers:
        if b.kind is BufferKind.CMX:
            p = _prefix_of(b.name, prefixes)
            used[(p, b.tile)] = used.get((p, b.tile), 0) + b.type.nbytes
    return used


def pipeline_segments(module: Module, gates: set[str], cmx_bytes: int, reserve: int) -> int:
    """Let loads of computed values wait on the stores they read (module docstring);
    ``reserve``: the CMX bytes per tile kept for the schedule's prefetched constants.
    Returns the number of loads changed."""
    gate_list = sorted(g for g in gates if g.endswith("finished"))
    prefixes = [g[:-len("finished")] for g in gate_list]
    symbols = SymbolTable(module)
    dma_lists = [tl for tl in module.task_lists if tl.executor is Executor.DMA]
    if not prefixes:
        return 0
    others_write = {symbols.region(name).root.name for name in _compute_outputs(module)
                    if symbols.region(name) is not None}
    order = _segment_order(module, prefixes)
    used = _cmx_use(module, prefixes)
    own_prefix = lambda name: _prefix_of(name, prefixes)            # noqa: E731
    seg_order = segment_order(module, own_prefix)
    for key, nbytes in resident_use(module, seg_order, own_prefix).items():
        used[key] = used.get(key, 0) + nbytes                 # values kept in CMX meanwhile
    index = {p: i for i, p in enumerate(seg_order)}
    resident = set(shared_buffers(module, lambda label: index.get(own_prefix(label))))

    def computed(region, kinds) -> bool:
        return region.kind in kinds or region.root.name in resident
    tiles = sorted({tile for _, tile in used})
    barrier_names = {b.name for b in module.barriers}
    updaters: dict[str, int] = {}
    for tl in module.task_lists:
        for t in tl.tasks:
            for u in t.updates:
                updaters[u] = updaters.get(u, 0) + 1

    def fits(prefix: str, pipelined: set[str]) -> bool:
        k = order.index(prefix) if prefix in order else -1
        if k <= 0:
            return False
        group = [prefix, order[k - 1]]
        if order[k - 1] in pipelined and k >= 2:
            group.append(order[k - 2])
        return all(sum(used.get((p, t), 0) for p in group) + reserve <= cmx_bytes
                   for t in tiles)

    pipelined: set[str] = set()
    for prefix in order:
        if fits(prefix, pipelined):
            pipelined.add(prefix)
    changed = 0
    for tl in dma_lists:
        writers: dict[str, list] = {}           # root -> [(store, footprint, segment prefix)]
        for task in tl.tasks:
            if not isinstance(task, DmaTask):
                continue
            src, dst = symbols.region(task.src), symbols.region(task.dst)
            if src is None or dst is None:
                continue
            own = _prefix_of(task.label or "", prefixes)
            if own in pipelined and dst.kind is BufferKind.CMX and computed(src, READ_EARLY) \
                    and src.root.name not in others_write and dst.root.name not in resident:
                # every load of the segment: the later blocks' were ordered after the
                # gate only through the first blocks'
                fp = make_footprint(src.root, region_box(src))
                waits = _store_waits(module, writers.get(src.root.name, []), fp, gates,
                                     barrier_names, updaters)
                kept = tuple(w for w in task.waits if w not in gate_list)
                task.waits = kept + tuple(w for w in waits if w not in kept)
                changed += 1
            if computed(dst, COMPUTED):
                writers.setdefault(dst.root.name, []).append(
                    (task, make_footprint(dst.root, region_box(dst)),
                     _prefix_of(task.label or "", prefixes)))
    _drop_unwaited(module, gates)
    return changed


def _drop_unwaited(module: Module, gates: set[str]) -> None:
    """Gates no task waits on any more (every load of the next segment waits on the stores
    it reads): their updates and declarations go, as a barrier nothing waits on is noise."""
    waited = {w for tl in module.task_lists for t in tl.tasks for w in _all_waits(t)}
    gone = {g for g in gates if g not in waited}
    if not gone:
        return
    for tl in module.task_lists:
        for t in tl.tasks:
            if gone & set(t.updates):
                t.updates = tuple(u for u in t.updates if u not in gone)
    module.barriers = [b for b in module.barriers if b.name not in gone]
    gates -= gone


def _all_waits(task) -> tuple[str, ...]:
    """A task's waits, its DPU variants' too."""
    out = tuple(task.waits)
    for v in getattr(task, "variants", ()) or ():
        out += tuple(v.waits)
    return out


def _compute_outputs(module: Module) -> list[str]:
    """The buffers and views DPU and ACT SHAVE tasks write."""
    out = []
    for tl in module.task_lists:
        for t in tl.tasks:
            if isinstance(t, DpuTask):
                out.append(t.output)
            elif isinstance(t, SwKernelTask):
                out += [b.buffer for b in t.outputs]
    return out


def _segment_order(module: Module, prefixes: list[str]) -> list[str]:
    """Segment prefixes in the order their first DMA appears."""
    seen: list[str] = []
    for tl in module.task_lists:
        if tl.executor is not Executor.DMA:
            continue
        for t in tl.tasks:
            p = _prefix_of(t.label or "", prefixes)
            if p not in seen:
                seen.append(p)
    return seen


def _store_waits(module: Module, stores: list, fp, gates: set[str], names: set[str],
                 updaters: dict[str, int]) -> list[str]:
    """Barriers that are up once every store in ``stores`` sharing bytes with ``fp`` is."""
    hit = [(t, p) for t, sfp, p in stores if shared_bytes(sfp, fp) is not None]
    finished = {p for t, p in hit if p and f"{p}finished" in t.updates}
    waits: list[str] = []
    for task, prefix in hit:
        if prefix in finished:
            name = f"{prefix}finished"
        else:
            own = [u for u in task.updates if updaters.get(u) == 1]
            name = own[0] if own else None
            if name is None:
                name = f"{task.label}.written"
                if name not in names:
                    names.add(name)
                    module.barriers.append(Barrier(name))
                    task.updates = tuple(task.updates) + (name,)
                    updaters[name] = 1
        if name not in waits:
            waits.append(name)
    return waits
