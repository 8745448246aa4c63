"""Reports by ONNX node: which layer each unit belongs to, and ``vpuc run --layer-report``.

A compiled ONNX model carries a layer table (``Module.layers``: ``layer "KEY" from "n1"
Op1, ...``, written by lower-graph, restored from the blob): each task labelled ``KEY`` or
``KEY.*`` came from those nodes (vpuc/ir/provenance.py).  ``unit_layers`` maps every
unit to its layer: the table's entry when there is one, else the label rule of
``layer_report.layer_of`` (hand-written programs, graphs written in VIR).

``layers_csv`` writes one row per layer (an ONNX node, or the node group one fused kernel
or one DPU layer with its post-ops covers): the nodes' names and op types, the engines,
the tasks and units it became, its start, end and span, busy cycles per engine, MACs and
DMA bytes.  Every column but start/end/cycles sums over the units of the run, so the
column totals equal the run's (``summary_data``): tasks, busy cycles per engine, MACs,
DMA bytes (tests/sim/test_node_report.py).
"""

from __future__ import annotations

import csv
import io

from runtime_sim.plan import Plan
from runtime_sim.report import num
from runtime_sim.runtime import Timeline
from vpuc.ir.provenance import LayerIndex, LayerSource

LAYER_COLUMNS = ["layer", "onnx_nodes", "onnx_op_types", "engines", "tasks", "units", "start",
                 "end", "cycles", "busy_cycles", "dpu_cycles", "shave_cycles", "dma_cycles",
                 "macs", "dma_bytes"]


def label_layer(name: str) -> str:
    """The layer of a unit without provenance: the text before the first ``.``."""
    return name.split(".", 1)[0]


def unit_layers(plan: Plan) -> list[tuple[str, LayerSource | None]]:
    """Per unit: (layer name, its layer table entry or None)."""
    index = LayerIndex(plan.program.module.layers)
    out = []
    cache: dict[str, tuple[str, LayerSource | None]] = {}
    for name in plan.names:
        found = cache.get(name)
        if found is None:
            source = index.layer(name) if index else None
            if source is not None:
                found = (source.key or plan.program.module.name, source)
            else:
                found = (label_layer(name), None)
            cache[name] = found
        out.append(found)
    return out


def task_columns(plan: Plan) -> list[list[str]]:
    """The provenance columns of ``tasks.csv`` per unit: layer, onnx_nodes, onnx_op_types."""
    return [[name, source.names if source else "", source.op_types if source else ""]
            for name, source in unit_layers(plan)]


def layers_csv(plan: Plan, timeline: Timeline) -> str:
    from runtime_sim.layer_report import layers_and_accesses
    layers, _ = layers_and_accesses(plan, timeline)
    rows = []
    for l in layers:
        rows.append([l.name, l.source.names if l.source else "",
                     l.source.op_types if l.source else "", " ".join(sorted(l.engines)),
                     len(l.tasks), l.units, num(l.start), num(l.end), num(l.span),
                     num(sum(l.busy.values())), num(l.busy["DPU"]), num(l.busy["ACT_SHAVE"]),
                     num(l.busy["DMA"]), l.macs, l.dma_bytes])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(LAYER_COLUMNS)
    writer.writerows(rows)
    return out.getvalue()
