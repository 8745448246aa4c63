"""The naive (one layer per op, intermediates in DDR) program of bench/fusion_bench.py
(built with bench/fusion_programs.py).

Built by bench/naive_program.py for a small tensor: it compiles, runs race-free
with the numpy reference's results, is slower than the fused program, and every
wait it emits is needed (dropping one is a race).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import fusion_programs as fb  # noqa: E402
from naive_program import build_naive_program  # noqa: E402

from runtime_sim.simulator import simulate  # noqa: E402
from vpuc.arch import load_arch  # noqa: E402
from vpuc.diagnostics import VpucError  # noqa: E402
from vpuc.passes.base import PassContext  # noqa: E402
from vpuc.passes.manager import PassManager  # noqa: E402
from vpuc.passes.registry import PIPELINES, parse_pipeline  # noqa: E402
from vpuc.reference.graph import run_graph  # noqa: E402
from vpuc.vir.parser import parse_text  # noqa: E402

SHAPE = (1, 16, 8, 16)
BLOCKS = 4
# memory-bound: one FMA-able pair and a ReLU
CHAIN = [("Multiply", 0.5), ("Add", 1.0), ("Relu", None)]


@pytest.fixture(scope="module")
def programs():
    graph, fused, _, _ = fb.fused_program(CHAIN, BLOCKS, SHAPE)
    naive, _, text = fb.naive_program(CHAIN, BLOCKS, SHAPE)
    return graph, fused, naive, text


def test_naive_program_shape(programs):
    _, _, naive, text = programs
    acts = naive.module.task_lists[1].tasks
    assert len(acts) == len(CHAIN) * BLOCKS * 2              # one kernel per op per block half
    assert "ddr %t0 : 1x16x8x16xf16 NHWC" in text             # intermediates in DDR
    assert "ddr %t1 : 1x16x8x16xf16 NHWC" in text
    # every layer moves every block in and out
    dmas = [line for line in text.splitlines() if ": dma %" in line and "kload" not in line]
    assert len(dmas) == 2 * len(CHAIN) * BLOCKS


def test_naive_matches_numpy_without_races(programs):
    graph, _, naive, _ = programs
    x = np.random.default_rng(3).uniform(-4, 4, SHAPE).astype(np.float16)
    result = simulate(naive, inputs={"x": x})
    assert not result.races, [d.message for d in result.races]
    out = result.outputs["y"]
    ref = run_graph(graph, {"x": x})[0]
    assert out.shape == ref.shape
    assert np.allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=1e-3)


def test_naive_is_slower_than_fused(programs):
    _, fused, naive, _ = programs
    f = simulate(fused, timing_only=True)
    n = simulate(naive, timing_only=True)
    assert not f.races and not n.races
    assert n.cycles > f.cycles > 0


def _drop_wait(line: str, barrier: str) -> str:
    return re.sub(r"waits\(([^)]*)\)", lambda m: "waits(" + ", ".join(
        w for w in m.group(1).split(", ") if w != barrier) + ")", line)


def _compile_unverified(text: str):
    module = parse_text(text, "<fusion-bench>")
    ctx = PassContext(load_arch(module.arch))
    steps = [p for p in PIPELINES["compile"] if p != "verify"]
    PassManager(parse_pipeline(",".join(steps))).run(module, ctx)
    return ctx.artifacts["program"]


def test_dropping_a_wait_is_a_race():
    """Dropping a wait of a DMA or of a kernel is a race the verifier and the simulator
    report: the
    first two waits of each kind (6 blocks of one row, so one kernel per block: data
    waits through DDR and both kinds of slot waits all occur).  (With two kernels
    per block, the second keeps the first one's waits, though the ACT queue's
    in-order starts imply them.)"""
    text = build_naive_program(CHAIN[:2], (1, 16, 6, 16), blocks=6)
    lines = text.splitlines()
    kinds: dict[tuple[str, str], int] = {}
    for n, line in enumerate(lines):
        match = re.search(r"^  (\S+): .*waits\(([^)]*)\)", line)
        if not match:
            continue
        for barrier in match.group(2).split(", "):
            kind = (match.group(1).rstrip("0123456789."), barrier.rstrip("0123456789."))
            kinds[kind] = kinds.get(kind, 0) + 1
            if kinds[kind] > 2:
                continue
            mutant = "\n".join(lines[:n] + [_drop_wait(line, barrier)] + lines[n + 1:]) + "\n"
            # The verifier rejects it; without the verifier, the simulator reports it.
            with pytest.raises(VpucError, match="race on "):
                fb.compile_text(mutant)
            assert simulate(_compile_unverified(mutant), timing_only=True).races, \
                (match.group(1), barrier)
    assert set(kinds) == {("load", "%stored"), ("load", "%done"), ("s", "%loaded"),
                          ("s", "%stored"), ("store", "%done")}, kinds


@pytest.mark.parametrize("variant", ["per_op_program", "naive_generated_program"])
def test_generated_per_op_variants_match_numpy_and_lose_to_fusion(programs, variant):
    """One generated kernel per op (intermediates in CMX, or per-layer through DDR): the
    bench's measure of what fusion alone saves; both must compute the graph."""
    graph, fused, _, _ = programs
    program, _, _ = getattr(fb, variant)(CHAIN, BLOCKS, SHAPE)
    x = np.random.default_rng(4).uniform(-4, 4, SHAPE).astype(np.float16)
    result = simulate(program, inputs={"x": x})
    assert not result.races, [d.message for d in result.races]
    ref = run_graph(graph, {"x": x})[0]
    assert np.array_equal(result.outputs["y"], ref)          # one op per kernel: no contraction
    assert simulate(program, timing_only=True).cycles > simulate(fused, timing_only=True).cycles
