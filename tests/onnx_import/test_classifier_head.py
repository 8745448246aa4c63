"""A CNN's classifier head, GlobalAveragePool -> the flatten PyTorch emits (Reshape to
[1, C]) -> Gemm, under ``--schedule default``: the Gemm's one row is a view of the pool's
[1, C, 1, 1] (``vpuc/fusion/fold_views.py``: its rows move along no axis of the pool's
value), so no DDR -> DDR copy is left for the flatten; the values against onnxruntime
(``test_lower_dpu_nn.compile_and_compare``'s derived f16 bound) and against the layer by
layer schedule, which copies it."""

from __future__ import annotations

import numpy as np

from tests.fusion.dpu_testlib import assert_close, ddr_copies
from tests.onnx_import.test_lower_dpu_nn import compile_and_compare
from vpuc import api
from vpuc.onnx_import.zoo import ModelBuilder, _classifier_head


def head(m):
    """Conv 3 -> 32 (+ bias, ReLU) on 1x3x12x12, then the classifier head to 10 classes."""
    y = m.node("Conv", [m.input("x", [1, 3, 12, 12]), m.weight((32, 3, 3, 3)),
                        m.weight((32,), 0.1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return _classifier_head(m, m.node("Relu", [y]), 32, 10)



def test_the_flatten_before_a_gemm_of_one_row_is_folded_into_its_load(tmp_path):
    compile_and_compare(tmp_path, head, seed=4)
    m = ModelBuilder(seed=4, opset=17)
    m.output(head(m))
    path = m.save(tmp_path / "h.onnx", "h")
    programs = {s: api.compile(path, schedule=s) for s in ("naive", "default")}
    assert [t.label.split(".")[0] for t in ddr_copies(programs["naive"])] == ["reshape_20"]
    assert ddr_copies(programs["default"]) == []
    folded = {n.name for src in programs["default"].module.layers if "gemm" in src.key
              for n in src.nodes}
    assert any(name.startswith("Reshape") for name in folded)
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float16)
    outs = {s: next(iter(api.simulate(p, {"x": x}).outputs.values()))
            for s, p in programs.items()}
    # the same products summed in the same order (one row loaded whole either way): equal
    assert_close(outs["default"], outs["naive"], ulps=0)
