"""The sweep page of ``vpuc report``: a sweep result (``vpuc sweep -o DIR``) as one offline file.

Three views of the points that ran: the Pareto front of cycles against the spec's cost
proxy (per model, since cycles of different models do not compare), parallel
coordinates over the parameters, the cost and the cycles, and the best point of each
model; then the points that failed, with their errors.  Like the run report it reads
files only (the Parquet parts) and embeds plotly's JavaScript once; figures are divs
with ids ``plot-pareto`` and ``plot-parallel``.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import plotly.graph_objects as go

from vpuc.fileio import write_atomically

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1em 2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} th{{background:#f4f4f4}}
td:first-child{{text-align:left}} pre{{white-space:pre-wrap;text-align:left;margin:0}}</style>
</head><body><h1>{title}</h1>
<p>{headline}</p>
<h2>Best point per model</h2>
{best}
{figures}
{failed}
</body></html>
"""


def is_sweep_result(path: Path) -> bool:
    from vpuc.sweep.results import parts
    return path.is_dir() and bool(parts(path))


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (cost, cycles), both minimized
    (ties: the first), ordered by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def _hover(row: dict, params: list[str]) -> str:
    return "<br>".join([f"{p} = {row[p]}" for p in params]
                       + [f"cost = {row['cost']:.4g}", f"cycles = {row['cycles']:,.0f}"])


def pareto_figure(rows: list[dict], params: list[str], cost: str) -> go.Figure:
    fig = go.Figure()
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        fig.add_trace(go.Scatter(
            x=[r["cost"] for r in mine], y=[r["cycles"] for r in mine], mode="markers",
            name=f"{model}: points", opacity=0.5, legendgroup=model,
            hovertext=[_hover(r, params) for r in mine], hoverinfo="text"))
        front = [mine[i] for i in pareto_front([(r["cost"], r["cycles"]) for r in mine])]
        fig.add_trace(go.Scatter(
            x=[r["cost"] for r in front], y=[r["cycles"] for r in front], mode="lines+markers",
            line={"shape": "hv"}, name=f"{model}: Pareto front", legendgroup=model,
            hovertext=[_hover(r, params) for r in front], hoverinfo="text"))
    fig.update_layout(title=f"Cycles against the cost proxy ({cost}); the front is the "
                            "points no other beats on both",
                      xaxis_title=f"cost = {cost}", yaxis_title="cycles", yaxis_type="log",
                      height=520)
    return fig


def _dimension(label: str, values: list) -> dict:
    if all(isinstance(v, (int, float)) for v in values):
        return {"label": label, "values": values}
    names = sorted({str(v) for v in values})
    code = {n: i for i, n in enumerate(names)}
    return {"label": label, "values": [code[str(v)] for v in values],
            "tickvals": list(range(len(names))), "ticktext": names}


def parallel_figure(rows: list[dict], params: list[str]) -> go.Figure:
    columns = ["model", *params, "cost", "cycles"]
    dims = [_dimension(c, [r[c] for r in rows]) for c in columns]
    best: dict[str, float] = {}
    for r in rows:
        best[r["model"]] = min(best.get(r["model"], math.inf), r["cycles"])
    # Relative to the model's best point: the models' cycles differ by orders of magnitude.
    colour = [r["cycles"] / best[r["model"]] if best[r["model"]] else 1.0 for r in rows]
    fig = go.Figure(go.Parcoords(
        dimensions=dims,
        line={"color": colour, "colorscale": "Viridis", "reversescale": True,
              "showscale": True, "colorbar": {"title": "cycles / model's best"}}))
    fig.update_layout(title="Parameters, cost and cycles of every point", height=480)
    return fig


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _best_table(rows: list[dict], params: list[str]) -> str:
    best = {}
    for r in rows:
        if r["model"] not in best or (r["cycles"], r["cost"]) < (best[r["model"]]["cycles"],
                                                                  best[r["model"]]["cost"]):
            best[r["model"]] = r
    return _table(["model", "cycles", "time (us)", "cost", *params],
                  [[html.escape(m), f"{r['cycles']:,.0f}",
                    f"{r['time_us']:,.2f}" if r.get("time_us") is not None else "",
                    f"{r['cost']:.4g}", *(html.escape(str(r[p])) for p in params)]
                   for m, r in sorted(best.items())])


def render_sweep_page(rows: list[dict], meta: dict, title: str) -> str:
    params = [p for p in meta.get("parameters", []) if rows and p in rows[0]]
    ok = [r for r in rows if r.get("error") is None and r.get("cycles") is not None]
    failed = [r for r in rows if r.get("error") is not None]
    cost = meta.get("cost", "cost")
    figures = []
    if ok:
        for i, (key, fig) in enumerate((("pareto", pareto_figure(ok, params, cost)),
                                        ("parallel", parallel_figure(ok, params)))):
            figures.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0),
                                       div_id=f"plot-{key}",
                                       config={"displaylogo": False, "responsive": True}))
    failed_html = ""
    if failed:
        failed_html = f"<h2>Points that failed ({len(failed)})</h2>" + _table(
            ["model", *params, "stage", "error"],
            [[html.escape(r["model"]), *(html.escape(str(r[p])) for p in params),
              html.escape(str(r.get("error_stage"))),
              f"<pre>{html.escape(r['error'])}</pre>"] for r in failed])
    models = sorted({r["model"] for r in rows})
    headline = html.escape(f"{len(rows)} points over {len(models)} models "
                           f"({', '.join(models)}); {len(ok)} ran, {len(failed)} failed; "
                           f"parameters: {', '.join(params) or 'none'}; cost proxy: {cost}")
    return PAGE.format(title=html.escape(title), headline=headline,
                       best=_best_table(ok, params) if ok else "<p>No point ran.</p>",
                       figures="\n".join(figures), failed=failed_html)


def write_sweep_page(directory: Path, output: Path, title: str | None = None) -> None:
    from vpuc.sweep.results import read_results, sweep_metadata
    table = read_results(directory)
    rows = table.to_pylist()
    write_atomically(output, render_sweep_page(rows, sweep_metadata(table),
                                               title or f"vpuc sweep: {directory.name}"))
