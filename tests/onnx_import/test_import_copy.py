"""The copy ops (``vpuc/onnx_import/convert_copy.py``): Pad in every mode with negative
pads and the axes input, Expand, Tile, and empty values among a Concat's operands
(``empty.py``): the imported graph (golden text), the DMA tasks each becomes (golden
text), and the compiled program simulated against onnxruntime.

Every case moves values without arithmetic (Expand's Add case adds once, in f16 on both
sides' f16-rounded inputs: one rounding), so with the input rounded to f16 on both sides
the simulated outputs equal onnxruntime's exactly.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.diagnostics import VpucError
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"


def _ints(m, values):
    return m.init(np.asarray(values, np.int64), "i")


def _pad(mode, pads, *more, shape=(1, 3, 5, 6)):
    def build(m):
        return m.node("Pad", [m.input("x", list(shape)), _ints(m, pads), *more], mode=mode)
    return build


def _pad_axes(m):
    """Pads of the last two axes only (opset 18's axes input, one of them negative)."""
    x = m.input("x", [1, 3, 5, 6])
    return m.node("Pad", [x, _ints(m, [1, 2, 2, 1]), "", _ints(m, [-1, 2])], mode="reflect")


def _pad_constant_crop(m):
    x = m.input("x", [1, 3, 5, 6])
    return m.node("Pad", [x, _ints(m, [0, 0, -1, 2, 0, 0, 1, -3]),
                          m.init(np.asarray(0.5, np.float32))], mode="constant")


def _expand_into_add(m):
    x = m.input("x", [1, 3, 1, 6])
    return m.node("Add", [m.node("Expand", [x, _ints(m, [1, 3, 4, 6])]), x])


def _empty_concat(m):
    """An empty Slice (rows 3:3) between two operands of a Concat: it vanishes from it."""
    x = m.input("x", [1, 3, 5, 6])
    nothing = m.node("Slice", [x, _ints(m, [3]), _ints(m, [3]), _ints(m, [2])])
    return m.node("Concat", [m.node("Relu", [x]), nothing, x], axis=2)


CASES = {
    "pad_reflect": _pad("reflect", [0, 0, 2, 1, 0, 0, 1, 3]),
    "pad_edge": _pad("edge", [0, 1, 2, 0, 0, 0, 1, 4]),
    "pad_wrap": _pad("wrap", [0, 0, 7, 1, 0, 0, 1, 2]),       # wider than the dim: periodic
    "pad_reflect_crop": _pad("reflect", [0, 0, -1, 2, 0, 0, 3, -2]),
    "pad_constant_crop": _pad_constant_crop,
    "pad_axes": _pad_axes,
    "tile": lambda m: m.node("Tile", [m.input("x", [1, 3, 5, 6]), _ints(m, [2, 1, 3, 2])]),
    "expand": lambda m: m.node("Expand", [m.input("x", [3, 1, 6]), _ints(m, [2, 1, 4, 1])]),
    "expand_into_add": _expand_into_add,
    "empty_concat": _empty_concat,
}


def _model(tmp_path, case):
    m = ModelBuilder(seed=0, opset=19)
    m.output(CASES[case](m))
    return m.save(tmp_path / f"{case}.onnx", case), m


def _golden(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.expected"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_text(case, tmp_path):
    path, _ = _model(tmp_path, case)
    _golden(f"copy_{case}", print_module(import_onnx(path, precision="f32").module))


def _dma_tasks(program) -> list[str]:
    """The program's DMA task lines with the views they name, one block per task."""
    text = print_module(program.module)
    views = {line.split()[1]: line.strip() for line in text.splitlines() if line.strip().startswith("view %")}
    out = []
    for line in text.splitlines():
        if ": dma " not in line:
            continue
        words = line.split()
        out.append(" ".join(w for w in words if not w.startswith(("waits(", "updates(", "%b"))))
        out += [f"    {views[w]}" for w in words if w in views]
    return out


# The DMA tasks a copy op's segment is, as (case, count): one per piece, none per element.
# pad_reflect pads rows 2 + 1 and columns 1 + 3: rows [2, 1, 0..4, 3] are 4 runs, columns
# [1, 0..5, 4, 3, 2] 5, so 4 x 5 = 20 copies (the interior, 9 border strips, 10 corners);
# tile [2, 1, 3, 2] copies the input once and doubles: 1 + 1 + 2 + 1 = 5 copies, where a
# copy per block would be 2 x 3 x 2 = 12.
PIECES = {"pad_reflect": 20, "tile": 5}


@pytest.mark.parametrize("case", ["pad_reflect", "pad_wrap", "pad_constant_crop", "tile"])
def test_lowered_tasks(case, tmp_path):
    path, _ = _model(tmp_path, case)
    tasks = _dma_tasks(api.compile(path))
    _golden(f"copy_lowered_{case}", "\n".join(tasks) + "\n")
    if case in PIECES:
        assert sum(": dma " in t for t in tasks) == PIECES[case]


def test_expand_read_by_an_elementwise_op_is_no_copy(tmp_path):
    """The Broadcast an Expand becomes is fused into the Add reading it: the program's
    only DMAs load x and store y, no DDR -> DDR copy of the expanded tensor."""
    path, _ = _model(tmp_path, "expand_into_add")
    program = api.compile(path)
    graph_kinds = [op.kind for op in import_onnx(path).module.graphs[0].ops]
    assert "Broadcast" in graph_kinds
    assert not any("expand" in line for line in _dma_tasks(program))


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_matches_onnxruntime(case, tmp_path):
    path, m = _model(tmp_path, case)
    shape = [d.dim_value for d in m.inputs[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x}).outputs.values())).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0]
    if case == "expand_into_add":          # one f16 rounding of the exact f32 sum
        want = want.astype(np.float16).astype(np.float32)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _refused(tmp_path, build, opset=19):
    m = ModelBuilder(seed=0, opset=opset)
    m.output(build(m))
    path = m.save(tmp_path / "refused.onnx", "refused")
    with pytest.raises(VpucError) as info:
        import_onnx(path)
    return str(info.value)


