"""The deep loads of one segment update one shared barrier
(``vpuc/fusion/schedule_share.py``, ``share_barriers``): within the producer and consumer
limits, never for loads of another segment or past a DMA that waits on the group."""

from __future__ import annotations

from vpuc.fusion.schedule_share import share_barriers
from vpuc.ir.module import Barrier, Module
from vpuc.ir.tasks import DmaTask, DpuOp, DpuTask, DpuVariant, Executor, TaskList
from vpuc.verifier.barriers import barrier_use_counts


def _classifier(gates: list[str], variants: int = 2):
    """A deep load C.w<k> per gate (the segment it runs during), each updating C.k<k>, which
    an activation load C.a<k> updates too for even k; a DPU task C.c<k> of ``variants``
    workloads waits on C.k<k>."""
    n = len(gates)
    loads = [DmaTask(f"C.w{k}", (), (f"C.k{k}",), f"%C.w{k}.v", f"%C.w{k}", 0)
             for k in range(n)]
    acts = [DmaTask(f"C.a{k}", (), (f"C.k{k}",), "%x", f"%C.a{k}", 0) for k in range(0, n, 2)]
    computes = [DpuTask(f"C.c{k}", (f"C.k{k}",), (), DpuOp.MATMUL, 0, (f"%C.a{k}",), f"%C.o{k}",
                        variants=[DpuVariant(f"C.c{k}.v{v}", (0, 0, v), (0, 0, v))
                                  for v in range(variants)]) for k in range(n)]
    module = Module("m", barriers=[Barrier(f"C.k{k}") for k in range(n)],
                    task_lists=[TaskList(Executor.DMA, loads + acts),
                                TaskList(Executor.DPU, computes)])
    early = {id(t): gates[k] for k, t in enumerate(loads)}
    return module, loads, computes, early


def _share(module, loads, early, max_producers=256, max_consumers=256):
    return share_barriers(module, module.task_lists[0].tasks, {id(t) for t in loads}, early,
                          max_producers, max_consumers)


def test_the_deep_loads_of_a_segment_update_one_barrier():
    module, loads, computes, early = _classifier(["S1.finished"] * 4)
    assert _share(module, loads, early) == ["C.w0.prefetched"]
    assert all(t.updates == ("C.w0.prefetched",) for t in loads)
    # the activation loads still update the even ones: kept, the shared one beside them
    assert [c.waits for c in computes] == [("C.k0", "C.w0.prefetched"), ("C.w0.prefetched",),
                                           ("C.k2", "C.w0.prefetched"), ("C.w0.prefetched",)]
    assert {b.name for b in module.barriers} == {"C.k0", "C.k2", "C.w0.prefetched"}
    producers, consumers = barrier_use_counts(module)
    assert producers["C.w0.prefetched"] == 4 and consumers["C.w0.prefetched"] == 8
    assert producers["C.k0"] == 1 and consumers["C.k0"] == 2


def test_a_shared_barrier_stays_within_the_producer_and_consumer_limits():
    for limits in ((2, 256), (256, 4)):           # 2 loads, or 2 waiters of 2 variants each
        module, loads, computes, early = _classifier(["S1.finished"] * 5)
        assert _share(module, loads, early, *limits) == ["C.w0.prefetched", "C.w2.prefetched"]
        assert loads[4].updates == ("C.k4",) and computes[4].waits == ("C.k4",)  # alone
        producers, consumers = barrier_use_counts(module)
        assert max(producers.values()) <= limits[0] and max(consumers.values()) <= limits[1]


def test_loads_of_other_segments_or_after_a_dma_waiting_on_the_group_keep_their_own():
    module, loads, computes, early = _classifier(["S1.finished"] * 2 + ["S2.finished"] * 3)
    # a copy of w3's buffer between w3 and w4 waits on w3: sharing with w4 would make it
    # wait on a load after it in the DMA list
    copy = DmaTask("C.copy3", ("C.k3",), (), "%C.w3", "%C.w3b", 1)
    dma = module.task_lists[0].tasks
    dma.insert(dma.index(loads[4]), copy)
    assert _share(module, loads, early) == ["C.w0.prefetched", "C.w2.prefetched"]
    assert [t.updates for t in loads] == [("C.w0.prefetched",)] * 2 \
        + [("C.w2.prefetched",)] * 2 + [("C.k4",)]
    assert copy.waits == ("C.w2.prefetched",)         # only w3 updated C.k3: gone
    position = {id(t): i for i, t in enumerate(dma)}
    for t in dma:                      # every DMA waits only on loads before it
        for w in t.waits:
            assert all(position[id(p)] < position[id(t)] for p in dma if w in p.updates)
