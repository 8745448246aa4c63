"""The cost of one ACT SHAVE invocation.

An ACT SHAVE runs our own ISA, so its cycles are not a formula: the simulator's
interpreter counts them from the instructions (``runtime_sim/isa/cycles.py``,
SHAVE clock).  What the cost model adds is the conversion to NCE cycles
(clock ratio times the table scale of the timing file) and the runtime's launch
cost (VPUNN's VPUEM curves for VPU 2.7 ACT kernels have intercepts of 125..150
SHAVE cycles).  ``docs/kernels.md`` compares the library's cycles per element
with VPUNN's curves.
"""

from __future__ import annotations


def act_invocation_cycles(shave_cycles: float, shave_cycle: float, dispatch: float) -> float:
    """NCE cycles of one invocation: launch plus the interpreter's SHAVE cycles, converted."""
    return dispatch + shave_cycles * shave_cycle


def act_invocation_end(start: float, shave_cycles: float, shave_cycle: float,
                       dispatch: float) -> float:
    """When an invocation started at NCE cycle ``start`` that ran ``shave_cycles`` ends
    (``start + act_invocation_cycles(...)``, summed left to right as the runtime always has)."""
    return start + dispatch + shave_cycles * shave_cycle


def act_shave_budget(start: float, limit: float | None, shave_cycle: float,
                     dispatch: float) -> float | None:
    """SHAVE cycles an invocation started at ``start`` may run before NCE cycle ``limit``
    (None: no limit); the inverse of ``act_invocation_end``."""
    if limit is None:
        return None
    return (limit - start - dispatch) / shave_cycle
