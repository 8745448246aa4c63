"""A CNN's schedule against the CMX floor of its DDR-bound tail (issue 13; docs/simulator.md,
"Lower bound": ResNet-18's 1,354,133 cycles).  The model is compiled under ``--schedule
default`` and simulated timing-only once; its layers (``layer_of``, ordered by their first
DPU variant) split into the *head*, up to the last layer whose weights cost less DDR time
than its DPU work, and the *tail* after it (ResNet-18's stage 4 and classifier).  The floor
of any schedule that computes each output in one step is the head's ideal DPU work, then the
tail's weights that CMX cannot hold at the boundary at the DDR's rate (every tail weight
counted: the document's argument leaves out the 1x1 downsample's, 14,016 cycles less).
The cycles above the floor are exactly (a) + (b) + (c):

(a) the head: when its last DPU variant ends against its ideal work (the bound's compute
    term over every DPU), per layer, split into each DPU's busy time above the ideal (MPE
    mode padding, the p-norm overlap of the fetch terms with compute, setup and dispatch)
    and the DPUs' idle gaps before the layer's variants, by what ended last before them
    (``Timeline.cause``: a DMA of weights, another DMA, a DPU or ACT SHAVE task), or after
    a DPU's last head variant until the boundary, or a DPU's tail variants before it;
(b) the tail's weights (read from constants) already in CMX at the boundary, against all
    of CMX (the bytes short of it over the DDR's rate), and what each tile holds then (CMX buffers live from their first user's
    start to their last user's end);
(c) the tail: its time against the DDR time of the tail's weights still to read, and the
    DDR's idle and partly used time after the boundary (``Timeline.ddr_samples``).

    python bench/tail_floor.py [--model NAME] [--small] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.schedule_bench import FULL, SMALL  # noqa: E402
from runtime_sim.bound_input import layer_work  # noqa: E402
from runtime_sim.engines.dpu import workload  # noqa: E402
from runtime_sim.layer_report import layer_of  # noqa: E402
from runtime_sim.plan import DMA, DPU  # noqa: E402
from vpuc import api  # noqa: E402
from vpuc.cost.bound import ideal_dpu_cycles  # noqa: E402
from vpuc.cost.dpu import choose_mode, dpu_cost  # noqa: E402
from vpuc.ir.module import BufferKind  # noqa: E402
from vpuc.ir.tasks import DpuOp  # noqa: E402

LOSSES = ("padding", "fetch overlap", "setup+dispatch", "idle: weights DMA", "idle: other DMA",
          "idle: DPU", "idle: ACT SHAVE", "idle: start", "idle: end", "tail work")


def split_layers(plan, timeline) -> tuple[list[str], list[str], dict]:
    """(head layers, tail layers, per-layer work): layers with DPU work in the order of their
    first variant, the tail starting after the last one whose DDR time is under its DPU
    time (the bound's per-layer terms; a layer reading nothing from DDR, a global pool, joins
    the side it lies on)."""
    work = {w.name: w for w in layer_work(plan, timeline)}
    first: dict[str, float] = {}
    for u in range(plan.size):
        if plan.kind[u] == DPU:
            name = layer_of(plan.names[u])
            first[name] = min(first.get(name, math.inf), timeline.start[u])
    order = sorted(first, key=first.get)
    dpus = plan.arch.structure.tiles * plan.arch.structure.dpus_per_tile
    rate = plan.arch.ddr_bytes_per_cycle
    compute_bound = [i for i, n in enumerate(order)
                     if 0 < work[n].ddr_bytes / rate < work[n].dpu_cycles / dpus]
    cut = compute_bound[-1] + 1 if compute_bound else 0
    return order[:cut], order[cut:], work


def dpu_losses(plan, timeline, head: list[str], boundary: float) -> dict[str, dict[str, float]]:
    """Head layer -> loss kind -> DPU cycles (summed over DPUs) up to ``boundary``."""
    order, head = head, set(head)
    params = plan.arch.dpu
    out: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(LOSSES, 0.0))
    by_engine: dict[tuple, list[int]] = defaultdict(list)
    for u in range(plan.size):
        if plan.kind[u] == DPU and timeline.start[u] < boundary:
            by_engine[(plan.queue_of[u], timeline.engine[u])].append(u)
    for units in by_engine.values():
        units.sort(key=lambda u: timeline.start[u])
        previous_end, last = 0.0, None
        for u in units:
            layer = layer_of(plan.names[u])
            if layer not in head:
                # a tail variant before the boundary: this DPU's time, charged to the head
                # layer before it (none yet: the first head layer's)
                row = last if last is not None else out[min(head, key=order.index)]
                row["tail work"] += min(timeline.end[u], boundary) - max(
                    timeline.start[u], previous_end)
                row[_idle_kind(plan, timeline.cause[u])] += max(
                    0.0, timeline.start[u] - previous_end)
                previous_end = timeline.end[u]
                continue
            row = last = out[layer]
            gap = timeline.start[u] - previous_end
            if gap > 0:
                row[_idle_kind(plan, timeline.cause[u])] += gap
            previous_end = timeline.end[u]
            if plan.task[u].op is DpuOp.PERMUTE:
                row["setup+dispatch"] += timeline.end[u] - timeline.start[u]
                continue
            tensors = {k: r.type for k, r in plan.dpu_regions(u).items()}
            w = workload(plan.task[u], plan.variant[u], tensors)
            cost = dpu_cost(w, params, choose_mode(w, params))
            ideal = ideal_dpu_cycles(w, params)
            row["padding"] += cost.compute - ideal
            row["fetch overlap"] += cost.streaming - cost.compute
            row["setup+dispatch"] += (timeline.end[u] - timeline.start[u]) - cost.streaming
        if last is not None:    # this DPU done before the other: charged to its last layer
            last["idle: end"] += max(0.0, boundary - previous_end)
    return out


def _idle_kind(plan, cause: int) -> str:
    if cause < 0:
        return "idle: start"
    kind = plan.kind[cause]
    if kind == DMA:
        src, _ = plan.dma_regions(cause)
        return "idle: weights DMA" if src.kind is BufferKind.CONST else "idle: other DMA"
    return "idle: DPU" if kind == DPU else "idle: ACT SHAVE"


def tail_weights(plan, timeline, tail: set[str], boundary: float) -> tuple[float, float]:
    """(bytes of the tail's constants read from DDR into CMX, those read by ``boundary``)."""
    total = done = 0.0
    for u in range(plan.size):
        if plan.kind[u] != DMA or layer_of(plan.names[u]) not in tail:
            continue
        src, dst = plan.dma_regions(u)
        if src.kind is not BufferKind.CONST or dst.kind is not BufferKind.CMX:
            continue
        nbytes = dst.type.nbytes
        total += nbytes
        start, end = timeline.start[u], timeline.end[u]
        if end <= boundary:
            done += nbytes
        elif start < boundary:
            done += nbytes * (boundary - start) / (end - start)
    return total, done


def cmx_at(plan, timeline, when: float) -> dict[int, dict[str, int]]:
    """Tile -> layer of the buffer's first user -> CMX bytes live at ``when``."""
    life: dict[str, list] = {}
    for u in range(plan.size):
        if plan.kind[u] == DMA:
            regions = plan.dma_regions(u)
        elif plan.kind[u] == DPU:
            regions = tuple(plan.dpu_regions(u).values())
        else:
            continue
        for r in regions:
            if r.root.kind is not BufferKind.CMX:
                continue
            span = life.setdefault(r.root.name, [math.inf, 0.0, r.root, ""])
            if timeline.start[u] < span[0]:
                span[0], span[3] = timeline.start[u], layer_of(plan.names[u])
            span[1] = max(span[1], timeline.end[u])
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for start, end, root, layer in life.values():
        if start <= when < end:
            out[root.tile][layer] += root.type.nbytes
    return out


def ddr_use(timeline, rate: float, since: float, until: float) -> dict[str, float]:
    """Bytes the DDR moved in [since, until), cycles it idled, cycles at full rate."""
    moved = idle = full = 0.0
    samples = timeline.ddr_samples + [(until, 0.0)]
    for (t0, r), (t1, _) in zip(samples, samples[1:]):
        a, b = max(t0, since), min(t1, until)
        if b <= a:
            continue
        moved += r * (b - a)
        idle += (b - a) if r <= 1e-9 else 0.0
        full += (b - a) if r >= rate * (1 - 1e-9) else 0.0
    return {"bytes": moved, "idle": idle, "full_rate": full}


def measure(name: str, path: Path) -> dict:
    program = api.compile(path, schedule="default")
    sim = api.simulate(program, timing_only=True)
    plan, timeline = sim.result.plan, sim.result.timeline
    head, tail, work = split_layers(plan, timeline)
    structure = plan.arch.structure
    dpus = structure.tiles * structure.dpus_per_tile
    rate = plan.arch.ddr_bytes_per_cycle
    boundary = max(timeline.end[u] for u in range(plan.size)
                   if plan.kind[u] == DPU and layer_of(plan.names[u]) in set(head))
    head_ideal = sum(work[n].dpu_cycles for n in head) / dpus
    weights, resident = tail_weights(plan, timeline, set(tail), boundary)
    cmx = structure.tiles * structure.cmx_bytes
    floor = head_ideal + max(0.0, weights - cmx) / rate
    losses = dpu_losses(plan, timeline, head, boundary)
    tiles = cmx_at(plan, timeline, boundary)
    return {
        "model": name, "cycles": sim.cycles, "head": head, "tail": tail,
        "boundary": boundary, "head_ideal": head_ideal, "floor": floor,
        "head_losses": {n: {k: v / dpus for k, v in losses[n].items()} for n in head},
        "tail_weight_bytes": weights, "tail_weights_in_cmx": resident, "cmx_bytes": cmx,
        "ddr_bytes_per_cycle": rate,
        "cmx_at_boundary": {t: dict(sorted(v.items(), key=lambda kv: -kv[1]))
                            for t, v in sorted(tiles.items())},
        "tail_cycles": sim.cycles - boundary,
        "tail_ddr_floor": (weights - resident) / rate,
        "tail_ddr": ddr_use(timeline, rate, boundary, sim.cycles),
        "head_ddr": ddr_use(timeline, rate, 0.0, boundary),
    }


def report(r: dict) -> None:
    short = (min(r["cmx_bytes"], r["tail_weight_bytes"]) - r["tail_weights_in_cmx"]) \
        / r["ddr_bytes_per_cycle"]
    print(f"{r['model']}: {r['cycles']:,.0f} cycles; floor {r['floor']:,.0f} "
          f"({r['cycles'] / r['floor']:.3f}x); above it {r['cycles'] - r['floor']:,.0f}: "
          f"(a) head {r['boundary'] - r['head_ideal']:,.0f} + (b) CMX short {short:,.0f} "
          f"+ (c) tail over its DDR {r['tail_cycles'] - r['tail_ddr_floor']:,.0f}")
    print(f"(a) head ({len(r['head'])} layers) ends {r['boundary']:,.0f}, ideal "
          f"{r['head_ideal']:,.0f}: {r['boundary'] - r['head_ideal']:,.0f} lost "
          "(per DPU, cycles):")
    print(f"  {'layer':28s}" + "".join(f"{k:>18s}" for k in LOSSES) + f"{'total':>10s}")
    sums = dict.fromkeys(LOSSES, 0.0)
    for name, row in r["head_losses"].items():
        for k in LOSSES:
            sums[k] += row[k]
        print(f"  {name:28s}" + "".join(f"{row[k]:>18,.0f}" for k in LOSSES)
              + f"{sum(row.values()):>10,.0f}")
    print(f"  {'all':28s}" + "".join(f"{sums[k]:>18,.0f}" for k in LOSSES)
          + f"{sum(sums.values()):>10,.0f}")
    print(f"(b) tail weights {r['tail_weight_bytes']:,.0f} B; in CMX at the boundary "
          f"{r['tail_weights_in_cmx']:,.0f} B of {r['cmx_bytes']:,} B; CMX live then:")
    for tile, layers in r["cmx_at_boundary"].items():
        text = ", ".join(f"{n} {b:,}" for n, b in layers.items())
        print(f"  tile {tile}: {sum(layers.values()):,} B: {text}")
    d = r["tail_ddr"]
    print(f"(c) tail {r['tail_cycles']:,.0f} cycles; its weights' DDR time left "
          f"{r['tail_ddr_floor']:,.0f}; DDR after the boundary moved {d['bytes']:,.0f} B, "
          f"idle {d['idle']:,.0f}, full rate {d['full_rate']:,.0f} cycles")
    h = r["head_ddr"]
    print(f"    head: DDR moved {h['bytes']:,.0f} B, idle {h['idle']:,.0f} cycles")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(FULL))
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or ["resnet18"]:
            path = (SMALL if args.small else FULL)[name]().save(Path(tmp) / f"{name}.onnx", name)
            rows.append(measure(name, path))
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    for r in rows:
        report(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
