"""The compiler's tiling asks the cost model: the block count of a DPU layer is the
fastest the flow-shop estimate (``vpuc/cost/blocks.py``) finds among those that fit
CMX, so changing a timing parameter changes the blocks; the timing comes from the
pass context (``timing=``, ``vpuc run --arch FILE``), and a missing one is located."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

import vpuc
from vpuc.cli import main
from vpuc.cost import load_timing
from vpuc.cost.blocks import BlockStages, pipeline_cycles
from vpuc.cost.timing import timing_path
from vpuc.diagnostics import VpucError
from vpuc.fusion.lower_dpu import choose_blocks
from vpuc.ir.tasks import DpuOp, DpuTask

REPO = Path(__file__).resolve().parents[2]
GRAPH_CONV = REPO / "examples" / "graph_conv.vir"


def conv_blocks(program) -> int:
    """The layer's blocks: its conv tasks (each block of the NCHW input also has a permute)."""
    return sum(isinstance(t, DpuTask) and t.op is DpuOp.CONV
               for tl in program.module.task_lists for t in tl.tasks)


def test_pipeline_cycles_follow_the_flow_shop_by_hand():
    """One tile, two slots: block 2 reuses block 0's slot, so its load waits for block
    0's compute (5) and its compute for block 1's (8)."""
    stage = BlockStages(load=2, compute=3, store=1, ddr=0)
    assert pipeline_cycles([stage] * 3, tiles=1) == 12
    # resident loads go before each tile's first block; the DDR floor can dominate
    assert pipeline_cycles([stage] * 3, tiles=1, resident_cycles=10) == 22
    assert pipeline_cycles([replace(stage, ddr=20)] * 3, tiles=1) == 60
    # two tiles: block 1 computes beside block 0
    assert pipeline_cycles([stage] * 2, tiles=2) == 2 + 2 + 3 + 1
    # one DMA channel: load, store, load, store ... in one FIFO (load 1 waits for store 0)
    assert pipeline_cycles([stage] * 3, tiles=1, channels=1) == 18
    # the store channel busy for 20 first: store 0 ends at 21, and block 2, reusing block
    # 0's slot, computes 21-24 and stores 24-25
    assert pipeline_cycles([stage] * 3, tiles=1, store_busy=20) == 25


def test_prefetched_weights_move_from_the_loads_to_the_store_channel():
    """Under --schedule default a layer's constant weights load during the previous
    segment, as far as the prefetch room goes: only the rest count as loads, and the
    store channel starts busy (the next layer's prefetch); else they are loads."""
    from vpuc.cost.blocks import Move, loads_cycles
    from vpuc.fusion.blocked_program import ProgramText
    from vpuc.fusion.lower_dpu import resident_cycles
    timing = load_timing(timing_path("NPU37XX"))
    weights, bias = Move(4096, 2), Move(256, 4)
    whole = loads_cycles([weights, bias], timing)
    prefetching = ProgramText(timing=timing, prefetch_bytes=4096)
    assert resident_cycles(prefetching, [weights, bias], ("g",)) == \
        (loads_cycles([bias], timing), whole)
    assert resident_cycles(replace(prefetching, prefetch_bytes=8192), [weights, bias],
                           ("g",)) == (0.0, whole)
    naive = ProgramText(timing=timing)
    assert resident_cycles(naive, [weights, bias], ("g",)) == (whole, 0.0)
    assert resident_cycles(prefetching, [weights, bias], ()) == (whole, 0.0)   # first segment
    assert resident_cycles(prefetching, [weights, bias], ("g",), constant=False) == (whole, 0.0)
    assert resident_cycles(replace(prefetching, dma_channels=1), [weights, bias], ("g",)) \
        == (whole, 0.0)


