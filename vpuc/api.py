"""The Python API: compile, write and read blobs, simulate (docs/python-api.md).

    program = vpuc.compile("net.vir", arch="NPU37XX", format="elf")
    data = vpuc.write_blob(program, path="net.elf")
    program = vpuc.read_blob("net.elf")
    run = vpuc.simulate(program, {"x": x}, reference=True)

``vpuc compile``, ``vpuc run FILE.vir`` and ``vpuc inspect FILE.vir`` all go
through ``compile``, so a program compiled in memory carries the same
provenance, arch override and pipeline as the blob ``vpuc compile`` writes.
The simulator (``runtime_sim``) only runs compiled programs: everything that
needs the parser, the passes or the fusion pipeline (compiling, parsing the
graphs generated kernels record) happens here, on the compiler's side.
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import numpy as np

from vpuc import __version__
from vpuc.arch import Arch, checked_cmx_budget, load_arch
from vpuc.diagnostics import BinLoc, Diagnostic, Severity, UsageError, VpucError
from vpuc.input_files import STDIN, decode_text, display_name, read_bytes
from vpuc.program import Program

FORMATS = ("fb", "elf")
BLOB_SUFFIX = {"fb": ".blob", "elf": ".elf"}


@dataclass
class CompileReport:
    """What ``compile`` saw besides the program (pass ``report=CompileReport()`` to get it)."""

    warnings: list[Diagnostic] = field(default_factory=list)
    pipeline: list[str] = field(default_factory=list)      # the pass names that ran
    pass_timings: list = field(default_factory=list)       # vpuc.passes.manager.PassTiming
    stage_timings: list[tuple[str, float]] = field(default_factory=list)  # lower-graph stages
    module: object = None                                  # the IR after the last pass


def _source(source: str | os.PathLike, name: str | None) -> tuple[str, str | None]:
    """(text, path or None) of a ``compile`` source: a path, ``-`` (stdin) or VIR text."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                            and "{" not in source):
        path = os.fspath(source)
        shown = name or display_name(path)
        return decode_text(read_bytes(path, "the .vir file"), shown), shown
    if not isinstance(source, str):
        raise TypeError(f"compile() takes a path or VIR text, not {type(source).__name__}")
    return source, None


def pipeline_names(text: str | None, module) -> list[str]:
    """The pass names of a ``-p`` pipeline; the name ``compile`` means what ``vpuc compile``
    runs on ``module`` (with ``lower-graph`` first for a graph module).  Default: compile."""
    from vpuc.passes.registry import PASSES, PIPELINES, compile_pipeline, parse_pipeline
    if text is None:
        return compile_pipeline(module)
    parse_pipeline(text)                      # unknown or empty names: the usual usage error
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "compile":
            names += compile_pipeline(module)
        elif part in PIPELINES and part not in PASSES:
            names += PIPELINES[part]
        elif part:
            names.append(part)
    return names


def resolve_arch(module, arch: Arch | str | None) -> Arch:
    """``arch`` (an Arch, a name or a .toml file) or else the module's own architecture."""
    if isinstance(arch, Arch):
        return arch
    if arch is None:
        try:
            return load_arch(module.arch)
        except VpucError as exc:        # located at the module's header, or in its file
            if exc.diagnostics[0].loc is not None:
                raise
            raise VpucError(exc.diagnostics[0].message, module.loc) from None
    return load_arch(arch)


def resolve_timing(timing, target: Arch, loc=None):
    """The timing model the compiler's cost model reads: ``timing`` (a ``vpuc.cost.Timing``,
    an architecture name or a timing .toml file), else the one shipped for ``target``
    (None when there is none).  A timing model must extend ``target``'s structure."""
    from vpuc.cost.timing import Timing, default_timing, load_timing, structure_ref
    if timing is None:
        return default_timing(target.name)
    if not isinstance(timing, Timing):
        try:
            timing = load_timing(os.fspath(timing))
        except VpucError as exc:        # located at the module's header
            raise VpucError(exc.diagnostics[0].message, loc) from None
    structure = load_arch(structure_ref(timing))
    if structure.name != target.name:
        raise VpucError(f"the timing model {timing.path} extends {structure.name}, but the "
                        f"program is compiled for {target.name}", loc)
    return timing


def compile(source: str | os.PathLike, arch: Arch | str | None = None, format: str = "fb", *,
            passes: str | None = None, name: str | None = None, timing=None,
            report: CompileReport | None = None, print_after_all: bool = False,
            verify_each: bool = False, trace: TextIO | None = None,
            fusion_print: Callable[[str, str], None] | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None,
            precision: str = "f16", schedule: str = "default",
            cmx_budget: int | None = None) -> Program:
    """Compile a .vir file (a path, or ``-`` for stdin), VIR text (a string holding a
    newline or a ``{``) or an ONNX model (a path ending in .onnx, imported with
    ``input_shapes`` and ``precision``) into a Program; ``schedule`` (``default`` or
    ``naive``) is how a graph is lowered (``vpuc/fusion/schedule.py``); ``cmx_budget``: the
    bytes of a tile's CMX one layer's blocks may use (default half the CMX).  See
    docs/python-api.md."""
    options = dict(passes=passes, report=report, print_after_all=print_after_all,
                   verify_each=verify_each, trace=trace, fusion_print=fusion_print,
                   timing=timing, schedule=schedule, cmx_budget=cmx_budget)
    if passes is not None:
        from vpuc.passes.registry import parse_pipeline
        parse_pipeline(passes)         # a bad pipeline is a usage error, before any reading
    from vpuc.onnx_import.source import is_onnx, onnx_source
    source_names: dict[str, str] = {}
    empty_outputs: dict = {}
    if is_onnx(source):
        source, name, source_names, empty_outputs = onnx_source(source, input_shapes, precision)
    text, path = _source(source, name)
    program = compile_text(text, path or name or "<text>", arch, format,
                           source_name=Path(path).name if path else None, **options)
    program.source_names = source_names
    program.empty_outputs = empty_outputs
    return program


def compile_text(text: str, name: str, arch: Arch | str | None = None, format: str = "fb", *,
                 source_name: str | None = None, passes: str | None = None,
                 report: CompileReport | None = None, print_after_all: bool = False,
                 verify_each: bool = False, trace: TextIO | None = None,
                 fusion_print: Callable[[str, str], None] | None = None,
                 timing=None, schedule: str = "default", cmx_budget: int | None = None) -> Program:
    """``compile`` of VIR text that diagnostics call ``name`` (the provenance records
    ``source_name``, default ``name``); ``timing`` is the timing model the lowering's cost
    model reads (``resolve_timing``), ``cmx_budget`` the lowering's CMX bytes per layer
    (``vpuc.arch.checked_cmx_budget``)."""
    from vpuc.passes.base import PassContext
    from vpuc.passes.manager import PassManager
    from vpuc.passes.registry import parse_pipeline
    from vpuc.vir.parser import parse_text
    if format not in FORMATS:
        raise UsageError(f"unknown blob format '{format}'; expected one of: {', '.join(FORMATS)}")
    if passes is not None:
        parse_pipeline(passes)
    from vpuc.fusion.schedule import check_schedule
    check_schedule(schedule)
    module = parse_text(text, name)
    source_graph = copy.deepcopy(module.graphs[0]) if len(module.graphs) == 1 else None
    target = resolve_arch(module, arch)
    names = pipeline_names(passes, module)
    ctx = PassContext(target, timing=resolve_timing(timing, target, module.loc),
                      cmx_budget=checked_cmx_budget(target, cmx_budget))
    ctx.artifacts["schedule"] = schedule
    if fusion_print is not None:
        ctx.artifacts["fusion-print"] = fusion_print
    manager = PassManager(parse_pipeline(",".join(names)), print_after_all=print_after_all,
                          verify_each=verify_each, stream=trace or sys.stderr)
    manager.run(module, ctx)
    warnings = list(ctx.warnings.items)
    if report is None:
        for diag in warnings:
            print(diag.render(), file=sys.stderr)
    else:
        report.warnings += warnings
        report.pipeline, report.module = names, module
        report.pass_timings += manager.timings
        report.stage_timings += ctx.artifacts.get("fusion-timings") or []
    program = ctx.artifacts.get("program")
    if program is None:
        raise UsageError(f"the pipeline '{passes}' builds no program; it needs "
                         "assign-windows and pack-kernel-args")
    program.source_graph = source_graph
    # Provenance: what made this program.  No paths or times, so blobs stay deterministic.
    program.provenance = {"compiler": f"vpuc {__version__}", "format": format,
                          "pipeline": ",".join(names), "arch": target.name,
                          "source": source_name or name}
    return program


def write_blob(program: Program, format: str | None = None,
               path: str | os.PathLike | None = None) -> bytes:
    """The blob of ``program`` (``format``: fb or elf; default: the one ``compile`` was
    given).  With ``path``, also written there atomically (``-``: stdout)."""
    from vpuc.blob import write_blob as serialize
    from vpuc.fileio import write_atomically
    fmt = format or program.provenance.get("format", "fb")
    data = serialize(program, fmt, {"format": fmt, "arch": program.arch.name})
    if path is not None:
        if os.fspath(path) == STDIN:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            write_atomically(path, data)
    return data


def read_blob(source: bytes | str | os.PathLike, name: str | None = None) -> Program:
    """The Program in a blob: its bytes, or a path to read (``-``: stdin)."""
    from vpuc.blob import read_blob as deserialize
    if isinstance(source, (bytes, bytearray, memoryview)):
        return deserialize(bytes(source), name or "<blob>")
    return deserialize(read_bytes(source, "the blob"), name or display_name(source))


def is_blob(data: bytes) -> bool:
    """Whether ``data`` starts like a blob (ELF, or a FlatBuffer with vpuc's identifier)."""
    from vpuc.blob.reader import ELF_MAGIC, FB_IDENTIFIER
    return data[:4] == ELF_MAGIC or (len(data) >= 8 and data[4:8] == FB_IDENTIFIER)


def not_a_blob(data: bytes, name: str) -> VpucError:
    """The error for a file that is neither a blob nor .vir, suggesting ``vpuc compile``."""
    from vpuc.blob.reader import FB_IDENTIFIER
    what = "empty" if not data else f"its first bytes are {bytes(data[:8]).hex()}"
    blob = Path(name).with_suffix(".blob").as_posix() if name != "<stdin>" else "net.blob"
    return VpucError([Diagnostic(
        Severity.ERROR, BinLoc(name, "file header", 0),
        f"not a vpuc blob: expected an ELF file or a FlatBuffer with file identifier "
        f"{FB_IDENTIFIER.decode()} ({what})",
        ((None, f"if {name} is VIR text, name it .vir or compile it first: "
                f"vpuc compile {name} -o {blob}"),))])


def load(path: str | os.PathLike, arch: Arch | str | None = None, *,
         passes: str | None = None, report: CompileReport | None = None,
         input_shapes: dict[str, tuple[int, ...]] | None = None, precision: str = "f16",
         timing=None, schedule: str = "default", cmx_budget: int | None = None) -> Program:
    """What ``vpuc run`` and ``vpuc inspect`` take: a .vir or .onnx file (compiled in memory
    with ``compile``, its cost model reading ``timing``) or a blob; ``-`` reads stdin and
    tells them apart by the first bytes."""
    path = os.fspath(path)
    if path.endswith((".vir", ".onnx")):
        return compile(path, arch, passes=passes, report=report, input_shapes=input_shapes,
                       precision=precision, timing=timing, schedule=schedule,
                       cmx_budget=cmx_budget)
    if passes and path != STDIN:
        raise UsageError("-p/--passes applies to .vir files only; a blob is already compiled")
    if cmx_budget is not None and path != STDIN:
        raise _budget_of_a_blob()
    data = read_bytes(path)
    shown = display_name(path)
    if path == STDIN and not is_blob(data):
        return compile_text(decode_text(data, shown), shown, arch, passes=passes,
                            report=report, timing=timing, schedule=schedule,
                            cmx_budget=cmx_budget)
    if not is_blob(data):
        raise not_a_blob(data, shown)
    if passes:
        raise UsageError("-p/--passes applies to .vir files only; a blob is already compiled")
    if cmx_budget is not None:
        raise _budget_of_a_blob()
    return read_blob(data, shown)


def _budget_of_a_blob() -> UsageError:
    return UsageError("--cmx-budget applies to .vir and .onnx files only; a blob is already "
                      "compiled")


def recorded_graphs(program: Program, source: str = "<program>") -> dict:
    """The subgraph body every generated kernel of ``program`` records, parsed, by kernel
    name (``vpuc.fusion.generator.kernel_graph.load_graphs``)."""
    from vpuc.fusion.generator.kernel_graph import load_graphs
    return load_graphs(program, source)


@dataclass
class Simulation:
    """What ``simulate`` returns: the simulator's result and the checks asked for."""

    result: object                       # runtime_sim.simulator.SimResult
    kernel_check: object = None          # runtime_sim.kernel_check.KernelCheck (reference=True)
    reference: dict[str, np.ndarray] | None = None   # numpy's outputs (reference=True)
    # each layer against the graph reference (reference=True, a program compiled here)
    layer_check: object = None           # runtime_sim.layer_check.LayerCheck

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        return self.result.outputs

    @property
    def inputs(self) -> dict[str, np.ndarray]:
        return self.result.inputs

    @property
    def cycles(self) -> float:
        return self.result.cycles

    @property
    def races(self) -> list[Diagnostic]:
        return self.result.races


def simulate(program: Program, inputs: dict[str, np.ndarray] | None = None, *,
             arch=None, seed: int = 0, timing_only: bool = False,
             races: bool = True, max_cycles: float | None = None, reference: bool = False,
             rtol: float | None = None, atol: float | None = None,
             kernel_profile: bool = False, progress=None, source: str = "<program>",
             graphs: dict | None = None) -> Simulation:
    """Run ``program`` on the cycle-approximate simulator.  ``reference=True`` also checks
    every generated kernel's tasks against the graph it records and computes the numpy
    reference of every output (``Simulation.reference``).  See docs/python-api.md."""
    from runtime_sim.simarch import SimArch, sim_arch_for
    from runtime_sim.simulator import simulate as run
    if timing_only and reference:
        raise UsageError("timing_only computes no outputs, so there is nothing to check "
                         "against the reference")
    target = arch if isinstance(arch, SimArch) else sim_arch_for(program.arch, arch)
    if inputs and program.source_names:     # an ONNX model's own names, as `vpuc run` takes
        inputs = {program.source_names.get(name, name): value for name, value in inputs.items()}
    check = None
    if reference:     # before the run: a recorded graph that does not parse stops it here
        graphs = recorded_graphs(program, source) if graphs is None else graphs
        if graphs:
            from runtime_sim.kernel_check import KernelCheck
            from vpuc.fusion.generator.kernel_graph import kernel_tolerance
            tolerances = {name: kernel_tolerance(graph) for name, graph in graphs.items()}
            check = KernelCheck(program, graphs, tolerances, rtol, atol)
    result = run(program, target, inputs, seed=seed, timing_only=timing_only, races=races,
                 max_cycles=max_cycles, progress=progress, kernel_observer=check,
                 kernel_profile=kernel_profile)
    if not timing_only:          # the outputs of size 0 no task writes (Program.empty_outputs)
        from runtime_sim.memory import numpy_dtype
        result.outputs.update((name, np.zeros(t.dims, numpy_dtype(t.elem)))
                              for name, t in program.empty_outputs.items())
    expected = layers = None
    if reference:
        from runtime_sim.reference import Reference
        expected = Reference(program, graphs=graphs).run(result.inputs)
        if program.source_graph is not None:
            from runtime_sim.layer_check import check_layers
            layers = check_layers(program, result.network, program.source_graph)
    return Simulation(result, check, expected, layers)
