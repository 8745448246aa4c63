"""What each clean-up saves: instructions and interpreter cycles, pass by pass.

``measure(body, inputs, shapes, passes)`` generates a kernel with the given
clean-up passes and runs it (fast path; cycles are the exact interpreter's):
static instructions (the ``.text``), instructions executed, cycles.
``savings(...)`` reports, for every pass of the pipeline:

- *added*: the pipeline up to and including the pass against the pipeline up
  to the one before it (what the pass removes when it runs);
- *ablated*: the whole pipeline against the whole pipeline without it (what
  would be lost without it, given the others).

``bench/fusion_bench.py --cleanups`` prints the tables for its kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.fusion.generator.cleanup import CLEANUP_PIPELINE, CleanupConfig
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.run import run_kernel
from vpuc.ir.graph import Graph


@dataclass(frozen=True)
class Measure:
    static: int          # instructions in .text
    executed: int        # instructions run
    cycles: int


def measure(body: Graph, inputs: list[np.ndarray], shapes, passes: list[str],
            config: CleanupConfig | None = None) -> Measure:
    kernel = generate(body, "k", cleanups=passes, config=config)
    run = run_kernel(kernel, inputs, shapes)
    if run.status != 0:
        raise AssertionError(f"kernel status {run.status}")
    return Measure(kernel.instructions, run.result.instructions, run.cycles)


def _steps(pipeline: list[str]) -> list[tuple[str, int]]:
    """(label, index) per pass; a pass that runs twice is labelled with its position."""
    seen: dict[str, int] = {}
    out = []
    for i, name in enumerate(pipeline):
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name} ({seen[name]})", i))
    return out


def savings(body: Graph, inputs: list[np.ndarray], shapes,
            pipeline: list[str] | None = None) -> dict:
    pipeline = list(CLEANUP_PIPELINE if pipeline is None else pipeline)
    full = measure(body, inputs, shapes, pipeline)
    none = measure(body, inputs, shapes, [])
    added, ablated = [], []
    previous = none
    for label, i in _steps(pipeline):
        now = measure(body, inputs, shapes, pipeline[:i + 1])
        added.append((label, previous, now))
        previous = now
    for name in dict.fromkeys(pipeline):
        without = measure(body, inputs, shapes, [p for p in pipeline if p != name])
        ablated.append((name, without, full))
    return {"none": none, "full": full, "added": added, "ablated": ablated}


def format_savings(title: str, table: dict) -> str:
    none, full = table["none"], table["full"]
    lines = [f"{title}: no clean-ups {none.static} instructions / {none.executed} run / "
             f"{none.cycles} cycles -> all {full.static} / {full.executed} / {full.cycles} "
             f"({none.cycles / max(full.cycles, 1):.2f}x fewer cycles)",
             f"  {'pass':<22} {'added: -static':>14} {'-run':>9} {'-cycles':>9}   "
             f"{'ablated: +static':>16} {'+run':>9} {'+cycles':>9}"]
    ablated = {name: (without, full) for name, without, full in table["ablated"]}
    for label, before, after in table["added"]:
        name = label.split(" (")[0]
        abl = ablated.pop(name, None) if label == name else None
        ab = (f"{abl[0].static - abl[1].static:>16} {abl[0].executed - abl[1].executed:>9} "
              f"{abl[0].cycles - abl[1].cycles:>9}") if abl else ""
        lines.append(f"  {label:<22} {before.static - after.static:>14} "
                     f"{before.executed - after.executed:>9} {before.cycles - after.cycles:>9}   {ab}")
    return "\n".join(lines) + "\n"