def test_choose_blocks_takes_the_cheapest_count_that_fits():
    """A per-block fixed cost against overlap: neither the fewest blocks nor the most."""
    extent, tiles = 40, 2

    def cost(rows: int) -> BlockStages:
        return BlockStages(load=300 + 40 * rows, compute=200 + 90 * rows, store=300 + 30 * rows,
                           ddr=0)

    def footprint(rows: int) -> int:
        return rows * 50_000

    budget = 1 << 20
    blocks = choose_blocks(extent, tiles, 0, footprint, "row", None, budget, cost=cost)
    fits = [c for c in range(tiles, extent + 1)
            if (1 if c <= tiles else 2) * footprint(math.ceil(extent / c)) <= budget]
    edges = lambda c: [extent * i // c for i in range(c + 1)]
    cycles = {c: pipeline_cycles([cost(b - a) for a, b in zip(edges(c), edges(c)[1:])], tiles)
              for c in fits}
    best = min(cycles.values())
    assert len(blocks) == min(c for c in fits if cycles[c] <= best + 1e-9)
    assert min(fits) < len(blocks) < max(fits)
    assert [b - a for a, b in blocks] == [b - a for a, b in zip(edges(len(blocks)),
                                                               edges(len(blocks))[1:])]
    # without the cost model: the fewest blocks that fit, as before
    assert len(choose_blocks(extent, tiles, 0, footprint, "row", None, budget)) == min(fits)


def test_changing_a_timing_parameter_changes_the_chosen_blocks():
    timing = load_timing("NPU37XX")
    default = conv_blocks(vpuc.compile(GRAPH_CONV))
    # a DMA that costs a lot to start: every extra block pays it twice, so fewer blocks
    slow_start = replace(timing, dispatch={**timing.dispatch, "DMA": 1e6})
    fewer = conv_blocks(vpuc.compile(GRAPH_CONV, timing=slow_start))
    # free transfers and a DPU that dominates: blocks only add overlap, so more of them
    free_dma = replace(timing, dispatch={**timing.dispatch, "DMA": 0.0, "DPU": 0.0},
                       dma=replace(timing.dma, ddr_read_latency=0.0, ddr_write_latency=0.0,
                                   cmx_latency=0.0))
    more = conv_blocks(vpuc.compile(GRAPH_CONV, timing=free_dma))
    # two tiles: never fewer than two blocks; the default is two since the NCHW input's
    # blocks come in at the DMA engine's rate (an NCE permute lays them out, not the DMA)
    assert fewer == 2 <= default < more


def test_vpuc_run_arch_file_compiles_with_that_files_timing(tmp_path, capsys, monkeypatch):
    text = timing_path("NPU37XX").read_text(encoding="utf-8")
    for line in ("dispatch_dma_cycles = 16 ", "dispatch_dpu_cycles = 16 ",
                 "ddr_read_latency_cycles = ", "ddr_write_latency_cycles = "):
        assert line in text
    # free transfers: blocks only add overlap, so the file's timing picks more of them
    free = re.sub(r"(ddr_(read|write)_latency_cycles = )\d+", r"\g<1>0", text)
    free = free.replace("dispatch_dma_cycles = 16 ", "dispatch_dma_cycles = 0 ")
    free = free.replace("dispatch_dpu_cycles = 16 ", "dispatch_dpu_cycles = 0 ")
    fast = tmp_path / "free_dma.toml"
    fast.write_text(free)
    monkeypatch.chdir(REPO)
    units = {}
    for name, extra in (("default", []), ("fast", ["--arch", str(fast)])):
        capsys.readouterr()
        assert main(["run", str(GRAPH_CONV), "--timing-only", "--json"] + extra) == 0
        units[name] = json.loads(capsys.readouterr().out)["units"]
    assert units["fast"] > units["default"]       # more blocks: more DMA and DPU units


def test_a_missing_timing_file_is_located_at_the_module(tmp_path):
    with pytest.raises(VpucError) as caught:
        vpuc.compile(GRAPH_CONV, timing=tmp_path / "nowhere.toml")
    diag = caught.value.diagnostics[0]
    assert "nowhere.toml" in diag.message and diag.loc is not None
    assert diag.loc.file.endswith("graph_conv.vir") and diag.loc.line > 1


def test_a_target_without_a_timing_model_is_an_error_at_the_layer(tmp_path):
    arch = (REPO / "vpuc" / "archs" / "npu37xx.toml").read_text(encoding="utf-8")
    other = tmp_path / "untimed.toml"
    other.write_text(arch.replace('name = "NPU37XX"', 'name = "UNTIMED"'))
    text = GRAPH_CONV.read_text(encoding="utf-8").replace("arch NPU37XX", "arch UNTIMED")
    with pytest.raises(VpucError) as caught:
        vpuc.compile(text, arch=str(other))
    diag = caught.value.diagnostics[0]
    assert "no timing model" in diag.message and "Convolution" in diag.message
    assert diag.loc is not None and "%conv" in text.splitlines()[diag.loc.line - 1]


def test_a_timing_model_of_another_structure_is_refused():
    structure = REPO / "tests" / "unit" / "data" / "two_barriers.toml"
    other = replace(load_timing("NPU37XX"), structure=str(structure))
    with pytest.raises(VpucError) as caught:
        vpuc.compile(GRAPH_CONV, timing=other)
    assert "extends TWO_BARRIERS, but the program is compiled for NPU37XX" in str(caught.value)
