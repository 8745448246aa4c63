"""Simulate a program: ``simulate(program, inputs=...) -> SimResult``.

Builds the network (memory, constants, inputs), the plan (units, queues,
barriers, costs) and runs the event-driven runtime with the engines' numerics
hooked in at each unit's start.  Inputs not given are random, from ``seed``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from runtime_sim.act_defer import CyclesDiffer, DeferredActs
from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.engines.shave import ShaveEngine
from runtime_sim.kept_values import KeptValues, kept_names
from runtime_sim.memory import UNWRITTEN, numpy_dtype
from runtime_sim.network import Network
from runtime_sim.plan import ACT, DMA, DPU, Plan, build_plan, written_operands
# build_plan imports plan_build lazily (an import cycle): loaded with the simulator instead.
import runtime_sim.plan_build  # noqa: F401,E402
from runtime_sim.races import RaceDetector
from runtime_sim.regions import Regions
from runtime_sim.runtime import Runtime, Timeline
from runtime_sim.simarch import SimArch, sim_arch_for
from vpuc.cost.shave import act_shave_budget
from vpuc.diagnostics import Diagnostic, VpucError
from vpuc.ir.module import Buffer, BufferKind
from vpuc.perf import gc_paused, single_threaded_blas, to_oldest_generation
from vpuc.program import Program

if TYPE_CHECKING:   # imported when a profile is asked for: a timing-only run needs none
    from runtime_sim.kernel_profile import KernelProfile


@dataclass
class SimResult:
    arch: SimArch
    plan: Plan
    timeline: Timeline
    network: Network
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    races: list[Diagnostic] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)   # wall time per phase
    # simulate(kernel_profile=True): ACT SHAVE cycles per kernel and per LIR expression
    kernel_profile: KernelProfile | None = None

    @property
    def cycles(self) -> float:
        return self.timeline.total


def random_input(buffer: Buffer, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [-1, 1) for floats, small integers for integer types, at the bounds' shape."""
    dtype = numpy_dtype(buffer.type.elem)
    shape = buffer.type.bound_shape
    if dtype.kind == "u":
        return rng.integers(0, 16, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-8, 8, shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32).astype(dtype)


def simulate(program: Program, arch: SimArch | None = None,
             inputs: dict[str, np.ndarray] | None = None, *, seed: int = 0,
             timing_only: bool = False, races: bool = True, max_cycles: float | None = None,
             progress: Callable[[int, int], None] | None = None,
             kernel_observer=None, kernel_profile: bool = False,
             defer_act: bool = True) -> SimResult:
    """``kernel_observer`` sees every ACT SHAVE invocation (``ShaveEngine.observer``), e.g. a
    ``runtime_sim.kernel_check.KernelCheck``.  ``kernel_profile`` attributes every ACT SHAVE
    task's cycles to the LIR expressions of its kernel (``runtime_sim.kernel_profile``):
    ``SimResult.kernel_profile``.  ``defer_act``: ACT SHAVE numerics may run later, several
    invocations together (``runtime_sim.act_defer``; the same outputs and cycles)."""
    # The plan, the schedule and the timeline are many small objects that all stay alive:
    # the cyclic garbage collector would rescan them (and the whole program) over and over,
    # so it is paused for the whole simulation; what it made then goes to the oldest
    # generation unexamined (``to_oldest_generation``).
    # Timing-only runs no DPU numerics: BLAS's threads are never woken.
    with gc_paused(), nullcontext() if timing_only else single_threaded_blas():
        arch = arch or sim_arch_for(program.arch)
        try:
            try:
                return _simulate(program, arch, inputs, seed, timing_only, races, max_cycles,
                                 progress, kernel_observer, kernel_profile, defer_act)
            except CyclesDiffer:        # a deferred kernel's cycles depend on its data
                return _simulate(program, arch, inputs, seed, timing_only, races, max_cycles,
                                 progress, kernel_observer, kernel_profile, False)
        finally:
            to_oldest_generation()


