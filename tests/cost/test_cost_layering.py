"""One cost model, below both users: the simulator and the compiler import vpuc.cost,
vpuc.cost imports neither, and the simulator never imports the compiler's passes."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imports_under(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(REPO)): imported_modules(p) for p in (REPO / folder).rglob("*.py")}


def test_the_cost_model_imports_neither_the_simulator_nor_the_compiler():
    bad = [f"{path} imports {name}" for path, names in imports_under("vpuc/cost").items()
           for name in names
           if name.split(".")[0] == "runtime_sim"
           or any(name == p or name.startswith(p + ".")
                  for p in ("vpuc.vir", "vpuc.passes", "vpuc.fusion", "vpuc.blob"))]
    assert bad == []


# Older breaches of the rule, outside the timing path (the CLI compiles .vir itself;
# the reference and kernel checks reuse the fusion oracle and the argument packer).
# They are listed so that no new one creeps in; the list may only shrink.
KNOWN = {
    "runtime_sim/cli_run.py": {"vpuc.passes.base", "vpuc.passes.registry", "vpuc.passes.manager",
                               "vpuc.vir.parser"},
    "runtime_sim/reference.py": {"vpuc.fusion.reference"},
    "runtime_sim/kernel_check.py": {"vpuc.fusion.generator.kernel_graph",
                                    "vpuc.passes.pack_kernel_args", "vpuc.fusion.reference"},
    "runtime_sim/kernel_profile.py": {"vpuc.passes.pack_kernel_args"},
}


def test_the_simulator_never_imports_the_compilers_passes():
    bad = [f"{path} imports {name}" for path, names in imports_under("runtime_sim").items()
           for name in names
           if any(name == p or name.startswith(p + ".")
                  for p in ("vpuc.vir", "vpuc.passes", "vpuc.fusion"))
           and name not in KNOWN.get(path, ())]
    assert bad == []
    timing_path = ("runtime_sim/simarch.py", "runtime_sim/engines/dpu.py",
                   "runtime_sim/engines/dma.py", "runtime_sim/plan.py",
                   "runtime_sim/plan_build.py", "runtime_sim/plan_shapes.py",
                   "runtime_sim/runtime.py")
    assert not any(path in KNOWN for path in timing_path)


def test_the_simulator_and_the_compiler_both_call_the_cost_model():
    sim = imports_under("runtime_sim")
    assert "vpuc.cost.dpu" in sim["runtime_sim/engines/dpu.py"]
    assert "vpuc.cost.dma" in sim["runtime_sim/engines/dma.py"]
    # The runtime's charges: a DMA's data start, an ACT task's end and its cycle budget.
    assert {"vpuc.cost.dma", "vpuc.cost.shave"} <= sim["runtime_sim/runtime.py"]
    assert "vpuc.cost.shave" in sim["runtime_sim/simulator.py"]
    compiler = imports_under("vpuc/fusion")
    users = [path for path, names in compiler.items()
             if any(n == "vpuc.cost" or n.startswith("vpuc.cost.") for n in names)]
    assert "vpuc/fusion/lower_dpu.py" in users
