"""bench/critical_waits.py: the critical path's tasks charged to how the path reached them
(queue order within a layer or behind another layer's task, a data barrier, a CMX slot's
``stored<k>``, a segment's ``finished`` gate), on a hand-made report and on a real run."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import critical_waits as cw  # noqa: E402

FIELDS = ["name", "engine", "track", "start", "end", "waits", "updates", "layer"]
# (name, engine, track, start, end, waits, updates, layer)
TASKS = [
    ("a.load0", "DMA", "DMA0", 0, 10, "", "%a.loaded0", "a"),
    ("a.c0", "DPU", "DPU0", 10, 30, "%a.loaded0", "%a.done0", "a"),
    ("a.c2", "DPU", "DPU0", 30, 50, "%a.loaded0", "%a.done2", "a"),
    ("a.store0", "DMA", "DMA1", 50, 55, "%a.done2", "%a.stored0 %a.finished", "a"),
    ("a.c4", "DPU", "DPU0", 55, 75, "%a.stored0 %a.loaded0", "%a.done4", "a"),
    ("w.load", "DMA", "DMA0", 75, 95, "%a.done4", "", "w"),
    ("b.load0", "DMA", "DMA0", 95, 100, "%a.finished", "%b.loaded0", "b"),
]


@pytest.fixture
def report(tmp_path: Path) -> Path:
    with open(tmp_path / "tasks.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(TASKS)
    # a.c0 ran beside the path (a.c2 waited on the load, not on it)
    path = [{"name": t[0], "track": t[2], "start": t[3], "end": t[4]} for t in TASKS
            if t[0] != "a.c0"]
    (tmp_path / "summary.json").write_text(json.dumps({"critical_path": {"tasks": path}}))
    return tmp_path


def test_kinds_of_links(report: Path) -> None:
    path, rows = cw.read_report(report)
    kinds = {t["name"]: (k, link) for t, k, link in cw.classify(path, rows)}
    assert kinds["a.load0"][0] == "path start"
    assert kinds["a.c2"] == ("barrier: data", "%a.loaded0")
    assert kinds["a.store0"] == ("barrier: data", "%a.done2")
    # the slot barrier names the resource even beside a data one
    assert kinds["a.c4"] == ("barrier: CMX slot reuse", "%a.stored0")
    assert kinds["w.load"][0] == "barrier: data"
    assert kinds["b.load0"] == ("queue, behind another layer", "w.load")


def test_slot_reuse_alone(report: Path) -> None:
    _, rows = cw.read_report(report)
    # a.c4: its queue predecessor ends at 50, loaded0 at 10, stored0 at 55: 5 cycles
    assert cw.slot_reuse_waits(rows) == {"DPU": 5.0}


def test_missing_report_is_a_message(tmp_path: Path, capsys) -> None:
    assert cw.main([str(tmp_path)]) == 2
    assert "not a complete report directory" in capsys.readouterr().err


def test_real_run_adds_up(tmp_path: Path) -> None:
    from vpuc.onnx_import.zoo import mobilenet_v3_small
    model = mobilenet_v3_small(size=64, classes=10).save(tmp_path / "m.onnx", "m")
    run = subprocess.run([sys.executable, "-m", "vpuc", "run", str(model), "--timing-only",
                          "--report-dir", str(tmp_path / "r")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    path, rows = cw.read_report(tmp_path / "r")
    charged = sum(t["end"] - t["start"] for t, _, _ in cw.classify(path, rows))
    busy = sum(t["end"] - t["start"] for t in path)
    assert charged == pytest.approx(busy, rel=1e-12)
    assert cw.main([str(tmp_path / "r"), "--json"]) == 0


def test_barrier_names() -> None:
    assert cw.barrier_kind("%x.conv.finished") == "barrier: segment gate"
    assert cw.barrier_kind("%x.conv.stored12") == "barrier: CMX slot reuse"
    assert cw.barrier_kind("%x.conv.store1.written") == "barrier: data"
