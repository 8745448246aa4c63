"""docs/architecture.md is the true map: every module is named in it, and each package
has one row (issue 10 §9)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = (ROOT / "docs" / "architecture.md").read_text()
PACKAGES = ("vpuc", "runtime_sim", "bench")


def _modules():
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                yield path.relative_to(ROOT)


def test_every_module_is_on_the_map():
    missing = [str(p) for p in _modules() if p.name not in MAP]
    assert not missing, "modules missing from docs/architecture.md: " + ", ".join(missing)


def test_each_package_has_one_row():
    rows = re.findall(r"^\| `([^`]+)`", MAP, re.MULTILINE)
    repeated = sorted({r for r in rows if rows.count(r) > 1})
    assert not repeated, f"packages with more than one row: {repeated}"
