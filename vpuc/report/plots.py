"""The figures of the HTML report, one plotly figure each, from a ``ReportData``.

Cycles are NCE cycles throughout (the simulator's clock); rates are converted to
GB/s and GOP/s at the NCE clock of ``roofs.json``.  An operation is a MAC counted as
two (multiply and add), as rooflines usually do.
"""

from __future__ import annotations

import plotly.graph_objects as go

from vpuc.report.data import ReportData
from vpuc.report.label_placement import axis_range, place_labels

ENGINE_COLORS = {"DMA": "#4c78a8", "DPU": "#f58518", "ACT_SHAVE": "#54a24b"}
CRITICAL_COLOR = "#d62728"
UTILIZATION_BINS = 200
HEIGHT = 420
MARGIN = dict(l=70, r=20, t=50, b=50)
ROOFLINE_LABELS = 8      # layers named on the roofline plot (the rest on hover)


def _layout(fig: go.Figure, title: str, **kwargs) -> go.Figure:
    fig.update_layout(title=title, height=kwargs.pop("height", HEIGHT), template="plotly_white",
                      margin=MARGIN, **kwargs)
    return fig


def _track_order(data: ReportData) -> list[str]:
    order = {"DMA": 0, "DPU": 1, "SHAVE": 2}
    tracks = {t["track"] for t in data.tasks}
    return sorted(tracks, key=lambda n: (order.get(n.rstrip("0123456789."), 3), n))


def _critical(data: ReportData) -> set[int]:
    """Indices into ``data.tasks`` of the units on the critical path of summary.json."""
    wanted: dict[tuple[str, str], list[float]] = {}
    for t in data.summary.get("critical_path", {}).get("tasks", []):
        wanted.setdefault((t["name"], t["track"]), []).append(float(t["start"]))
    found = set()
    for i, t in enumerate(data.tasks):
        starts = wanted.get((t["name"], t["track"]))
        if starts and any(abs(s - t["start"]) < 0.01 for s in starts):
            found.add(i)
    return found


def timeline(data: ReportData) -> go.Figure:
    """One track per engine, one bar per unit; critical-path units outlined in red."""
    fig = go.Figure()
    critical = _critical(data)
    for engine, color in ENGINE_COLORS.items():
        rows = [t for t in data.tasks if t["engine"] == engine]
        if not rows:
            continue
        fig.add_bar(name=engine, orientation="h", y=[t["track"] for t in rows],
                    x=[t["cycles"] for t in rows], base=[t["start"] for t in rows],
                    marker=dict(color=color), customdata=[[t["name"], t["layer"], t["end"]]
                                                          for t in rows],
                    hovertemplate="%{customdata[0]} (layer %{customdata[1]})<br>"
                                  "%{base:,.0f} - %{customdata[2]:,.0f} cycles<extra></extra>")
    path = [data.tasks[i] for i in sorted(critical)]
    if path:
        fig.add_bar(name="critical path", orientation="h", y=[t["track"] for t in path],
                    x=[t["cycles"] for t in path], base=[t["start"] for t in path],
                    marker=dict(color="rgba(0,0,0,0)", line=dict(color=CRITICAL_COLOR, width=3)),
                    customdata=[[t["name"]] for t in path],
                    hovertemplate="critical: %{customdata[0]}<extra></extra>")
    tracks = _track_order(data)
    fig.update_yaxes(categoryorder="array", categoryarray=tracks[::-1], title="track")
    fig.update_xaxes(title="NCE cycles", rangeslider=dict(visible=True))
    return _layout(fig, "Timeline (drag to zoom; critical path outlined in red)",
                   barmode="overlay", height=max(HEIGHT, 60 + 40 * len(tracks)))


def layer_cycles(data: ReportData) -> go.Figure:
    """Per layer, the busy cycles of each engine kind, stacked."""
    fig = go.Figure()
    names = [r["layer"] for r in data.compute]
    for engine, key in (("DPU", "dpu_cycles"), ("ACT_SHAVE", "shave_cycles"),
                        ("DMA", "dma_cycles")):
        fig.add_bar(name=engine, x=names, y=[r[key] for r in data.compute],
                    marker=dict(color=ENGINE_COLORS[engine]))
    fig.update_xaxes(title="layer", type="category")
    fig.update_yaxes(title="busy cycles (summed over engines)")
    return _layout(fig, "Cycles per layer, by engine", barmode="stack")


def _most_cycles(data: ReportData, count: int) -> set[str]:
    """The ``count`` layers of longest span: the ones worth a label."""
    ranked = sorted(data.compute, key=lambda r: r["cycles"] or 0, reverse=True)
    return {r["layer"] for r in ranked[:count]}


