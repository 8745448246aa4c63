"""The sweep page of ``vpuc report`` in a real browser (Debian's chromium, headless, via
playwright, like tests/report/): offline, no console error, every trace drawn, the best
point of each model and the failed points listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sweep.cluster import two_model_spec
from tests.report.test_html_browser import chromium, colours
from vpuc.cli import main
from vpuc.report.sweep_page import pareto_front
from vpuc.sweep.engine import run_sweep
from vpuc.sweep.results import read_results
from vpuc.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    spec = tmp_path_factory.mktemp("page") / "page.toml"
    spec.write_text(two_model_spec("""
tiles = [1, 2]
cmx_bytes = [16384, 2097152]
"""))
    out = spec.with_suffix(".parquet")
    stats = run_sweep(load_spec(spec), out, in_process=True, progress=None)
    assert stats.computed == 8 and 0 < stats.failed < 8
    return out


def test_sweep_page_renders_in_chromium(result, tmp_path, capsys):
    html = tmp_path / "sweep.html"
    assert main(["report", str(result), "-o", str(html)]) == 0
    assert "HTML page of the sweep" in capsys.readouterr().out
    rows = read_results(result).to_pylist()
    ran = [r for r in rows if r["error"] is None]
    failed = len(rows) - len(ran)
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        errors, remote = [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://")
                   else (remote.append(r.request.url), r.abort()))
        page.goto(html.as_uri())
        page.wait_for_function("document.querySelectorAll('#plot-parallel .parcoords').length"
                               " >= 1 && document.querySelectorAll('#plot-pareto g.trace')"
                               ".length >= 4")
        pareto_traces = page.locator("#plot-pareto g.trace.scatter").count()
        markers = page.locator("#plot-pareto path.point").count()
        axes = page.locator("#plot-parallel text.axis-title").count()
        best = page.locator("h2:has-text('Best point per model') + table tr").count()
        failed_rows = page.locator("h2:has-text('failed') + table tr").count()
        shot = page.screenshot(full_page=True)
    assert errors == [] and remote == []
    assert pareto_traces == 4                       # points and front, for each model
    fronts = sum(len(pareto_front([(r["cost"], r["cycles"]) for r in ran if r["model"] == m]))
                 for m in ("graph_conv", "fused_chain"))
    assert markers == len(ran) + fronts
    assert axes == 1 + 2 + 2                        # model, the parameters, cost, cycles
    assert best == 1 + 2 and failed_rows == 1 + failed
    assert colours(shot) > 20
    (tmp_path / "sweep.png").write_bytes(shot)


def test_pareto_front_is_what_no_other_point_beats():
    points = [(1, 50), (2, 40), (2, 45), (3, 40), (4, 10), (5, 10), (0.5, 100)]
    front = pareto_front(points)
    assert [points[i] for i in front] == [(0.5, 100), (1, 50), (2, 40), (4, 10)]
    for i, (c, y) in enumerate(points):
        beaten = any(c2 <= c and y2 <= y and (c2, y2) != (c, y) for c2, y2 in points)
        assert (i in front) == (not beaten)


def test_report_of_a_sweep_defaults_beside_the_result(result, capsys):
    assert main(["report", str(result)]) == 0
    page = result.with_suffix(".html")
    assert page.is_file() and 'id="plot-pareto"' in page.read_text()
    assert "<script src=" not in page.read_text()
