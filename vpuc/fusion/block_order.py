"""Where lowered graph blocks go in task lists that also hold hand-written tasks.

A task list is a set of FIFO queues (a DMA channel, a tile's DPU, a tile's ACT
SHAVEs): a task that waits on something later in its own queue deadlocks it.
So each block's tasks go into each list at one point, and every hand-written
task gets a **slot** ``s`` (it goes after blocks ``0..s-1`` and before block
``s``) by the order its barriers imply:

- ``after(t)``: the last block from whose exit (its ``updates``) a chain of
  barriers and queue order reaches ``t``; ``t`` must follow it;
- ``before(t)``: the first block whose entry (its ``waits``) ``t`` reaches;
  ``t`` must precede it.

A task takes the earliest slot its ``after`` allows (tasks bound to no block
run before the blocks; queue order is part of the reach, so a queue keeps its
order); ``after >= before`` is a deadlock, and a task that touches a
block's interface tensor (writes what the block reads or writes, reads what
it writes) with neither bound is a race: both are errors at the task.

Expects: blocks in run order, each block's entry barriers reached by the
previous block's exit.  Guarantees: each executor's list holds its
hand-written tasks in their order per queue and each block's tasks in theirs;
the first task of a block in each queue waits on the block's entry barriers,
the last one updates its exit barriers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from vpuc.analysis.races import unit_accesses
from vpuc.diagnostics import VpucError
from vpuc.ir.graph import Graph
from vpuc.ir.module import Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask, DpuTask, Executor

EXECUTOR_ORDER = (Executor.DMA, Executor.DPU, Executor.ACT_SHAVE)


@dataclass
class Block:
    graph: Graph
    lists: dict[Executor, list]          # the block's lowered tasks per executor
    entry: tuple[str, ...]               # barriers its first tasks wait on
    exit: tuple[str, ...]                # barriers its last tasks update
    done: str | None                     # the exit barrier the next block waits on
    reads: set[str] = field(default_factory=set)     # interface tensors
    writes: set[str] = field(default_factory=set)


def queue_of(task) -> tuple:
    if isinstance(task, DmaTask):
        return ("DMA", task.channel)
    return ("DPU" if isinstance(task, DpuTask) else "ACT_SHAVE", task.tile)


def _sync(task) -> tuple[set[str], set[str]]:
    waits, updates = set(task.waits), set(task.updates)
    for variant in getattr(task, "variants", ()):
        waits.update(variant.waits)
        updates.update(variant.updates)
    return waits, updates


def place_blocks(module: Module, blocks: list[Block]) -> dict[Executor, list]:
    """Each executor's task list: ``module``'s hand-written tasks with the blocks' tasks
    placed among them (see the module docstring)."""
    for block in blocks:
        _attach(block)
    hand = [(tl.executor, t) for tl in module.task_lists for t in tl.tasks]
    after, before = _bounds(hand, blocks)
    _check_interface(module, hand, blocks, after, before)
    slots = _slots(hand, blocks, after, before)
    lists: dict[Executor, list] = {}
    for executor in EXECUTOR_ORDER:
        mine = [(slots[i], i) for i, (e, _) in enumerate(hand) if e is executor]
        mine.sort()                                  # stable within a slot: list order
        out: list = []
        for s in range(len(blocks) + 1):
            out += [hand[i][1] for slot, i in mine if slot == s]
            if s < len(blocks):
                out += blocks[s].lists.get(executor, [])
        if out:
            lists[executor] = out
    return lists


def _attach(block: Block) -> None:
    """The block's first task in each queue waits on its entry, its last one updates its
    exit."""
    first: dict[tuple, object] = {}
    last: dict[tuple, object] = {}
    for executor in EXECUTOR_ORDER:
        for task in block.lists.get(executor, []):
            first.setdefault(queue_of(task), task)
            last[queue_of(task)] = task
    for task in first.values():
        task.waits = tuple(task.waits) + tuple(b for b in block.entry if b not in task.waits)
    for task in last.values():
        task.updates = tuple(task.updates) + tuple(b for b in block.exit
                                                   if b not in task.updates)


def _bounds(hand: list, blocks: list[Block]) -> tuple[list[int], list[int]]:
    """For each hand-written task: the last block it must follow (-1: none) and the first
    block it must precede (len(blocks): none)."""
    n, count = len(hand), len(blocks)
    succ: list[list[int]] = [[] for _ in range(n + count)]     # hand tasks, then blocks
    pred: list[list[int]] = [[] for _ in range(n + count)]
    updaters: dict[str, list[int]] = {}
    waiters: dict[str, list[int]] = {}
    previous: dict[tuple, int] = {}
    for i, (_, task) in enumerate(hand):
        waits, updates = _sync(task)
        for b in updates:
            updaters.setdefault(b, []).append(i)
        for b in waits:
            waiters.setdefault(b, []).append(i)
        q = queue_of(task)
        if q in previous:
            succ[previous[q]].append(i)
        previous[q] = i
    for k, block in enumerate(blocks):
        for b in block.exit:
            updaters.setdefault(b, []).append(n + k)
        for b in block.entry:
            waiters.setdefault(b, []).append(n + k)
    for b, froms in updaters.items():
        for u in froms:
            succ[u] += waiters.get(b, [])
    for u, vs in enumerate(succ):
        for v in vs:
            pred[v].append(u)
    after, before = [-1] * n, [count] * n
    for k in range(count):
        for i in _reach(succ, n + k):
            if i < n:
                after[i] = max(after[i], k)
        for i in _reach(pred, n + k):
            if i < n:
                before[i] = min(before[i], k)
    return after, before


def _reach(edges: list[list[int]], start: int) -> set[int]:
    seen, todo = {start}, deque([start])
    while todo:
        for v in edges[todo.popleft()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    seen.discard(start)
    return seen


def _name(task) -> str:
    return task.label or f"this {type(task).__name__.removesuffix('Task').lower()} task"


def _slots(hand: list, blocks: list[Block], after: list[int], before: list[int]) -> list[int]:
    """Each task's slot: right after the last block it must follow.  Queue order is an
    edge of the reach, so a task's slot is never below the one ahead of it in its queue."""
    for i, (_, task) in enumerate(hand):
        if after[i] >= before[i]:
            raise VpucError(
                f"{_name(task)} must run after graph @{blocks[after[i]].graph.name} (barriers "
                "lead from the graph's updates to it) and before graph "
                f"@{blocks[before[i]].graph.name} (barriers and its queue's order lead from "
                "it to the graph's waits), which runs no later: a deadlock", task.loc)
    return [a + 1 for a in after]


def _check_interface(module: Module, hand: list, blocks: list[Block], after: list[int],
                     before: list[int]) -> None:
    symbols = SymbolTable(module)
    for i, (_, task) in enumerate(hand):
        variants = range(len(task.variants)) if isinstance(task, DpuTask) else [None]
        for v in variants:
            for operand, writes, _ in unit_accesses(task, v):
                region = symbols.region(operand)
                if region is None:
                    continue
                root = region.root.name
                for k, block in enumerate(blocks):
                    if after[i] >= k or before[i] <= k:
                        continue
                    if root in block.writes or (writes and root in block.reads):
                        _unordered(task, operand, root, writes, block)


def _unordered(task, operand: str, root: str, writes: bool, block: Block) -> None:
    verb = "writes" if writes else "reads"
    what = "returns" if root in block.writes else "reads"
    via = f"%{operand} (a view of %{root})" if operand != root else f"%{root}"
    raise VpucError(f"{_name(task)} {verb} {via}, which graph @{block.graph.name} {what}, but "
                    "no barrier orders the two: give the graph updates(%b) and the task "
                    "waits(%b) to run it after the graph, or the task updates(%b) and the "
                    "graph waits(%b) to run it before", task.loc)
