"""Whole-network schedules: what ``--schedule default`` changes over ``naive`` (issue 13).

``naive`` is ``lower-graph``'s layer-by-layer program unchanged: every value
between segments in DDR in the graph's dims order, every segment's first loads
(weights included) waiting for the previous segment's last store, each tile
loading its own copy of a layer's weights from DDR.

``default`` makes three decisions, each on data the lowering already has, not
on program text:

1. **NHWC between DPU layers** (``schedule_layouts.ddr_layouts``, before the segments are
   emitted): a 4-D value a DPU layer produces and only DPU layers read is laid
   out NHWC in DDR, the order the DPU reads and writes CMX, so its stores and
   loads are plain copies instead of transposing DMAs (one element per cycle).
   ACT segments of fused elementwise subgraphs take part (MobileNetV3's
   HardSwish and squeeze-excite scaling between its convolutions): when every
   4-D value such a segment touches can be NHWC, all are, its CMX blocks too,
   and its kernels are generated with NHWC ports (``schedule_layouts.nhwc_ports``), so one
   storage order computes the same elements.
2. **Weights prefetched** (``overlap``, on the lowered module): a DMA from a
   constant that waits only on a segment gate (its first load into a CMX buffer
   nothing used before) waits on nothing, so it runs on its channel as soon as
   the previous loads have, during the previous segment's compute (between that
   segment's stores, not all ahead of them, a streaming segment's taking turns with
   channel 0: ``schedule_prefetch_order.prefetch_order``), up
   to ``EARLY_CMX_BYTES`` per tile and segment (a segment uses up to the CMX budget,
   ``cmx_budget``, by default half a tile's CMX; allocate-cmx places the early buffers by their longer
   lifetimes); the loads past that keep their gate.  A segment that streams its weights
   (a classifier: 64 times more bytes of constants than of values) loads them further
   back, one load per earlier segment with ACT SHAVE work, on channel 0 after that
   segment's last load (``schedule_prefetch.deepen``): MobileNetV3-Small's two Gemms,
   3.2 MB, otherwise loaded after everything else while the ACT SHAVEs idle; in a
   network without ACT SHAVE work (ResNet-18) during the latest segment that loads as
   many bytes itself, after its last load, not after the pool and flatten; there a
   heavy segment's early loads (a DDR-bound layer's weight chunks: ResNet-18's first
   512-channel 3x3 layer) go one per segment back, into the DPU-bound layers before,
   whose DDR idles; the chunks of the first such layers (the lead run) that find no room
   beside the segment before theirs load in pieces during earlier DPU-bound segments whose
   DDR idles, pinned at the top of CMX (``schedule_lead``: ResNet-18's stage 4 weights
   during stage 2).  Other
   segments' big loads (at least ``schedule_prefetch.DEEP_MIN_BYTES``) go back the same way,
   still on channel 1, when the segment before theirs moves fewer bytes of values than
   their early loads (a squeeze-excite block's one-pixel 1x1 layers and its projection's
   weights behind them), their copies with them; given up first when allocate-cmx finds
   no room (tried).  The deep
   loads of one segment update one barrier together (``schedule_share.share_barriers``),
   not one each: each is live until the classifier, and a small ``--cmx-budget`` puts
   hundreds of small loads into one segment; so do a segment's early loads when it has
   many (``schedule_share.ahead_of_gate``: a channel-chunked layer's weight chunks).  A streaming
   segment's later blocks' weights, which wait on its earlier blocks only to reuse
   their CMX, load early too when the room allows; when the longer lifetimes leave
   allocate-cmx no room (tried), both are given up.
3. **Weights read once** (``overlap``): when several tasks load the same
   constant region (a layer's weights into each tile, a pipeline's constants
   into each slot), the first load reads DDR and the others copy its CMX buffer
   (CMX -> CMX, no DDR traffic), each copy waiting on a barrier of its own that
   only that first load updates (and on its gate still when it is not
   prefetched: weights past ``EARLY_CMX_BYTES`` are shared too).

4. **Segments wait on what they read** (``schedule_deps.relax_gates``, after
   ``overlap``): a DMA waits on the earlier segments' DMAs that write the DDR bytes it
   reads (or touch what it writes), and a segment's gate is the one two segments
   back when allocate-cmx still places every buffer (tried), so consecutive
   segments and independent branches overlap.

5. **Elementwise tails in CMX** (``fuse_epilogue``, while lowering): a fused
   elementwise subgraph (MobileNetV3's HardSwish, on ACT SHAVE) or a DPU eltwise
   Add/Multiply (ResNet-18's residual Adds, the other operand loaded beside each
   block) that alone reads a DPU layer's output runs on the layer's output blocks
   in CMX instead of in a segment of its own, so that value never goes through DDR.

6. **Values kept in CMX** (``resident.py``, while lowering): a value a DPU layer or
   ACT segment produces and only DPU layers and ACT segments read is one CMX buffer of
   the whole tensor on one tile when it fits beside the blocks and the prefetch room,
   so its stores and loads are CMX -> CMX copies (16 cycles of latency, not the DDR's
   870); the squeeze-excite input of MobileNetV3 stays there while its pool and two
   1x1 layers run, and its Multiply reads it back.

Other values between segments still go through DDR.  Numerics do not change: the same tasks compute the
same values; only layouts in DDR, orders and sources of copies move.

Expects (``overlap``): a freshly lowered module whose gate barriers are named
in ``gates``.  Guarantees: the module's tasks read and write the same values;
every added wait is on a barrier updated by a task earlier in the DMA list.
"""

