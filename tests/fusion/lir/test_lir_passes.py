"""Each Linear IR pass on its own: the registry, and targeted checks of what it guarantees.

The golden files under tests/golden/lir show every pass's before and after; these
tests pin the properties behind them (and execute the results where it matters).
"""

import inspect
from pathlib import Path

import pytest

from lir_testlib import SHAVE, bodies, check_lir, inputs_for, lower
from vpuc.diagnostics import UsageError, VpucError
from vpuc.fusion.controlflow.allocate_buffers import _lifetime
from vpuc.fusion.controlflow.fuse_loops import FuseLoopsPass
from vpuc.fusion.lir.contract import kernel_pointers, loop_shifts, runtime_values
from vpuc.fusion.lir.expression import GPR, MASK, VEC
from vpuc.fusion.lir.kinds import BUFFER, LOOP_BEGIN, MASK_KIND, RELOAD, SPILL
from vpuc.fusion.lir.linear_ir import LoweringConfig
from vpuc.fusion.lir.pipeline import (LIR_PASSES, LIR_PIPELINE, lir_pass_names, lower_subgraph,
                                      run_lir_passes)
from vpuc.fusion.lir.registers import SHAVE_REGISTERS
from vpuc.fusion.lir.values import Value


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-")) + "Pass"


@pytest.mark.parametrize("name,cls", sorted(LIR_PASSES.items()))
def test_pass_name_matches_class_and_file(name, cls):
    assert cls.name == name
    assert cls.__name__ == camel(name)
    assert Path(inspect.getfile(cls)).name == name.replace("-", "_") + ".py"
    doc = inspect.getdoc(inspect.getmodule(cls))
    assert doc and doc.startswith(f"{name}:"), "module docstring starts with the pass name"
    assert "Expects:" in doc and "Guarantees:" in doc


def test_pipeline_runs_every_registered_pass_once_and_has_goldens():
    assert sorted(LIR_PIPELINE) == sorted(LIR_PASSES)
    goldens = Path(__file__).parents[2] / "golden" / "lir"
    for name in LIR_PIPELINE:
        assert (goldens / (name.replace("-", "_") + ".expected")).exists(), name


def test_pass_names_are_checked():
    assert lir_pass_names(None, "fuse-loops") == ["optimize-domain", "mark-loops", "fuse-loops"]
    with pytest.raises(UsageError, match="unknown LIR pass 'nope'"):
        lir_pass_names(["nope"])


DENSE_AND_BIAS = """graph @g {
  %x = Parameter() : 1x16x8x8xf16
  %bias = Parameter() : 1x16x1x1xf16
  %a = Add(%x, %bias)
  %r = Relu(%a)
  Result(%r)
}"""


def test_optimize_domain_merges_dims_alike_for_every_port():
    lir = lower(DENSE_AND_BIAS, passes=["optimize-domain"])
    assert lir.master_shape == (16, 64) and lir.domain_groups == [(1,), (2, 3)]
    assert lir.exprs[1].out_descs[0].shape == (16, 1)
    assert lir.io[0].shape == (1, 16, 8, 8)          # arguments keep their memory shapes


def test_mark_loops_cuts_at_a_new_branch():
    lir = lower("""graph @g {
      %x = Parameter() : 64xf32
      %y = Parameter() : 64xf32
      %a = Relu(%x)
      %b = Exp(%y)
      %s = Add(%a, %b)
      Result(%s)
    }""", passes=["mark-loops"])
    loops = [e.loop_ids for e in lir.exprs if e.loop_ids]
    assert loops == [[0], [1], [1]]
    info = lir.loops.get(0)
    assert info.work_amount == 64 and info.increment == 4 and info.dim_idx == 0


def test_fuse_loops_takes_a_broadcast_loop_into_a_full_one():
    lir = lower("""graph @g {
      %x = Parameter() : 4x1xf32
      %y = Parameter() : 4x24xf32
      %a = Relu(%x)
      %b = Exp(%y)
      %s = Add(%a, %b)
      Result(%s)
    }""", passes=["mark-loops", "fuse-loops"])
    assert len(lir.loops) == 2
    assert [lir.loops.get(i).work_amount for i in (0, 1)] == [4, 24]


def test_a_buffer_inside_a_shared_outer_loop_holds_one_slice():
    """Fuse only the outer loops: the Buffer lives in the shared outer loop, is 1 along its
    dim (reused every outer iteration), and the kernel still computes the right thing."""
    body = bodies("""graph @g {
      %x = Parameter() : 5x20xf32
      %y = Parameter() : 5x20xf32
      %a = Relu(%x)
      %b = Exp(%y)
      %s = Add(%a, %b)
      Result(%s)
    }""")[0]
    config = LoweringConfig(SHAVE)
    lir = lower_subgraph(body, SHAVE, config, passes=["mark-loops"])
    outer_a, outer_b = lir.exprs[2].loop_ids[0], lir.exprs[3].loop_ids[0]
    assert FuseLoopsPass._fuse(lir, 0, outer_a, outer_b)
    rest = [p for p in LIR_PIPELINE if p not in ("optimize-domain", "mark-loops", "fuse-loops")]
    run_lir_passes(lir, rest)
    (buf,) = lir.exprs_of_kind(BUFFER)
    assert buf.loop_ids == [outer_a] and buf.attrs["allocation_shape"] == (1, 20)
    assert buf.attrs["size"] == 80 and lir.frame.scratchpad_size == 80
    check_lir(body, lir, inputs_for(body))


