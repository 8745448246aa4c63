"""Timing-only runs each kind of ACT SHAVE invocation once (issue 11, section 5).

The blocks of a lowered layer call one kernel with the same dims from different
CMX slots; their WIN_E images differ only in the memrefs' ``dataAddr``, which
no cycle count depends on.  ``timing_only`` must then run each kind once (in
full or cycles-only, ``runtime_sim.isa.cycles_only``), and still give every
task the cycles a run with numerics gives it.
"""

from __future__ import annotations

import pytest

import runtime_sim.engines.shave as shave
from runtime_sim.simulator import simulate as simulate_program
from vpuc.api import compile, simulate
from vpuc.ir.tasks import Executor
from vpuc.onnx_import import zoo


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("memo") / "encoder.onnx"
    zoo.encoder_layer(seq=24, width=32, heads=2).save(path, "encoder")
    return compile(str(path))


def test_timing_only_runs_each_kind_of_invocation_once(program, monkeypatch):
    calls = []
    real, real_cycles_only = shave.invoke_kernel, shave.invoke_cycles_only
    # a fresh process-wide memory of cycles-only results: this run must make its own
    monkeypatch.setattr(shave, "cycles_only_results", shave.cycles_only_results.__class__())

    def counting(*args, **kwargs):
        calls.append(args[2])            # the WIN_E image
        return real(*args, **kwargs)

    def counting_cycles_only(*args, **kwargs):
        found = real_cycles_only(*args, **kwargs)
        if found is not None:            # else the full run follows, counted there
            calls.append(args[2])
        return found
    monkeypatch.setattr(shave, "invoke_kernel", counting)
    monkeypatch.setattr(shave, "invoke_cycles_only", counting_cycles_only)
    timing = simulate(program, timing_only=True)
    timing_calls = len(calls)
    # every task's numerics through invoke_kernel (none deferred: runtime_sim.act_defer)
    full = simulate_program(program, defer_act=False)
    act_tasks = sum(len(tl.tasks) for tl in program.module.task_lists
                    if tl.executor is Executor.ACT_SHAVE)
    assert len(calls) - timing_calls == act_tasks          # numerics: every task runs
    assert 0 < timing_calls < act_tasks / 2                  # blocks share their run
    assert len(set(calls[:timing_calls])) == timing_calls   # no image is run twice
    # Every unit starts and ends where the run with numerics puts it.
    assert timing.result.timeline.start == full.timeline.start
    assert timing.result.timeline.end == full.timeline.end


def test_timing_classes_are_the_memo_keys(program):
    """Invocations share a class exactly when the engine's memo would give them one key;
    the event loop then asks the engine once per class, not once per task."""
    from runtime_sim.network import Network
    engine = shave.ShaveEngine(program, Network(program, load_constants=False).memory, True)
    invocations = program.invocations
    classes = engine.timing_classes(invocations)
    tasks = [t for tl in program.module.task_lists if tl.executor is Executor.ACT_SHAVE
             for t in tl.tasks]
    keys = [engine._cycles_key(inv, tasks[inv.task_index]) for inv in invocations]
    assert None not in classes                        # the encoder has no dynamic memrefs
    assert len(set(classes)) == len(set(keys)) < len(invocations)
    assert all((classes[i] == classes[j]) == (keys[i] == keys[j])
               for i in range(len(keys)) for j in range(i))


def test_timing_only_asks_the_engine_once_per_class(program, monkeypatch):
    asked = []
    real = shave.ShaveEngine.run

    def counting(self, unit_name, invocation, max_cycles=None):
        asked.append(invocation)
        return real(self, unit_name, invocation, max_cycles)
    monkeypatch.setattr(shave.ShaveEngine, "run", counting)
    timing = simulate(program, timing_only=True)
    engine = shave.ShaveEngine(program, timing.result.network.memory, True)
    assert len(asked) == len(set(engine.timing_classes(program.invocations)))
    asked.clear()
    simulate(program, timing_only=True, kernel_profile=True)   # a profiler sees every task
    assert len(asked) == len(program.invocations)
