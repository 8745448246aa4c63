"""The data-flow optimizer: passes over subgraph bodies, one per file.

``DATAFLOW_PASSES`` is the registry; ``COMMON_PIPELINE`` the order every target
runs (OpenVINO's ``data_flow_transformations``); a target inserts its own
passes into it at named positions (``TargetMachine.positioned_passes``).
"""

from __future__ import annotations

from typing import Callable

from vpuc.diagnostics import UsageError
from vpuc.fusion.dataflow.base import DataflowContext, GraphPass, insert_positioned
from vpuc.fusion.dataflow.broadcast_to_move_broadcast import BroadcastToMoveBroadcast
from vpuc.fusion.dataflow.canonicalization import Canonicalization
from vpuc.fusion.dataflow.convert_constants_to_scalars import ConvertConstantsToScalars
from vpuc.fusion.dataflow.convert_power_to_power_static import ConvertPowerToPowerStatic
from vpuc.fusion.dataflow.mul_add_to_fma import MulAddToFMA
from vpuc.fusion.targets import TargetMachine
from vpuc.ir.graph import Graph

DATAFLOW_PASSES: dict[str, type[GraphPass]] = {
    cls.name: cls
    for cls in (Canonicalization, ConvertConstantsToScalars, ConvertPowerToPowerStatic,
                MulAddToFMA, BroadcastToMoveBroadcast)
}

COMMON_PIPELINE = ["canonicalization", "convert-constants-to-scalars",
                   "convert-power-to-power-static", "broadcast-to-move-broadcast"]


def pipeline_names(target: TargetMachine | None, names: list[str] | None = None) -> list[str]:
    """The pass names to run: ``names`` as given, or the common pipeline with the target's
    positioned passes inserted."""
    if names is not None:
        unknown = [n for n in names if n not in DATAFLOW_PASSES]
        if unknown:
            raise UsageError(f"unknown data-flow pass '{unknown[0]}'; expected one of: "
                             + ", ".join(DATAFLOW_PASSES))
        return names
    return insert_positioned(COMMON_PIPELINE, target.positioned_passes if target else ())


def run_dataflow(body: Graph, ctx: DataflowContext, names: list[str],
                 after_each: Callable[[str, Graph], None] | None = None) -> list[str]:
    """Run the named passes on ``body`` in place; returns the names of those that changed it."""
    changed = []
    for name in names:
        if DATAFLOW_PASSES[name]().run(body, ctx):
            changed.append(name)
        if after_each is not None:
            after_each(name, body)
    return changed
