"""The ACT SHAVE engine: runs a kernel invocation's machine code.

As the Software Layers HLD's runtime does, WIN_D maps the kernel's code, WIN_E the
invocation's image (``.data`` copy, params, dims/strides) with the SHAVE's
stack above it, and WIN_F the tile's CMX, used in place; the kernel is called
with ``(argsAddr, argsSize)``.  Cycles are the interpreter's count.

With ``timing_only`` the numerics are not wanted, but a kernel's cycles depend
on its arguments (loop counts), so each distinct invocation image is run once
on the tile's CMX as it is and its cycle count reused.

A ``profiler`` (``runtime_sim.kernel_profile.KernelProfiler``) sees every
invocation, with or without numerics: ``before(invocation, memory)`` before the
kernel runs, ``charge(state, cycles, unit_name)`` with the cycles it took.
"""

from __future__ import annotations

import time
from typing import Callable

from runtime_sim.isa.invoke import DEFAULT_STACK_BYTES, invoke_kernel
from runtime_sim.memory import Memory
from vpuc.diagnostics import VpucError
from vpuc.program import InvocationImage, Program
from vpuc.shave import KernelObject


# Parsing and checking a kernel's ELF decodes all its code (a few ms); a KernelObject is
# never changed by running it, so every simulation of the same ELF shares one.
_OBJECTS: dict[tuple[bytes, str], KernelObject] = {}
MAX_CACHED_OBJECTS = 64


def kernel_object(elf: bytes, name: str) -> KernelObject:
    obj = _OBJECTS.get((elf, name))
    if obj is None:
        if len(_OBJECTS) >= MAX_CACHED_OBJECTS:
            _OBJECTS.clear()
        obj = _OBJECTS[(elf, name)] = KernelObject.from_elf(elf, name)
    return obj


class ShaveEngine:
    def __init__(self, program: Program, memory: Memory, timing_only: bool = False) -> None:
        self.program = program
        self.memory = memory
        self.timing_only = timing_only
        self._objects: dict[str, tuple[KernelObject, str | None]] = {}
        self._memo: dict[tuple, int] = {}
        self.seconds = 0.0          # wall time spent running kernels
        self.runs = 0
        runtime = program.module.runtime
        self.stacks = runtime.stacks if runtime is not None else ()
        # Sees every invocation with numerics: ``before(invocation, memory)`` gives a state
        # (None: not interested), ``after(invocation, memory, state, task_name)`` runs after
        # the kernel (runtime_sim.kernel_check.KernelCheck).
        self.observer = None
        self.profiler = None

    def _object(self, name: str) -> tuple[KernelObject, str | None]:
        if name not in self._objects:
            image = self.program.kernels.get(name)
            if image is None:
                raise VpucError(f"kernel @{name} has no image in the program; it cannot run")
            obj = kernel_object(image.elf, f"@{name}")
            entry = next((s.name for s in obj.entry_points if s.value == image.entry), None)
            self._objects[name] = (obj, entry)
        return self._objects[name]

    def run(self, unit_name: str | Callable[[], str], invocation: InvocationImage) -> int:
        """Run one invocation on its tile; returns the SHAVE cycles it took.  ``unit_name``
        (or a function giving it, called only for an error) names the task in errors."""
        profiler = self.profiler
        if profiler is None:
            return self._run(unit_name, invocation)
        state = profiler.before(invocation, self.memory)
        cycles = self._run(unit_name, invocation)
        profiler.charge(state, cycles, unit_name)
        return cycles

    def _run(self, unit_name: str | Callable[[], str], invocation: InvocationImage) -> int:
        key = (invocation.kernel, invocation.tile, invocation.window_e)
        if self.timing_only:
            cycles = self._memo.get(key)
            if cycles is not None:
                return cycles
        obj, entry = self._object(invocation.kernel)
        tile = invocation.tile
        stack = self.stacks[tile] if tile < len(self.stacks) else DEFAULT_STACK_BYTES
        observer = self.observer if not self.timing_only else None
        state = observer.before(invocation, self.memory) if observer is not None else None
        clock = time.perf_counter()
        try:
            result = invoke_kernel(obj, self.memory.cmx(tile), invocation.window_e,
                                   invocation.args_offset, invocation.args_size, entry=entry,
                                   arch=self.program.arch, stack_bytes=stack)
        except VpucError as exc:
            diag = exc.diagnostics[0]
            origin = self.program.kernels[invocation.kernel].origin
            if callable(unit_name):
                unit_name = unit_name()
            raise VpucError(f"{unit_name}: kernel @{invocation.kernel} ({origin}) on tile "
                            f"{tile}: {diag.message}", diag.loc) from None
        self.seconds += time.perf_counter() - clock
        self.runs += 1
        if state is not None:
            observer.after(invocation, self.memory, state,
                           unit_name() if callable(unit_name) else unit_name)
        self._memo[key] = result.cycles
        return result.cycles
