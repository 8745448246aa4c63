"""Where ``--schedule default`` loads a segment's constants early (``schedule.overlap``,
decision 2): how much room a tile's CMX leaves them (``EarlyRoom``), which ones run
further back than the segment before theirs (``deepen``), and where in the DMA list
each goes (``prefetch_order``); the one barrier the deep loads of a segment share is
``schedule_share``'s.

Expects: a lowered module whose segment gates are ``<prefix>finished`` barriers.
Guarantees: ``prefetch_order`` returns the same tasks in an order every DMA channel can
run without waiting on a later task; nothing here changes what a task reads or writes.
"""

from __future__ import annotations

from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, Executor

# CMX bytes per tile a segment's constants may take before the previous segment ends: the
# running segment uses up to the CMX budget (default 1 MiB of 2 MiB), and allocation fragments the rest
# (full-size ResNet-18's channel-split 3x3 layers, 442 KB weight chunks, did not fit at 1 MiB).
EARLY_CMX_BYTES = 256 << 10
# A segment whose loads bring this many times more bytes of constants than of values
# streams its weights (a classifier: one row against a weight matrix; MobileNetV3-Small's
# two Gemms: 117x and 168x, ResNet-18's: 1012x); a convolution reuses its weights at
# every position (ResNet-18's 7x7 3x3 layers: 31x) and pipelines their loads with its
# blocks.  A squeeze-excite 1x1 layer streams too (one pooled pixel: the ratio is about
# its output channels; MobileNetV3-Small's 36x to 97x): its early loads take turns
# between the channels (``prefetch_order``).  MobileNetV3-Small (schedule_bench cycles,
# ResNet-18's): 64 798,842 (2,105,046), 48 798,750, 40 796,786 (its 42x to 52x layers
# too), 32 795,679, 24 795,590 (2,135,639: ResNet-18's 3x3 layers stream), 16 794,583
# (2,140,979); 40 keeps a margin above ResNet-18's 31x.
STREAMING_RATIO = 40
# Bytes of a deep load (``deepen``) a segment may run per ACT SHAVE task it has: one
# task is about 4.5K cycles of MobileNetV3-Small's HardSwish blocks, and the DDR moves
# 24 B a cycle.  MobileNetV3-Small (schedule_bench cycles): 32K per task 956,486, 48K
# 947,362, 64K 923,986, 96K 932,087.  Since ``DEEP_BYTES_PER_ACT_BYTE`` and ``_left_over``:
# 64K and 72K 603,365, 80K to 96K 598,274 (the first Gemm's last chunk, 75 KB, then takes
# no segment of its own, so the 112 KB one before it joins it in block 4's expansion instead
# of the stem, whose channel 0 it held 2.6K cycles past the stem's last ACT SHAVE task),
# 104K 607,822, 112K 644,886; 88K is the middle of that plateau.
DEEP_BYTES_PER_ACT_TASK = 88 << 10
# ...and per byte its ACT SHAVE tasks write, so a segment of a few tiny tasks (a
# squeeze-excite block's excitation: 2 tasks, 64 to 2,304 bytes) hides no deep load: one
# ACT SHAVE takes about 0.65 cycles per byte of a HardSwish block (the stem's 259,019
# cycles for 401,408 bytes, block 4's 101,056 for 150,528), while the DDR moves 16 B.
# MobileNetV3-Small (schedule_bench cycles): per task only 617,564 (three 112 KB chunks of
# the first Gemm behind the 427 cycles of the first excitation), 4 per byte 614,384, 8
# 610,908, 12 and 16 607,090 (those chunks go to the stem and block 4's expansion).
DEEP_BYTES_PER_ACT_BYTE = 16
# The largest chunk of a streaming MatMul's constant weights the lowering cuts under
# ``--schedule default`` (``lower_dpu_matmul``): each chunk is one deep load, and smaller
# ones find more segments to run during; the estimate then leaves their loads out of the
# blocks' (``lower_dpu_split``).  MobileNetV3-Small (schedule_bench cycles, its Gemms' chunk
# counts): 64K 956,658 (22 and 32), 128K 812,951 (11, 16), 192K 822,454 (7, 11), 256K
# 825,742 (7, 8); the old estimate, each block loading its chunk, took 7 and 6: 860,111.
DEEP_LOAD_BYTES = 128 << 10
# In a network without ACT SHAVE work (a CNN), a segment whose loads bring this many times
# more bytes of constants than of values is heavy: its weights keep the DDR busier than its
# blocks keep the DPU (ResNet-18's 512-channel 3x3 layers on 7x7: 23x to 31x; its stage-3
# layers, DPU-bound, 3x to 8x).  ResNet-18 (schedule_bench cycles): 9 1,863,801 (its
# stride-2 layer, 9.6x, heavy too), 20 and 30 1,862,045; none heavy 1,883,645.
HEAVY_RATIO = 20
# How many segments back ``deepen`` spreads a heavy segment's early loads, one per segment,
# never across another heavy one.  ResNet-18: 1 1,874,017, 2 and 3 1,862,045 (two early
# chunks); with the room forced to the whole CMX (four early chunks), 4: 1,858,530, but
# 1.8 MB more of CMX held across stage 3.
HEAVY_BACK = 2
# The smallest load of a segment that does not stream its weights that ``deepen`` moves
# further back, when the segment before cannot hide it.
DEEP_MIN_BYTES = 32 << 10
class EarlyRoom:
    """(gate, tile) -> the CMX bytes the segment after ``gate`` may load early on that tile:
    ``EARLY_CMX_BYTES``, or more when every CMX buffer of the running segment (the one
    whose last store updates the gate, ``<prefix>finished``) together leaves more free:
    its buffers and the early ones then fit side by side, whatever their lifetimes.  The
    values kept in CMX across the running segment (``resident.resident_use``) count as its.

    Side by side only if the running segment's buffers are packed.  Those it loaded early
    itself were placed (allocate-cmx, first fit in order of first use) while its own
    predecessor's buffers were live, around them; when that predecessor ends, its bytes
    are holes between the running segment's buffers, not free room beside them
    (ResNet-18 at 40x40 to 160x160: two 442 KB weight chunks fit a tile by the sum, not in
    one gap).  So the predecessor's buffers on that tile count as taken too when the
    running segment loaded early into it.  Not for the loads of a heavy segment (``heavy``),
    which ``deepen`` moves further back anyway: allocate-cmx's trial decides their room."""

    def __init__(self, module: Module, gates: set[str], cmx_bytes: int | None) -> None:
        self.cmx_bytes = cmx_bytes
        self.used: dict[tuple[str, int], int] = {}        # (segment prefix, tile) -> bytes
        # segment prefix -> (bytes of constants, bytes of values) its DMAs load into CMX
        self.traffic: dict[str, tuple[int, int]] = {}
        self.act_tasks: dict[str, int] = {}                 # segment prefix -> ACT SHAVE tasks
        self.act_bytes: dict[str, int] = {}                 # segment prefix -> bytes they write
        self.prefixes = {g[:-len("finished")] for g in gates if g.endswith("finished")}
        for b in module.buffers:
            if b.kind is BufferKind.CMX:
                prefix = self.prefix_of(b.name)
                if prefix:
                    key = (prefix, b.tile)
                    self.used[key] = self.used.get(key, 0) + b.type.nbytes
        # values kept in CMX while the segment runs take its tile's bytes too
        from vpuc.fusion.resident import resident_use, segment_order
        order = self.order = segment_order(module, self.prefix_of)     # segment prefixes
        for key, nbytes in resident_use(module, order, self.prefix_of).items():
            self.used[key] = self.used.get(key, 0) + nbytes
        symbols = SymbolTable(module)
        for task_list in module.task_lists:
            for t in task_list.tasks:
                prefix = self.prefix_of(t.label or "")
                if task_list.executor is Executor.ACT_SHAVE:
                    self.act_tasks[prefix] = self.act_tasks.get(prefix, 0) + 1
                    regions = [symbols.region(b.buffer) for b in t.outputs]
                    self.act_bytes[prefix] = self.act_bytes.get(prefix, 0) + sum(
                        r.type.nbytes for r in regions if r is not None)
                elif isinstance(t, DmaTask):
                    src, dst = symbols.region(t.src), symbols.region(t.dst)
                    if src is not None and dst is not None and dst.kind is BufferKind.CMX:
                        weights, data = self.traffic.get(prefix, (0, 0))
                        if src.kind is BufferKind.CONST:
                            weights += dst.type.nbytes
                        else:
                            data += dst.type.nbytes
                        self.traffic[prefix] = (weights, data)
        self.heavy_segments = self.heavy()
        # (gate, tile) whose room left out the segment before (``goes_back``): unchecked
        # until allocate-cmx's trial
        self.optimistic: set[tuple[str, int]] = set()

    def prefix_of(self, name: str) -> str:
        """The longest segment prefix of a buffer's name (value names may hold dots
        themselves); "" when none."""
        cut = [i + 1 for i, ch in enumerate(name) if ch == "." and name[:i + 1] in self.prefixes]
        return name[:cut[-1]] if cut else ""

    def gate_of(self, name: str) -> str:
        """The gate the last store of the segment that owns buffer ``name`` updates."""
        prefix = self.prefix_of(name)
        return prefix + "finished" if prefix else ""

    def gate_before(self, name: str) -> str | None:
        """The gate of the segment before the one that owns buffer ``name`` (the one its
        first loads wait on); None for the first segment."""
        prefix = self.prefix_of(name)
        i = self.order.index(prefix) if prefix in self.order else 0
        return self.order[i - 1] + "finished" if i > 0 and self.order[i - 1] else None

    def streaming(self) -> set[str]:
        """The segments (prefixes) whose loads bring ``STREAMING_RATIO`` times more bytes
        of constants than of values."""
        return {p for p, (weights, data) in self.traffic.items()
                if weights >= STREAMING_RATIO * max(data, 1)}

    def heavy(self) -> set[str]:
        """In a network without ACT SHAVE work (a CNN), the segments whose loads bring
        ``HEAVY_RATIO`` times more bytes of constants than of values: layers whose weights
        keep the DDR busier than their blocks keep the DPU (``deepen`` loads their first
        chunks during the segments before, whose DDR idles)."""
        if any(self.act_tasks.values()):
            return set()
        return {p for p, (weights, data) in self.traffic.items()
                if weights >= HEAVY_RATIO * max(data, 1)}

    def goes_back(self, prefix: str) -> bool:
        """Whether the early loads that run during segment ``prefix`` belong to a heavy
        segment and ``deepen`` can move them back: neither ``prefix`` nor the segment
        before it is heavy."""
        a = self.order.index(prefix) if prefix in self.order else -1
        return 0 < a < len(self.order) - 1 and self.order[a + 1] in self.heavy_segments \
            and not {self.order[a - 1], prefix} & self.heavy_segments

    def __call__(self, key: tuple[str, int], loaded_early: dict[tuple[str, int], str]) -> int:
        """``loaded_early``: (a segment's gate, tile) -> the gate of the segment its early
        loads into that tile were placed beside."""
        gate, tile = key
        if self.cmx_bytes is None or not gate.endswith("finished"):
            return EARLY_CMX_BYTES
        prefix = gate[:-len("finished")]
        taken = self.used.get((prefix, tile), 0)
        before = loaded_early.get(key)
        if self.goes_back(prefix):
            # a heavy segment's early loads go further back (``deepen``): whether they fit
            # there is allocate-cmx's trial's to say (``schedule.overlap``)
            self.optimistic.add(key)
            before = None
        if before and before.endswith("finished"):
            taken += self.used.get((before[:-len("finished")], tile), 0)
        return max(EARLY_CMX_BYTES, self.cmx_bytes - taken)


