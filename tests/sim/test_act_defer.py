"""ACT SHAVE numerics deferred and run together (``runtime_sim.act_defer``): a run gives
the outputs, cycles and timeline of the run that computes every task at its start,
bit for bit, and an invocation that reads another's result runs after it."""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.engines.shave as shave
from runtime_sim import act_defer
from runtime_sim import simulator
from runtime_sim.engines.shave import ShaveEngine
from runtime_sim.simulator import simulate
from simlib import DATA, compile_vir
from tests.sim.test_sim_cycles_only import SMALL
from vpuc.api import compile
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import zoo



@pytest.fixture
def queues(monkeypatch) -> list:
    """The DeferredActs each simulation makes."""
    made = []

    class Recorded(act_defer.DeferredActs):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)
    monkeypatch.setattr(simulator, "DeferredActs", Recorded)
    return made


def assert_same_run(deferred, alone) -> None:
    assert deferred.cycles == alone.cycles
    assert deferred.timeline.start == alone.timeline.start
    assert deferred.timeline.end == alone.timeline.end
    assert deferred.outputs.keys() == alone.outputs.keys()
    for name, value in alone.outputs.items():
        assert deferred.outputs[name].tobytes() == value.tobytes(), name


@pytest.fixture
def fresh_memo(monkeypatch) -> None:
    """No cycles-only results from earlier timing-only runs of the process."""
    monkeypatch.setattr(shave, "cycles_only_results", shave.cycles_only_results.__class__())


def test_blocks_run_together_and_a_dependent_invocation_after(queues, fresh_memo):
    program = compile_vir(DATA / "act_together.vir")
    deferred = simulate(program)
    alone = simulate(program, defer_act=False)
    assert_same_run(deferred, alone)
    (queue,) = queues
    names = [{deferred.plan.names[u] for u in group} for group in queue.groups]
    # s0 runs at its start (its cycles are the class's), the other three blocks together;
    # `again` reads s1's result: the queue ran before it started, never with it
    assert {"s1", "s2", "s3"} in names
    assert not any({"s1", "again"} <= group for group in names)
    assert queue.deferred == 4
    # `again` computed from s1's result: the softmax of the softmax, as run alone
    x1 = deferred.inputs["x1"].astype(np.float32)
    twice = np.exp(x1 - x1.max(-1, keepdims=True))
    twice = twice / twice.sum(-1, keepdims=True)
    twice = np.exp(twice - twice.max(-1, keepdims=True))
    twice /= twice.sum(-1, keepdims=True)
    assert np.allclose(deferred.outputs["z"].astype(np.float32), twice, atol=2e-3)


@pytest.fixture(scope="module", params=sorted(SMALL))
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("act_defer") / f"{request.param}.onnx"
    zoo.ZOO[request.param](seed=0, **SMALL[request.param]).save(path, request.param)
    return compile(str(path))


def test_models_give_the_run_without_deferring(model, queues):
    """Generated kernels (their loops' batches as one), layer norms and softmaxes."""
    deferred = simulate(model)
    alone = simulate(model, defer_act=False)
    assert_same_run(deferred, alone)
    (queue,) = queues
    assert queue.deferred and any(len(group) > 1 for group in queue.groups)
    assert queue.shave.together > 0
    # the stores of queued results waited with them; what ran the queue early were DPU
    # tasks reading queued results (or writing over queued inputs)
    assert queue.deferred_dmas and queue.forced["DPU"] and not queue.forced["DMA"]


def test_cycles_that_differ_from_the_charged_ones_run_again_without_deferring(queues,
                                                                             monkeypatch):
    program = compile_vir(DATA / "act_together.vir")
    real = ShaveEngine.deferred_cycles

    def off_by_one(self, invocation):
        cycles = real(self, invocation)
        return None if cycles is None else cycles + 1
    monkeypatch.setattr(ShaveEngine, "deferred_cycles", off_by_one)
    deferred = simulate(program)
    assert len(queues) == 1 and queues[0].deferred        # the first run deferred, then
    assert_same_run(deferred, simulate(program, defer_act=False))   # ran again without


def test_nothing_is_deferred_under_a_cycle_limit_or_an_observer(queues):
    program = compile_vir(DATA / "act_together.vir")
    simulate(program, max_cycles=1e9)
    assert not queues
    simulate(program, kernel_profile=True)
    assert queues and not queues[0].deferred


def test_after_a_timing_only_run_the_first_of_a_class_waits_too(queues, fresh_memo):
    """The timing-only run's cycles-only result for s0 gives its cycles: all five wait,
    s0 with its three peers."""
    program = compile_vir(DATA / "act_together.vir")
    simulate(program, timing_only=True)
    deferred = simulate(program)
    assert_same_run(deferred, simulate(program, defer_act=False))
    queue = queues[0]
    assert queue.deferred == 5
    names = [{deferred.plan.names[u] for u in group} for group in queue.groups]
    assert {"s0", "s1", "s2", "s3"} in names


def test_a_waiting_invocations_fault_is_reported_for_its_own_task(queues, fresh_memo):
    """`good` runs at its start (its pad takes the vector too many), `bad` waits and faults
    when the queue runs at the end: the error is the one its run at its start gives."""
    program = compile_vir(DATA / "act_fault.vir")
    errors = []
    for defer in (True, False):
        with pytest.raises(VpucError) as failure:
            simulate(program, defer_act=defer)
        errors.append(str(failure.value))
    assert queues[0].deferred == 1
    assert errors[0] == errors[1] and "bad: kernel @past" in errors[0]
