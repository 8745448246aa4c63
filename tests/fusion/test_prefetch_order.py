"""Where ``--schedule default`` puts a segment's prefetched constants in the DMA list
(``vpuc/fusion/schedule_prefetch.py``, ``prefetch_order``): the first at the previous segment's
start, the others one after each of its stores in turn, so its stores are not queued
behind every early load (ResNet-18's short residual 1x1 convolutions waited 40K cycles
for the next layer's weights), and in their own order."""

from __future__ import annotations

from vpuc.fusion.schedule_prefetch_order import prefetch_order
from vpuc.ir.tasks import DmaTask


def _dma(label: str, channel: int, waits=(), updates=()) -> DmaTask:
    return DmaTask(label, tuple(waits), tuple(updates), "%src", "%dst", channel)


def _program(early_loads: int, stores: int):
    """Segment A ends with its gate A.finished; segment P loads after it and stores
    ``stores`` blocks, its last updating P.finished; segment N's constants (waiting on
    P.finished, the gate before N) come after."""
    tasks = [_dma("A.store0", 1, updates=["A.finished"]), _dma("P.load0", 0, ["A.finished"])]
    tasks += [_dma(f"P.store{k}", 1, [f"P.done{k}"],
                   ["P.finished"] if k == stores - 1 else []) for k in range(stores)]
    loads = [_dma(f"N.w{k}", 0, ["P.finished"]) for k in range(early_loads)]
    tasks += loads + [_dma("N.load0", 0, ["P.finished"])]
    return tasks, {id(t): "P.finished" for t in loads}


def test_early_loads_go_between_the_previous_segments_stores():
    tasks, early = _program(early_loads=4, stores=3)
    order = [t.label for t in prefetch_order(tasks, early, {"A.finished", "P.finished"})]
    assert order == ["A.store0", "N.w0", "P.load0", "P.store0", "N.w1", "P.store1", "N.w2",
                     "P.store2", "N.w3", "N.load0"]
    assert all(t.channel == 1 for t in tasks if t.label.startswith("N.w"))


def test_a_long_segment_takes_them_one_store_each():
    tasks, early = _program(early_loads=2, stores=5)
    order = [t.label for t in prefetch_order(tasks, early, {"A.finished", "P.finished"})]
    # every early load still precedes the previous segment's last store
    assert order.index("N.w1") == order.index("P.store0") + 1
    assert order.index("N.w1") < order.index("P.store4")


def test_the_first_segments_constants_stay_where_they_are():
    tasks = [_dma("F.w0", 0), _dma("F.load0", 0), _dma("F.store0", 1, updates=["F.finished"])]
    out = prefetch_order(tasks, {id(tasks[0]): ""}, {"F.finished"})
    assert [t.label for t in out] == ["F.w0", "F.load0", "F.store0"]


def test_a_streaming_segments_loads_take_turns_between_the_channels():
    """``spread``: the first, third, ... go on channel 0 after the previous segment's last
    load (P.load0), in order; the others between its stores on channel 1 as before."""
    tasks, early = _program(early_loads=5, stores=3)
    spread = {id(t) for t in tasks if t.label.startswith("N.w")}
    out = prefetch_order(tasks, early, {"A.finished", "P.finished"}, spread=spread)
    order = [t.label for t in out]
    assert order == ["A.store0", "N.w1", "P.load0", "N.w0", "N.w2", "N.w4", "P.store0", "N.w3",
                     "P.store1", "P.store2", "N.load0"]
    channel = {t.label: t.channel for t in out}
    assert [channel[f"N.w{k}"] for k in range(5)] == [0, 1, 0, 1, 0]
    # loads not in ``spread`` keep channel 1 (the plain order above)
    tasks, early = _program(early_loads=5, stores=3)
    spread = {id(tasks[-2])}                          # N.w4 alone
    out = [t.label for t in prefetch_order(tasks, early, {"A.finished", "P.finished"},
                                           spread=spread)]
    assert out.index("N.w4") == out.index("P.load0") + 1
    assert [t.channel for t in tasks if t.label.startswith("N.w")] == [1, 1, 1, 1, 0]
