"""Chrome trace JSON of a run, for Perfetto (ui.perfetto.dev) or chrome://tracing.

One track (thread) per DMA channel, DPU and ACT SHAVE; one complete event
(``ph: X``) per unit, ``ts``/``dur`` in microseconds at the NCE clock; flow
arrows (``ph: s`` / ``f``) from each producer of a barrier to each of its
consumers; a counter (``ph: C``) with the DDR bandwidth in use.  A unit of a program with
a layer table (an ONNX model) is named by its ONNX node(s), ``;``-joined, its task label
and op types in ``args``.  A track's
engine runs one unit at a time, so its slices never overlap.
"""

from __future__ import annotations

import json

from runtime_sim.node_report import unit_layers
from runtime_sim.plan import Plan
from runtime_sim.report import KIND_NAMES, track_names
from runtime_sim.runtime import Timeline

PID = 1
FLOW_NUDGE_US = 0.001   # flows attach just inside their slices, so each binds to its own slice
MAX_FLOWS_PER_BARRIER = 256


def trace_events(plan: Plan, timeline: Timeline, title: str) -> dict:
    arch = plan.arch
    us = arch.us
    names = track_names(plan)
    tids: dict[tuple[int, int], int] = {}
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0,
                           "args": {"name": title}}]
    for q, row in enumerate(names):
        for e, name in enumerate(row):
            tid = len(tids) + 1
            tids[(q, e)] = tid
            events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid,
                           "args": {"sort_index": tid}})
    start, end, engine = timeline.start, timeline.end, timeline.engine
    layers = unit_layers(plan)
    for u in range(plan.size):
        args = {"start_cycle": round(start[u], 3), "cycles": round(end[u] - start[u], 3),
                "stall_cycles": round(timeline.stall[u], 3)}
        if plan.nbytes[u]:
            args["bytes"] = plan.nbytes[u]
        if plan.macs[u]:
            args["macs"] = plan.macs[u]
        if plan.waits[u]:
            args["waits"] = [f"%{plan.barrier_names[b]}" for b in plan.waits[u]]
        if plan.updates[u]:
            args["updates"] = [f"%{plan.barrier_names[b]}" for b in plan.updates[u]]
        layer, source = layers[u]
        if source is not None:         # named by ONNX node; the task keeps its label in args
            args["task"] = plan.names[u]
            args["onnx_op_types"] = source.op_types
        events.append({"ph": "X", "name": source.names if source else plan.names[u],
                       "cat": KIND_NAMES[plan.kind[u]],
                       "pid": PID, "tid": tids[(plan.queue_of[u], engine[u])],
                       "ts": us(start[u]), "dur": us(end[u] - start[u]), "args": args})
    flow = 0
    for b, name in enumerate(plan.barrier_names):
        pairs = [(p, c) for p in plan.producers[b] for c in plan.consumers[b]]
        for p, c in pairs[:MAX_FLOWS_PER_BARRIER]:
            flow += 1
            p_len, c_len = us(end[p] - start[p]), us(end[c] - start[c])
            events.append({"ph": "s", "id": flow, "name": f"%{name}", "cat": "barrier",
                           "pid": PID, "tid": tids[(plan.queue_of[p], engine[p])],
                           "ts": us(end[p]) - min(FLOW_NUDGE_US, p_len / 2)})
            events.append({"ph": "f", "bp": "e", "id": flow, "name": f"%{name}",
                           "cat": "barrier", "pid": PID,
                           "tid": tids[(plan.queue_of[c], engine[c])],
                           "ts": us(start[c]) + min(FLOW_NUDGE_US, c_len / 2)})
    for t, used in timeline.ddr_samples:
        events.append({"ph": "C", "name": "DDR bandwidth", "pid": PID, "tid": 0, "ts": us(t),
                       "args": {"GB/s": round(arch.gbps(used), 6)}})
    if timeline.ddr_samples and timeline.ddr_samples[-1][1]:
        events.append({"ph": "C", "name": "DDR bandwidth", "pid": PID, "tid": 0,
                       "ts": us(timeline.total), "args": {"GB/s": 0.0}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": "vpuc run", "arch": arch.name, "clock_mhz": arch.nce_mhz,
                          "total_cycles": timeline.total}}


def trace_json(plan: Plan, timeline: Timeline, title: str) -> str:
    return json.dumps(trace_events(plan, timeline, title), separators=(",", ":")) + "\n"
