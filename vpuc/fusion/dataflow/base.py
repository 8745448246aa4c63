"""The data-flow pass interface, its context, and positions for target passes.

A data-flow pass rewrites one subgraph *body* (a ``Graph``) in place and says
whether it changed anything.  Passes are shape-agnostic: they look at op kinds,
attributes and innermost dims, never at static sizes, so bodies with dynamic
dims go through unchanged in kind.  Passes never print.

A target inserts its own passes at named points of the pipeline with
positions: ``start``, ``end``, ``before:<pass>`` or ``after:<pass>`` (OpenVINO's
``PassPosition``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from vpuc.fusion.dataflow.layout import PortLayout
from vpuc.fusion.targets import TargetMachine
from vpuc.ir.graph import Graph


@dataclass
class DataflowContext:
    target: TargetMachine | None = None
    # The layout the plugin chose for each input, by the body Parameter's name;
    # inputs not listed are planar in their type's dims order.
    layouts: dict[str, PortLayout] = field(default_factory=dict)


class GraphPass:
    """Base class; ``name`` is kebab-case and matches the file name."""

    name: ClassVar[str] = ""

    def run(self, body: Graph, ctx: DataflowContext) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")


POSITIONS = ("start", "end", "before:", "after:")


def insert_positioned(names: list[str], positioned: tuple[tuple[str, str], ...]) -> list[str]:
    """Pass names with each (position, pass) of a target inserted where it asks."""
    result = list(names)
    for position, name in positioned:
        if position == "start":
            result.insert(0, name)
        elif position == "end":
            result.append(name)
        else:
            where, _, anchor = position.partition(":")
            if where not in ("before", "after") or anchor not in result:
                raise ValueError(f"bad pass position '{position}' for {name}: expected start, end, "
                                 f"before:<pass> or after:<pass> with a pass of {result}")
            at = result.index(anchor) + (where == "after")
            result.insert(at, name)
    return result
