"""Which DMA channel runs each CMX -> CMX copy of an early weight load
(``schedule.overlap``, decision 3: weights read from DDR once, the other tile's copy made
from the first tile's buffer; placed by ``schedule_prefetch_order.prefetch_order``).

``prefetch_order`` put a segment's early loads and their copies on channel 1, so in a
weight-bound stretch channel 1 carried every weight twice, once from DDR and once tile to
tile, behind the segment's stores, while channel 0 carried only the small input loads
(DenseNet-121's dense block 4, 7 x 7 maps: channel 1 97% busy, channel 0 26%).  A copy
moves no DDR bytes (``vpuc/cost/dma.py``: ``ddr_sides`` 0), so on channel 0 it runs beside
the next load at the full engine rate instead of after it.  Loading the second tile from
DDR instead costs as much channel time and shares the DDR with the first load (the DDR's
rate is one engine's, ``npu37xx.toml``: two loads at once each run at half rate, 2W/24
cycles for both either way), and the copy's 16-cycle CMX latency beats the DDR's 870, so
the copy is kept and only its channel is chosen (``copy_channels``), by ``ChannelBusy``'s
estimate of each channel's busy time.  A copy moves only when its load is the one that
then takes the segment's first slot on channel 1 (``biggest_first``: the costliest load
that waits on nothing), so the load runs from the segment's start and the copy, queued on
channel 0 behind the segment's loads, finds it done; a copy of a load queued behind a
store that waits on compute (the estimate does not see compute) would hold channel 0 with
it (the encoder layer's LayerNorm constants, moved by the estimate alone: 4,543 cycles
more).

DenseNet-121 (zoo_schedule_bench cycles): 3,304,139 -> 3,120,310; copies moved by the
estimate alone, loads in list order: 3,252,217; with the costliest load first in every
segment with copies: 3,153,263, but MobileNetV3-Small 554,079 -> 554,935 and, with
copies of any load moved, the encoder layer 662,600 -> 669,334.  Only moving a copy when
its load ends before channel 0 is free: 3,281,127.

Deadlock-free by construction: a copy put on channel 0 goes where ``prefetch_order`` puts
the ``alternate`` loads, right after the last DMA of the segment it runs during (its own
tasks, not an early load) on channel 0.  Its load waits on nothing and is the first early
load on channel 1, right after the task that starts the segment, so nothing it queues
behind belongs to the segment or a later one; what those wait on (earlier segments'
compute, their loads) is on channel 0 before that last DMA.  So nothing the copy waits on
queues behind it; and what waits on the copy (the next segment's DPU tasks, behind the
segment's gate) is no task of the segment, so no task ahead of it on channel 0 waits on
it.  The list's order still is one every channel runs without waiting on a later task.

Expects: ``prefetch_order``'s segments, channels not yet relied on by any analysis
(before allocate-cmx and ``relax_gates``).
Guarantees: only the ``channel`` of the given copies changes; the caller places them.
"""

from __future__ import annotations

from vpuc.cost.dma import dma_task_cycles, transfer_cost
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaMode, DmaTask


def dma_cycles(task: DmaTask, symbols: SymbolTable, timing) -> float:
    """A DMA task's cycles by the cost model, alone on the DDR (``dma_task_cycles``)."""
    src, dst = symbols.region(task.src), symbols.region(task.dst)
    if src is None or dst is None:
        return float(timing.dispatch["DMA"])
    transfer = transfer_cost(task.mode is DmaMode.PERMUTE, src.type.nbytes,
                             src.type.elem.nbytes, src.kind is not BufferKind.CMX,
                             dst.type.nbytes, dst.kind is not BufferKind.CMX, timing.dma)
    return dma_task_cycles(transfer, timing.dispatch["DMA"], timing.ddr_bytes_per_cycle)


class ChannelBusy:
    """Each channel's estimated busy time over the segments walked so far: the cost
    model's cycles of its DMAs (``costs``: a DMA's id -> cycles), one after another, a
    task starting when its channel is free and the DMAs it waits on (through the barriers
    they update) have ended.  Waits on compute count as met: the estimate is of the
    channels' own work, which is what a weight-bound stretch is bound by."""

    def __init__(self, costs: dict[int, float], channels: int = 2) -> None:
        self.costs = costs
        self.free = [0.0] * channels
        self.ended: dict[str, float] = {}   # barrier -> latest estimated end of a DMA updating it

    def sync(self) -> None:
        """A segment's start: its tasks wait on the gate before theirs, which waits on
        both channels' work before it, so both start from the later one."""
        self.free = [max(self.free)] * len(self.free)

    def ready(self, task) -> float:
        return max((self.ended.get(b, 0.0) for b in task.waits), default=0.0)

    def end_on(self, task, channel: int) -> float:
        """When ``task`` would end queued on ``channel`` now."""
        return max(self.free[channel], self.ready(task)) + self.costs.get(id(task), 0.0)

    def run(self, task) -> None:
        """``task`` queued on its channel."""
        end = self.end_on(task, task.channel)
        self.free[task.channel] = end
        for b in task.updates:
            self.ended[b] = max(self.ended.get(b, 0.0), end)


def copy_channels(tasks: list, loads: list[int], start: int, end: int, early: dict[int, str],
                  copies: set[int], busy: ChannelBusy) -> list[int]:
    """The segment between the gate updates at ``start`` and ``end`` (indices in ``tasks``)
    walked into ``busy``: its own DMAs, then the next segment's early ``loads`` (indices,
    in ``biggest_first``'s order) on their channels, each of the ``copies`` among them of
    the first load on the channel where it would end first (channel 1, where
    ``prefetch_order`` put it, on a tie).  Returns the indices of the copies put on
    channel 0."""
    busy.sync()
    for j in range(start + 1, end + 1):
        if isinstance(tasks[j], DmaTask) and early.get(id(tasks[j])) is None:
            busy.run(tasks[j])
    moved = []
    for i in loads:
        task = tasks[i]
        if id(task) in copies and task.channel == 1 \
                and set(task.waits) <= set(tasks[loads[0]].updates) \
                and busy.end_on(task, 0) < busy.end_on(task, 1):
            task.channel = 0
            moved.append(i)
        busy.run(task)
    return moved


def biggest_first(tasks: list, loads: list[int], costs: dict[int, float]) -> list[int]:
    """``loads`` (indices, in list order) with the costliest one that waits on nothing
    first: it takes the segment's first slot on channel 1, at its start, instead of one
    behind a store that waits on the segment's compute."""
    free = [i for i in loads if not tasks[i].waits]
    if not free:
        return loads
    first = max(free, key=lambda i: costs.get(id(tasks[i]), 0.0))
    return [first] + [i for i in loads if i != first]
