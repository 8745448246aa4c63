"""The K split's task ordering (``vpuc.fusion.lower_dpu_ksplit_schedule.TaskSchedule``): waits derived
from reads and writes of hazard keys, and barriers shared by producers with the same
consumers."""

from __future__ import annotations

from vpuc.cost.timing import default_timing
from vpuc.fusion.blocked_program import ProgramText
from vpuc.fusion.lower_dpu_ksplit_schedule import TaskSchedule
from vpuc.ir.types import DimsOrder, ElemType, TensorType

T = TensorType((4, 16), ElemType.F16, DimsOrder.identity(2))


def _schedule():
    sch = TaskSchedule("l.", default_timing("NPU37XX"))
    sch.scope = "t0.x0"
    a = sch.cmx("a", T, 0)
    sch.scope = "t0.p0"
    p = sch.cmx("p", T, 0)
    return sch, a, p


def test_a_reader_waits_for_every_write_of_the_generation():
    """A zero fill and the copy beside it (one generation), then the DPU reading both."""
    sch, a, p = _schedule()
    zero = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    copy = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    dpu = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    assert sch.tasks[dpu].deps == {zero, copy}      # DMA channels are not trusted for order


def test_a_writer_after_reads_waits_for_them():
    sch, a, p = _schedule()
    load = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    dpu = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    act = sch.add("act", ("act", 0), [a], [], 1.0, lambda c: [c])
    again = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    assert sch.tasks[again].deps == {dpu, act, load}


def test_the_dpu_queue_orders_its_own_tasks():
    sch, a, p = _schedule()
    sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    first = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    reader = sch.add("act", ("act", 0), [p], [], 1.0, lambda c: [c])
    second = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    assert first not in sch.tasks[second].deps and reader in sch.tasks[second].deps


def test_producers_with_the_same_consumers_share_a_barrier_and_the_makespan():
    sch, a, p = _schedule()
    sch.add("dma", ("dma", 0), [], [a], 10.0, lambda c: [f"  x: dma{c}"])
    sch.add("dma", ("dma", 1), [], [a], 30.0, lambda c: [f"  y: dma{c}"])
    sch.add("dpu", ("dpu", 0), [a], [p], 5.0, lambda c: [f"  z: dpu{c}"])
    assert sch.makespan() == 35.0              # the channels overlap, the DPU waits for both
    prog = ProgramText()
    sch.commit(prog, ("gate",), "finish")
    assert prog.barriers == ["barrier %l.k0"]
    assert prog.dma == ["  x: dma waits(%gate) updates(%l.k0)",
                        "  y: dma waits(%gate) updates(%l.k0)"]
    assert prog.dpu == ["  z: dpu waits(%l.k0) updates(%finish)"]


def test_waits_another_wait_implies_are_dropped():
    """``reduced_deps``: a rewrite of ``a`` waits on its readers (the DPU task) and on the
    load before them, which the DPU task already follows: only the DPU task is waited
    on; a DPU task's queue predecessor counts as followed, but its own waits stay."""
    sch, a, p = _schedule()
    load = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    dpu = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    again = sch.add("dma", ("dma", 0), [], [a], 1.0, lambda c: [c])
    store = sch.add("dma", ("dma", 1), [p], [], 1.0, lambda c: [c])
    dpu2 = sch.add("dpu", ("dpu", 0), [a], [p], 1.0, lambda c: [c])
    deps = sch.reduced_deps()
    assert sch.tasks[again].deps == {dpu, load} and deps[again] == {dpu}
    assert deps[store] == {dpu}
    assert sch.tasks[dpu2].deps == {again, store} and deps[dpu2] == {again, store}
    # the same order: every dropped wait is followed through a kept one
    follows = [set() for _ in sch.tasks]
    for n, kept in enumerate(deps):
        for d in kept:
            follows[n] |= follows[d] | {d}
        assert sch.tasks[n].deps <= follows[n]
