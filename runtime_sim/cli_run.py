"""``vpuc run FILE``: simulate a blob (or a .vir file, compiled in-process).

Prints a summary table to stdout (then, with ``--kernel-profile``, the ACT
SHAVE cycles per kernel and per LIR expression: ``kernel_profile.py``); writes
outputs (``--output-dir``), a task report (``--report``), the per-expression
profile (``--kernel-profile-csv``) and a Perfetto trace (``--trace``); checks outputs
against ``--expected`` tensors or the numpy ``--reference`` (which also checks
every task of a generated kernel against the graph its object records:
``kernel_check.py``).  Exit code 1 when an output or a checked kernel
mismatches or a race is found.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np

from runtime_sim.inputs import bind, compare, parse_tensor_arg, tolerances
from runtime_sim.kernel_check import KernelCheck, load_graphs
from runtime_sim.reference import Reference
from runtime_sim.report import summary, tasks_csv
from runtime_sim.simarch import sim_arch_for
from runtime_sim.simulator import simulate
from runtime_sim.trace import trace_json
from vpuc.diagnostics import UsageError, VpucError
from vpuc.fileio import write_atomically
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
    run.add_argument("file", metavar="FILE", help="a blob, or a .vir file")
    run.add_argument("--input", action="append", default=[], metavar="[NAME=]VALUE",
                     help="an input: @file.npy or a typed literal like 1x16xf16=1,2,... "
                          "(repeatable; missing inputs are random)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    run.add_argument("--output-dir", metavar="DIR", help="write every output as DIR/NAME.npy")
    run.add_argument("--expected", action="append", default=[], metavar="[NAME=]VALUE",
                     help="expected output (@ref.npy or a literal) to compare with (repeatable)")
    run.add_argument("--reference", action="store_true",
                     help="compute the expected outputs with numpy, op by op, and compare")
    run.add_argument("--rtol", type=float, help="relative tolerance (default by element type)")
    run.add_argument("--atol", type=float, help="absolute tolerance (default by element type)")
    run.add_argument("--report", metavar="CSV", help="write one row per task: id, engine, tile, "
                     "start, end, cycles, bytes, MACs, ...")
    run.add_argument("--kernel-profile", action="store_true",
                     help="after the summary, print each kernel's ACT SHAVE cycles and, for "
                          "generated kernels, the cycles of each LIR expression")
    run.add_argument("--kernel-profile-csv", metavar="CSV",
                     help="write the per-expression profile: one row per kernel and expression")
    run.add_argument("--trace", metavar="JSON", help="write a Chrome trace JSON for Perfetto")
    run.add_argument("--timing-only", action="store_true", help="skip the numerics")
    run.add_argument("--arch", metavar="NAME|FILE",
                     help="simulator timing model (default: runtime_sim/archs/<arch>.toml)")
    run.add_argument("--max-cycles", type=float, metavar="N",
                     help="stop with an error if the run goes past N cycles")
    run.add_argument("--no-races", action="store_true", help="do not check for data races")
    run.add_argument("-p", "--passes", metavar="PIPELINE",
                     help="for a .vir file: the pass pipeline to compile with (default: compile)")
    run.set_defaults(handler=cmd_run)
    return run


# ------------------------------------------------------------------ loading

def load_program(path: str, passes: str | None):
    if path.endswith(".vir"):
        from vpuc.arch import load_arch
        from vpuc.passes.base import PassContext
        from vpuc.passes.manager import PassManager
        from vpuc.passes.registry import compile_pipeline, parse_pipeline
        from vpuc.vir.parser import parse_file
        module = parse_file(path)
        # By default, exactly what `vpuc compile` would run (lower-graph first for graph modules).
        pipeline = parse_pipeline(passes or ",".join(compile_pipeline(module)))
        ctx = PassContext(load_arch(module.arch))
        PassManager(pipeline).run(module, ctx)
        for diag in ctx.warnings.items:
            print(diag.render(), file=sys.stderr)
        program = ctx.artifacts.get("program")
        if program is None:
            raise UsageError(f"the pipeline '{passes}' builds no program; it needs "
                             "assign-windows and pack-kernel-args")
        return program
    if passes:
        raise UsageError("-p/--passes applies to .vir files only; a blob is already compiled")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise VpucError(f"cannot read {path}: {exc.strerror}") from None
    try:
        from vpuc.blob import read_blob
    except ImportError:
        raise UsageError("reading blobs needs vpuc.blob.read_blob, which is not built yet; "
                         "run the .vir file instead") from None
    return read_blob(data, path)


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


def display_path(path: str) -> str:
    """Relative to the working directory when the file is under it (stable in messages)."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


