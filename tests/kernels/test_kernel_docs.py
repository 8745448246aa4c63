"""docs/kernels.md stays true: every kernel is documented, the cycle table is measured."""

import re
from pathlib import Path

from kernel_costs import documented, table
from vpuc.kernel_library import library_names

DOC = (Path(__file__).resolve().parents[2] / "docs" / "kernels.md").read_text()


def test_every_kernel_is_in_the_contract_table():
    rows = re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", DOC, re.MULTILINE)
    documented_names = {name.strip("`") for row in rows for name in row.split(", ")}
    assert documented_names == set(library_names())


def test_the_cycle_table_is_measured():
    measured = table()
    assert documented(DOC) == measured, (
        "docs/kernels.md's cycle table is stale; replace it with the output of "
        "`python tests/kernels/kernel_costs.py`:\n" + measured)


def test_readme_and_ci_build_the_kernels_with_the_same_command():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    command = next(line for line in ci.splitlines() if "pytest" in line and "venv" in line)
    assert "vpuc kernels build && .venv/bin/python -m pytest" in command
    assert command in readme
