"""What a run tells the user: the summary table, the per-task CSV and the critical path.

Every figure derives from the timeline: busy time is the sum of a track's
slices (dispatch included), a barrier stall is the time an engine sat free at
a unit whose barriers were not ready, and the critical path follows, from the
unit that ends last, the unit whose end let each one start.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from runtime_sim.plan import ACT, DMA, DPU, Plan
from runtime_sim.runtime import Timeline

KIND_NAMES = {DMA: "DMA", DPU: "DPU", ACT: "ACT_SHAVE"}


def num(value: float) -> str:
    """A cycle count for machines: an integer when exact, else 3 decimals."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def track_names(plan: Plan) -> list[list[str]]:
    """Track names per queue and engine: DMA0, DPU1, SHAVE0.1, ..."""
    names = []
    for (kind, index), engines in zip(plan.queue_keys, plan.queue_engines):
        short = {"DMA": "DMA", "DPU": "DPU", "ACT_SHAVE": "SHAVE"}[kind]
        if kind == "ACT_SHAVE" or engines > 1:
            names.append([f"{short}{index}.{e}" for e in range(engines)])
        else:
            names.append([f"{short}{index}"])
    return names


@dataclass
class TrackStats:
    name: str
    units: int = 0
    busy: float = 0.0
    stall: float = 0.0


def track_stats(plan: Plan, timeline: Timeline) -> list[TrackStats]:
    names = track_names(plan)
    stats = {(q, e): TrackStats(name) for q, row in enumerate(names) for e, name in enumerate(row)}
    start, end, engine, stall = timeline.start, timeline.end, timeline.engine, timeline.stall
    for u in range(plan.size):
        s = stats[(plan.queue_of[u], engine[u])]
        s.units += 1
        s.busy += end[u] - start[u]
        s.stall += stall[u]
    order = {"DMA": 0, "DPU": 1, "SHAVE": 2}
    return sorted(stats.values(), key=lambda s: (order[s.name.rstrip("0123456789.")], s.name))


def critical_path(plan: Plan, timeline: Timeline) -> list[int]:
    if not plan.size:
        return []
    unit = max(range(plan.size), key=lambda u: (timeline.end[u], -u))
    path = []
    while unit >= 0:
        path.append(unit)
        unit = timeline.cause[unit]
    return path[::-1]


def _exact(value: float, digits: int = 3) -> float:
    return value


def _rounded(value: float, digits: int = 3) -> float | int:
    """A figure for machines: an int when whole, else rounded to ``digits`` decimals (the
    last bits of a float sum say nothing and would make equal runs print differently)."""
    value = round(float(value), digits)
    return int(value) if value.is_integer() else value


def summary_data(plan: Plan, timeline: Timeline, exact: bool = False) -> dict:
    """The summary's figures as plain data (``vpuc run --json``; docs/simulator.md lists the
    fields), ``rounded`` unless ``exact``.  ``summary`` prints these same numbers (exact, so
    its own formatting rounds once)."""
    from runtime_sim.bound_input import bound_data     # it reads layers, which import this
    rounded = _exact if exact else _rounded
    arch = plan.arch
    total = timeline.total
    engines = [{"name": s.name, "units": s.units, "busy_cycles": rounded(s.busy),
                "busy_percent": rounded(100.0 * s.busy / total if total else 0.0, 2),
                "stall_cycles": rounded(s.stall)} for s in track_stats(plan, timeline)]
    dma_units = [u for u in range(plan.size) if plan.kind[u] == DMA]
    moved = sum(plan.nbytes[u] for u in dma_units)
    seconds = total / (arch.nce_mhz * 1e6) if total else 0.0
    path = critical_path(plan, timeline)
    path_total = timeline.end[path[-1]] if path else 0.0
    by_kind: dict[str, float] = {}
    for u in path:
        name = KIND_NAMES[plan.kind[u]]
        by_kind[name] = by_kind.get(name, 0.0) + timeline.end[u] - timeline.start[u]
    tracks = track_names(plan)
    return {
        "cycles": rounded(total), "time_us": rounded(arch.us(total), 4),
        "nce_mhz": rounded(arch.nce_mhz),
        "units": plan.size, "events": timeline.events, "engines": engines,
        "dma": {"bytes": moved, "transfers": len(dma_units),
                "ddr_bytes": sum(plan.transfers[u].ddr_bytes for u in dma_units),
                "achieved_gbps": rounded(moved / seconds / 1e9 if seconds else 0.0),
                "ddr_peak_gbps": rounded(arch.gbps(arch.ddr_bytes_per_cycle))},
        "dpu_macs": sum(plan.macs),
        "stall_cycles": rounded(sum(timeline.stall)),
        "bound": bound_data(plan, timeline, rounded),
        "critical_path": {
            "units": len(path), "cycles": rounded(path_total),
            "percent_by_engine": {k: rounded(100 * v / path_total, 2)
                                  for k, v in by_kind.items()} if path_total else {},
            "tasks": [{"name": plan.names[u], "track": tracks[plan.queue_of[u]][timeline.engine[u]],
                       "start": rounded(timeline.start[u]), "end": rounded(timeline.end[u])}
                      for u in path]},
    }