def roofline(data: ReportData) -> go.Figure:
    """Each layer with MACs: 2*MACs per DDR byte against achieved GOP/s over its span.
    Only the ``ROOFLINE_LABELS`` longest layers carry their name on the plot (a model's
    dozens of names would cover each other), each where it covers no other label and no
    other point (``label_placement``), or not at all; every point names its layer on hover."""
    roofs = data.roofs
    ghz = roofs["nce_mhz"] / 1000.0
    peaks = roofs["dpu_peak_macs_per_cycle"]
    dpu_roof = 2 * roofs["dpus"] * peaks.get("f16", max(peaks.values())) * ghz
    ddr_gbps = roofs["ddr_bytes_per_cycle"] * ghz
    ddr = {r["layer"]: r["ddr_bytes"] for r in data.bandwidth}
    points, no_ddr = [], []
    for r in data.compute:
        if not r["macs"] or not r["cycles"]:
            continue
        ops = 2 * r["macs"]
        rate = ops / r["cycles"] * ghz
        (points if ddr.get(r["layer"]) else no_ddr).append(
            (r["layer"], ops / ddr[r["layer"]] if ddr.get(r["layer"]) else None, rate))
    ridge = dpu_roof / ddr_gbps
    xs = [p[1] for p in points]
    right = max(xs + [ridge]) * 8
    left = min(xs + [ridge]) / 8
    fig = go.Figure()
    fig.add_scatter(name=f"DDR roof ({ddr_gbps:,.1f} GB/s)", x=[left, ridge, right],
                    y=[left * ddr_gbps, dpu_roof, dpu_roof], mode="lines",
                    line=dict(color="#444", width=2))
    fig.add_scatter(name=f"DPU roof ({dpu_roof:,.0f} GOP/s, f16)", x=[ridge, right],
                    y=[dpu_roof, dpu_roof], mode="lines", line=dict(color=ENGINE_COLORS["DPU"],
                                                                    width=2, dash="dash"))
    labelled = _most_cycles(data, ROOFLINE_LABELS)
    x_range = axis_range([left, right])
    y_range = axis_range([left * ddr_gbps, dpu_roof] + [p[2] for p in points + no_ddr])
    drawn = points + [(name, right, rate) for name, _, rate in no_ddr]
    cycles = {r["layer"]: r["cycles"] or 0 for r in data.compute}
    order = sorted(range(len(drawn)), key=lambda i: -cycles.get(drawn[i][0], 0))
    text, where = place_labels([(p[1], p[2]) for p in drawn],
                               [p[0] if p[0] in labelled else "" for p in drawn], order,
                               x_range, y_range, HEIGHT - MARGIN["t"] - MARGIN["b"])
    if points:
        fig.add_scatter(name="layer", x=xs, y=[p[2] for p in points], mode="markers+text",
                        text=text[:len(points)], customdata=[p[0] for p in points],
                        textposition=where[:len(points)], marker=dict(size=11, color="#2b83ba"),
                        hovertemplate="%{customdata}: %{x:.2f} op/B, %{y:.2f} GOP/s<extra></extra>")
    if no_ddr:
        fig.add_scatter(name="layer without DDR traffic (drawn at the right edge)",
                        x=[right] * len(no_ddr), y=[p[2] for p in no_ddr], mode="markers+text",
                        text=text[len(points):], customdata=[p[0] for p in no_ddr],
                        textposition=where[len(points):],
                        marker=dict(size=12, symbol="triangle-right", color="#7b3294"),
                        hovertemplate="%{customdata}: %{y:.2f} GOP/s, no DDR bytes<extra></extra>")
    fig.update_xaxes(type="log", range=x_range, title="operational intensity (ops per DDR byte)")
    fig.update_yaxes(type="log", range=y_range, title="achieved GOP/s over the layer's span")
    return _layout(fig, "Roofline: layers against the DPU and DDR roofs")


def utilization(data: ReportData) -> go.Figure:
    """Busy share of each track in equal time bins."""
    total = float(data.roofs.get("total_cycles") or data.summary.get("cycles") or 0)
    bins = UTILIZATION_BINS
    width = total / bins if total else 1.0
    busy: dict[str, list[float]] = {name: [0.0] * bins for name in _track_order(data)}
    for t in data.tasks:
        row = busy[t["track"]]
        start, end = t["start"], t["end"]
        first = min(int(start / width), bins - 1)
        for b in range(first, bins):
            lo, hi = b * width, (b + 1) * width
            if lo >= end:
                break
            row[b] += max(0.0, min(end, hi) - max(start, lo))
    centers = [(b + 0.5) * width for b in range(bins)]
    fig = go.Figure()
    for name, row in busy.items():
        fig.add_scatter(name=name, x=centers, y=[100 * v / width for v in row], mode="lines",
                        line=dict(shape="hv", width=1.5))
    fig.update_xaxes(title="NCE cycles")
    fig.update_yaxes(title="busy %", range=[0, 105])
    return _layout(fig, f"Engine utilization over time ({bins} bins of {width:,.0f} cycles)")


def ddr_bandwidth(data: ReportData) -> go.Figure:
    ghz = data.roofs["nce_mhz"] / 1000.0
    peak = data.roofs["ddr_bytes_per_cycle"] * ghz
    total = float(data.roofs.get("total_cycles") or 0)
    steps = data.ddr or [(0.0, 0.0)]
    fig = go.Figure()
    fig.add_scatter(name="DDR in use", x=[c for c, _ in steps] + [total],
                    y=[g for _, g in steps] + [steps[-1][1]], mode="lines", fill="tozeroy",
                    line=dict(shape="hv", color=ENGINE_COLORS["DMA"]))
    fig.add_scatter(name=f"DDR peak ({peak:,.1f} GB/s)", x=[0, total], y=[peak, peak],
                    mode="lines", line=dict(color="#444", dash="dash"))
    fig.update_xaxes(title="NCE cycles")
    fig.update_yaxes(title="GB/s")
    return _layout(fig, "DDR bandwidth over time")


FIGURES = (("timeline", timeline), ("layers", layer_cycles), ("roofline", roofline),
           ("utilization", utilization), ("ddr", ddr_bandwidth))
