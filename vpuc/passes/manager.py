"""The pass manager: runs a pipeline, prints IR after passes, times them.

Passes never print.  The manager prints the module after each pass with
``print_after_all``, a timing table with ``time_passes`` (both to the given
stream, stderr at the CLI), and in debug mode re-runs the verifier after every
pass so a pass that breaks an invariant is named at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TextIO

from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Module
from vpuc.perf import gc_paused
from vpuc.passes.base import ModulePass, PassContext
from vpuc.verifier import verify_module
from vpuc.program_printer import print_program
from vpuc.vir.printer import print_module


@dataclass
class PassTiming:
    name: str
    seconds: float


@dataclass
class PassManager:
    passes: list[ModulePass]
    print_after_all: bool = False
    time_passes: bool = False
    verify_each: bool = False
    stream: TextIO | None = None
    timings: list[PassTiming] = field(default_factory=list)

    def run(self, module: Module, ctx: PassContext) -> Module:
        for pass_ in self.passes:
            started = time.perf_counter()
            with gc_paused():
                pass_.run(module, ctx)
            self.timings.append(PassTiming(pass_.name, time.perf_counter() - started))
            if self.verify_each and pass_.name != "verify":
                bag = verify_module(module, ctx.arch)
                if bag.has_errors:
                    note = Diagnostic(Severity.NOTE, None,
                                      f"the module no longer verifies after pass '{pass_.name}'")
                    raise VpucError([note] + bag.errors)
            if self.print_after_all and self.stream is not None:
                self.stream.write(f"// ----- IR after {pass_.name} -----\n")
                self.stream.write(print_module(module))
                program = ctx.artifacts.get("program")
                if program is not None:
                    self.stream.write(print_program(program))
        if self.time_passes and self.stream is not None:
            self.stream.write(self.timing_report())
        return module

    def timing_report(self) -> str:
        total = sum(t.seconds for t in self.timings) or 1e-12
        lines = ["===== pass execution timing =====",
                 f"{'wall (ms)':>10}  {'share':>6}  pass"]
        for timing in self.timings:
            lines.append(f"{timing.seconds * 1e3:10.3f}  {timing.seconds / total:6.1%}  {timing.name}")
        lines.append(f"{total * 1e3:10.3f}  {1:6.1%}  total")
        return "\n".join(lines) + "\n"
