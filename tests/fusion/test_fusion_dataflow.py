"""The data-flow optimizer: every pass keeps what a body computes.

The reference executor runs a body before and after the passes; a canonical
body takes its inputs in memory order (``PortLayout.to_memory``) and gives its
outputs back the same way.  FMA rounds once instead of twice, so it is checked
against exact arithmetic separately.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_testlib import BASE, elementwise_graphs, graph_of, random_inputs, same
from vpuc.diagnostics import VpucError
from vpuc.fusion.dataflow import DataflowContext, pipeline_names, run_dataflow
from vpuc.fusion.dataflow.base import insert_positioned
from vpuc.fusion.dataflow.layout import PortLayout
from vpuc.reference.graph import run_graph
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target

SHAVE = get_target("shave")


def run_canonical(body, inputs):
    """Run a canonical body on logical inputs; outputs back in logical (rank-normalized) form."""
    base = PortLayout.parse(body.results[0].attrs["layout"])
    feed = {}
    for param in body.parameters:
        array = inputs[param.result]
        array = array.reshape((1,) * (base.rank - array.ndim) + array.shape)
        feed[param.result] = base.to_memory(array)
    return [base.from_memory(out) for out in run_graph(body, feed)]


def blocked_layouts(body, block=2):
    rank = max(op.type.rank for op in body.parameters + body.results)
    if rank != 4:
        return {}
    return {p.result: PortLayout.parse(f"NCHW{block}c") for p in body.parameters
            if p.type.rank == 4 and p.type.dims[1] != 1}


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(graph=elementwise_graphs(max_ops=20, layers=False), blocked=st.booleans(),
       seed=st.integers(0, 3))
def test_pipeline_keeps_every_body_exact(graph, blocked, seed):
    names = [n for n in pipeline_names(SHAVE) if n != "mul-add-to-fma"]
    for sub in tokenize(graph, SHAVE).subgraphs:
        body = sub.body
        inputs = random_inputs(body, seed)
        before = run_graph(body, inputs)
        layouts = blocked_layouts(body) if blocked else {}
        run_dataflow(body, DataflowContext(SHAVE, layouts), names)
        kinds = {op.result: op.kind for op in body.ops}
        assert "Broadcast" not in kinds.values()
        assert not any(op.kind == "Constant" and op.is_scalar_constant for op in body.ops)
        assert all(kinds.get(op.operands[1]) != "Scalar" for op in body.ops if op.kind == "Power")
        after = run_canonical(body, inputs)
        for want, got in zip(before, after, strict=True):
            assert same(want.reshape(got.shape), got)


def test_fma_rounds_once_and_matches_exact_arithmetic():
    g = graph_of("""graph @g {
      %a = Parameter() : 64x?<=32xf16
      %b = Parameter() : 64x1xf16
      %c = Parameter() : 64x?<=32xf16
      %m = Multiply(%a, %b)
      %y = Add(%c, %m)
      Result(%y)
    }""")
    body = tokenize(g, SHAVE).subgraphs[0].body
    inputs = random_inputs(body, 3, {"a": 20, "c": 20})
    before = run_graph(body, inputs)[0].astype(np.float64)
    assert run_dataflow(body, DataflowContext(SHAVE), ["mul-add-to-fma"]) == ["mul-add-to-fma"]
    assert [op.kind for op in body.ops if op.kind not in ("Parameter", "Result")] == ["FMA"]
    after = run_graph(body, inputs)[0].astype(np.float64)
    a, b, c = (inputs[n].astype(np.float16).astype(np.float64) for n in "abc")
    exact = (a * b + c).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(after, exact)
    # Unfused, the product is rounded first: at most an f16 ulp of the terms apart.
    assert np.all(np.abs(after - before) <= 2 ** -9 * (np.abs(a * b) + np.abs(c)))


def test_positioned_passes_land_where_the_target_asks():
    assert pipeline_names(SHAVE) == ["canonicalization", "convert-constants-to-scalars",
                                     "convert-power-to-power-static", "mul-add-to-fma",
                                     "broadcast-to-move-broadcast"]
    names = ["a", "b"]
    assert insert_positioned(names, (("start", "s"), ("end", "e"), ("before:b", "x"),
                                     ("after:a", "y"))) == ["s", "a", "y", "x", "b", "e"]
    with pytest.raises(ValueError):
        insert_positioned(names, (("after:missing", "z"),))


def test_canonicalization_blocks_dynamic_inputs_and_is_idempotent():
    g = graph_of("""graph @g {
      %x = Parameter() : 1x8x?<=6x4xf32
      %b = Parameter() : 1x1x1x4xf32
      %s = Parameter() : 8x1x1xf32
      %y = Add(%x, %b)
      %z = Multiply(%y, %s)
      Result(%z)
    }""")
    with pytest.raises(VpucError, match="does not broadcast along"):
        run_dataflow(tokenize(g, SHAVE).subgraphs[0].body,
                     DataflowContext(SHAVE, {"x": PortLayout.parse("NCHW4c")}), ["canonicalization"])
    body = tokenize(g, SHAVE).subgraphs[0].body
    ctx = DataflowContext(SHAVE, {"x": PortLayout.parse("NCHW4c"), "s": PortLayout.parse("CHW")})
    with pytest.raises(VpucError):
        run_dataflow(body, ctx, ["canonicalization"])   # %s is full along C but planar
    ctx.layouts = {"x": PortLayout.parse("NHWC"), "s": PortLayout.parse("NCHW")}
    with pytest.raises(VpucError, match="rank"):
        run_dataflow(body, ctx, ["canonicalization"])
    ctx.layouts = {"x": PortLayout.parse("NHWC")}
    assert run_dataflow(body, ctx, ["canonicalization"]) == ["canonicalization"]
    shapes = [str(p.type) for p in body.parameters]
    assert shapes == ["1x?<=6x4x8xf32 NCHW", "1x1x4x1xf32 NCHW", "1x1x1x8xf32 NCHW"]
    assert run_dataflow(body, ctx, ["canonicalization"]) == []
    inputs = random_inputs(body, 1)
    logical = {name: array.transpose(0, 3, 1, 2) for name, array in inputs.items()}
    logical["s"] = logical["s"].reshape(8, 1, 1)
    whole = run_graph(g, logical)[0]
    np.testing.assert_array_equal(run_graph(body, inputs)[0].transpose(0, 3, 1, 2), whole)


def test_broadcast_to_move_broadcast_keeps_output_shapes():
    g = graph_of("""graph @g {
      %x = Parameter() : 2x1xf32
      %b = Broadcast{shape = [3, 2, 8]}(%x)
      %e = Exp(%b)
      Result(%e)
    }""")
    body = tokenize(g, SHAVE).subgraphs[0].body
    inputs = random_inputs(body)
    before = run_graph(body, inputs)[0]
    run_dataflow(body, DataflowContext(SHAVE), ["broadcast-to-move-broadcast"])
    assert [op.kind for op in body.ops] == ["Parameter", "MoveBroadcast", "Exp", "Result"]
    assert str(body.ops[2].type) == "2x8xf32 NC" and str(body.results[0].type) == "3x2x8xf32 CHW"
    assert same(run_graph(body, inputs)[0], before)


def test_pass_names_match_classes_and_files():
    import importlib

    from vpuc.fusion.dataflow import DATAFLOW_PASSES

    for name, cls in DATAFLOW_PASSES.items():
        module = importlib.import_module(f"vpuc.fusion.dataflow.{name.replace('-', '_')}")
        assert getattr(module, cls.__name__) is cls
        assert module.__doc__.startswith(f"{name}:")
