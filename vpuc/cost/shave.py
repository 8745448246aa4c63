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
