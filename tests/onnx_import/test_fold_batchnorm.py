"""BatchNormalization folded into the Conv before it at import (``vpuc/onnx_import/fold.py``):
each merged Conv gets weights of its own, named after its output, so two Convs sharing one
weight tensor, each before a BatchNormalization of its own, keep their own scales (with
the folded weights named after the weight tensor, the second overwrote the first's)."""

from __future__ import annotations

import numpy as np

from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph

U32 = 2.0 ** -24        # f32 unit roundoff
EPS = 1e-5


def test_convs_sharing_weights_keep_their_own_batchnorms(tmp_path):
    m = ModelBuilder(seed=5, opset=17)
    x = m.input("x", [1, 8, 3, 3])
    w = m.weight((8, 8, 1, 1))
    rng = np.random.default_rng(11)
    norms = []
    branches = []
    for scale in (0.5, 2.0):            # two normalizations far apart
        gamma = (rng.uniform(0.8, 1.2, 8) * scale).astype(np.float32)
        beta, mean = (rng.standard_normal((2, 8)) * 0.5).astype(np.float32)
        var = rng.uniform(0.5, 1.5, 8).astype(np.float32)
        norms.append((gamma, beta, mean, var))
        conv = m.node("Conv", [x, w], kernel_shape=[1, 1])
        branches.append(m.node("BatchNormalization", [conv] + [
            m.init(v, n) for v, n in zip(norms[-1], ("gamma", "beta", "mean", "var"))],
            epsilon=EPS))
    m.output(m.node("Sub", branches))
    path = m.save(tmp_path / "m.onnx", "m")
    imported = import_onnx(path, precision="f32")
    graph = imported.module.graphs[0]
    convs = [op for op in graph.ops if op.kind == "Convolution"]
    assert len(convs) == 2 and not any(op.kind == "Multiply" for op in graph.ops)
    assert len({str(op.operands[1]) for op in convs}) == 2          # a scaled copy each
    feed = np.random.default_rng(3).standard_normal((1, 8, 3, 3)).astype(np.float32)
    write_import(imported, tmp_path / "m.vir")
    got = run_graph(graph, {imported.inputs["x"]: feed}, tmp_path)[0].astype(np.float64)
    # The exact result in float64, and its error bound: per branch a 1x1 of 8 terms on
    # weights scaled once (one f32 rounding) plus the folded bias (two), (8 + 3) u of the
    # terms' magnitudes; the subtraction rounds once more.
    weights = np.asarray(m.inits[0].float_data or np.frombuffer(m.inits[0].raw_data, np.float32),
                         np.float64).reshape(8, 8)
    xs = feed[0].reshape(8, -1).astype(np.float64)
    want, magnitude = 0.0, 0.0
    for sign, (gamma, beta, mean, var) in zip((1, -1), norms):
        s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + np.float64(np.float32(EPS)))
        bias = beta - mean * s
        want = want + sign * ((s[:, None] * weights) @ xs + bias[:, None])
        magnitude = magnitude + np.abs(s[:, None] * weights) @ np.abs(xs) + np.abs(bias[:, None])
    bound = (8 + 3) * U32 * magnitude + U32 * np.abs(want)
    assert np.all(np.abs(got[0].reshape(8, -1) - want) <= bound)
