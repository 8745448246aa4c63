"""A layer split over output channels (``lower_dpu_nn.emit_jobs`` with several jobs) and
a MatMul (``lower_dpu_matmul``) ask the cost model for their split: the channel-chunk
count and the row blocks per chunk are the cheapest flow-shop estimate among the
candidates that fit CMX (``vpuc/fusion/lower_dpu_split.py``), equal to a brute-force
minimum over every candidate, and a timing change changes the choice."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import vpuc.fusion.lower_dpu_matmul as lower_dpu_matmul
import vpuc.fusion.lower_dpu_nn_sizing as lower_dpu_nn_sizing
from vpuc import api
from vpuc.cost import load_timing
from vpuc.fusion import lower_dpu_split
from vpuc.ir.tasks import DpuTask
from vpuc.onnx_import.zoo import ModelBuilder


def _x(m, shape):
    return m.input("x", list(shape))


def _conv(m):
    """The convolution of test_cmx_splits: 64 -> 96 channels, 3x3, 12x12 (96 KiB budget)."""
    return m.node("Conv", [_x(m, (1, 64, 12, 12)), m.weight((96, 64, 3, 3)), m.weight((96,), 0.1)],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def _matmul(m):
    """M = 512 rows of K = 64 by weights [64, 64]: the weights stay in each tile's CMX,
    the rows are cut into blocks (one chunking, several block counts)."""
    return m.node("MatMul", [_x(m, (512, 64)), m.weight((64, 64))])


def _matmul_split(m):
    """K = 64, N = 96, M = 48 under 12000 bytes: the whole weights (12288 bytes) do not
    fit; chunks of 32 columns do with up to 9 rows (2 * (4096 + 9 * 192) = 11648), chunks
    of 16 with up to 24."""
    return m.node("MatMul", [_x(m, (48, 64)), m.weight((64, 96))])


CASES = {"conv": (_conv, 96 * 1024, lower_dpu_nn_sizing),
         "matmul": (_matmul, None, lower_dpu_matmul),        # the default budget
         "matmul_split": (_matmul_split, 12000, lower_dpu_matmul)}


def _compile_recording(case, tmp_path, monkeypatch, timing=None):
    """Compile the case's one-layer model; the arguments and answer of every
    ``cheapest_split`` call, and the DPU tasks."""
    build, budget, module = CASES[case]
    calls = []

    def spy(*args):
        answer = lower_dpu_split.cheapest_split(*args)
        calls.append((args, answer))
        return answer

    monkeypatch.setattr(module, "cheapest_split", spy)
    m = ModelBuilder(seed=0, opset=17)
    m.output(build(m))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"), timing=timing, cmx_budget=budget)
    tasks = [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DpuTask)]
    return calls, tasks


def _brute_force(args):
    """Every (chunking, count) that fits, by its estimate; the first cheapest."""
    chunkings, extent, first, tiles, fits, stages, channels, *resident = args
    best, best_cycles = None, math.inf
    for jobs in chunkings:
        for count in range(first, extent + 1):
            rows = math.ceil(extent / count)
            if all(fits(job, rows, count * len(jobs)) for job in jobs):
                cycles = lower_dpu_split.split_cycles(jobs, extent, count, tiles, stages,
                                                      channels, *resident)
                if cycles < best_cycles - 1e-9:
                    best, best_cycles = (jobs, count), cycles
    return best, best_cycles


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_split_is_the_brute_force_minimum_of_the_estimate(case, tmp_path, monkeypatch):
    calls, tasks = _compile_recording(case, tmp_path, monkeypatch)
    (args, (jobs, count)), = calls
    (want_jobs, want_count), _ = _brute_force(args)
    assert (list(jobs), count) == (list(want_jobs), want_count)
    if case != "matmul":          # more than the fewest chunks were weighed
        assert len(args[0]) > 1
    assert len(tasks) == len(jobs) * count        # and the lowering emits that choice


@pytest.mark.parametrize("case", ["conv", "matmul"])
def test_a_timing_change_changes_the_split(case, tmp_path, monkeypatch):
    """Free transfers (no DMA or DPU dispatch, no latency) leave only the DPU and the
    bytes: more blocks overlap better; transfers of eight times the DDR read latency make
    every extra block dear: fewer blocks.  The choices are not all the default's (the conv,
    whose chunks share their input on a tile, already takes the most blocks that pay by
    default); each is the brute-force minimum under its own timing."""
    timing = load_timing("NPU37XX")
    free_dma = replace(timing, dispatch={**timing.dispatch, "DMA": 0.0, "DPU": 0.0},
                       dma=replace(timing.dma, ddr_read_latency=0.0, ddr_write_latency=0.0,
                                   cmx_latency=0.0))
    slow_dma = replace(timing, dma=replace(timing.dma,
                                           ddr_read_latency=8 * timing.dma.ddr_read_latency))
    choices = []
    for variant in (timing, free_dma, slow_dma):
        calls, _ = _compile_recording(case, tmp_path, monkeypatch, variant)
        (args, (jobs, count)), = calls
        (want_jobs, want_count), _ = _brute_force(args)
        assert (list(jobs), count) == (list(want_jobs), want_count)
        choices.append((len(jobs), count))
    assert any(choice != choices[0] for choice in choices[1:])
