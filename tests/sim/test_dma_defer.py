"""DMAs queued with the deferred ACT numerics (``runtime_sim.act_defer``): a DMA that
touches what the queue touches waits in it, a level above what it conflicts with, and
so does an invocation touching what a queued DMA writes.  Every output and memory byte
is the run's that computes each task at its start."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from runtime_sim.plan import Plan
from runtime_sim.simulator import simulate
from simlib import DATA, compile_vir
from tests.sim.test_act_defer import assert_same_run, fresh_memo, queues  # noqa: F401
from vpuc.diagnostics import VpucError


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def program(fresh_memo):  # noqa: F811
    """dma_defer.vir, after a timing-only run: every softmax's cycles are known, so all
    three wait (the first of the class too)."""
    program = compile_vir(DATA / "dma_defer.vir")
    simulate(program, timing_only=True)
    return program


def test_dmas_wait_behind_the_blocks_and_a_reader_of_their_bytes_runs_the_queue(program,
                                                                                queues):  # noqa: F811
    deferred = simulate(program)
    alone = simulate(program, defer_act=False)
    assert_same_run(deferred, alone)
    for key, array in alone.network.memory.arrays.items():
        np.testing.assert_array_equal(deferred.network.memory.arrays[key], array,
                                      err_msg=str(key))
    queue = queues[0]
    names = [{deferred.plan.names[u] for u in group} for group in queue.groups]
    # both blocks together; the stores of their results, the load over s_a0's input and
    # the refill over s_b0's output waited behind them instead of running the queue;
    # s_a1 reads the load's bytes and store_b1 the refill's: a level above them.  The
    # queue ran once, at the end.
    assert names == [{"s_a0", "s_b0"}, {"s_a1"}]
    assert queue.deferred == 3 and queue.deferred_dmas == 6
    assert not queue.forced and queue.flushes == 1
    # the load and the refill ran after the blocks that read and wrote their slots
    inputs = {name: value.astype(np.float32) for name, value in deferred.inputs.items()}
    out = {name: value.astype(np.float32) for name, value in deferred.outputs.items()}
    tolerance = 4 * 2.0 ** -11     # f16 results of f32 sums, each in [0, 1]
    np.testing.assert_allclose(out["out_a0"], softmax(inputs["a0"]), atol=tolerance)
    np.testing.assert_allclose(out["out_b0"], softmax(inputs["b0"]), atol=tolerance)
    np.testing.assert_allclose(out["out_a1"], softmax(inputs["a1"]), atol=tolerance)
    assert deferred.outputs["out_b1"].tobytes() == deferred.inputs["w1"].tobytes()


def test_a_dma_outside_its_memory_is_not_queued_its_fault_is_its_own(program, queues,  # noqa: F811
                                                                     monkeypatch):
    """store_a0 reads s_a0's queued result; moved past the end of its CMX, it faults at
    its start, named by itself, as it does without deferring."""
    real = Plan.dma_regions

    def moved(self, unit):
        src, dst = real(self, unit)
        if self.names[unit] == "store_a0":
            src = dataclasses.replace(src, byte_offset=src.byte_offset + (4 << 20))
        return src, dst
    monkeypatch.setattr(Plan, "dma_regions", moved)
    errors = []
    for defer in (True, False):
        with pytest.raises(VpucError) as failure:
            simulate(program, defer_act=defer, races=False)
        errors.append(str(failure.value))
    assert errors[0] == errors[1] and "store_a0: %ya" in errors[0] and "lies outside" in errors[0]
    assert queues[0].deferred == 2 and queues[0].deferred_dmas == 0


def test_invocations_reading_queued_results_wait_a_level_above_them(fresh_memo,  # noqa: F811
                                                                     queues):  # noqa: F811
    program = compile_vir(DATA / "act_chain.vir")
    simulate(program, timing_only=True)
    deferred = simulate(program)
    assert_same_run(deferred, simulate(program, defer_act=False))
    queue = queues[0]
    names = [{deferred.plan.names[u] for u in group} for group in queue.groups]
    assert names == [{"s0", "s1", "s2", "s3"}, {"again0", "again1", "again2", "again3"}]
    assert queue.flushes == 1 and queue.deferred_dmas == 4      # the stores of the results
    tolerance = 4 * 2.0 ** -11     # f16 results of f32 sums, each in [0, 1]
    for i in range(4):
        twice = softmax(softmax(deferred.inputs[f"x{i}"].astype(np.float32)))
        np.testing.assert_allclose(deferred.outputs[f"z{i}"].astype(np.float32), twice,
                                   atol=tolerance)
