"""The pass interface, after xDSL: a named class, one per file, run on a module.

A pass's docstring states what it expects and what it guarantees.  Passes never
print; they report through the context's diagnostics and let the pass manager
print IR and timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from vpuc.arch import Arch, default_cmx_budget
from vpuc.cost.timing import Timing, default_timing
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import Module


@dataclass
class PassContext:
    """What every pass may use: the target, its timing model (the cost model's numbers),
    and a place for warnings and artifacts."""

    arch: Arch
    warnings: DiagnosticBag = field(default_factory=DiagnosticBag)
    # Results that later passes or the serializer consume (packed args, windows, ...).
    artifacts: dict[str, object] = field(default_factory=dict)
    # Default: the timing file shipped for ``arch`` (None when it has none: a pass that
    # asks the cost model then reports it, located).
    timing: Timing | None = None
    # Bytes of a tile's CMX one layer's blocks may use (the ``cmx_budget`` compile option);
    # default: ``vpuc.arch.default_cmx_budget`` of ``arch``.
    cmx_budget: int | None = None

    def __post_init__(self) -> None:
        if self.timing is None:
            self.timing = default_timing(self.arch.name)
        if self.cmx_budget is None:
            self.cmx_budget = default_cmx_budget(self.arch)


class ModulePass:
    """Base class.  Subclasses set ``name`` (kebab-case, matching the file name)."""

    name: ClassVar[str] = ""

    def run(self, module: Module, ctx: PassContext) -> None:
        """Transform ``module`` in place, or raise VpucError."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")