def act_capacity(room: EarlyRoom, prefix: str) -> int:
    """The bytes of deep loads segment ``prefix``'s ACT SHAVE work hides: the smaller of
    ``DEEP_BYTES_PER_ACT_TASK`` per task and ``DEEP_BYTES_PER_ACT_BYTE`` per byte they
    write (a task's count says nothing of its length)."""
    return min(room.act_tasks.get(prefix, 0) * DEEP_BYTES_PER_ACT_TASK,
               room.act_bytes.get(prefix, 0) * DEEP_BYTES_PER_ACT_BYTE)


def deepen(moved: list[tuple[DmaTask, str, int, str, int]], early: dict[int, str],
           early_bytes: dict[tuple[str, int], int], room: EarlyRoom,
           copies: dict[int, list[tuple[DmaTask, int, str, int]]] | None = None) -> set[int]:
    """Decision 2 further back (``schedule.py``): the early loads of a streaming segment
    (``EarlyRoom.streaming``: a classifier's weights, which neither its own compute nor
    the short segment before it can hide) whose constants on a tile exceed
    ``EARLY_CMX_BYTES`` run during an earlier segment with ACT SHAVE work instead, so the
    DDR moves them while the ACT SHAVEs compute; ``early[id(load)]`` becomes that
    segment's gate.  ``moved``: the early loads, (load, gate, tile, destination buffer,
    its bytes), in list order.  Loads are taken from the last (the network's end has
    no compute after it to hide them behind), one per segment (loads of at most
    ``DEEP_BYTES_PER_ACT_TASK`` beside the others: they take no segment), each in the latest
    segment before the next one's whose ACT SHAVE work hides it (``act_capacity``: its
    loads on channel 0 end long before that work), and never so
    far back that a segment it then lives across lacks room on its tile beside that
    segment's buffers, the next one's (which may run beside it, ``schedule_deps``) and
    ``EARLY_CMX_BYTES`` for the usual prefetch.
    Any other segment's load of at least ``DEEP_MIN_BYTES`` goes further back the same way
    when the segment just before it has too few ACT SHAVE tasks to hide it (a squeeze-excite
    block's 1x1 weights and its projection's, behind a pool and two one-pixel layers), and
    ``copies`` (a load's id -> the CMX -> CMX copies of it that load early too: (copy, tile,
    buffer, bytes)) go with it, when their tiles have the room.
    A network without ACT SHAVE work (a CNN) has no segment to hide a classifier's weights
    behind: the first half of them run during the latest segment before theirs that loads
    at least as many bytes itself (``loader``), after its last load, instead of after the
    short segments between (a pool, a flatten) while the DDR idles; the other half leave
    ``early`` and load in the classifier's own order.  There a heavy segment's early loads
    (``EarlyRoom.heavy``: a DDR-bound layer's weight chunks) go one per segment back from
    the last, up to ``HEAVY_BACK`` segments, never across another heavy one, so the DDR
    moves them while the DPU-bound layers before compute.  Returns the ids of the loads
    (and copies) moved."""
    deep: set[int] = set()
    if room.cmx_bytes is None:
        return deep
    index = {p + "finished": i for i, p in enumerate(room.order) if p}
    streaming = room.streaming()
    held: dict[tuple[int, int], int] = {}      # (segment, tile) -> bytes loaded deep
    counted: set[str] = set()                  # buffers held already (two partial loads)

    def fits(j: int, tile: int, nbytes: int) -> bool:
        busy = sum(room.used.get((room.order[k], tile), 0)
                   for k in (j, j + 1) if k < len(room.order))
        return busy + held.get((j, tile), 0) + nbytes + EARLY_CMX_BYTES <= room.cmx_bytes

    def hidden(a: int, gate: str) -> bool:
        """Whether segment ``a`` (whose end is ``gate``), the one the next segment's early
        loads run during, moves as many bytes of values itself as they all do: their DMAs
        then take no longer than its own."""
        ahead = sum(n for (g, _), n in early_bytes.items() if g == gate)
        return room.traffic.get(room.order[a], (0, 0))[1] >= ahead

    ahead: dict[str, list[DmaTask]] = {}      # gate -> a CNN classifier's early loads
    heavy = getattr(room, "heavy_segments", set())
    back: dict[str, int] = {}                 # gate -> the segment its last heavy load went to

    def loader(a: int, nbytes: int) -> int | None:
        """The latest segment before ``a`` whose own loads bring ``nbytes`` or more."""
        return next((j for j in range(a - 1, -1, -1)
                     if sum(room.traffic.get(room.order[j], (0, 0))) >= nbytes), None)

    # segment -> bytes the loads of segments that do not stream (the second kind) load
    # deep during it: together within its ACT SHAVE tasks' share
    spent: dict[int, int] = {}

    copies = copies or {}
    cursor = len(room.order)
    for task, gate, tile, buffer, nbytes in reversed(moved):
        a = index.get(gate)
        # a copy of a load waits on it: it stays after it (or moves with it, below)
        if a is None or task.waits:
            continue
        classifier = room.prefix_of(task.label or "") in streaming \
            and early_bytes.get((gate, tile), 0) > EARLY_CMX_BYTES
        if not classifier and (nbytes < DEEP_MIN_BYTES or hidden(a, gate)):
            continue
        if not classifier and room.prefix_of(task.label or "") in heavy:
            # a heavy segment's early loads (from the last), one per segment back, into
            # segments whose DDR idles while their DPU computes; never across another
            # heavy segment (its own chunks need that CMX and that DDR)
            j = back.get(gate, a) - 1
            if j >= max(a - HEAVY_BACK, 0) and not any(room.order[i] in heavy
                                                       for i in range(j, a + 1)):
                back[gate] = j
                early[id(task)] = room.order[j] + "finished"
                deep.add(id(task))
            continue
        if classifier and not any(room.act_tasks.values()):
            # no ACT SHAVE work anywhere (a CNN): the DDR idles while the short segments
            # before the classifier (a pool, a flatten) run; the first half of its weights
            # load during the latest segment that loads at least as many bytes itself,
            # after its last load, the rest in the classifier's own order, after its rows,
            # while its DPU computes the first half (a deep load ahead of them would hold
            # the pool's loads back in the channel's FIFO).  ResNet-18's Gemm, 8 chunks,
            # during its last 3x3 layer: all deep 1,893,640 cycles (1,894,229 taking turns
            # with its stores on channel 1), the last 2 in own order 1,883,634, 4 1,883,645,
            # 5 1,883,819, 6 1,890,214; none moved 1,903,843.  allocate-cmx's trial
            # decides the room (``schedule._fewer_deep``)
            j = loader(a, sum(n for (g, _), n in early_bytes.items() if g == gate))
            if j is None:
                continue
            own = ahead.setdefault(gate, [t for t, g, *_ in moved if g == gate])
            if own.index(task) < len(own) // 2:
                early[id(task)] = room.order[j] + "finished"
                deep.add(id(task))
            else:
                early.pop(id(task))      # in the classifier's own order, after its rows
            continue
        extra = 0 if buffer in counted else nbytes
        along = [(c, t, b, n) for c, t, b, n in copies.get(id(task), ())
                 if early.get(id(c)) == gate]
        anchor = None
        for j in range(a - 1, -1, -1):
            if not fits(j, tile, extra) or not all(fits(j, t, n) for _, t, _, n in along):
                break
            if not classifier:
                # the latest segment with ACT SHAVE work left to hide it: no cursor
                if act_capacity(room, room.order[j]) \
                        >= spent.get(j, 0) + nbytes + sum(n for *_, n in along):
                    anchor = j
                    break
            elif act_capacity(room, room.order[j]) >= nbytes:
                anchor = j             # the latest that fits, when none before the cursor does
                if j <= cursor:
                    break
        if anchor is None:
            continue
        counted.add(buffer)
        for k in range(anchor, a):
            held[(k, tile)] = held.get((k, tile), 0) + extra
            for _, t, _, n in along:
                held[(k, t)] = held.get((k, t), 0) + n
        if not classifier:
            spent[anchor] = spent.get(anchor, 0) + nbytes + sum(n for *_, n in along)
        elif nbytes > DEEP_BYTES_PER_ACT_TASK:     # a bias, say, takes no segment of its own
            cursor = min(cursor, anchor - 1)
        for t in [task] + [c for c, *_ in along]:
            early[id(t)] = room.order[anchor] + "finished"
            if classifier:
                deep.add(id(t))
    deep |= _left_over(moved, early, early_bytes, room, held, index, streaming)
    return deep


