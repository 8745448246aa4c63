"""The tokenizer's rules, one test each, on small hand-written graphs."""

from __future__ import annotations

import dataclasses

import numpy as np

from fusion_testlib import graph_of, random_inputs, same
from vpuc.fusion.subgraph import run_tokenized, tokenize
from vpuc.reference.graph import run_graph
from vpuc.fusion.targets import get_target
from vpuc.fusion.targets.mark_skipped import SKIPPED
from vpuc.fusion.tokenizer import Reason

SHAVE, X64 = get_target("shave"), get_target("x64")


def groups(tok):
    return [[tok.graph.ops[i].result for i in sub.ops] for sub in tok.subgraphs]


def left(tok):
    return {tok.graph.ops[i].result: d.reason for i, d in tok.left_out.items()}


def check_equal(tok, seed=0):
    inputs = random_inputs(tok.graph, seed)
    for a, b in zip(run_graph(tok.graph, inputs), run_tokenized(tok, inputs)):
        assert same(a, b)


def test_chain_attaches_and_branches_merge():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 1x8xf32
      %w = Parameter() : 1x8xf32
      %a = Relu(%x)
      %b = Exp(%a)
      %c = Sigmoid(%w)
      %d = Add(%b, %c)
      Result(%d)
    }"""), SHAVE)
    assert groups(tok) == [["a", "b", "c", "d"]]
    assert tok.subgraphs[0].start.reason is Reason.NO_SUBGRAPH_PARENT
    assert tok.subgraphs[0].inputs == ["x", "w"] and tok.subgraphs[0].outputs == ["d"]
    check_equal(tok)


def test_merge_refused_when_a_cycle_would_form():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 1x8xf32
      %m = Relu(%x)
      %s = Sigmoid(%m)
      %sm = Softmax(%m)
      %y = Add(%s, %sm)
      Result(%y)
    }"""), SHAVE)
    assert groups(tok) == [["m", "s"], ["y"]]
    start = tok.subgraphs[1].start
    assert start.reason is Reason.CYCLE and "%sm (Softmax)" in start.detail
    assert [tok.graph.ops[i].result for i in start.cut_from] == ["s"]
    tok.condensed_order()
    check_equal(tok)


def test_ranks_move_between_bounds():
    # %n attaches to {a} although {a} already feeds the Softmax %x (processed before %n):
    # the merged subgraph must rank below %x; then %m, which reads %x and %n, cannot join.
    tok = tokenize(graph_of("""graph @g {
      %p = Parameter() : 4xf32
      %a = Relu(%p)
      %x = Softmax{axis = 0}(%a)
      %n = Exp(%a)
      %m = Add(%n, %x)
      Result(%m)
    }"""), SHAVE)
    assert groups(tok) == [["a", "n"], ["m"]]
    assert tok.subgraphs[1].start.reason is Reason.CYCLE
    order = [tok.unit_name(u) for u in tok.condensed_order()]
    assert order.index("sg0") < order.index("%x (Softmax)") < order.index("sg1")
    check_equal(tok)


def test_a_subgraph_feeds_one_result():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 8xf32
      %a = Relu(%x)
      %b = Exp(%a)
      %c = Sigmoid(%b)
      Result(%a)
      Result(%c)
    }"""), SHAVE)
    assert groups(tok) == [["a", "b"], ["c"]]
    assert tok.subgraphs[1].start.reason is Reason.RESULTS
    alone = tokenize(graph_of("graph @g {\n %x = Parameter() : 8xf32\n %a = Relu(%x)\n"
                              " Result(%a)\n Result(%a)\n}"), SHAVE)
    assert groups(alone) == [] and left(alone) == {"a": Reason.RESULTS}


def test_data_pointer_limit_starts_a_new_subgraph():
    text = "graph @g {\n" + "".join(f" %p{i} = Parameter() : 4xf32\n" for i in range(6))
    text += " %s1 = Add(%p0, %p1)\n" + "".join(f" %s{i} = Add(%s{i - 1}, %p{i})\n" for i in range(2, 6))
    text += " Result(%s5)\n}"
    tiny = dataclasses.replace(SHAVE, name="tiny", data_pointers=5)
    tok = tokenize(graph_of(text), tiny)
    assert groups(tok) == [["s1", "s2", "s3"], ["s4", "s5"]]
    assert tok.subgraphs[1].start.reason is Reason.DATA_POINTERS
    assert all(sub.pointers.total <= 5 for sub in tok.subgraphs)
    assert tokenize(graph_of(text), SHAVE).subgraphs[0].pointers.total == 7
    two = dataclasses.replace(SHAVE, name="two", data_pointers=2)
    assert left(tokenize(graph_of(text), two))["s1"] is Reason.DATA_POINTERS
    check_equal(tok)


def test_scalar_constants_go_inside_and_tensor_constants_are_inputs():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 1x4x2x2xf32
      %c = Constant(0.5) : f32
      %one = Constant([1]) : 1x1x1x1xf32
      %k = Constant([1, 2, 3, 4]) : 1x4x1x1xf32
      %a = Multiply(%x, %c)
      %b = Add(%a, %k)
      %s = Softmax(%b)
      %d = Multiply(%s, %c)
      %e = Add(%d, %one)
      Result(%e)
    }"""), SHAVE)
    first, second = tok.subgraphs
    assert first.inputs == ["x", "k"] and second.inputs == ["s"]
    for sub, consts in ((first, ["c"]), (second, ["c", "one"])):
        assert [op.result for op in sub.body.ops if op.kind == "Constant"] == consts
    assert first.pointers.inputs == 2
    check_equal(tok)


