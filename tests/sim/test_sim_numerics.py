"""Outputs against numpy: every example, every DMA mode, every DPU op, an asm kernel."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from runtime_sim.inputs import compare, tolerances
from runtime_sim.memory import Memory
from runtime_sim.reference import Reference
from runtime_sim.simulator import simulate
from vpuc.fusion.generator.kernel_graph import load_graphs
from tests.sim.simlib import DATA, REPO, compile_vir

EXAMPLES = sorted(p.stem for p in (REPO / "examples").glob("*.vir"))


def check_against_reference(program, result, extra=None) -> None:
    expected = Reference(program, extra, graphs=load_graphs(program, "<program>")).run(result.inputs)
    buffers = {b.name: b for b in program.module.buffers}
    assert set(expected) == set(result.outputs)
    for name, value in expected.items():
        rtol, atol = tolerances(buffers[name], None, None)
        ok, line = compare(name, result.outputs[name], value, rtol, atol, "the numpy reference")
        assert ok, line


def example_path(name: str, tmp_path):
    """The example, with any missing .npy constants generated beside a copy of it."""
    source = REPO / "examples" / f"{name}.vir"
    text = source.read_text()
    if 'file "' not in text:
        return source
    program_dir = tmp_path / "example"
    shutil.copytree(REPO / "examples", program_dir)
    rng = np.random.default_rng(0)
    module_text = (program_dir / f"{name}.vir").read_text()
    for line in module_text.splitlines():
        if line.startswith("const") and 'file "' in line:
            rel = line.split('file "')[1].split('"')[0]
            path = program_dir / rel
            if not path.exists():
                dims, elem = line.split(":")[1].split()[0].rsplit("x", 1)
                shape = tuple(int(d) for d in dims.split("x"))
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, (rng.standard_normal(shape) * 0.2).astype(
                    {"f16": np.float16, "f32": np.float32}[elem]))
    return program_dir / f"{name}.vir"


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_matches_its_numpy_reference(name, tmp_path):
    program = compile_vir(example_path(name, tmp_path))
    result = simulate(program, seed=1)
    assert not result.races
    check_against_reference(program, result)


@pytest.mark.parametrize("name", ["dma_modes", "dpu_ops"])
def test_dma_modes_and_dpu_ops_match_numpy(name):
    program = compile_vir(DATA / f"{name}.vir")
    result = simulate(program, seed=2)
    assert not result.races
    check_against_reference(program, result)


def test_dma_modes_values_by_hand():
    program = compile_vir(DATA / "dma_modes.vir")
    x = np.arange(16 * 8 * 8, dtype=np.float32).reshape(1, 16, 8, 8) / 64
    out = simulate(program, inputs={"in": x}).outputs
    as_f16 = x.astype(np.float16)
    assert np.array_equal(out["nhwc"], as_f16)            # logical values, whatever the order
    assert np.array_equal(out["rows"], as_f16[:, :, ::2, :])
    assert np.array_equal(out["flat"], as_f16.transpose(0, 2, 3, 1).reshape(-1))  # NHWC bytes
    assert np.array_equal(out["again"], as_f16)


def test_an_asm_kernel_runs_on_its_tile_cmx():
    program = compile_vir(DATA / "relu_pipeline.vir")
    result = simulate(program, seed=5)
    assert np.array_equal(result.outputs["out"], np.maximum(result.inputs["in"], 0))
    check_against_reference(program, result, {"relu": lambda x, axis: np.maximum(x, 0)})


def test_dynamic_inputs_run_at_their_actual_dims():
    program = compile_vir(REPO / "examples" / "dynamic_shapes.vir")
    tokens = np.random.default_rng(0).uniform(-2, 2, (1, 100, 256)).astype(np.float16)
    result = simulate(program, inputs={"tokens": tokens})
    assert result.outputs["pooled"].shape == (1, 100, 1)
    check_against_reference(program, result)


def test_memory_is_allocated_for_what_the_program_declares():
    program = compile_vir(DATA / "one_dma.vir")
    memory = Memory(program.module, program.arch.tiles)
    sizes = {key: array.nbytes for key, array in memory.arrays.items()}
    assert sizes[("ddr", "in")] == 8192 and sizes[("cmx", 0)] == 8192
    assert memory.total_bytes < 20000          # not 2 x 2 MiB of CMX


@pytest.mark.parametrize("path", [DATA / "relu_pipeline.vir",
                                  REPO / "examples" / "dynamic_shapes.vir"])
def test_timing_only_skips_numerics_but_keeps_the_cycles(path):
    # Dynamic tensors too: their DMAs still pass the actual dims on to the kernels.
    program = compile_vir(path)
    full = simulate(program)
    timing = simulate(program, timing_only=True)
    assert timing.outputs == {}
    assert timing.timeline.end == full.timeline.end


def test_nhwc_softmax_and_reductions_work_over_the_last_logical_dim():
    # For NHWC the last logical dim (W) is not the innermost in memory (C): the kernels
    # reduce over W (docs/kernels.md), and so must the reference.
    program = compile_vir(DATA / "nhwc_reductions.vir")
    x = np.random.default_rng(7).uniform(-4, 4, (1, 16, 4, 24)).astype(np.float16)
    result = simulate(program, inputs={"x": x})
    check_against_reference(program, result)
    wide = x.astype(np.float32)
    shifted = np.exp(wide - wide.max(axis=3, keepdims=True))
    by_w = {"soft": shifted / shifted.sum(axis=3, keepdims=True),
            "sum": wide.sum(axis=3, keepdims=True), "mean": wide.mean(axis=3, keepdims=True)}
    for name, expected in by_w.items():
        got = result.outputs[name].astype(np.float32)
        assert np.allclose(got, expected.astype(np.float16), rtol=4e-3, atol=1e-4), name
    over_c = np.exp(wide - wide.max(axis=1, keepdims=True))
    assert not np.allclose(result.outputs["soft"], over_c / over_c.sum(axis=1, keepdims=True),
                           rtol=0.1, atol=0.01)


def test_gelu_is_the_tanh_approximation_within_one_ulp():
    program = compile_vir(DATA / "nhwc_reductions.vir")
    x = np.linspace(-6, 6, 1536, dtype=np.float32).reshape(1, 16, 4, 24).astype(np.float16)
    result = simulate(program, inputs={"x": x})
    check_against_reference(program, result)
    w = x.astype(np.float64)
    tanh_form = (0.5 * w * (1 + np.tanh(np.sqrt(2 / np.pi) * (w + 0.044715 * w ** 3))))
    got = result.outputs["gel"]
    ulps = np.abs(got.view(np.int16).astype(np.int32) - tanh_form.astype(np.float16).view(
        np.int16).astype(np.int32))
    assert ulps[np.abs(w) <= 4].max() <= 1        # where 1 + tanh(u) does not cancel in f64
    # The exact-erf gelu is a different function: the default f16 tolerance tells them apart.
    erf = np.vectorize(math.erf)
    exact = (0.5 * w * (1 + erf(w / np.sqrt(2)))).astype(np.float16)
    gel = next(b for b in program.module.buffers if b.name == "gel")
    ok, _ = compare("gel", got, exact, *tolerances(gel, None, None), "the exact gelu")
    assert not ok
