"""Property: fused kernels compute what the unfused graph computes (random graphs, <= 30 ops).

Random elementwise graphs with random constants and branches (and a few ops the
tokenizer leaves out, run by the reference executor) are tokenized; every
subgraph becomes a generated kernel run on the fast path; the condensed graph
is executed in topological order and its Results compared with running the
whole graph in numpy.  Bit-identical, except where the graph contains a
documented approximation (Erf, Gelu's erf form, Power) or the data-flow
optimizer contracted Multiply + Add into an FMA (one rounding instead of two):
then within a relative 2e-3, and elements downstream of an *undecided*
comparison are not compared.  A comparison is undecided where an operand
depends on an approximated or contractible op and its two operands are within
that tolerance of each other (e.g. ``GreaterEqual(exp(x), Power(exp(x), 1))``:
equal in exact arithmetic, so the approximate Power decides which way it goes);
a Select or a u8 result then legitimately differs by a whole branch.  Each kernel is also compared bit for bit with
the reference run of its own data-flow-optimized body (gen_testlib.check_graph),
and the exact interpreter agrees with the fast path.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fusion_testlib import elementwise_graphs, graph_of, random_inputs
from gen_testlib import approximate, check_graph, check_outputs, contracted
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import approximates
from vpuc.fusion.generator.run import run_kernel
from vpuc.reference.graph import (BINARY, COMPARE, UNARY, check_input, run_graph, run_graph_values, run_op,
                                  runtime_dims)
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import PARAMETER, RESULT

SHAVE = get_target("shave")
# Found by hypothesis 6.100.0: unroll lost the definition of ``mnot m, m`` (NotEqual).
NOT_EQUAL_SELECT = graph_of("""
graph @g {
  %v1 = Parameter() : 1x4x3x5xf32 NCHW
  %v2 = Parameter() : 1x4x3x5xf32 NCHW
  %v3 = NotEqual(%v2, %v1)
  %v4 = Select(%v3, %v1, %v2)
  Result(%v4)
}""")
# Found by hypothesis 6.100.0: exp(x) >= Power(exp(x), 1) ties in exact arithmetic, the
# approximate Power decides it (the test's weakness, not the kernel's: see undecided()).
POWER_TIE = graph_of("""
graph @g {
  %x = Parameter() : 1x4x3x5xf32 NCHW
  %e = Exp(%x)
  %b = Constant([-2.0, -1.0, 0.0, 1.0, 2.0]) : 1x1x1x5xf32 NCHW
  %p = Power(%e, %b)
  %c = GreaterEqual(%e, %p)
  %s = Select(%c, %x, %p)
  Result(%c)
  Result(%s)
}""")
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


ELEMENTWISE = {"Select", "Broadcast", "Convert", "FMA"}
run_op_kinds = set(UNARY) | set(BINARY)
CONTRACTIBLE = {"Multiply", "Add", "Subtract"}


def undecided(graph, inputs, rtol, atol) -> list:
    """Per Result, the elements that depend on an undecided comparison (see the docstring)."""
    values, _ = run_graph_values(graph, inputs)
    loose: set = set()          # values computed by or from an approximated/contractible op
    masks: dict = {}            # value -> elements downstream of an undecided comparison
    out = []
    for op in graph.ops:
        masks_in = [masks.get(o, np.zeros((), bool)) for o in op.operands]
        if op.kind == RESULT:
            out.append(masks_in[0])
            continue
        if op.result is None:
            continue
        shape = np.shape(values[op.result])
        mask = np.zeros(shape, bool)
        for m in masks_in:
            elementwise = op.kind in COMPARE or op.kind in ELEMENTWISE or op.kind in run_op_kinds
            try:
                mask |= np.broadcast_to(m, shape) if elementwise else m.any()
            except ValueError:
                mask |= m.any()             # a layer mixes elements: all of them
        if op.kind in COMPARE and any(o in loose for o in op.operands):
            a, b = (values[o].astype(np.float64) for o in op.operands)
            mask |= np.broadcast_to(np.isclose(a, b, rtol=rtol, atol=atol), shape)
        if approximates(op) or op.kind in CONTRACTIBLE or any(o in loose for o in op.operands):
            loose.add(op.result)
        masks[op.result] = mask
    return out


@SETTINGS
@given(graph=elementwise_graphs(max_ops=30), seed=st.integers(0, 3))
@example(graph=NOT_EQUAL_SELECT, seed=0)
@example(graph=POWER_TIE, seed=1)
def test_fused_kernels_compute_the_unfused_graph(graph, seed):
    tok = tokenize(graph, SHAVE)
    inputs = random_inputs(graph, seed)
    expected = run_graph(graph, inputs)
    got, loose = run_fused(tok, inputs)
    if loose:
        for i, skip in enumerate(undecided(graph, inputs, rtol=2e-3, atol=1e-4)):
            skip = np.broadcast_to(skip, expected[i].shape)
            zero = np.zeros((), expected[i].dtype)
            expected[i], got[i] = np.where(skip, zero, expected[i]), np.where(skip, zero, got[i])
    check_outputs(expected, got, loose, rtol=2e-3, atol=1e-4)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=elementwise_graphs(max_ops=30, layers=False), seed=st.integers(0, 3))
@example(graph=NOT_EQUAL_SELECT, seed=0)
def test_each_kernel_matches_its_body_on_both_paths(graph, seed):
    check_graph(graph, random_inputs(graph, seed))
