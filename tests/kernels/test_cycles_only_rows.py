"""Timing-only runs of the library's per-row kernels (softmax, layer norm): the
cycles-only run counts the rows along the path batch's proven path
(``runtime_sim.isa.cycles_only_path``) and gives the full run's cycles and status
(``kernel_harness.run`` compares them)."""

import numpy as np
import pytest

import runtime_sim.isa.cycles_only_loops as cycles_only_loops
from kernel_harness import Tensor, run
from kernel_reference import check_softmax
from test_kernels_norm import mvn_scalars

RNG = np.random.default_rng(11)


@pytest.fixture
def batched_rows(monkeypatch):
    """The rows each cycles-only path batch counted, in order."""
    counted: list[int] = []
    inner = cycles_only_loops.run_path_cycles

    def counting(loops, *args, **kwargs):
        found = inner(loops, *args, **kwargs)
        if found is not None:
            counted.append(found[2])
        return found
    monkeypatch.setattr(cycles_only_loops, "run_path_cycles", counting)
    return counted


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_softmax_rows_are_counted_without_being_run(dtype, batched_rows):
    x = (RNG.standard_normal((1, 3, 24, 40)) * 3).astype(dtype)     # rows along W
    result = run("softmax", [Tensor(x)], Tensor(np.zeros(x.shape, dtype)), rng=RNG)
    check_softmax(x, result.output)
    assert batched_rows, "no row loop of softmax was counted as a path batch"
    assert sum(batched_rows) < result.instructions


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_layer_norm_rows_are_counted_without_being_run(dtype, batched_rows):
    x = (RNG.standard_normal((1, 50, 192)) + 5).astype(dtype)
    run("mvn", [Tensor(x)], Tensor(np.zeros(x.shape, dtype)), mvn_scalars(1e-5, False),
        rng=RNG)
    assert batched_rows, "no row loop of mvn was counted as a path batch"
