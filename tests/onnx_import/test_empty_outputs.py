"""Model outputs with a dim of 0 (``vpuc/onnx_import/empty.py``, ``Program.empty_outputs``):
compiled, returned by a simulation as an empty array of onnxruntime's shape, beside the
outputs the program writes, from the .onnx file and from the blob alike."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.blob.content import KeyValue
from vpuc.blob.empty_outputs import split_empty_outputs
from vpuc.cli import main
from vpuc.diagnostics import VpucError
from vpuc.onnx_import.zoo import ModelBuilder

SHAPE = (1, 2, 4, 4)


def _ints(m, values):
    return m.init(np.asarray(values, np.int64), "i")


def _nothing(m, x):
    """A Slice of axis 3 from 4 on: nothing (1x2x4x0)."""
    return m.node("Slice", [x, _ints(m, [4]), _ints(m, [2 ** 62]), _ints(m, [3])])


def _beside(tmp_path) -> str:
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", list(SHAPE))
    m.output(_nothing(m, x))
    m.output(m.node("Relu", [x]))
    return m.save(tmp_path / "beside.onnx", "beside")


def _only(tmp_path) -> str:
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", list(SHAPE))
    m.output(_nothing(m, x))
    m.output(m.node("Split", [x, _ints(m, [2, 0])], n_out=2, axis=1)[1])     # a part of size 0
    return m.save(tmp_path / "only.onnx", "only")


def _onnxruntime(path, x):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"x": x.astype(np.float32)}), strict=True))


def _input():
    return np.random.default_rng(3).standard_normal(SHAPE).astype(np.float16)


def _check(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        if value.size:       # Relu of f16 values: exact
            np.testing.assert_array_equal(got[name].astype(np.float32), value)
        else:
            assert got[name].dtype == np.float16     # the graph's precision, as any output


def test_an_empty_output_beside_a_computed_one(tmp_path):
    path, x = _beside(tmp_path), _input()
    program = api.compile(path)
    assert [t.shape_str() for t in program.empty_outputs.values()] == ["1x2x4x0xf16"]
    _check(api.simulate(program, {"x": x}).outputs, _onnxruntime(path, x))


def test_a_model_of_empty_outputs_only_is_a_program_of_no_tasks(tmp_path):
    path, x = _only(tmp_path), _input()
    program = api.compile(path)
    assert not any(tl.tasks for tl in program.module.task_lists)
    sim = api.simulate(program, {"x": x})
    assert sim.cycles == 0
    want = _onnxruntime(path, x)
    assert [v.shape for v in want.values()] == [(1, 2, 4, 0), (1, 0, 4, 4)]
    _check(sim.outputs, want)


@pytest.mark.parametrize("fmt", ["fb", "elf"])
@pytest.mark.parametrize("model", [_beside, _only])
def test_empty_outputs_come_back_through_the_blob_file(tmp_path, fmt, model):
    path, x = model(tmp_path), _input()
    program = api.compile(path)
    blob = tmp_path / f"m.{fmt}"
    api.write_blob(program, fmt, blob)
    again = api.load(blob)
    assert again.empty_outputs == program.empty_outputs
    assert again.provenance == program.provenance        # the pairs are not provenance
    _check(api.simulate(again, {"x": x}).outputs, _onnxruntime(path, x))


def test_vpuc_run_writes_and_inspect_shows_an_empty_output(tmp_path, capsys):
    path = _beside(tmp_path)
    blob = tmp_path / "beside.blob"
    assert main(["compile", path, "-o", str(blob)]) == 0
    np.save(tmp_path / "x.npy", _input())
    out = tmp_path / "out"
    assert main(["run", str(blob), "--input", f"x=@{tmp_path / 'x.npy'}",
                 "--output-dir", str(out)]) == 0
    want = _onnxruntime(path, _input())
    for name, value in want.items():
        assert np.load(out / f"{name}.npy").shape == value.shape
    empty = next(name for name, value in want.items() if not value.size)
    assert main(["run", path, "--input", f"x=@{tmp_path / 'x.npy'}",
                 "--output", f"{empty}=@{tmp_path / 'e.npy'}"]) == 0
    assert np.load(tmp_path / "e.npy").shape == want[empty].shape
    capsys.readouterr()
    assert main(["inspect", str(blob)]) == 0
    assert f"empty-output:{empty}=1x2x4x0xf16" in capsys.readouterr().out


def test_an_empty_output_of_integers_keeps_its_type(tmp_path):
    """Shape's int64, sliced to nothing: an empty i64 array, as onnxruntime's."""
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", list(SHAPE))
    m.output(m.node("Relu", [x]))
    m.output(m.node("Slice", [m.node("Shape", [x]), _ints(m, [4]), _ints(m, [9]), _ints(m, [0])]))
    path = m.save(tmp_path / "ints.onnx", "ints")
    got = api.simulate(api.compile(path), {"x": _input()}).outputs
    want = _onnxruntime(path, _input())
    empty = [name for name, value in want.items() if not value.size]
    assert [(got[n].shape, got[n].dtype) for n in empty] == [((0,), np.dtype(np.int64))]


@pytest.mark.parametrize("value", ["1x2x4xf16", "1x0xq7", "x0", "1x-1x0xf16"])
def test_a_bad_empty_output_record_is_a_located_error(value):
    def fail(where, message):
        return VpucError(f"m.blob: blob {where}: {message}")
    with pytest.raises(VpucError, match=r"m\.blob: blob provenance 'empty-output:y': .* is not "
                                        r"the type of an empty output"):
        split_empty_outputs((KeyValue("empty-output:y", value),), fail)
