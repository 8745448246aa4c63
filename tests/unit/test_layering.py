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