UNFUSED = [p for p in LIR_PIPELINE if p != "fuse-loops"]
THREE_BUFFERS = """graph @g {
  %x = Parameter() : 4x24xf16
  %y = Parameter() : 4x24xf16
  %a = Relu(%x)
  %b = Exp(%y)
  %s = Add(%a, %b)
  %t = Tanh(%s)
  %c = Sigmoid(%b)
  %u = Multiply(%c, %t)
  Result(%u)
}"""


def _spans(lir):
    return {b.attrs["memory"]: (_lifetime(lir, b), b.attrs["offset"], b.attrs["size"],
                                b.attrs["cluster"]) for b in lir.exprs_of_kind(BUFFER)}


def test_allocate_buffers_optimized_shares_memory_and_registers_safely():
    body = bodies(THREE_BUFFERS)[0]
    optimized = lower_subgraph(body, SHAVE, LoweringConfig(SHAVE), UNFUSED)
    simple = lower_subgraph(body, SHAVE, LoweringConfig(SHAVE, buffer_mode="simple"), UNFUSED)
    assert optimized.frame.scratchpad_size == 384 < simple.frame.scratchpad_size == 576
    assert {b.attrs["reg_group"] for b in optimized.exprs_of_kind(BUFFER)} == {0}
    assert len({b.attrs["reg_group"] for b in simple.exprs_of_kind(BUFFER)}) == 3
    spans = _spans(optimized)
    for m1, (life1, off1, size1, c1) in spans.items():
        for m2, (life2, off2, size2, c2) in spans.items():
            if m1 < m2 and c1 != c2 and life1[0] <= life2[1] and life2[0] <= life1[1]:
                assert off1 + size1 <= off2 or off2 + size2 <= off1, (m1, m2)
    for lir in (optimized, simple):
        check_lir(body, lir, inputs_for(body))


STATIC_TAIL = """graph @g {
  %x = Parameter() : 3x21xf16
  %y = Parameter() : 1x21xf16
  %a = Add(%x, %y)
  Result(%a)
}"""


def test_insert_specific_iterations_splits_main_and_masked_tail():
    lir = lower(STATIC_TAIL, passes=LIR_PIPELINE[:LIR_PIPELINE.index("insert-specific-iterations")
                                                  + 1])
    kinds = {info.kind: info for info in lir.loops if info.dim_idx == 0}
    main, tail = kinds["main"], kinds["tail"]
    assert (main.work_amount, main.increment, tail.work_amount, tail.increment) == (16, 8, 5, 5)
    assert all(lp.finalization_offset == 0 for lp in main.ports)
    (mask,) = lir.exprs_of_kind(MASK_KIND)
    assert mask.attrs["count"] == 5
    masked = [e for e in lir.exprs if len(e.inputs) == 2 and e.inputs[1] is mask.outputs[0]]
    assert sorted(e.kind for e in masked) == ["Load", "Load", "Store"]
    assert all(e.attrs["count"] == 5 for e in masked)


def test_a_loop_shorter_than_a_vector_becomes_a_tail_in_place():
    lir = lower("""graph @g {
      %x = Parameter() : 6xf16
      %r = Relu(%x)
      Result(%r)
    }""")
    (info,) = list(lir.loops)
    assert info.kind == "tail" and info.evaluate_once and info.work_amount == 6


def test_dynamic_tails_are_symbolic_and_may_be_empty():
    lir = lower("""graph @g {
      %x = Parameter() : 2x?<=50xf32
      %y = Parameter() : 1x?<=50xf32
      %a = Add(%x, %y)
      Result(%a)
    }""")
    main = next(i for i in lir.loops if i.kind == "main")
    tail = next(i for i in lir.loops if i.kind == "tail")
    assert str(main.work_amount) == "4*(D1 // 4)" and str(main.trip_count) == "(D1 // 4)"
    assert str(tail.work_amount) == "(D1 % 4)" and tail.evaluate_once
    assert main.may_be_empty and tail.may_be_empty
    body = bodies("""graph @g {
      %x = Parameter() : 2x?<=50xf32
      %y = Parameter() : 1x?<=50xf32
      %a = Add(%x, %y)
      Result(%a)
    }""")[0]
    for size in (1, 3, 4, 8, 50):
        check_lir(body, lir, inputs_for(body, {1: size}))


