"""Target machines: what a backend can fuse, and the limits a subgraph must respect.

The tokenizer and the data-flow optimizer are target-independent; everything
that depends on the hardware comes from a ``TargetMachine``: which op kinds and
element types the backend generates, how many data pointers (inputs + outputs +
buffers) one kernel can hold in registers, its vector registers and lanes, the
marking pass that hides ops the backend fuses by itself (``skipped-by-plugin``),
the conditions under which its plugin declines an op (``refuse``: OpenVINO's
tokenization callback), and the data-flow passes it inserts at named points of the pipeline.

``TARGETS`` lists them: ``shave`` (our ACT SHAVE, the default) and ``x64``
(OpenVINO's CPU plugin, for comparing tokenizations with OpenVINO's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from vpuc.diagnostics import UsageError
from vpuc.ir.graph import Graph, GraphIndex, GraphOp
from vpuc.ir.types import ElemType


@dataclass(frozen=True)
class TargetMachine:
    name: str
    summary: str
    data_pointers: int                    # max inputs + outputs + buffers of one subgraph
    vector_registers: int
    lanes: Mapping[ElemType, int]         # vector lanes per element type
    elem_types: frozenset[ElemType]       # element types its kernels load, compute and store
    tokenizable: frozenset[str]           # op kinds its generator emits
    mark_skipped: Callable[[Graph], None]  # sets op.marks["skipped-by-plugin"]
    # The plugin's tokenization callback: why the backend declines an op the tokenizer
    # could take (a sentence), or None; None for a target with no such conditions.
    refuse: Callable[[GraphOp, GraphIndex], str | None] | None = None
    # Data-flow passes the target inserts: (position, pass name), see fusion/dataflow/base.py.
    positioned_passes: tuple[tuple[str, str], ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)   # where each number comes from

    def buffers_needed(self, kinds: list[str]) -> int:
        """Scratch buffers a subgraph of these op kinds needs.  Elementwise ops keep every
        intermediate in registers, so none; reductions (Softmax) would need one each."""
        return 0


def get_target(name: str) -> TargetMachine:
    from vpuc.fusion.targets.shave import SHAVE
    from vpuc.fusion.targets.x64 import X64

    targets = {SHAVE.name: SHAVE, X64.name: X64}
    target = targets.get(name)
    if target is None:
        raise UsageError(f"unknown fusion target '{name}'; expected one of: {', '.join(targets)}")
    return target


TARGET_NAMES = ("shave", "x64")
