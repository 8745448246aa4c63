"""The four model topologies of the zoo import and run in vpuc's graph reference to
within a documented tolerance of onnxruntime.

Tolerance (docs/onnx-import.md): imported in f16, every op rounds its result to
f16 (u = 2**-11), and the errors of N layers compound roughly as sqrt(N) * u of
the values they pass through (independent roundings), more through
normalizations and softmax.  For the f16 runs we require cosine similarity >=
0.999 with onnxruntime's f32 result and max |diff| <= 1% of the output's range;
imported in f32 the graph agrees with onnxruntime to float32 round-off of the
deepest accumulation (rtol 1e-4).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import encoder_layer, fpn_block, mobilenet_v3_small, resnet18
from vpuc.reference.graph import run_graph

MODELS = {
    "resnet18": lambda: resnet18(size=32, width=8, classes=10),
    "mobilenet_v3_small": lambda: mobilenet_v3_small(size=64, classes=10),
    "fpn_block": lambda: fpn_block(size=16, channels=8),
    "encoder_layer": lambda: encoder_layer(seq=17, width=48, heads=3),
}


def _compare(name, precision, tmp_path):
    builder = MODELS[name]()
    path = builder.save(tmp_path / f"{name}.onnx", name)
    imported = import_onnx(path, precision=precision)
    write_import(imported, tmp_path / f"{name}.vir")
    rng = np.random.default_rng(5)
    feeds = {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
             for v in builder.inputs}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = run_graph(imported.module.graphs[0], {imported.inputs[k]: v for k, v in feeds.items()},
                    tmp_path)[0].astype(np.float32)
    return got, want


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_f32(name, tmp_path):
    got, want = _compare(name, "f32", tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_f16(name, tmp_path):
    got, want = _compare(name, "f16", tmp_path)
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
