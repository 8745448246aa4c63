"""Fit the cost model's mechanisms to VPUNN's cycles (the calibration CSV).

The parameters are mechanisms, not rows: the dense efficiency, the depthwise,
pooling and eltwise rates, the CMX fetch and write bandwidths, the per-class
setup, the overlap exponent (DPU), and the DDR read and write latencies (DMA).
The fit is a coordinate search in log space (each parameter scaled up and down
by a step that halves when no parameter improves), minimising the sum of
|log(vpuc / VPUNN)| over the rows: a median-seeking loss, so a few odd rows of
the network do not pull every parameter.  Predictions call ``vpuc.cost`` exactly
as the simulator does (``fidelity_bench.py`` checks the real path on every row).

Run: .venv/bin/python bench/fit_cost_model.py [CSV] [--write]
(--write puts the fitted values into vpuc/cost/archs/npu37xx.toml, each line
commented with this script, the date and the fit's residual.)
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_rows import Row, default_csv, read_rows, workload  # noqa: E402

from vpuc.cost import dpu_cost, load_timing, transfer_cost, transfer_cycles  # noqa: E402
from vpuc.cost.timing import Timing, timing_path  # noqa: E402

DPU_KEYS = ("dense_efficiency", "depthwise_macs_per_cycle", "pool_macs_per_cycle",
            "eltwise_elements_per_cycle", "activation_bytes_per_cycle", "weight_bytes_per_cycle",
            "output_bytes_per_cycle", "setup.dense", "setup.depthwise", "setup.pool",
            "setup.eltwise", "overlap_p")
DMA_KEYS = ("ddr_read_latency_cycles", "ddr_write_latency_cycles")
RATES = {"depthwise_macs_per_cycle": "depthwise", "pool_macs_per_cycle": "pool",
         "eltwise_elements_per_cycle": "eltwise"}
FOLDS = 5
SEED = 12


def values_of(timing: Timing) -> dict[str, float]:
    d, m = timing.dpu, timing.dma
    v = {"dense_efficiency": d.dense_efficiency, "overlap_p": d.overlap,
         "activation_bytes_per_cycle": d.activation_bytes_per_cycle,
         "weight_bytes_per_cycle": d.weight_bytes_per_cycle,
         "output_bytes_per_cycle": d.output_bytes_per_cycle,
         "ddr_read_latency_cycles": m.ddr_read_latency,
         "ddr_write_latency_cycles": m.ddr_write_latency}
    v.update({key: d.rates[cls] for key, cls in RATES.items()})
    v.update({f"setup.{c}": s for c, s in d.setup.items()})
    return v


def with_values(timing: Timing, v: dict[str, float]) -> Timing:
    dpu = replace(timing.dpu, dense_efficiency=v["dense_efficiency"], overlap=v["overlap_p"],
                  activation_bytes_per_cycle=v["activation_bytes_per_cycle"],
                  weight_bytes_per_cycle=v["weight_bytes_per_cycle"],
                  output_bytes_per_cycle=v["output_bytes_per_cycle"],
                  rates={cls: v[key] for key, cls in RATES.items()},
                  setup={c: v[f"setup.{c}"] for c in timing.dpu.setup})
    dma = replace(timing.dma, ddr_read_latency=v["ddr_read_latency_cycles"],
                  ddr_write_latency=v["ddr_write_latency_cycles"])
    return replace(timing, dpu=dpu, dma=dma)


def predict(row: Row, timing: Timing) -> float:
    """The row's cycles as the simulator charges them (dispatch excluded)."""
    if row.kind == "DMA":
        t = transfer_cost(False, row.nbytes, 2, not row.to_ddr, row.nbytes, row.to_ddr,
                          timing.dma)
        return transfer_cycles(t, timing.ddr_bytes_per_cycle)
    return math.ceil(dpu_cost(workload(row), timing.dpu).cycles)


def loss(rows: list[Row], timing: Timing) -> float:
    return sum(abs(math.log(predict(r, timing) / r.vpunn)) for r in rows)


