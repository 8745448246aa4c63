"""Timing-only simulations run ACT SHAVE kernels without their vector arithmetic
(``runtime_sim.isa.cycles_only``) and still give every task the cycles of the
run with numerics.  The kernel-level comparisons run in the kernel library's and
the generator's harnesses (``tests/kernels/kernel_harness.py``,
``tests/fusion/generator/gen_testlib.py``); here: whole models, and the analysis.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime_sim.engines.shave as shave
from runtime_sim.isa.cycles_only import data_dependence, timing_program
from runtime_sim.isa.cycles_slice import analyse
from runtime_sim.isa.interpreter import Program, load_kernel
from runtime_sim.isa.invoke import invocation_memory
from vpuc.api import compile, simulate
from vpuc.onnx_import import zoo
from vpuc.shave.assembler import assemble

# The models with ACT SHAVE work (ResNet-18's layers are all DPU and DMA).
SMALL = {"mobilenet_v3_small": {"size": 32}, "encoder_layer": {"seq": 24, "width": 32, "heads": 2}}


@pytest.fixture(scope="module", params=sorted(SMALL))
def program(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("cycles_only") / f"{request.param}.onnx"
    zoo.ZOO[request.param](seed=0, **SMALL[request.param]).save(path, request.param)
    return compile(str(path))


def test_timing_only_gives_the_cycles_of_the_run_with_numerics(program, monkeypatch):
    full_runs = []
    real = shave.invoke_kernel

    def counting(obj, *args, **kwargs):
        full_runs.append(obj.name)
        return real(obj, *args, **kwargs)
    monkeypatch.setattr(shave, "invoke_kernel", counting)
    timing = simulate(program, timing_only=True)
    timing_full_runs = list(full_runs)
    numerics = simulate(program)
    assert timing.cycles == numerics.cycles
    assert timing.result.timeline.start == numerics.result.timeline.start
    assert timing.result.timeline.end == numerics.result.timeline.end
    # Only kernels whose cycles may depend on data still run in full.
    for name in set(timing_full_runs):
        image = program.kernels[name.lstrip("@")]
        obj = shave.kernel_object(image.elf, name)
        loaded = load_kernel(obj, invocation_memory(obj, np.zeros(1 << 16, np.uint8), b""))
        assert data_dependence(loaded.program), name


def _program(source: str) -> Program:
    obj = assemble(source, "t.s")
    return Program(obj.text, 0, "t")


def test_a_branch_on_a_reduced_vector_makes_the_cycles_data_dependent():
    program = _program("""
        vld v0, 0(s0)
        vredsum.f32 s2, v0
        beqz s2, done
        nop
    done:
        li s0, 0
        halt
    """)
    assert "vredsum.f32" in data_dependence(program)
    assert timing_program(program) is None


def test_a_reduced_vector_only_stored_leaves_the_cycles_independent_of_data():
    program = _program("""
        lw s3, 0(s0)
        vld v0, 0(s3)
        vredsum.f32 s2, v0
        sw s2, 4(s3)
        li s0, 0
        halt
    """)
    found = analyse(program.decoded)
    assert found.roles is not None
    assert found.roles[0].checked_load            # s3 is an address
    assert found.roles[2].skip                    # the reduction is not run
    assert found.roles[3].store_sources           # its bytes are not computed


def test_an_address_loaded_through_a_stored_vector_is_checked_at_run_time():
    program = _program("""
        vld v0, 0(s0)
        vst v0, 0(sp)
        lw s3, 0(sp)
        lw s4, 0(s3)
        li s0, 0
        halt
    """)
    found = analyse(program.decoded)
    assert found.roles[1].vector_store
    assert found.roles[2].checked_load            # feeds the address of the next load
    assert not found.roles[3].checked_load        # s4 decides nothing


def test_a_second_timing_only_run_reuses_the_cycles_only_results(program, monkeypatch):
    monkeypatch.setattr(shave, "cycles_only_results", shave.cycles_only_results.__class__())
    runs = []
    real = shave.invoke_cycles_only

    def counting(*args, **kwargs):
        found = real(*args, **kwargs)
        if found is not None:
            runs.append(args[2])
        return found
    monkeypatch.setattr(shave, "invoke_cycles_only", counting)
    first = simulate(program, timing_only=True)
    ran = len(runs)
    second = simulate(program, timing_only=True)
    assert second.result.timeline.end == first.result.timeline.end
    if any(tl.executor.name == "ACT_SHAVE" and tl.tasks for tl in program.module.task_lists):
        assert ran > 0
    assert len(runs) == ran            # nothing run again


def test_masks_from_scalars_are_computed_and_masks_from_vectors_are_all_lanes():
    program = _program("""
        lw s3, 0(s0)
        vmask.w m0, s3
        vld v0, 0(s0)
        vcmplt.f32 m1, v0, v0
        li s0, 0
        halt
    """)
    timing = timing_program(program)
    memory = type("Memory", (), {})()
    R = [np.uint32(0)] * 80
    R[3] = np.uint32(2)
    timing.program.flat[1][0](R, memory)          # vmask.w: the first 2 words' lanes
    timing.program.flat[3][0](R, memory)          # vcmplt: data, all lanes
    assert R[64 + 0].tolist() == [True] * 8 + [False] * 8
    assert all(R[64 + 1])


# A copying loop whose offset, trip count and step are immediates (two tests vary them).
COPY_LOOP = """
        lw s3, {offset}(s0)
        li s4, {trips}
    again:
        vld v0, 0(s3)
        vst v0, 64(s3)
        addi s3, s3, {step}
        addi s4, s4, -1
        bnez s4, again
        li s0, 0
        halt
    """


def test_kernels_of_one_structure_share_the_analysis_not_their_immediates(monkeypatch):
    import runtime_sim.isa.cycles_slice as cycles_slice
    source = COPY_LOOP
    first = _program(source.format(offset=0, trips=4, step=16))
    second = _program(source.format(offset=8, trips=9, step=32))
    other = _program(source.format(offset=8, trips=9, step=32).replace("vst v0, 64(s3)",
                                                                        "sw s4, 64(s3)"))
    monkeypatch.setattr(cycles_slice, "_BY_STRUCTURE", {})
    a, b, c = (analyse(p.decoded) for p in (first, second, other))
    assert len(cycles_slice._BY_STRUCTURE) == 2            # first and second share one
    assert a.roles is b.roles and a.critical_at is b.critical_at
    assert a.accesses != b.accesses                        # each keeps its own immediates
    assert a.roles[0].checked_load and b.roles[0].checked_load
    assert a.roles[3].vector_store and not c.roles[3].vector_store    # its own analysis
    for found, program in ((a, first), (b, second), (c, other)):
        monkeypatch.setattr(cycles_slice, "_BY_STRUCTURE", {})
        alone = analyse(program.decoded)
        assert (alone.roles, alone.critical_at, alone.accesses) == (
            found.roles, found.critical_at, found.accesses)


def _library_and_zoo_programs(zoo_program) -> list[Program]:
    from runtime_sim.engines.shave import kernel_object
    from vpuc.kernel_library import library_names, load_library_kernel
    programs = [Program(load_library_kernel(name).text, 0, name) for name in library_names()]
    for name, image in zoo_program.kernels.items():
        programs.append(Program(kernel_object(image.elf, f"@{name}").text, 0, name))
    return programs


def test_block_analysis_matches_the_instruction_worklist(program, monkeypatch):
    """Every library kernel and the model's kernels: the same roles and critical registers
    (or the same refusal) as the per-instruction worklist of tests/sim/cycles_slice_reference.py."""
    import runtime_sim.isa.cycles_slice as cycles_slice
    from runtime_sim.isa.semantics import operand_access
    from tests.sim.cycles_slice_reference import reference_slice
    programs = _library_and_zoo_programs(program)
    assert len(programs) > 20
    checked_loads = 0
    for kernel in programs:
        monkeypatch.setattr(cycles_slice, "_BY_STRUCTURE", {})
        found = analyse(kernel.decoded)
        decoded = kernel.decoded
        ins = [cycles_slice._instruction(i, dec, operand_access(dec), len(decoded))
               for i, dec in enumerate(decoded)]
        roles, extra = reference_slice(ins, cycles_slice._successors(ins))
        if roles is None:
            assert found.roles is None and f".text+{extra * 8:#x}" in found.reason, kernel.name
            continue
        assert tuple(tuple(role) for role in found.roles) == roles, kernel.name
        assert found.critical_at == extra, kernel.name
        checked_loads += sum(role.checked_load for role in found.roles)
    assert checked_loads                # the comparison covers loads that decide something


def test_a_cycles_only_program_makes_no_runner_for_what_it_skips():
    from runtime_sim.isa.cycles_only import _skipped
    program = _program("""
        lw s3, 0(s0)
        vld v0, 0(s3)
        vadd.f32 v1, v0, v0
        vredsum.f32 s2, v1
        sw s2, 4(s3)
        li s0, 0
        halt
    """)
    timing = timing_program(program)
    assert "steps" not in vars(program) and "flat" not in vars(program)   # none made
    skipped = [i for i, role in enumerate(timing.slice.roles) if role.skip]
    assert skipped == [2, 3]
    assert all(timing.program.flat[i][0] is _skipped for i in skipped)
    assert [s[1:] for s in timing.program.flat] == [s[1:] for s in program.flat]
    assert [(s.sources, s.dests, s.cost) for s in timing.program.steps] == [
        (s.sources, s.dests, s.cost) for s in program.steps]


def test_loops_of_the_same_code_share_one_plan_and_other_code_has_its_own(monkeypatch):
    import runtime_sim.isa.cycles_only_loops as loops
    from runtime_sim.isa.loop_plan import Step
    source = COPY_LOOP
    same = _program(source.format(offset=0, trips=4, step=16))
    moved = _program(source.format(offset=8, trips=9, step=16))     # the loop's code unchanged
    other = _program(source.format(offset=0, trips=4, step=32))     # its step differs
    monkeypatch.setattr(loops, "_SHARED", {})
    head, branch = 2, 6
    plans = [loops.shared_plan(p, head, branch, timing_program(p).slice.critical_at[head])
             for p in (same, moved, other)]
    assert plans[0] is plans[1] and plans[2] is not plans[0]
    assert len(loops._SHARED) == 2
    s3 = 3
    assert plans[0].induction[s3] == {2: Step("imm", 16, 1)}
    assert plans[2].induction[s3] == {2: Step("imm", 32, 1)}



# A trip count loaded from the arguments at OFF (a checked load: it decides the loop),
# then a vector stored at VOFF of the stack and a count loaded back from 32(sp): the
# cycles-only run may use that count only if the vector did not overwrite it.
SHARED_STEPS = """
    .global k
    .text
