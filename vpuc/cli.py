"""The ``vpuc`` command line.

Output goes to stdout, diagnostics to stderr.  Exit codes: 0 success, 1 a user
error (bad input), 2 a usage error (bad arguments, or a subcommand that is not
built yet), 3 an internal error (a bug in vpuc, reported in one line).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vpuc import __version__
from vpuc.arch import DEFAULT_ARCH, load_arch
from vpuc.diagnostics import LOWERED_SOURCE, Severity, UsageError, VpucError
from vpuc.fileio import write_atomically
from vpuc.passes.base import PassContext
from vpuc.passes.manager import PassManager
from vpuc.passes.registry import PASSES, PIPELINES, parse_pipeline
from vpuc.vir.parser import parse_text
from vpuc.program_printer import print_program
from vpuc.vir.printer import print_module

EXIT_OK, EXIT_USER, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit is 2 with usage; keep that
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vpuc", description="NPU blob compiler and cycle-approximate simulator.")
    parser.add_argument("--version", action="version", version=f"vpuc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    opt = sub.add_parser("opt", help="parse a .vir file, run passes, print the resulting IR",
                         description="Parse FILE, run a pass pipeline and print the resulting "
                                     "VIR to stdout (or -o).")
    opt.add_argument("file", metavar="FILE", help="the .vir file to read ('-': stdin)")
    opt.add_argument("-p", "--passes", default="default", metavar="PIPELINE",
                     help="comma-separated pass names, or a pipeline name "
                          f"(passes: {', '.join(PASSES)}; pipelines: {', '.join(PIPELINES)}; "
                          "'compile' is what vpuc compile runs, lower-graph first for a graph "
                          "module; default: %(default)s)")
    opt.add_argument("-o", "--output", metavar="OUT", help="write the IR here instead of stdout")
    opt.add_argument("--arch", metavar="NAME|FILE",
                     help=f"override the module's architecture (default: the module's, or {DEFAULT_ARCH})")
    opt.add_argument("--print-after-all", action="store_true",
                     help="print the IR to stderr after every pass")
    opt.add_argument("--time-passes", action="store_true",
                     help="print a table of pass timings to stderr")
    opt.add_argument("--verify-each", action="store_true",
                     help="debug mode: run the verifier after every pass")
    opt.set_defaults(handler=cmd_opt)

    comp = sub.add_parser("compile", help="compile a .vir file to a FlatBuffer or ELF blob",
                          description="Parse FILE, run the compile pipeline "
                                      f"({', '.join(PIPELINES['compile'])}) and write a blob. "
                                      "The output is written atomically and is byte-identical "
                                      "for the same input and options.")
    comp.add_argument("file", metavar="FILE", help="the .vir file or ONNX model to compile ('-': stdin)")
    from vpuc.onnx_import.cli_import import add_onnx_options
    from vpuc.fusion.schedule_option import add_schedule_option
    add_onnx_options(comp)
    add_schedule_option(comp)
    comp.add_argument("-o", "--output", metavar="OUT",
                      help="the blob to write ('-': stdout; default: FILE with .blob, or .elf "
                           "for --format elf; stdout when FILE is '-')")
    comp.add_argument("-p", "--passes", metavar="PIPELINE",
                      help="the pass pipeline (comma-separated names; default: compile, with "
                           "lower-graph first for a graph module); it must build a program")
    comp.add_argument("--format", choices=("fb", "elf"), default="fb",
                      help="FlatBuffer graph file (fb) or ELF container (elf); default: %(default)s")
    comp.add_argument("--arch", metavar="NAME|FILE", help="override the module's architecture")
    comp.add_argument("--cmx-budget", type=int, metavar="BYTES",
                      help="bytes of a tile's CMX one layer's blocks may use (a tiling limit; "
                           "default: half the tile's CMX)")
    comp.add_argument("--print-after-all", action="store_true",
                      help="print the IR to stderr after every pass (with a graph block: also "
                           "the Linear IR after every LIR pass and the generated code after "
                           "every generator stage)")
    comp.add_argument("--print-lir", action="store_true",
                      help="print the final Linear IR of every generated kernel to stderr")
    comp.add_argument("--time-passes", action="store_true",
                      help="print pass and serialization timings to stderr")
    comp.add_argument("--verify-each", action="store_true",
                      help="debug mode: run the verifier after every pass")
    comp.set_defaults(handler=cmd_compile)

    from vpuc.cli_run import add_run_parser
    add_run_parser(sub)
    from vpuc.fusion.cli_fuse import add_fuse_parser
    add_fuse_parser(sub)

    kernels = sub.add_parser("kernels", help="the ACT SHAVE kernel library (kernels/*.s)",
                             description="Build or list the library kernels (docs/kernels.md).")
    ksub = kernels.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    ksub.required = True
    kbuild = ksub.add_parser("build", help="assemble every kernel into an ELF object NAME.o",
                             description="Assemble kernels/*.s into ELF32 objects, one line per "
                                         "object with its size.")
    kbuild.add_argument("-o", "--output", metavar="DIR",
                        help="where to write the objects (default: kernels/build)")
    kbuild.set_defaults(handler=cmd_kernels_build)
    klist = ksub.add_parser("list", help="print the library kernel names")
    klist.set_defaults(handler=cmd_kernels_list)

    from vpuc.blob.cli_inspect import add_inspect_parser
    add_inspect_parser(sub)
    from vpuc.onnx_import.cli_import import add_import_parser
    add_import_parser(sub)
    from vpuc.report.html import add_report_parser
    add_report_parser(sub)
    from vpuc.sweep.cli import add_sweep_parser
    add_sweep_parser(sub)
    return parser


def cmd_opt(args) -> int:
    from vpuc.api import pipeline_names, resolve_arch
    from vpuc.input_files import display_name, read_text
    parse_pipeline(args.passes)          # a bad pipeline is a usage error, before any reading
    arch = _arch_override(args.arch)
    module = parse_text(read_text(args.file, "the .vir file"), display_name(args.file))
    passes = parse_pipeline(",".join(pipeline_names(args.passes, module)))
    ctx = PassContext(resolve_arch(module, arch))
    manager = PassManager(passes, print_after_all=args.print_after_all,
                          time_passes=args.time_passes, verify_each=args.verify_each,
                          stream=sys.stderr)
    manager.run(module, ctx)
    for diag in ctx.warnings.items:
        print(diag.render(), file=sys.stderr)
    text = print_module(module)
    program = ctx.artifacts.get("program")
    if program is not None:
        text += print_program(program)
    if args.output and args.output != "-":
        write_atomically(args.output, text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_compile(args) -> int:
    import time

    from vpuc import api
    from vpuc.passes.manager import PassTiming

    arch = _arch_override(args.arch)
    report = api.CompileReport()
    fusion_print = _fusion_printer(args) if args.print_lir or args.print_after_all else None
    from vpuc.onnx_import.cli_import import onnx_arguments
    program = api.compile(args.file, arch, args.format, passes=args.passes, report=report,
                          print_after_all=args.print_after_all, verify_each=args.verify_each,
                          trace=sys.stderr, fusion_print=fusion_print, schedule=args.schedule,
                          cmx_budget=args.cmx_budget,
                          **onnx_arguments(args))
    started = time.perf_counter()
    output = args.output or _default_output(args.file, args.format)
    data = api.write_blob(program, args.format, output)
    serialize_seconds = time.perf_counter() - started
    for diag in report.warnings:
        print(diag.render(), file=sys.stderr)
    if args.time_passes:
        from vpuc.passes.manager import PassManager
        timings = PassManager([], timings=report.pass_timings + [
            PassTiming(f"serialize ({args.format})", serialize_seconds)])
        sys.stderr.write(timings.timing_report())
        if report.stage_timings:
            sys.stderr.write("===== lower-graph stages =====\n" + "".join(
                f"{seconds * 1e3:10.3f}  {stage}\n" for stage, seconds in report.stage_timings))
    shown = "<stdout>" if output == "-" else output
    print(f"wrote {shown}: {len(data)} bytes ({args.format})", file=sys.stderr)
    return EXIT_OK


def _default_output(file: str, fmt: str) -> str:
    """FILE with the format's suffix; stdout when FILE is stdin."""
    if file == "-":
        return "-"
    from vpuc.api import BLOB_SUFFIX
    return str(Path(file).with_suffix(BLOB_SUFFIX[fmt]))


