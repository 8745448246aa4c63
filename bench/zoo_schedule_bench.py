"""Schedules of real ONNX-zoo topologies against their bounds (issue 13 beyond the three
models ``schedule_bench.py`` measures): Inception v2, DenseNet-121, ResNet-50 and
SqueezeNet as the ``onnx`` package ships them (``onnx/backend/test/data/light``, opset 9,
converted to 11 at import), with seeded random weights (``tests/onnx_import/zoo_weights.py``,
as ``onnx_zoo_bench.py`` gives them), each compiled with ``--schedule naive`` and
``default`` and simulated timing-only, one at a time:

- simulated cycles of each schedule (deterministic: the cost model's, not this
  machine's time), the default program's schedule-free lower bound (the busiest
  engine, ``runtime_sim/bound_input.py``) and which engine it is;
- the per-layer roofline sum (each layer's larger of compute and DDR cycles, summed)
  and default over it, the figure these topologies were far from;
- how many DMAs of the default program are element-by-element permuting copies
  (``DmaMode.PERMUTE``), the stores a value laid out in the graph's order costs.

``--no-naive`` skips the naive schedule (the slow half on DenseNet-121).

    python bench/zoo_schedule_bench.py [--model NAME ...] [--no-naive] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.schedule_bench import schedules_row  # noqa: E402
from vpuc.ir.tasks import DmaMode, DmaTask  # noqa: E402
from tests.onnx_import.zoo_weights import MODELS as ZOO, light_path, realize  # noqa: E402

MODELS = ("inception_v2", "densenet121", "resnet50", "squeezenet")


def permute_dmas(program) -> int:
    """The default program's DMAs that copy element by element (``DmaMode.PERMUTE``)."""
    return sum(1 for tasks in program.module.task_lists for t in tasks.tasks
               if isinstance(t, DmaTask) and t.mode is DmaMode.PERMUTE)


def measure(name: str, path: Path, naive: bool) -> dict:
    row, program = schedules_row(name, path, ("naive", "default") if naive else ("default",))
    row["permute_dmas"] = permute_dmas(program)
    row["default_over_bound"] = row["default"] / row["bound"]
    row["default_over_per_layer"] = row["default"] / row["per_layer_bound"]
    if naive:
        row["naive_over_default"] = row["naive"] / row["default"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=ZOO,
                        help=f"any of the nine (default: {', '.join(MODELS)})")
    parser.add_argument("--no-naive", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import onnx
    rows = []
    for name in args.model or MODELS:
        if not light_path(name).is_file():
            print(f"zoo_schedule_bench: {light_path(name)}: this onnx {onnx.__version__} does "
                  "not ship the model", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(realize(light_path(name)), str(path))
            rows.append(measure(name, path, not args.no_naive))
        if not args.json:
            print(f"... {name} done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':14s} {'naive':>11s} {'default':>11s} {'bound':>11s} {'busiest':>10s} "
          f"{'def/bound':>9s} {'per-layer':>11s} {'def/p-l':>7s} {'naive/def':>9s} {'permute':>7s}")
    for r in rows:
        naive = f"{r['naive']:>11,.0f}" if "naive" in r else f"{'-':>11s}"
        ratio = f"{r['naive_over_default']:>9.2f}" if "naive" in r else f"{'-':>9s}"
        print(f"{r['model']:14s} {naive} {r['default']:>11,.0f} {r['bound']:>11,.0f} "
              f"{r['busiest']:>10s} {r['default_over_bound']:>9.2f} {r['per_layer_bound']:>11,.0f} "
              f"{r['default_over_per_layer']:>7.2f} {ratio} {r['permute_dmas']:>7d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
