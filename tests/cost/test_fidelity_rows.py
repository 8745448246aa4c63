"""The fidelity bench's real path (compile + simulate one row) charges exactly what
the cost model predicts for the row, for a row of every family."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from fidelity_bench import simulated_cycles, stats  # noqa: E402
from fidelity_rows import BUNDLED_CSV, read_rows  # noqa: E402
from fit_cost_model import predict  # noqa: E402

from vpuc.cost import load_timing  # noqa: E402

ROWS = read_rows(BUNDLED_CSV)
FIRST_OF_FAMILY = list({row.family: row for row in reversed(ROWS)}.values())


def test_the_bundled_csv_has_every_family():
    assert len(ROWS) == 222 and len(FIRST_OF_FAMILY) == 12


@pytest.mark.parametrize("row", FIRST_OF_FAMILY, ids=lambda r: r.family)
def test_simulated_cycles_are_the_cost_models(row):
    assert simulated_cycles(row) == pytest.approx(predict(row, load_timing("NPU37XX")),
                                                  rel=1e-12)


def test_statistics():
    s = stats([1.0, 1.2, 0.5, 2.0])
    assert s["n"] == 4 and s["median"] == pytest.approx(35.0)
    assert s["gmean"] == pytest.approx((1.2 * 0.5 * 2.0) ** 0.25)
    assert s["w10"] == 25 and s["w25"] == 50 and (s["min"], s["max"]) == (0.5, 2.0)
