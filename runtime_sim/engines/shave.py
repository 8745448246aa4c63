"""The ACT SHAVE engine: runs a kernel invocation's machine code.

As the Software Layers HLD's runtime does, WIN_D maps the kernel's code, WIN_E the
invocation's image (``.data`` copy, params, dims/strides) with the SHAVE's
stack above it, and WIN_F the tile's CMX, used in place; the kernel is called
with ``(argsAddr, argsSize)``.  Cycles are the interpreter's count, plus, for a library
kernel reading an input left in DDR (mapped at its address in the DDR aperture), the
cost model's charge for those reads (``ddr_cycles``, ``vpuc/cost/shave_ddr.py``).

With ``timing_only`` the numerics are not wanted, but a kernel's cycles depend
on its arguments (loop counts), so each distinct invocation is run once and its
cycle count reused: without the vector arithmetic when the kernel's cycles do
not depend on data (``runtime_sim.isa.cycles_only``), else in full on the tile's
CMX as it is. Cycles-only results are also remembered for the process (by the
kernel's ELF, the masked image, the ranges the sanitizer allows, the stack and
the windows), so repeated timing-only runs of a program (a sweep) run none
again. Invocations are the same when their WIN_E images are equal but for the
memrefs' ``dataAddr`` fields: the cycle model has no address-dependent cost
(``runtime_sim/isa/cycles.py``: no banks, no alignment penalty) and the kernels
never branch on an address, so the blocks of a layer, which differ only in where
their slot lies in CMX, run the interpreter once (a model's 10k tasks: a few
dozen kernel runs).

A ``profiler`` (``runtime_sim.kernel_profile.KernelProfiler``) sees every
invocation, with or without numerics: ``before(invocation, memory)`` before the
kernel runs, ``charge(state, cycles, unit_name)`` with the cycles it took.

Every invocation runs under the memory sanitizer (``runtime_sim.isa.sanitizer``):
it may load only what its task binds (and its own WIN_D/WIN_E), and store only
into its outputs, its ``.data`` and its stack.  A kernel ends with its status in
``s0`` (docs/kernels.md, "Status"); anything but 0 stops the run
(``KernelStatusError``).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import cached_property
from operator import attrgetter
from typing import Callable

import numpy as np

from runtime_sim.isa.cycles_only import invoke_cycles_only, results as cycles_only_results
from runtime_sim.isa.interpreter import CycleBudgetExceeded
from runtime_sim.engines.shave_classes import InvocationClasses
from runtime_sim.engines.shave_ddr import task_ddr_cycles, task_ddr_reads
from runtime_sim.engines.shave_together import RunTogether
from runtime_sim.isa.invoke import DEFAULT_STACK_BYTES, invoke_kernel
from runtime_sim.isa.sanitizer import CmxBindings
from runtime_sim.memory import Memory, footprint
from runtime_sim.race_access import region_span
from vpuc.abi.ddr_aperture import ddr_aperture
from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.provenance import LayerIndex
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import Executor, SwKernelTask
from vpuc.program import InvocationImage, Program
from vpuc.shave import KernelObject

# What a binding contributes to a task's bindings key.
_BUFFER_ALIAS = attrgetter("buffer", "alias")

# The status a kernel leaves in s0 (docs/kernels.md keeps the same table): the library
# kernels' failure paths (kernels/include/driver.inc) and what each means.
KERNEL_STATUS = {
    1: "E_TYPE: element types the kernel does not handle; nothing written",
    2: "E_SHAPE: shapes the kernel does not handle (a rank above 15, dims that neither match "
       "nor are 1, a reduction's output not 1 along its axis); nothing written",
    3: "E_ORDER: a dimsOrder naming a dim the tensor does not have; nothing written",
    4: "E_INDEX: an index outside [-extent, extent) of the gathered axis; nothing written",
}
E_INDEX = 4


class KernelStatusError(VpucError):
    """A kernel ended with a non-zero status in s0."""


def status_meaning(status: int) -> str:
    return KERNEL_STATUS.get(status, "not a status the library kernels use")


# Parsing and checking a kernel's ELF decodes all its code (a few ms); a KernelObject is
# never changed by running it, so every simulation of the same ELF shares one.
_OBJECTS: dict[tuple[bytes, str], KernelObject] = {}
MAX_CACHED_OBJECTS = 64


def kernel_object(elf: bytes, name: str, built: tuple | None = None) -> KernelObject:
    """The object ``elf`` holds, named ``name`` in messages.  ``built``: a program's
    ``KernelImage.built``, the object this process wrote ``elf`` from, which reading it
    back gives again: taken as it is (renamed) while ``elf`` is still its bytes."""
    obj = _OBJECTS.get((elf, name))
    if obj is None:
        if len(_OBJECTS) >= MAX_CACHED_OBJECTS:
            _OBJECTS.clear()
        if built is not None and built[0] is elf:
            obj = replace(built[1], name=name)
        else:
            obj = KernelObject.from_elf(elf, name)
        _OBJECTS[(elf, name)] = obj
    return obj


def _tile_buffers(memory: Memory, program: Program, cache: dict,
                  tile: int) -> list[tuple[str, tuple[int, int, str]]]:
    """(name, (start, end, label)) of every CMX buffer of ``tile``, computed once per tile
    in ``cache`` (not once per task: a model has thousands of both)."""
    spans = cache.get(tile)
    if spans is None:
        placement = memory.placement
        spans = cache[tile] = [
            (b.name, (placement[b.name][1], placement[b.name][1] + footprint(b),
                      f"%{b.name} (not bound to this task)"))
            for b in program.module.buffers
            if b.kind is BufferKind.CMX and b.tile == tile]
    return spans


class ShaveEngine(RunTogether, InvocationClasses):
    def __init__(self, program: Program, memory: Memory, timing_only: bool = False) -> None:
        self.program = program
        self.memory = memory
        self.timing_only = timing_only
        self._objects: dict[str, tuple[KernelObject, str | None]] = {}
        self._memo: dict[tuple, int] = {}                   # timing-only: cycles by _cycles_key
        self.seconds = 0.0          # wall time spent running kernels
        self.runs = 0
        self.cycles_only_runs = 0   # timing-only: runs without the vector arithmetic
        self._scratches: dict[int, np.ndarray] = {}
        runtime = program.module.runtime
        self.stacks = runtime.stacks if runtime is not None else ()
        # Sees every invocation with numerics: ``before(invocation, memory)`` gives a state
        # (None: not interested), ``after(invocation, memory, state, task_name)`` runs after
        # the kernel (runtime_sim.kernel_check.KernelCheck).
        self.observer = None
        self.profiler = None
        self.region = None          # name -> Region (the plan's); a SymbolTable's by default
        self._bindings: dict[tuple, CmxBindings] = {}      # by what the task binds
        self._by_task: dict[int, CmxBindings] = {}          # by task (they outlive the engine)
        self._tile_spans: dict[int, list] = {}
        self.ddr_timing: tuple[float, float, float] | None = None
        self._ddr_cycles: dict[int, int] = {}         # ACT task index -> its DDR reads' cycles

        self._made: dict[int, SwKernelTask] = {}     # timing-only: tasks made one by one
        # Numerics: the cycles of each class of invocations (``_static_key``) one of them
        # took in full, which a deferred one is charged (``deferred_cycles``)
        self._class_cycles: dict[tuple, int] = {}
        self.together = 0           # invocations run with others (``run_together``)
        self._start_classes()

    @cached_property
    def _act_tasks(self) -> list:
        return [t for tl in self.program.module.task_lists
                if tl.executor is Executor.ACT_SHAVE for t in tl.tasks]

    def _act_task(self, index: int) -> SwKernelTask:
        # A timing-only run of a program read from a blob makes only the tasks of the
        # invocations it runs (one per class), not the module's task lists.
        tables = self.program.tables
        if not self.timing_only or tables is None or "_act_tasks" in self.__dict__ or \
                not tables.current(self.program.module):
            return self._act_tasks[index]
        task = self._made.get(index)
        if task is None:
            at = next(i for i, t in enumerate(tables.lists) if t.executor is Executor.ACT_SHAVE)
            task = self._made[index] = tables.task(at, index)
        return task

    def bindings(self, task: SwKernelTask) -> CmxBindings:
        """What ``task`` binds in its tile's CMX, as the sanitizer checks it."""
        found = self._by_task.get(id(task))
        if found is None:
            key = (task.tile, tuple(map(_BUFFER_ALIAS, task.inputs)),
                   tuple(map(_BUFFER_ALIAS, task.outputs)))
            found = self._bindings.get(key)
            if found is None:
                found = self._bindings[key] = self._resolve_bindings(task)
            self._by_task[id(task)] = found
        return found

    def _resolve_bindings(self, task: SwKernelTask) -> CmxBindings:
        if self.region is None:
            self.region = SymbolTable(self.program.module).region
        memory, cmx = self.memory, ("cmx", task.tile)
        reads, writes, bound, names = [], [], [], set()
        ddr_reads, ddr_bound, ddr_maps = [], [], []
        for binding, written in ([(b, False) for b in task.inputs]
                                 + [(b, True) for b in task.outputs]):
            region = self.region(binding.buffer)
            if region is None:
                continue
            key, lo, hi, rows = region_span(memory, region)
            if key != cmx:
                address = self.ddr_addresses.get(region.root.name)
                if address is None or written:
                    continue            # in no window and no aperture: out of the kernel's reach
                # an input left in DDR: its root's bytes at its aperture address
                root_key, root_at = memory.placement[region.root.name]
                size = footprint(region.root)
                ddr_maps.append((address, memory.arrays[root_key][root_at:root_at + size]))
                shift = address - root_at
                ranges = [(lo, hi)] if rows is None else [(int(a), int(b)) for a, b in rows]
                ddr_reads += [(a + shift, b + shift) for a, b in ranges]
                ddr_bound.append((lo + shift, hi + shift, f"%{binding.buffer} (bound under "
                                  f"inputs() as %{binding.alias}, in DDR: read-only)"))
                continue
            ranges = [(lo, hi)] if rows is None else [(int(a), int(b)) for a, b in rows]
            reads += ranges
            role = (f"bound under outputs() as %{binding.alias}" if written else
                    f"bound under inputs() as %{binding.alias}: read-only for this task")
            if written:
                writes += ranges
            bound.append((lo, hi, f"%{binding.buffer} ({role})"))
            names.add(region.root.name)
        tile = task.tile

        # not through self: bindings outlive the run, and an engine <-> bindings cycle would
        # keep the engine (its memory) for the cyclic collector
        spans, program = self._tile_spans, self.program

        def others() -> tuple:          # only a fault's message lists them: not made per task
            return tuple(span for name, span in _tile_buffers(memory, program, spans, tile)
                         if name not in names)
        return CmxBindings(tuple(reads), tuple(writes), tuple(bound), others,
                           tuple(ddr_reads), tuple(ddr_bound), tuple(ddr_maps))

    @cached_property
    def ddr_addresses(self) -> dict[str, int]:
        """Each DDR root a sw task binds -> its address in the SHAVE's DDR aperture (the
        layout pack-kernel-args wrote into the MemRefData, ``vpuc.abi.ddr_aperture``)."""
        return ddr_aperture(self.program.module, self.program.arch.ddr_aperture, self.region)

    def _object(self, name: str) -> tuple[KernelObject, str | None]:
        if name not in self._objects:
            image = self.program.kernels.get(name)
            if image is None:
                raise VpucError(f"kernel @{name} has no image in the program; it cannot run")
            obj = kernel_object(image.elf, f"@{name}", image.built)
            entry = next((s.name for s in obj.entry_points if s.value == image.entry), None)
            self._objects[name] = (obj, entry)
        return self._objects[name]

    def run(self, unit_name: str | Callable[[], str], invocation: InvocationImage,
            max_cycles: float | None = None) -> int:
        """Run one invocation on its tile; returns the SHAVE cycles it took.  ``unit_name``
        (or a function giving it, called only for an error) names the task in errors;
        past ``max_cycles`` SHAVE cycles the kernel is stopped (an error)."""
        profiler = self.profiler
        if profiler is None:
            return self._run(unit_name, invocation, max_cycles) + self.ddr_cycles(invocation)
        state = profiler.before(invocation, self.memory)
        cycles = self._run(unit_name, invocation, max_cycles) + self.ddr_cycles(invocation)
        profiler.charge(state, cycles, unit_name)
        return cycles

    def ddr_cycles(self, invocation: InvocationImage) -> int:
        """SHAVE cycles of the invocation's reads of inputs left in DDR, which the
        interpreter counts as L1 hits (``vpuc/cost/shave_ddr.py``; 0 without
        ``ddr_timing``: (DDR read latency, DDR bytes per cycle, NCE cycles per SHAVE
        cycle), which the simulator sets from its timing model)."""
        if self.ddr_timing is None:
            return 0
        known = self._ddr_cycles.get(invocation.task_index)
        if known is None and not self.reads_ddr(invocation):
            known = self._ddr_cycles[invocation.task_index] = 0
        if known is None:
            task = self._act_task(invocation.task_index)
            latency, bandwidth, shave_cycle = self.ddr_timing
            kernel = next((k for k in self.program.module.kernels if k.name == task.kernel), None)
            reads = task_ddr_reads(task, kernel, self.region or SymbolTable(self.program.module).region)
            known = self._ddr_cycles[invocation.task_index] = \
                math.ceil(task_ddr_cycles(reads, latency, bandwidth) / shave_cycle)
        return known

    def _run(self, unit_name: str | Callable[[], str], invocation: InvocationImage,
             max_cycles: float | None) -> int:
        task = self._act_task(invocation.task_index)
        key = None
        if self.timing_only:          # a remembered invocation needs no bindings resolved
            key = self._cycles_key(invocation, task)
            cycles = self._memo.get(key)
            if cycles is not None:
                return cycles
        bindings = self.bindings(task)
        obj, entry = self._object(invocation.kernel)
        tile = invocation.tile
        stack = self.stacks[tile] if tile < len(self.stacks) else DEFAULT_STACK_BYTES
        observer = self.observer if not self.timing_only else None
        state = observer.before(invocation, self.memory) if observer is not None else None
        clock = time.perf_counter()
        cmx = self.memory.cmx(tile)
        result = None
        if self.timing_only:          # the cycles without the vector arithmetic, if it can
            known = None
            if len(key) == 2 and max_cycles is None:      # not a dynamic tensor's invocation
                known = self._cycles_only_key(invocation, key)
                result = cycles_only_results.get(known)
            if result is None:
                result = invoke_cycles_only(obj, self._scratch(len(cmx)), invocation.window_e,
                                            invocation.args_offset, invocation.args_size,
                                            entry=entry, arch=self.program.arch,
                                            stack_bytes=stack, max_cycles=max_cycles,
                                            bindings=bindings)
                if result is not None and known is not None and not result.scalar_regs[0]:
                    cycles_only_results.put(known, result)
            self.cycles_only_runs += result is not None
        try:
            if result is None:
                result = invoke_kernel(obj, cmx, invocation.window_e, invocation.args_offset,
                                       invocation.args_size, entry=entry,
                                       arch=self.program.arch, stack_bytes=stack,
                                       max_cycles=max_cycles, bindings=bindings)
        except VpucError as exc:
            raise self._failure(unit_name, invocation, exc) from None
        self._check_status(unit_name, invocation, result)
        self.seconds += time.perf_counter() - clock
        self.runs += 1
        if state is not None:
            observer.after(invocation, self.memory, state,
                           unit_name() if callable(unit_name) else unit_name)
        if key is not None:
            self._memo[key] = result.cycles
        elif not self.timing_only:
            static = self._static_key(invocation)
            if static is not None:
                self._class_cycles.setdefault(static, result.cycles)
        return result.cycles

    def _failure(self, unit_name, invocation: InvocationImage, exc: VpucError) -> VpucError:
        """A kernel's error, named by its task and kernel."""
        if isinstance(exc, CycleBudgetExceeded):
            return VpucError(f"{self._who(unit_name, invocation)}: still running after "
                             f"{exc.cycles:,} SHAVE cycles, past the {exc.budget:,.0f} that "
                             f"--max-cycles left it; stopped at {exc.where}",
                             exc.diagnostics[0].loc)
        diag = exc.diagnostics[0]
        return VpucError(f"{self._who(unit_name, invocation)}: {diag.message}", diag.loc)

    def _check_status(self, unit_name, invocation: InvocationImage, result) -> None:
        status = result.scalar_regs[0]
        if status:
            task = self._act_task(invocation.task_index)
            args_addr = self.program.arch.window_base("WIN_E") + invocation.args_offset
            meaning = ("s0 still holds argsAddr: the kernel never set its status, 0 on success"
                       if status == args_addr else status_meaning(status))
            if status == E_INDEX:      # the data's fault, not the program's: no location
                raise KernelStatusError(self._bad_index(unit_name, invocation, result))
            raise KernelStatusError(f"{self._who(unit_name, invocation)}: the kernel failed with "
                                    f"status {status} ({meaning})", task.loc)

    def _bad_index(self, unit_name, invocation: InvocationImage, result) -> str:
        """gather's E_INDEX: the index at fault (the kernel leaves it in s1) and the ONNX
        node the task was lowered from (the layer table), for the user's input to blame."""
        bad = result.scalar_regs[1]
        bad = bad - (1 << 32) if bad >> 31 else bad
        name = unit_name() if callable(unit_name) else unit_name
        layer = LayerIndex(self.program.module.layers).layer(name)
        node = (f"ONNX node {', '.join(str(n) for n in layer.nodes)}" if layer and layer.nodes
                else f"task {name}")
        return (f"{node}: index {bad} is out of range for the gathered axis (E_INDEX: an index "
                f"outside [-size, size), which ONNX leaves undefined; kernel @{invocation.kernel}"
                f" on tile {invocation.tile}, task {name}); check the input's indices")

    # --- deferred invocations (numerics) ----------------------------------------------------

    def deferred_cycles(self, invocation: InvocationImage) -> int | None:
        """The cycles an invocation whose numerics may run later is charged now: those an
        invocation of its class (the same kernel and WIN_E image but for the memrefs'
        ``dataAddr``, see the module docstring) took in full; None when it must run now
        (no such run yet, a dynamic memref, an observer or a profiler watching).  The
        first of a class is charged the cycles a timing-only run of the process found for
        the same task, when there is one (``cycles_only_results``: no run is made here)."""
        if self.timing_only or self.observer is not None or self.profiler is not None:
            return None
        key = self._static_key(invocation)
        if key is None:
            return None
        cycles = self._class_cycles.get(key)
        if cycles is None:
            known = cycles_only_results.get(self._cycles_only_key(invocation, key))
            if known is not None and not known.scalar_regs[0]:
                cycles = self._class_cycles[key] = known.cycles
        return cycles

    def _cycles_only_key(self, invocation: InvocationImage, key: tuple) -> tuple:
        """What a cycles-only result is remembered by for the process (``_run``)."""
        task = self._act_task(invocation.task_index)
        bindings = self.bindings(task)
        _, entry = self._object(invocation.kernel)
        tile = invocation.tile
        stack = self.stacks[tile] if tile < len(self.stacks) else DEFAULT_STACK_BYTES
        return (self.program.kernels[invocation.kernel].elf, entry, key[1], bindings.reads,
                bindings.writes, stack, len(self.memory.cmx(tile)),
                tuple(sorted(self.program.arch.window_bases.items())))

    def _scratch(self, size: int) -> np.ndarray:
        """WIN_F of cycles-only runs: as large as a tile's CMX, contents irrelevant."""
        scratch = self._scratches.get(size)
        if scratch is None:
            scratch = self._scratches[size] = np.zeros(size, np.uint8)
        return scratch

    def _who(self, unit_name: str | Callable[[], str], invocation: InvocationImage) -> str:
        origin = self.program.kernels[invocation.kernel].origin
        name = unit_name() if callable(unit_name) else unit_name
        return f"{name}: kernel @{invocation.kernel} ({origin}) on tile {invocation.tile}"
