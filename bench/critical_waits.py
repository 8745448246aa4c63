"""Why each task on a run's critical path started when it did (issue 13, "schedules that
overlap"): read from a ``vpuc run --report-dir DIR`` (its ``summary.json`` critical path
and ``tasks.csv``), each task's cycles charged to how the path reached it:

- ``queue, own layer``: the task before it on the path runs on the same engine queue and
  belongs to the same layer (a layer's own blocks one after another);
- ``queue, behind another layer``: same queue, another layer's task: a resource order,
  not data (a DMA channel's FIFO running a prefetched weight load, or the previous
  segment's stores, before this one);
- ``barrier: data``: the task before it updates a barrier this one waits on that carries
  data (a block loaded, computed, written, copied);
- ``barrier: CMX slot reuse``: the barrier is a block slot's ``stored<k>`` (the block
  ``k`` slots back was stored, so its CMX may be written again);
- ``barrier: segment gate``: the barrier is a segment's ``finished`` gate (the whole
  previous segment, not a block of it).

The kinds follow the lowering's barrier names (``lower_dpu``, ``blocked_program``,
``schedule_deps``); a barrier of another name counts as data.  It also sums, over every
task (not only the path), how long CMX slot reuse alone held a task back: its start
against the latest of its other waits and its queue predecessor's end.

    python bench/critical_waits.py DIR [--top N] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

SLOT = re.compile(r"\.stored\d+$")
GATE = re.compile(r"\.finished$")
KINDS = ("queue, own layer", "queue, behind another layer", "barrier: data",
         "barrier: CMX slot reuse", "barrier: segment gate", "path start")
PRIORITY = ("barrier: CMX slot reuse", "barrier: segment gate", "barrier: data")


def barrier_kind(name: str) -> str:
    if SLOT.search(name):
        return "barrier: CMX slot reuse"
    if GATE.search(name):
        return "barrier: segment gate"
    return "barrier: data"


def read_report(directory: Path) -> tuple[list[dict], dict[str, dict]]:
    """The critical path's tasks (name, track, start, end) and every task's row by name."""
    summary = json.loads((directory / "summary.json").read_text())
    with open(directory / "tasks.csv", newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    return summary["critical_path"]["tasks"], rows


def classify(path: list[dict], rows: dict[str, dict]) -> list[tuple[dict, str, str]]:
    """(path task, kind, what linked it: the barrier or the task before it) per path task."""
    out = []
    for i, task in enumerate(path):
        if i == 0:
            out.append((task, "path start", ""))
            continue
        before = path[i - 1]
        mine, theirs = rows[task["name"]], rows[before["name"]]
        if before["track"] == task["track"]:
            own = mine["layer"] == theirs["layer"]
            out.append((task, KINDS[0] if own else KINDS[1], before["name"]))
            continue
        linked = [b for b in theirs["updates"].split() if b in set(mine["waits"].split())]
        # a slot or gate barrier among the linking ones names the resource it waited on
        found = {barrier_kind(b): b for b in reversed(linked)}
        kind = next((k for k in PRIORITY if k in found), "barrier: data")
        out.append((task, kind, found.get(kind, "")))
    return out


def slot_reuse_waits(rows: dict[str, dict]) -> dict[str, float]:
    """Track kind -> cycles tasks started later than their other waits and their queue
    predecessor allowed, because of a ``stored<k>`` barrier alone."""
    ends: dict[str, float] = defaultdict(float)
    for r in rows.values():
        for b in r["updates"].split():
            ends[b] = max(ends[b], float(r["end"]))
    queue_prev: dict[str, float] = {}
    by_track: dict[str, list[dict]] = defaultdict(list)
    for r in rows.values():
        by_track[r["track"]].append(r)
    for track in by_track.values():
        track.sort(key=lambda r: float(r["start"]))
        for prev, r in zip([None] + track, track):
            queue_prev[r["name"]] = float(prev["end"]) if prev else 0.0
    held: dict[str, float] = defaultdict(float)
    for r in rows.values():
        waits = r["waits"].split()
        slots = [b for b in waits if SLOT.search(b)]
        if not slots:
            continue
        other = max([queue_prev[r["name"]]] + [ends[b] for b in waits if b not in slots])
        extra = max(ends[b] for b in slots) - other
        if extra > 0:
            held[r["engine"]] += extra
    return dict(held)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="a `vpuc run --report-dir` directory")
    parser.add_argument("--top", type=int, default=12,
                        help="layers shown whose tasks queued behind another layer's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        path, rows = read_report(args.directory)
    except (OSError, KeyError, json.JSONDecodeError) as e:
        print(f"critical_waits: {args.directory}: not a complete report directory ({e})",
              file=sys.stderr)
        return 2
    kinds: dict[str, float] = defaultdict(float)
    behind: dict[str, float] = defaultdict(float)      # layer queued ahead -> cycles
    for task, kind, link in classify(path, rows):
        cycles = task["end"] - task["start"]
        kinds[kind] += cycles
    # a task whose successor on the path waited behind it in its queue
    for a, b in zip(path, path[1:]):
        if a["track"] == b["track"] and rows[a["name"]]["layer"] != rows[b["name"]]["layer"]:
            behind[rows[a["name"]]["layer"]] += a["end"] - a["start"]
    total = path[-1]["end"] if path else 0.0
    data = {"cycles": total, "by_kind": {k: kinds.get(k, 0.0) for k in KINDS},
            "queued_ahead_by_layer": dict(sorted(behind.items(), key=lambda kv: -kv[1])),
            "slot_reuse_waits_all_tasks": slot_reuse_waits(rows)}
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    print(f"critical path {len(path)} tasks, {total:,.0f} cycles")
    for k in KINDS:
        v = data["by_kind"][k]
        print(f"  {k:<30} {v:>11,.0f}  {100 * v / total if total else 0:5.1f}%")
    print("tasks another layer's path task waited behind in their queue (cycles):")
    for layer, v in list(data["queued_ahead_by_layer"].items())[:args.top]:
        print(f"  {layer:<50} {v:>9,.0f}")
    print("CMX slot reuse alone holding tasks back, all tasks (cycles, summed):")
    for engine, v in data["slot_reuse_waits_all_tasks"].items():
        print(f"  {engine:<10} {v:>11,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
