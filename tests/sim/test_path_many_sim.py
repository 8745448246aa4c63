"""Deferred ACT invocations of a library kernel run their per-row loops as one path batch
(``runtime_sim.isa.path_many``): the outputs, cycles and timeline are the run without
deferring's, bit for bit, and an invocation reading another's result is never in its
batch."""

from __future__ import annotations

import pytest

import runtime_sim.isa.path_many as path_many
from runtime_sim import act_defer, simulator
from runtime_sim.simulator import simulate
from simlib import DATA, compile_vir
from test_act_defer import assert_same_run


def test_softmax_blocks_batch_their_rows_and_not_the_dependent_one(monkeypatch):
    sizes, queues = [], []
    real = path_many.execute_many

    def spy(walks, Rs, memories, counts):
        sizes.append(len(walks))
        return real(walks, Rs, memories, counts)

    class Recorded(act_defer.DeferredActs):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            queues.append(self)
    monkeypatch.setattr(path_many, "execute_many", spy)
    monkeypatch.setattr(simulator, "DeferredActs", Recorded)
    program = compile_vir(DATA / "act_together.vir")
    simulate(program, timing_only=True)          # every block's cycles known: all wait
    deferred = simulate(program)
    assert sizes and max(sizes) >= 3
    assert_same_run(deferred, simulate(program, defer_act=False))
    names = [{deferred.plan.names[u] for u in group} for group in queues[0].groups]
    assert not any({"s1", "again"} <= group for group in names)
    assert "again" in set().union(*names)        # it waited too, in a later flush
