"""Layers split over their reduction (``vpuc/fusion/lower_dpu_ksplit*.py``): the split the
cost model chose against every other candidate that fits, in simulated cycles.

For each layer: every candidate split (rows, output channels, reduction per chunk)
is compiled with its choice forced and simulated timing-only; the table gives the
cost model's list-schedule estimate and the simulated cycles of each, and the
summary the chosen split's simulated cycles over the best candidate's (the floor
among the peers, target 1.0), over the median candidate's, and over the schedule-free
lower bound of the run (``runtime_sim/bound_input.py``).  Simulated cycles are
deterministic, so one run each.  Also the rank correlation (Spearman) of estimate
and simulation over the candidates.

Run: .venv/bin/python bench/ksplit_bench.py [--layer NAME ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vpuc import api  # noqa: E402
from vpuc.fusion.lower_dpu_ksplit import KSplitLayer  # noqa: E402
from vpuc.onnx_import.zoo import ModelBuilder  # noqa: E402


def gemm(m_rows: int, k: int, n: int):
    def build(m: ModelBuilder):
        return m.node("Relu", [m.node("Gemm", [m.input("x", [m_rows, k]), m.weight((n, k)),
                                               m.weight((n,), 0.1)], transB=1)]), (m_rows, k)
    return build


def conv(c: int, oc: int, h: int, w: int):
    def build(m: ModelBuilder):
        return m.node("Conv", [m.input("x", [1, c, h, w]), m.weight((oc, c, 3, 3)),
                               m.weight((oc,), 0.1)], kernel_shape=[3, 3],
                      pads=[1, 1, 1, 1]), (1, c, h, w)
    return build


LAYERS = {   # name: (builder, cmx budget)
    "gemm_1x200000x16": (gemm(1, 200_000, 16), None),
    "gemm_8x4096x64": (gemm(8, 4096, 64), 64 * 1024),
    "gemm_32x2048x96": (gemm(32, 2048, 96), 48 * 1024),
    "conv_512x3x3_to_32_8x8": (conv(512, 32, 8, 8), 64 * 1024),
}


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 2 else float("nan")


def measure(name: str, build, budget: int | None, tmp: Path) -> dict:
    m = ModelBuilder(seed=0, opset=17)
    out, shape = build(m)
    m.output(out)
    path = m.save(tmp / f"{name}.onnx", name)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float16)
    original = KSplitLayer.choose
    seen: dict = {}

    def recording(self):
        seen["estimates"] = {s: self.schedule(s).makespan() for s in self.candidates()}
        seen["chosen"] = original(self)
        return seen["chosen"]

    KSplitLayer.choose = recording
    try:
        program = api.compile(path, cmx_budget=budget)
        simulated = {}
        for split in seen["estimates"]:
            KSplitLayer.choose = lambda self, s=split: s
            sim = api.simulate(api.compile(path, cmx_budget=budget), {"x": x}, timing_only=True)
            simulated[split] = sim.cycles
    finally:
        KSplitLayer.choose = original
    chosen_sim = api.simulate(program, {"x": x}, timing_only=True)
    from runtime_sim.report import summary_data
    bound = summary_data(chosen_sim.result.plan, chosen_sim.result.timeline)["bound"]["cycles"]
    splits = list(seen["estimates"])
    return dict(name=name, chosen=seen["chosen"], estimates=seen["estimates"],
                simulated=simulated, chosen_cycles=chosen_sim.cycles, bound=bound,
                rho=spearman([seen["estimates"][s] for s in splits],
                             [simulated[s] for s in splits]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layer", action="append", choices=sorted(LAYERS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.layer or list(LAYERS):
            build, budget = LAYERS[name]
            r = measure(name, build, budget, Path(tmp))
            print(f"\n{name} (budget {budget or 'default'}): rows cols depth   estimate   simulated")
            for s in sorted(r["simulated"], key=r["simulated"].get):
                mark = "  <- chosen" if s == r["chosen"] else ""
                print(f"  {s.rows:5d} {s.cols:4d} {s.depth:6d} {r['estimates'][s]:10.0f} "
                      f"{r['simulated'][s]:11.0f}{mark}")
            values = list(r["simulated"].values())
            print(f"  chosen/best {r['chosen_cycles'] / min(values):.3f}  chosen/median "
                  f"{r['chosen_cycles'] / statistics.median(values):.3f}  chosen/bound "
                  f"{r['chosen_cycles'] / r['bound']:.2f}  spearman(estimate, simulated) "
                  f"{r['rho']:.2f}  candidates {len(values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