def test_a_reflection_beyond_the_border_is_refused_at_its_node(tmp_path):
    text = _refused(tmp_path, _pad("reflect", [0, 0, 0, 2, 0, 0, 0, 0], shape=(1, 2, 4, 2)))
    assert "node 'Pad_" in text and "(Pad, domain ai.onnx, opset 19)" in text
    assert "by 2 and 0 on axis 3 reflects 2 elements of the 2 kept; a reflection reaches at most 1" in text


def test_a_run_time_pad_value_is_refused_at_its_node(tmp_path):
    def build(m):
        x = m.input("x", [1, 2, 4, 4])
        value = m.node("ReduceMax", [x], keepdims=0)
        return m.node("Pad", [x, _ints(m, [0, 0, 1, 1, 0, 0, 1, 1]), value])
    text = _refused(tmp_path, build)
    assert "node 'Pad_" in text and "must be a constant" in text


def test_a_reduction_of_an_empty_value_folds_to_its_identity(tmp_path):
    """ReduceSum over an empty axis reads known values only: it folds, to zeros, as
    onnxruntime computes it; the Add then adds a constant."""
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", [1, 2, 4, 4])
    nothing = m.node("Slice", [x, _ints(m, [2]), _ints(m, [2]), _ints(m, [3])])
    m.output(m.node("Add", [m.node("ReduceSum", [nothing, _ints(m, [3])], keepdims=1), x]))
    path = m.save(tmp_path / "reduce_empty.onnx", "reduce_empty")
    x16 = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float16)
    got = next(iter(api.simulate(api.compile(path), {"x": x16}).outputs.values()))
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x16.astype(np.float32)})[0]
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_a_graph_op_reading_an_empty_value_is_refused_at_its_node():
    """Graph ops take no empty tensors: a converter asking for one as an operand is
    refused at the node (ONNX's valid models seldom reach it: broadcasting a 0 against a
    run-time dim is refused by ONNX's shape inference first)."""
    from onnx import helper

    from vpuc.ir.types import ElemType
    from vpuc.onnx_import.builder import GraphBuilder
    from vpuc.onnx_import.empty import make_empty
    b = GraphBuilder("main", ElemType.F16, "m.onnx", 19)
    make_empty(b, "e", (2, 0))
    b.node = helper.make_node("Relu", ["e"], ["y"], name="relu_e")
    with pytest.raises(VpucError, match=r"node 'relu_e' \(Relu.*input 'e' is empty \(2x0\)"):
        b.value("e")


def test_an_empty_model_output_is_no_graph_result_but_an_empty_output(tmp_path):
    """tests/onnx_import/test_empty_outputs.py runs such models."""
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", [1, 2, 4, 4])
    m.output(m.node("Slice", [x, _ints(m, [4]), _ints(m, [2 ** 62]), _ints(m, [2])]))
    m.output(m.node("Relu", [x]))
    imported = import_onnx(m.save(tmp_path / "empty_out.onnx", "empty_out"))
    assert [op.kind for op in imported.module.graphs[0].ops] == ["Parameter", "Relu", "Result"]
    assert {n: t.shape_str() for n, t in imported.empty_outputs.items()} == {"slice_4": "1x2x0x4xf16"}


def test_an_empty_value_stays_empty_through_an_elementwise_op(tmp_path):
    """Relu of an empty Slice is empty (ONNX infers 0 rows): it vanishes from the Concat."""
    m = ModelBuilder(seed=0, opset=19)
    x = m.input("x", [1, 2, 4, 4])
    nothing = m.node("Relu", [m.node("Slice", [x, _ints(m, [1]), _ints(m, [1]), _ints(m, [2])])])
    m.output(m.node("Concat", [x, nothing, x], axis=2))
    path = m.save(tmp_path / "relu_empty.onnx", "relu_empty")
    kinds = [op.kind for op in import_onnx(path).module.graphs[0].ops]
    assert kinds == ["Parameter", "Concat", "Result"]
