"""``vpuc run FILE``: simulate a blob (or a .vir file, compiled in-process).

The compiler's side of the CLI: ``vpuc.api.load`` compiles a .vir file with
``vpuc.compile`` (the same pipeline, arch override and provenance as ``vpuc
compile``) or reads a blob, and ``vpuc.api.simulate`` hands the Program to
``runtime_sim``, which never imports the parser, the passes or the fusion
pipeline.

Prints a summary table to stdout (then, with ``--kernel-profile``, the ACT
SHAVE cycles per kernel and per LIR expression: ``kernel_profile.py``); writes
outputs (``--output-dir``), a task report (``--report``), the per-expression
profile (``--kernel-profile-csv``), a Perfetto trace (``--trace``), per-layer reports
(``--report-dir``: ``runtime_sim/layer_report.py``) and the HTML report (``--html``:
``vpuc/report/``); checks outputs
against ``--expected`` tensors or the numpy ``--reference`` (which also checks
every task of a generated kernel against the graph its object records:
``runtime_sim/kernel_check.py``).  ``--json`` prints all of it as one JSON
object instead (docs/simulator.md).  Exit code 1 when an output or a checked
kernel mismatches or a race is found.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from runtime_sim.inputs import bind, check_input_types, compare, parse_tensor_arg, tolerances
from runtime_sim.layer_report import write_report_dir
from runtime_sim.node_report import layers_csv
from runtime_sim.report import summary, tasks_csv
from runtime_sim.simarch import load_sim_arch, sim_arch_for
from runtime_sim.trace import trace_json
from vpuc import api
from vpuc.diagnostics import UsageError, VpucError
from vpuc.fileio import write_atomically
from vpuc.input_files import make_directory
from vpuc.run_outputs import output_files, run_json, write_output
from vpuc.ir.module import BufferKind

EXIT_OK, EXIT_USER = 0, 1
PROGRESS_MIN_UNITS = 2000        # shorter runs finish before a bar is worth drawing
PROGRESS_DELAY_S = 0.5
MAX_MISMATCH_LINES = 20         # generated-kernel mismatches printed one by one


def add_run_parser(subparsers) -> argparse.ArgumentParser:
    run = subparsers.add_parser(
        "run", help="simulate a blob (or a .vir file): outputs, cycles, trace",
        description="Simulate FILE (a blob, or a .vir file compiled in-process) on the "
                    "cycle-approximate NPU model: print a summary of cycles and engine use, "
                    "and optionally write outputs, a task report and a Perfetto trace.")
    run.add_argument("file", metavar="FILE", help="a blob, a .vir file or an ONNX model ('-': stdin)")
    from vpuc.onnx_import.cli_import import add_onnx_options
    from vpuc.fusion.schedule_option import add_schedule_option
    add_onnx_options(run)
    add_schedule_option(run)
    run.add_argument("--input", action="append", default=[], metavar="[NAME=]VALUE",
                     help="an input: @file.npy or a typed literal like 1x16xf16=1,2,... "
                          "(repeatable; missing inputs are random); its element type must be "
                          "the input's unless --cast-inputs")
    run.add_argument("--cast-inputs", action="store_true",
                     help="convert --input values of another element type to the input's "
                          "(a float value for an integer input must hold whole numbers)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    run.add_argument("--output-dir", metavar="DIR", help="write every output as DIR/NAME.npy")
    run.add_argument("--output", action="append", default=[], metavar="[NAME=]@FILE.npy",
                     help="write an output to FILE.npy (IREE's spelling; repeatable, unnamed "
                          "ones go to the outputs in declaration order)")
    run.add_argument("--expected", "--expected_output", action="append", default=[],
                     metavar="[NAME=]VALUE",
                     help="expected output (@ref.npy or a literal) to compare with (repeatable)")
    run.add_argument("--reference", action="store_true",
                     help="compute the expected outputs with numpy, op by op, and compare")
    run.add_argument("--rtol", type=float, help="relative tolerance (default by element type)")
    run.add_argument("--atol", type=float, help="absolute tolerance (default by element type)")
    run.add_argument("--report", metavar="CSV", help="write one row per task: id, engine, tile, "
                     "start, end, cycles, bytes, MACs, ... ('-': stdout)")
    run.add_argument("--layer-report", metavar="CSV",
                     help="write one row per ONNX node (or fused node group): its name and op "
                          "type, engines, tasks, start, end, cycles, MACs, DMA bytes ('-': "
                          "stdout; docs/simulator.md, \"Reports\")")
    run.add_argument("--report-dir", metavar="DIR",
                     help="write per-layer reports into DIR: compute_report.csv, "
                          "bandwidth_report.csv, detailed_access_report.csv, summary.json "
                          "(docs/simulator.md, \"Reports\"); `vpuc report DIR` renders them")
    run.add_argument("--html", metavar="HTML",
                     help="write the interactive HTML report of the run (one offline file)")
    run.add_argument("--json", action="store_true",
                     help="print the summary, the checks and their verdicts as one JSON object "
                          "(fields: docs/simulator.md)")
    run.add_argument("--kernel-profile", action="store_true",
                     help="after the summary, print each kernel's ACT SHAVE cycles and, for "
                          "generated kernels, the cycles of each LIR expression")
    run.add_argument("--kernel-profile-csv", metavar="CSV",
                     help="write the per-expression profile: one row per kernel and expression "
                          "('-': stdout)")
    run.add_argument("--trace", metavar="JSON",
                     help="write a Chrome trace JSON for Perfetto ('-': stdout)")
    run.add_argument("--timing-only", action="store_true", help="skip the numerics")
    run.add_argument("--arch", metavar="NAME|FILE",
                     help="simulator timing model (default: vpuc/cost/archs/<arch>.toml)")
    run.add_argument("--max-cycles", type=float, metavar="N",
                     help="stop with an error if the run goes past N cycles")
    run.add_argument("--no-races", action="store_true", help="do not check for data races")
    run.add_argument("-p", "--passes", metavar="PIPELINE",
                     help="for a .vir file: the pass pipeline to compile with (default: compile)")
    run.add_argument("--cmx-budget", type=int, metavar="BYTES",
                     help="for a .vir or .onnx file: bytes of a tile's CMX one layer's blocks "
                          "may use (a tiling limit; default: half the tile's CMX)")
    run.set_defaults(handler=cmd_run)
    return run


# ------------------------------------------------------------------ output

def save_npy(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    write_atomically(path, buffer.getvalue())


class ProgressBar:
    """A one-line bar on stderr, drawn only for long runs and when stdout is a terminal."""

    def __init__(self, total: int, stream=sys.stderr) -> None:
        self.total, self.stream = total, stream
        self.begin = time.monotonic()
        self.drawn = False
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.begin < PROGRESS_DELAY_S or now - self.last < 0.1:
            return
        self.last, self.drawn = now, True
        filled = int(30 * done / max(total, 1))
        share = 100 * done / max(total, 1)
        self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {share:3.0f}% "
                          f"{done:,}/{total:,} units")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 72 + "\r")
            self.stream.flush()


def _declared_input_types(file: str) -> dict:
    """An .onnx FILE's input types as the model declares them (f32, imported at f16), by
    the model's input names."""
    from vpuc.onnx_import.source import is_onnx
    if not is_onnx(file):
        return {}
    from vpuc.onnx_import.model import declared_input_types
    return declared_input_types(file)


