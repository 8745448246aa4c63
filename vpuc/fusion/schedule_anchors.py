"""Cross-segment waits thinned to a few anchors, so they hold few barriers (``schedule_deps``).

Rule 1 of ``schedule_deps`` makes a DMA of a later segment wait on the latest DMA of an
earlier segment per channel that touches its DDR bytes, through a barrier only that DMA
updates.  A later segment pipelined block by block on an earlier one of many blocks then
waits on one barrier per earlier block, and each lives until the later segment's load that
waits on it, queued behind all the earlier segment's loads: MaxPool 13x13 at
``cmx_budget`` 4096 (a cascade of two pools, some 190 blocks each) kept 70 such barriers
live and ran out of the 64 physical ones.

A channel's FIFO ends its transfers in list order, so waiting on a later DMA of the same
channel implies the earlier one.  ``thin_waits`` keeps at most ``cap`` distinct earlier DMAs
per later segment, shared out over the queues it waits on: every ``g``-th of the ones waited on, counted back from the
last, each wait moved to the first anchor at or after it that the waiting DMA follows in
the list (else it stays).  A later block then waits at most ``g - 1`` more earlier stores.
The same holds for a tile's DPU queue (a later DMA or DPU task waiting on the in-place
writes of a value kept in CMX, ``resident``): those anchors are not ordered by the DMA
list, so ``schedule_deps`` keeps them only when the schedule stays acyclic.

``drop_queue_implied_waits`` bounds a barrier's consumers the same way: of the tasks of
one queue waiting on it, only the first needs to.
"""

from __future__ import annotations

import bisect
import math

from vpuc.analysis.races import shared_bytes
from vpuc.ir.tasks import DmaTask, DpuTask


def queue_counts(segment: dict[int, int], *maps: dict) -> dict[int, int]:
    """Later segment -> how many queues its tasks wait on in ``maps`` (``thin_waits``)."""
    seen: set = set()
    for needs in maps:
        for later, per_queue in needs.items():
            seen.update((segment[later], id(needs), queue) for queue in per_queue)
    counts: dict[int, int] = {}
    for later_segment, _, _ in seen:
        counts[later_segment] = counts.get(later_segment, 0) + 1
    return counts


