"""ONNX TopK through the library kernel topk (vpuc/onnx_import/convert_topk.py,
vpuc/fusion/lower_topk.py): values and i32 indices against onnxruntime for K up to the
axis, the cost model's choice between the kernel and ArgMax's rounds, NaN ranked as
onnxruntime ranks it, and a row too long for CMX refused naming the node.

Tolerance: none.  The inputs are exact in f16, so both sides order the same numbers;
the kernel copies the values it selects and onnxruntime returns them, so the values and
the indices agree exactly (ties: both take the lower index)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from vpuc import api
from vpuc.cost.timing import load_timing
from vpuc.cost.topk import argmax_rounds_cycles, topk_kernel_cycles
from vpuc.diagnostics import VpucError
from vpuc.arch import load_arch
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module


def _model(tmp_path, shape, k, axis=-1, largest=1, outputs=("v", "i")) -> str:
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest, name="topk")
    out_shape = list(shape)
    out_shape[axis] = k
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "v" else TensorProto.INT64, out_shape)
         for o in outputs],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "topk.onnx"
    onnx.save(model, str(path))
    return str(path)


def _kinds(path) -> set[str]:
    return {op.kind for op in import_onnx(path, precision="f16").module.graphs[0].ops}


def _against_onnxruntime(path, x):
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = api.simulate(api.compile(path), {"x": x.astype(np.float16)}).outputs
    values, indices = got.values()             # in the model's output order
    assert indices.dtype == np.int32 and np.array_equal(indices, want[1])
    assert np.array_equal(values.astype(np.float32), want[0], equal_nan=True)


@pytest.mark.parametrize("shape, axis, k", [
    ((1, 1000), -1, 5), ((1, 1000), -1, 100), ((1, 1000), -1, 1000), ((8, 1000), -1, 100),
    ((8, 1000), -1, 1000), ((1, 4, 2000), 1, 3), ((1, 4, 2000), 1, 4), ((1, 4, 2000), 2, 100),
])
@pytest.mark.parametrize("largest", [1, 0], ids=["largest", "smallest"])
def test_kernel_against_onnxruntime(tmp_path, shape, axis, k, largest):
    rng = np.random.default_rng(k)
    # f16-exact values with many ties (a few hundred distinct values)
    x = (rng.integers(-300, 300, shape) / 8).astype(np.float32)
    path = _model(tmp_path, shape, k, axis, largest)
    _against_onnxruntime(path, x)


@pytest.mark.parametrize("shape, k", [((1, 1000), 1), ((8, 1000), 1), ((8, 1000), 8)])
def test_rounds_kept_where_cheaper(tmp_path, shape, k):
    path = _model(tmp_path, shape, k)
    assert "TopK" not in _kinds(path)
    rows, size = shape
    assert argmax_rounds_cycles(rows, size, k) < topk_kernel_cycles(rows, size, k, 2, load_timing())
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float16).astype(np.float32)
    _against_onnxruntime(path, x)


def test_kernel_where_the_rounds_are_not_exact(tmp_path):
    """f16 holds the rounds' search keys only up to 2048: an axis of 2000 needs 4000."""
    path = _model(tmp_path, (1, 2000), 1)
    assert "TopK" in _kinds(path)


def test_nan_as_onnxruntime(tmp_path):
    x = np.array([[1, np.nan, 3, 2, -np.nan, 0, 7, 7, -np.inf, np.inf]], np.float32)
    for largest in (1, 0):
        path = _model(tmp_path, (1, 10), 6, largest=largest)
        assert "TopK" in _kinds(path)
        _against_onnxruntime(path, x)


def test_one_output_read_one_call(tmp_path):
    """The values' op no output reads is dead: one kernel call, the indices'."""
    path = _model(tmp_path, (1, 1000), 100, outputs=("i",))
    text, name, _ = onnx_as_vir(path, None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    assert print_module(module).count("sw @topk_f16") == 1


def test_a_row_too_long_for_cmx_is_refused_naming_the_node(tmp_path):
    path = _model(tmp_path, (1, 1000000), 1000)
    with pytest.raises(VpucError, match=r"TopK .*does not fit the \d+ bytes of CMX"):
        api.compile(path)


def test_reference_checks_both_outputs(tmp_path, capsys):
    """``vpuc run --reference`` has a numpy reference for the kernel's two outputs (values
    and i32 indices, onnxruntime's order), so a TopK program is checked, not refused."""
    from vpuc.cli import main
    path = _model(tmp_path, [2, 1000], 100)
    assert main(["run", path, "--reference"]) == 0
    out = capsys.readouterr().out
    assert "output %v: matches the numpy reference" in out
    assert "output %i: matches the numpy reference" in out