from __future__ import annotations

from vpuc.fusion.resident import cmx_fits
from vpuc.fusion.schedule_lead import (LeadLoad, assign_lead, compute_barriers, cut_pieces,
                                       drop_pieces, give_up, lead_order, pin_top, unpin)
from vpuc.fusion.schedule_channels import dma_cycles
from vpuc.fusion.schedule_option import SCHEDULE_CHOICES
from vpuc.fusion.schedule_prefetch import DEEP_MIN_BYTES, deepen
from vpuc.fusion.schedule_prefetch_order import prefetch_order
from vpuc.fusion.schedule_room import EARLY_CMX_BYTES, EarlyRoom
from vpuc.fusion.schedule_share import ahead_of_gate, share_barriers
from vpuc.ir.module import Barrier, BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaMode, DmaTask, DpuTask, Executor, SwKernelTask

SCHEDULES = SCHEDULE_CHOICES
DEFAULT_SCHEDULE = "default"


def early_bytes(cmx_bytes: int, cmx_budget: int) -> int:
    """The CMX bytes per tile a segment's constants may take before the previous segment
    ends, when that segment uses its whole ``cmx_budget`` (``schedule_room.EarlyRoom``'s
    usual room)."""
    return max(EARLY_CMX_BYTES, cmx_bytes - cmx_budget)


def check_schedule(name: str) -> str:
    if name not in SCHEDULES:
        from vpuc.diagnostics import UsageError
        raise UsageError(f"unknown schedule '{name}'; expected one of: {', '.join(SCHEDULES)}")
    return name


