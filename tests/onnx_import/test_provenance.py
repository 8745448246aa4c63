"""Provenance at import: every graph op names the ONNX node(s) it came from, merged nodes
(a BatchNormalization folded into its Conv, a decomposed layer norm) name all of them,
and the printed module parses back with them."""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT
from vpuc.ir.provenance import LayerIndex, LayerSource, OnnxNode
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.zoo import ModelBuilder, small_cnn
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module


def _computing(graph):
    return [op for op in graph.ops if op.kind not in (PARAMETER, CONSTANT, RESULT)]


def test_every_op_names_its_node_and_folds_name_both(tmp_path):
    imported = import_onnx(small_cnn(0).save(tmp_path / "m.onnx"))
    graph = imported.module.graphs[0]
    ops = _computing(graph)
    assert all(op.origin for op in ops)
    conv = next(op for op in ops if op.kind == "Convolution")
    assert [n.op_type for n in conv.origin] == ["Conv", "BatchNormalization"]
    back = parse_text(print_module(imported.module), "m.vir").graphs[0]
    assert [op.origin for op in _computing(back)] == [op.origin for op in ops]


def test_a_decomposed_layer_norm_names_its_nodes(tmp_path):
    m = ModelBuilder(0)
    x = m.input("x", [1, 4, 8])
    mean = m.node("ReduceMean", [x], axes=[-1])
    d = m.node("Sub", [x, mean])
    var = m.node("ReduceMean", [m.node("Pow", [d, m.init(np.float32(2.0))])],
                 axes=[-1])
    eps = m.init(np.float32(1e-5))
    m.output(m.node("Div", [d, m.node("Sqrt", [m.node("Add", [var, eps])])]))
    imported = import_onnx(m.save(tmp_path / "ln.onnx"))
    mvn = next(op for op in imported.module.graphs[0].ops if op.kind == "MVN")
    assert {n.op_type for n in mvn.origin} == {"ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div"}


def test_a_quote_in_a_node_name_is_spelled_for_vir(tmp_path):
    m = ModelBuilder(0)
    x = m.input("x", [1, 8])
    m.output(m.node("Relu", [x]))
    m.nodes[-1].name = 'say "hi"\nthere'
    graph = import_onnx(m.save(tmp_path / "q.onnx")).module.graphs[0]
    relu = next(op for op in graph.ops if op.kind == "Relu")
    assert relu.origin == (OnnxNode("say 'hi' there", "Relu"),)


def test_a_task_belongs_to_the_longest_key():
    index = LayerIndex([LayerSource("a", (OnnxNode("n1", "Conv"),)),
                        LayerSource("a.b", (OnnxNode("n2", "Relu"),))])
    assert index.layer("a.b.load0").key == "a.b"
    assert index.layer("a.bc").key == "a"
    assert index.layer("a").key == "a"
    assert index.layer("z.load") is None
    fallback = LayerIndex([LayerSource("", (OnnxNode("n", "Add"),))])
    assert fallback.layer("s0.0.1").key == ""
