"""Real ONNX-zoo topologies, as the ``onnx`` package ships them, against onnxruntime.

The nine ``light_*.onnx`` models (opset 9, IR version 3, 1x3x224x224) get seeded random
weights (``zoo_weights.realize``) and are compiled from the file (its opset converted to
11 at import, its IR-3 initializer inputs compiled as constants), simulated with
numerics and compared with onnxruntime's f32 run on the same f16-exact input at the
whole-model tolerance of docs/onnx-import.md: cosine >= 0.999 and max |diff| <= 1% of
the output's range.

CI runs the three that cost least (``IN_CI``: SqueezeNet, Inception v1 with its LRNs,
ResNet-50 with its residual sums; 1.3 to 6.2 CPU seconds to compile and run, measured by
bench/onnx_zoo_bench.py, whose table for all nine is in docs/onnx-import.md);
``VPUC_ZOO_ALL=1`` runs the rest too.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.onnx_import.zoo_weights import MODELS, data_input, light_path, onnxruntime_output, realize
from vpuc import api

IN_CI = ("squeezenet", "inception_v1", "resnet50")   # the cheapest in CPU: docs/onnx-import.md
ALL = os.environ.get("VPUC_ZOO_ALL") == "1"


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_against_onnxruntime(name, tmp_path, capsys):
    if not light_path(name).exists():
        pytest.skip(f"this onnx package ships no {light_path(name).name}")
    if name not in IN_CI and not ALL:
        pytest.skip("over CI's time budget at full size: bench/onnx_zoo_bench.py, or VPUC_ZOO_ALL=1")
    model = realize(light_path(name))
    assert model.opset_import[0].version == 9 and model.ir_version == 3     # as shipped
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    program = api.compile(str(path))
    assert "converted from opset 9 to 11" in capsys.readouterr().err
    onnx_name, shape = data_input(model)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float16).astype(np.float32)
    sim = api.simulate(program, {onnx_name: x})     # the model's own name
    assert not sim.races
    want = onnxruntime_output(model, x).astype(np.float64)
    (got,) = sim.outputs.values()
    got = got.astype(np.float64).reshape(want.shape)
    cosine = got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want))
    assert cosine >= 0.999, cosine
    assert np.abs(got - want).max() <= 0.01 * (want.max() - want.min())
