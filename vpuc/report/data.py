"""A report directory (``vpuc run --report-dir``) read back as plain data for the plots.

The HTML report reads files only, never a Program or a simulator object, so a report
directory from another machine or an older run renders the same way.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from runtime_sim.layer_report import layer_of
from vpuc.diagnostics import VpucError

NEEDED = ("compute_report.csv", "bandwidth_report.csv", "detailed_access_report.csv",
          "summary.json", "tasks.csv", "ddr_bandwidth.csv", "roofs.json")


@dataclass
class ReportData:
    directory: Path
    summary: dict
    roofs: dict
    compute: list[dict]
    bandwidth: list[dict]
    access: list[dict]
    tasks: list[dict]          # tasks.csv rows, numbers converted, plus "layer"
    ddr: list[tuple[float, float]]   # (cycle, GB/s) steps


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _number(text: str) -> float:
    return float(text) if text else 0.0


def read_report_dir(directory: Path) -> ReportData:
    if not directory.is_dir():
        raise VpucError(f"{directory}: not a directory; expected the DIR of `vpuc run "
                        "--report-dir DIR`")
    missing = [n for n in NEEDED if not (directory / n).is_file()]
    if missing:
        raise VpucError(f"{directory}: missing {', '.join(missing)}; expected the files `vpuc "
                        "run --report-dir DIR` writes")
    try:
        summary = json.loads((directory / "summary.json").read_text())
        roofs = json.loads((directory / "roofs.json").read_text())
        tasks = _rows(directory / "tasks.csv")
        for t in tasks:
            for key in ("start", "end", "cycles", "bytes", "macs", "stall"):
                t[key] = _number(t[key])
            t["layer"] = t.get("layer") or layer_of(t["name"])   # older files: no column
        ddr = [(_number(r["cycle"]), _number(r["gbps"]))
               for r in _rows(directory / "ddr_bandwidth.csv")]
        compute = _rows(directory / "compute_report.csv")
        for r in compute:
            for key in ("start", "end", "cycles", "dpu_cycles", "shave_cycles", "dma_cycles",
                        "macs", "dpu_utilization_percent"):
                r[key] = _number(r[key])
        bandwidth = _rows(directory / "bandwidth_report.csv")
        for r in bandwidth:
            for key in ("ddr_read_bytes", "ddr_write_bytes", "ddr_bytes", "achieved_gbps"):
                r[key] = _number(r[key])
        access = _rows(directory / "detailed_access_report.csv")
    except (OSError, ValueError, KeyError) as exc:
        raise VpucError(f"{directory}: cannot read the report files ({exc}); rewrite them "
                        "with `vpuc run --report-dir`") from None
    return ReportData(directory, summary, roofs, compute, bandwidth, access, tasks, ddr)
