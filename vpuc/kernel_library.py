"""The ACT SHAVE kernel library: one assembly file per kernel in the repo's ``kernels/``.

``from library "clamp"`` in VIR resolves here: ``kernels/clamp.s`` is assembled
(once per process) into a ``KernelObject`` whose entry point is named like the
kernel; the blocks the kernels share (the driver, the elementwise and reduction
rows) are ``.include``d from ``kernels/include/*.inc``.  ``build_library`` writes
every kernel as an ELF object (``NAME.o``), which is what ``vpuc kernels build``
does.  The kernels' contracts, numerics and costs are documented in
docs/kernels.md.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from vpuc.diagnostics import VpucError

if TYPE_CHECKING:       # the assembler is imported when a kernel is assembled, not before
    from vpuc.shave import KernelObject

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
DEFAULT_BUILD_DIR = KERNEL_DIR / "build"


def library_names() -> list[str]:
    """Every library kernel, sorted: the stems of ``kernels/*.s``."""
    return sorted(path.stem for path in KERNEL_DIR.glob("*.s"))


def library_source(name: str) -> Path:
    """The assembly file of library kernel ``name``; unknown names are errors."""
    names = library_names()
    if name not in names:
        raise VpucError(f"unknown library kernel '{name}'; expected one of {', '.join(names)}")
    return KERNEL_DIR / f"{name}.s"


def load_library_kernel(name: str) -> KernelObject:
    """Library kernel ``name``, assembled; assembly errors carry the .s file and line."""
    return _assemble(library_source(name))


@lru_cache(maxsize=None)
def _assemble(path: Path) -> KernelObject:
    from vpuc.shave.assembler import assemble_file
    obj = assemble_file(path)            # .include paths are relative to kernels/
    entries = [sym.name for sym in obj.entry_points]
    if entries != [path.stem]:
        raise VpucError(f"{path}: a library kernel has one entry point named like its file "
                        f"('{path.stem}'); found {', '.join(entries) or 'none'}")
    return obj


def build_library(out_dir: str | Path | None = None) -> list[Path]:
    """Assemble every kernel and write ``NAME.o`` (ELF32) into ``out_dir``; beside them,
    in ``slices/``, each kernel's cycles slice for timing-only runs
    (``runtime_sim.isa.library_slices``).  Returns the objects' paths."""
    out = Path(out_dir) if out_dir is not None else DEFAULT_BUILD_DIR
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VpucError(f"cannot create {out}: {exc.strerror}") from None
    written = []
    for name in library_names():
        path = out / f"{name}.o"
        data = load_library_kernel(name).to_elf()
        try:
            path.write_bytes(data)
        except OSError as exc:
            raise VpucError(f"cannot write {path}: {exc.strerror}") from None
        written.append(path)
    from runtime_sim.isa.library_slices import write_slices
    try:
        write_slices(out, [load_library_kernel(name) for name in library_names()])
    except OSError as exc:
        raise VpucError(f"cannot write the kernels' slices into {out}: {exc.strerror}") from None
    return written