# ------------------------------------------------------------------ the command

def cmd_run(args) -> int:
    if args.timing_only and (args.output_dir or args.expected or args.reference):
        raise UsageError("--timing-only computes no outputs; drop --output-dir, --expected and "
                         "--reference, or drop --timing-only")
    program = load_program(args.file, args.passes)
    try:
        arch = sim_arch_for(program.arch, args.arch)
    except VpucError as exc:
        if args.arch:
            raise UsageError(f"--arch: {exc.diagnostics[0].message}") from None
        raise
    module = program.module
    inputs_decl = [b for b in module.buffers if b.kind is BufferKind.INPUT]
    outputs_decl = [b for b in module.buffers if b.kind is BufferKind.OUTPUT]
    given = bind([parse_tensor_arg(t, "--input") for t in args.input], inputs_decl, "--input",
                 "input")
    expected = bind([parse_tensor_arg(t, "--expected") for t in args.expected], outputs_decl,
                    "--expected", "output")
    check = None
    if args.reference:    # before the run: a recorded graph that does not parse stops it here
        graphs = load_graphs(program, args.file)
        check = KernelCheck(program, graphs, args.rtol, args.atol) if graphs else None
    units = sum(len(tl.tasks) for tl in module.task_lists)
    bar = ProgressBar(units) if sys.stdout.isatty() and units >= PROGRESS_MIN_UNITS else None
    try:
        result = simulate(program, arch, given, seed=args.seed, timing_only=args.timing_only,
                          races=not args.no_races, max_cycles=args.max_cycles, progress=bar,
                          kernel_observer=check,
                          kernel_profile=args.kernel_profile or bool(args.kernel_profile_csv))
    finally:
        if bar is not None:
            bar.close()
    title = (f"vpuc run {args.file}: @{module.name} on {arch.name} "
             f"(timing model {display_path(arch.path)}, version {arch.version})")
    sys.stdout.write(summary(result.plan, result.timeline, title))
    if args.kernel_profile:
        sys.stdout.write(result.kernel_profile.text())
    if args.kernel_profile_csv:
        write_atomically(args.kernel_profile_csv, result.kernel_profile.csv().encode())
    if args.report:
        write_atomically(args.report, tasks_csv(result.plan, result.timeline).encode())
    if args.trace:
        write_atomically(args.trace, trace_json(result.plan, result.timeline, title).encode())
    status = EXIT_OK
    for diag in result.races:
        print(diag.render(), file=sys.stderr)
        status = EXIT_USER
    if args.output_dir:
        directory = Path(args.output_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in result.outputs.items():
            save_npy(directory / f"{name}.npy", value)
            print(f"output %{name} -> {directory / (name + '.npy')}")
    checks = [(name, value, "the expected tensor") for name, value in expected.items()]
    if args.reference:
        reference = Reference(program, graphs=graphs).run(result.inputs)
        checks += [(name, value, "the numpy reference") for name, value in reference.items()]
    if check is not None:
        for mismatch in check.mismatches[:MAX_MISMATCH_LINES]:
            print(mismatch.render())
        if len(check.mismatches) > MAX_MISMATCH_LINES:
            print(f"... and {len(check.mismatches) - MAX_MISMATCH_LINES:,} more mismatches")
        print(check.summary())
        if check.mismatches:
            status = EXIT_USER
    buffers = {b.name: b for b in outputs_decl}
    for name, value, against in checks:
        rtol, atol = tolerances(buffers[name], args.rtol, args.atol)
        ok, line = compare(name, result.outputs[name], value, rtol, atol, against)
        print(line)
        if not ok:
            status = EXIT_USER
    return status