def fit(rows: list[Row], start: Timing) -> Timing:
    """Coordinate search in log space over the mechanisms the rows can see."""
    v = values_of(start)
    keys = [k for k in DPU_KEYS if any(r.kind == "DPU" for r in rows)]
    keys += [k for k in DMA_KEYS if any(r.kind == "DMA" for r in rows)]
    best = loss(rows, with_values(start, v))
    step = math.log(2.0)
    while step > 0.004:
        improved = False
        for key in keys:
            for sign in (1, -1):
                trial = dict(v)
                trial[key] = v[key] * math.exp(sign * step)
                if key == "overlap_p" and trial[key] < 1:
                    continue
                value = loss(rows, with_values(start, trial))
                if value < best - 1e-9:
                    best, v, improved = value, trial, True
        if not improved:
            step /= 2
    return with_values(start, v)


def fit_by_kind(rows: list[Row], start: Timing) -> Timing:
    """DPU and DMA parameters do not interact: fit them apart (faster, same optimum)."""
    timing = fit([r for r in rows if r.kind == "DPU"], start)
    return fit([r for r in rows if r.kind == "DMA"], timing)


def held_out(rows: list[Row], folds: list[list[Row]], start: Timing) -> dict[str, float]:
    ratios = {}
    for fold in folds:
        ids = {r.id for r in fold}
        timing = fit_by_kind([r for r in rows if r.id not in ids], start)
        ratios.update({r.id: predict(r, timing) / r.vpunn for r in fold})
    return ratios


def cross_validate(rows: list[Row], start: Timing | None = None):
    """[(title, {row id: held-out ratio})] for leave-one-family-out and k-fold."""
    start = start or load_timing("NPU37XX")
    families: dict[str, list[Row]] = {}
    for r in rows:
        families.setdefault(r.family, []).append(r)
    shuffled = list(rows)
    random.Random(SEED).shuffle(shuffled)
    kfold = [shuffled[i::FOLDS] for i in range(FOLDS)]
    return [("leave-one-family-out", held_out(rows, list(families.values()), start)),
            (f"{FOLDS}-fold", held_out(rows, kfold, start))]


def write_toml(timing: Timing, rows: list[Row], path: Path) -> None:
    dpu = [r for r in rows if r.kind == "DPU"]
    dma = [r for r in rows if r.kind == "DMA"]
    stamp = datetime.date.today().isoformat()
    residual = {"DPU": loss(dpu, timing) / len(dpu), "DMA": loss(dma, timing) / len(dma)}
    v = values_of(timing)
    text = path.read_text(encoding="utf-8")

    def note(kind: str) -> str:
        return (f"# fitted: bench/fit_cost_model.py {stamp}, {len(dpu if kind == 'DPU' else dma)} "
                f"{kind} rows, mean |log residual| {residual[kind]:.3f}")

    def put(key: str, value: str, kind: str) -> None:
        nonlocal text
        pattern = re.compile(rf"^{re.escape(key)} = .*$", re.M)
        if not pattern.search(text):
            raise SystemExit(f"{path}: no line for {key}")
        text = pattern.sub(f"{key} = {value}  {note(kind)}", text, count=1)

    for key in DPU_KEYS:
        if not key.startswith("setup."):
            put(key, f"{v[key]:.4g}", "DPU")
    setup = ", ".join(f"{c} = {v[f'setup.{c}']:.4g}" for c in timing.dpu.setup)
    put("setup_cycles", f"{{ {setup} }}", "DPU")
    for key in DMA_KEYS:
        put(key, f"{v[key]:.4g}", "DMA")
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", type=Path, default=default_csv())
    parser.add_argument("--write", action="store_true", help="update the timing TOML")
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    start = load_timing("NPU37XX")
    timing = fit_by_kind(rows, start)
    for key, value in values_of(timing).items():
        print(f"{key:<28} {values_of(start)[key]:>10.4g} -> {value:.4g}")
    for kind in ("DPU", "DMA"):
        part = [r for r in rows if r.kind == kind]
        print(f"{kind}: mean |log residual| {loss(part, start) / len(part):.3f} -> "
              f"{loss(part, timing) / len(part):.3f}")
    if args.write:
        write_toml(timing, rows, timing_path("NPU37XX"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
