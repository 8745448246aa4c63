"""Quantized models on the DPU's integer mode (issue 11): the zoo's ResNet-18 and
MobileNetV3-Small quantized by onnxruntime's ``quantize_static`` (QDQ, per-channel int8
weights, uint8 activations, ``quant_pre_process`` first, 4 seeded calibration samples),
compiled with ``--schedule default`` and simulated timing-only: cycles, the schedule-free
bound and its busiest engine, and how many Convs the importer took as integer layers
(``QConvolution``) of how many.  Deterministic simulated cycles; run it with another tree
first on ``PYTHONPATH`` for a before/after on the same models.

    python bench/qdq_bench.py [--model resnet18|mobilenet_v3_small ...] [--size N]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime_sim.bound_input import program_bound  # noqa: E402
from vpuc import api  # noqa: E402
from vpuc.onnx_import import import_onnx  # noqa: E402
from vpuc.onnx_import.zoo import mobilenet_v3_small, resnet18  # noqa: E402

MODELS = {"resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small}


def quantized(name: str, size: int, folder: Path) -> Path:
    """The zoo model ``name`` at ``size`` in the QDQ form."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    MODELS[name](size=size).save(folder / "float.onnx", name)
    quant_pre_process(str(folder / "float.onnx"), str(folder / "pre.onnx"), skip_symbolic_shape=True)
    rng = np.random.default_rng(0)
    samples = iter([{"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
                    for _ in range(4)])

    class Samples(CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    logging.disable(logging.WARNING)
    try:
        quantize_static(str(folder / "pre.onnx"), str(folder / "qdq.onnx"), Samples(),
                        quant_format=QuantFormat.QDQ, per_channel=True)
    finally:
        logging.disable(logging.NOTSET)
    return folder / "qdq.onnx"


def row(name: str, size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = quantized(name, size, Path(tmp))
        ops = [op.kind for op in import_onnx(path).module.graphs[0].ops]
        import onnx
        convs = sum(n.op_type == "Conv" for n in onnx.load(path).graph.node)
        sim = api.simulate(api.compile(path, schedule="default"), timing_only=True)
        bound = program_bound(sim.result.plan, sim.result.timeline)
    return {"model": name, "cycles": sim.cycles, "bound": bound.cycles,
            "busiest": bound.busiest_engine[0], "integer_convs": ops.count("QConvolution"),
            "convs": convs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=sorted(MODELS))
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    for name in args.model or sorted(MODELS, reverse=True):
        r = row(name, args.size)
        print(f"{r['model']:20s} {r['cycles']:>12,.0f} cycles  bound {r['bound']:>12,.0f} "
              f"({r['busiest']})  integer convs {r['integer_convs']} of {r['convs']}", flush=True)


if __name__ == "__main__":
    main()