def overlap(module: Module, gates: set[str], dma_channels: int = 2,
            cmx_bytes: int | None = None, arch=None, timing=None,
            copy_channels: bool = True) -> bool:
    """Decisions 2 and 3 of the module docstring, on the lowered ``module``; with one DMA
    channel the early loads keep their place in its FIFO (they only stop waiting).
    ``cmx_bytes``: a tile's CMX, so a segment may prefetch more than ``EARLY_CMX_BYTES``
    into what the running segment's buffers leave free (``EarlyRoom``), and a streaming
    segment's weights further back (``schedule_prefetch.deepen``); ``arch``: the target,
    on whose CMX those are tried (allocate-cmx) and given up when they do not fit;
    ``timing``: the cost model, by which ``schedule_channels`` puts weight copies on
    channel 0 unless ``copy_channels`` is off.  Returns whether it put any there."""
    symbols = SymbolTable(module)
    room_of = EarlyRoom(module, gates, cmx_bytes)
    computed = _task_outputs(module, symbols)
    to_channel_0: set[int] = set()       # weight copies on channel 0 (``schedule_channels``)
    any_moved = False
    for task_list in module.task_lists:
        if task_list.executor is not Executor.DMA:
            continue
        first_load: dict[tuple, tuple[DmaTask, int]] = {}     # const region -> (load, its tile)
        early: dict[int, str] = {}                            # id(load) -> the gate it waited on
        early_bytes: dict[tuple, int] = {}                    # (gate, tile) -> bytes loaded early
        # (a segment's own gate, tile) -> the gate its early loads into that tile ran behind
        loaded_early: dict[tuple[str, int], str] = {}
        # A CMX buffer another DMA reads relies on its channel's order (a staged load): its
        # load keeps its channel and place.  A copy's source is a buffer written once.
        dma_read: set[str] = set()
        writes: dict[str, int] = {}
        # CMX buffers something other than a load of a constant writes
        written = set(computed)
        for t in task_list.tasks:
            if isinstance(t, DmaTask):
                src, dst = symbols.region(t.src), symbols.region(t.dst)
                if src is not None:
                    dma_read.add(src.root.name)
                if dst is not None:
                    writes[dst.root.name] = writes.get(dst.root.name, 0) + 1
                    if src is None or src.kind is not BufferKind.CONST:
                        written.add(dst.root.name)
        streaming = room_of.streaming()
        # early loads, in list order: (load, its gate, tile, destination buffer, its bytes)
        moved: list[tuple[DmaTask, str, int, str, int]] = []
        copying: set[int] = set()            # loads turned into copies and their sources
        weight_copies: set[int] = set()      # the copies alone (``schedule_channels``)
        paced: list[tuple[DmaTask, tuple[str, ...]]] = []     # (load, the waits it dropped)
        # id(a first load) -> the copies of it that load early: (copy, tile, buffer, bytes)
        copies: dict[int, list[tuple[DmaTask, int, str, int]]] = {}
        # the lead run's loads past the room beside the segment before theirs, as ``moved``
        beyond: list[tuple[DmaTask, str, int, str, int]] = []
        for task in task_list.tasks:
            if not isinstance(task, DmaTask) or task.mode is DmaMode.CONVERT:
                continue
            src, dst = symbols.region(task.src), symbols.region(task.dst)
            if src is None or dst is None or src.kind is not BufferKind.CONST \
                    or dst.kind is not BufferKind.CMX:
                continue
            if set(task.waits) <= gates:
                gate = task.waits[0] if task.waits else ""
            elif dst.root.name not in written and dst.root.name not in dma_read \
                    and room_of.prefix_of(dst.root.name) in streaming \
                    and room_of.gate_before(dst.root.name) is not None:
                # a streaming segment's later weights: they wait on its earlier blocks only
                # to reuse their CMX (no value they read or write depends on them), which
                # the room check below decides instead
                gate = room_of.gate_before(dst.root.name)
                paced.append((task, task.waits))
            else:
                continue
            room = (gate, dst.root.tile)
            key = (src.root.name, src.byte_offset, src.strides_bits, src.type.dims, task.mode)
            seen = first_load.get(key)
            if early_bytes.get(room, 0) + dst.root.type.nbytes <= room_of(room, loaded_early):
                early_bytes[room] = early_bytes.get(room, 0) + dst.root.type.nbytes
                loaded_early[(room_of.gate_of(dst.root.name), dst.root.tile)] = gate
                if dst.root.name not in dma_read:
                    early[id(task)] = gate
                    moved.append((task, gate, dst.root.tile, dst.root.name,
                                  dst.root.type.nbytes))
                task.waits = ()                               # 2: prefetch
            # else: CMX the running segment may need: it loads in turn, after its gate
            elif paced and paced[-1][0] is task:
                paced.pop()                                   # keeps its waits
            elif room_of.prefix_of(dst.root.name) in room_of.lead_segments and seen is None:
                # unless a DPU-bound segment further back has the DDR time and the CMX
                # (``schedule_lead``)
                beyond.append((task, gate, dst.root.tile, dst.root.name, dst.root.type.nbytes))
            if seen is None:
                if writes[dst.root.name] == 1 and dst.byte_offset == 0 \
                        and dst.type.nbytes == dst.root.type.nbytes:
                    first_load[key] = (task, dst.root.tile)
            elif symbols.region(seen[0].dst).type == dst.type:
                _copy_from(module, seen[0], task)             # 3: read DDR once
                copying |= {id(seen[0]), id(task)}
                weight_copies.add(id(task))
                if id(seen[0]) not in early:     # its source loads in turn: so does the copy
                    early.pop(id(task), None)
                elif id(task) in early:
                    copies.setdefault(id(seen[0]), []).append(
                        (task, dst.root.tile, dst.root.name, dst.root.type.nbytes))
        if dma_channels > 1:
            tasks = task_list.tasks
            # each early copy of a weight on the channel the cost model finds it ends first
            costs = None if timing is None or not copy_channels else \
                {id(t): dma_cycles(t, symbols, timing) for t in tasks if isinstance(t, DmaTask)}
            turns: set[int] = set()      # a CNN classifier's deep loads: both channels
            deep = deepen(moved, early, early_bytes, room_of, copies, turns)
            lead = assign_lead(beyond, early, room_of, module, timing, DEEP_MIN_BYTES)
            deep |= {id(load.task) for load in lead}
            # the lead run's chunks (``schedule_lead``): those past the room beside the
            # segment before theirs during DPU-bound segments further back, in pieces, and
            # with those loaded early the usual way (above them) pinned at the top of CMX
            held = [LeadLoad(t, g, b) for t, g, _, b, n in moved if id(t) in early
                    and n >= DEEP_MIN_BYTES
                    and room_of.prefix_of(t.label or "") in room_of.lead_segments]
            if lead:
                pin_top(module, held + lead, cmx_bytes)
                cut_pieces(module, lead)
            lead_tasks, deep, pieces = lead_order(tasks, lead, early, deep)
            compute_done = compute_barriers(module)
            copied = copy_gates(module, gates)       # segments whose stores became copies
            stores = {id(t) for t in tasks if isinstance(t, DmaTask)
                      and _of_computed(symbols, computed, t)} if turns else set()
            # big loads deepen moved back on channel 1 (behind a segment too short to hide
            # them): load -> the gate it had
            behind = {id(t): gate for t, gate, *_ in moved
                      if id(t) not in deep and early.get(id(t), gate) != gate}
            # a streaming segment's other early loads take turns between the channels
            spread = {id(t) for t, *_ in moved if id(t) not in copying
                      and room_of.prefix_of(t.label or "") in streaming}
            # small loads past a segment's stores alternate between the channels, so
            # their DDR latencies overlap
            alternate = {id(t) for t, _, _, _, nbytes in moved if nbytes < DEEP_MIN_BYTES}
            task_list.tasks = prefetch_order(lead_tasks, early, gates, deep, spread, alternate,
                                             turns=turns, stores=stores, pieces=pieces,
                                             computed=compute_done, copies=weight_copies,
                                             costs=costs, to_channel_0=to_channel_0,
                                             copied=copied)
            # early loads of a heavy segment placed in an optimistic room are tried too
            hopeful = any(key in room_of.optimistic for key in early_bytes)
            fits = not (deep or paced or behind or hopeful) or arch is None \
                or cmx_fits(module, arch)
            while not fits and lead:
                # no room: the lead chunk loaded furthest back waits on its gate again
                load = lead.pop()
                unpin(module, [load])
                if not lead:
                    unpin(module, held)
                deep -= {id(p) for p in load.pieces or ()}
                drop_pieces(module, load)
                give_up(load.task, load.gate, early)
                lead_tasks, deep, pieces = lead_order(tasks, lead, early, deep)
                task_list.tasks = prefetch_order(lead_tasks, early, gates, deep, spread,
                                                 alternate, turns=turns, stores=stores,
                                                 pieces=pieces, computed=compute_done,
                                                 copied=copied)
                fits = cmx_fits(module, arch)
            if not fits and behind:
                # their longer lifetimes leave allocate-cmx no room: back behind their gates
                early.update(behind)
                task_list.tasks = prefetch_order(lead_tasks, early, gates, deep, spread,
                                                 alternate, turns=turns, stores=stores,
                                                 pieces=pieces, computed=compute_done,
                                                 copied=copied)
                fits = not (deep or paced or hopeful) or cmx_fits(module, arch)
            if not fits and not (deep := _fewer_deep(module, arch, lead_tasks, task_list,
                                                     moved, early, gates, deep, spread,
                                                     room_of.order, alternate, pieces,
                                                     compute_done, copied)):
                # the longer lifetimes fragment CMX beyond what the room estimates saw even
                # with fewer deep loads: back to loading early into the segment before only
                for task, waits in paced:
                    task.waits = tuple(dict.fromkeys(tuple(task.waits) + waits))
                    early.pop(id(task), None)
                unpin(module, held + lead)
                for load in lead:
                    drop_pieces(module, load)
                    give_up(load.task, load.gate, early)
                # a heavy segment's loads took the room beside the segment before theirs
                # only to go further back: without that, they keep their gate
                # (with their copies; a copy keeps its own waits)
                for task, gate, tile, *_ in moved:
                    if (gate, tile) in room_of.optimistic and not task.waits:
                        task.waits = (gate,)
                        for t in [task] + [c for c, *_ in copies.get(id(task), ())]:
                            early.pop(id(t), None)
                task_list.tasks = prefetch_order(tasks, early, gates, spread=spread,
                                                 alternate=alternate, copied=copied)
                deep = set()
            if arch is not None:
                # one barrier per segment the deep loads (or many early ones) run during,
                # not one per load
                shared = deep | ahead_of_gate(task_list.tasks, early)
                share_barriers(module, task_list.tasks, shared, early, arch.max_producers,
                               arch.max_consumers)
            # (a fallback above orders them again without ``schedule_channels``)
            any_moved |= any(t.channel == 0 for t in task_list.tasks if id(t) in to_channel_0)
    return any_moved


