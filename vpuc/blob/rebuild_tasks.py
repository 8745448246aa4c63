"""A blob's task lists checked and made, for ``vpuc.blob.rebuild``.

``tasks`` checks every task list: labels, kinds and barrier indices a column at
a time (``list_checked``), then the rest of each list's fields on its columns
(``rebuild_lists``).  A list that checks out is not built: the module's task
lists are deferred to their first use (``Module.defer_task_lists``) and made by
``TaskSource``, which also makes one task on request (the verifier's
representatives, the plan's DPU cost classes).  A list with a doubt is built
row by row at once, so the message names its first bad task.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter

from vpuc.blob.content import (DMA_MODE_OF, DPU_OP_OF, ELEM_OF, EXECUTOR_OF, MPE_MODE_CODE,
                               MPE_MODE_OF, POST_OP_OF, ActTaskRec, BlobContent, DmaRec, DpuRec)
from vpuc.blob.rebuild_checks import LABEL, Checker, checked_barriers, checked_number
from vpuc.blob.rebuild_lists import (act_invocations, act_list, act_ok, dma_list, dma_ok,
                                     dpu_list, dpu_ok)
from vpuc.blob.record_table import RecordTable, columns
from vpuc.blob.sync_columns import ListSync
from vpuc.ir.module import Module, Ref
from vpuc.ir.tasks import (Binding, DmaTask, DpuQuant, DpuTask, DpuVariant, Executor, PostOp,
                           ScalarConst, SwKernelTask, TaskList)
from vpuc.program import InvocationImage, Program

_TASK_KIND = {Executor.DMA: DmaRec, Executor.DPU: DpuRec, Executor.ACT_SHAVE: ActTaskRec}
_variants = attrgetter("variants")


def tasks(check: Checker, content: BlobContent, module: Module, program: Program,
           refs: list[Ref], barrier_names: list[str], kernel_names: list[str],
           sync: list[ListSync] | None = None) -> "TaskSource":
    """Every task list checked; the module's task lists deferred to their first use (those
    whose columns check out; a list with a doubt is built row by row now, for the message of
    its first bad task).  Returns what makes them, list by list or one task at a time."""
    n_tensors = len(refs)

    def tensor(where: str, index: int) -> Ref:
        if not 0 <= index < n_tensors:
            raise check.fail(where, f"tensor index {index} is out of range ({n_tensors} tensors)")
        return refs[index]

    seen: set[Executor] = set()
    source = TaskSource(check, refs, barrier_names, kernel_names)
    for li, tl in enumerate(content.task_lists):
        executor = check.code(f"task list #{li}", EXECUTOR_OF, tl.executor, "executor")
        if executor in seen:
            raise check.fail(f"task list #{li}", f"second {executor} task list")
        seen.add(executor)
        expected = _TASK_KIND[executor]
        # Labels, kinds and barrier indices checked a column at a time, then the rest of the
        # list's fields; on a doubt, row by row, for the message of the first bad task.
        checked = list_checked(check, tl.tasks, expected, len(barrier_names),
                                None if sync is None else sync[li])
        if checked and executor is Executor.DMA:
            fast = dma_ok(tl.tasks, n_tensors)
        elif checked and executor is Executor.DPU:
            fast = dpu_ok(tl.tasks, n_tensors)
        else:
            fast = checked and act_ok(check, tl.tasks, n_tensors, kernel_names, program)
            if fast:        # kept as columns (the only ACT list: no image made before)
                program.invocations = act_invocations(tl.tasks, kernel_names) \
                    if not program.invocations else \
                    program.invocations + list(act_invocations(tl.tasks, kernel_names))
        if fast:
            source.add(executor, tl.tasks, None)
            continue
        tasks = []
        prefix = f"{executor} task #"
        bname = barrier_names.__getitem__
        for ti, rec in enumerate(tl.tasks):
            where = prefix + str(ti)
            if checked:
                label = rec.label
                waits = tuple(map(bname, rec.waits))
                updates = tuple(map(bname, rec.updates))
            else:
                if type(rec) is not expected:
                    raise check.fail(where, f"is not a {executor} task")
                label = check.label(where, rec.label)
                waits = checked_barriers(check, where, rec.waits, barrier_names)
                updates = checked_barriers(check, where, rec.updates, barrier_names)
            if executor is Executor.DMA:
                tasks.append(DmaTask(label, waits, updates, tensor(where, rec.src),
                                     tensor(where, rec.dst), rec.channel,
                                     check.code(where, DMA_MODE_OF, rec.mode, "DMA mode")))
            elif executor is Executor.DPU:
                tasks.append(_dpu(check, where, rec, label, waits, updates, tensor,
                                  barrier_names, checked))
            else:
                tasks.append(_sw(check, where, rec, label, waits, updates, tensor, kernel_names,
                                 program, ti))
        source.add(executor, tl.tasks, tasks)
    module.defer_task_lists(source.task_lists)
    return source


class TaskSource:
    """The IR tasks of a checked blob's task lists, made from their records on request: every
    list (``task_lists``, the module's deferred lists) or one task (``task``)."""

    def __init__(self, check: Checker, refs: list[Ref], barrier_names: list[str],
                 kernel_names: list[str]) -> None:
        self.check, self.refs = check, refs
        self.barrier_names, self.kernel_names = barrier_names, kernel_names
        self.lists: list[tuple[Executor, tuple, list | None]] = []

    def add(self, executor: Executor, recs, built: list | None) -> None:
        self.lists.append((executor, recs, built))

    def _build(self, executor: Executor, recs) -> list:
        if executor is Executor.DMA:
            return dma_list(recs, self.refs, self.barrier_names)
        if executor is Executor.DPU:
            return dpu_list(recs, self.refs, self.barrier_names)
        return act_list(self.check, recs, self.refs, self.barrier_names, self.kernel_names)

    def task_lists(self) -> list[TaskList]:
        return [TaskList(executor, self._build(executor, recs) if built is None else built)
                for executor, recs, built in self.lists]

    def task(self, index: int, row: int):
        """Task ``row`` of list ``index``, made on its own (equal to the list's)."""
        executor, recs, built = self.lists[index]
        return built[row] if built is not None else \
            self._build(executor, recs[row:row + 1])[0]


def _dpu(check, where, rec: DpuRec, label, waits, updates, tensor, barrier_names,
         checked: bool = False) -> DpuTask:
    """``checked``: the variants' labels and barrier indices were checked with the list's."""
    post = None
    if rec.post_op is not None:
        post = PostOp(check.code(where, POST_OP_OF, rec.post_op.kind, "post op"),
                      tuple(float(p) for p in rec.post_op.params))
    if checked:
        bname = barrier_names.__getitem__
        variants = [DpuVariant(v.label, tuple(v.start), tuple(v.end), tuple(map(bname, v.waits)),
                               tuple(map(bname, v.updates)), mode=_mode(check, where, v.mode))
                    for v in rec.variants]
    else:
        variants = [DpuVariant(check.label(where, v.label), tuple(v.start), tuple(v.end),
                               checked_barriers(check, where, v.waits, barrier_names),
                               checked_barriers(check, where, v.updates, barrier_names),
                               mode=_mode(check, where, v.mode))
                    for v in rec.variants]
    opt = (lambda values: None if values is None else tuple(values))
    return DpuTask(label, waits, updates, check.code(where, DPU_OP_OF, rec.op, "DPU op"),
                   rec.tile, tuple(tensor(where, i) for i in rec.inputs),
                   tensor(where, rec.output),
                   None if rec.weights == -1 else tensor(where, rec.weights),
                   None if rec.bias == -1 else tensor(where, rec.bias),
                   opt(rec.kernel), opt(rec.stride), opt(rec.pad), opt(rec.dilation), post,
                   variants, mode=_mode(check, where, rec.mode),
                   broadcast_outputs=tuple(tensor(where, i) for i in rec.odu_cast),
                   quant=None if rec.quant_scale == -1 else DpuQuant(
                       tensor(where, rec.quant_scale), int(rec.in_zero_point),
                       int(rec.out_zero_point)))


def list_checked(check: Checker, recs, expected, n_barriers: int,
                  sync: ListSync | None = None) -> bool:
    """Whether every record of a task list is of the list's kind, with a good label (or
    none) and barrier indices in range, its DPU variants too; checked column by column
    (the indices on ``sync``'s, when given)."""
    kinds = {recs.record} if isinstance(recs, RecordTable) else set(map(type, recs))
    if recs and kinds != {expected}:
        return False
    labels, = columns(recs, "label")
    labels = _present(labels)
    if expected is DpuRec:
        labels = labels + _present(columns(recs, "variants.label")[0])
    if not check.all_names(labels, LABEL):
        return False
    if sync is not None:
        return sync.in_range(n_barriers)
    rows = list(recs)
    if expected is DpuRec:
        rows += chain.from_iterable(map(_variants, recs))
    indices = [b for rec in rows for group in (rec.waits, rec.updates) for b in group]
    return not indices or (min(indices) >= 0 and max(indices) < n_barriers)


def _present(labels) -> list:
    """The labels that are there (not None); the column itself when all are (one scan)."""
    labels = list(labels)
    return labels if None not in labels else [label for label in labels if label is not None]


def _mode(check, where: str, code: int) -> str | None:
    """An execution mode's name; None for UNSET (not pinned)."""
    return None if code == MPE_MODE_CODE[None] else check.code(where, MPE_MODE_OF, code,
                                                                 "execution mode")


def _sw(check, where, rec: ActTaskRec, label, waits, updates, tensor, kernel_names, program,
        index: int) -> SwKernelTask:
    kernel = kernel_names[check.index(where, rec.kernel, len(kernel_names), "kernel")]
    consts = tuple(ScalarConst(check.name(where, s.name), checked_number(check, where, s.value),
                               check.code(where, ELEM_OF, s.data_type, "element type"))
                   for s in rec.scalars)
    ref = check.ref
    bindings = [tuple(Binding(tensor(where, b.tensor), ref(where, b.alias))
                      for b in group) for group in (rec.inputs, rec.outputs)]
    task = SwKernelTask(label, waits, updates, ref(where, kernel), rec.tile, bindings[0],
                        bindings[1], consts, tuple(ref(where, a) for a in rec.run_args))
    inv = rec.invocation
    if inv is not None:
        if program.kernel_aliases.get(kernel, kernel) not in program.kernels:
            raise check.fail(where, f"has an invocation image but @{kernel} has no kernel image")
        if inv.args_offset + inv.args_size > len(inv.window):
            raise check.fail(where, f"args ({inv.args_size} bytes at {inv.args_offset:#x}) "
                             f"run past its {len(inv.window)}-byte WIN_E image")
        program.invocations.append(InvocationImage(index, kernel, rec.tile, inv.window,
                                                   inv.args_offset, inv.args_size))
    return task
