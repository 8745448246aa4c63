"""An .onnx file as a compile source: `vpuc compile/run/inspect/fuse MODEL.onnx`.

The model is imported (``import_onnx``), its large constants are held in memory
(``vpuc/const_files.py``: ``mem:`` paths named by their contents, so the blob is
the same in every run and no weight is printed as a literal), and the module is
handed on as VIR text under the name ``MODEL.onnx (imported)``, so a later
error quotes the imported op's line, whose value names are the ONNX node's
outputs.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

from vpuc import const_files

ONNX_SUFFIX = ".onnx"


def is_onnx(source) -> bool:
    return isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(ONNX_SUFFIX)


class OnnxSource(NamedTuple):
    text: str                       # the imported module, VIR text
    name: str                       # its display name
    names: dict[str, str]           # ONNX input and output name -> the program's name
    empty_outputs: dict             # outputs of size 0: program name -> TensorType


def onnx_as_vir(path: str | os.PathLike, input_shapes: dict | None = None,
                precision: str = "f16", warn=True) -> tuple[str, str, dict[str, str]]:
    """(VIR text, display name, ONNX input and output name -> the program's name) of the
    imported model; warnings go to stderr."""
    return onnx_source(path, input_shapes, precision, warn)[:3]


def onnx_source(path: str | os.PathLike, input_shapes: dict | None = None,
                precision: str = "f16", warn=True) -> OnnxSource:
    """``onnx_as_vir`` and the model's empty outputs, which the VIR text has no tensor for."""
    from vpuc.onnx_import import import_onnx
    from vpuc.vir.printer import print_module
    imported = import_onnx(path, input_shapes, precision)
    if warn:
        for warning in imported.warnings:
            print(warning.render(), file=sys.stderr)
    for op in (op for graph in imported.module.graphs for op in graph.ops):
        if op.const is not None and op.const.path is not None and op.result in imported.arrays:
            op.const.path = const_files.hold(imported.arrays[op.result], op.result)
    # an output that is an input by name (a pass-through) is fed as the input
    names = {**imported.outputs, **imported.inputs}
    return OnnxSource(print_module(imported.module), f"{os.fspath(path)} (imported)", names,
                      imported.empty_outputs)
