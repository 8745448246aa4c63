"""unroll's renaming, and the allocator's refusal of a read with no write before it.

Regression: ``NotEqual`` emits ``vcmpeq`` then ``mnot m, m`` (one mask register
read and written).  unroll gave the copy's definition a fresh name in its map
but left the old name in the instruction, so the following ``vsel`` read a mask
register no instruction wrote, and regalloc gave it whatever physical mask was
free: 8 of 15 elements wrong, silently, on every task of
``Select(NotEqual(b, a), a, b)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from fusion_testlib import graph_of
from gen_testlib import check_graph
from vpuc.diagnostics import VpucError
from vpuc.fusion.generator.cleanup import CleanupConfig
from vpuc.fusion.generator.cleanup.unroll import UnrollPass
from vpuc.fusion.generator.mir import Inst, Loop, Mem, Reg, S, V, walk
from vpuc.fusion.generator.regalloc import allocate

NOT_EQUAL_SELECT = """
graph @g {
  %v1 = Parameter() : 1x4x3x5xf32 NCHW
  %v2 = Parameter() : 1x4x3x5xf32 NCHW
  %v3 = NotEqual(%v2, %v1)
  %v4 = Select(%v3, %v1, %v2)
  Result(%v4)
}"""


def test_select_on_a_not_equal_mask_is_right_after_unrolling():
    graph = graph_of(NOT_EQUAL_SELECT)
    rng = np.random.default_rng(0)
    a = rng.uniform(-3, 3, (1, 4, 3, 5))
    b = np.where(rng.random(a.shape) < 0.5, a, rng.uniform(-3, 3, a.shape))   # half equal
    kernels = check_graph(graph, {"v1": a, "v2": b})
    assert any(n.group == 1 for k in kernels for n in walk(k.mir.body))   # a second copy ran


def _unrolled_body(body: list) -> list[Inst]:
    class Mir:                 # the two things UnrollPass needs of a kernel's MIR
        def __init__(self):
            self.body, self.tail, self.count = body, [], 100

        def fresh(self, file):
            self.count += 1
            return Reg(file, self.count, True)
    mir = Mir()
    assert UnrollPass().run(mir, None, CleanupConfig(unroll=2))
    return [n for n in mir.body if isinstance(n, Inst)] + [
        m for n in mir.body if isinstance(n, Loop) for m in n.body]


def test_unroll_renames_an_in_place_definition_position_by_position():
    m = Reg("m", 1, True)
    loop = Loop(S(7), [Inst("vld", [V(0), Mem(S(4), 0)], 1),
                       Inst("vcmpeq.f32", [m, V(0), V(0)], 2),
                       Inst("mnot", [m, m], 2),
                       Inst("vsel", [V(1), V(0), V(0), m], 3),
                       Inst("vst", [V(1), Mem(S(6), 0)], 4),
                       Inst("addi", [S(4), S(4), 16], 5),
                       Inst("addi", [S(6), S(6), 16], 5)], False, None, 0, "L0", {})
    body = _unrolled_body([Inst("li", [S(7), 4], 0), loop])
    written: set = set()
    for n in body:
        assert all(r in written for r in n.uses() if r.virtual), f"{n.op} reads before a write"
        written.update(n.defs())
    nots = [n for n in body if n.op == "mnot"]
    assert len(nots) == 2 and all(n.args[0] != n.args[1] for n in nots)


def test_allocator_refuses_to_read_a_register_nobody_wrote():
    stray = Reg("m", 9, True)
    body = [Inst("vsel", [V(1), V(0), V(0), stray], 1), Inst("halt", [], "epilogue")]
    with pytest.raises(VpucError, match=r"reads %m9 before any instruction writes it"):
        allocate(body, [])

