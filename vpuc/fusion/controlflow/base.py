"""The Linear IR pass interface, shared by control-flow and generator-preparation passes.

A pass rewrites one ``LinearIR`` in place and says whether it changed anything.
Its module docstring starts with the pass name and states what it expects and
what it guarantees.  Passes never print: ``lower_subgraph`` prints through its
``print_after`` callback and times every pass.
"""

from __future__ import annotations

from typing import ClassVar

from vpuc.fusion.lir.linear_ir import LinearIR


class LirPass:
    """Base class; ``name`` is kebab-case and matches the file name (``mark-loops``)."""

    name: ClassVar[str] = ""

    def run(self, lir: LinearIR) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")