def thin_waits(needs: dict, segment: dict[int, int], position: dict[int, int] | None,
               cap: int, queues: dict[int, int] | None = None) -> bool:
    """``needs``: id(later task) -> queue -> (place in the queue, earlier task), changed in
    place; ``segment``: id(task) -> its segment; ``position``: id(later DMA) -> its place in
    the DMA list, which an anchor on its channel must precede (None: no such rule, the
    caller checks the schedule); ``queues``: later segment -> the queues its cap is shared
    over (``queue_counts``; default those of ``needs``).  Whether a wait moved."""
    groups: dict[tuple[int, int], dict[int, object]] = {}
    for later, per_channel in needs.items():
        for channel, (pos, earlier) in per_channel.items():
            groups.setdefault((segment[later], channel), {})[pos] = earlier
    queues = queues or queue_counts(segment, needs)
    anchors_of: dict[tuple[int, int], list[int]] = {}
    for key, found in groups.items():
        share = max(1, cap // queues[key[0]])     # the segment's cap over its queues
        if len(found) > share:
            ordered = sorted(found)
            step = math.ceil(len(ordered) / share)
            anchors_of[key] = ordered[::-1][::step][::-1]      # the last one always
    if not anchors_of:
        return False
    moved = False
    for later, per_channel in needs.items():
        for channel, (pos, _) in list(per_channel.items()):
            anchors = anchors_of.get((segment[later], channel))
            if anchors is None:
                continue
            i = bisect.bisect_left(anchors, pos)
            if i < len(anchors) and anchors[i] != pos and (position is None
                                                            or anchors[i] < position[later]):
                per_channel[channel] = (anchors[i], groups[(segment[later], channel)][anchors[i]])
                moved = True
    return moved


def in_place_needs(segment: dict[int, int], dma_tasks: list, others: list, accesses: dict,
                   dpu_writes: dict, dpu_reads: dict) -> tuple[dict, dict]:
    """``schedule_deps``' waits on the in-place writes of values kept in CMX, from its
    ``_Relaxation``'s accesses: (id(later) -> queue -> (place, earlier task), id(later) ->
    later task)."""
    seg = segment
    # DPU tasks writing a value kept in CMX in place (resident.in_place_blocks): a DMA
    # of a later segment touching their bytes waits on the latest such task per tile
    # (a tile's DPU queue ends its tasks in list order); a DPU task reading one in place
    # (resident.in_place_input) waits on those and on the latest DMA writing its bytes
    # per channel.  Collected per queue first, to be thinned as rule 1's waits are.
    extra: dict[int, dict[tuple, tuple[int, object]]] = {}
    tasks: dict[int, object] = {}
    place = {id(t): i for i, t in enumerate(dma_tasks)}
    tile_place: dict[int, int] = {}         # a DPU task's place in its tile's queue
    per_tile: dict[int, int] = {}
    for t in others:
        if isinstance(t, DpuTask):
            tile_place[id(t)] = per_tile.get(t.tile, 0)
            per_tile[t.tile] = tile_place[id(t)] + 1

    def need(later, earlier, key, pos) -> None:
        if earlier is None:
            return
        tasks[id(later)] = later
        held = extra.setdefault(id(later), {}).get(key)
        if held is None or held[0] < pos:
            extra[id(later)][key] = (pos, earlier)

    def latest(accesses, later, lfp):
        return next((a for a, fp in reversed(accesses)
                     if seg[id(a)] < seg[id(later)] and shared_bytes(fp, lfp) is not None),
                    None)

    for root, writers in dpu_writes.items():
        readers = [(t, fp) for t, _, fp, _ in accesses.get(root, ())]
        readers += [r for per_tile in dpu_reads.get(root, {}).values() for r in per_tile]
        for later, lfp in readers:
            for tile, per_tile in writers.items():
                earlier = latest(per_tile, later, lfp)
                need(later, earlier, ("DPU", tile), tile_place.get(id(earlier), 0))
    for root, per_tile_readers in dpu_reads.items():
        stores: dict[int, list] = {}
        for task, _, fp, write in accesses.get(root, ()):
            if write:
                stores.setdefault(task.channel, []).append((task, fp))
        for later, lfp in (r for rs in per_tile_readers.values() for r in rs):
            for channel, per_channel in stores.items():
                earlier = latest(per_channel, later, lfp)
                need(later, earlier, ("DMA", channel), place.get(id(earlier), 0))
    return extra, tasks


def drop_queue_implied_waits(module, max_consumers: int) -> None:
    """For each barrier with more consumers than a barrier may have (``max_consumers``),
    the waits a queue's order already implies: a queue (a DMA channel, a tile's DPUs or
    ACT SHAVEs, in ``vpuc.analysis.schedule``'s order) starts its tasks in list order, so
    once its first task waiting on the barrier has started, the barrier has fired for every
    later one (the k-split classifier of MobileNetV3-Small at ``cmx_budget`` 8192: 396
    loads of the activation on one channel, each waiting on the previous segment's gate,
    against NPU37XX's 256).  Other barriers are left alone: their waits cost nothing."""
    counts: dict[str, int] = {}
    for tl in module.task_lists:
        for task in tl.tasks:
            for w in set(task.waits):
                counts[w] = counts.get(w, 0) + 1
    crowded = {b for b, n in counts.items() if n > max_consumers}
    if not crowded:
        return
    waited: dict[tuple, set[str]] = {}          # queue -> crowded barriers waited so far
    for tl in module.task_lists:
        for task in tl.tasks:
            queue = _queue_of(task)
            seen = waited.setdefault(queue, set())
            kept = tuple(w for w in task.waits if w not in crowded or w not in seen)
            seen.update(w for w in task.waits if w in crowded)
            task.waits = kept


def _queue_of(task) -> tuple:
    """The FIFO a task runs in, as ``vpuc.analysis.schedule`` keys it."""
    if isinstance(task, DmaTask):
        return ("DMA", task.channel)
    if isinstance(task, DpuTask):
        return ("DPU", task.tile)
    return ("ACT_SHAVE", task.tile)
