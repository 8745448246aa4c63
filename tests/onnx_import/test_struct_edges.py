"""ArgMax/ArgMin ties, the structural ops' refusals, and model outputs that are the input or
a constant (``vpuc/onnx_import/convert_struct.py``, ``output_copies.py``), split from
``test_struct_ops``: ties must pick the index ``select_last_index`` names; a refusal names
the node and the reason; an output that is an input or a constant is one copy DMA, and
matches onnxruntime exactly (a copy of f16 values)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc import api
from vpuc.arch import load_arch
from vpuc.onnx_import.source import onnx_as_vir
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VPUC_UPDATE_GOLDEN") == "1"


def _onnxruntime(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


TIES = np.asarray([[1, 3, 3, 0, 3, 2], [5, 5, 5, 5, 5, 5], [0, 1, 2, 3, 4, 4], [-2, -1, -3, -1, -4, -5]],
                  np.float16)
# (op, select_last_index): the index each row of TIES must give
TIED_INDEX = {("ArgMax", 0): [1, 0, 4, 1], ("ArgMax", 1): [4, 5, 5, 3],
              ("ArgMin", 0): [3, 0, 0, 5], ("ArgMin", 1): [3, 5, 0, 5]}


@pytest.mark.parametrize("op, last", sorted(TIED_INDEX))
def test_ties_pick_the_index_select_last_index_names(op, last, tmp_path):
    """Rows whose extreme appears two to six times: the first index, or the last with
    select_last_index=1, on both sides."""
    m = ModelBuilder(seed=0, opset=13)
    m.output(m.node(op, [m.input("x", [4, 6])], axis=-1, keepdims=0, select_last_index=last))
    path = m.save(tmp_path / "ties.onnx", "ties")
    got = next(iter(api.simulate(api.compile(path), {"x": TIES}).outputs.values()))
    want = _onnxruntime(path, TIES.astype(np.float32))
    assert want.tolist() == TIED_INDEX[op, last] and got.tolist() == TIED_INDEX[op, last], got


def _one_node(op, inputs, opset, **attrs):
    def build(m, x):
        return m.node(op, [x] + [f(m) for f in inputs], **attrs)
    return build


REFUSED = {
    "einsum_diagonal": (_one_node("Einsum", [], 12, equation="ii->i"), 12, [4, 4], "Einsum",
                        "Einsum 'ii->i' repeats 'i' in term 'ii' (a diagonal or trace)"),
    "einsum_trace": (_one_node("Einsum", [], 12, equation="ii"), 12, [4, 4], "Einsum",
                     "Einsum 'ii' repeats 'i' in term 'ii' (a diagonal or trace)"),
    "attention_softcap": (_one_node("Attention", [lambda m: m.weight((1, 2, 7, 8)), lambda m: m.weight((1, 2, 7, 8))],
                                    23, softcap=30.0), 23, [1, 2, 5, 8], "Attention",
                          "Attention softcap=30.0 is not supported (only 0: no cap)"),
    "attention_past": (_one_node("Attention", [lambda m: m.weight((1, 2, 7, 8)), lambda m: m.weight((1, 2, 7, 8)),
                                               lambda m: "", lambda m: m.weight((1, 2, 3, 8)),
                                               lambda m: m.weight((1, 2, 3, 8))], 23), 23, [1, 2, 5, 8],
                       "Attention", "Attention with past_key / past_value (a KV cache) is not supported"),
    "gather_nd_computed_indices": (None, 13, [3, 4], "GatherND", "must be a constant"),
    "argmax_beyond_f16": (_one_node("ArgMax", [], 13, axis=1), 13, [1, 3000], "ArgMax",
                          "ArgMax over 3000 values: indices above 2048 are not exact in f16"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_the_reason_at_the_node(case, tmp_path, capsys):
    from vpuc.cli import main
    build, opset, shape, op, reason = REFUSED[case]
    m = ModelBuilder(seed=0, opset=opset)
    x = m.input("x", shape)
    if build is None:             # indices computed from the input: an ArgMax
        y = m.node("GatherND", [x, m.node("ArgMax", [x], axis=1)], batch_dims=1)
    else:
        y = build(m, x)
    m.output(y)
    model = m.model(case)
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    onnx.save(model, tmp_path / f"{case}.onnx")
    assert main(["import", str(tmp_path / f"{case}.onnx")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err, err
    if reason is not None:
        assert f"({op}, domain ai.onnx, opset {opset}): " in err and reason in err, err


def _passthrough(tmp_path, constant: bool) -> str:
    """A model with two outputs: Relu(x), and x itself (or a constant folded at import)."""
    source = "c" if constant else "x"
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "c")]
    if constant:
        nodes.append(helper.make_node("Add", ["c", "c"], ["twice"]))
        source = "twice"
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("r", source)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              outputs, inits)
    path = tmp_path / f"pass_{source}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.mark.parametrize("constant", [False, True])
def test_output_that_is_an_input_or_a_constant_is_copied(constant, tmp_path):
    """The second output is the graph input (or a folded constant): one DMA copies it into
    the output the program writes, bit for bit what onnxruntime returns."""
    path = _passthrough(tmp_path, constant)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float16)
    program = api.compile(path)
    printed = print_module(program.module)
    source = "twice.value" if constant else "x"
    assert re.search(rf"dma %{re.escape(source)} -> %\S+ channel", printed), printed
    outputs = list(api.simulate(program, {"x": x}).outputs.values())
    want = _onnxruntime_all(path, x.astype(np.float32))
    assert len(outputs) == 2
    for got, expected in zip(outputs, want):
        assert (got.astype(np.float32) == expected.astype(np.float16).astype(np.float32)).all()


@pytest.mark.parametrize("constant", [False, True])
def test_output_copy_lowering_golden(constant, tmp_path):
    """The copy of an input or a constant into its output: one DMA of its own."""
    text, name, _ = onnx_as_vir(_passthrough(tmp_path, constant), None, "f16")
    module = parse_text(text, name)
    PassManager(parse_pipeline("lower-graph")).run(module, PassContext(load_arch(module.arch)))
    lowered = print_module(module)
    golden = GOLDEN / f"lowered_output_copy_{'constant' if constant else 'input'}.expected"
    if UPDATE:
        golden.write_text(lowered)
    assert lowered == golden.read_text()


def test_model_with_no_nodes_returns_its_input(tmp_path):
    graph = helper.make_graph([], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "nothing.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    got = next(iter(api.simulate(api.compile(str(path)), {"x": x}).outputs.values()))
    assert (got == x).all()


def _onnxruntime_all(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
