"""An .onnx file as a compile source: `vpuc compile/run/inspect/fuse MODEL.onnx`.

The model is imported (``import_onnx``), its large constants are written to a
private temporary folder (removed when the process exits) and named there by
absolute path, and the module is handed on as VIR text under the name
``MODEL.onnx (imported)``, so a later error quotes the imported op's line,
whose value names are the ONNX node's outputs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ONNX_SUFFIX = ".onnx"
_FOLDERS: list[str] = []


def is_onnx(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(ONNX_SUFFIX)


def _cleanup() -> None:
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def onnx_as_vir(path: str | os.PathLike, input_shapes: dict | None = None,
                precision: str = "f16", warn=True) -> tuple[str, str]:
    """(VIR text, display name) of the imported model; warnings go to stderr."""
    from vpuc.onnx_import import import_onnx, write_import
    from vpuc.vir.printer import print_module
    imported = import_onnx(path, input_shapes, precision)
    if warn:
        for warning in imported.warnings:
            print(warning.render(), file=sys.stderr)
    if imported.arrays:
        if not _FOLDERS:
            atexit.register(_cleanup)
        folder = tempfile.mkdtemp(prefix="vpuc-onnx-")
        _FOLDERS.append(folder)
        write_import(imported, Path(folder) / "model.vir")
        for op in imported.module.graphs[0].ops:        # absolute: found from any directory
            if op.const is not None and op.const.path is not None:
                op.const.path = str(Path(folder) / op.const.path)
    return print_module(imported.module), f"{os.fspath(path)} (imported)"
