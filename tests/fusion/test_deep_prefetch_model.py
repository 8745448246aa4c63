"""The deep loads on a model (``vpuc/fusion/schedule.py``, ``schedule_prefetch.py``):
MobileNetV3-Small's classifier weights load before its last segments; when allocate-cmx
finds no room for them all the latest are kept, ranked by segment and then list place,
never by address (split from ``test_deep_prefetch``, whose tests stand in for the
segments)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vpuc import api
from vpuc.fusion.schedule_prefetch import DEEP_MIN_BYTES
from vpuc.fusion.schedule_room import STREAMING_RATIO, EarlyRoom, act_capacity
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import mobilenet_v3_small


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    return mobilenet_v3_small(size=64, classes=10).save(
        tmp_path_factory.mktemp("deep") / "m.onnx", "m")


def test_mobilenet_classifier_weights_load_before_its_last_segments(mobilenet, monkeypatch):
    from vpuc.fusion import schedule
    seen = {}
    real = schedule.deepen

    def recording(moved, early, early_bytes, room, copies=None, turns=None):
        deep = real(moved, early, early_bytes, room, copies, turns)
        seen.update(room=room, deep={t.label: early[id(t)] for t, *_ in moved
                                     if id(t) in deep},
                    nbytes={t.label: nbytes for t, _, _, _, nbytes in moved},
                    behind={t.label: (gate, early[id(t)], nbytes)
                            for t, gate, _, _, nbytes in moved
                            if id(t) not in deep and early.get(id(t), gate) != gate})
        return deep

    monkeypatch.setattr(schedule, "deepen", recording)
    program = api.compile(mobilenet, schedule="default")
    room, deep = seen["room"], seen["deep"]
    gemms = [p for p in room.streaming() if "gemm" in p]
    assert gemms and all(room.traffic[p][0] >= STREAMING_RATIO * room.traffic[p][1]
                         for p in gemms)
    assert deep and all(label.startswith(tuple(gemms)) for label in deep)
    index = {p + "finished": i for i, p in enumerate(room.order)}
    for label, gate in deep.items():     # ACT SHAVE work that hides it
        assert act_capacity(room, room.order[index[gate]]) >= seen["nbytes"][label]
    # the other segments' big loads moved further back (the projections'; a projection a
    # product folded into, any of its loads: lower_dpu_scale_weights; a squeeze-excite
    # 1x1's, which streams its weights, any of its loads): each to an earlier segment with
    # ACT SHAVE work
    assert seen["behind"]
    streaming = room.streaming()
    assert any(room.prefix_of(label) in streaming and nbytes < DEEP_MIN_BYTES
               for label, (_, _, nbytes) in seen["behind"].items())
    for label, (gate, now, nbytes) in seen["behind"].items():
        assert nbytes >= DEEP_MIN_BYTES or room.prefix_of(label) in room.scaled_segments \
            or room.prefix_of(label) in streaming
        assert index[now] < index[gate]
        assert room.act_tasks[room.order[index[now]]] > 0
    # in the program: each such load precedes, in the DMA list, the loads of the
    # segment its gate ends, and waits on nothing
    module = program.module
    dma = [t for tl in module.task_lists for t in tl.tasks if isinstance(t, DmaTask)]
    position = {t.label: i for i, t in enumerate(dma)}
    symbols = SymbolTable(module)
    for label, gate in deep.items():
        task = dma[position[label]]
        assert task.channel == 0 and not task.waits
        assert symbols.region(task.src).kind is BufferKind.CONST
        # (a segment whose blocks write a value kept in CMX in place, resident.py, may end
        # in a DPU task, and its gate go once the loads after it wait on data: its last DMA)
        ends = [i for i, t in enumerate(dma) if gate in t.updates] or [
            i for i, t in enumerate(dma) if (t.label or "").startswith(gate.removesuffix("finished"))]
        assert position[label] < max(ends)
    assert isinstance(room, EarlyRoom)


def test_when_allocate_cmx_finds_no_room_the_deep_and_paced_loads_are_given_up(
        mobilenet, monkeypatch):
    from vpuc.fusion import schedule
    calls, turns = [], set()
    real_order = schedule.prefetch_order

    def recording_order(tasks, early, gates, deep=frozenset(), spread=frozenset(),
                        alternate=frozenset(), **rest):
        calls.append(set(deep))
        turns.update(spread)
        return real_order(tasks, early, gates, deep, spread, alternate, **rest)

    monkeypatch.setattr(schedule, "prefetch_order", recording_order)
    monkeypatch.setattr(schedule, "cmx_fits", lambda module, arch: False)
    program = api.compile(mobilenet, schedule="default")
    # the deep order was tried, then the list ordered again with none
    assert calls[-2] and calls[-1] == set()
    weights = [t for tl in program.module.task_lists for t in tl.tasks
               if isinstance(t, DmaTask) and "gemm" in (t.label or "") and ".w.c" in t.label]
    # the streaming loads that waited on an earlier block's end wait on it again, and
    # no weight load is left early on channel 0 but those taking turns with channel 1
    # (``prefetch_order``'s ``spread``)
    assert any(any(".done" in w for w in t.waits) for t in weights)
    assert not any(t.channel == 0 and not t.waits and id(t) not in turns for t in weights)


def test_when_all_deep_loads_leave_no_room_the_latest_ones_stay_deep(mobilenet, monkeypatch):
    """``schedule._fewer_deep``: allocate-cmx finds no room for every deep load (the first
    trial, stood in for), room for ``DEEP_KEPT[0]`` of them: those that run latest (their
    gates nearest the classifier) stay deep, the others load early into the segment before
    theirs, on channel 1."""
    from vpuc.fusion import schedule
    calls, seen = [], {}
    real_order, real_deepen = schedule.prefetch_order, schedule.deepen

    def recording_order(tasks, early, gates, deep=frozenset(), spread=frozenset(),
                        alternate=frozenset(), **rest):
        calls.append({t.label: early[id(t)] for t in tasks if id(t) in deep})
        seen.update(gate={t.label: early.get(id(t)) for t in tasks})
        return real_order(tasks, early, gates, deep, spread, alternate, **rest)

    def recording_deepen(moved, early, early_bytes, room, copies=None, turns=None):
        deep = real_deepen(moved, early, early_bytes, room, copies, turns)
        seen.update(order=room.order)
        return deep

    # the first trial fails with everything moved, the second with the big loads of
    # segments that do not stream back behind their gates (``behind``), the third fits
    trials = iter([False, False, True])
    monkeypatch.setattr(schedule, "prefetch_order", recording_order)
    monkeypatch.setattr(schedule, "deepen", recording_deepen)
    monkeypatch.setattr(schedule, "cmx_fits", lambda module, arch: next(trials))
    program = api.compile(mobilenet, schedule="default")
    every, kept = calls[0], calls[-1]
    assert calls[1] == every         # the retry without ``behind``: every deep load still
    assert len(calls) == 3 and len(kept) == int(len(every) * schedule.DEEP_KEPT[0]) > 0
    assert set(kept) < set(every) and all(kept[label] == every[label] for label in kept)
    index = {p + "finished": i for i, p in enumerate(seen["order"])}
    assert min(index[every[label]] for label in kept) \
        >= max(index[every[label]] for label in set(every) - set(kept))
    dma = {t.label: t for tl in program.module.task_lists for t in tl.tasks
           if isinstance(t, DmaTask)}
    for label in set(every) - set(kept):          # early into the segment before its own
        assert not dma[label].waits
        assert index[seen["gate"][label]] > index[every[label]]
    assert all(dma[label].channel == 0 for label in kept)


def test_fewer_deep_ranks_by_segment_then_list_place_not_by_address():
    """``schedule.latest_first``: when deep loads must give way, the ones kept are those of
    the latest segments, and within one segment the latest in the DMA list: never the
    order of a set of ids, which follows the objects' addresses (a compile would then keep
    other loads depending on the memory layout)."""
    from vpuc.fusion.schedule import latest_first
    tasks = [SimpleNamespace(label=f"t{k}") for k in range(40)]
    order = ["S0.", "S1.", "S2."]
    anchor = {id(t): ("S1.finished" if k < 30 else "S2.finished") for k, t in enumerate(tasks)}
    ranked = latest_first({id(t) for t in tasks}, anchor, order, tasks)
    assert ranked == [id(t) for t in reversed(tasks[30:])] + [id(t) for t in reversed(tasks[:30])]
