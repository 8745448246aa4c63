"""Helpers shared by the simulator tests: compile fixtures, run the CLI, round numbers."""

from __future__ import annotations

from pathlib import Path

from runtime_sim.simarch import load_sim_arch
from runtime_sim.simulator import simulate
from vpuc.arch import load_arch
from vpuc.cli import main
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import compile_pipeline, parse_pipeline
from vpuc.vir.parser import parse_file

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
ROUND = DATA / "round.toml"            # every clock 1000 MHz, DDR 16 B/cycle, ...
NO_VERIFY = "assign-windows,pack-kernel-args"


def compile_vir(path, pipeline: str = "compile"):
    """The program ``pipeline`` builds from PATH; "compile" is what ``vpuc compile`` runs
    (lower-graph first for a module with graph blocks)."""
    module = parse_file(str(path))
    ctx = PassContext(load_arch(module.arch))
    names = ",".join(compile_pipeline(module)) if pipeline == "compile" else pipeline
    PassManager(parse_pipeline(names)).run(module, ctx)
    return ctx.artifacts["program"]


def run_round(name: str, pipeline: str = "compile", **kwargs):
    """Simulate tests/sim/data/NAME.vir on the round-number timing model."""
    return simulate(compile_vir(DATA / f"{name}.vir", pipeline), load_sim_arch(str(ROUND)), **kwargs)


def times(result) -> dict[str, tuple[float, float]]:
    plan, timeline = result.plan, result.timeline
    return {plan.names[u]: (timeline.start[u], timeline.end[u]) for u in range(plan.size)}


def run_cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.chdir(REPO)
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