def _arch_override(name: str | None):
    """The --arch override loaded up front (None: the module's); a bad name is a usage
    error, a number out of range in an architecture file a located error in that file."""
    if name is None:
        return None
    try:
        return load_arch(name)
    except VpucError as exc:
        if exc.diagnostics[0].loc is not None:
            raise
        raise UsageError(f"--arch: {exc.diagnostics[0].message}") from None


def _fusion_printer(args):
    """The generator's print hook: --print-lir prints each kernel's final Linear IR,
    --print-after-all every LIR pass, every MIR stage and the assembly (to stderr)."""
    def show(stage: str, text: str) -> None:
        final_lir = stage.endswith("lir:assign-registers")
        if args.print_after_all or (args.print_lir and final_lir):
            sys.stderr.write(f"// ----- {stage} -----\n{text}")
    return show


def cmd_kernels_build(args) -> int:
    from vpuc.kernel_library import build_library
    for path in build_library(args.output):
        print(f"{path}  {path.stat().st_size} bytes")
    return EXIT_OK


def cmd_kernels_list(args) -> int:
    from vpuc.kernel_library import library_names
    print("\n".join(library_names()))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except VpucError as exc:
        print(exc.render(), file=sys.stderr)
        if _in_lowered_program(exc):
            print("vpuc: internal error: the program lower-graph wrote breaks the rule above; "
                  "a graph it cannot lower is refused at the graph op, so this is a bug "
                  "(please report it with the input)", file=sys.stderr)
            return EXIT_INTERNAL
        return exc.exit_code
    except KeyboardInterrupt:
        print("vpuc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug in vpuc: one line, never a traceback
        print(f"vpuc: internal error: {type(exc).__name__}: {exc} "
              "(please report this with the input that caused it; "
              "set VPUC_TRACEBACK=1 for details)", file=sys.stderr)
        if os.environ.get("VPUC_TRACEBACK"):
            raise
        return EXIT_INTERNAL


def _in_lowered_program(exc: VpucError) -> bool:
    """Whether every error is located in the program text lower-graph wrote, which no user
    writes (``lower_graph``: ``<lower-graph @NAME>``)."""
    errors = [d for d in exc.diagnostics if d.severity is Severity.ERROR]
    return bool(errors) and all(getattr(d.loc, "file", "").startswith(LOWERED_SOURCE)
                                for d in errors)


def entry() -> None:
    sys.exit(main())
