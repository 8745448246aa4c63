"""`vpuc inspect FILE`: the command-line glue.  vpuc/cli.py calls
``add_inspect_parser(subparsers)``; the parser's handler is ``cmd_inspect``."""

from __future__ import annotations

import sys

from vpuc.diagnostics import UsageError

DESCRIPTION = (
    "Dump a blob (FlatBuffer or ELF): header and provenance, network inputs and outputs, "
    "the tensor table, barriers, every task list with waits, updates and parameters (DPU "
    "kernel, stride, pad, dilation, post-op, variants), every kernel with its contract and "
    "ELF sections, the runtime, the constants, every invocation with its arguments decoded, "
    "and section sizes; a kernel's disassembly with --kernel.  Or dump a single SHAVE "
    "kernel object: sections, symbols and disassembly.  --section NAME --hex dumps one "
    "part's bytes.")


def add_inspect_parser(subparsers) -> None:
    parser = subparsers.add_parser("inspect", help="dump a blob or a kernel object",
                                   description=DESCRIPTION)
    parser.add_argument("file", metavar="FILE",
                        help="a .blob / .elf blob, a kernel .o, or a .vir file (compiled in "
                             "memory, like vpuc run does); '-': stdin")
    from vpuc.onnx_import.cli_import import add_onnx_options
    add_onnx_options(parser)
    parser.add_argument("--arch", metavar="NAME|FILE",
                        help="for a .vir file: override the module's architecture")
    parser.add_argument("--json", action="store_true", help="print the same content as JSON")
    parser.add_argument("--task-list", metavar="EXECUTOR",
                        help="only this task list: DMA, DPU or ACT_SHAVE")
    parser.add_argument("--task", metavar="LABEL|INDEX", help="only this task (label or index)")
    parser.add_argument("--kernel", metavar="NAME",
                        help="only this kernel, its tasks and its invocations, with its "
                             "disassembly (a blob's kernels are disassembled only this way)")
    parser.add_argument("--no-disasm", action="store_true",
                        help="no disassembly (of the --kernel, or of a kernel object)")
    parser.add_argument("--section", metavar="NAME",
                        help="only one part of the file: an ELF section by name, or a "
                             "FlatBuffer field path from the root table (tensors[0].dims)")
    parser.add_argument("--hex", action="store_true",
                        help="with --section: dump its bytes as hexdump -C does")
    parser.set_defaults(handler=cmd_inspect)


def cmd_inspect(args) -> int:
    from vpuc import api
    from vpuc.blob.inspect import inspect_file
    from vpuc.cli import _arch_override
    from vpuc.input_files import decode_text, display_name, read_bytes
    name = display_name(args.file)
    from vpuc.onnx_import.cli_import import onnx_arguments
    if args.file.endswith((".vir", ".onnx")):   # compiled in memory exactly as `vpuc compile` would
        data = api.write_blob(api.compile(args.file, _arch_override(args.arch), **onnx_arguments(args)))
    else:
        data = read_bytes(args.file)
        if args.file == "-" and not api.is_blob(data):        # VIR text on stdin
            program = api.compile_text(decode_text(data, name), name, _arch_override(args.arch))
            data = api.write_blob(program)
        elif not api.is_blob(data):
            raise api.not_a_blob(data, name)
        elif args.arch:
            raise UsageError("--arch applies to .vir files only; a blob is already compiled")
    sys.stdout.write(inspect_file(data, name, json=args.json, task_list=args.task_list,
                                  task=args.task, kernel=args.kernel,
                                  no_disasm=args.no_disasm, section=args.section,
                                  hexdump=args.hex))
    return 0
