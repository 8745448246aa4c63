"""The Linear IR computes what the graph computes: random bodies through the whole pipeline.

Each random elementwise graph (f16/f32, ranks 1-4, tails, broadcasting, dynamic
dims, Converts, Selects) is tokenized, optimized by the data-flow pipeline and
lowered by ``lower_subgraph``; the numpy LIR interpreter runs the final LIR --
on physical registers, so a wrong allocation would corrupt values -- and must
match the reference executor bit for bit.  Variants: loops left unfused (so
values go through Buffers and allocate-buffers shares memory), buffers in
simple mode, and a tight vector register file (spills).  A second property runs
the LIR after every pass from the point it is executable (pointers shifted once
per loop) to check that each preparation pass preserves the result.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lir_testlib import SHAVE, bodies, check_lir, inputs_for, lir_graphs
from vpuc.fusion.lir.expression import GPR, MASK, VEC
from vpuc.fusion.lir.linear_ir import LoweringConfig
from vpuc.fusion.lir.pipeline import LIR_PIPELINE, lower_subgraph

# LIR_EXAMPLES=5000 for a longer soak.
EXAMPLES = int(os.environ.get("LIR_EXAMPLES", "500"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
VARIANTS = st.sampled_from(["default", "default", "unfused", "simple-buffers", "tight"])


def config_for(variant: str) -> tuple[LoweringConfig, list[str]]:
    config = LoweringConfig(SHAVE, buffer_mode="simple" if variant == "simple-buffers"
                            else "optimized")
    if variant == "tight":
        config.registers = config.registers.with_budget(vec=5, mask=2)
    passes = [p for p in LIR_PIPELINE if variant == "default" or p != "fuse-loops"] \
        if variant != "tight" else list(LIR_PIPELINE)
    return config, passes


def check_registers(lir) -> None:
    """Physical registers only, from the allocatable pools, never two live values in one."""
    pools = lir.config.registers.allocatable
    for expr in lir.exprs:
        for desc in expr.in_descs + expr.out_descs:
            if desc.reg is not None:
                assert desc.reg.physical and desc.reg.index in pools[desc.reg.cls]
    for r in lir.live_ranges:
        assert r.reg.cls in (GPR, VEC, MASK)
    by_phys: dict = {}
    physical = {}
    for expr in lir.exprs:
        for desc, conn in zip(expr.out_descs, expr.outputs):
            if desc.reg is not None:
                physical[id(conn)] = desc.reg
    for r in lir.live_ranges:
        reg = physical[id(r.connectors[0])]
        for other in by_phys.get(reg, []):
            copy = lir.exprs[r.start].kind == "Copy" and other.end == r.start
            assert copy or other.end < r.start or r.end < other.start, (reg, r, other)
        by_phys.setdefault(reg, []).append(r)


@SETTINGS
@given(drawn=lir_graphs(), variant=VARIANTS, seed=st.integers(0, 2))
def test_lowered_bodies_compute_the_reference(drawn, variant, seed):
    graph, sizes = drawn
    for body in bodies(graph):
        config, passes = config_for(variant)
        lir = lower_subgraph(body, SHAVE, config, passes)
        check_registers(lir)
        check_lir(body, lir, inputs_for(body, sizes, seed))


EXECUTABLE_FROM = LIR_PIPELINE.index("clean-repeated-data-pointer-shifts")


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 5))
@given(drawn=lir_graphs(max_ops=6), unfused=st.booleans())
def test_every_stage_after_the_control_flow_computes_the_reference(drawn, unfused):
    graph, sizes = drawn
    for body in bodies(graph):
        passes = [p for p in LIR_PIPELINE if not (unfused and p == "fuse-loops")]
        inputs = inputs_for(body, sizes)
        for stop in range(EXECUTABLE_FROM, len(LIR_PIPELINE)):
            names = [p for p in passes if LIR_PIPELINE.index(p) <= stop]
            check_lir(body, lower_subgraph(body, SHAVE, passes=names), inputs)
