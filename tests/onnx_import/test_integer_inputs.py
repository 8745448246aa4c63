"""Integer and bool model inputs and outputs (issue 11): int64 and int32 inputs are i32
Parameters (the NPU has no int64; the boundary converts, as Intel's NPU plugin's
ConvertPrecision does), bool and uint8 are u8, int8 is i8; ``vpuc run`` takes the ONNX
dtype, refuses an int64 beyond i32 naming the input and where, and writes each output in
the type the model declares."""

import numpy as np
import pytest
from onnx import TensorProto

from vpuc.cli import main
from vpuc.ir.graph import PARAMETER
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.zoo import ModelBuilder


def _masked_sum(tmp_path):
    """ids (int64) cast to float, added to x where mask (bool) holds; an int64 output too."""
    m = ModelBuilder(opset=17)
    ids, mask, x = m.input("ids", [1, 8], TensorProto.INT64), \
        m.input("mask", [1, 8], TensorProto.BOOL), m.input("x", [1, 8])
    total = m.node("Add", [m.node("Cast", [ids], to=TensorProto.FLOAT), x])
    m.output(m.node("Where", [mask, total, x]))
    m.output(m.node("ArgMax", [x], axis=1, keepdims=1), TensorProto.INT64)
    m.output(m.node("Greater", [x, m.init(np.zeros((), np.float32), "zero")]), TensorProto.BOOL)
    path = m.save(tmp_path / "masked.onnx", "masked")
    feeds = {"ids": np.arange(8, dtype=np.int64).reshape(1, 8) * 3 - 5,
             "mask": (np.arange(8) % 3 == 0).reshape(1, 8),
             "x": np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8)}
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    return path, feeds, m


def _args(tmp_path, **files):
    out = []
    for name in ("ids", "mask", "x"):
        out += ["--input", f"{name}=@{tmp_path / files.get(name, name + '.npy')}"]
    return out


@pytest.mark.parametrize("onnx_type, elem", [(TensorProto.INT64, "i32"), (TensorProto.INT32, "i32"),
                                             (TensorProto.BOOL, "u8"), (TensorProto.UINT8, "u8"),
                                             (TensorProto.INT8, "i8")])
def test_integer_inputs_import_as_the_npus_types(tmp_path, onnx_type, elem):
    m = ModelBuilder(opset=17)
    x = m.input("x", [2, 3], onnx_type)
    m.output(m.node("Identity", [x]), onnx_type)
    module = import_onnx(m.save(tmp_path / "m.onnx", "m")).module
    [param] = [op for op in module.graphs[0].ops if op.kind == PARAMETER]
    assert str(param.type.elem) == elem


def test_an_input_of_another_type_is_refused_naming_it(tmp_path, capsys):
    m = ModelBuilder(opset=17)
    x = m.input("codes", [2], TensorProto.UINT16)
    m.output(m.node("Identity", [x]), TensorProto.UINT16)
    path = m.save(tmp_path / "m.onnx", "m")
    assert main(["compile", path, "-o", str(tmp_path / "m.blob")]) == 1
    err = capsys.readouterr().err
    assert "input 'codes' has element type uint16; vpuc takes float inputs and bool, int32, " \
           "int64, int8, uint8 ones" in err
    assert "Traceback" not in err


def test_run_takes_the_onnx_dtypes_and_writes_the_declared_ones(tmp_path, capsys):
    import onnxruntime as ort
    path, feeds, m = _masked_sum(tmp_path)
    outs = m.model("masked").graph.output
    assert main(["run", path, *_args(tmp_path), "--output-dir", str(tmp_path / "out")]) == 0
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    for value, expected in zip(outs, want):
        got = np.load(tmp_path / "out" / f"{value.name}.npy")
        if expected.dtype.kind == "f":   # computed in f16: x rounded once, the sum once
            assert got.dtype == np.float16
            bound = 2 ** -11 * (np.abs(feeds["x"]) + np.abs(expected))
            assert np.all(np.abs(got.astype(np.float32) - expected) <= bound), value.name
        else:                            # integers and booleans exact, in the declared type
            assert got.dtype == expected.dtype, value.name
            assert np.array_equal(got, expected), value.name


