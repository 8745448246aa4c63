"""The one explicit list of passes, and the named pipelines.

A test checks that every entry's name matches its class and its file
(``allocate_cmx.py`` ↔ ``allocate-cmx`` ↔ ``AllocateCmxPass``).
"""

from __future__ import annotations

from vpuc.diagnostics import UsageError
from vpuc.fusion.lower_graph import LowerGraphPass
from vpuc.passes.allocate_cmx import AllocateCmxPass
from vpuc.passes.assign_physical_barriers import AssignPhysicalBarriersPass
from vpuc.passes.assign_windows import AssignWindowsPass
from vpuc.passes.base import ModulePass
from vpuc.passes.dedupe_kernels import DedupeKernelsPass
from vpuc.passes.materialize_constants import MaterializeConstantsPass
from vpuc.passes.pack_kernel_args import PackKernelArgsPass
from vpuc.passes.verify import VerifyPass

PASSES: dict[str, type[ModulePass]] = {
    cls.name: cls
    for cls in (
        VerifyPass,
        AllocateCmxPass,
        AssignPhysicalBarriersPass,
        AssignWindowsPass,
        PackKernelArgsPass,
        DedupeKernelsPass,
        MaterializeConstantsPass,
        LowerGraphPass,
    )
}

# Pipelines are readable lists of pass names.
PIPELINES: dict[str, list[str]] = {
    "default": ["verify", "allocate-cmx", "verify"],
    "kernels": ["verify", "allocate-cmx", "assign-windows", "pack-kernel-args"],
    # What `vpuc compile` runs before serializing.
    "compile": ["verify", "allocate-cmx", "assign-physical-barriers", "verify",
                "assign-windows", "pack-kernel-args", "dedupe-kernels", "materialize-constants"],
}


def compile_pipeline(module) -> list[str]:
    """What ``vpuc compile`` runs on ``module``: lower-graph first when it has graph blocks,
    so task-level modules compile exactly as before."""
    return (["lower-graph"] if module.graphs else []) + PIPELINES["compile"]


def parse_pipeline(text: str) -> list[ModulePass]:
    """``pass-a,pass-b`` → pass instances; unknown names are a usage error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("empty pass pipeline; expected names such as 'verify,allocate-cmx'")
    passes = []
    for name in names:
        if name in PIPELINES and name not in PASSES:
            passes += [PASSES[n]() for n in PIPELINES[name]]
            continue
        cls = PASSES.get(name)
        if cls is None:
            raise UsageError(f"unknown pass '{name}'; expected one of: " + ", ".join(sorted(PASSES)))
        passes.append(cls())
    return passes
