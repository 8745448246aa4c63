"""EyeLike, the window functions, ReverseSequence, Compress (vpuc/onnx_import/convert_static.py),
If of a condition known at import (convert_if.py) and Cast of a float to int8/uint8
(convert_more.cast_value): import (golden text), compiled and simulated in f16 against
onnxruntime, refusals naming the node.

Every case but the windows' product is exact: copies (Gathers, Slices, Concats by DMA), a
constant identity added to f16-exact values the sum of which is exact in f16 (integers and
halves below 2^10), a truncation of f16 values to integers.  The windows are folded by
ONNX's reference in float64 and rounded once to f16, onnxruntime computes them in f32: the
product with an f16 input is then within one f16 rounding, ``2^-11 |want|``, plus the
window's own f16 rounding, ``2^-11 |x w|``, plus onnxruntime's f32 error in the window, a
sum of up to three cosine terms each at most 1 (a few f32 ulps of 1, ``2^-21 |x|``: the
Blackman window's ends cancel to 0 in float64 and to 4e-8 in f32).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_testlib import assert_within
from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import import_onnx
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
U16 = 2.0 ** -11


def _f(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _save(tmp_path, name, nodes, inputs, outputs, inits=(), opset=18) -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _branch(name, nodes, output, inits=()):
    return helper.make_graph(nodes, name, [], [_f(output, (3, 4))],
                             initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits])


def _if(tmp_path, condition):
    """``If(sum(Shape(x)) == 7)`` (folded from the static shape: true) or a Constant."""
    then_branch = _branch("then", [helper.make_node("Relu", ["x"], ["t"])], "t")
    else_branch = _branch("else", [helper.make_node("Neg", ["x"], ["e0"]),
                                   helper.make_node("Add", ["e0", "two"], ["e"])], "e", [("two", np.float32(2))])
    if condition is None:
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceSum", ["s"], ["n"], keepdims=0),
                 helper.make_node("Equal", ["n", "seven"], ["c"])]
        inits = [("seven", np.int64(7))]
    else:
        nodes, inits = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(condition)))], []
    nodes.append(helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch))
    return _save(tmp_path, "if", nodes, [_f("x", (3, 4))], [_f("y", (3, 4))], inits, opset=13)


CASES = {
    "eye_like": lambda p: _save(p, "eye_like", [helper.make_node("EyeLike", ["x"], ["e"], k=1),
                                                helper.make_node("Add", ["x", "e"], ["y"])],
                                [_f("x", (3, 5))], [_f("y", (3, 5))]),
    "eye_like_dtype": lambda p: _save(p, "eye_like_dtype", [
        helper.make_node("EyeLike", ["x"], ["e"], k=-2, dtype=TensorProto.DOUBLE),
        helper.make_node("Cast", ["e"], ["e32"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "e32"], ["y"])],
        [_f("x", (4, 3))], [_f("y", (4, 3))]),
    "hann": lambda p: _save(p, "hann", [helper.make_node("HannWindow", ["n"], ["w"]),
                                        helper.make_node("Mul", ["x", "w"], ["y"])],
                            [_f("x", (2, 10))], [_f("y", (2, 10))], [("n", np.int64(10))], opset=17),
    "hamming_symmetric": lambda p: _save(p, "hamming_symmetric", [
        helper.make_node("HammingWindow", ["n"], ["w"], periodic=0), helper.make_node("Mul", ["x", "w"], ["y"])],
        [_f("x", (9,))], [_f("y", (9,))], [("n", np.int32(9))], opset=17),
    "blackman": lambda p: _save(p, "blackman", [helper.make_node("BlackmanWindow", ["n"], ["w"]),
                                                helper.make_node("Mul", ["x", "w"], ["y"])],
                                [_f("x", (12,))], [_f("y", (12,))], [("n", np.int64(12))], opset=17),
    "reverse_sequence": lambda p: _save(p, "reverse_sequence", [
        helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=0, batch_axis=1)],
        [_f("x", (5, 3, 2))], [_f("y", (5, 3, 2))], [("lens", np.array([5, 1, 3], np.int64))], opset=10),
    "reverse_sequence_batch_first": lambda p: _save(p, "reverse_sequence_batch_first", [
        helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=1, batch_axis=0)],
        [_f("x", (2, 4, 3))], [_f("y", (2, 4, 3))], [("lens", np.array([4, 4], np.int64))]),
    "compress_axis": lambda p: _save(p, "compress_axis", [helper.make_node("Compress", ["x", "keep"], ["y"], axis=-1)],
                                     [_f("x", (2, 3, 5))], [_f("y", (2, 3, 2))],
                                     [("keep", np.array([0, 1, 0, 0, 1], bool))]),
    "compress_flat": lambda p: _save(p, "compress_flat", [helper.make_node("Compress", ["x", "keep"], ["y"])],
                                     [_f("x", (2, 3))], [_f("y", (3,))],
                                     [("keep", np.array([1, 0, 1, 1], bool))]),
    "if_folded": lambda p: _if(p, None),
    "if_else": lambda p: _if(p, False),
    "cast_int8": lambda p: _save(p, "cast_int8", [helper.make_node("Mul", ["x", "scale"], ["s"]),
                                                  helper.make_node("Cast", ["s"], ["y"], to=TensorProto.INT8)],
                                 [_f("x", (2, 8))], [_f("y", (2, 8), TensorProto.INT8)], [("scale", np.float32(15))]),
    "cast_uint8": lambda p: _save(p, "cast_uint8", [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Mul", ["c", "scale"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.UINT8)],
        [_f("x", (2, 8))], [_f("y", (2, 8), TensorProto.UINT8)],
        [("lo", np.float32(0)), ("hi", np.float32(1)), ("scale", np.float32(255))]),
}
WINDOWS = {"hann", "hamming_symmetric", "blackman"}


def _input(path):
    shape = [d.dim_value for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(5)
    return (rng.integers(-64, 64, shape) / 8).astype(np.float32)     # exact in f16, sums too


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_against_onnxruntime(case, tmp_path):
    path = CASES[case](tmp_path)
    x = _input(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = next(iter(api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs.values()))
    if want.dtype != np.float32:
        assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
        return
    bound = U16 * 2 * np.abs(want) + 2.0 ** -21 * np.abs(x) if case in WINDOWS else 0.0
    assert_within(got.astype(np.float64), want.astype(np.float64), bound, case)


@pytest.mark.parametrize("case", ["eye_like", "reverse_sequence", "compress_axis", "if_folded", "cast_uint8"])
def test_import_text(case, tmp_path):
    text = print_module(import_onnx(CASES[case](tmp_path), precision="f32").module)
    golden = GOLDEN / f"static_{case}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_cast_saturates_beyond_the_range(tmp_path):
    """ONNX leaves a float beyond the integer type's range undefined (onnxruntime wraps it
    modulo 256 through int32); vpuc saturates, as the NPU's store does, and NaN gives 0."""
    path = CASES["cast_int8"](tmp_path)
    x = np.array([[10, -10, 8.5, -8.5, 1000, -1000, np.nan, np.inf]] * 2, np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values()))
    scaled = x.astype(np.float32) * 15
    assert got.dtype == np.int8
    assert got[0].tolist() == [127, -128, 127, -127, 127, -128, 0, 127]
    inside = np.abs(scaled) < 128
    assert np.array_equal(got[inside], np.trunc(scaled[inside]).astype(np.int8))