def summary(plan: Plan, timeline: Timeline, title: str) -> str:
    data = summary_data(plan, timeline, exact=True)
    total, dma = data["cycles"], data["dma"]
    rows = [title,
            f"total        {total:,.0f} cycles = {data['time_us']:,.2f} us at "
            f"{data['nce_mhz']:g} MHz (NCE clock); {data['units']:,} units, "
            f"{data['events']:,} events"]
    rows.append(f"{'engine':<10} {'units':>7} {'busy cycles':>14} {'busy %':>7} "
                f"{'barrier stall':>14}")
    for e in data["engines"]:
        rows.append(f"{e['name']:<10} {e['units']:>7,} {e['busy_cycles']:>14,.0f} "
                    f"{e['busy_percent']:>6.1f}% {e['stall_cycles']:>14,.0f}")
    achieved = f"{dma['achieved_gbps']:,.2f}"
    rows.append(f"DMA          {dma['bytes']:,} bytes in {dma['transfers']:,} transfers "
                f"({dma['ddr_bytes']:,} B to/from DDR); {achieved} GB/s achieved, DDR peak "
                f"{dma['ddr_peak_gbps']:,.2f} GB/s")
    if data["dpu_macs"]:
        rows.append(f"DPU          {data['dpu_macs']:,} MACs")
    rows.append(f"stalls       {data['stall_cycles']:,.0f} cycles with an engine free at a unit "
                "whose barriers were not ready")
    rows.append(bound_text(data["bound"]))
    rows.append(critical_path_text(data["critical_path"]))
    return "\n".join(rows) + "\n"


def bound_text(bound: dict) -> str:
    """The lower bound line of the summary (``bound_input.bound_data``)."""
    if not bound["cycles"]:
        return "bound        0 cycles (no work)"
    busiest = bound["busiest_engine"]
    return (f"bound        {bound['cycles']:,.0f} cycles schedule-free lower bound (busiest: "
            f"{busiest['name']}); achieved/bound {bound['achieved_over_bound']:.2f}; per-layer "
            f"roofline sum {bound['per_layer_cycles']:,.0f} (achieved/sum "
            f"{bound['achieved_over_per_layer']:.2f})")


def critical_path_text(path: dict, shown: int = 4) -> str:
    """The critical path line of the summary, from ``summary_data(...)["critical_path"]``."""
    if not path["units"]:
        return "critical path: empty program"
    shares = ", ".join(f"{k} {v:.0f}%" for k, v in path["percent_by_engine"].items())
    steps = [f"{t['name']} [{t['track']} {t['start']:,.0f}-{t['end']:,.0f}]"
             for t in path["tasks"]]
    if len(steps) > 2 * shown:
        steps = steps[:shown] + [f"... {len(steps) - 2 * shown} more ..."] + steps[-shown:]
    return (f"critical path {path['units']} units, {path['cycles']:,.0f} cycles ({shares}):\n  "
            + " -> ".join(steps))


def tasks_csv(plan: Plan, timeline: Timeline) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "name", "engine", "track", "tile", "start", "end", "cycles", "bytes",
                     "macs", "stall", "waits", "updates", "layer", "onnx_nodes", "onnx_op_types"])
    names = track_names(plan)
    from runtime_sim.node_report import task_columns
    provenance = task_columns(plan)
    for u in range(plan.size):
        tile = plan.tile[u]
        writer.writerow([u, plan.names[u], KIND_NAMES[plan.kind[u]],
                         names[plan.queue_of[u]][timeline.engine[u]],
                         "" if tile is None else tile, num(timeline.start[u]), num(timeline.end[u]),
                         num(timeline.end[u] - timeline.start[u]), plan.nbytes[u], plan.macs[u],
                         num(timeline.stall[u]),
                         " ".join(f"%{plan.barrier_names[b]}" for b in plan.waits[u]),
                         " ".join(f"%{plan.barrier_names[b]}" for b in plan.updates[u]),
                         *provenance[u]])
    return out.getvalue()
