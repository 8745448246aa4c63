"""Subgraphs with equal bodies share one generated kernel (issue 11, section 5).

MobileNetV3's blocks repeat the same hard-swish and squeeze-excite chains at
the same shapes; the lowering generates each distinct body once
(``kernel_graph.body_key``) and calls it from every stage that needs it, so
compile time follows the distinct bodies, not the layers.
"""

from __future__ import annotations

import itertools

import vpuc.fusion.lower_act as lower_act
from test_lower_dpu_nn import compile_and_compare
from vpuc import api
from vpuc.ir.tasks import Executor
from vpuc.onnx_import.zoo import ModelBuilder


def _tanh_conv_relu_tanh(m):
    x = m.input("x", [1, 16, 8, 8])
    h = m.node("Tanh", [x])
    c = m.node("Conv", [h, m.weight((16, 16, 3, 3))], pads=[1, 1, 1, 1])
    return m.node("Tanh", [m.node("Relu", [c])])      # Relu: the conv's post-op


def _compiled(tmp_path, schedule="default"):
    m = ModelBuilder(seed=0, opset=17)
    m.output(_tanh_conv_relu_tanh(m))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"), schedule=schedule)
    generated = [n for n, image in program.kernels.items() if image.origin == "generated"]
    kernels = {t.kernel for tl in program.module.task_lists if tl.executor is Executor.ACT_SHAVE
               for t in tl.tasks}
    return generated, kernels


def test_equal_bodies_share_one_kernel(tmp_path, monkeypatch):
    # naive: the default schedule runs the second Tanh on the convolution's output blocks
    # (fuse_epilogue), at the blocks' shape, so the two bodies are no longer equal
    generated, called = _compiled(tmp_path, "naive")
    assert len(generated) == 1 and called == set(generated)
    fresh = itertools.count()
    monkeypatch.setattr(lower_act, "body_key", lambda body: next(fresh))   # no sharing
    assert len(_compiled(tmp_path, "naive")[0]) == 2


def test_a_shared_kernel_computes_both_stages(tmp_path):
    # both Tanh stages run it: the output matches onnxruntime and the graph reference
    compile_and_compare(tmp_path, _tanh_conv_relu_tanh)
