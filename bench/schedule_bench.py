"""Schedules against their lower bound (issue 13, "Done when"): for ResNet-18,
MobileNetV3-Small (1x3x224x224), the ViT encoder layer (sequence 197, width 192)
from ``vpuc.onnx_import.zoo`` and the BERT front end of ``zoo_bert`` (30522-word
vocabulary, sequence 128, width 192: run-time embedding Gathers, issue 11), each compiled with ``--schedule naive`` and
``default`` and simulated timing-only, one model at a time:

- simulated cycles of each schedule (deterministic: the cost model's, not this
  machine's time), the schedule-free lower bound of the default program
  (``runtime_sim/bound_input.py``: the busiest engine) and which engine it is;
- default / bound (the issue's target: at most 1.3) and naive / default (at
  least 2 on ResNet-18);
- the per-layer roofline sum (each layer's larger of compute and DDR cycles,
  summed: the figure the issue's definition of the bound names) and default
  over it.  It is not a bound of a schedule that overlaps layers, so the
  busiest engine stays the bound; both are shown;
- where the default program's values between segments live: how many stay in
  CMX (``vpuc/fusion/resident.py``) and how many bytes still cross DDR.

``--small`` uses the test sizes of ``tests/onnx_import/test_schedules.py``.

    python bench/schedule_bench.py [--model NAME ...] [--small] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime_sim.bound_input import program_bound  # noqa: E402
from vpuc import api  # noqa: E402
from vpuc.ir.module import BufferKind  # noqa: E402
from vpuc.onnx_import.zoo import encoder_layer, mobilenet_v3_small, resnet18  # noqa: E402
from vpuc.onnx_import.zoo_bert import bert_base_vocab, bert_embeddings_encoder  # noqa: E402

FULL = {"resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small,
        "encoder_layer": encoder_layer, "bert_front_end": bert_base_vocab}
SMALL = {"resnet18": lambda: resnet18(size=32, width=8, classes=10),
         "mobilenet_v3_small": lambda: mobilenet_v3_small(size=64, classes=10),
         "encoder_layer": lambda: encoder_layer(seq=17, width=48, heads=3),
         "bert_front_end": bert_embeddings_encoder}


def schedules_row(name: str, path: Path, schedules=("naive", "default")) -> tuple[dict, object]:
    """The model at ``path`` compiled under each schedule and simulated timing-only: its
    cycles by schedule, and the default program's bound, busiest engine and per-layer
    roofline sum; with the default program."""
    row: dict = {"model": name}
    default = None
    for schedule in schedules:
        program = api.compile(path, schedule=schedule)
        sim = api.simulate(program, timing_only=True)
        row[schedule] = sim.cycles
        if schedule == "default":
            bound = program_bound(sim.result.plan, sim.result.timeline)
            row["bound"], row["busiest"] = bound.cycles, bound.busiest_engine[0]
            row["per_layer_bound"] = bound.per_layer
            default = program
    return row, default


def measure(name: str, small: bool, workdir: Path) -> dict:
    path = (SMALL if small else FULL)[name]().save(workdir / f"{name}.onnx", name)
    row, program = schedules_row(name, path)
    buffers = program.module.buffers
    row["resident_values"] = sum(1 for b in buffers
                                 if b.kind is BufferKind.CMX and "." not in b.name)
    row["ddr_values"] = sum(1 for b in buffers if b.kind is BufferKind.DDR)
    row["default_over_bound"] = row["default"] / row["bound"]
    row["default_over_per_layer"] = row["default"] / row["per_layer_bound"]
    row["naive_over_default"] = row["naive"] / row["default"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(FULL))
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or list(FULL):
            rows.append(measure(name, args.small, Path(tmp)))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':20s} {'naive':>11s} {'default':>11s} {'bound':>11s} {'busiest':>10s} "
          f"{'def/bound':>9s} {'per-layer':>11s} {'def/p-l':>7s} {'naive/def':>9s} {'in CMX':>6s} {'in DDR':>6s}")
    for r in rows:
        print(f"{r['model']:20s} {r['naive']:>11,.0f} {r['default']:>11,.0f} {r['bound']:>11,.0f} "
              f"{r['busiest']:>10s} {r['default_over_bound']:>9.2f} {r['per_layer_bound']:>11,.0f} "
              f"{r['default_over_per_layer']:>7.2f} {r['naive_over_default']:>9.2f} "
              f"{r['resident_values']:>6d} {r['ddr_values']:>6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