k:
    lw    s3, {off}(s0)
    addi  sp, sp, -128
    sw    s3, 32(sp)
    vld   v0, 0(sp)
    vadd.f32 v1, v0, v0
    vst   v1, {voff}(sp)
    lw    s5, {loff}(sp)
    andi  s5, s5, 15
    addi  s5, s5, 1
again:
    addi  s5, s5, -1
    bnez  s5, again
    addi  sp, sp, 128
    li    s0, 0
    ret
"""


@pytest.mark.parametrize("first, second", [((0, 64, 32), (4, 32, 32)),
                                           ((4, 32, 32), (0, 64, 32)),
                                           ((0, 64, 32), (4, 64, 64)),
                                           ((4, 64, 64), (0, 64, 32))])
def test_kernels_differing_in_immediates_share_their_steps_each_with_its_offsets(
        first, second, monkeypatch):
    """One ``flat`` for both kernels, its runners made by the first to run a step; each
    checked load and marked store uses its own offsets (read from R): the second kernel
    gets its own trip count, or gives up where its own vector store hid the count."""
    import weakref

    from runtime_sim.isa import cycles_only, kernel_loader
    from runtime_sim.isa.cycles_only import invoke_cycles_only
    from runtime_sim.isa.invoke import invoke_kernel
    monkeypatch.setattr(cycles_only, "_FLATS", {})        # nothing from the other cases
    monkeypatch.setattr(cycles_only, "_TIMING", weakref.WeakKeyDictionary())
    monkeypatch.setattr(kernel_loader, "_PROGRAMS", {})
    args = np.array([3, 11, 0, 0], np.uint32).tobytes()
    objs = [assemble(SHARED_STEPS.format(off=off, voff=voff, loff=loff), f"k{n}.s")
            for n, (off, voff, loff) in enumerate((first, second))]
    cycles = []
    for obj, (off, voff, loff) in zip(objs, (first, second)):
        full = invoke_kernel(obj, np.zeros(4096, np.uint8), args, 0, len(args))
        fast = invoke_cycles_only(obj, np.zeros(4096, np.uint8), args, 0, len(args))
        if voff <= loff < voff + 16:        # the count is vector data: the full run decides
            assert fast is None, obj.name
        else:
            assert fast is not None, obj.name
            assert (fast.cycles, fast.scalar_regs[0]) == (full.cycles, full.scalar_regs[0])
        cycles.append(full.cycles)
    assert cycles[0] != cycles[1]                    # 3 and 11 trips
    a, b = (timing_program(load_kernel(obj, invocation_memory(obj, np.zeros(4096, np.uint8),
                                                              args)).program) for obj in objs)
    assert a is not b and a.program.flat is b.program.flat      # one flat for both


def test_loops_taken_over_at_their_heads_give_the_cycles_of_loops_taken_at_back_edges(
        program, monkeypatch):
    """``TimingLoops.enter`` batches a loop from its first iteration where the run reaches
    its head: every invocation's cycles, status and instruction count are those of the
    run that batches loops only from their back-edges (the first iteration interpreted),
    and more of its iterations are batched."""
    from runtime_sim.isa.cycles_only_loops import TimingLoops
    real = shave.invoke_cycles_only

    def runs() -> list[tuple]:
        found: list[tuple] = []

        def recording(*args, **kwargs):
            result = real(*args, **kwargs)
            found.append(None if result is None else (
                result.cycles, result.scalar_regs[0], result.instructions,
                result.batched_iterations))
            return result
        monkeypatch.setattr(shave, "cycles_only_results",
                            shave.cycles_only_results.__class__())
        monkeypatch.setattr(shave, "invoke_cycles_only", recording)
        simulate(program, timing_only=True)
        return found
    at_heads = runs()
    monkeypatch.setattr(TimingLoops, "enter", lambda self, *args, **kwargs: None)
    at_back_edges = runs()
    assert len(at_heads) == len(at_back_edges) > 0
    assert None not in at_heads and None not in at_back_edges
    assert [r[:3] for r in at_heads] == [r[:3] for r in at_back_edges]
    assert sum(r[3] for r in at_heads) > sum(r[3] for r in at_back_edges)
