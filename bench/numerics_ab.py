"""Simulation with numerics, this tree against another (main), interleaved in fresh processes.

For each model (``bench/model_bench.py``'s zoo models at full size), each round runs one
child process per tree, in alternating order; a child loads the model's blob (compiled
once per tree, cached under ``--cache``), runs ``simulate(program, timing_only=True)``
first as ``model_bench`` does, then ``simulate(program)`` with numerics, and reports that
run's CPU time (user + system: the other jobs of a shared machine do not count) and its
wall time.  Printed per model: each tree's median CPU seconds with the spread (min-max),
and the median of the per-round ratios this/base (each ratio from one round, the two runs
a few seconds apart).

    python bench/numerics_ab.py --base /work/wt/numover-base [--model NAME ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"mobilenet_v3_small": {"size": 224}, "resnet18": {"size": 224},
          "encoder_layer": {"seq": 197, "width": 192, "heads": 3}}

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from vpuc.api import compile, read_blob, simulate, write_blob
name, params, blob = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
if not blob.exists():
    from vpuc.onnx_import import zoo
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / (name + ".onnx"))
        zoo.ZOO[name](seed=0, **params).save(path, name)
        blob.parent.mkdir(parents=True, exist_ok=True)
        write_blob(compile(path), "fb", blob)
program = read_blob(blob)
simulate(program, timing_only=True)
wall, cpu = time.perf_counter(), time.process_time()
result = simulate(program)
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "cycles": result.cycles}))
"""


def child(tree: Path, model: str, cache: Path) -> dict:
    blob = cache / hashlib.sha256(str(tree).encode()).hexdigest()[:12] / f"{model}.blob"
    done = subprocess.run([sys.executable, "-c", CHILD, model, json.dumps(MODELS[model]),
                           str(blob)], capture_output=True, text=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode != 0:
        raise SystemExit(f"{model} in {tree}: the child failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the other tree (main)")
    parser.add_argument("--model", action="append", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/vpuc-numerics-ab"))
    args = parser.parse_args(argv)
    trees = {"base": args.base.resolve(), "this": ROOT}
    for model in args.model or list(MODELS):
        runs: dict[str, list[dict]] = {"base": [], "this": []}
        for name, tree in trees.items():       # compile and cache the blobs first
            child(tree, model, args.cache)
        for r in range(args.rounds):
            for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
                runs[name].append(child(trees[name], model, args.cache))
        if runs["base"][0]["cycles"] != runs["this"][0]["cycles"]:
            print(f"{model}: cycles differ: base {runs['base'][0]['cycles']}, "
                  f"this {runs['this'][0]['cycles']}")
        line = [model]
        for name in ("base", "this"):
            cpu = [run["cpu"] for run in runs[name]]
            line.append(f"{name} {statistics.median(cpu):.3f} s CPU "
                        f"({min(cpu):.3f}-{max(cpu):.3f})")
        ratios = [t["cpu"] / b["cpu"] for b, t in zip(runs["base"], runs["this"])]
        line.append(f"this/base {statistics.median(ratios):.3f} "
                    f"({min(ratios):.3f}-{max(ratios):.3f})")
        print(", ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
