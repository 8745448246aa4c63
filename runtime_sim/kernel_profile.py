"""Per-expression cycle counters of a simulated blob (``vpuc run --kernel-profile``).

A generated kernel's object records which LIR expression every ``.text``
instruction came from (``KernelImage.tags``, the run-length expression tags of
``.note.vpuc.graph``; ``vpuc.shave.kernel_notes``).  ``KernelProfiler`` is the
ACT SHAVE engine's profiling hook (``ShaveEngine.profiler``): it sees every
task, before its kernel runs (``before``) and with the SHAVE cycles the
simulation charged it (``charge``), and attributes those cycles to the
expressions:

- the cycles per instruction come from ``runtime_sim.isa.pc_cycles.run_per_pc``
  (the one per-instruction accounting, also behind the generator's
  ``profile.profile_kernel``), run on the exact interpreter against a **copy**
  of the task's windows: its WIN_E image, a copy of the tile's CMX as it is
  before the kernel runs (the simulation's memory is never touched);
- timing is a function of the instructions run (the model reads registers and
  slots, never values or addresses), and the path through a generated kernel
  depends only on its MemRefData's ``isStatic`` and dims (loop counts, tails,
  the static/dynamic output) -- never on data or data addresses.  So each
  distinct **key** -- the kernel image and, per argument, the MemRefData's
  fields but ``dataAddr`` (and the addresses of its dims and strides) plus the
  dims and strides it points to (in WIN_E, or in CMX for a dynamic tensor), a
  scalar's value -- is profiled once, and its per-expression cycles count once
  per task with that key;
- every task checks it: the profile's total must equal the cycles the
  simulation charged the task (both come from the same model), or the run
  stops with an internal error.  Arguments that do not decode give a key of
  their own (never shared).

Kernels without tags (library, ``asm``/``elf`` kernels, generated kernels of
an older vpuc) count their tasks and cycles only.  The result, ``KernelProfile``
(``SimResult.kernel_profile``), holds per kernel image that ran its tasks and
the SHAVE cycles the simulation charged them and, for a tagged kernel, each
expression's cycles and instructions run summed over those tasks (they add up
to the kernel's cycles exactly); ``text()`` is what ``vpuc run
--kernel-profile`` prints after the summary, ``csv()`` what
``--kernel-profile-csv`` writes.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from runtime_sim.memory import Memory
from vpuc.abi.memref import MemRefData, unpack_dims, unpack_strides
from vpuc.abi.params import decode_params
from vpuc.diagnostics import VpucError
from vpuc.ir.tasks import Executor
from vpuc.program import InvocationImage, Program
from vpuc.shave.kernel_notes import NO_LABEL

MAX_DIMS = 15
MAX_STEPS = 50_000_000           # as the engine's invoke_kernel


# ------------------------------------------------------------------ the result

UNTAGGED = "(no expression tags)"


@dataclass
class ExprCycles:
    label: str                   # "e7 FMA", "prologue", "epilogue", ...
    cycles: int                  # SHAVE cycles, summed over the kernel's tasks
    instructions: int            # instructions run, summed over the kernel's tasks


@dataclass
class KernelCycles:
    kernel: str                  # the kernel image (@name)
    origin: str                  # 'generated', 'library "softmax"', ...
    tasks: int
    cycles: int                  # SHAVE cycles the simulation charged its tasks
    profiled: int = 0            # distinct invocations profiled on the exact interpreter
    expressions: list[ExprCycles] | None = None     # None: the kernel has no tags

    def share(self, cycles: int) -> float:
        return cycles / self.cycles if self.cycles else 0.0


@dataclass
class KernelProfile:
    kernels: list[KernelCycles] = field(default_factory=list)

    def kernel(self, name: str) -> KernelCycles:
        return next(k for k in self.kernels if k.kernel == name)

    def text(self) -> str:
        """The table ``vpuc run --kernel-profile`` prints."""
        lines = ["ACT SHAVE cycles per LIR expression (SHAVE clock, summed over each kernel's "
                 "tasks):"]
        if not self.kernels:
            lines.append("  no ACT SHAVE task ran")
        for k in self.kernels:
            head = (f"@{k.kernel} ({k.origin}): {k.tasks:,} task{'s' if k.tasks != 1 else ''}, "
                    f"{k.cycles:,} cycles")
            if k.expressions is None:
                lines.append(f"{head} {UNTAGGED}")
                continue
            lines.append(f"{head}, {k.profiled:,} distinct invocation"
                         f"{'s' if k.profiled != 1 else ''} profiled")
            width = max([10] + [len(e.label) for e in k.expressions])
            lines.append(f"  {'expression':<{width}} {'cycles':>14} {'share':>7} "
                         f"{'instructions':>14}")
            for e in k.expressions:
                lines.append(f"  {e.label:<{width}} {e.cycles:>14,} {k.share(e.cycles):>7.1%} "
                             f"{e.instructions:>14,}")
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """One row per (kernel, expression); a kernel without tags has one row with an empty
        expression.  Shares as fractions with 6 decimals."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["kernel", "origin", "tasks", "kernel_cycles", "expression", "cycles",
                         "share", "instructions"])
        for k in self.kernels:
            if k.expressions is None:
                writer.writerow([k.kernel, k.origin, k.tasks, k.cycles, "", k.cycles,
                                 "1.000000" if k.cycles else "0.000000", ""])
                continue
            for e in k.expressions:
                writer.writerow([k.kernel, k.origin, k.tasks, k.cycles, e.label, e.cycles,
                                 f"{k.share(e.cycles):.6f}", e.instructions])
        return out.getvalue()


