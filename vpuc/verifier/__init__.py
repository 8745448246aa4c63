"""The verifier: every rule over a module, all errors collected.

``verify_module`` returns the diagnostics (errors and warnings) instead of
stopping at the first one; callers raise with ``bag.raise_if_errors()``.

``schedule_rules=False`` leaves out the rules over the whole schedule (barrier
cycles, physical barrier reuse, buffer overlaps, static races): what reading a
blob runs.  The runtime checks each of them again as the program runs (a
deadlock, a physical barrier not yet programmed, a race between the accesses it
makes), so they guard results, not the simulator; the rules over each record
(declarations, sizes, views, tasks, DPU windows, kernel wiring, barrier counts),
on which the engines rely, always run.
"""

from __future__ import annotations

from vpuc.analysis.schedule import Schedule
from vpuc.arch import Arch, load_arch
from vpuc.diagnostics import DiagnosticBag, VpucError
from vpuc.ir.module import Module
from vpuc.ir.symbols import SymbolTable
from vpuc.perf import gc_paused
from vpuc.verifier.barriers import check_barrier_use, check_deadlock, check_physical_reuse
from vpuc.verifier.dpu_channels import check_dpu_channels
from vpuc.verifier.declarations import (check_barriers, check_buffers, check_kernels,
                                        check_module_header, check_runtime, check_views)
from vpuc.verifier.graph import check_graphs
from vpuc.verifier.graph_blocks import check_graph_blocks
from vpuc.verifier.limits import check_limits
from vpuc.verifier.memory import check_overlaps, check_races
from vpuc.verifier.tasks import check_tasks
from vpuc.verifier.wiring import check_wiring


def module_arch(module: Module, bag: DiagnosticBag) -> Arch | None:
    try:
        return load_arch(module.arch)
    except VpucError as exc:
        bag.error(module.loc, exc.diagnostics[0].message)
        return None


def verify_module(module: Module, arch: Arch | None = None, *, schedule_rules: bool = True,
                  symbols: SymbolTable | None = None) -> DiagnosticBag:
    """``symbols``: a fresh table of ``module`` to resolve with (and report into), so the
    caller can reuse its regions."""
    with gc_paused():
        return _verify(module, arch, schedule_rules, symbols)


def _verify(module: Module, arch: Arch | None, schedule_rules: bool = True,
            symbols: SymbolTable | None = None) -> DiagnosticBag:
    bag = symbols.bag if symbols is not None else DiagnosticBag()
    arch = arch or module_arch(module, bag)
    if arch is None:
        return bag
    symbols = symbols or SymbolTable(module, bag)
    check_module_header(module, arch, bag)
    check_kernels(module, bag)
    check_runtime(module, arch, symbols, bag)
    check_buffers(module, arch, bag)
    check_limits(module, arch, bag)
    check_views(module, symbols)
    check_barriers(module, arch, bag)
    check_tasks(module, arch, symbols, bag)
    if not bag.has_errors:
        check_dpu_channels(module, symbols, bag)
    check_wiring(module, symbols, bag)
    check_graphs(module, bag)
    if module.graphs:
        check_graph_blocks(module, symbols, bag)
    # The per-record rules need barrier counts only; the units come with the schedule rules.
    schedule = Schedule(module, arch) if schedule_rules else None
    check_barrier_use(module, arch, schedule, symbols, bag)
    if schedule is not None and check_deadlock(schedule, bag):
        check_physical_reuse(module, schedule, bag)
        check_overlaps(module, schedule, symbols, bag)
        if not bag.has_errors:  # races are judged on an otherwise valid module
            check_races(schedule, symbols, bag)
    return bag
