"""``lower_subgraph``: a data-flow-optimized body to a fully prepared Linear IR.

Builds the LIR (``builder.py``) and runs the control-flow passes then the
generator's preparation passes, each timed (``lir.timings``), validated when
``config.verify`` is set, and followed by ``print_after(name, lir)`` if given:
that hook is how ``--print-lir`` / ``--print-after-all`` print; passes never do.
"""

from __future__ import annotations

import time
from typing import Callable

from vpuc.diagnostics import UsageError
from vpuc.fusion.controlflow import CONTROLFLOW_PASSES, CONTROLFLOW_PIPELINE
from vpuc.fusion.controlflow.base import LirPass
from vpuc.fusion.lir.builder import build_lir
from vpuc.fusion.lir.linear_ir import LinearIR, LoweringConfig
from vpuc.fusion.lir.validate import validate
from vpuc.fusion.prepare import PREPARE_PASSES, PREPARE_PIPELINE
from vpuc.fusion.targets import TargetMachine
from vpuc.ir.graph import Graph

LIR_PASSES: dict[str, type[LirPass]] = {**CONTROLFLOW_PASSES, **PREPARE_PASSES}
LIR_PIPELINE: list[str] = CONTROLFLOW_PIPELINE + PREPARE_PIPELINE

PrintHook = Callable[[str, LinearIR], None]


def lir_pass_names(names: list[str] | None = None, until: str | None = None) -> list[str]:
    """The passes to run: ``names`` as given (checked), or the whole pipeline up to and
    including ``until``."""
    pipeline = LIR_PIPELINE if names is None else names
    for name in pipeline + ([until] if until else []):
        if name not in LIR_PASSES:
            raise UsageError(f"unknown LIR pass '{name}'; expected one of: "
                             + ", ".join(LIR_PIPELINE))
    if until is not None:
        if until not in pipeline:
            raise UsageError(f"pass '{until}' is not among the passes being run: "
                             + ", ".join(pipeline))
        pipeline = pipeline[:pipeline.index(until) + 1]
    return list(pipeline)


def run_lir_passes(lir: LinearIR, names: list[str], print_after: PrintHook | None = None,
                   print_before: PrintHook | None = None) -> LinearIR:
    for name in names:
        if print_before is not None:
            print_before(name, lir)
        start = time.perf_counter()
        LIR_PASSES[name]().run(lir)
        lir.timings.append((name, time.perf_counter() - start))
        if lir.config.verify:
            validate(lir, name)
        if print_after is not None:
            print_after(name, lir)
    return lir


def lower_subgraph(body: Graph, target: TargetMachine, config: LoweringConfig | None = None,
                   passes: list[str] | None = None, print_after: PrintHook | None = None,
                   print_before: PrintHook | None = None) -> LinearIR:
    """Lower one subgraph body (after the data-flow optimizer) to the generator's LIR.

    ``passes`` defaults to the whole pipeline (``LIR_PIPELINE``)."""
    config = config or LoweringConfig(target)
    start = time.perf_counter()
    lir = build_lir(body, config)
    lir.timings.append(("build", time.perf_counter() - start))
    if config.verify:
        validate(lir, "build")
    return run_lir_passes(lir, lir_pass_names(passes), print_after, print_before)
