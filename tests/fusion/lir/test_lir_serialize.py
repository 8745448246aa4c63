"""Serialization: the control flow round-trips exactly; the data flow is the value graph."""

import json

import pytest

from lir_testlib import SHAVE, bodies, check_lir, inputs_for
from vpuc.fusion.lir.kinds import LOOP_MARKERS
from vpuc.fusion.lir.linear_ir import LoweringConfig
from vpuc.fusion.lir.pipeline import LIR_PIPELINE, lower_subgraph
from vpuc.fusion.lir.printer import print_lir
from vpuc.fusion.lir.serialize import control_flow_json, data_flow_json, lir_from_json

CASES = {
    "tail": """graph @g {
      %x = Parameter() : 3x21xf16
      %b = Parameter() : 3x1xf16
      %c = Constant(0.5) : f16
      %m = Multiply(%x, %c)
      %a = Add(%m, %b)
      Result(%a)
    }""",
    "dynamic": """graph @g {
      %x = Parameter() : 2x?<=30xf32
      %y = Parameter() : 1x?<=30xf32
      %a = Maximum(%x, %y)
      %l = Less(%a, %y)
      %s = Select(%l, %x, %a)
      Result(%s)
    }""",
    "buffers": """graph @g {
      %x = Parameter() : 4x24xf16
      %y = Parameter() : 4x24xf16
      %a = Relu(%x)
      %b = Exp(%y)
      %s = Add(%a, %b)
      %t = Tanh(%s)
      %c = Sigmoid(%b)
      %u = Multiply(%c, %t)
      Result(%u)
    }""",
}


def lowered(name: str, spill: bool = False, unfused: bool = False):
    body = bodies(CASES[name])[0]
    config = LoweringConfig(SHAVE)
    if spill:
        config.registers = config.registers.with_budget(vec=4)
    passes = [p for p in LIR_PIPELINE if not (unfused and p == "fuse-loops")]
    return body, lower_subgraph(body, SHAVE, config, passes)


@pytest.mark.parametrize("name,spill,unfused", [("tail", False, False), ("dynamic", False, False),
                                                ("buffers", False, True), ("tail", True, False)])
def test_control_flow_round_trips(name, spill, unfused):
    body, lir = lowered(name, spill, unfused)
    data = control_flow_json(lir)
    text = json.dumps(data)
    again = lir_from_json(json.loads(text))
    assert print_lir(again) == print_lir(lir)
    assert control_flow_json(again) == data
    sizes = {1: 17} if name == "dynamic" else None
    check_lir(body, again, inputs_for(body, sizes))


def test_round_trip_at_every_stage():
    body = bodies(CASES["tail"])[0]
    for stop in LIR_PIPELINE:
        lir = lower_subgraph(body, SHAVE, passes=LIR_PIPELINE[:LIR_PIPELINE.index(stop) + 1])
        again = lir_from_json(json.loads(json.dumps(control_flow_json(lir))))
        assert print_lir(again) == print_lir(lir), stop


def test_data_flow_is_the_value_graph_without_loop_markers():
    _, lir = lowered("buffers", unfused=True)
    data = data_flow_json(lir)
    kinds = {n["kind"] for n in data["nodes"]}
    assert not kinds & LOOP_MARKERS and {"Buffer", "Load", "Store", "Parameter"} <= kinds
    ids = {n["id"] for n in data["nodes"]}
    for edge in data["edges"]:
        assert edge["from"].split(".")[0] in ids and edge["to"].split(".")[0] in ids
    computing = [e for e in lir.exprs if e.kind not in LOOP_MARKERS]
    assert len(data["edges"]) == sum(len(e.inputs) for e in computing
                                     if all(c.source.expr.kind not in LOOP_MARKERS
                                            for c in e.inputs))


def test_rejects_other_formats():
    with pytest.raises(ValueError, match="not a serialized LIR"):
        lir_from_json({"format": "something"})
