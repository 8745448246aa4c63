"""The fast plan and race-access paths against the straightforward ones, on every fixture.

``plan_build`` resolves shapes, transfers, DPU costs and barrier ids column by
column with caches; ``race_access`` resolves views by arithmetic.  Here each is
compared with what the schedule, ``vpuc.ir.symbols`` regions and the engines'
cost functions give directly, unit by unit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime_sim.engines import dma as dma_engine
from runtime_sim.engines import dpu as dpu_engine
from runtime_sim.memory import Memory
from runtime_sim.plan import ACT, DMA, DPU, build_plan
from runtime_sim.race_access import Accesses
from runtime_sim.simarch import sim_arch_for
from tests.sim.simlib import DATA, NO_VERIFY, REPO, compile_vir
from tests.sim.test_sim_numerics import example_path
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind

FIXTURES = sorted(p.stem for p in DATA.glob("*.vir")) + [
    f"examples/{p.stem}" for p in sorted((REPO / "examples").glob("*.vir"))]


def _program(name, tmp_path):
    if name.startswith("examples/"):
        return compile_vir(example_path(name.split("/")[1], tmp_path))
    try:
        return compile_vir(DATA / f"{name}.vir")
    except VpucError:       # the deadlock and race fixtures: the verifier rejects them
        return compile_vir(DATA / f"{name}.vir", NO_VERIFY)


@pytest.mark.parametrize("name", FIXTURES)
def test_plan_matches_the_schedule_regions_and_engine_costs(name, tmp_path):
    program = _program(name, tmp_path)
    arch = sim_arch_for(program.arch)
    plan = build_plan(program, arch)
    schedule = plan.schedule
    assert [u.name for u in schedule.units] == plan.names
    assert [schedule.queues[u.queue].key for u in schedule.units] == \
        [plan.queue_keys[q] for q in plan.queue_of]
    names = plan.barrier_names
    for u, unit in enumerate(schedule.units):
        assert tuple(names[b] for b in plan.waits[u]) == unit.waits
        assert tuple(names[b] for b in plan.updates[u]) == unit.updates
        assert plan.task[u] is unit.task and plan.variant[u] == unit.variant
    assert plan.producer_count == [len(schedule.producers.get(b, ())) for b in names]
    assert plan.consumer_count == [len(schedule.consumers.get(b, ())) for b in names]
    for u in range(plan.size):
        task = plan.task[u]
        if plan.kind[u] == DMA:
            src, dst = plan.dma_regions(u)
            expected = dma_engine.plan_transfer(task.mode, src.type, src.kind is not BufferKind.CMX,
                                                dst.type, dst.kind is not BufferKind.CMX, arch)
            assert plan.work[u] == expected
            assert plan.fixed[u] == arch.dispatch["DMA"]
        elif plan.kind[u] == DPU:
            tensors = {k: r.type for k, r in plan.dpu_regions(u).items()}
            cycles, macs = dpu_engine.variant_cycles(task, plan.variant[u], tensors, arch)
            assert plan.fixed[u] == cycles and plan.macs[u] == macs
        else:
            assert plan.kind[u] == ACT and plan.fixed[u] == arch.dispatch["ACT_SHAVE"]
            assert plan.work[u] is not None


@pytest.mark.parametrize("name", FIXTURES)
def test_view_spans_by_arithmetic_match_their_regions(name, tmp_path):
    program = _program(name, tmp_path)
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Memory(program.module, program.arch.tiles)
    accesses = Accesses(plan, memory, lambda span: span)
    for view in program.module.views:
        fast = accesses._view_span(view)
        region_span = accesses.region_span(plan.region(view.name))
        if fast is None:
            assert region_span[3] is not None or view.base not in memory.buffers
        else:
            assert fast == region_span


@pytest.mark.parametrize("name", FIXTURES)
def test_regions_by_arithmetic_match_the_symbol_table(name, tmp_path):
    """``Accesses._region`` (the DPU operands' regions, no symbol table for a buffer or a
    view of one) gives what ``plan.region`` gives, for every buffer and view."""
    program = _program(name, tmp_path)
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Memory(program.module, program.arch.tiles)
    accesses = Accesses(plan, memory, lambda span: span)
    names = [b.name for b in program.module.buffers] + [v.name for v in program.module.views]
    for name in names:
        assert accesses._region(name) == plan.region(name), name


def test_bad_views_are_reported_by_the_symbol_table(tmp_path):
    program = compile_vir(DATA / "pipeline.vir")
    view = program.module.views[0]
    piece = view.slices[0]
    bad = (replace(piece, stop=10**6),) + tuple(view.slices[1:])      # past its dim
    program.module.views[0] = view = replace(view, slices=type(view.slices)(bad))
    plan = build_plan(program, sim_arch_for(program.arch))
    accesses = Accesses(plan, Memory(program.module, program.arch.tiles), lambda span: span)
    with pytest.raises(VpucError, match=f"%{view.name} does not resolve"):
        accesses._region(view.name)


def test_plan_errors_name_the_barrier_and_the_task(tmp_path):
    source = (DATA / "nhwc_reductions.vir").read_text()
    path = tmp_path / "bad.vir"
    path.write_text(source.replace("updates(%loaded)", "updates(%nowhere)", 1))
    program = compile_vir(path, NO_VERIFY)
    with pytest.raises(VpucError, match="a task uses undeclared barrier %nowhere"):
        build_plan(program, sim_arch_for(program.arch))
    program = compile_vir(DATA / "nhwc_reductions.vir", "assign-windows")
    with pytest.raises(VpucError, match="soft: ACT SHAVE task has no packed invocation"):
        build_plan(program, sim_arch_for(program.arch))


def test_a_task_list_of_mixed_task_types_is_planned_in_runs():
    # Only an unverified program has them; units and queues still follow the schedule.
    program = compile_vir(DATA / "nhwc_reductions.vir")
    lists = {tl.executor.value: tl for tl in program.module.task_lists}
    lists["ACT_SHAVE"].tasks.append(lists["DMA"].tasks.pop())      # store_gel joins the ACT list
    plan = build_plan(program, sim_arch_for(program.arch))
    units = plan.schedule.units
    assert [u.name for u in units] == plan.names and plan.names[-1] == "store_gel"
    assert [plan.schedule.queues[u.queue].key for u in units] == \
        [plan.queue_keys[q] for q in plan.queue_of]
    assert [plan.kind[u] for u in range(plan.size)][-5:] == [ACT, ACT, ACT, ACT, DMA]


@pytest.mark.parametrize("name", FIXTURES)
def test_operands_resolved_once_alias_memory(name, tmp_path):
    """The plan resolves each operand once (the same Region on every start, equal to the
    symbol table's) and Memory hands out one array per static region: in place, so a
    write to memory shows through the array made before it."""
    import numpy as np
    from vpuc.ir.symbols import SymbolTable
    program = _program(name, tmp_path)
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Memory(program.module, program.arch.tiles)
    symbols = SymbolTable(program.module)
    for u in range(plan.size):
        if plan.kind[u] == DMA:
            regions = dict(zip(("src", "dst"), plan.dma_regions(u)))
            assert plan.dma_regions(u) is plan.dma_regions(u)
        elif plan.kind[u] == DPU:
            regions = plan.dpu_regions(u)
            assert plan.dpu_regions(u) is regions
        else:
            continue
        for region in regions.values():
            assert plan.region(region.name) is region and symbols.region(region.name) == region
            if region.root.name in memory.dynamic:
                continue
            array = memory.view(region)
            assert memory.view(region) is array
            key, start, end = memory.span(region)
            if array.size:
                assert np.shares_memory(array, memory.arrays[key])
                before = np.array(array).tobytes()
                memory.arrays[key][start:end] += 1          # every byte the region may touch
                after = np.array(array).tobytes()
                assert after != before and after == np.array(memory._view(region, None)).tobytes()


@pytest.mark.parametrize("name", FIXTURES)
def test_bytewise_dmas_are_their_element_copies(name, tmp_path):
    """A dense copy moved as bytes leaves memory as the copy of its elements would, on
    random bytes (NaN patterns included); a region past its memory is a located error."""
    import numpy as np
    program = _program(name, tmp_path)
    plan = build_plan(program, sim_arch_for(program.arch))
    rng = np.random.default_rng(0)
    fast = Memory(program.module, program.arch.tiles)
    slow = Memory(program.module, program.arch.tiles)
    count = 0
    for u in range(plan.size):
        if plan.kind[u] != DMA:
            continue
        src, dst = plan.dma_regions(u)
        if not dma_engine.bytewise(plan.task[u], src, dst, fast):
            continue
        count += 1
        for key, array in fast.arrays.items():
            array[...] = rng.integers(0, 256, array.shape, dtype=np.uint8)
            slow.arrays[key][...] = array
        dma_engine.run_transfer(plan.task[u], src, dst, fast)
        dma_engine.copy_elements(plan.task[u], src, dst, slow)
        for key, array in fast.arrays.items():
            np.testing.assert_array_equal(array, slow.arrays[key])
    if name in ("dma_modes", "examples/double_buffer"):
        assert count        # reshaping and plain copies take the byte path


def test_bytes_of_a_region_past_its_memory_is_an_error(tmp_path):
    import dataclasses
    program = _program("one_dma", tmp_path)
    plan = build_plan(program, sim_arch_for(program.arch))
    memory = Memory(program.module, program.arch.tiles)
    src, dst = plan.dma_regions(next(u for u in range(plan.size) if plan.kind[u] == DMA))
    beyond = dataclasses.replace(dst, byte_offset=dst.byte_offset + len(memory.arrays[memory.locate(dst)[0]]))
    with pytest.raises(VpucError, match=f"%{dst.name} .* lies outside"):
        memory.bytes_of(beyond)
