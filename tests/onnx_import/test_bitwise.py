"""BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot and BitShift on uint8 and int8 run-time
tensors (vpuc/onnx_import/convert_bitwise.py): compiled and simulated against onnxruntime
bit for bit (every step of the composition is an integer below 2^16, exact in f32), over
every byte value of one operand; the import (golden text); int64 tensors refused naming the
node."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import import_onnx
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"
TYPES = {"uint8": (TensorProto.UINT8, np.uint8), "int8": (TensorProto.INT8, np.int8)}


def _model(tmp_path, op, elem, constant=None, opset=18, **attrs) -> str:
    unary = op == "BitwiseNot"
    inputs = [helper.make_tensor_value_info("x", elem, [16, 16])]
    inits = []
    if not unary and constant is None:
        inputs.append(helper.make_tensor_value_info("y", elem, [1, 16]))
    elif not unary:
        inits.append(numpy_helper.from_array(constant, "y"))
    node = helper.make_node(op, ["x"] if unary else ["x", "y"], ["z"], name="bits", **attrs)
    graph = helper.make_graph([node], "bits", inputs, [helper.make_tensor_value_info("z", elem, [16, 16])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    path = tmp_path / f"{op}.onnx"
    onnx.save(model, str(path))
    return str(path)


def _every_byte(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.arange(info.min, info.max + 1).astype(dtype).reshape(16, 16)


def _check(path, feeds):
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    program = api.compile(path)
    got = next(iter(api.simulate(program, {program.source_names.get(k, k): v for k, v in feeds.items()}).outputs.values()))
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


@pytest.mark.parametrize("type_name", sorted(TYPES))
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_against_onnxruntime(op, type_name, tmp_path):
    elem, dtype = TYPES[type_name]
    y = np.random.default_rng(1).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (1, 16)).astype(dtype)
    feeds = {"x": _every_byte(dtype)} if op == "BitwiseNot" else {"x": _every_byte(dtype), "y": y}
    _check(_model(tmp_path, op, elem), feeds)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(direction, tmp_path):
    """Shifts of 0 to 9 (8 and 9 shift every bit out), of every byte."""
    shifts = np.asarray([list(range(10)) + [0, 1, 7, 8, 3, 2]], np.uint8)
    _check(_model(tmp_path, "BitShift", TensorProto.UINT8, opset=11, direction=direction),
           {"x": _every_byte(np.uint8), "y": shifts})


def test_a_constant_operand(tmp_path):
    mask = np.asarray([[15, 240, 255, 0, 1, 128, 77, 3] * 2], np.uint8)
    _check(_model(tmp_path, "BitwiseXor", TensorProto.UINT8, constant=mask), {"x": _every_byte(np.uint8)})


def test_import_text(tmp_path):
    text = print_module(import_onnx(_model(tmp_path, "BitwiseAnd", TensorProto.INT8)).module)
    golden = GOLDEN / "bitwise_and_int8.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_int64_tensors_are_refused_at_the_node(tmp_path):
    with pytest.raises(VpucError, match="BitwiseOr of run-time i32, i32 tensors") as caught:
        import_onnx(_model(tmp_path, "BitwiseOr", TensorProto.INT64))
    assert "node 'bits' (BitwiseOr" in str(caught.value)
