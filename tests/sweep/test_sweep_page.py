"""What the sweep page of ``vpuc report`` says, checked against the result it reads (no
browser: tests/sweep/test_sweep_page_browser.py draws it): the Pareto front of cycles
against the spec's cost proxy per model, the parallel coordinates over every parameter
(a categorical one too), and the best point of each model.

The sweep has ties on purpose: ``format`` (fb or elf) changes the blob, not the program,
so pairs of points have the same cost and cycles."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.sweep.cluster import two_model_spec
from vpuc.report.sweep_page import pareto_figure, parallel_figure, render_sweep_page
from vpuc.sweep.engine import run_sweep
from vpuc.sweep.results import read_results, sweep_metadata
from vpuc.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ["tiles", "format", "ddr_bandwidth_mbps"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    spec = tmp_path_factory.mktemp("page") / "page.toml"
    spec.write_text(two_model_spec("""
tiles = [1, 2]
format = ["fb", "elf"]
ddr_bandwidth_mbps = [15600, 31200]
"""))
    out = spec.with_suffix(".parquet")
    stats = run_sweep(load_spec(spec), out, in_process=True, progress=None)
    assert stats.computed == 16 and stats.failed == 0
    return read_results(out)


@pytest.fixture(scope="module")
def rows(table) -> list[dict]:
    return table.to_pylist()


def _dominates(a: dict, b: dict) -> bool:
    return (a["cost"] <= b["cost"] and a["cycles"] <= b["cycles"]
            and (a["cost"], a["cycles"]) != (b["cost"], b["cycles"]))


def test_the_front_is_every_point_no_other_beats(rows):
    fig = pareto_figure(rows, PARAMS, "cmx_bytes * tiles")
    fronts = {t.name.split(":")[0]: list(zip(t.x, t.y)) for t in fig.data
              if t.name.endswith("Pareto front")}
    assert set(fronts) == {"graph_conv", "fused_chain"}
    for model, front in fronts.items():
        mine = [r for r in rows if r["model"] == model]
        assert front == sorted(front) and len(set(front)) == len(front)
        # on the front: no point of the model beats it; off it: one on it is as good
        for cost, cycles in front:
            assert not any(_dominates(r, {"cost": cost, "cycles": cycles}) for r in mine)
        for r in mine:
            assert any(c <= r["cost"] and y <= r["cycles"] for c, y in front)
        # more tiles cost more and run faster here: both settings are on the front
        assert len({c for c, _ in front}) == 2


def test_parallel_coordinates_cover_every_parameter(rows):
    fig = parallel_figure(rows, PARAMS)
    dims = {d.label: d for d in fig.data[0].dimensions}
    assert list(dims) == ["model", *PARAMS, "cost", "cycles"]
    for name in ("model", "format"):           # categorical: coded, labelled by ticks
        labels = list(dims[name].ticktext)
        assert labels == sorted({r[name] for r in rows})
        assert [labels[v] for v in dims[name].values] == [r[name] for r in rows]
    for name in ("tiles", "ddr_bandwidth_mbps", "cost", "cycles"):
        assert list(dims[name].values) == [r[name] for r in rows]


def test_best_point_per_model_is_the_fewest_cycles_then_the_least_cost(table, rows):
    page = render_sweep_page(rows, sweep_metadata(table), "sweep")
    best = page.split("<h2>Best point per model</h2>", 1)[1].split("</table>", 1)[0]
    cells = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", tr)]
             for tr in re.findall(r"<tr>(.*?)</tr>", best) if "<td>" in tr]
    assert {c[0] for c in cells} == {"graph_conv", "fused_chain"}
    for model, cycles, time_us, cost, *values in cells:
        mine = [r for r in rows if r["model"] == model]
        fewest = min(r["cycles"] for r in mine)
        least = min(r["cost"] for r in mine if r["cycles"] == fewest)
        assert cycles == f"{fewest:,.0f}" and cost == f"{least:.4g}"
        shown = [r for r in mine if r["cycles"] == fewest and r["cost"] == least
                 and [str(r[p]) for p in PARAMS] == values]
        assert shown and time_us == f"{shown[0]['time_us']:,.2f}"