@pytest.mark.parametrize("bad", [2 ** 31, -2 ** 31 - 1, 2 ** 40])
def test_an_int64_beyond_i32_is_a_located_error(tmp_path, capsys, bad):
    path, feeds, _ = _masked_sum(tmp_path)
    ids = feeds["ids"].copy()
    ids[0, 5] = bad
    np.save(tmp_path / "big.npy", ids)
    assert main(["run", path, *_args(tmp_path, ids="big.npy")]) == 1
    err = capsys.readouterr().err
    assert f"input %ids holds {bad} at index [0, 5], beyond the i32 range" in err
    assert "Traceback" not in err


def test_a_wrong_integer_dtype_is_a_located_error(tmp_path, capsys):
    path, feeds, _ = _masked_sum(tmp_path)
    np.save(tmp_path / "ids16.npy", feeds["ids"].astype(np.int16))
    assert main(["run", path, *_args(tmp_path, ids="ids16.npy")]) == 1
    err = capsys.readouterr().err
    assert "input %ids is i32, the value given is i16; give it as i32 or as the model's i64" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("n", [8, 37])
def test_boolean_logic_on_bool_inputs_alone(tmp_path, n):
    """A body of u8 values alone (no float operand to set its loop width) runs 8 lanes:
    it was refused as 'u8 values in a loop of 16 elements' (16 u8 lanes)."""
    import onnxruntime as ort
    m = ModelBuilder(opset=17)
    a, b = m.input("a", [1, n], TensorProto.BOOL), m.input("b", [1, n], TensorProto.BOOL)
    m.output(m.node("Not", [a]), TensorProto.BOOL)
    m.output(m.node("Xor", [m.node("And", [a, b]), m.node("Or", [m.node("Not", [b]), a])]),
             TensorProto.BOOL)
    path = m.save(tmp_path / "logic.onnx", "logic")
    rng = np.random.default_rng(n)
    feeds = {k: rng.random((1, n)) < 0.5 for k in ("a", "b")}
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
    args = [x for k in feeds for x in ("--input", f"{k}=@{tmp_path / (k + '.npy')}")]
    assert main(["run", path, *args, "--output-dir", str(tmp_path / "out")]) == 0
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for value, expected in zip(m.model("logic").graph.output, want):
        got = np.load(tmp_path / "out" / f"{value.name}.npy")
        assert got.dtype == np.bool_ and np.array_equal(got, expected), value.name


@pytest.mark.parametrize("n", [8, 37])
def test_int8_input_cast_to_float(tmp_path, n):
    """An int8 input used: Cast to float was refused at lowering (the ACT SHAVE kernels had
    no i8: 'unsupported-type: %q is i8'); now the Convert sign-extends it exactly."""
    import onnxruntime as ort
    m = ModelBuilder(opset=17)
    q = m.input("q", [1, n], TensorProto.INT8)
    as_float = m.node("Cast", [q], to=TensorProto.FLOAT)
    m.output(m.node("Mul", [as_float, m.init(np.full((), 0.5, np.float32), "half")]))
    path = m.save(tmp_path / "i8.onnx", "i8")
    codes = np.random.default_rng(n).integers(-128, 128, (1, n)).astype(np.int8)
    codes[0, :3] = [-128, 127, -1]
    np.save(tmp_path / "q.npy", codes)
    assert main(["run", path, "--input", f"q=@{tmp_path / 'q.npy'}",
                 "--output-dir", str(tmp_path / "out")]) == 0
    [want] = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"q": codes})
    [value] = m.model("i8").graph.output
    got = np.load(tmp_path / "out" / f"{value.name}.npy")
    assert np.array_equal(got.astype(np.float32), want)     # q / 2 is exact in f16