def _declared_outputs(file: str, names: dict[str, str]):
    """How an .onnx FILE's outputs are written: each in the type the model declares, by the
    program's names (``boundary_types.as_declared``); other files' as computed."""
    from vpuc.onnx_import.source import is_onnx
    if not is_onnx(file):
        return lambda name, value: value
    from vpuc.onnx_import.boundary_types import as_declared
    from vpuc.onnx_import.model import declared_output_types
    declared = {names.get(k, k): v for k, v in declared_output_types(file).items()}
    return lambda name, value: as_declared(value, declared.get(name))


def _not_constants(file: str, given: list) -> list:
    """``--input`` values, none naming an initializer that IR version 3 lists among an .onnx
    FILE's graph inputs: vpuc compiled it into the blob as a constant, so a run cannot set it."""
    from vpuc.onnx_import.source import is_onnx
    if not is_onnx(file) or all(arg.name is None for arg in given):
        return given
    from vpuc.onnx_import.model import constant_inputs
    constants = constant_inputs(file)
    for arg in given:
        if arg.name in constants:
            raise UsageError(f"--input {arg.spelled}: '{arg.name}' is an initializer of the model "
                             "(IR version 3 lists initializers among the graph inputs); vpuc "
                             "compiles it into the blob as a constant, so a run cannot set it")
    return given


