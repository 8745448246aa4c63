"""`vpuc import MODEL.onnx [--input-shape NAME=DIMS ...] [--precision f16|f32] [-o MODEL.vir]`."""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_OK = 0


def add_onnx_options(parser) -> None:
    """The options every command that reads an .onnx file takes."""
    parser.add_argument("--input-shape", action="append", metavar="NAME=DIMS", default=[],
                        help="fix an ONNX input's dims, e.g. input=1x3x224x224 (repeatable)")
    parser.add_argument("--precision", choices=("f16", "f32"), default="f16",
                        help="the element type a float model computes in (default f16, as the "
                             "NPU does; f32 keeps the model's)")


def onnx_arguments(args) -> dict:
    """The keyword arguments ``vpuc.compile`` takes for an .onnx FILE; a usage error when
    --input-shape is given for anything else."""
    from vpuc.diagnostics import UsageError
    from vpuc.onnx_import.model import parse_input_shapes
    from vpuc.onnx_import.source import is_onnx
    if not is_onnx(args.file):
        if args.input_shape:
            raise UsageError("--input-shape applies to .onnx models only")
        return {}
    try:
        shapes = parse_input_shapes(args.input_shape)
    except Exception as exc:
        raise UsageError(str(exc.diagnostics[0].message)) from None
    return {"input_shapes": shapes, "precision": args.precision}


def add_import_parser(sub) -> None:
    imp = sub.add_parser("import", help="import an ONNX model as a graph-VIR module",
                         description="Import MODEL.onnx as a graph-VIR module: MODEL.vir, with its "
                                     "large constants as .npy files in MODEL.consts/ beside it.")
    imp.add_argument("file", metavar="MODEL.onnx")
    imp.add_argument("-o", "--output", metavar="OUT.vir",
                     help="where to write the module (default: MODEL.vir beside the model)")
    add_onnx_options(imp)
    imp.set_defaults(handler=cmd_import)


def cmd_import(args) -> int:
    from vpuc.onnx_import import import_onnx, write_import
    imported = import_onnx(args.file, **onnx_arguments(args))
    for warning in imported.warnings:
        print(warning.render(), file=sys.stderr)
    output = args.output or str(Path(args.file).with_suffix(".vir"))
    written = write_import(imported, output)
    from vpuc.diagnostics import Diagnostic, Severity
    for onnx_name, name in imported.outputs.items():
        if name in imported.empty_outputs:
            note = (f"{args.file}: output '{onnx_name}' is empty "
                    f"({imported.empty_outputs[name].shape_str()}); VIR has no tensor of size 0, "
                    f"so {output} leaves it out: compile {args.file} itself to keep it")
            print(Diagnostic(Severity.WARNING, None, note).render(), file=sys.stderr)
    ops = [op for graph in imported.module.graphs for op in graph.ops]
    computing = sum(1 for op in ops if not op.is_source and op.kind != "Result")
    # a model whose outputs are all empty computes nothing: no graph, its inputs alone
    what = f"graph @{imported.module.graphs[0].name}" if imported.module.graphs else "no graph"
    print(f"{output}: {what} with {computing} ops, "
          f"{len(imported.inputs)} input(s), {len(imported.outputs)} output(s), "
          f"{len(written) - 1} constant file(s)")
    return EXIT_OK
