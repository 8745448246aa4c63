"""verify: check every rule of the VIR language (see vpuc/verifier).

Expects: a parsed module.
Guarantees: every symbol resolves, operands have the right types, ranks and
places, the barrier graph is acyclic, barrier counts and ids are within the
architecture, and placed buffers never share bytes while both may be live.
Raises a VpucError with every error found; warnings go to the context.
"""

from __future__ import annotations

from vpuc.ir.module import Module
from vpuc.passes.base import ModulePass, PassContext
from vpuc.verifier import verify_module


class VerifyPass(ModulePass):
    name = "verify"

    def run(self, module: Module, ctx: PassContext) -> None:
        bag = verify_module(module, ctx.arch)
        bag.raise_if_errors()
        # A pipeline verifies more than once; report each warning once.
        seen = set(ctx.warnings.items)
        ctx.warnings.items.extend(w for w in bag.warnings if w not in seen)
