"""The ONNX zoo's real topologies (issue 11, "Real models in"), compiled, run and checked.

The nine models the ``onnx`` package ships in ``backend/test/data/light`` (AlexNet,
DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19,
ZFNet-512; opset 9, IR version 3, 1x3x224x224), each given seeded random weights
(``tests/onnx_import/zoo_weights.py``) and, one model at a time:

- compiled from the file as shipped but for the weights (``vpuc.api.compile``: the
  opset converted to 11 at import) under ``--schedule default``: ONNX nodes, tasks,
  compile seconds (wall and this process's CPU time: the machine is shared, so the
  CPU time is the one to compare);
- simulated with numerics on an f16-exact random input: simulated cycles and
  microseconds (NCE clock), the schedule-free lower bound (the busiest engine,
  ``runtime_sim/bound_input.py``) and cycles / bound, simulation seconds (wall, CPU);
- compared with onnxruntime's f32 run on the same input: cosine similarity and
  max |diff| over the output's range (the whole-model tolerance of
  ``docs/onnx-import.md``: cosine >= 0.999, max |diff| <= 1% of the range).

A model that does not compile or run prints its error's first line.  Cycles are the
cost model's (deterministic); the seconds are this machine's, one run each.

    python bench/onnx_zoo_bench.py [--model NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tests.onnx_import.zoo_weights import (MODELS, data_input, light_path,  # noqa: E402
                                           onnxruntime_output, realize)


def compare(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(cosine, max |diff| / range of ``want``) in float64."""
    got, want = (np.asarray(a, np.float64).ravel() for a in (got, want))
    cosine = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    return cosine, float(np.abs(got - want).max() / (want.max() - want.min()))


def measure(name: str, workdir: Path) -> dict:
    from runtime_sim.bound_input import program_bound
    from vpuc import api
    from vpuc.diagnostics import VpucError
    from vpuc.onnx_import.model import input_names
    model = realize(light_path(name))
    path = workdir / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    input_name, shape = data_input(model)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float16).astype(np.float32)
    row: dict = {"model": name, "nodes": len(model.graph.node)}
    try:
        start, cpu = time.perf_counter(), time.process_time()
        program = api.compile(str(path))
        row["compile_s"], row["compile_cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
        row["tasks"] = sum(len(tl.tasks) for tl in program.module.task_lists)
        start, cpu = time.perf_counter(), time.process_time()
        sim = api.simulate(program, {input_names(path)[0][input_name]: x})
        row["run_s"], row["run_cpu_s"] = time.perf_counter() - start, time.process_time() - cpu
    except VpucError as exc:
        row["error"] = exc.diagnostics[0].message.splitlines()[0][:160]
        return row
    except Exception as exc:                  # an internal error is a finding: report it, go on
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        row["error"] = f"internal: {type(exc).__name__}: {first}"
        return row
    bound = program_bound(sim.result.plan, sim.result.timeline)
    row.update(cycles=sim.cycles, us=sim.result.arch.us(sim.cycles), bound=bound.cycles, busiest=bound.busiest_engine[0])
    want = onnxruntime_output(model, x)
    got = next(iter(sim.outputs.values())).astype(np.float32).reshape(want.shape)
    row["cosine"], row["max_diff_over_range"] = compare(got, want)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=MODELS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not light_path("squeezenet").exists():
        print("this onnx package ships no light models (onnx/backend/test/data/light)")
        return 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or MODELS:
            rows.append(measure(name, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'model':13s} {'nodes':>5s} {'tasks':>6s} {'compile s/cpu':>13s} {'run s/cpu':>10s} "
          f"{'cycles':>11s} {'us':>8s} {'bound':>11s} {'busiest':>9s} {'cyc/bound':>9s} "
          f"{'cosine':>9s} {'maxdiff/range':>13s}")
    for r in rows:
        head = f"{r['model']:13s} {r['nodes']:>5d}"
        if "error" in r:
            print(f"{head}  error: {r['error']}")
            continue
        print(f"{head} {r['tasks']:>6,d} {r['compile_s']:>6.1f}/{r['compile_cpu_s']:<6.1f} "
              f"{r['run_s']:>4.1f}/{r['run_cpu_s']:<5.1f} "
              f"{r['cycles']:>11,.0f} {r['us']:>8,.0f} {r['bound']:>11,.0f} {r['busiest']:>9s} "
              f"{r['cycles'] / r['bound']:>9.2f} {r['cosine']:>9.6f} {r['max_diff_over_range']:>13.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
