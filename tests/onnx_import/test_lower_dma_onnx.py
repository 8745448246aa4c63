"""One-op ONNX models of the data-movement ops, compiled and simulated end to end
(`vpuc run MODEL.onnx --reference`) and compared with onnxruntime.

The ops lower to DMA copies (``vpuc/fusion/lower_dma.py``), which move f16
values without arithmetic: with the inputs rounded to f16 on both sides, the
simulated outputs equal onnxruntime's f32 results exactly (a Relu, which the
concat case fuses into an ACT SHAVE kernel, is exact too).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc.cli import main
from onnx_testlib import compiled_against_onnxruntime
from vpuc.onnx_import.zoo import ModelBuilder


def _x(m, shape=(1, 4, 6, 6)):
    return m.input("x", list(shape))


def _ints(m, values):
    return m.init(np.asarray(values, np.int64))


def _split(m):
    a, b, c = m.node("Split", [_x(m), _ints(m, [1, 2, 1])], n_out=3, axis=1)
    return m.node("Concat", [c, a, b], axis=1)


CASES = {
    "reshape": lambda m: m.node("Reshape", [_x(m), _ints(m, [1, 4, 36])]),
    "flatten_squeeze_transpose": lambda m: m.node("Transpose", [m.node("Squeeze", [m.node(
        "Unsqueeze", [m.node("Flatten", [_x(m, (1, 4, 6, 2))], axis=2), _ints(m, [0])]),
        _ints(m, [0])])], perm=[1, 0]),
    "transpose": lambda m: m.node("Transpose", [_x(m, (1, 5, 3, 8))], perm=[0, 2, 3, 1]),
    "concat": lambda m: m.node("Concat", [_x(m), m.node("Relu", ["x"]),
                                          m.weight((1, 2, 6, 6), 1.0)], axis=1),
    "split": _split,
    "slice": lambda m: m.node("Slice", [_x(m), _ints(m, [1, 5, 0]), _ints(m, [3, 0, 2 ** 62]),
                                        _ints(m, [1, 2, 3]), _ints(m, [1, -2, 2])]),
    "gather": lambda m: m.node("Gather", [_x(m), _ints(m, [3, 0, -1])], axis=1),
    "gather_scalar": lambda m: m.node("Gather", [_x(m), _ints(m, 2)], axis=2),
    "pad": lambda m: m.node("Pad", [_x(m), _ints(m, [0, 1, 2, 0, 0, 0, 1, 3]),
                                    m.init(np.asarray(0.5, np.float32))]),
    "depth_to_space_dcr": lambda m: m.node("DepthToSpace", [_x(m)], blocksize=2, mode="DCR"),
    "depth_to_space_crd": lambda m: m.node("DepthToSpace", [_x(m)], blocksize=2, mode="CRD"),
    "space_to_depth": lambda m: m.node("SpaceToDepth", [_x(m)], blocksize=3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_matches_onnxruntime(case, tmp_path, capsys):
    got, want, _ = compiled_against_onnxruntime(case, CASES[case], tmp_path, capsys,
                                                seed=sorted(CASES).index(case))
    assert np.array_equal(got, want)          # pure data movement: exact


def _attention(m):
    """Multi-head self-attention as exporters write it: heads split with Reshape and
    Transpose (DMA), the MatMuls on the DPU, the softmax on ACT SHAVE."""
    x = m.input("x", [1, 17, 48])

    def heads(v):
        r = m.node("Reshape", [v, _ints(m, [1, 17, 3, 16])])
        return m.node("Transpose", [r], perm=[0, 2, 1, 3])
    q, k, v = (heads(m.node("MatMul", [x, m.weight((48, 48))])) for _ in range(3))
    scores = m.node("MatMul", [q, m.node("Transpose", [k], perm=[0, 1, 3, 2])])
    weights = m.node("Softmax", [m.node("Mul", [scores, m.init(np.asarray(0.25, np.float32))])],
                     axis=-1)
    merged = m.node("Transpose", [m.node("MatMul", [weights, v])], perm=[0, 2, 1, 3])
    return m.node("Reshape", [merged, _ints(m, [1, 17, 48])])


def test_multi_head_attention_within_the_f16_tolerance(tmp_path):
    """The f16 tolerance of docs/onnx-import.md (cosine >= 0.999, max |diff| <= 1% of the
    output's range) against onnxruntime's f32 run of the f32 model."""
    m = ModelBuilder(seed=1, opset=17)
    out = _attention(m)
    m.output(out)
    path = m.save(tmp_path / "attention.onnx", "attention")
    x = np.random.default_rng(3).standard_normal((1, 17, 48)).astype(np.float32)
    np.save(tmp_path / "x.npy", x.astype(np.float16))
    assert main(["run", path, "--input", f"x=@{tmp_path / 'x.npy'}", "--reference",
                 "--output-dir", str(tmp_path / "out")]) == 0
    got = np.load(tmp_path / "out" / f"{out}.npy").astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))
