"""Which DMA channel a segment's deep loads go on (``vpuc/fusion/schedule_prefetch.py``,
``prefetch_order``): a deep load on channel 0 right after the segment's last load; a CNN
classifier's deep loads, and small loads after the first, taking turns between the
channels; a second small load never queued behind a pool's only store."""

from __future__ import annotations

from vpuc.fusion.schedule_prefetch_order import prefetch_order
from vpuc.ir.tasks import DmaTask


def _dma(label: str, channel: int, waits=(), updates=()) -> DmaTask:
    return DmaTask(label, tuple(waits), tuple(updates), "%src", "%dst", channel)


def test_a_deep_load_goes_on_channel_0_after_the_segments_last_load():
    tasks = [_dma("A.store0", 1, updates=["A.finished"]),
             _dma("P.load0", 0, ["A.finished"]), _dma("P.load1", 0, ["A.finished"]),
             _dma("P.store0", 1, ["P.done0"]), _dma("P.store1", 1, ["P.done1"], ["P.finished"]),
             _dma("Q.load0", 0, ["P.finished"]), _dma("Q.store0", 1, ["Q.done0"], ["Q.finished"]),
             _dma("C.w0", 1)]
    early = {id(tasks[-1]): "P.finished"}
    out = prefetch_order(tasks, early, {"A.finished", "P.finished", "Q.finished"},
                         {id(tasks[-1])})
    assert [t.label for t in out] == ["A.store0", "P.load0", "P.load1", "C.w0", "P.store0",
                                      "P.store1", "Q.load0", "Q.store0"]
    assert tasks[-1].channel == 0


def test_a_cnn_classifiers_deep_loads_take_turns_between_the_channels():
    """``turns``: the second, fourth, ... deep load of a segment goes on channel 1 right
    after the segment's last task there that is not a store (a DMA of a computed block,
    which waits for its compute): both channels stream them while the segment's last
    blocks compute, and its stores wait behind no more than the segment's own loads."""
    def segment():
        tasks = [_dma("A.store0", 1, updates=["A.finished"]),
                 _dma("P.load0", 0, ["A.finished"]), _dma("P.load_w1", 1, ["P.done0"]),
                 _dma("P.store0", 1, ["P.done0"]), _dma("P.load1", 0, ["A.finished"]),
                 _dma("P.store1", 1, ["P.done1"], ["P.finished"]),
                 _dma("C.w0", 0), _dma("C.w1", 0), _dma("C.w2", 0)]
        return tasks, {id(t): "P.finished" for t in tasks[6:]}
    tasks, early = segment()
    deep = {id(t) for t in tasks[6:]}
    stores = {id(tasks[0]), id(tasks[3]), id(tasks[5])}
    out = prefetch_order(tasks, early, {"A.finished", "P.finished"}, deep, turns=deep,
                         stores=stores)
    assert [t.label for t in out] == ["A.store0", "P.load0", "P.load_w1", "C.w1", "P.store0",
                                      "P.load1", "C.w0", "C.w2", "P.store1"]
    assert [t.channel for t in tasks[6:]] == [0, 1, 0]
    tasks, early = segment()          # not a CNN classifier's: all on channel 0
    out = prefetch_order(tasks, early, {"A.finished", "P.finished"}, {id(t) for t in tasks[6:]})
    assert [t.label for t in out][-4:] == ["C.w0", "C.w1", "C.w2", "P.store1"]
    assert all(t.channel == 0 for t in tasks[6:])


def test_small_loads_after_the_first_take_turns_between_the_channels():
    """``alternate``: a segment's early loads after its first take turns, from channel 0,
    after the previous segment's last load, so their DDR latencies overlap and fewer
    queue ahead of its stores; one a copy waits on, or a copy, stays on channel 1, and so
    do loads not in ``alternate``."""
    def segment():
        tasks = [_dma("A.store0", 1, updates=["A.finished"]),
                 _dma("P.load0", 0, ["A.finished"]),
                 _dma("P.store0", 1, ["P.done0"], ["P.finished"]),
                 _dma("Q.w0", 1), _dma("Q.w1", 1), _dma("Q.w2", 1), _dma("Q.w3", 1),
                 _dma("Q.w4", 1, updates=["Q.w4.copied"]), _dma("Q.w5", 1, ["Q.w4.copied"]),
                 _dma("Q.load0", 0, ["P.finished"])]
        return tasks, {id(t): "P.finished" for t in tasks[3:9]}
    tasks, early = segment()
    out = prefetch_order(tasks, early, {"A.finished", "P.finished"},
                         alternate={id(t) for t in tasks[3:9]})
    # w0 after A's store (the segment's start); w1 and w3 on channel 0 after P.load0,
    # w2 after P's store, w4 (its copy's source) and w5 (the copy) after it too
    assert [t.label for t in out] == ["A.store0", "Q.w0", "P.load0", "Q.w1", "Q.w3",
                                      "P.store0", "Q.w2", "Q.w4", "Q.w5", "Q.load0"]
    assert [t.channel for t in out if t.label.startswith("Q.w")] == [1, 0, 0, 1, 1, 1]
    tasks, early = segment()
    out = prefetch_order(tasks, early, {"A.finished", "P.finished"})
    assert all(t.channel == 1 for t in out if t.label.startswith("Q.w"))


def test_a_second_small_load_does_not_queue_behind_a_pools_only_store():
    """A squeeze-excite block's global pool reads its input in place (no load of its own)
    and has one store, the gate of the 1x1 after it: of the 1x1's two weight loads the
    second goes on channel 0, right after the pool's start beside the first, not on
    channel 1 behind that store (where it ran after the gate, on the critical path)."""
    tasks = [_dma("A.store0", 1, updates=["A.finished"]),
             _dma("P.store0", 1, ["P.done0"], ["P.finished"]),
             _dma("Q.w0", 1), _dma("Q.w1", 1), _dma("Q.load0", 0, ["P.finished"])]
    loads = tasks[2:4]
    out = prefetch_order(tasks, {id(t): "P.finished" for t in loads},
                         {"A.finished", "P.finished"}, alternate={id(t) for t in loads})
    assert [t.label for t in out] == ["A.store0", "Q.w0", "Q.w1", "P.store0", "Q.load0"]
    assert [t.channel for t in loads] == [1, 0]
