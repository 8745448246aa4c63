"""The FPN/U-Net decoder block of the zoo (``vpuc/onnx_import/zoo.py``: Resize nearest
and linear, ConvTranspose, Concat, 1x1 and 3x3 convolutions, Sigmoid) compiled from
ONNX, simulated, and compared with onnxruntime's f32 run of the f32 model.

Tolerance (docs/onnx-import.md, "Checked against onnxruntime"): imported in f16, every
layer rounds its result to f16 (u = 2**-11) and the weights and inputs are rounded too;
the errors of N layers compound roughly as sqrt(N)·u of the values they pass through.
The documented bound for whole models is cosine similarity >= 0.999 and max |diff| <= 1%
of the output's range.  Against vpuc's own task-level numpy reference (the same
roundings at the same places) the simulated blob agrees to ``vpuc run``'s default f16
tolerance.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from vpuc import api
from vpuc.fusion.blocked_program import sanitize
from vpuc.ir.tasks import DpuOp
from vpuc.onnx_import.zoo import fpn_block


def _accuracy(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    return cosine, float(np.max(np.abs(got - want)) / (np.max(want) - np.min(want)))


def test_fpn_block_compiled_within_the_f16_tolerance(tmp_path):
    builder = fpn_block(size=16, channels=16)
    path = builder.save(tmp_path / "fpn.onnx", "fpn")
    rng = np.random.default_rng(7)
    feeds = {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
             .astype(np.float32) for v in builder.inputs}
    program = api.compile(path)
    sim = api.simulate(program, {k: v.astype(np.float16) for k, v in feeds.items()}, reference=True)
    assert not sim.races
    name = sanitize(builder.outputs[0].name)
    got = sim.outputs[name].astype(np.float32)
    np.testing.assert_allclose(got, sim.reference[name].astype(np.float32), rtol=4e-3, atol=1e-4)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape
    cosine, max_diff = _accuracy(got, want)
    assert cosine >= 0.999
    assert max_diff <= 0.01
    dpu = {t.op for tl in program.module.task_lists if tl.executor.name == "DPU" for t in tl.tasks}
    assert {DpuOp.CONV, DpuOp.MATMUL} <= dpu      # the linear resize's columns run on the DPU
