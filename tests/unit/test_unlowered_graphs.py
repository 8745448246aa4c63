"""A graph block left unlowered is an error, never a program that runs without it.

The task lists of a module with graph blocks beside them (examples/graph_blocks.vir)
are a valid program on their own: built without lower-graph, it used to compile and
simulate with the blocks silently dropped (the gelu then read a DDR tensor nobody
wrote).  assign-windows, where the program is made, and the simulator refuse it."""

from __future__ import annotations

import pytest

from runtime_sim.simulator import simulate
from vpuc.api import compile
from vpuc.arch import load_arch
from vpuc.diagnostics import VpucError
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_file
from tests.sim.simlib import REPO

EXAMPLE = REPO / "examples" / "graph_blocks.vir"


def test_a_pipeline_without_lower_graph_names_every_block():
    module = parse_file(str(EXAMPLE))
    ctx = PassContext(load_arch(module.arch))
    with pytest.raises(VpucError) as caught:
        PassManager(parse_pipeline("compile")).run(module, ctx)
    text = str(caught.value)
    for name, line in (("features", 57), ("head", 63), ("side", 71)):
        assert (f"graph_blocks.vir:{line}:1: error: graph block @{name} is not lowered to "
                "tasks; run lower-graph before assign-windows") in text
    assert "program" not in ctx.artifacts


def test_the_simulator_refuses_a_program_with_a_graph_block():
    program = compile(str(EXAMPLE))
    assert not program.module.graphs
    simulate(program, timing_only=True)
    program.module.graphs = parse_file(str(EXAMPLE)).graphs[1:2]
    with pytest.raises(VpucError, match=r"graph_blocks.vir:63:1: .*graph block @head was not "
                       r"lowered to tasks"):
        simulate(program, timing_only=True)
