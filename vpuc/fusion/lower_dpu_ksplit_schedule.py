"""The task order of a layer split over its reduction (``lower_dpu_ksplit``).

The tasks are ordered by what they read and write (``TaskSchedule``): each waits
for the last writer of what it reads and for the readers since of what it
overwrites; buffers of one role alternate between two slots per tile (input
and weight chunks, partials, totals), so the loads of chunk *j + 1* overlap
the DPU task of chunk *j*, which overlaps the ACT add of chunk *j - 1*; weight
chunks load on the second DMA channel (the stores' one: a block stores once),
input chunks on the first, so their DMA latencies overlap.  ``makespan`` list-
schedules the tasks on their queues with the cost model's cycles (the split's
choice asks it); ``commit`` renders them with their barriers, without the waits
another wait already implies (``reduced_deps``: fewer barriers live at once).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from vpuc.cost.blocks import Move, move_cycles
from vpuc.fusion.blocked_program import ProgramText, label, type_text
from vpuc.ir.types import TensorType


@dataclass
class ScheduledTask:
    section: str                          # dma, dpu or act
    queue: tuple                  # ("dma", channel), ("dpu", tile), ("act", tile, SHAVE)
    cycles: float
    deps: set[int]
    render: Callable[[str], list[str]]    # barrier clauses -> the task's lines


@dataclass
class TaskSchedule:
    """The tasks of one K-split layer, ordered by their reads and writes of hazard keys
    (a buffer's role and slot on its tile), with the cost model's cycles.  Offers the
    ``cmx`` / ``view`` / ``dma`` calls of ``lower_dpu.LayerEmitter`` that
    ``lower_dpu_matmul.load_matrix`` and ``lower_dpu_channels.load_padded_weights`` make; everything goes to a private ``ProgramText``
    that ``commit`` adds to the real one."""

    p: str
    timing: object
    prog: ProgramText = field(default_factory=ProgramText)
    tasks: list[ScheduledTask] = field(default_factory=list)
    scope: str | None = None              # the hazard key of the buffers being declared
    channel: int | None = None            # the DMA channel of the loads being emitted
    key_of: dict[str, str] = field(default_factory=dict)
    shape_of: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    types: dict[str, TensorType] = field(default_factory=dict)     # the CMX buffers
    writers: dict[str, set[int]] = field(default_factory=dict)    # the current generation
    readers: dict[str, set[int]] = field(default_factory=dict)    # since its first write
    before: dict[str, set[int]] = field(default_factory=dict)     # the generation before

    def cmx(self, name: str, t: TensorType, tile: int) -> str:
        self.prog.cmx.append(f"cmx %{self.p}{name} : {type_text(t)} tile {tile}")
        self.key_of[self.p + name] = self.scope
        self.shape_of[self.p + name] = (t.dims, t.elem.nbytes)
        self.types[f"%{self.p}{name}"] = t
        return f"%{self.p}{name}"

    def view(self, name: str, base: str, slices: list[str]) -> str:
        self.prog.views.append(f"view %{self.p}{name} = %{base}[{', '.join(slices)}]")
        if base in self.key_of:
            dims = tuple(int(b) - int(a) for a, b in (s.split(":") for s in slices if ":" in s))
            self.key_of[self.p + name] = self.key_of[base]
            self.shape_of[self.p + name] = (dims, self.shape_of[base][1])
        return f"%{self.p}{name}"

    def dma(self, name: str, src: str, dst: str, channel: int, waits=None, updates=None,
            permute: bool = False) -> None:
        """One DMA (``waits``/``updates`` of ``LayerEmitter``'s signature are derived here;
        on ``self.channel`` when set)."""
        channel = channel if self.channel is None else self.channel
        cmx_side = dst if dst[1:] in self.shape_of else src
        dims, eb = self.shape_of[cmx_side[1:]]
        cycles = move_cycles(Move(math.prod(dims) * eb, eb, permute), self.timing,
                             dst[1:] in self.shape_of)[0]
        mode = "permute " if permute else ""
        head = f"  {label(self.p)}{name}: dma {mode}{src} -> {dst} channel {channel}"
        self.add("dma", ("dma", channel), [src], [dst], cycles, lambda c: [head + c])

    def add(self, section: str, queue: tuple, reads: list[str], writes: list[str],
            cycles: float, render: Callable[[str], list[str]]) -> int:
        """Append a task.  A key's writes come in generations: the writes before any read
        (a zero fill and the copy beside it, a staging copy, two halves: disjoint bytes)
        are one.  A reader waits for every write of the current generation; every writer
        of a generation waits for the reads and writes of the one before.  Only a wait on an
        earlier task of the same tile's DPU is left to its queue's order: the DMA channels
        are the schedule's to change (``schedule.overlap`` moves prefetches)."""
        n = len(self.tasks)
        deps: set[int] = set()
        rkeys = {self.key_of[r[1:]] for r in reads if self.key_of.get(r[1:])}
        wkeys = {self.key_of[w[1:]] for w in writes if self.key_of.get(w[1:])}
        for k in rkeys:
            deps |= self.writers.get(k, set())
        for k in wkeys:           # the previous generation, read or not, ends first
            deps |= (self.readers[k] | self.writers[k]) if self.readers.get(k) else \
                self.before.get(k, set())
        kept, last_dpu = set(), {}
        for d in deps:
            q = self.tasks[d].queue
            if q[0] != "dpu":
                kept.add(d)
            elif q != queue:           # a tile's DPU runs its tasks in order: its last one
                last_dpu[q] = max(last_dpu.get(q, d), d)
        deps = kept | set(last_dpu.values())
        for k in wkeys:
            if self.readers.get(k) or k not in self.writers:
                self.before[k] = self.readers.get(k, set()) | self.writers.get(k, set())
                self.writers[k], self.readers[k] = set(), set()
            self.writers[k].add(n)
        for k in rkeys:
            self.readers.setdefault(k, set()).add(n)
        self.tasks.append(ScheduledTask(section, queue, cycles, deps, render))
        return n

    def makespan(self) -> float:
        """The list schedule's end: each task starts when its queue is free and its
        dependencies have ended."""
        end: list[float] = []
        free: dict[tuple, float] = {}
        for task in self.tasks:
            start = max([free.get(task.queue, 0.0)] + [end[d] for d in task.deps])
            end.append(start + task.cycles)
            free[task.queue] = end[-1]
        return max(end, default=0.0)

    def reduced_deps(self) -> list[set[int]]:
        """Each task's dependencies without the ones another of them already follows (a
        bias load waiting on the previous block's DPU task and on that task's own bias
        load): the same order with fewer waits, so fewer barriers stay live across a round
        of blocks (``assign-physical-barriers`` has 64).  A tile's DPU runs its tasks in
        order, so a DPU task follows what its predecessor there follows."""
        follows: list[int] = []            # bit d: the task follows task d
        last_dpu: dict[tuple, int] = {}
        out: list[set[int]] = []
        for n, task in enumerate(self.tasks):
            implied = 0
            for d in task.deps:
                implied |= follows[d]
            out.append({d for d in task.deps if not (implied >> d) & 1})
            closure = implied | sum(1 << d for d in task.deps)
            if task.queue[0] == "dpu" and task.queue in last_dpu:
                prev = last_dpu[task.queue]
                closure |= follows[prev] | (1 << prev)
            if task.queue[0] == "dpu":
                last_dpu[task.queue] = n
            follows.append(closure)
        return out

    def commit(self, prog: ProgramText, gate: tuple[str, ...], finish: str | None) -> None:
        """Render every task with its barriers into ``prog``: the tasks that the same tasks
        wait for share one barrier (each producer precedes each consumer in program order,
        so no wait cycle forms); the last task (a store) also updates ``finish``, tasks
        waiting on nothing wait on ``gate``."""
        deps = self.reduced_deps()
        consumers: dict[int, set[int]] = {}
        for m in range(len(self.tasks)):
            for d in deps[m]:
                consumers.setdefault(d, set()).add(m)
        groups: dict[frozenset, int] = {}
        barrier_of = {n: groups.setdefault(frozenset(consumers[n]), n) for n in sorted(consumers)}
        zeros: dict[str, str] = {}          # one zero splat per shape (zero_pad_matrix's)
        rename: dict[str, str] = {}
        for line in self.prog.buffers:
            name, _, rest = line.partition(" : ")
            if rest.endswith("= splat 0"):
                if rest in zeros:
                    rename[name.split("%")[1]] = zeros[rest]
                    continue
                zeros[rest] = name.split("%")[1]
            prog.buffers.append(line)
        prog.cmx += self.prog.cmx
        for line in self.prog.views:
            view, _, base = line.partition(" = %")
            root, bracket, rest = base.partition("[")
            prog.views.append(f"{view} = %{rename.get(root, root)}{bracket}{rest}")
        prog.barriers += [f"barrier %{self.p}k{n}" for n in sorted(groups.values())]
        prog.kernels += [k for k in self.prog.kernels if k not in prog.kernels]
        for n, task in enumerate(self.tasks):
            waits = ([f"%{self.p}k{b}" for b in sorted({barrier_of[d] for d in deps[n]})]
                     or [f"%{g}" for g in gate])
            updates = [f"%{self.p}k{barrier_of[n]}"] if n in barrier_of else []
            if finish and n == len(self.tasks) - 1:
                updates.append(f"%{finish}")
            clauses = (f" waits({', '.join(waits)})" if waits else "") + (
                f" updates({', '.join(updates)})" if updates else "")
            getattr(prog, task.section).extend(task.render(clauses))
