"""The generator's clean-up passes: each one's effect, and correctness with any subset.

Golden-style checks on small kernels: what a pass removes or rewrites (counted
on the MIR), that the kernel still computes exactly the same, and the
registry's naming convention (file = name = class, as for the module passes).
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import numpy as np
import pytest

from fusion_testlib import graph_of
from gen_testlib import run_both, same
from vpuc.fusion.generator.cleanup import CLEANUP_PASSES, CLEANUP_PIPELINE, CleanupConfig
from vpuc.fusion.generator.cleanup.strength_reduction import magic
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.mir import walk
from vpuc.fusion.generator.profile import format_profile, profile_kernel
from vpuc.fusion.generator.savings import measure
from vpuc.reference.graph import run_graph
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target

DYNAMIC = graph_of("""
graph @g {
  %x = Parameter() : 3x?<=300xf16
  %y = Parameter() : 1x?<=300xf16
  %c = Constant(0.5) : f16
  %a = Maximum(%x, %c)
  %b = Add(%a, %y)
  %s = Sigmoid(%b)
  %m = Minimum(%s, %c)
  Result(%m)
}""")
CLAMPS = graph_of("""
graph @g {
  %x = Parameter() : 2x77xf16
  %c = Constant(6.0) : f16
  %d = Constant(-1.0) : f16
  %r = Relu(%x)
  %m = Minimum(%r, %c)
  %n = Maximum(%m, %d)
  %k = Clamp{min = -0.5, max = 4.0}(%n)
  Result(%k)
}""")


def body_of(graph):
    return tokenize(graph, get_target("shave")).subgraphs[0].body


def ops(kernel, name=None):
    return [i.op for i in walk(kernel.mir.body) if name is None or i.op == name]


def run(kernel, graph, seed=0, n=257):
    rng = np.random.default_rng(seed)
    ins = {p.result: rng.uniform(-3, 3, tuple(n if not isinstance(d, int) else d
                                              for d in p.type.dims)) for p in graph.parameters}
    expected = run_graph(graph, ins)
    got = run_both(kernel, [ins[p.result] for p in graph.parameters], [e.shape for e in expected])
    for e, g in zip(expected, got.outputs):
        assert same(e, g)
    return got


def test_registry_names_match_files_and_classes():
    for name, cls in CLEANUP_PASSES.items():
        assert cls.name == name
        assert cls.__name__ == "".join(p.capitalize() for p in name.split("-")) + "Pass"
        assert Path(inspect.getfile(cls)).name == name.replace("-", "_") + ".py"
        assert inspect.getdoc(inspect.getmodule(cls)).startswith(f"{name}:")
    assert set(CLEANUP_PIPELINE) == set(CLEANUP_PASSES)


@pytest.mark.parametrize("seed", range(8))
def test_any_subset_of_cleanups_is_correct(seed):
    rnd = random.Random(seed)
    passes = [p for p in CLEANUP_PIPELINE if rnd.random() < 0.6]
    for graph in (DYNAMIC, CLAMPS):
        kernel = generate(body_of(graph), "k", cleanups=passes)
        run(kernel, graph, seed, n=rnd.choice([1, 8, 9, 100, 300]))


def test_cse_and_licm_hoist_the_dims_loads_and_constants():
    body = body_of(DYNAMIC)
    naive = generate(body, "k", cleanups=[])
    clean = generate(body, "k", cleanups=["cse", "licm", "cse", "peephole"])
    # the naive code reads each run-time dim where it is used; cleaned, once each
    assert ops(naive, "lw").count("lw") > ops(clean, "lw").count("lw")
    inner = lambda k: [n for n in k.mir.body if hasattr(n, "counter")]  # noqa: E731
    loop_insts = lambda k: [i.op for loop in inner(k) for i in walk(loop.body)]  # noqa: E731
    assert loop_insts(naive).count("li") > loop_insts(clean).count("li")
    assert "vbcast.w" not in loop_insts(clean)        # Sigmoid's 1.0 left the loops
    run(clean, DYNAMIC)


def test_strength_reduction_turns_divisions_into_shifts():
    body = body_of(DYNAMIC)
    naive = generate(body, "k", cleanups=[])
    reduced = generate(body, "k", cleanups=["strength-reduction"])
    assert "divu" in ops(naive) and "remu" in ops(naive)
    assert "divu" not in ops(reduced) and "remu" not in ops(reduced)
    assert "srli" in ops(reduced) and "andi" in ops(reduced)
    run(reduced, DYNAMIC)


@pytest.mark.parametrize("d", [3, 5, 6, 7, 10, 37, 100, 1000, 65537, (1 << 30) + 1])
def test_magic_division_is_exact_for_dims(d):
    m, r = magic(d)
    rng = np.random.default_rng(d)
    for n in [0, 1, d - 1, d, d + 1, (1 << 31) - 1] + rng.integers(0, 1 << 31, 2000).tolist():
        assert ((n * m) >> 32) >> r == n // d


def test_fold_min_max_makes_one_clamp():
    body = body_of(CLAMPS)
    plain = generate(body, "k", cleanups=["cse", "licm", "peephole"])
    folded = generate(body, "k", cleanups=["fold-min-max", "cse", "licm", "peephole"])
    def per_loop(k):
        return [i.op for n in k.mir.body if hasattr(n, "counter") for i in walk(n.body)]
    assert per_loop(plain).count("vmax.f16") + per_loop(plain).count("vmin.f16") == 5
    assert per_loop(folded).count("vmax.f16") == 1 and per_loop(folded).count("vmin.f16") == 1
    run(folded, CLAMPS)


def test_peephole_merges_pointer_shifts_and_moves():
    body = body_of(DYNAMIC)
    before = generate(body, "k", cleanups=["cse", "licm"])
    after = generate(body, "k", cleanups=["cse", "licm", "peephole"])
    assert ops(after).count("vmov") < ops(before).count("vmov")
    assert len(ops(after)) < len(ops(before))
    run(after, DYNAMIC)


def test_unroll_and_schedule_save_cycles():
    body = body_of(CLAMPS)
    x = np.random.default_rng(0).uniform(-3, 3, (2, 77))
    base = measure(body, [x], [(2, 77)], [p for p in CLEANUP_PIPELINE if p not in (
        "unroll", "modulo-schedule", "pipeline", "schedule")])
    full = measure(body, [x], [(2, 77)], CLEANUP_PIPELINE)
    assert full.cycles < base.cycles
    # 19 vectors: the default factor (16) leaves one straight-line pass; 4 keeps a loop
    kernel = generate(body, "k", config=CleanupConfig(unroll=4))
    assert any(n.info.get("unrolled") == 4 for n in kernel.mir.body if hasattr(n, "info"))


def test_fallbacks_keep_kernels_correct():
    body = body_of(DYNAMIC)
    for config in (CleanupConfig(unroll=1, hoist_vectors=False),
                   CleanupConfig(unroll=-1, hoist_vectors=False)):
        run(generate(body, "k", config=config), DYNAMIC)


def test_per_expression_cycles_add_up_to_the_interpreter():
    kernel = generate(body_of(DYNAMIC), "k")
    rng = np.random.default_rng(2)
    x, y = rng.uniform(-3, 3, (3, 123)), rng.uniform(-3, 3, (1, 123))
    result = run_both(kernel, [x, y], [(3, 123)])
    prof = profile_kernel(kernel, [x, y], [(3, 123)])
    assert prof.cycles == result.cycles == sum(prof.per_pc) == sum(prof.per_tag.values())
    assert prof.instructions == result.result.instructions
    text = format_profile(kernel, prof)
    assert "Sigmoid" in text and "prologue" in text
    sigmoid = next(e.id for e in kernel.lir.exprs if e.kind == "Sigmoid")
    assert prof.per_tag[sigmoid] == max(v for k, v in prof.per_tag.items() if isinstance(k, int))


LONG_CHAIN = graph_of("""
graph @g {
  %x = Parameter() : 4x1000xf16
  %a = Constant(0.5) : f16
  %b = Constant(1.0) : f16
  %m = Multiply(%x, %a)
  %s = Add(%m, %b)
  %r = Relu(%s)
  %k = Clamp{min = -0.5, max = 4.0}(%r)
  Result(%k)
}""")


def test_pipeline_overlaps_iterations_and_stays_exact():
    # the two-stage pipeline alone: modulo-schedule, which takes this loop first, left out
    two_stage = [p for p in CLEANUP_PIPELINE if p != "modulo-schedule"]
    body = body_of(LONG_CHAIN)
    x = np.random.default_rng(3).uniform(-3, 3, (4, 1000))
    without = measure(body, [x], [(4, 1000)], [p for p in two_stage if p != "pipeline"])
    full = measure(body, [x], [(4, 1000)], two_stage)
    assert full.cycles < 0.95 * without.cycles
    kernel = generate(body, "k", cleanups=two_stage)
    loops = [n for n in kernel.mir.body if hasattr(n, "info") and n.info.get("pipelined")]
    assert len(loops) == 1
    # the stage-2 instructions address one iteration back: the stores trail the pointer
    stores = [i for i in loops[0].body if i.is_store]
    assert stores and all(i.mem.offset < 0 for i in stores)
    expected = run_graph(body, {"x": x.astype(np.float16)})
    run = run_both(kernel, [x.astype(np.float16)], [(4, 1000)])
    assert same(expected[0], run.outputs[0])
