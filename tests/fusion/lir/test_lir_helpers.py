"""The Linear IR container: building from a body, the Snippets Design Guide's helpers, validation, loop ports."""

import pytest

from lir_testlib import SHAVE, bodies, lower
from vpuc.diagnostics import VpucError
from vpuc.fusion.controlflow import CONTROLFLOW_PASSES
from vpuc.fusion.lir.builder import build_lir
from vpuc.fusion.lir.expression import Node
from vpuc.fusion.lir.kinds import BROADCAST_LOAD, LOAD, MOVE_BROADCAST
from vpuc.fusion.lir.linear_ir import LoweringConfig, io_ports
from vpuc.fusion.lir.pipeline import run_lir_passes
from vpuc.fusion.lir.validate import validate

GRAPH = """graph @g {
  %x = Parameter() : 4x16xf16
  %b = Parameter() : 4x1xf16
  %c = Constant(2.0) : f16
  %a = Add(%x, %b)
  %m = Maximum(%a, %c)
  Result(%m)
}"""


def built(text=GRAPH):
    return build_lir(bodies(text)[0], LoweringConfig(SHAVE))


def test_build_wires_the_body():
    lir = built()
    kinds = [e.kind for e in lir.exprs]
    assert kinds == ["Parameter", "Parameter", "Scalar", "Add", "Maximum", "Result"]
    x, b, c, add, mx, res = lir.exprs
    assert add.inputs == [x.outputs[0], b.outputs[0]]
    assert x.outputs[0].consumers == [add.input_port(0)]
    assert res.inputs[0].source == mx.output_port(0)
    assert [a.memory for a in lir.io] == ["in0", "in1", "out0"]
    assert b.out_descs[0].shape == (4, 1) and lir.increment == 8
    validate(lir)


def test_dynamic_dims_are_shared_symbols_read_from_an_argument():
    lir = built("""graph @g {
      %x = Parameter() : 3x?<=40xf32
      %y = Parameter() : 1x?<=40xf32
      %a = Add(%x, %y)
      Result(%a)
    }""")
    assert str(lir.master_shape[1]) == "D1" and lir.dim_bounds == {"D1": 40}
    assert lir.runtime_dims == {"D1": (0, 0)}       # in0's innermost MemRefData dim
    assert lir.exprs[1].out_descs[0].shape[1] == lir.master_shape[1]


def test_insert_node_moves_loop_ports_to_the_new_expression():
    lir = built()
    run_lir_passes(lir, ["mark-loops", "fuse-loops"])
    x, add = lir.exprs[0], lir.exprs[3]
    port = add.input_port(0)
    assert all(lp.port == port for info in lir.loops for lp in info.entries[:1])
    load = lir.insert_node(Node(LOAD, {"count": 8, "memory": "in0", "offset": 0}),
                           [x.outputs[0]], [port.descriptor.clone()], lir.position(add),
                           list(add.loop_ids), consumers=[port])
    assert add.inputs[0] is load.outputs[0] and port not in x.outputs[0].consumers
    for info in lir.loops:
        assert info.entries[0].port == load.input_port(0)
    validate(lir)


def test_replace_with_node_keeps_consumers_ports_and_loop_ends():
    lir = lower(GRAPH, passes=["mark-loops", "fuse-loops", "insert-buffers", "insert-load-store",
                               "init-loops", "insert-loops", "insert-broadcast-move"])
    move = lir.exprs_of_kind(MOVE_BROADCAST)[0]
    load = move.inputs[0].source.expr
    readers = list(move.outputs[0].consumers)
    pointer = load.inputs[0]
    new = lir.replace_with_node([load, move], Node(BROADCAST_LOAD, {"count": 8, "memory": "in1",
                                                                     "offset": 0}))
    assert new.outputs[0] is move.outputs[0] and new.outputs[0].consumers == readers
    assert new.inputs == [pointer] and new.input_port(0) in pointer.consumers
    assert any(lp.port == new.input_port(0) for info in lir.loops for lp in info.entries)
    assert load not in lir.exprs and move not in lir.exprs
    validate(lir)


def test_replace_with_expr_checks_the_arity():
    lir = built()
    add = lir.exprs[3]
    other = lir.create_expression(Node("Relu"), [], [add.out_descs[0].clone()])
    with pytest.raises(ValueError, match="inputs"):
        lir.replace_with_expr([add], other)


def test_remove_and_move():
    lir = built()
    with pytest.raises(ValueError, match="still read"):
        lir.remove(lir.exprs[3])
    scalar = lir.exprs[2]
    lir.move(scalar, 0)
    assert lir.exprs[0] is scalar
    validate(lir)


def test_validate_reports_a_use_before_its_definition():
    lir = built()
    add = lir.exprs[3]
    lir.move(add, 0)
    with pytest.raises(VpucError, match="before e"):
        validate(lir, "a test")


def test_validate_reports_a_broken_loop():
    lir = built()
    run_lir_passes(lir, ["mark-loops"])
    lir.exprs[3].loop_ids = [99]
    with pytest.raises(VpucError, match="loop 99|outside the loop"):
        validate(lir)
    lir = built()
    run_lir_passes(lir, ["mark-loops"])
    lir.move(lir.exprs[2], 4)                 # the Scalar into the middle of the loop
    with pytest.raises(VpucError, match="not contiguous"):
        validate(lir)


def test_io_ports_skip_loop_invariant_registers():
    lir = built()
    entries, exits = io_ports(lir.exprs[3:5])
    assert [str(p) for p in entries] == ["e3.in0", "e3.in1"]      # not the Scalar
    assert [str(p) for p in exits] == ["e4.out0"]


def test_every_control_flow_pass_is_registered_in_the_pipeline():
    assert "mark-loops" in CONTROLFLOW_PASSES and len(CONTROLFLOW_PASSES) == 12