def _renamed(tensor_args: list, names: dict[str, str]) -> list:
    """``--input``/``--expected`` values named by the ONNX model's own names, renamed to
    the program's (``Program.source_names``: VIR spells 'gpu_0/data_0' as 'gpu_0_data_0')."""
    return [replace(arg, name=names[arg.name]) if arg.name in names else arg
            for arg in tensor_args]


def _renamed_spec(spec: str, names: dict[str, str]) -> str:
    """``--output NAME=@FILE`` with NAME the ONNX model's name, renamed likewise."""
    head, sep, rest = spec.partition("=")
    if sep and not spec.startswith("@") and head.lstrip("%") in names:
        return f"{names[head.lstrip('%')]}={rest}"
    return spec


def display_path(path: str) -> str:
    """Relative to the working directory when the file is under it (stable in messages)."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


def write_reports(args, program, arch, run, title: str, directory: Path | None) -> Path:
    """The per-layer reports, into ``--report-dir`` (or, for ``--html`` alone, a temporary
    directory); ``summary.json`` is written last, once the checks are known."""
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="vpuc-report-"))
    write_report_dir(directory, run.result.plan, run.result.timeline, write_output)
    return directory


# ------------------------------------------------------------------ the command

def cmd_run(args) -> int:
    if args.timing_only and (args.output_dir or args.output or args.expected or args.reference):
        raise UsageError("--timing-only computes no outputs; drop --output-dir, --output, "
                         "--expected and --reference, or drop --timing-only")
    if args.json and "-" in (args.report, args.layer_report, args.trace,
                             args.kernel_profile_csv):
        raise UsageError("--json writes stdout; give --report, --layer-report, --trace and "
                         "--kernel-profile-csv a file, not '-'")
    if args.html == "-":
        raise UsageError("--html writes a file; give it a path, not '-'")
    timing = None
    if args.arch:   # checked before anything is read; a .vir file compiles for its structure
        try:
            timing = load_sim_arch(args.arch)
        except VpucError as exc:
            if exc.diagnostics[0].loc is not None:    # a number in the file: located there
                raise
            raise UsageError(f"--arch: {exc.diagnostics[0].message}") from None
    from vpuc.onnx_import.cli_import import onnx_arguments
    program = api.load(args.file, timing.structure if timing else None, passes=args.passes,
                       timing=args.arch, schedule=args.schedule, cmx_budget=args.cmx_budget,
                       **onnx_arguments(args))
    try:
        arch = sim_arch_for(program.arch, args.arch)
    except VpucError as exc:
        if args.arch:
            raise UsageError(f"--arch: {exc.diagnostics[0].message}") from None
        raise
    module = program.module
    inputs_decl = [b for b in module.buffers if b.kind is BufferKind.INPUT]
    outputs_decl = [b for b in module.buffers if b.kind is BufferKind.OUTPUT]
    names = program.source_names
    given = bind(_renamed(_not_constants(args.file, [parse_tensor_arg(t, "--input")
                                                     for t in args.input]), names),
                 inputs_decl, "--input", "input")
    if not args.cast_inputs:
        declared = {names.get(k, k): v for k, v in _declared_input_types(args.file).items()}
        check_input_types(given, inputs_decl, "--input", declared)
    expected = bind(_renamed([parse_tensor_arg(t, "--expected") for t in args.expected], names),
                    outputs_decl, "--expected", "output")
    files = output_files([_renamed_spec(spec, names) for spec in args.output],
                         [b.name for b in outputs_decl] + list(program.empty_outputs))
    directory = make_directory(args.output_dir, "the output directory") if args.output_dir \
        else None                     # before the run: a bad directory stops it early
    report_directory = make_directory(args.report_dir, "the report directory") \
        if args.report_dir else None
    units = sum(len(tl.tasks) for tl in module.task_lists)
    bar = ProgressBar(units) if sys.stdout.isatty() and units >= PROGRESS_MIN_UNITS else None
    try:
        run = api.simulate(program, given, arch=arch, seed=args.seed,
                           timing_only=args.timing_only, races=not args.no_races,
                           max_cycles=args.max_cycles, reference=args.reference,
                           rtol=args.rtol, atol=args.atol, progress=bar, source=args.file,
                           kernel_profile=args.kernel_profile or bool(args.kernel_profile_csv))
    finally:
        if bar is not None:
            bar.close()
    result, check = run.result, run.kernel_check
    title = (f"vpuc run {args.file}: @{module.name} on {arch.name} "
             f"(timing model {display_path(arch.path)}, version {arch.version})")
    lines: list[str] = []       # printed after the summary (or folded into --json)
    if not args.json:
        sys.stdout.write(summary(result.plan, result.timeline, title))
        if args.kernel_profile:
            sys.stdout.write(result.kernel_profile.text())
    if args.kernel_profile_csv:
        write_output(args.kernel_profile_csv, result.kernel_profile.csv())
    if args.report:
        write_output(args.report, tasks_csv(result.plan, result.timeline))
    if args.layer_report:
        write_output(args.layer_report, layers_csv(result.plan, result.timeline))
    if args.trace:
        write_output(args.trace, trace_json(result.plan, result.timeline, title))
    report_dir = None
    if args.report_dir or args.html:
        report_dir = write_reports(args, program, arch, run, title, report_directory)
    status = EXIT_OK
    for diag in result.races:
        print(diag.render(), file=sys.stderr)
        status = EXIT_USER
    written = []
    typed = _declared_outputs(args.file, names) if directory is not None or files else None
    if directory is not None:
        for name, value in result.outputs.items():
            save_npy(directory / f"{name}.npy", typed(name, value))
            written.append((name, str(directory / f"{name}.npy")))
    for name, path in files.items():
        save_npy(Path(path), typed(name, result.outputs[name]))
        written.append((name, path))
    lines += [f"output %{name} -> {path}" for name, path in written]
    checks = [(name, value, "the expected tensor") for name, value in expected.items()]
    if run.reference is not None:
        checks += [(name, value, "the numpy reference") for name, value in run.reference.items()]
    if check is not None:
        lines += [m.render() for m in check.mismatches[:MAX_MISMATCH_LINES]]
        if len(check.mismatches) > MAX_MISMATCH_LINES:
            lines.append(f"... and {len(check.mismatches) - MAX_MISMATCH_LINES:,} more mismatches")
        lines.append(check.summary())
        if check.mismatches:
            status = EXIT_USER
    if run.layer_check is not None:
        lines += [f"layer {r.layer} ({r.nodes}): {r.failures} of {r.elements} elements beyond "
                  f"the bound, worst {r.worst_fraction:.3g} at {r.worst_value}"
                  for r in run.layer_check.failed[:MAX_MISMATCH_LINES]]
        lines.append(run.layer_check.summary())
        if run.layer_check.failed:
            status = EXIT_USER
    buffers = {b.name: b for b in outputs_decl}
    verdicts = []
    for name, value, against in checks:
        rtol, atol = tolerances(buffers[name], args.rtol, args.atol)
        ok, line = compare(name, result.outputs[name], value, rtol, atol, against)
        lines.append(line)
        verdicts.append({"output": name, "against": against, "ok": ok, "message": line})
        if not ok:
            status = EXIT_USER
    if args.json or report_dir is not None:
        text = run_json(args, program, arch, display_path(arch.path), run, written, verdicts,
                        status)
        if report_dir is not None:
            write_output(str(report_dir / "summary.json"), text)
            if args.html:
                from vpuc.report.html import write_html
                try:
                    write_html(report_dir, Path(args.html), title)
                finally:
                    if not args.report_dir:       # --html alone: the files were a means
                        shutil.rmtree(report_dir, ignore_errors=True)
    if args.json:
        sys.stdout.write(text)
    elif lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return status
