"""Where a declared kernel's code comes from: the library, an assembly file, an ELF.

``from library "clamp"`` assembles ``kernels/clamp.s``; ``from asm "k.s"`` and
``from elf "k.o"`` are paths relative to the .vir file that declares them.
Fused (``generated``) kernels come from the fusion pipeline: the lower-graph
pass puts their objects in ``ctx.artifacts["generated-kernels"]`` (name ->
``KernelObject``), which the caller passes as ``generated``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.fileio import not_utf8
from vpuc.ir.module import KernelDecl, KernelSourceKind
from vpuc.shave import KernelObject, assemble


def _fail(kernel: KernelDecl, message: str) -> VpucError:
    return VpucError([Diagnostic(Severity.ERROR, kernel.loc, message)])


def load_kernel_object(kernel: KernelDecl,
                       generated: Mapping[str, KernelObject] | None = None) -> KernelObject:
    source = kernel.source
    if source.kind is KernelSourceKind.LIBRARY:
        from vpuc.kernel_library import load_library_kernel
        try:
            return load_library_kernel(source.ref)
        except VpucError as exc:
            raise _fail(kernel, f"kernel @{kernel.name}: {exc.diagnostics[0].message}") from None
    if source.kind is KernelSourceKind.GENERATED:
        if generated is not None and kernel.name in generated:
            return generated[kernel.name]
        raise _fail(kernel, f"kernel @{kernel.name} is 'generated', but no fusion result "
                    "provides its code; generated kernels come from the fusion pipeline")
    base = Path(kernel.loc.file).parent if kernel.loc.line else Path(".")
    path = (base / source.ref) if not Path(source.ref).is_absolute() else Path(source.ref)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(kernel, f"kernel @{kernel.name}: cannot read {source.kind.value} file "
                    f"{path}: {exc.strerror}") from None
    if source.kind is KernelSourceKind.ASM:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = not_utf8(path, exc, "assembly").diagnostics[0]
            raise _fail(kernel, f"kernel @{kernel.name}: {path} is not UTF-8 text ({bad.loc}: "
                        f"{bad.message}); expected SHAVE assembly") from None
        return assemble(text, str(path))
    return KernelObject.from_elf(data, str(path))