def test_compress_selecting_nothing_is_an_empty_output(tmp_path):
    path = _save(tmp_path, "none", [helper.make_node("Compress", ["x", "keep"], ["y"], axis=0)],
                 [_f("x", (2, 3))], [_f("y", (0, 3))], [("keep", np.array([0, 0], bool))])
    imported = import_onnx(path)
    assert tuple(imported.empty_outputs["y"].dims) == (0, 3)


@pytest.mark.parametrize("build, message", [
    (lambda p: _save(p, "win", [helper.make_node("HannWindow", ["n"], ["w"], name="window")],
                     [_f("n", (), TensorProto.INT64)], [_f("w", (8,))], opset=17),
     "HannWindow of a run-time size 'n'"),
    (lambda p: _save(p, "rev", [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], name="reverse")],
                     [_f("x", (4, 2))], [_f("y", (4, 2))], [("lens", np.array([5, 1], np.int64))], opset=10),
     r"sequence_lens \[5, 1\] are not one length in \[0, 4\]"),
    (lambda p: _save(p, "cond", [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], name="branch",
                         then_branch=_branch("then", [helper.make_node("Relu", ["x"], ["t"])], "t"),
                         else_branch=_branch("else", [helper.make_node("Neg", ["x"], ["e"])], "e"))],
        [_f("x", (3, 4))], [_f("y", (3, 4))], [("zero", np.float32(0))], opset=13),
     "If on a run-time condition"),
])
def test_refusals_name_the_node(build, message, tmp_path):
    with pytest.raises(VpucError, match=message) as caught:
        import_onnx(build(tmp_path))
    assert "node '" in str(caught.value)
