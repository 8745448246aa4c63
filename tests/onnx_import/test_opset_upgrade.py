"""Models of opsets 7 to 10 (the ONNX zoo's), and IR version 3's initializers as inputs.

- A model older than opset 11 is converted to 11 by ``onnx.version_converter`` at
  import (``vpuc/onnx_import/upgrade.py``), with a note on stderr naming the opset it
  came from; a conversion that fails names the node; older than opset 7 is refused.
- IR version 3 lists every initializer among the graph inputs too.  ONNX makes an
  initializer the default value of such an input; vpuc compiles it into the blob as a
  constant (folded into the weights like any other), so ``vpuc run --input`` refuses
  its name with a message that says so.  The model's real inputs are taken by their
  ONNX names (``gpu_0/data_0``) as well as by the program's spelling (``gpu_0_data_0``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.cli import main

WEIGHTS = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float16).astype(np.float32)


def _ir3_model(path, opset: int = 9, input_name: str = "gpu_0/data_0") -> str:
    """Conv -> Relu -> Upsample-free opset-``opset`` model in IR version 3 form: the weights
    an initializer that is also a graph input."""
    conv = helper.make_node("Conv", [input_name, "conv_w"], ["c"], name="conv", pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu")
    graph = helper.make_graph(
        [conv, relu], "ir3",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("conv_w", TensorProto.FLOAT, list(WEIGHTS.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
        initializer=[numpy_helper.from_array(WEIGHTS, "conv_w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def test_an_opset_9_model_compiles_with_a_note(tmp_path, capsys):
    model = _ir3_model(tmp_path / "old.onnx")
    assert main(["compile", model, "-o", str(tmp_path / "old.blob")]) == 0
    err = capsys.readouterr().err
    assert f"note: {model}: converted from opset 9 to 11 by onnx.version_converter" in err


def test_older_than_opset_7_is_refused(tmp_path, capsys):
    model = _ir3_model(tmp_path / "older.onnx", opset=6)
    assert main(["compile", model, "-o", str(tmp_path / "older.blob")]) == 1
    assert capsys.readouterr().err == (
        f"error: {model}: opset 6 is outside the supported range 7 to {onnx.defs.onnx_opset_version()} "
        "(the newest this 'onnx' knows; opsets before 11 are converted to 11 at import)\n")


def test_a_failed_conversion_names_the_node(tmp_path, capsys, monkeypatch):
    """onnx's converter accepts every model its checker accepts that we could build, so its
    failure on a Relu is simulated: the message names the node that fails alone."""
    from onnx import version_converter
    convert = version_converter.convert_version

    def refusing(model, target):
        if any(node.op_type == "Relu" for node in model.graph.node):
            raise RuntimeError("No Adapter For Relu")
        return convert(model, target)
    monkeypatch.setattr(version_converter, "convert_version", refusing)
    model = _ir3_model(tmp_path / "bad.onnx")
    assert main(["compile", model, "-o", str(tmp_path / "bad.blob")]) == 1
    assert capsys.readouterr().err == (
        f"error: {model}: onnx.version_converter cannot convert node 'relu' (Relu) from opset 9 "
        "to 11: No Adapter For Relu\n")


def test_run_takes_the_onnx_input_name_and_refuses_an_initializer(tmp_path, capsys):
    model = _ir3_model(tmp_path / "ir3.onnx")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float16).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", WEIGHTS)
    assert main(["run", model, "--input", f"gpu_0/data_0=@{tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "out")]) == 0
    got = np.load(tmp_path / "out" / "y.npy").astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"gpu_0/data_0": x})[0]
    # 27 products summed in f32 and rounded once to f16, both sides from the same f16 values
    np.testing.assert_allclose(got, want, rtol=2.0 ** -10, atol=2.0 ** -24)
    capsys.readouterr()
    assert main(["run", model, "--input", f"gpu_0/data_0=@{tmp_path / 'x.npy'}",
                 "--input", f"conv_w=@{tmp_path / 'w.npy'}"]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: --input conv_w=@{tmp_path / 'w.npy'}: 'conv_w' is an initializer of the model "
        "(IR version 3 lists initializers among the graph inputs); vpuc compiles it into the "
        "blob as a constant, so a run cannot set it\n")


@pytest.mark.parametrize("opset", [7, 8, 10])
def test_each_old_opset_converts(tmp_path, capsys, opset):
    model = _ir3_model(tmp_path / f"o{opset}.onnx", opset=opset, input_name="x")
    assert main(["compile", model, "-o", str(tmp_path / "o.blob")]) == 0
    assert f"converted from opset {opset} to 11" in capsys.readouterr().err


def test_input_shape_of_an_initializer_says_what_it_is(tmp_path, capsys):
    model = _ir3_model(tmp_path / "ir3.onnx")
    assert main(["import", model, "--input-shape", "conv_w=16x3x3x3"]) == 1
    assert capsys.readouterr().err.endswith(
        f"error: {model}: --input-shape names 'conv_w', an initializer of the model (IR version 3 "
        "lists initializers among the graph inputs): vpuc compiles it as a constant of its own shape\n")
