"""dedupe-kernels: one ActKernel per distinct kernel function.

Expects: assign-windows has built the kernel images.
Guarantees: kernel declarations whose linked code and data are identical (say
``@relu_a`` and ``@relu_b``, both ``from library "relu"``) share one image, so
the blob carries each function's code once however many invocations it has;
``program.kernel_aliases`` maps every declared kernel to the image it uses.
"""

from __future__ import annotations

from vpuc.ir.module import Module
from vpuc.passes.assign_windows import program_of
from vpuc.passes.base import ModulePass, PassContext


class DedupeKernelsPass(ModulePass):
    name = "dedupe-kernels"

    def run(self, module: Module, ctx: PassContext) -> None:
        program = program_of(module, ctx)
        by_content: dict[tuple, str] = {}
        aliases: dict[str, str] = {}
        for name in sorted(program.kernels):
            image = program.kernels[name]
            key = (image.elf, image.text, image.rodata, image.data, image.entry)
            aliases[name] = by_content.setdefault(key, name)
        for name, canonical in aliases.items():
            if name != canonical:
                del program.kernels[name]
        program.kernel_aliases = aliases
