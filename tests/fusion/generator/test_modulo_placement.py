"""modulo_placement: the recurrence bound is a true lower bound on II.

``find_interval`` starts its search at ``recurrence_bound`` (and gives up at once
when that reaches the baseline), which keeps its answer only if no placement
exists below the bound: checked here by placing the unrolled loops of kernels
whose values are read far apart (Gelu's erf chain) or close (HSwish, Add) at
every II below it, and by the bound being reached (a placement exists at the
first II from both bounds up that ``place`` manages within its budget).
"""

from __future__ import annotations

import pytest

from fusion_testlib import Builder
from vpuc.fusion.generator.cleanup import CLEANUP_PIPELINE, CleanupConfig, run_cleanups
from vpuc.fusion.generator.cleanup.modulo_placement import (dependences, place,
                                                             recurrence_bound, slot_bound)
from vpuc.fusion.generator.generate import optimize_body
from vpuc.fusion.generator.kernel_emitter import emit_kernel
from vpuc.fusion.generator.mir import loops
from vpuc.fusion.generator.target_machine import SHAVE_TM
from vpuc.fusion.lir.linear_ir import LoweringConfig
from vpuc.fusion.lir.pipeline import lower_subgraph
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.types import ElemType

BEFORE_MODULO = CLEANUP_PIPELINE[:CLEANUP_PIPELINE.index("modulo-schedule")]


def unrolled_loop(kind: str, elem=ElemType.F16, unroll: int = 4, **attrs):
    """The main loop of ``kind``'s kernel as the modulo scheduler receives it."""
    b = Builder()
    x = b.param((16, 256), elem)
    b.result(b.op(kind, x, x, **attrs) if kind == "Add" else b.op(kind, x, **attrs))
    body = optimize_body(tokenize(b.build(), get_target("shave")).subgraphs[0].body)
    lir = lower_subgraph(body, SHAVE_TM.fusion, LoweringConfig(SHAVE_TM.fusion))
    mir = emit_kernel(lir, SHAVE_TM, [op.type.rank for op in body.results])
    run_cleanups(mir, BEFORE_MODULO, SHAVE_TM, CleanupConfig(unroll=unroll), [], [])
    return max(loops(mir.body), key=lambda lp: len(lp.body)).body


@pytest.mark.parametrize("kind, attrs", [("Gelu", {"approximation": "erf"}), ("HSwish", {}),
                                         ("Add", {})])
def test_no_placement_exists_below_the_recurrence_bound(kind, attrs):
    body = unrolled_loop(kind, **attrs)
    preds, readers = dependences(body, SHAVE_TM)
    bound = recurrence_bound(preds, readers)
    assert bound >= 2
    for ii in range(2, bound):
        assert place(body, SHAVE_TM, ii, preds, readers, 2 * ii) is None
        assert place(body, SHAVE_TM, ii, preds, readers, 10 * ii) is None
    start = max(bound, slot_bound(body, SHAVE_TM))
    assert any(place(body, SHAVE_TM, ii, preds, readers, 2 * ii) is not None
               for ii in range(start, start + 64))


def test_the_bound_is_the_longest_path_from_a_value_to_its_last_reader():
    """A chain a -> b -> c where c also reads a: a lives from its definition to c, the
    latency path a -> b -> c, so II exceeds lat(a) + lat(b)."""
    preds = [{}, {0: 3}, {0: 3, 1: 5}]
    readers = {0: [1, 2], 1: [2]}
    assert recurrence_bound(preds, readers) == 3 + 5 + 1
