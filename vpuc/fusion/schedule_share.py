"""The barriers ``--schedule default``'s early loads share (``schedule.overlap``, decision
2): the deep loads of one segment (``schedule_prefetch.deepen``), or the many early loads
of a segment ahead of its gate (``ahead_of_gate``), update one barrier together
(``share_barriers``), not one each, so a classifier's or a channel-chunked layer's loads
stay within NPU37XX's 64 physical barriers.

Expects: a DMA list in ``schedule_prefetch_order.prefetch_order``'s order.
Guarantees: ``share_barriers`` only makes tasks wait on more of the loads that ran before
them; every DMA waiting on a shared barrier comes after all its loads in the list.
"""

from __future__ import annotations

from vpuc.ir.module import Barrier, Module
from vpuc.ir.tasks import DmaTask, DpuTask

# A segment with this many early loads ahead of its gate shares one barrier among them
# (``ahead_of_gate``): a channel-chunked layer's weight chunks.  Fewer keep one each: a
# block's DPU task would wait on the other tile's weights too (MobileNetV3-Small 64x64 at
# --cmx-budget 16384, simulated: 3 or more 919,133 cycles, 8 or more 917,054 as with none;
# the barriers it needs at once, 48 with none, 33 with 8 or 16).
SHARED_EARLY_LOADS = 8


def share_barriers(module: Module, tasks: list, deep: set[int], early: dict[int, str],
                   max_producers: int, max_consumers: int) -> list[str]:
    """The ``deep`` loads (``deepen``) that run during one segment (``early``: their gate)
    update one new barrier together, ``<first load's label>.prefetched``, instead of each
    its own: each one's barrier stayed live from that segment to its consumer at the
    network's end, and a small ``--cmx-budget`` splits a classifier into hundreds of
    loads of at most ``DEEP_BYTES_PER_ACT_TASK`` that all go into one segment
    (MobileNetV3-Small at 64x64 under 16K: 209, more than NPU37XX's 64 physical barriers
    live at once).  A task that waited on a load's barrier waits on the shared one
    instead (beside it when other tasks update it too: it is then live only from theirs),
    so it waits for every load of the group, all run long before it.  A group takes the
    loads in ``tasks``' order while its producers and consumers (a DPU task once per
    variant) stay within ``max_producers`` and ``max_consumers`` and every DMA that would
    wait on it comes after all its loads in ``tasks`` (the DMA list's order stays one every
    channel can run).  Returns the new barriers' names."""
    producers: dict[str, list] = {}
    consumers: dict[str, list] = {}
    for task_list in module.task_lists:
        for t in task_list.tasks:
            for u in _barriers(t, "updates"):
                producers.setdefault(u, []).append(t)
            for w in _barriers(t, "waits"):
                consumers.setdefault(w, []).append(t)
    position = {id(t): i for i, t in enumerate(tasks)}
    groups: list[list] = []
    current: dict[str, tuple[list, dict[int, object]]] = {}   # gate -> (loads, waiters)
    for load in tasks:
        if id(load) not in deep or not load.updates:
            continue
        gate = early[id(load)]
        waiters = {id(c): c for u in load.updates for c in consumers.get(u, ())}
        group = current.get(gate)
        if group is not None:
            joined = {**group[1], **waiters}
            if len(group[0]) + 1 <= max_producers \
                    and sum(_units(c) for c in joined.values()) <= max_consumers \
                    and all(position.get(i, len(tasks)) > position[id(load)]
                            for i, c in joined.items() if isinstance(c, DmaTask)):
                group[0].append(load)
                group[1].update(waiters)
                continue
        if sum(_units(c) for c in waiters.values()) > max_consumers:
            continue                        # too many waiters to share: keeps its own
        current[gate] = ([load], waiters)
        groups.append(current[gate][0])
    names = {b.name for b in module.barriers}
    made: list[str] = []
    shared_by: dict[str, list[str]] = {}      # a load's barrier -> shared ones replacing it
    sharing: set[int] = set()
    for group in groups:
        if len(group) < 2:                    # one load: its own barrier is as good
            continue
        name = base = f"{group[0].label}.prefetched"
        n = 1
        while name in names:
            name, n = f"{base}{n}", n + 1
        names.add(name)
        module.barriers.append(Barrier(name))
        made.append(name)
        for load in group:
            for u in load.updates:
                if name not in shared_by.setdefault(u, []):
                    shared_by[u].append(name)
            load.updates = (name,)
            sharing.add(id(load))
    gone: set[str] = set()
    for u, shared in shared_by.items():
        kept = any(id(p) not in sharing for p in producers.get(u, ()))
        if not kept:
            gone.add(u)
        for c in consumers.get(u, ()):
            c.waits = _replaced(c.waits, u, shared, kept)
            for v in getattr(c, "variants", ()) or ():
                v.waits = _replaced(v.waits, u, shared, kept)
    module.barriers = [b for b in module.barriers if b.name not in gone]
    return made


def ahead_of_gate(tasks: list, early: dict[int, str]) -> set[int]:
    """The early loads ``prefetch_order`` placed before the task that updates their gate
    (the previous segment's last store), of segments with at least ``SHARED_EARLY_LOADS``
    of them: every task waiting on one belongs to their segment or a later one, and every
    DMA depending on those comes after that store in ``tasks``, so one barrier for all of
    them (``share_barriers``) cannot deadlock the channels.  A first segment's early loads
    stay where they were, among its own tasks: left out.  (A channel-chunked layer's
    weight chunks at a small ``--cmx-budget``: MobileNetV3-Small 64x64 at 12288 had 28
    of them live at once, 56 barriers in all; now 37.)"""
    updater = {g: i for i, t in enumerate(tasks) for g in t.updates}
    ahead = [t for i, t in enumerate(tasks)
             if id(t) in early and i < updater.get(early[id(t)], -1)]
    count: dict[str, int] = {}
    for t in ahead:
        count[early[id(t)]] = count.get(early[id(t)], 0) + 1
    return {id(t) for t in ahead if count[early[id(t)]] >= SHARED_EARLY_LOADS}


def _barriers(task, field: str) -> tuple[str, ...]:
    """A task's waits or updates (``field``), its DPU variants' too."""
    out = tuple(getattr(task, field))
    for v in getattr(task, "variants", ()) or ():
        out += tuple(getattr(v, field))
    return tuple(dict.fromkeys(out))


def _units(task) -> int:
    """How many producers or consumers a task counts as on a barrier (a DPU task once
    per variant)."""
    return max(1, len(task.variants)) if isinstance(task, DpuTask) else 1


def _replaced(waits: tuple[str, ...], barrier: str, shared: list[str],
              kept: bool) -> tuple[str, ...]:
    """``waits`` with ``shared`` beside ``barrier`` (``kept``) or in its place."""
    if barrier not in waits:
        return tuple(waits)
    out: list[str] = []
    for w in waits:
        out += ([w] if w != barrier or kept else []) + (shared if w == barrier else [])
    return tuple(dict.fromkeys(out))
