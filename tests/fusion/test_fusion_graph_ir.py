"""The graph dialect: broadcasting rules, and print -> parse round trips of random graphs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_testlib import elementwise_graphs, graph_of
from vpuc.ir.graph_ops import OPS, InferError, broadcast_shapes, broadcasts_to
from vpuc.ir.module import Module
from vpuc.ir.types import Dynamic
from vpuc.vir.parser import parse_text
from vpuc.vir.printer import print_module

D = Dynamic


@pytest.mark.parametrize("a,b,out", [
    ((1, 64, 8, 8), (64, 1, 1), (1, 64, 8, 8)),
    ((5,), (3, 1), (3, 5)),
    ((), (2, 3), (2, 3)),
    ((D(8), 1), (1, 4), (D(8), 4)),
    ((D(8), 4), (3, 1), (3, 4)),
    ((D(8),), (D(16),), (D(16),)),
])
def test_broadcast_shapes(a, b, out):
    assert broadcast_shapes(a, b) == out == broadcast_shapes(b, a)


def test_broadcast_mismatch_and_broadcasts_to():
    with pytest.raises(InferError, match="2x3 and 4 do not broadcast"):
        broadcast_shapes((2, 3), (4,))
    assert broadcasts_to((1, 3), (2, 3)) and not broadcasts_to((2, 3), (1, 3))
    assert not broadcasts_to((1, 1, 3), (2, 3))


def test_every_op_of_the_brief_is_in_the_table():
    wanted = """Parameter Constant Result Add Subtract Multiply Divide Maximum Minimum Power
        SquaredDifference Abs Negative Relu Clamp Exp Sigmoid Tanh Gelu Sqrt Floor Swish HSwish
        Elu Erf Select Equal NotEqual Less LessEqual Greater GreaterEqual Convert Convolution
        MatMul Softmax MaxPool Reshape Transpose""".split()
    assert set(wanted) <= set(OPS)
    assert {OPS[k].group for k in ("Convolution", "MatMul", "Softmax", "MaxPool", "Reshape",
                                   "Transpose")} == {"layer"}


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(graph=elementwise_graphs(max_ops=30))
def test_random_graphs_round_trip(graph):
    module = Module("m", graphs=[graph])
    text = print_module(module)
    again = parse_text(text, "<printed>")
    assert again == module and print_module(again) == text


def test_index_and_labels():
    g = graph_of("graph @g {\n %x = Parameter() : 4xf32\n %y = Relu(%x)\n %z = Add(%x, %y)\n"
                 " Result(%z)\n}")
    index = g.index()
    assert [op.result for op in index.consumers("x")] == ["y", "z"]
    assert index.producer("z").kind == "Add" and g.results[0].label == "Result(%z)"
    assert g.fresh_name("y") == "y.1" and g.fresh_name("w") == "w"