# The shares of the deep loads kept, in turn, when all of them leave allocate-cmx no room.
DEEP_KEPT = (3 / 4, 1 / 2, 1 / 4)


def latest_first(deep: set[int], anchor: dict[int, str], order: list[str],
                 tasks: list) -> list[int]:
    """The ``deep`` loads and copies (ids) by the segment they run during (``anchor``: its
    gate), the latest first; those of one segment by their place in ``tasks`` (the DMA
    list as lowered), the latest first.  Not by the set's order: that follows the ids,
    the objects' addresses, so which loads a share kept would change with the memory
    layout."""
    position = {p + "finished": i for i, p in enumerate(order) if p}
    place = {id(task): k for k, task in enumerate(tasks)}
    return sorted(deep, key=lambda i: (-position.get(anchor[i], -1), -place[i]))


def _fewer_deep(module: Module, arch, tasks: list, task_list, moved: list, early: dict[int, str],
                gates: set[str], deep: set[int], spread: set[int], order: list[str],
                alternate: set[int] = frozenset(), pieces: set[int] = frozenset(),
                compute_done: set[str] = frozenset(),
                copied: set[str] = frozenset()) -> set[int]:
    """When the ``deep`` loads' lifetimes leave allocate-cmx no room: keep those that run
    latest (the shortest lifetimes, nearest their classifier), ``DEEP_KEPT`` of them in
    turn, the others loading early into the segment before theirs only, until allocate-cmx
    places every buffer (tried); the deep loads kept (empty when none of the shares fits:
    ``task_list`` is then in the order of the last try, for the caller to redo).  Giving
    them all up at once made the schedule hinge on the CMX's last bytes (MobileNetV3-Small:
    about 100K cycles between chunkings of its Gemms one apart).  The lead chunks'
    ``pieces`` (``schedule_lead``: their buffers pinned, what allocate-cmx's trial kept)
    stay."""
    anchor = {i: early[i] for i in deep}
    ranked = latest_first(deep - pieces, anchor, order, tasks)
    for share in DEEP_KEPT:
        kept = set(ranked[:int(len(ranked) * share)])
        if not kept:
            break
        kept |= pieces
        for task, gate, *_ in moved:
            if id(task) in deep:
                early[id(task)] = anchor[id(task)] if id(task) in kept else gate
        task_list.tasks = prefetch_order(tasks, early, gates, kept, spread, alternate,
                                         pieces=pieces, computed=compute_done,
                                         copied=copied)
        if cmx_fits(module, arch):
            return kept
    for task, gate, *_ in moved:
        if id(task) in deep:
            early[id(task)] = gate
    return set()