def _left_over(moved: list, early: dict[int, str], early_bytes: dict[tuple[str, int], int],
               room: EarlyRoom, held: dict[tuple[int, int], int], index: dict[str, int],
               streaming: set[str]) -> set[int]:
    """``deepen``'s streaming loads that found no segment, tried again with the room the
    usual early loads of the segments they would live across actually take instead of
    ``EARLY_CMX_BYTES``: those loads are known by now, and a classifier's last loads
    otherwise run after everything else, on the critical path (MobileNetV3-Small's first
    Gemm: two 112 KB chunks, 9.2K cycles, once the other chunks hold its tile's CMX; with
    them deep 607,090 -> 603,365 cycles).  Each goes to the latest segment before its own
    whose ACT SHAVE work hides it (``act_capacity``) and that it lives across with room;
    returns their ids."""
    def classifier(task, gate: str, tile: int) -> bool:
        return room.prefix_of(task.label or "") in streaming \
            and early_bytes.get((gate, tile), 0) > EARLY_CMX_BYTES

    usual: dict[tuple[str, int], int] = {}     # (gate, tile) -> bytes still loading early
    for task, gate, tile, _, nbytes in moved:
        if early.get(id(task)) == gate and not classifier(task, gate, tile):
            usual[(gate, tile)] = usual.get((gate, tile), 0) + nbytes
    placed: set[int] = set()
    for task, gate, tile, _, nbytes in moved:
        a = index.get(gate)
        if a is None or task.waits or early.get(id(task)) != gate \
                or not classifier(task, gate, tile):
            continue
        for j in range(a - 1, -1, -1):
            spans = [k for k in (j, j + 1) if k < len(room.order)]
            busy = sum(room.used.get((room.order[k], tile), 0) for k in spans)
            reserve = max(usual.get((room.order[k] + "finished", tile), 0) for k in spans)
            if busy + held.get((j, tile), 0) + nbytes + reserve > room.cmx_bytes:
                break
            if act_capacity(room, room.order[j]) >= nbytes:
                for k in range(j, a):
                    held[(k, tile)] = held.get((k, tile), 0) + nbytes
                early[id(task)] = room.order[j] + "finished"
                placed.add(id(task))
                break
    return placed


