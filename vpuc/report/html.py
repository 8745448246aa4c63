"""One self-contained HTML file from a report directory, and the ``vpuc report`` command.

plotly's JavaScript is embedded once (``include_plotlyjs=True`` on the first figure),
so the file opens offline; every figure is a ``div`` with id ``plot-<key>`` (the
browser test counts what rendered in each).
"""

from __future__ import annotations

import html
from pathlib import Path

from vpuc.fileio import write_atomically
from vpuc.report.data import ReportData, read_report_dir
from vpuc.report.plots import FIGURES

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1em 2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} th{{background:#f4f4f4}}
td:first-child{{text-align:left}}</style></head>
<body><h1>{title}</h1>
<p>{headline}</p>
{engines}
{figures}
</body></html>
"""


def _engines_table(data: ReportData) -> str:
    rows = "".join(f"<tr><td>{html.escape(e['name'])}</td><td>{e['units']:,}</td>"
                   f"<td>{e['busy_cycles']:,.0f}</td><td>{e['busy_percent']:.1f}%</td>"
                   f"<td>{e['stall_cycles']:,.0f}</td></tr>"
                   for e in data.summary.get("engines", []))
    return ("<table><tr><th>engine</th><th>units</th><th>busy cycles</th><th>busy</th>"
            f"<th>barrier stall</th></tr>{rows}</table>")


def _headline(data: ReportData) -> str:
    s = data.summary
    dma = s.get("dma", {})
    path = s.get("critical_path", {})
    return html.escape(
        f"{s.get('cycles', 0):,} cycles = {s.get('time_us', 0):,} us at {s.get('nce_mhz', 0):g} "
        f"MHz; {s.get('units', 0):,} units in {len(data.compute)} layers; "
        f"{s.get('dpu_macs', 0):,} MACs; DMA {dma.get('bytes', 0):,} bytes "
        f"({dma.get('ddr_bytes', 0):,} to/from DDR, {dma.get('achieved_gbps', 0)} GB/s); "
        f"critical path {path.get('units', 0)} units, {path.get('cycles', 0):,} cycles")


def render_html(data: ReportData, title: str) -> str:
    parts = []
    for i, (key, make) in enumerate(FIGURES):
        parts.append(make(data).to_html(full_html=False, include_plotlyjs=(i == 0),
                                        div_id=f"plot-{key}",
                                        config={"displaylogo": False, "responsive": True}))
    return PAGE.format(title=html.escape(title), headline=_headline(data),
                       engines=_engines_table(data), figures="\n".join(parts))


def write_html(directory: Path, output: Path, title: str | None = None) -> None:
    data = read_report_dir(directory)
    name = title or f"vpuc report: {data.summary.get('file', directory)}"
    write_atomically(output, render_html(data, name))


def add_report_parser(sub) -> None:
    rep = sub.add_parser("report", help="render a --report-dir or a sweep result as one "
                                        "offline HTML file",
                         description="Render DIR (written by `vpuc run --report-dir DIR`) as one "
                                     "self-contained HTML file: timeline, cycles per layer, "
                                     "roofline, utilization and DDR bandwidth over time.  A "
                                     "sweep result (`vpuc sweep -o DIR`) becomes its sweep "
                                     "page: Pareto front of cycles against the cost proxy, "
                                     "parallel coordinates, the best point per model.")
    rep.add_argument("dir", metavar="DIR", help="a directory written by `vpuc run --report-dir` "
                                                "or by `vpuc sweep -o`")
    rep.add_argument("-o", "--output", metavar="HTML",
                     help="the HTML file to write (default: DIR/report.html; for a sweep, DIR "
                          "with .html)")
    rep.set_defaults(handler=cmd_report)


def cmd_report(args) -> int:
    from vpuc.report.sweep_page import is_sweep_result, write_sweep_page
    directory = Path(args.dir)
    if is_sweep_result(directory):
        output = Path(args.output) if args.output else directory.with_suffix(".html")
        write_sweep_page(directory, output)
        print(f"{output}: HTML page of the sweep {directory}")
        return 0
    output = Path(args.output) if args.output else directory / "report.html"
    write_html(directory, output)
    print(f"{output}: HTML report of {directory}")
    return 0
