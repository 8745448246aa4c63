"""Where the DPUs' cycles go, layer by layer (issue 13, "balance both tiles"): the zoo's
models compiled with ``--schedule default`` and simulated timing-only, and for each layer
(a graph op or fused block, by its tasks' labels as ``runtime_sim/bound_input.py`` groups
them) with DPU work:

- the busy cycles of each tile's DPU (its variants' spans, dispatch included);
- the layer's ideal: its workloads' compute at the DPU's unpadded rate spread over every
  DPU (``vpuc.cost.bound.ideal_dpu_cycles``, the bound's compute term);
- busiest tile / ideal (mode-grid padding, fetch, setup, tile imbalance) and busiest /
  least busy tile (imbalance alone).

Totals per tile and the run's cycles close the table.  Deterministic: the cost model's
cycles, not this machine's time.  ``--small`` uses the test sizes of
``tests/onnx_import/test_schedules.py``.

    python bench/dpu_layers_bench.py [--model NAME ...] [--small] [--top N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime_sim.bound_input import program_bound  # noqa: E402
from runtime_sim.layer_report import layer_of  # noqa: E402
from runtime_sim.plan import DPU  # noqa: E402
from vpuc import api  # noqa: E402
from bench.schedule_bench import FULL, SMALL  # noqa: E402


def measure(name: str, small: bool, workdir: Path) -> dict:
    path = (SMALL if small else FULL)[name]().save(workdir / f"{name}.onnx", name)
    program = api.compile(path, schedule="default")
    sim = api.simulate(program, timing_only=True)
    plan, timeline = sim.result.plan, sim.result.timeline
    bound = program_bound(plan, timeline)
    ideal = {layer.name: layer.compute for layer in bound.layers}
    busy: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    tiles = sorted({plan.queue_keys[q][1] for q in range(len(plan.queue_keys))
                    if plan.queue_kind[q] == DPU})
    for unit, label in enumerate(plan.names):
        if plan.kind[unit] == DPU:
            layer = layer_of(label)      # the bound's layers (runtime_sim/bound_input.py)
            tile = plan.queue_keys[plan.queue_of[unit]][1]
            busy[layer][tile] += timeline.end[unit] - timeline.start[unit]
    layers = []
    for layer, per_tile in busy.items():
        cycles = [per_tile.get(t, 0.0) for t in tiles]
        layers.append({"layer": layer, "tiles": cycles, "ideal": ideal.get(layer, 0.0),
                       "over_ideal": max(cycles) / ideal[layer] if ideal.get(layer) else None,
                       "imbalance": max(cycles) / min(cycles) if min(cycles) else None})
    return {"model": name, "cycles": sim.cycles, "bound": bound.cycles, "layers": layers,
            "tile_totals": [sum(r["tiles"][i] for r in layers) for i in range(len(tiles))],
            "ideal_total": bound.engine_totals.get("DPU", 0.0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(FULL))
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--top", type=int, default=0, help="only the N layers of most DPU time")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(name, args.small, Path(tmp)) for name in args.model or list(FULL)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['model']}: {r['cycles']:,.0f} cycles, bound {r['bound']:,.0f}; DPU busy per "
              f"tile {' / '.join(f'{t:,.0f}' for t in r['tile_totals'])}, ideal "
              f"{r['ideal_total']:,.0f}")
        layers = sorted(r["layers"], key=lambda x: -max(x["tiles"]))
        for x in layers[:args.top] if args.top else layers:
            over = f"{x['over_ideal']:.2f}" if x["over_ideal"] else "-"
            print(f"  {x['layer'][:44]:44s} {' '.join(f'{t:>9,.0f}' for t in x['tiles'])} "
                  f"ideal {x['ideal']:>9,.0f} busiest/ideal {over:>6s} "
                  f"imbalance {x['imbalance'] or float('inf'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
