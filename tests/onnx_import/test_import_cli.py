"""`vpuc import`: files written, the round trip, located errors, and a model end to end."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from onnx_testlib import rounded_to_f16
from vpuc.onnx_import.zoo import ModelBuilder, small_cnn
from vpuc.cli import main
from vpuc.reference.graph import run_graph
from vpuc.onnx_import import import_onnx, write_import
from vpuc.vir.parser import parse_file

F16_U = 2.0 ** -11


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_writes_module_and_constants(tmp_path, capsys):
    model = small_cnn().save(tmp_path / "cnn.onnx")
    code, out, err = _run(capsys, "import", model)
    assert (code, err) == (0, "")
    assert out == f"{tmp_path / 'cnn.vir'}: graph @main with 11 ops, 1 input(s), 1 output(s), 3 constant file(s)\n"
    assert sorted(p.name for p in (tmp_path / "cnn.consts").iterdir()) == ["batchnormalization_8.bn_weights.npy", "w_14.npy", "w_30.T.npy"]
    # the printed module parses back to the same graph
    parsed = parse_file(tmp_path / "cnn.vir")
    imported = import_onnx(model)
    for op in imported.module.graphs[0].ops:
        if op.const is not None and op.const.path:
            op.const.path = f"cnn.consts/{op.result}.npy"
    assert parsed.graphs == imported.module.graphs


def test_small_cnn_reference_matches_onnxruntime(tmp_path):
    """conv-BN(folded)-relu-pool-conv-hswish-reshape(from a Shape subgraph)-gemm-softmax."""
    model = small_cnn().save(tmp_path / "cnn.onnx")
    imported = import_onnx(model, precision="f32")
    write_import(imported, tmp_path / "cnn.vir")
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_graph(imported.module.graphs[0], {"x": x}, tmp_path)
    # f32 throughout; BN folded into the weights changes the rounding order: a few f32 ulps
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


def test_conv_chain_compiles_runs_and_matches_onnxruntime(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = ModelBuilder(3)
    x = m.input("input.1", [1, 3, 16, 16])
    y = m.node("Conv", [x, m.weight((16, 3, 3, 3)), m.weight((16,), 0.1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = m.node("Sigmoid", [m.node("Mul", [m.node("Relu", [y]), m.init(np.asarray(0.5, np.float32))])])
    m.output(y)
    model = m.save(tmp_path / "convnet.onnx")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    assert _run(capsys, "import", model)[0] == 0
    assert _run(capsys, "compile", tmp_path / "convnet.vir", "-o", tmp_path / "convnet.blob")[0] == 0
    code, out, err = _run(capsys, "run", tmp_path / "convnet.blob", "--input", f"input.1=@{tmp_path / 'x.npy'}",
                          "--output-dir", tmp_path / "out")
    assert code == 0, err
    got = np.load(tmp_path / "out" / f"{y}.npy").astype(np.float32)
    rounded = rounded_to_f16(model)
    want = ort.InferenceSession(rounded.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input.1": x.astype(np.float32)})[0]
    # f16 inputs and weights on both sides; the NPU rounds the conv output, the bias add and
    # each of the 3 elementwise ops to f16 (u = 2**-11 each, values of the output's scale)
    bound = 5 * F16_U * (np.abs(want) + np.max(np.abs(want)))
    assert np.all(np.abs(got - want) <= bound)


def _model_with(tmp_path, node, inputs, opset=17, domain_opsets=(), out_shape=(1, 4)):
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(out_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *domain_opsets])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


X = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])


def test_unsupported_op_names_the_node(tmp_path, capsys):
    square = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 3])
    path = _model_with(tmp_path, helper.make_node("Det", ["x"], ["y"], name="det"), [square], out_shape=())
    code, out, err = _run(capsys, "import", path)
    assert code == 1 and out == ""
    assert err.startswith(f"error: {path}: node 'det' (Det, domain ai.onnx, opset 17): "
                          "Det is not supported; supported ops: Abs, ")
    assert all(f" {op}," in err for op in ("AveragePool", "BatchNormalization", "Cast", "Conv", "LpNormalization", "ArgMax", "Einsum"))
    assert not (tmp_path / "m.vir").exists()


@pytest.mark.parametrize("setup, message", [
    (lambda p: p.write_bytes(b"\x08\x07garbage"), "not an ONNX model"),
    (lambda p: p.mkdir(), "is a directory, not an ONNX model"),
    (lambda p: None, "no such file"),
])
def test_unreadable_model(tmp_path, capsys, setup, message):
    path = tmp_path / "bad.onnx"
    setup(path)
    code, _, err = _run(capsys, "import", path)
    assert code == 1 and message in err and "Traceback" not in err


def test_dynamic_input_needs_a_shape(tmp_path, capsys):
    dyn = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
    path = _model_with(tmp_path, helper.make_node("Relu", ["x"], ["y"]), [dyn], out_shape=["batch", 4])
    code, _, err = _run(capsys, "import", path)
    assert (code, err) == (1, f"error: {path}: input 'x' has dims ?x4 that are not fixed; "
                              "give them with --input-shape x=...\n")
    code, _, err = _run(capsys, "import", path, "--input-shape", "x=2x4", "-o", tmp_path / "ok.vir")
    assert code == 0, err
    assert "%x = Parameter() : 2x4xf16" in (tmp_path / "ok.vir").read_text()
    code, _, err = _run(capsys, "import", path, "--input-shape", "y=2x4")
    assert err == (f"error: {path}: --input-shape names 'y', which is not an input of the model; "
                   "its inputs are x\n")
    code, _, err = _run(capsys, "import", path, "--input-shape", "x=2by4")
    assert code == 2 and "expected NAME=DIMS" in err   # a malformed option: usage error


def test_opset_and_domain_limits(tmp_path, capsys):
    path = _model_with(tmp_path, helper.make_node("Relu", ["x"], ["y"]), [X], opset=6)
    code, _, err = _run(capsys, "import", path)
    assert code == 1 and "opset 6 is outside the supported range 7 to" in err
    path = _model_with(tmp_path, helper.make_node("Relu", ["x"], ["y"]), [X], opset=9)
    code, _, err = _run(capsys, "import", path)    # converted to 11 (test_opset_upgrade.py)
    assert code == 0 and "converted from opset 9 to 11" in err
    node = helper.make_node("Mystery", ["x"], ["y"], name="m0", domain="com.example")
    path = _model_with(tmp_path, node, [X], domain_opsets=[helper.make_opsetid("com.example", 1)])
    code, _, err = _run(capsys, "import", path)
    assert code == 1 and "node 'm0' (Mystery, domain com.example, opset 17): ops of domain 'com.example'" in err


def test_f16_overflow_warns(tmp_path, capsys):
    m = ModelBuilder()
    m.output(m.node("Add", [m.input("x", [1, 20]), m.init(np.full((1, 20), 1e6, np.float32), "big")]))
    path = m.save(tmp_path / "big.onnx")
    code, _, err = _run(capsys, "import", path)
    assert code == 0
    assert err == (f"warning: {path}: constant 'big_1' has values beyond the f16 range (±65504); "
                   "they become ±inf\n")


def test_compile_run_inspect_and_fuse_take_onnx(tmp_path, capsys):
    m = ModelBuilder(4)
    y = m.node("Conv", [m.input("image", [1, 3, 8, 8]), m.weight((16, 3, 3, 3))], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])
    m.output(m.node("Tanh", [m.node("Add", [y, m.init(np.asarray(0.25, np.float32))])]))
    model = m.save(tmp_path / "tiny.onnx")
    code, _, err = _run(capsys, "compile", model, "-o", tmp_path / "tiny.blob")
    assert code == 0, err
    np.save(tmp_path / "image.npy", np.ones((1, 3, 8, 8), np.float16))
    code, out, err = _run(capsys, "run", model, "--input", f"image=@{tmp_path / 'image.npy'}", "--reference")
    assert code == 0, err
    assert "matches the numpy reference" in out
    code, out, _ = _run(capsys, "inspect", model, "--task-list", "DPU")
    assert code == 0 and "source=" + str(model) + " (imported)" in out
    code, out, _ = _run(capsys, "fuse", model)
    assert code == 0 and "0 subgraphs, 3 ops left out" in out   # bias and tanh are DPU post-ops
    code, _, err = _run(capsys, "compile", tmp_path / "tiny.blob", "--input-shape", "image=1x3x8x8")
    assert (code, err) == (2, "error: --input-shape applies to .onnx models only\n")


def test_compile_error_quotes_the_imported_op(tmp_path, capsys):
    """An op the lowering does not take: the error names the ONNX output it computes.  (A
    MatMul imported at f32: the DPU has no f32.  The reduction over axes apart in memory
    this test used is lowered since split_reductions.py.)"""
    m = ModelBuilder(5)
    m.output(m.node("MatMul", [m.node("Relu", [m.input("x", [1, 8, 4, 4])]), m.weight((4, 6))]))
    model = m.save(tmp_path / "f32.onnx")
    code, _, err = _run(capsys, "compile", model, "--precision", "f32", "-o", tmp_path / "f32.blob")
    assert code == 1
    assert err.startswith(f"{model} (imported):7:3: error: MatMul"), err
    assert "cannot run on the DPU: it is f32" in err
    assert not (tmp_path / "f32.blob").exists()


def test_run_takes_inputs_in_the_models_own_type(tmp_path, capsys):
    """An f32 model imported at f16 takes the f32 arrays onnxruntime takes, rounded to f16
    as its weights are; another type, or values f16 cannot hold, are refused."""
    x4 = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 2, 8])
    path = _model_with(tmp_path, helper.make_node("Relu", ["x"], ["y"]), [x4], out_shape=(1, 4, 2, 8))
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, _, err = _run(capsys, "run", path, "--input", f"x=@{tmp_path / 'x.npy'}",
                        "--output-dir", tmp_path / "out")
    assert (code, err) == (0, "")
    # Relu of an f16 value is that value or zero: exact
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(x.astype(np.float16), 0))
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    code, _, err = _run(capsys, "run", path, "--input", f"x=@{tmp_path / 'x64.npy'}")
    assert (code, err) == (1, "error: --input: input %x is f16, the value given is f64; give it as f16 "
                              "or as the model's f32, or pass --cast-inputs to convert it\n")
    x[0, 1, 1, 3] = 7e4
    np.save(tmp_path / "big.npy", x)
    code, _, err = _run(capsys, "run", path, "--input", f"x=@{tmp_path / 'big.npy'}")
    assert (code, err) == (1, "error: --input: input %x holds values beyond the f16 range (±65504), "
                              "which the model, imported as f16, cannot hold; scale it into range "
                              "(--cast-inputs would make them ±inf)\n")


def test_run_takes_the_models_own_names_that_vir_spells_otherwise(tmp_path, capsys):
    """Exported models name values 'gpu_0/data_0'; VIR spells that 'gpu_0_data_0'. `vpuc run`
    takes the model's names for --input, --expected and --output (and the program's), and
    checks an f32 input against the model's declared type under either name."""
    xin = helper.make_tensor_value_info("gpu_0/data_0", onnx.TensorProto.FLOAT, [1, 4, 2, 8])
    yout = helper.make_tensor_value_info("gpu_0/relu:0", onnx.TensorProto.FLOAT, [1, 4, 2, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["gpu_0/data_0"], ["gpu_0/relu:0"])],
                              "g", [xin], [yout])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "named.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = np.maximum(x.astype(np.float16), 0)
    np.save(tmp_path / "want.npy", want)
    for given in ("gpu_0/data_0", "gpu_0_data_0"):
        out = tmp_path / f"y_{given.replace('/', '_')}.npy"
        code, _, err = _run(capsys, "run", path, "--input", f"{given}=@{tmp_path / 'x.npy'}",
                            "--expected", f"gpu_0/relu:0=@{tmp_path / 'want.npy'}",
                            "--output", f"gpu_0/relu:0=@{out}")
        assert (code, err) == (0, "")
        np.testing.assert_array_equal(np.load(out), want)     # Relu of f16 values: exact
    code, _, err = _run(capsys, "run", path, "--input", f"gpu_0/data=@{tmp_path / 'x.npy'}")
    assert code == 2 and "the program has no input %gpu_0/data; its inputs are %gpu_0_data_0" in err


def test_simulate_takes_the_models_own_input_names(tmp_path):
    from vpuc import api
    xin = helper.make_tensor_value_info("in/x", onnx.TensorProto.FLOAT, [1, 4, 2, 8])
    yout = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 2, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["in/x"], ["y"])], "g", [xin], [yout])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    program = api.compile(tmp_path / "m.onnx")
    x = np.random.default_rng(1).standard_normal((1, 4, 2, 8)).astype(np.float16)
    got = api.simulate(program, {"in/x": x}).outputs["y"]
    np.testing.assert_array_equal(got, np.maximum(x, 0))      # a selection: exact