def _of_computed(symbols: SymbolTable, computed: set[str], task: DmaTask) -> bool:
    """Whether a DMA reads a buffer a DPU or ACT SHAVE task writes (a store)."""
    region = symbols.region(task.src)
    return region is not None and region.root.name in computed


def copy_gates(module: Module, gates: set[str]) -> set[str]:
    """The ``gates`` a DPU task writing its output as copies on other tiles updates
    (``resident.cast_blocks``)."""
    return {u for tl in module.task_lists for t in tl.tasks
            if isinstance(t, DpuTask) and t.broadcast_outputs for u in t.updates if u in gates}


def _task_outputs(module: Module, symbols: SymbolTable) -> set[str]:
    """Roots of the buffers a DPU or ACT SHAVE task writes."""
    out: set[str] = set()
    for task_list in module.task_lists:
        for t in task_list.tasks:
            names = [t.output, *t.broadcast_outputs] if isinstance(t, DpuTask) else \
                [b.buffer for b in t.outputs] if isinstance(t, SwKernelTask) else []
            for name in names:
                region = symbols.region(name)
                if region is not None:
                    out.add(region.root.name)
    return out


def _copy_from(module: Module, first: DmaTask, task: DmaTask) -> None:
    """Turn ``task`` into a CMX -> CMX copy of what ``first`` loaded, after it."""
    name = f"{first.dst.lstrip('%')}.copied"
    if not any(b.name == name for b in module.barriers):
        module.barriers.append(Barrier(name))
        first.updates = tuple(first.updates) + (name,)
    task.src = first.dst
    task.mode = DmaMode.COPY
    task.waits = (name,) + tuple(task.waits)      # a load kept after its gate stays there
