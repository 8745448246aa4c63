"""The Chrome trace (schema, one track per engine, no overlap, flows, DDR counter),
the task CSV and the summary table."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict

import pytest

from runtime_sim.report import critical_path, summary, tasks_csv
from runtime_sim.trace import trace_json
from tests.sim.simlib import run_cli, run_round

REQUIRED = {"X": {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"},
            "M": {"name", "ph", "pid", "tid", "args"},
            "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
            "f": {"name", "cat", "ph", "id", "ts", "pid", "tid", "bp"},
            "C": {"name", "ph", "ts", "pid", "args"}}


def check_trace(text: str) -> dict:
    """Schema-check a trace; returns the slices by track name."""
    data = json.loads(text)
    events = data["traceEvents"]
    assert isinstance(events, list) and events
    names = {}
    slices = defaultdict(list)
    flows = defaultdict(dict)
    for event in events:
        ph = event["ph"]
        assert ph in REQUIRED, event
        assert REQUIRED[ph] <= set(event), (ph, REQUIRED[ph] - set(event))
        if "ts" in event:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if ph == "M" and event["name"] == "thread_name":
            names[event["tid"]] = event["args"]["name"]
        elif ph == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
            slices[event["tid"]].append((event["ts"], event["ts"] + event["dur"], event["name"]))
        elif ph in "sf":
            flows[event["id"]][ph] = event
    for tid, items in slices.items():
        assert tid in names
        items.sort()
        for (s0, e0, n0), (s1, e1, n1) in zip(items, items[1:]):
            assert e0 <= s1 + 1e-9, f"{names[tid]}: {n0} [{s0}, {e0}] overlaps {n1} [{s1}, {e1}]"
    for pair in flows.values():
        assert set(pair) == {"s", "f"} and pair["s"]["ts"] <= pair["f"]["ts"]
    return {names[tid]: items for tid, items in slices.items()}


@pytest.mark.parametrize("name", ["pipeline", "two_dmas", "relu_pipeline", "dpu_ops"])
def test_trace_is_valid_and_tracks_never_overlap(name):
    result = run_round(name)
    text = trace_json(result.plan, result.timeline, name)
    tracks = check_trace(text)
    data = json.loads(text)
    assert set(tracks) <= {"DMA0", "DMA1", "DPU0", "DPU1", "SHAVE0.0", "SHAVE0.1", "SHAVE1.0",
                           "SHAVE1.1"}
    assert any(e["ph"] == "C" and e["name"] == "DDR bandwidth" for e in data["traceEvents"])


def test_trace_has_one_track_per_engine_and_flows_along_barriers():
    result = run_round("pipeline")
    data = json.loads(trace_json(result.plan, result.timeline, "pipeline"))
    threads = sorted(e["args"]["name"] for e in data["traceEvents"]
                     if e["ph"] == "M" and e["name"] == "thread_name")
    assert threads == ["DMA0", "DPU0"]
    flows = [e for e in data["traceEvents"] if e["ph"] == "s"]
    assert sorted(e["name"] for e in flows) == ["%l0", "%l1"]
    slices = {e["name"]: e for e in data["traceEvents"] if e["ph"] == "X"}
    assert slices["add0.v0"]["ts"] == 0.232 and slices["add0.v0"]["dur"] == pytest.approx(0.056)
    counter = [e["args"]["GB/s"] for e in data["traceEvents"] if e["ph"] == "C"]
    assert max(counter) == 16.0                      # one transfer at a time: the full DDR


def test_ddr_counter_shows_the_shared_bandwidth():
    result = run_round("two_dmas")
    data = json.loads(trace_json(result.plan, result.timeline, "two"))
    samples = [(e["ts"], e["args"]["GB/s"]) for e in data["traceEvents"] if e["ph"] == "C"]
    assert samples == [(0.0, 0.0), (0.104, 16.0), (0.404, 0.0)]


def test_same_inputs_give_the_same_trace():
    first = run_round("dpu_ops", seed=4)
    second = run_round("dpu_ops", seed=4)
    assert trace_json(first.plan, first.timeline, "t") == trace_json(second.plan, second.timeline, "t")


def test_csv_has_one_row_per_task_with_the_required_columns():
    result = run_round("one_conv")
    rows = list(csv.DictReader(io.StringIO(tasks_csv(result.plan, result.timeline))))
    assert [r["name"] for r in rows] == ["conv.top", "conv.bottom"]
    assert {"id", "engine", "tile", "start", "end", "cycles", "bytes", "macs"} <= set(rows[0])
    assert rows[1] == {"id": "1", "name": "conv.bottom", "engine": "DPU", "track": "DPU0",
                       "tile": "0", "start": "760", "end": "1232", "cycles": "472", "bytes": "0",
                       "macs": "442368", "stall": "0", "waits": "", "updates": "",
                       "layer": "conv", "onnx_nodes": "", "onnx_op_types": ""}


def test_summary_and_critical_path():
    result = run_round("pipeline")
    path = [result.plan.names[u] for u in critical_path(result.plan, result.timeline)]
    assert path == ["load0", "load1", "add1.v0"]
    text = summary(result.plan, result.timeline, "title")
    assert text.splitlines()[1].startswith("total        520 cycles = 0.52 us at 1000 MHz")
    assert "DMA0             2            464   89.2%" in text
    assert "load0 [DMA0 0-232] -> load1 [DMA0 232-464] -> add1.v0 [DPU0 464-520]" in text


def test_cli_writes_report_and_trace(tmp_path, capsys, monkeypatch):
    trace, report = tmp_path / "t.json", tmp_path / "r.csv"
    code, out, _ = run_cli(["run", "tests/sim/data/pipeline.vir", "--arch",
                            "tests/sim/data/round.toml", "--trace", trace, "--report", report],
                           capsys, monkeypatch)
    assert code == 0 and "critical path" in out
    check_trace(trace.read_text())
    assert report.read_text().count("\n") == 5
