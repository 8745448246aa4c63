"""Outputs against numpy: every example, every DMA mode, every DPU op, an asm kernel."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from runtime_sim.inputs import compare, tolerances
from runtime_sim.memory import Memory
from runtime_sim.reference import Reference
from runtime_sim.simulator import simulate
from tests.sim.simlib import DATA, REPO, compile_vir

EXAMPLES = sorted(p.stem for p in (REPO / "examples").glob("*.vir"))


def check_against_reference(program, result, extra=None) -> None:
    expected = Reference(program, extra).run(result.inputs)
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
