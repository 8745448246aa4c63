"""Simulated cycles of GridSample and RoiAlign (vpuc/onnx_import/convert_grid_sample.py,
convert_roi_align.py) at model-like sizes: an optical-flow warp (an image sampled by a
flow field of its own size, every mode and padding) and a Mask R-CNN-style RoiAlign (rois
of a feature map, 7x7 bins of 2x2 samples).  Timing-only, ``--schedule default``:
deterministic cycles of the cost model; with the busiest engine and the gathers' share.

    python bench/sampling_bench.py [--channels 32] [--size 64] [--rois 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from vpuc import api  # noqa: E402
from vpuc.diagnostics import VpucError  # noqa: E402


def _save(path: Path, node, inputs, output_dims, opset: int) -> str:
    graph = helper.make_graph([node], path.stem, inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    onnx.save(model, str(path))
    return str(path)


def warp(workdir: Path, channels: int, size: int, mode: str, padding: str) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, size, size, 2])
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding)
    return _save(workdir / f"warp_{mode}_{padding}.onnx", node, [x, grid], [1, channels, size, size], 16)


def roi_align(workdir: Path, channels: int, size: int, rois: int) -> str:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size]),
              helper.make_tensor_value_info("rois", TensorProto.FLOAT, [rois, 4]),
              helper.make_tensor_value_info("batch", TensorProto.INT64, [rois])]
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=7, output_width=7,
                            sampling_ratio=2, spatial_scale=0.25)
    return _save(workdir / "roi_align.onnx", node, inputs, [rois, channels, 7, 7], 16)


def measure(path: str) -> dict:
    start = time.process_time()
    try:
        program = api.compile(path)
    except VpucError as exc:                 # a compiler limit the case meets: reported, not hidden
        return {"error": str(exc).splitlines()[0].split("error: ", 1)[-1][:160]}
    compile_s = time.process_time() - start
    sim = api.simulate(program, timing_only=True)
    tasks = sum(len(tl.tasks) for tl in program.module.task_lists)
    gathers = sum(1 for tl in program.module.task_lists for t in tl.tasks
                  if str(getattr(t, "kernel", "")).startswith("gather"))
    return {"cycles": round(sim.cycles), "tasks": tasks, "gather_calls": gathers,
            "compile_cpu_s": round(compile_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rois", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for mode in ("bilinear", "nearest", "bicubic"):
            for padding in ("zeros", "border", "reflection"):
                rows[f"GridSample {mode} {padding}"] = measure(warp(work, args.channels, args.size, mode, padding))
        rows["RoiAlign avg 7x7x2x2"] = measure(roi_align(work, args.channels, args.size, args.rois))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"C = {args.channels}, {args.size}x{args.size}, {args.rois} rois; timing-only cycles")
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:32s} error: {row['error']}")
            continue
        print(f"{name:32s} {row['cycles']:>12,} cycles  {row['tasks']:>5} tasks  "
              f"{row['gather_calls']:>4} gather calls  compile {row['compile_cpu_s']} s CPU")


if __name__ == "__main__":
    main()
