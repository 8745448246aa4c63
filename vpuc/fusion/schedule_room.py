"""How much CMX a tile leaves for a segment's constants loaded early under ``--schedule
default`` (``schedule.overlap``, decision 2), and what each segment is: ``EarlyRoom`` reads
the lowered module once (each segment's CMX bytes per tile, the bytes of constants and of
values its loads bring, its ACT SHAVE tasks and the bytes they write) and answers per
(gate, tile); ``act_capacity`` is how many bytes of deep loads a segment's ACT SHAVE work
hides.  Where the early loads then go is ``schedule_prefetch``'s.

Expects: a lowered module whose segment gates are ``<prefix>finished`` barriers.
Guarantees: nothing here changes the module.
"""

from __future__ import annotations

from vpuc.fusion.lower_dpu_scale_weights import SCALE_LABEL
from vpuc.ir.module import BufferKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask, Executor

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
# squeeze-excite block's excitation: 2 tasks, 64 to 2,304 bytes) hides no deep load: an
# ACT SHAVE takes about 0.65 cycles per byte of a HardSwish block (the stem's 259,019
# cycles for 401,408 bytes, block 4's 101,056 for 150,528), and a segment's blocks run on
# the 4 ACT SHAVEs of NPU37XX's two tiles at once, so the segment lasts about 0.16 cycles
# per byte it writes, while the DDR moves 24 B a cycle: 3.9 B.  16 (the cycles of one
# ACT SHAVE alone) let ``_left_over`` put two 112 KB chunks of the first Gemm and one of
# the second (335 KB, 14K cycles of DDR) behind the last expansion's 9.4K cycles of ACT
# SHAVE work, ahead of the last pool's loads.  MobileNetV3-Small (schedule_bench cycles,
# with ``_left_over`` counting what a segment hides already): 16 562,751, 4 556,461;
# before that count, 16 562,751 and 4 562,009 (older: per task only 617,564, 4 614,384,
# 8 610,908, 12 and 16 607,090).
DEEP_BYTES_PER_ACT_BYTE = 4
# In a network without ACT SHAVE work (a CNN), a segment whose loads bring this many times
# more bytes of constants than of values is heavy: its weights keep the DDR busier than its
# blocks keep the DPU (ResNet-18's 512-channel 3x3 layers on 7x7: 23x to 31x; its stage-3
# layers, DPU-bound, 3x to 8x).  ResNet-18 (schedule_bench cycles): 9 1,863,801 (its
# stride-2 layer, 9.6x, heavy too), 20 and 30 1,862,045; none heavy 1,883,645.
HEAVY_RATIO = 20
# ...and the run of segments around the first heavy one of a CNN that starts its DDR-bound
# end (``EarlyRoom.lead``), at this ratio: ResNet-18's stride-2 512-channel 3x3 layer (9.6x)
# and the one after it (31x), whose first weight chunks ``schedule_lead`` loads during
# stage 2; the stage-3 layers before them reach 3.9x, the 1x1 downsample after them 4.2x.
LEAD_RATIO = 8


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
        self.lead_segments = self.lead()
        # segments of a projection a squeeze-excite product folded into: its scale reads
        # its weights as soon as the excitation is computed (lower_dpu_scale_weights)
        self.scaled_segments = {prefix for tl in module.task_lists for t in tl.tasks
                                if isinstance(t, DpuTask) and t.op is DpuOp.DWCONV
                                and (prefix := self.prefix_of(t.label or ""))
                                and SCALE_LABEL.fullmatch(t.label[len(prefix):])}
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

    def lead(self) -> list[str]:
        """In a network without ACT SHAVE work, the first run of consecutive segments
        (prefixes, in order) whose loads bring ``LEAD_RATIO`` times more bytes of constants
        than of values and one of which is heavy: where the DDR-bound end of a CNN starts
        (ResNet-18's stage 4: its first two 3x3 layers; the 1x1 downsample after them ends
        the run).  Every weight byte of theirs in CMX when the segment before them ends is
        one the DDR need not move after it (``schedule_lead``)."""
        if any(self.act_tasks.values()):
            return []
        run: list[str] = []
        for p in self.order:
            weights, data = self.traffic.get(p, (0, 0))
            if p and weights >= LEAD_RATIO * max(data, 1):
                run.append(p)
            elif set(run) & self.heavy_segments:
                break
            else:
                run = []
        return run if set(run) & self.heavy_segments else []

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
