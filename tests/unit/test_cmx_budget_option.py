"""The lowering's CMX budget as a compile option (``cmx_budget``): the default is today's
1 MiB on NPU37XX (half a tile's CMX), the API and the CLI take it, and a value outside
1 .. the tile's CMX is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

import vpuc
from vpuc.arch import default_cmx_budget, load_arch
from vpuc.cli import main
from vpuc.diagnostics import UsageError
from vpuc.ir.tasks import DpuTask
from vpuc.passes.base import PassContext

GRAPH_CONV = Path(__file__).resolve().parents[2] / "examples" / "graph_conv.vir"


def dpu_tasks(program) -> int:
    return sum(isinstance(t, DpuTask) for tl in program.module.task_lists for t in tl.tasks)


def test_the_default_is_half_the_tiles_cmx():
    arch = load_arch("NPU37XX")
    assert default_cmx_budget(arch) == 1 << 20 == arch.cmx_bytes // 2
    assert PassContext(arch).cmx_budget == 1 << 20
    assert PassContext(arch, cmx_budget=4096).cmx_budget == 4096


def test_the_default_budget_compiles_the_same_blob():
    assert vpuc.write_blob(vpuc.compile(GRAPH_CONV)) == \
        vpuc.write_blob(vpuc.compile(GRAPH_CONV, cmx_budget=1 << 20))


# graph_conv's default blocks (epilogue-aware: 8 of 4 rows) already fit 16 KB; 8 KB does not.
SMALL_BUDGET = 8192


def test_a_smaller_budget_cuts_more_blocks():
    assert dpu_tasks(vpuc.compile(GRAPH_CONV, cmx_budget=SMALL_BUDGET)) > \
        dpu_tasks(vpuc.compile(GRAPH_CONV))


@pytest.mark.parametrize("budget", [0, -1, (2 << 20) + 1, True, 4096.0, "4096"])
def test_a_budget_outside_the_tiles_cmx_is_a_usage_error(budget):
    with pytest.raises(UsageError, match="the CMX budget must be a whole number of bytes"):
        vpuc.compile(GRAPH_CONV, cmx_budget=budget)


def test_the_cli_takes_the_budget(tmp_path):
    small, default = tmp_path / "small.blob", tmp_path / "default.blob"
    assert main(["compile", str(GRAPH_CONV), "--cmx-budget", str(SMALL_BUDGET), "-o", str(small)]) == 0
    assert main(["compile", str(GRAPH_CONV), "-o", str(default)]) == 0
    assert dpu_tasks(vpuc.read_blob(small)) > dpu_tasks(vpuc.read_blob(default))
