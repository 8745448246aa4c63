"""The expression kinds of the Linear IR and the register class of each output.

Besides the graph dialect's elementwise kinds (``vpuc/ir/graph_ops.py``: Add,
FMA, Relu, Select, Convert, MoveBroadcast, ...), which compute vector values
from vector values, the LIR has:

| kind | inputs | outputs | meaning |
|---|---|---|---|
| Parameter | | gpr pointer | kernel input ``index`` (``memory`` = in<i>) |
| Result | gpr pointer | | kernel output ``index`` (``memory`` = out<j>) |
| Scalar | | vec | ``value`` in every lane |
| Buffer | gpr pointer (from Store) | gpr pointer (to Loads) | scratchpad memory ``memory`` = buf<k> |
| Load | gpr pointer [, mask] | vec | ``count`` elements at the pointer (+``offset`` bytes) |
| BroadcastLoad | gpr pointer | vec | one element into every lane |
| Store | vec [, mask] | gpr pointer | ``count`` lanes to the pointer (+``offset``) |
| Copy | vec | vec | the same value (a Result that reads a Parameter or Scalar) |
| Mask | | mask | the first ``count`` lanes of ``elem``-sized elements |
| LoopBegin | | gpr counter | start of loop ``loop_id`` |
| LoopEnd | gpr pointers..., gpr counter | | pointer shifts, back edge of ``loop_id`` |
| Spill | any | | store a register to spill slot ``slot`` |
| Reload | | same class as the spilled value | load it back from ``slot`` |

Pointers are *memory objects*: every pointer connector of one kernel argument
or buffer register group lives in one register for the whole kernel.
"""

from __future__ import annotations

from vpuc.fusion.lir.expression import GPR, MASK, VEC, Expression

PARAMETER, RESULT, SCALAR, BUFFER = "Parameter", "Result", "Scalar", "Buffer"
LOAD, BROADCAST_LOAD, STORE = "Load", "BroadcastLoad", "Store"
MOVE_BROADCAST, COPY, MASK_KIND = "MoveBroadcast", "Copy", "Mask"
LOOP_BEGIN, LOOP_END, SPILL, RELOAD = "LoopBegin", "LoopEnd", "Spill", "Reload"

LOADS = frozenset({LOAD, BROADCAST_LOAD})
MEMORY_ACCESS = frozenset({LOAD, BROADCAST_LOAD, STORE})
MEMORY_DEFS = frozenset({PARAMETER, RESULT, BUFFER})   # expressions that *are* a memory object
LOOP_MARKERS = frozenset({LOOP_BEGIN, LOOP_END})
# Expressions that never go into a loop: the kernel's interface and loop-invariant values.
OUTSIDE_LOOPS = frozenset({PARAMETER, RESULT, SCALAR, MASK_KIND})
LIR_ONLY = frozenset({PARAMETER, RESULT, SCALAR, BUFFER, LOAD, BROADCAST_LOAD, STORE, COPY,
                      MASK_KIND, LOOP_BEGIN, LOOP_END, SPILL, RELOAD})


def output_class(expr: Expression, index: int = 0) -> str:
    """The register class of an expression's output (what InitLiveRanges allocates)."""
    kind = expr.kind
    if kind in (PARAMETER, BUFFER, STORE, LOOP_BEGIN):
        return GPR
    if kind == MASK_KIND:
        return MASK
    if kind == RELOAD:
        return expr.attrs["cls"]
    return VEC


def is_pointer(expr: Expression, index: int = 0) -> bool:
    """Whether the output carries a data pointer (a memory object) rather than a counter."""
    return expr.kind in (PARAMETER, BUFFER, STORE)


def is_compute(expr: Expression) -> bool:
    """An expression that works on vector values inside loops (graph ops, MoveBroadcast, Copy)."""
    return expr.kind not in LIR_ONLY or expr.kind == COPY
