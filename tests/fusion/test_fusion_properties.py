"""Properties of tokenization over random elementwise graphs (up to 30 ops).

For every target (and a deliberately tight one), on graphs with random
constants, branches and a few ops the tokenizer leaves alone:

- the condensed graph (subgraphs + ops left out) is a DAG;
- no subgraph is over the target's limits: data pointers, Results, output shapes;
- every op is in exactly one subgraph or left out with a reason;
- executing the subgraphs and left-out ops in condensed topological order with the
  reference executor gives exactly what running the whole graph gives.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_testlib import elementwise_graphs, random_inputs, same
from vpuc.reference.graph import run_graph
from vpuc.fusion.subgraph import run_tokenized, tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import RESULT, SOURCE_KINDS
from vpuc.ir.graph_ops import broadcasts_to

SHAVE, X64 = get_target("shave"), get_target("x64")
TIGHT = dataclasses.replace(SHAVE, name="tight", data_pointers=4)
TARGETS = st.sampled_from([SHAVE, X64, TIGHT])
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_limits(tok) -> None:
    limit = tok.target.data_pointers
    for sub in tok.subgraphs:
        body = sub.body
        assert len(body.parameters) + len(body.results) == sub.pointers.total <= limit
        assert len(sub.inputs) == len(body.parameters) and len(sub.outputs) == len(body.results)
        results = [op for op in tok.graph.ops if op.kind == RESULT
                   and op.operands[0] in {tok.graph.ops[i].result for i in sub.ops}]
        assert len(results) <= 1
        shapes = [r.type.dims for r in body.results]
        assert all(broadcasts_to(a, b) or broadcasts_to(b, a) for a in shapes for b in shapes)


def check_partition(tok) -> None:
    placed = [i for sub in tok.subgraphs for i in sub.ops]
    assert len(placed) == len(set(placed))
    computing = {i for i, op in enumerate(tok.graph.ops)
                 if op.kind not in SOURCE_KINDS and op.kind != RESULT}
    assert set(placed) | set(tok.left_out) == computing and not set(placed) & set(tok.left_out)


@SETTINGS
@given(graph=elementwise_graphs(), target=TARGETS, seed=st.integers(0, 3))
def test_tokenization_is_acyclic_within_limits_and_exact(graph, target, seed):
    tok = tokenize(graph, target)
    order = tok.condensed_order()          # raises on a cycle
    assert len(order) == len({tok.unit(i) for i in range(len(graph.ops))})
    check_limits(tok)
    check_partition(tok)
    inputs = random_inputs(graph, seed)
    for whole, fused in zip(run_graph(graph, inputs), run_tokenized(tok, inputs), strict=True):
        assert same(whole, fused)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(graph=elementwise_graphs(max_ops=30, layers=False))
def test_pure_elementwise_graphs_leave_nothing_out(graph):
    # Every op is fusable and reaches a Result: each one lands in a subgraph.
    tok = tokenize(graph, SHAVE)
    assert not tok.left_out
    assert sum(len(sub.ops) for sub in tok.subgraphs) == len(
        [op for op in graph.ops if op.kind not in SOURCE_KINDS and op.kind != RESULT])
