"""A streaming segment's weights loaded further back (``vpuc/fusion/schedule_prefetch.py``,
``deepen`` and ``prefetch_order``'s ``deep`` loads): a classifier's weights spread over
the earlier segments with ACT SHAVE work, one load each, from the last, never across a
segment whose tile lacks the room (the ones of one segment sharing a barrier:
``test_schedule_share.py``; their channels: ``test_deep_prefetch_channels.py``).
And on a model: MobileNetV3-Small's classifier weights load before its last segments."""

from __future__ import annotations

from types import SimpleNamespace


from vpuc.fusion.schedule_prefetch import CNN_CLASSIFIER_DEEP, DEEP_MIN_BYTES, HEAVY_BACK, deepen
from vpuc.fusion.schedule_prefetch_order import prefetch_order
from vpuc.fusion.schedule_room import (DEEP_BYTES_PER_ACT_BYTE, DEEP_BYTES_PER_ACT_TASK,
                                       EARLY_CMX_BYTES, HEAVY_RATIO, EarlyRoom, act_capacity)
from vpuc.ir.tasks import DmaTask

MIB = 1 << 20
CHUNK = 360 << 10            # a weight chunk larger than EARLY_CMX_BYTES


def _room(act: list[int], used: dict[tuple[int, int], int] | None = None,
          streaming=("C.",), cmx: int = 2 * MIB, values: dict[int, int] | None = None,
          act_bytes: dict[int, int] | None = None):
    """A stand-in for ``EarlyRoom``: segments S0. .. S<n-1>. then C. (the classifier, last),
    ``act[j]`` ACT SHAVE tasks in S<j>, ``used[(j, tile)]`` bytes of S<j>'s buffers,
    ``values[j]`` bytes of values S<j>'s DMAs load into CMX (none unless given),
    ``act_bytes[j]`` bytes S<j>'s ACT SHAVE tasks write (unless given, enough that their
    count alone decides)."""
    order = [f"S{j}." for j in range(len(act))] + ["C."]
    per_task = -(-DEEP_BYTES_PER_ACT_TASK // DEEP_BYTES_PER_ACT_BYTE)
    return SimpleNamespace(
        cmx_bytes=cmx, order=order,
        used={(order[j], t): n for (j, t), n in (used or {}).items()},
        traffic={order[j]: (0, n) for j, n in (values or {}).items()},
        act_tasks={f"S{j}.": n for j, n in enumerate(act)},
        act_bytes={f"S{j}.": (act_bytes or {}).get(j, n * per_task) for j, n in enumerate(act)},
        streaming=lambda: set(streaming),
        prefix_of=lambda name: name[:name.index(".") + 1])


def _loads(n: int, gate: str, nbytes: int = CHUNK):
    """``n`` early loads of C.'s weights, alternating tiles, as ``overlap`` records them."""
    tasks = [DmaTask(f"C.w{k}", (), (f"C.loaded{k}",), f"%C.w{k}.v", f"%C.w{k}", 1)
             for k in range(n)]
    moved = [(t, gate, k % 2, f"C.w{k}", nbytes) for k, t in enumerate(tasks)]
    early = {id(t): gate for t in tasks}
    per_tile = {}
    for _, g, tile, _, b in moved:
        per_tile[(g, tile)] = per_tile.get((g, tile), 0) + b
    return tasks, moved, early, per_tile


def test_streaming_weights_spread_over_act_segments_from_the_last():
    room = _room(act=[8, 0, 8, 8, 0, 8, 0])          # S6 (no ACT) runs before C.
    tasks, moved, early, per_tile = _loads(3, "S6.finished")
    deep = deepen(moved, early, per_tile, room)
    assert deep == {id(t) for t in tasks}
    # the last load goes to the latest ACT segment, each earlier one a segment further
    assert [early[id(t)] for t in tasks] == ["S2.finished", "S3.finished", "S5.finished"]


def test_a_small_load_goes_beside_the_others_without_taking_a_segment():
    room = _room(act=[8, 0, 8, 8, 0, 8, 0])
    w0, w1 = (DmaTask(f"C.w{k}", (), (), f"%C.w{k}.v", f"%C.w{k}", 1) for k in range(2))
    bias = DmaTask("C.bias0", (), (), "%C.b.v", "%C.b0", 1)
    moved = [(w0, "S6.finished", 0, "C.w0", CHUNK), (bias, "S6.finished", 0, "C.b0", 640),
             (w1, "S6.finished", 0, "C.w1", CHUNK)]
    early = {id(t): "S6.finished" for t, *_ in moved}
    deep = deepen(moved, early, {("S6.finished", 0): 2 * CHUNK + 640}, room)
    assert len(deep) == 3
    # the bias runs in the segment before w1's; w0 goes there too, not one further back
    assert [early[id(t)] for t in (w0, bias, w1)] == ["S3.finished"] * 2 + ["S5.finished"]


def test_an_act_segment_too_short_for_the_load_is_skipped():
    need = -(-CHUNK // DEEP_BYTES_PER_ACT_TASK)      # ACT tasks a segment needs for one chunk
    room = _room(act=[need, 0, need - 1, 0])
    tasks, moved, early, per_tile = _loads(1, "S3.finished")
    deepen(moved, early, per_tile, room)
    assert early[id(tasks[0])] == "S0.finished"


def test_many_act_tasks_that_write_little_hide_no_load():
    """A squeeze-excite block's excitation: ACT SHAVE tasks enough by their count, but a few
    hundred bytes of work (``act_capacity``): the load goes to the segment before, whose
    tasks write enough to hide it."""
    small = CHUNK // DEEP_BYTES_PER_ACT_BYTE - 1          # bytes written: one short of CHUNK
    room = _room(act=[8, 0, 8, 0], act_bytes={2: small})
    tasks, moved, early, per_tile = _loads(1, "S3.finished")
    assert deepen(moved, early, per_tile, room) == {id(tasks[0])}
    assert early[id(tasks[0])] == "S0.finished"
    room = _room(act=[8, 0, 8, 0], act_bytes={2: small + 1})
    tasks, moved, early, per_tile = _loads(1, "S3.finished")
    deepen(moved, early, per_tile, room)
    assert early[id(tasks[0])] == "S2.finished"


def test_never_across_a_segment_without_room():
    full = 2 * MIB - EARLY_CMX_BYTES - CHUNK + 1      # S2 and S3 together leave too little
    room = _room(act=[8, 8, 8, 8, 0], used={(2, 0): full // 2, (3, 0): full - full // 2})
    tasks, moved, early, per_tile = _loads(2, "S4.finished")
    deep = deepen(moved, early, per_tile, room)
    # tile 1 (the second load) goes to S3; tile 0 cannot live across S2 (S2 + S3 too full),
    # so it stays in S3 too, the latest segment it fits beside
    assert early[id(tasks[1])] == "S3.finished"
    assert early[id(tasks[0])] == "S3.finished" and id(tasks[0]) in deep
    # not even S3 has the room, not even without EARLY_CMX_BYTES (``_left_over``)
    room = _room(act=[8, 8, 8, 8, 0], used={(3, 0): full + EARLY_CMX_BYTES, (4, 0): 0})
    tasks, moved, early, per_tile = _loads(1, "S4.finished")
    assert deepen(moved, early, per_tile, room) == set()
    assert early[id(tasks[0])] == "S4.finished"


def test_a_load_left_without_a_segment_tries_the_room_the_usual_prefetch_takes():
    """``_left_over``: S1 holds so much that a load beside it leaves less than
    ``EARLY_CMX_BYTES`` free, so the first pass finds no segment for C.'s load; no early
    load of the next segments takes that room, so the load goes to S1 after all."""
    full = 2 * MIB - EARLY_CMX_BYTES - CHUNK + 1
    room = _room(act=[8, 8, 0], used={(1, 0): full})
    tasks, moved, early, per_tile = _loads(1, "S2.finished")
    assert deepen(moved, early, per_tile, room) == {id(tasks[0])}
    assert early[id(tasks[0])] == "S1.finished"
    # an early load of S2 (its gate S1's) that does take the room keeps it
    other = DmaTask("S2.w", (), (), "%S2.w.v", "%S2.w", 1)
    tasks, moved, early, per_tile = _loads(1, "S2.finished")
    moved.insert(0, (other, "S1.finished", 0, "S2.w", EARLY_CMX_BYTES))
    early[id(other)] = "S1.finished"
    assert deepen(moved, early, per_tile, room) == set()
    assert early[id(tasks[0])] == "S2.finished"


def test_left_over_loads_share_a_segments_act_work():
    """``_left_over``: S1's ACT SHAVE work hides one chunk (``act_capacity``); the first
    pass finds no segment for either of C.'s two chunks (S1 leaves less than
    ``EARLY_CMX_BYTES`` beside one), so both are tried again with the room the usual
    prefetch takes: the first goes to S1, the second finds S1's work spent on the first
    (not each chunk against the whole of it) and goes on to S0."""
    full = 2 * MIB - EARLY_CMX_BYTES - CHUNK + 1
    room = _room(act=[9, 8, 0], used={(1, 0): full, (1, 1): full},
                 act_bytes={1: -(-CHUNK // DEEP_BYTES_PER_ACT_BYTE)})
    assert act_capacity(room, "S1.") < 2 * CHUNK <= act_capacity(room, "S0.")
    tasks, moved, early, per_tile = _loads(2, "S2.finished")
    assert deepen(moved, early, per_tile, room) == {id(tasks[0]), id(tasks[1])}
    assert early[id(tasks[0])] == "S1.finished"
    assert early[id(tasks[1])] == "S0.finished"


def test_only_streaming_segments_and_only_more_than_the_usual_prefetch():
    # S2 moves as many bytes of values as the loads: it hides them, nothing moves
    room = _room(act=[8, 8, 0], streaming=(), values={2: 2 * CHUNK})
    tasks, moved, early, per_tile = _loads(2, "S2.finished")
    assert deepen(moved, early, per_tile, room) == set()
    assert all(early[id(t)] == "S2.finished" for t in tasks)
    room = _room(act=[8, 8, 0], values={2: EARLY_CMX_BYTES})
    tasks, moved, early, per_tile = _loads(1, "S2.finished", nbytes=EARLY_CMX_BYTES)
    assert deepen(moved, early, per_tile, room) == set()
    assert early[id(tasks[0])] == "S2.finished"


def test_without_act_work_the_classifier_loads_during_the_last_segment_that_loads_as_much():
    # a CNN's tail: S1 (its last convolution) loads 4 chunks' bytes, S2 (a pool) and S3 (a
    # flatten) little; the first CNN_CLASSIFIER_DEEP of the chunks go to S1, behind its
    # last load, whatever S0 loads, and take turns between the channels (``turns``); the
    # others leave the early loads (the classifier's own order)
    room = _room(act=[0, 0, 0, 0], values={0: 9 * CHUNK, 1: 4 * CHUNK, 2: 50_000, 3: 1024})
    tasks, moved, early, per_tile = _loads(4, "S3.finished")
    turns: set[int] = set()
    deep = int(4 * CNN_CLASSIFIER_DEEP)
    assert deep == 3
    assert deepen(moved, early, per_tile, room, turns=turns) == {id(t) for t in tasks[:deep]}
    assert turns == {id(t) for t in tasks[:deep]}
    assert all(early[id(t)] == "S1.finished" for t in tasks[:deep])
    assert not any(id(t) in early for t in tasks[deep:])
    # none loads as much: they keep their gate
    room = _room(act=[0, 0, 0, 0], values={0: CHUNK, 1: CHUNK, 2: 50_000, 3: 1024})
    tasks, moved, early, per_tile = _loads(4, "S3.finished")
    assert deepen(moved, early, per_tile, room) == set()
    assert all(early[id(t)] == "S3.finished" for t in tasks)


def test_a_heavy_segments_loads_go_back_one_segment_each_never_across_a_heavy_one():
    # a CNN: S3's weights keep the DDR busy (heavy), S0..S2 compute; S3's early loads run
    # during S2: the last goes to S1, the one before to S0 (HEAVY_BACK segments back
    # from S2), the first stays
    room = _room(act=[0, 0, 0, 0], streaming=())
    room.traffic = {"S0.": (CHUNK, CHUNK), "S1.": (CHUNK, CHUNK), "S2.": (2 * CHUNK, CHUNK),
                    "S3.": (HEAVY_RATIO * CHUNK, CHUNK)}
    room.act_tasks = {p: 0 for p in room.order}
    room.heavy_segments = EarlyRoom.heavy(room)
    assert room.heavy_segments == {"S3."}
    assert HEAVY_BACK == 2
    tasks = [DmaTask(f"S3.w{k}", (), (), f"%S3.w{k}.v", f"%S3.w{k}", 1) for k in range(3)]
    moved = [(t, "S2.finished", k % 2, f"S3.w{k}", CHUNK) for k, t in enumerate(tasks)]
    early = {id(t): "S2.finished" for t in tasks}
    deep = deepen(moved, early, {("S2.finished", 0): 2 * CHUNK, ("S2.finished", 1): CHUNK},
                  room)
    assert deep == {id(tasks[1]), id(tasks[2])}
    assert [early[id(t)] for t in tasks] == ["S2.finished", "S0.finished", "S1.finished"]
    # S1 heavy too: S3's loads stay where they are (S1's own chunks need that CMX and DDR)
    room.traffic["S1."] = (HEAVY_RATIO * CHUNK, CHUNK)
    room.heavy_segments = EarlyRoom.heavy(room)
    early = {id(t): "S2.finished" for t in tasks}
    assert deepen(moved, early, {("S2.finished", 0): 2 * CHUNK}, room) == set()
    # with ACT SHAVE work somewhere, no segment is heavy
    room.act_tasks["S0."] = 1
    assert EarlyRoom.heavy(room) == set()


def _projection(gate: str, nbytes: int = 110 << 10):
    """A projection's weights: a load into tile 0 and its CMX -> CMX copy into tile 1, as
    ``overlap`` records them (``moved``, and the copies of the load)."""
    load = DmaTask("P.w0", (), ("P.w0.copied",), "%P.w.v", "%P.w0", 1)
    copy = DmaTask("P.w1", ("P.w0.copied",), (), "%P.w0", "%P.w1", 1)
    moved = [(load, gate, 0, "P.w0", nbytes), (copy, gate, 1, "P.w1", nbytes)]
    early = {id(load): gate, id(copy): gate}
    copies = {id(load): [(copy, 1, "P.w1", nbytes)]}
    return load, copy, moved, early, {(gate, 0): nbytes, (gate, 1): nbytes}, copies


def test_a_big_load_behind_a_short_segment_moves_back_with_its_copy():
    # S3 (a one-pixel layer: no ACT SHAVE work, few bytes of values) cannot hide the
    # projection's weights: they load during S1, the latest segment with ACT SHAVE work
    # for them, still on channel 1 (not ``deep``), the copy with its source
    room = _room(act=[8, 8, 0, 0], streaming=(), values={1: 4 << 10, 3: 4 << 10})
    load, copy, moved, early, per_tile, copies = _projection("S3.finished")
    assert deepen(moved, early, per_tile, room, copies) == set()
    assert early[id(load)] == early[id(copy)] == "S1.finished"
    ordered = prefetch_order([DmaTask(f"{p}.x", (), (f"{p}.finished",), "%a", "%b", 1)
                              for p in ("S0", "S1", "S2", "S3")] + [load, copy], early,
                             {f"S{j}.finished" for j in range(4)})
    # during S1: the load right after S0's gate task, the copy after S1's store (its
    # channel-1 task), both ahead of S2 and S3
    names = [t.label for t in ordered]
    assert names == ["S0.x", "P.w0", "S1.x", "P.w1", "S2.x", "S3.x"]
    assert load.channel == copy.channel == 1


def test_a_short_segment_that_moves_enough_values_keeps_them():
    nbytes = 110 << 10
    room = _room(act=[8, 8, 0, 0], streaming=(), values={3: 2 * nbytes})
    load, copy, moved, early, per_tile, copies = _projection("S3.finished", nbytes)
    deepen(moved, early, per_tile, room, copies)
    assert early[id(load)] == early[id(copy)] == "S3.finished"
    # below DEEP_MIN_BYTES: not worth a segment of its own
    room = _room(act=[8, 8, 0, 0], streaming=())
    load, copy, moved, early, per_tile, copies = _projection("S3.finished",
                                                              DEEP_MIN_BYTES - 16)
    deepen(moved, early, per_tile, room, copies)
    assert early[id(load)] == "S3.finished"


def test_big_loads_share_a_segment_within_its_act_work():
    nbytes = 110 << 10
    per_segment = -(-2 * nbytes // DEEP_BYTES_PER_ACT_TASK)     # ACT tasks for one projection
    room = _room(act=[8, per_segment, 0, 0], streaming=())
    first = _projection("S3.finished", nbytes)
    second = [DmaTask("Q.w0", (), (), "%Q.w.v", "%Q.w0", 1)]
    moved = first[2] + [(second[0], "S3.finished", 0, "Q.w0", nbytes)]
    early = {**first[3], id(second[0]): "S3.finished"}
    per_tile = {("S3.finished", 0): 2 * nbytes, ("S3.finished", 1): nbytes}
    deepen(moved, early, per_tile, room, first[5])
    # Q (last in the list) takes S1's ACT work; the projection and its copy no longer fit
    # there and go to S0
    assert early[id(second[0])] == "S1.finished"
    assert early[id(first[0])] == early[id(first[1])] == "S0.finished"


def test_a_copy_of_a_load_is_never_moved_ahead_of_it():
    room = _room(act=[8, 8, 0])
    tasks, moved, early, per_tile = _loads(2, "S2.finished")
    tasks[1].waits = ("C.w0.copied",)
    deep = deepen(moved, early, per_tile, room)
    assert id(tasks[1]) not in deep and id(tasks[0]) in deep