def _simulate(program: Program, arch: SimArch, inputs: dict[str, np.ndarray] | None, seed: int,
              timing_only: bool, races: bool, max_cycles: float | None,
              progress: Callable[[int, int], None] | None, kernel_observer=None,
              kernel_profile: bool = False, defer_act: bool = False) -> SimResult:
    clock = time.perf_counter()
    network = Network(program, load_constants=not timing_only,
                      unwritten=0 if timing_only else UNWRITTEN)
    given = dict(inputs or {})
    rng = None
    used: dict[str, np.ndarray] = {}
    for buffer in network.inputs:  # random draws in declaration order: deterministic
        value = given.pop(buffer.name, None)
        if value is None and timing_only:
            continue  # no numerics: the input's values do not matter
        if value is None:
            rng = np.random.default_rng(seed) if rng is None else rng
            value = random_input(buffer, rng)
        network.set_input(buffer.name, value)
        used[buffer.name] = np.asarray(value)
    if given:
        network.set_input(next(iter(given)), next(iter(given.values())))  # raises: unknown input
    seconds = {"network": time.perf_counter() - clock}
    clock = time.perf_counter()
    plan = build_plan(program, arch)
    seconds["plan"] = time.perf_counter() - clock
    # Buffers and views resolved once for the race detector and the ACT SHAVE bindings,
    # without the symbol table (the numerics' operands are the plan's own)
    regions = Regions(plan, network.memory)
    plan.resolve_with(regions)      # the engines' operands too: the same Region per name
    detector = RaceDetector(plan, network.memory, regions=regions) if races else None
    shave = ShaveEngine(program, network.memory, timing_only)
    shave.ddr_timing = (arch.dma.ddr_read_latency, arch.ddr_bytes_per_cycle, arch.shave_cycle)
    shave.observer = kernel_observer
    if kernel_profile:
        from runtime_sim.kernel_profile import KernelProfiler
        shave.profiler = KernelProfiler(program)
    memory = network.memory
    kinds = plan.kind if not timing_only or memory.dynamic else None

    # Without numerics, DMAs of dynamic tensors still pass their actual dims on, so the
    # kernels that read them loop as often as they would.
    dims_only = set()
    if timing_only and memory.dynamic:
        dims_only = {u for u in range(plan.size) if kinds[u] == DMA
                     and plan.dma_regions(u)[0].root.name in memory.dynamic}

    # values kept in CMX between segments (Network.kept, kept_values.py)
    kept: set[str] = set()
    if not timing_only:
        read, written = set(), set()
        if program.source_graph is None:
            for u in range(plan.size):
                if kinds[u] == DMA:
                    src, dst = plan.dma_regions(u)
                    if src.kind is BufferKind.CMX:
                        read.add(src.root.name)
                    if dst.kind is BufferKind.CMX:
                        written.add(dst.root.name)
        kept = kept_names(program, read, written)

    def failed(u: int, failure: VpucError) -> VpucError:
        # A unit that fails in a racy run most likely failed because of the race.
        return detector.explain(u, failure) if detector is not None else failure

    # Proven race-free before the run: no per-unit checks.
    online = detector if detector is not None and not detector.proven else None
    # A task's variants that differ only in their channels run as one call when the first
    # starts: only when no race can show the difference and the run goes to its end.
    dpu = dpu_engine.DpuRunner(plan, memory, together=detector is not None
                               and detector.proven and max_cycles is None,
                               recorded=frozenset(kept))

    # ACT numerics queued to run together (none with a cycle limit: a kernel stopped by it
    # must stop the run at its own start)
    deferred = (DeferredActs(plan, memory, shave, failed)
                if defer_act and not timing_only and max_cycles is None else None)

    # recorded when something else is about to write them (kept_values.py)
    kept_values = KeptValues(network, memory, kept) if kept else None
    act_outputs: dict[int, tuple] = {}     # id(ACT task) -> its output regions

    def act_writes(u: int) -> None:
        task = plan.task[u]
        outs = act_outputs.get(id(task))
        if outs is None:
            outs = act_outputs[id(task)] = tuple(
                r for r in (regions(b.buffer) for b in task.outputs) if r is not None)
        kept_values.before_ranges(("cmx", plan.tile[u]), shave.bindings(task).writes,
                                  {r.root.name for r in outs})
        for region in outs:
            kept_values.written(region)

    if kept_values is not None and deferred is not None:
        kept_values.before_record = deferred.flush_over     # a record sees queued writes

    def on_start(u: int, t: float) -> None:
        if online is not None:
            online.check(u)
        later = deferred is not None and deferred.before(u)     # a DMA that may be queued
        kind = kinds[u] if kinds is not None else None
        try:
            if timing_only:
                if u in dims_only:
                    src, dst = plan.dma_regions(u)
                    memory.set_dynamic_dims(dst.root, memory.shape_of(src))
            elif kind == DMA:
                src, dst = plan.dma_regions(u)
                if kept_values is not None:
                    kept_values.before_write(dst)
                if not (later and deferred.defer_dma(u)):
                    dma_engine.run_transfer(plan.task[u], src, dst, memory)
                if kept_values is not None:
                    kept_values.written(dst)
            elif kind == DPU:
                if kept_values is not None:
                    outs = written_operands(plan.dpu_regions(u))
                    for out in outs:
                        kept_values.before_write(out)
                    dpu.run(u)
                    for out in outs:
                        kept_values.written(out)
                else:
                    dpu.run(u)
            elif kind == ACT and kept_values is not None:
                act_writes(u)
        except VpucError as exc:
            raise failed(u, VpucError(f"{plan.names[u]}: {exc.diagnostics[0].message}",
                                      plan.loc[u])) from None

    work, run_kernel = plan.work, shave.run
    shave.region = regions
    act_fixed, shave_cycle = arch.dispatch["ACT_SHAVE"], arch.shave_cycle

    clock = time.perf_counter()
    # Timing-only: the units of one class of invocations take the cycles the first of them
    # was charged (the engine's memo would answer each the same), written to all of them at
    # once so the event loop reads a list instead of calling into the engine per task.  A
    # profiler charges every invocation: it gets none.
    known = classes = None
    if timing_only and shave.profiler is None:
        known, classes = _act_classes(plan, shave)

    def act_cycles(u: int, t: float) -> float:
        if deferred is not None:
            try:
                cycles = shave.deferred_cycles(work[u])
                if cycles is not None:
                    deferred.defer(u, cycles)
                    return cycles
            except VpucError as exc:            # the task's bindings, as a run reports them
                raise failed(u, exc) from None
            deferred.run_now(u)
        # A kernel started at t may run for what is left of max_cycles (in SHAVE cycles).
        budget = act_shave_budget(t, max_cycles, shave_cycle, act_fixed)
        try:
            cycles = run_kernel(lambda: plan.names[u], work[u], budget)
        except VpucError as exc:
            raise failed(u, exc) from None
        if classes is not None and u in classes:
            for v in classes[u]:
                known[v] = cycles
        return cycles

    hook = on_start if (online is not None or not timing_only or dims_only) else None
    runtime = Runtime(plan, on_start=hook, on_end=online.end if online is not None else None,
                      act_cycles=act_cycles, act_known=known, max_cycles=max_cycles,
                      progress=progress)
    try:
        timeline = runtime.run()
        if kept_values is not None:     # after the queue's last writes (to kept values too)
            if deferred is not None:
                deferred.flush()
            kept_values.finish()
    finally:        # a queued kernel's failure comes before what stopped the run later
        if deferred is not None:
            deferred.flush()
    seconds["run"] = time.perf_counter() - clock
    seconds["kernels"] = shave.seconds   # part of "run": ACT SHAVE kernels in the interpreter
    if detector is not None:
        seconds["races"] = detector.seconds   # part of "run": race checks and their clocks
    result = SimResult(arch, plan, timeline, network, inputs=used, seconds=seconds)
    if shave.profiler is not None:
        result.kernel_profile = shave.profiler.result()
    if not timing_only:
        result.outputs = {b.name: network.output(b.name) for b in network.outputs}
    if detector is not None:
        result.races = detector.diagnostics()
    return result


def _act_classes(plan: Plan, shave: ShaveEngine) -> tuple[list, dict[int, list[int]]]:
    """Timing-only: a list of None per unit (the known SHAVE cycles, filled as classes are
    run) and, per ACT unit of a class, the units of its class (``ShaveEngine.timing_classes``;
    a unit whose cycles only the run knows has none)."""
    units = [u for q, kind in enumerate(plan.queue_kind) if kind == ACT
             for u in plan.queue_units[q]]
    work = plan.work
    members: dict[int, list[int]] = {}
    classes: dict[int, list[int]] = {}
    for u, number in zip(units, shave.timing_classes([work[u] for u in units])):
        if number is not None:
            classes[u] = members.setdefault(number, [])
            classes[u].append(u)
    return [None] * plan.size, classes
