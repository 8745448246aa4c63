"""Per-layer reports of a run, SCALE-Sim style (``vpuc run --report-dir DIR``).

A *layer* is the ONNX node (or fused node group) a unit came from, by the program's layer
table (``runtime_sim/node_report.py``), else the graph op or the task itself as its label
says (``layer_of``; docs/simulator.md, "Reports").

Every figure sums units of the timeline, so the columns add up to the run's totals
(``summary_data``): busy cycles per engine, MACs, DMA bytes, DDR bytes, transfers.

A layer's span (``cycles``) starts at its first unit, which under ``--schedule default`` is
often a weight load prefetched during earlier layers; ``cycles_after_prefetch`` starts at its
first unit that is not such a load (``prefetch_units``), the time the layer itself took once
its turn came.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from runtime_sim.engines.shave_ddr import task_ddr_reads
from runtime_sim.node_report import label_layer, unit_layers
from runtime_sim.plan import ACT, DMA, DPU, Plan
from runtime_sim.report import KIND_NAMES, _rounded, num, tasks_csv, track_names
from runtime_sim.runtime import Timeline
from vpuc.ir.module import BufferKind
from vpuc.ir.provenance import LayerSource

REPORT_FILES = ("compute_report.csv", "bandwidth_report.csv", "detailed_access_report.csv",
                "summary.json", "tasks.csv", "ddr_bandwidth.csv", "roofs.json")
DEFAULT_ELEM = "f16"


def layer_of(name: str) -> str:
    """The layer of a unit from its label: the text before the first ``.``.

    Graph lowering prefixes every task with its graph value or fused block
    (``conv_3.convolution.load_w.t0`` -> ``conv_3``, ``sg0.load2.relu_5`` -> ``sg0``), and a
    DPU variant is labelled ``task.variant`` (``conv0.a`` -> ``conv0``), so a hand-written
    program's layers are its tasks.  Units with provenance take ``node_report.unit_layers``.
    """
    return label_layer(name)


@dataclass
class Layer:
    name: str
    source: LayerSource | None = None   # the ONNX nodes, when the program records them
    engines: set[str] = field(default_factory=set)
    tasks: set[int] = field(default_factory=set)     # ids of the tasks (a DPU task: variants)
    units: int = 0
    start: float = float("inf")
    end: float = 0.0
    own_start: float = float("inf")   # the first start of a unit that is not a prefetch
    busy: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in KIND_NAMES.values()})
    macs: int = 0
    dpu_peak: float = 0.0          # MACs per cycle of one DPU at the layer's input type
    ddr_read: int = 0
    shave_ddr_read: int = 0          # read from DDR by ACT SHAVE kernels, not by DMA
    ddr_write: int = 0
    dma_bytes: int = 0
    cmx_bytes: int = 0

    @property
    def span(self) -> float:
        return self.end - self.start if self.units else 0.0

    @property
    def span_after_prefetch(self) -> float:
        """From its first unit that is not a prefetch to its end (a layer of prefetches
        only: its span)."""
        if self.own_start == float("inf"):
            return self.span
        return self.end - self.own_start


@dataclass
class Access:
    layer: str
    channel: str
    transfers: int = 0
    bytes: int = 0
    ddr_read: int = 0
    ddr_write: int = 0
    busy: float = 0.0
    stall: float = 0.0


def _ddr(kind: BufferKind) -> bool:
    return kind is not BufferKind.CMX


def dpu_count(plan: Plan) -> int:
    structure = plan.arch.structure
    return structure.tiles * structure.dpus_per_tile


def prefetch_units(plan: Plan) -> set[int]:
    """The DMA units that load into CMX needing no earlier work but loads like themselves:
    a load from a constant whose barriers (if any) only such loads update, or a CMX -> CMX
    copy of one (``schedule.overlap``'s weights read once).  Such a load may run long before
    the rest of its layer (``--schedule default`` prefetches weights during the previous
    layer), so it does not mark when the layer's own work began."""
    kinds, waits, updates = plan.kind, plan.waits, plan.updates
    found: set[int] = set()
    for u in range(plan.size):
        if kinds[u] != DMA:
            continue
        src, dst = plan.dma_regions(u)
        if dst.kind is BufferKind.CMX and (src.kind is BufferKind.CONST
                                           or (src.kind is BufferKind.CMX and waits[u])):
            found.add(u)
    # a barrier is a prefetch's when every unit updating it is one: shrink to the fixpoint
    while True:
        other = {b for u in range(plan.size) if u not in found for b in updates[u]}
        kept = {u for u in found if not other.intersection(waits[u])}
        if kept == found:
            return found
        found = kept


def layers_and_accesses(plan: Plan, timeline: Timeline) -> tuple[list[Layer], list[Access]]:
    """Layers in order of first start (ties: first unit), and DMA accesses per layer and
    channel in the same order."""
    tracks = track_names(plan)
    peaks = plan.arch.dpu.dense_macs_per_cycle
    layers: dict[str, Layer] = {}
    accesses: dict[tuple[str, str], Access] = {}
    start, end, stall = timeline.start, timeline.end, timeline.stall
    tasks = plan.task
    prefetch = prefetch_units(plan)
    kernels = {k.name: k for k in plan.program.module.kernels}
    for u, (name, source) in enumerate(unit_layers(plan)):
        layer = layers.get(name)
        if layer is None:
            layer = layers[name] = Layer(name, source)
        layer.tasks.add(id(tasks[u]))
        kind = plan.kind[u]
        engine = KIND_NAMES[kind]
        cycles = end[u] - start[u]
        layer.engines.add(engine)
        layer.units += 1
        layer.start = min(layer.start, start[u])
        layer.end = max(layer.end, end[u])
        if u not in prefetch:
            layer.own_start = min(layer.own_start, start[u])
        layer.busy[engine] += cycles
        if kind == DPU:
            layer.macs += plan.macs[u]
            regions = plan.dpu_regions(u)
            layer.cmx_bytes += sum(r.type.nbytes for r in regions.values())
            if plan.macs[u] and not layer.dpu_peak:
                elem = str(regions["in0"].type.elem)
                layer.dpu_peak = peaks.get(elem, peaks.get(DEFAULT_ELEM, max(peaks.values())))
        elif kind == ACT:
            # a library kernel reading an input left in DDR (its rows, by its contract)
            reads = task_ddr_reads(tasks[u], kernels.get(tasks[u].kernel), plan.region)
            layer.shave_ddr_read += sum(r.bytes for r in reads)
        elif kind == DMA:
            src, dst = plan.dma_regions(u)
            read = src.type.nbytes if _ddr(src.kind) else 0
            write = dst.type.nbytes if _ddr(dst.kind) else 0
            cmx = (0 if _ddr(src.kind) else src.type.nbytes) + (0 if _ddr(dst.kind) else dst.type.nbytes)
            layer.ddr_read += read
            layer.ddr_write += write
            layer.dma_bytes += plan.nbytes[u]
            layer.cmx_bytes += cmx
            channel = tracks[plan.queue_of[u]][timeline.engine[u]]
            access = accesses.get((name, channel))
            if access is None:
                access = accesses[(name, channel)] = Access(name, channel)
            access.transfers += 1
            access.bytes += plan.nbytes[u]
            access.ddr_read += read
            access.ddr_write += write
            access.busy += cycles
            access.stall += stall[u]
    order = sorted(layers.values(), key=lambda l: l.start)
    rank = {l.name: i for i, l in enumerate(order)}
    return order, sorted(accesses.values(), key=lambda a: (rank[a.layer], a.channel))


def _csv(header: list[str], rows: list[list]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def compute_csv(plan: Plan, layers: list[Layer]) -> str:
    dpus = dpu_count(plan)
    rows = []
    for l in layers:
        peak = l.span * dpus * l.dpu_peak
        rows.append([l.name, " ".join(sorted(l.engines)), l.units, num(l.start), num(l.end),
                     num(l.span), num(l.span_after_prefetch), num(sum(l.busy.values())), num(l.busy["DPU"]),
                     num(l.busy["ACT_SHAVE"]), num(l.busy["DMA"]), l.macs,
                     num(_rounded(100.0 * l.macs / peak, 3)) if peak else "0"])
    return _csv(["layer", "engines", "units", "start", "end", "cycles",
                 "cycles_after_prefetch", "busy_cycles",
                 "dpu_cycles", "shave_cycles", "dma_cycles", "macs", "dpu_utilization_percent"],
                rows)


def bandwidth_csv(plan: Plan, layers: list[Layer]) -> str:
    arch = plan.arch
    rows = []
    for l in layers:
        ddr = l.ddr_read + l.ddr_write
        gbps = arch.gbps((ddr + l.shave_ddr_read) / l.span) if l.span else 0.0
        rows.append([l.name, l.ddr_read, l.ddr_write, ddr, num(_rounded(gbps, 3)), l.dma_bytes,
                     l.cmx_bytes, l.shave_ddr_read])
    return _csv(["layer", "ddr_read_bytes", "ddr_write_bytes", "ddr_bytes", "achieved_gbps",
                 "dma_bytes", "cmx_bytes", "shave_ddr_read_bytes"], rows)


def access_csv(accesses: list[Access]) -> str:
    rows = [[a.layer, a.channel, a.transfers, a.bytes, a.ddr_read, a.ddr_write, num(a.busy),
             num(a.stall)] for a in accesses]
    return _csv(["layer", "channel", "transfers", "bytes", "ddr_read_bytes", "ddr_write_bytes",
                 "busy_cycles", "stall_cycles"], rows)


def ddr_csv(plan: Plan, timeline: Timeline) -> str:
    """The DDR bandwidth in use, a step function: from each ``cycle`` on, ``gbps``."""
    samples = list(timeline.ddr_samples)
    if samples and samples[-1][1]:
        samples.append((timeline.total, 0.0))
    return _csv(["cycle", "gbps"], [[num(t), num(_rounded(plan.arch.gbps(r), 6))]
                                    for t, r in samples])


def roofs(plan: Plan, timeline: Timeline) -> dict:
    """What the roofline is drawn against: the DPUs' dense peak and the DDR bandwidth."""
    arch = plan.arch
    return {"nce_mhz": arch.nce_mhz, "dpus": dpu_count(plan),
            "dpu_peak_macs_per_cycle": dict(arch.dpu.dense_macs_per_cycle),
            "ddr_bytes_per_cycle": arch.ddr_bytes_per_cycle,
            "total_cycles": timeline.total}


def write_report_dir(directory: Path, plan: Plan, timeline: Timeline, write) -> list[Path]:
    """Write every report file but ``summary.json`` (the caller's: it is exactly ``vpuc
    run --json``) into ``directory`` with ``write(path, text)``; returns the paths."""
    layers, accesses = layers_and_accesses(plan, timeline)
    texts = [compute_csv(plan, layers), bandwidth_csv(plan, layers), access_csv(accesses),
             tasks_csv(plan, timeline), ddr_csv(plan, timeline),
             json.dumps(roofs(plan, timeline), indent=1) + "\n"]
    paths = []
    names = [n for n in REPORT_FILES if n != "summary.json"]
    for name, text in zip(names, texts):
        path = directory / name
        write(str(path), text)
        paths.append(path)
    return paths