DPU_GRAPH = """graph @g {
  %x = Parameter() : 1x8x4x4xf16
  %w = Constant(splat 0.5) : 8x8x1x1xf16
  %bias = Constant(splat 1) : 1x8x1x1xf16
  %full = Constant(splat 1) : 1x8x4x4xf16
  %c = Convolution(%x, %w)
  %b = Add(%c, %bias)
  %r = Relu(%b)
  %s = Sigmoid(%r)
  %c2 = Convolution(%s, %w)
  %f = Add(%c2, %full)
  %c3 = Convolution(%f, %w)
  %t = Tanh(%c3)
  %u = Exp(%c3)
  %y = Add(%t, %u)
  Result(%y)
}"""


def test_dpu_post_ops_are_skipped_by_plugin():
    tok = tokenize(graph_of(DPU_GRAPH), SHAVE)
    marked = {tok.graph.ops[i].result for i, d in tok.left_out.items()
              if d.reason is Reason.SKIPPED_BY_PLUGIN}
    # bias + one activation after %c; not the Sigmoid (the DPU has one activation), not an Add
    # of a full tensor, nothing after %c3 (its output has two readers).
    assert marked == {"b", "r"}
    assert "post-op (bias) of %c" in tok.left_out[5].detail
    assert SKIPPED in tok.graph.ops[5].marks
    assert ["s"] in groups(tok) and ["t", "u", "y"] in groups(tok)
    check_equal(tok)


def test_x64_post_op_chains_are_longer():
    tok = tokenize(graph_of(DPU_GRAPH.replace("f16", "f32")), X64)
    marked = {tok.graph.ops[i].result for i, d in tok.left_out.items()
              if d.reason is Reason.SKIPPED_BY_PLUGIN}
    assert marked == {"b", "r", "s"}


def test_matmul_bias_runs_along_the_last_axis():
    tok = tokenize(graph_of("""graph @g {
      %a = Parameter() : 4x8xf16
      %w = Constant(splat 1) : 8x16xf16
      %row = Constant(splat 1) : 1x16xf16
      %m = MatMul(%a, %w)
      %b = Add(%m, %row)
      %c = Clamp{min = 0, max = 6}(%b)
      %d = Exp(%c)
      Result(%d)
    }"""), SHAVE)
    assert left(tok) == {"m": Reason.NOT_TOKENIZABLE, "b": Reason.SKIPPED_BY_PLUGIN,
                         "c": Reason.SKIPPED_BY_PLUGIN}


def test_unsupported_types_and_output_shapes():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 4xi64
      %a = Abs(%x)
      %f = Convert{to = f32}(%a)
      %e = Exp(%f)
      Result(%e)
    }"""), SHAVE)
    assert left(tok) == {"a": Reason.UNSUPPORTED_TYPE, "f": Reason.UNSUPPORTED_TYPE}
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 4x1xf32
      %y = Parameter() : 1x4xf32
      %r = Relu(%x)
      %c = Relu(%y)
      %s = Add(%r, %c)
      %sr = Softmax{axis = 0}(%r)
      %sc = Softmax{axis = 1}(%c)
      Result(%s)
      Result(%sr)
      Result(%sc)
    }"""), SHAVE)
    assert groups(tok) == [["r"], ["c"], ["s"]]
    assert tok.subgraphs[2].start.reason is Reason.OUTPUT_SHAPES
    assert sorted(tok.subgraphs[2].start.cut_from) == [2, 3]


def test_every_cut_is_explained():
    tok = tokenize(graph_of(DPU_GRAPH), SHAVE)
    for boundary in tok.boundaries():
        assert boundary.decision.reason is not Reason.NO_SUBGRAPH_PARENT
    kinds = {(b.source[0], b.target[0]) for b in tok.boundaries()}
    assert ("op", "sg") in kinds and ("sg", "op") in kinds


def test_body_wiring():
    tok = tokenize(graph_of("""graph @g {
      %x = Parameter() : 2x3xf16 CN
      %c = Constant(2) : f16
      %a = Multiply(%x, %c)
      %b = Softmax(%a)
      %d = Add(%a, %b)
      Result(%d)
    }"""), SHAVE)
    body = tok.subgraphs[0].body
    assert [op.kind for op in body.ops] == ["Parameter", "Constant", "Multiply", "Result"]
    assert body.ops[0].type == tok.graph.ops[0].type and body.name == "g.sg0"
    second = tok.subgraphs[1]
    assert second.inputs == ["a", "b"] and [p.result for p in second.body.parameters] == ["a", "b"]
    check_equal(tok)
    assert np.all(np.isfinite(run_tokenized(tok, random_inputs(tok.graph))[0]))
