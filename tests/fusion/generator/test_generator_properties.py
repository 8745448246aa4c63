"""Property: fused kernels compute what the unfused graph computes (random graphs, <= 30 ops).

Random elementwise graphs with random constants and branches (and a few ops the
tokenizer leaves out, run by the reference executor) are tokenized; every
subgraph becomes a generated kernel run on the fast path; the condensed graph
is executed in topological order and its Results compared with running the
whole graph in numpy.  Bit-identical, except where the graph contains a
documented approximation (Erf, Gelu's erf form, Power) or the data-flow
optimizer contracted Multiply + Add into an FMA (one rounding instead of two):
then within a relative 2e-3.  Each kernel is also compared bit for bit with
the reference run of its own data-flow-optimized body (gen_testlib.check_graph),
and the exact interpreter agrees with the fast path.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_testlib import elementwise_graphs, random_inputs
from gen_testlib import approximate, check_graph, check_outputs, contracted
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.run import run_kernel
from vpuc.reference.graph import check_input, run_graph, run_op, runtime_dims
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import PARAMETER, RESULT

SHAVE = get_target("shave")
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def run_fused(tok, inputs):
    """The condensed graph with each subgraph run as its generated kernel."""
    values, results, loose = {}, {}, False
    for kind, n in tok.condensed_order():
        if kind == "sg":
            sub = tok.subgraphs[n]
            kernel = generate(sub.body, sub.name)
            loose |= approximate(sub.body) or contracted(kernel.body)
            args = [values[v] for v in sub.inputs]
            shapes = [tuple(runtime_dims(r.type.dims, r.type.bound_shape)) for r in sub.body.results]
            run = run_kernel(kernel, args, shapes)
            assert run.status == 0
            values.update(zip(sub.outputs, run.outputs))
            continue
        op = tok.graph.ops[n]
        if op.kind == PARAMETER:
            values[op.result] = check_input(op, inputs[op.result])
        elif op.kind == RESULT:
            value = values[op.operands[0]]
            results[n] = np.broadcast_to(value, runtime_dims(op.type.dims, value.shape)).copy()
        else:
            values[op.result] = run_op(op, [values[o] for o in op.operands])
    return [results[i] for i in sorted(results)], loose


@SETTINGS
@given(graph=elementwise_graphs(max_ops=30), seed=st.integers(0, 3))
def test_fused_kernels_compute_the_unfused_graph(graph, seed):
    tok = tokenize(graph, SHAVE)
    inputs = random_inputs(graph, seed)
    expected = run_graph(graph, inputs)
    got, loose = run_fused(tok, inputs)
    check_outputs(expected, got, loose, rtol=2e-3, atol=1e-4)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=elementwise_graphs(max_ops=30, layers=False), seed=st.integers(0, 3))
def test_each_kernel_matches_its_body_on_both_paths(graph, seed):
    check_graph(graph, random_inputs(graph, seed))
