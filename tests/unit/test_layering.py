"""Layering: ``runtime_sim/`` runs compiled programs and never imports the parser
(``vpuc.vir``), the passes (``vpuc.passes``) or the fusion pipeline (``vpuc.fusion``),
not even inside a function.  The walk reads every file's imports with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("vpuc.vir", "vpuc.passes", "vpuc.fusion")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, wherever it sits; ``from vpuc import vir``
    counts as ``vpuc.vir``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if forbidden(node.module):
                found.append((node.lineno, node.module))
            else:       # `from vpuc import fusion` imports vpuc.fusion
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def violations(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        out += [f"{path.relative_to(root.parent).as_posix()}:{line}: imports {module}"
                for line, module in imported_modules(tree) if forbidden(module)]
    return out


def test_runtime_sim_imports_no_parser_passes_or_fusion():
    assert violations(ROOT / "runtime_sim") == []


def test_the_walk_finds_every_spelling(tmp_path):
    """The check itself: top-level, function-local and ``from vpuc import x`` imports."""
    sim = tmp_path / "sim"
    sim.mkdir()
    (sim / "a.py").write_text("import vpuc.vir.parser\n")
    (sim / "b.py").write_text("def f():\n    from vpuc.passes.base import PassContext\n")
    (sim / "c.py").write_text("from vpuc import fusion\nfrom vpuc import ir\n")
    (sim / "d.py").write_text("import vpuc.virtual\nfrom vpuc.reference.graph import x\n")
    assert violations(sim) == ["sim/a.py:1: imports vpuc.vir.parser",
                               "sim/b.py:2: imports vpuc.passes.base",
                               "sim/c.py:1: imports vpuc.fusion"]


def test_html_report_reads_results_not_the_compiler():
    """``vpuc/report`` renders a report directory: no parser, passes or fusion either."""
    assert violations(ROOT / "vpuc" / "report") == []


# The compiler's side: the passes and the fusion pipeline never import the simulator,
# except the kernel generator's use of the SHAVE ISA model (it schedules with the
# cycle table and runs its candidate kernels in the interpreter).  Listed so that no
# new one creeps in; the list may only shrink.
COMPILER_KNOWN = {
    "vpuc/fusion/generator/run.py": {"runtime_sim.isa.interpreter", "runtime_sim.isa.invoke"},
    "vpuc/fusion/generator/profile.py": {"runtime_sim.isa.interpreter", "runtime_sim.isa.invoke",
                                         "runtime_sim.isa.pc_cycles"},
    "vpuc/fusion/generator/target_machine.py": {"runtime_sim.isa.cycles"},
}


def all_imports(root: Path) -> dict[str, set[str]]:
    """Every module each file under ``root`` imports (``from a import b`` as ``a`` and
    ``a.b``), by path relative to the repository."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        out[path.relative_to(ROOT).as_posix()] = names
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_compiler_never_imports_the_simulator():
    bad = [f"{path} imports {name}"
           for folder in ("vpuc/passes", "vpuc/fusion")
           for path, names in all_imports(ROOT / folder).items()
           for name in sorted(names)
           if _under(name, "runtime_sim") and name not in COMPILER_KNOWN.get(path, set())
           and not any(name.startswith(k + ".") for k in COMPILER_KNOWN.get(path, set()))]
    assert bad == []


def test_both_sides_import_the_cost_model_and_it_neither():
    """One cost model below both: the simulator and the passes/fusion import vpuc.cost,
    and vpuc.cost imports neither side."""
    sim = all_imports(ROOT / "runtime_sim")
    compiler = {**all_imports(ROOT / "vpuc" / "passes"), **all_imports(ROOT / "vpuc" / "fusion")}
    for side in (sim, compiler):
        assert any(_under(n, "vpuc.cost") for names in side.values() for n in names)
    assert any(_under(n, "vpuc.cost") for n in compiler["vpuc/passes/base.py"])
    cost = all_imports(ROOT / "vpuc" / "cost")
    assert [f"{p} imports {n}" for p, names in cost.items() for n in sorted(names)
            if _under(n, "runtime_sim") or any(_under(n, f) for f in FORBIDDEN)] == []
