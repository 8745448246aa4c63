"""How close vpuc's cycles are to VPUNN's (Intel's NPU cost model) for NPU37XX (VPU 2.7).

Every row of the calibration CSV runs through the real path: a one-variant DPU
program (operands in CMX) or a one-DMA program is parsed, compiled (``compile``
pipeline) and simulated (timing only); the row's cycles are its unit's duration
minus the runtime's dispatch (VPUNN costs the workload, not its launch).  Per
family: n, median absolute % error, geometric-mean ratio vpuc/VPUNN, min/max
ratio, share within +-10% and +-25%, the worst rows.  Then cross-validation of
the fit (``fit_cost_model.py``): leave-one-family-out and 5-fold, each fold fitted
on the other rows and judged on its own, so overfitting shows.

Targets (held-out): DPU median |error| <= 10%, >= 75% of rows within +-20%,
every family's geometric-mean ratio in [0.85, 1.15]; DMA median |error| <= 10%.

Run: .venv/bin/python bench/fidelity_bench.py [CSV] [--no-cv] [--worst N]
(default CSV: the workplace's calibration set when present, else the copy in bench/data/).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_rows import Row, default_csv, program_text, read_rows  # noqa: E402

from runtime_sim.simarch import load_sim_arch  # noqa: E402
from runtime_sim.simulator import simulate  # noqa: E402
from vpuc.arch import load_arch  # noqa: E402
from vpuc.passes.base import PassContext  # noqa: E402
from vpuc.passes.manager import PassManager  # noqa: E402
from vpuc.passes.registry import parse_pipeline  # noqa: E402
from vpuc.vir.parser import parse_text  # noqa: E402

TARGETS = {"dpu_median": 10.0, "dpu_within20": 75.0, "gmean": (0.85, 1.15), "dma_median": 10.0}


def simulated_cycles(row: Row, arch_name: str = "NPU37XX") -> float:
    """The row's cycles from the compiler and the simulator."""
    module = parse_text(program_text(row), f"<{row.id}>")
    ctx = PassContext(load_arch(module.arch))
    PassManager(parse_pipeline("compile")).run(module, ctx)
    arch = load_sim_arch(arch_name)
    result = simulate(ctx.artifacts["program"], arch, timing_only=True, races=False)
    timeline = result.timeline
    assert len(timeline.start) == 1, "one unit per calibration program"
    dispatch = arch.dispatch["DMA" if row.kind == "DMA" else "DPU"]
    return timeline.end[0] - timeline.start[0] - dispatch


# ------------------------------------------------------------------ statistics

def stats(ratios: list[float]) -> dict[str, float]:
    errors = [abs(r - 1) * 100 for r in ratios]
    return {"n": len(ratios), "median": statistics.median(errors),
            "gmean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "min": min(ratios), "max": max(ratios),
            "w10": 100 * sum(e <= 10 for e in errors) / len(errors),
            "w20": 100 * sum(e <= 20 for e in errors) / len(errors),
            "w25": 100 * sum(e <= 25 for e in errors) / len(errors)}


HEADER = (f"| {'family':<20} | {'n':>3} | {'median abs %':>12} | {'gmean ratio':>11} | "
          f"{'min ratio':>9} | {'max ratio':>9} | {'within 10%':>10} | {'within 25%':>10} |")


def table(rows: list[Row], ratios: list[float]) -> list[str]:
    out = [HEADER, "|" + "|".join("-" * (len(c)) for c in HEADER.split("|")[1:-1]) + "|"]
    groups: dict[str, list[float]] = {}
    for row, ratio in zip(rows, ratios):
        groups.setdefault(row.family, []).append(ratio)
    kinds = {"all DPU": [r for row, r in zip(rows, ratios) if row.kind == "DPU"],
             "all DMA": [r for row, r in zip(rows, ratios) if row.kind == "DMA"]}
    for name, values in list(groups.items()) + list(kinds.items()):
        if not values:
            continue
        s = stats(values)
        out.append(f"| {name:<20} | {s['n']:>3} | {s['median']:>12.1f} | {s['gmean']:>11.3f} | "
                   f"{s['min']:>9.3f} | {s['max']:>9.3f} | {s['w10']:>9.0f}% | {s['w25']:>9.0f}% |")
    return out


def verdict(rows: list[Row], ratios: list[float], title: str) -> list[str]:
    dpu = [r for row, r in zip(rows, ratios) if row.kind == "DPU"]
    dma = [r for row, r in zip(rows, ratios) if row.kind == "DMA"]
    lines = []
    if dpu:
        s = stats(dpu)
        lines.append(f"{title} DPU: median |error| {s['median']:.1f}% (target <= "
                     f"{TARGETS['dpu_median']:g}), within 20% {s['w20']:.0f}% (target >= "
                     f"{TARGETS['dpu_within20']:g})")
        families: dict[str, list[float]] = {}
        for row, r in zip(rows, ratios):
            if row.kind == "DPU":
                families.setdefault(row.family, []).append(r)
        lo, hi = TARGETS["gmean"]
        off = {f: stats(v)["gmean"] for f, v in families.items()
               if not lo <= stats(v)["gmean"] <= hi}
        lines.append(f"{title} families with a geometric-mean ratio outside [{lo}, {hi}]: "
                     + (", ".join(f"{f} {g:.3f}" for f, g in off.items()) or "none"))
    if dma:
        lines.append(f"{title} DMA: median |error| {stats(dma)['median']:.1f}% (target <= "
                     f"{TARGETS['dma_median']:g})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", type=Path, default=default_csv())
    parser.add_argument("--no-cv", action="store_true", help="skip cross-validation")
    parser.add_argument("--worst", type=int, default=3, help="worst rows shown per family")
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    ours = [simulated_cycles(row) for row in rows]
    ratios = [o / row.vpunn for o, row in zip(ours, rows)]
    print(f"fidelity of vpuc against VPUNN on {args.csv.name} ({len(rows)} rows), fitted "
          "parameters of vpuc/cost/archs/npu37xx.toml, every row compiled and simulated:\n")
    print("\n".join(table(rows, ratios)))
    print()
    print("\n".join(verdict(rows, ratios, "in-sample")))
    print("\nworst rows (vpuc / VPUNN):")
    by_family: dict[str, list[tuple[float, Row, float]]] = {}
    for row, o, r in zip(rows, ours, ratios):
        by_family.setdefault(row.family, []).append((abs(math.log(r)), row, o))
    for family, items in by_family.items():
        worst = sorted(items, key=lambda t: -t[0])[:args.worst]
        print(f"  {family}: " + "; ".join(
            f"{row.id} {describe(row)} {o:.0f}/{row.vpunn:.0f} = {o / row.vpunn:.2f}"
            for _, row, o in worst))
    if not args.no_cv:
        from fit_cost_model import cross_validate
        for title, held in cross_validate(rows):
            order = [row for row in rows if row.id in held]
            held_ratios = [held[row.id] for row in order]
            print(f"\n{title} (each row predicted by a fit that never saw it):\n")
            print("\n".join(table(order, held_ratios)))
            print()
            print("\n".join(verdict(order, held_ratios, title)))
    return 0


def describe(row: Row) -> str:
    if row.kind == "DMA":
        return f"{row.nbytes} B"
    (ih, iw, ic), (_, _, oc) = row.in_hwc, row.out_hwc
    return f"{ih}x{iw}x{ic}->{oc}"


if __name__ == "__main__":
    sys.exit(main())