def test_cleanup_and_single_evaluation_fold_offsets():
    lir = lower(STATIC_TAIL)
    outer = next(i for i in lir.loops if i.dim_idx == 1)
    tail = next(i for i in lir.loops if i.kind == "tail")
    x_outer = outer.entries[0]
    assert x_outer.ptr_increment == 0 and x_outer.finalization_offset == 0
    assert tail.evaluate_once and all(lp.ptr_increment == 0 for lp in tail.ports)
    assert tail.entries[0].finalization_offset == 5          # the tail's 5 elements
    assert tail.entries[1].finalization_offset == -16        # %y rewinds to the row start


def test_registers_come_from_the_pools_and_skip_reserved_ones():
    lir = lower(STATIC_TAIL)
    used = {(d.reg.cls, d.reg.index) for e in lir.exprs for d in e.in_descs + e.out_descs
            if d.reg is not None}
    for cls, index in used:
        assert index in SHAVE_REGISTERS.allocatable[cls]
        assert index not in SHAVE_REGISTERS.reserved.get(cls, {})
    assert {cls for cls, _ in used} == {GPR, VEC, MASK}
    counters = [e.out_descs[0].reg for e in lir.exprs_of_kind(LOOP_BEGIN)]
    assert counters.count(None) == 1                         # the tail runs once: no counter


def test_copy_takes_over_its_input_register():
    lir = lower("""graph @g {
      %y = Parameter() : 1x16xf32
      %by = Broadcast{shape = [4, 16]}(%y)
      %sm = Softmax{axis = 1}(%by)
      Result(%sm)
    }""")
    (copy,) = lir.exprs_of_kind("Copy")
    assert copy.in_descs[0].reg == copy.out_descs[0].reg


def test_spills_keep_within_a_tiny_vector_budget():
    text = """graph @g {
      %x = Parameter() : 64xf32
      %y = Parameter() : 64xf32
      %c = Constant(2.0) : f32
      %d = Constant(-1.0) : f32
      %a = Multiply(%x, %c)
      %b = Add(%y, %d)
      %e = Maximum(%a, %b)
      %f = FMA(%e, %c, %d)
      Result(%f)
    }"""
    body = bodies(text)[0]
    config = LoweringConfig(SHAVE)
    config.registers = config.registers.with_budget(vec=4)
    lir = lower_subgraph(body, SHAVE, config)
    assert lir.exprs_of_kind(SPILL) and lir.exprs_of_kind(RELOAD)
    assert lir.frame.spill_size == 16 * len(lir.exprs_of_kind(SPILL))
    assert {d.reg.index for e in lir.exprs for d in e.out_descs
            if d.reg is not None and d.reg.cls == VEC} <= {0, 1, 2, 3}
    check_lir(body, lir, inputs_for(body))
    config.registers = config.registers.with_budget(vec=3)
    with pytest.raises(VpucError, match="alone needs more than 3 vec registers"):
        lower_subgraph(bodies(text)[0], SHAVE, config)


def test_loop_counters_move_to_the_stack_when_scalar_registers_run_out():
    text = """graph @g {
      %x = Parameter() : 3x4x20xf32
      %y = Parameter() : 3x1x20xf32
      %a = Add(%x, %y)
      Result(%a)
    }"""
    body = bodies(text)[0]
    config = LoweringConfig(SHAVE)
    config.registers = config.registers.with_budget(gpr=4)     # 3 pointers + 1 counter
    lir = lower_subgraph(body, SHAVE, config)
    slots = [i.counter_slot for i in lir.loops if i.counter_slot is not None]
    assert len(slots) == 2 and lir.frame.spill_size == 8
    check_lir(body, lir, inputs_for(body))


def test_print_hooks_and_timings():
    seen = []
    body = bodies(STATIC_TAIL)[0]
    lir = lower_subgraph(body, SHAVE, print_after=lambda name, lir: seen.append(name),
                         print_before=lambda name, lir: seen.append("<" + name))
    assert seen[:2] == ["<optimize-domain", "optimize-domain"] and len(seen) == 2 * len(LIR_PIPELINE)
    assert [name for name, _ in lir.timings] == ["build"] + LIR_PIPELINE
    assert all(t >= 0 for _, t in lir.timings)


def test_contract_helpers():
    lir = lower(STATIC_TAIL)
    pointers = kernel_pointers(lir)
    assert [(p.memory, p.arg_index) for p in pointers] == [("in0", 0), ("in1", 1), ("out0", 2)]
    assert len({p.reg for p in pointers}) == 3
    main = next(i for i in lir.loops if i.kind == "main")
    shifts = loop_shifts(lir, main.id)
    assert {s.step_bytes.static for s in shifts} == {16} and len(shifts) == 3
    dyn = lower("""graph @g {
      %x = Parameter() : ?<=99xf16
      %r = Relu(%x)
      Result(%r)
    }""")
    assert Value.sym("D0") % 8 in runtime_values(dyn)


def test_interpreter_catches_an_out_of_bounds_walk():
    body = bodies(STATIC_TAIL)[0]
    lir = lower_subgraph(body, SHAVE)
    main = next(i for i in lir.loops if i.kind == "main")
    main.entries[0].ptr_increment = Value(2)
    with pytest.raises(VpucError, match="past the end|outside"):
        check_lir(body, lir, inputs_for(body))