# ------------------------------------------------------------------ the profiler

@dataclass
class _Profiled:
    cycles: int                  # the profile's total
    per_label: list[int]         # cycles per label index (the last: untagged instructions)
    insts: list[int]             # instructions run per label index
    tasks: int = 0


@dataclass
class _Tagged:
    labels: tuple[str, ...]
    slot_of_pc: list[int]        # label index of every instruction (len(labels): untagged)
    profiles: dict = field(default_factory=dict)      # key -> _Profiled


class KernelProfiler:
    """The ACT SHAVE engine's profiling hook; see the module docstring."""

    def __init__(self, program: Program) -> None:
        self.program = program
        module = program.module
        act = next((tl for tl in module.task_lists if tl.executor is Executor.ACT_SHAVE), None)
        self._tasks = act.tasks if act is not None else []
        self._decls = {k.name: k for k in module.kernels}
        self._totals: dict[str, list[int]] = {}        # image -> [tasks, cycles]
        self._tagged: dict[str, _Tagged] = {}
        for name, image in program.kernels.items():
            if image.tags is not None:
                n = len(image.tags.labels)
                self._tagged[name] = _Tagged(image.tags.labels, [
                    n if x == NO_LABEL else x for x in image.tags.per_instruction()])
        runtime = module.runtime
        self._stacks = runtime.stacks if runtime is not None else ()
        arch = program.arch
        self._win_e, self._win_f = arch.window_base("WIN_E"), arch.window_base("WIN_F")

    # ------------------------------------------------------------------ the hook
    def before(self, invocation: InvocationImage, memory: Memory):
        """What ``charge`` needs: the key, and a copy of the tile's CMX if it is new."""
        tagged = self._tagged.get(invocation.kernel)
        if tagged is None:
            return invocation, None, None
        key = self._key(invocation, memory)
        snapshot = None if key in tagged.profiles else memory.cmx(invocation.tile).copy()
        return invocation, key, snapshot

    def charge(self, state, cycles: int, unit_name) -> None:
        """Count a task that took ``cycles`` SHAVE cycles (``unit_name``: its name, or a
        function giving it)."""
        invocation, key, snapshot = state
        totals = self._totals.setdefault(invocation.kernel, [0, 0])
        totals[0] += 1
        totals[1] += cycles
        if key is None:
            return
        tagged = self._tagged[invocation.kernel]
        if snapshot is not None:
            tagged.profiles[key] = self._profile(invocation, snapshot, tagged, unit_name)
        profiled = tagged.profiles[key]
        if profiled.cycles != cycles:
            name = unit_name() if callable(unit_name) else unit_name
            raise VpucError(f"internal: {name}: kernel @{invocation.kernel} took {cycles:,} "
                            f"SHAVE cycles in the simulation, its per-expression profile "
                            f"{profiled.cycles:,}; they must agree (same timing model)")
        profiled.tasks += 1

    # ------------------------------------------------------------------ internals
    def _key(self, invocation: InvocationImage, memory: Memory) -> tuple:
        from vpuc.abi.contract import contract_slots
        try:
            task = self._tasks[invocation.task_index]
            slots = contract_slots(self._decls[task.kernel])
            struct = invocation.window_e[invocation.args_offset:
                                         invocation.args_offset + invocation.args_size]
            parts = [_control(value, invocation, memory.cmx(invocation.tile), self._win_e,
                              self._win_f) if isinstance(value, MemRefData) else repr(value)
                     for _, value in decode_params(slots, struct)]       # repr: NaN == NaN
        except (VpucError, IndexError, KeyError):
            return ("task", invocation.task_index)          # never shared: always exact
        return ("args", tuple(parts))

    def _profile(self, invocation: InvocationImage, cmx, tagged: _Tagged,
                 unit_name) -> _Profiled:
        from runtime_sim.engines.shave import kernel_object
        from runtime_sim.isa.interpreter import load_kernel
        from runtime_sim.isa.invoke import DEFAULT_STACK_BYTES, invocation_memory
        from runtime_sim.isa.pc_cycles import run_per_pc
        image = self.program.kernels[invocation.kernel]
        obj = kernel_object(image.elf, f"@{invocation.kernel}")
        entry = next((s.name for s in obj.entry_points if s.value == image.entry), None)
        tile = invocation.tile
        stack = self._stacks[tile] if tile < len(self._stacks) else DEFAULT_STACK_BYTES
        memory = invocation_memory(obj, cmx, invocation.window_e, arch=self.program.arch,
                                   stack_bytes=stack)
        try:
            loaded = load_kernel(obj, memory)
            run = run_per_pc(loaded.program, memory, entry=loaded.entry(entry),
                             args_addr=memory.base("WIN_E") + invocation.args_offset,
                             args_size=invocation.args_size, max_steps=MAX_STEPS)
        except VpucError as exc:
            name = unit_name() if callable(unit_name) else unit_name
            raise VpucError(f"internal: {name}: kernel @{invocation.kernel} ran in the "
                            f"simulation but not when profiled: {exc.diagnostics[0].message}",
                            exc.diagnostics[0].loc) from None
        n = len(tagged.labels) + 1
        per_label, insts = [0] * n, [0] * n
        for slot, cycles, count in zip(tagged.slot_of_pc, run.per_pc, run.counts):
            per_label[slot] += cycles
            insts[slot] += count
        return _Profiled(run.cycles, per_label, insts)

    # ------------------------------------------------------------------ the result
    def result(self) -> KernelProfile:
        """Per kernel image (in the program's order): tasks, cycles and, for a tagged
        kernel, each expression's cycles and instructions summed over its tasks."""
        kernels = []
        for name, image in self.program.kernels.items():
            if name not in self._totals:
                continue
            tasks, cycles = self._totals[name]
            entry = KernelCycles(name, image.origin, tasks, cycles)
            tagged = self._tagged.get(name)
            if tagged is not None:
                entry.profiled = len(tagged.profiles)
                labels = list(tagged.labels) + ["(no expression)"]
                sums = [0] * len(labels)
                insts = [0] * len(labels)
                for p in tagged.profiles.values():
                    for i in range(len(labels)):
                        sums[i] += p.per_label[i] * p.tasks
                        insts[i] += p.insts[i] * p.tasks
                entry.expressions = [ExprCycles(label, sums[i], insts[i])
                                     for i, label in enumerate(labels)
                                     if i < len(tagged.labels) or insts[i]]
            kernels.append(entry)
        return KernelProfile(kernels)


def _control(memref: MemRefData, invocation: InvocationImage, cmx, win_e: int,
             win_f: int) -> tuple:
    """What a MemRefData gives a kernel's control flow: every field but the addresses, and
    the dims and strides it points to."""
    if memref.numDims > MAX_DIMS:
        raise VpucError(f"numDims {memref.numDims}")
    meta, base = (invocation.window_e, win_e) if memref.isStatic else (cmx, win_f)
    dims = unpack_dims(meta, memref.numDims, memref.dimsAddr - base)
    strides = unpack_strides(meta, memref.numDims, memref.stridesAddr - base)
    return (memref.isStatic, memref.numDims, memref.dataType, memref.dimsOrder, tuple(dims),
            tuple(strides))
