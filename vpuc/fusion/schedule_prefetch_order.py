"""Where in the DMA list ``--schedule default`` puts each early constant load
(``schedule.overlap``, decision 2; which loads go early and how far back is
``schedule_prefetch.deepen``'s).

Expects: a lowered module whose segment gates are ``<prefix>finished`` barriers, and the
early loads ``schedule.overlap`` and ``deepen`` chose.
Guarantees: ``prefetch_order`` returns the same tasks in an order every DMA channel can
run without waiting on a later task; nothing here changes what a task reads or writes.
"""

from __future__ import annotations

from vpuc.fusion.schedule_channels import ChannelBusy, biggest_first, copy_channels


def prefetch_order(tasks: list, early: dict[int, str], gates: set[str],
                   deep: set[int] = frozenset(), spread: set[int] = frozenset(),
                   alternate: set[int] = frozenset(), turns: set[int] = frozenset(),
                   stores: set[int] = frozenset(), pieces: set[int] = frozenset(),
                   computed: set[str] = frozenset(), copies: set[int] = frozenset(),
                   costs: dict[int, float] | None = None,
                   to_channel_0: set[int] | None = None,
                   copied: set[str] = frozenset()) -> list:
    """``tasks`` with each early load on channel 1, moved among the previous segment's tasks,
    so channel 1 runs it while the previous segment loads on channel 0.  The first goes
    right after the task that updates the gate before its own gate (the start of the
    previous segment); each other one after one of the previous segment's channel-1 tasks
    (its stores) in turn, the rest after its last store: a store queued behind every early
    load of the next segment held up the short segment it ends, and so the next segment's
    start (ResNet-18's residual 1x1 convolutions: 40K cycles of weights ahead of their
    three stores).
    The ``deep`` ones (``deepen``) go on channel 0 instead, right after the last load of
    the segment they run during: that channel waits there anyway, for the segment's
    stores, before the next segment's first loads.  Those also in ``turns`` (a CNN
    classifier's) take turns: the second, fourth, ... of a segment on channel 1, right
    after its last task there that is not one of the ``stores`` (DMAs of computed blocks:
    a deep load behind one would wait for its block's compute), so both channels stream
    them while the segment's last blocks compute (ResNet-18's Gemm behind its last 3x3
    layer, 6 deep chunks: all on channel 0 1,738,069 cycles, taking turns 1,733,414).
    The ``spread`` ones (a streaming segment's early loads no copy reads, ``overlap``) take
    turns between the channels: the first, third, ... of a segment go on channel 0 right
    after the previous segment's last load, as the deep ones, the others on channel 1 as
    above, so their DDR latencies overlap instead of queueing behind each other and the
    stores (MobileNetV3-Small's squeeze-excite weights: 812,951 -> 809,333 cycles;
    every one on channel 0: 824,733; the second, fourth, ...: 810,718).
    The ``alternate`` ones (small loads, ``schedule.overlap``) after the segment's first take
    turns too, unless a copy waits on it or it is one: the first of them on channel 0 right
    after the previous segment's last load, the next in its place on channel 1, and so on,
    so their DDR latencies overlap and fewer of them queue ahead of the previous segment's
    stores (MobileNetV3-Small's 28 KB split weights; schedule_bench cycles: 654,563 ->
    652,217, ResNet-18 2,083,644 -> 2,081,332, when only those past the last store took
    turns, the second on channel 0; every load past the stores: ResNet-18 2,102,092).
    Taking turns from the second load on, not only past the stores, and from channel 0:
    a squeeze-excite block's global pool reads its input in place and has one store, the
    next segment's gate, while its channel 0 idles; its second 1x1 weight load queued
    behind that store, on the critical path, and a 1x1's loads held up its stores
    (schedule_bench cycles, full size: MobileNetV3-Small 592,971 -> 590,297, ResNet-18
    1,749,259 -> 1,747,077, encoder layer 903,728 -> 901,828; at the test sizes 277,408 ->
    261,869, 60,124 -> 58,182, 49,667 -> 46,936.  MobileNetV3-Small with the channel-1
    ones packed into the first slots instead: 661,002; from the second load on, channel
    1 first: 593,459; from the first load on, channel 1 first: 591,223, channel 0 first:
    599,381).
    The ``pieces`` (a lead chunk's, ``schedule_lead``) go each right ahead of one of the
    segment's own DMAs that wait on a barrier its compute updates (``computed``), spread
    evenly over them, on that DMA's channel: there the channel idles until the block is
    computed anyway.
    The ``copies`` (CMX -> CMX copies of early weight loads, ``schedule.overlap``'s
    decision 3) of a segment's costliest load each go on the channel
    ``schedule_channels.copy_channels`` finds it ends first on by the cost model's
    ``costs`` (a DMA's id -> its cycles): channel 0 right after the previous segment's
    last load, as the ``alternate`` ones, or channel 1 in their slot; when one goes to
    channel 0, that load takes the first slot (``schedule_channels.biggest_first``).
    ``to_channel_0`` gets the ids of those put on channel 0.  ``copied``: the gates of
    segments whose DPU tasks write their output as copies on other tiles
    (``segment_ends``).
    Moved loads wait on nothing but copies of loads moved before them and keep their
    order, so the list stays in an order every channel can run without waiting on a later
    task."""
    updater = segment_ends(tasks, early, gates, copied)
    starts = sorted(updater.values())
    moved: dict[tuple[int, int], list[int]] = {}      # (start, end) of a segment -> loads
    anchor: dict[int, int] = {}                      # moved index -> insert after this index
    turned: dict[str, list[int]] = {}                # gate -> its deep loads taking turns
    spread_out: dict[tuple[int, int], list[int]] = {}   # (start, end) -> its pieces
    for i, task in enumerate(tasks):
        gate = early.get(id(task))
        if gate is None:
            continue
        end = updater.get(gate)
        if end is None:          # the first segment's: already first, in their channel's order
            continue
        start = max((s for s in starts if s < end), default=-1)
        if id(task) in pieces:
            spread_out.setdefault((start, end), []).append(i)
            continue
        if id(task) in deep:
            taken = turned.setdefault(gate, [])
            channel = len(taken) % 2 if id(task) in turns else 0
            if id(task) in turns:
                taken.append(i)
            task.channel = channel
            anchor[i] = max([start] + [j for j in range(start + 1, end + 1)
                                       if tasks[j].channel == channel
                                       and id(tasks[j]) not in stores
                                       and early.get(id(tasks[j])) is None])
            continue
        task.channel = 1
        moved.setdefault((start, end), []).append(i)
    busy = ChannelBusy(costs) if costs is not None and copies else None
    if to_channel_0 is not None:
        to_channel_0.clear()
    for (start, end), loads in moved.items():
        stores = [j for j in range(start + 1, end + 1) if tasks[j].channel == 1
                  and early.get(id(tasks[j])) is None]
        slots = [start] + stores
        last = max([start] + [j for j in range(start + 1, end + 1) if tasks[j].channel == 0
                              and early.get(id(tasks[j])) is None])
        turns = [i for i in loads if id(tasks[i]) in spread][::2]
        for i in turns:
            tasks[i].channel = 0
            anchor[i] = last
        copied = {w for i in loads for w in tasks[i].waits}

        def place(order: list[int]) -> None:
            rest = 0
            for n, i in enumerate(order):
                anchor[i] = slots[min(n, len(slots) - 1)]
                if n >= 1 and id(tasks[i]) in alternate and not tasks[i].waits \
                        and not copied & set(tasks[i].updates):
                    rest += 1
                    tasks[i].channel = 1 - rest % 2
                    if rest % 2 == 1:
                        anchor[i] = last
        in_slots = [i for i in loads if i not in turns]
        chosen = [] if busy is None else \
            copy_channels(tasks, biggest_first(tasks, in_slots, busy.costs), start, end,
                          early, copies, busy)
        # the copies' load on channel 1 starts the chain: the costliest at the segment's start
        place(biggest_first(tasks, in_slots, busy.costs) if chosen else in_slots)
        for i in chosen:
            anchor[i] = last
            if to_channel_0 is not None:
                to_channel_0.add(id(tasks[i]))
    for (start, end), loads in spread_out.items():
        # right ahead of the segment's DMAs that wait on its compute: the channel would
        # idle there anyway
        gaps = [j for j in range(start + 1, end + 1) if early.get(id(tasks[j])) is None
                and set(tasks[j].waits) & computed] or [end]
        for n, i in enumerate(loads):
            g = gaps[n * len(gaps) // len(loads)]
            anchor[i] = g - 1
            tasks[i].channel = tasks[g].channel
    out: list = []
    pending: dict[int, list] = {}
    for i, task in enumerate(tasks):
        if i in anchor:
            pending.setdefault(anchor[i], []).append(task)
    out += pending.get(-1, [])
    for i, task in enumerate(tasks):
        if i not in anchor:
            out.append(task)
        out += pending.get(i, [])
    return out


def segment_ends(tasks: list, early: dict[int, str], gates: set[str],
                 copied: set[str] = frozenset()) -> dict[str, int]:
    """Gate -> the index in ``tasks`` where its segment ends for the DMA list: the DMA that
    updates it, else, for the ``copied`` gates (a segment whose DPU tasks write its output
    themselves, in place or as copies on the value's tile, ``resident.cast_blocks``: no
    store updates its gate), its last DMA that is not an early load, by the
    ``<prefix>finished`` naming.  Without that the early loads such a segment runs stay
    where they were, behind the next segment's own loads (MobileNetV3-Small with copies
    in every layer: 564,711 cycles so, 546,787 placed).  A segment whose stores all were
    in place already keeps the placement it had before output copies."""
    ends = {g: i for i, t in enumerate(tasks) for g in t.updates if g in gates}
    suffix = "finished"
    prefixes = {g[:-len(suffix)]: g for g in gates & set(copied)
                if g not in ends and g.endswith(suffix)}
    if prefixes:
        for i, t in enumerate(tasks):
            if early.get(id(t)) is not None or not t.label:
                continue
            dots = [j + 1 for j, ch in enumerate(t.label) if ch == "."]
            gate = next((prefixes[t.label[:j]] for j in dots if t.label[:j] in prefixes), None)
            if gate is not None:
                ends[gate] = i
    return ends