def prefetch_order(tasks: list, early: dict[int, str], gates: set[str],
                   deep: set[int] = frozenset(), spread: set[int] = frozenset(),
                   alternate: set[int] = frozenset()) -> list:
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
    stores, before the next segment's first loads.
    The ``spread`` ones (a streaming segment's early loads no copy reads, ``overlap``) take
    turns between the channels: the first, third, ... of a segment go on channel 0 right
    after the previous segment's last load, as the deep ones, the others on channel 1 as
    above, so their DDR latencies overlap instead of queueing behind each other and the
    stores (MobileNetV3-Small's squeeze-excite weights: 812,951 -> 809,333 cycles;
    every one on channel 0: 824,733; the second, fourth, ...: 810,718).
    The ``alternate`` ones (small loads, ``schedule.overlap``) that go after the last store
    (more loads than stores) take turns too, every second one on channel 0 after the last
    load, unless a copy waits on it or it is one: their DDR latencies then overlap
    (MobileNetV3-Small's 28 KB split weights; schedule_bench cycles: 654,563 -> 652,217,
    ResNet-18 2,083,644 -> 2,081,332; every load past the stores: ResNet-18 2,102,092).
    Moved loads wait on nothing but copies of loads moved before them and keep their
    order, so the list stays in an order every channel can run without waiting on a later
    task."""
    updater = {g: i for i, t in enumerate(tasks) for g in t.updates if g in gates}
    starts = sorted(updater.values())
    moved: dict[tuple[int, int], list[int]] = {}      # (start, end) of a segment -> loads
    anchor: dict[int, int] = {}                      # moved index -> insert after this index
    for i, task in enumerate(tasks):
        gate = early.get(id(task))
        if gate is None:
            continue
        end = updater.get(gate)
        if end is None:          # the first segment's: already first, in their channel's order
            continue
        start = max((s for s in starts if s < end), default=-1)
        if id(task) in deep:
            task.channel = 0
            anchor[i] = max([start] + [j for j in range(start + 1, end + 1)
                                       if tasks[j].channel == 0
                                       and early.get(id(tasks[j])) is None])
            continue
        task.channel = 1
        moved.setdefault((start, end), []).append(i)
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
        rest = 0
        for n, i in enumerate(i for i in loads if i not in turns):
            anchor[i] = slots[min(n, len(slots) - 1)]
            if n >= len(slots) - 1 and id(tasks[i]) in alternate and not tasks[i].waits \
                    and not copied & set(tasks[i].updates):
                rest += 1
                if rest % 2 == 0:
                    tasks[i].channel = 0
                    anchor[i] = last
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
