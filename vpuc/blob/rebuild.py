"""BlobContent -> Program, after checking every index, code and count.

The format readers guarantee only that the bytes decode; this module checks
that what they decoded makes a program: every tensor, barrier and kernel index
in range and of the right kind, every enum code known, names well formed and
unique, lists sized as declared, the header's counts and network inputs and
outputs equal to what the records hold, and the architecture known to this
vpuc with the same parameters.  Then ``verify=True`` (the default of
``read_blob``) runs the module verifier and checks each view's recorded
strides and offset against the region the verifier resolves: its rules over
each record, and with ``schedule_rules=True`` (``vpuc inspect``) also those over
the whole schedule, which the runtime checks again as it runs
(``vpuc.verifier``).

Names, labels and barrier indices are checked a column at a time (a whole task
list at once); when a column fails, the records are checked one by one, so the
message names the first bad record as before.  Every failure is a one-line
VpucError naming the record.
"""

from __future__ import annotations

from itertools import chain, starmap
from operator import attrgetter

import numpy as np

from vpuc.arch import Arch
from vpuc.blob.layer_sources import restore as restore_layers
from vpuc.blob.rebuild_checks import (LABEL, Checker, checked_barriers, checked_number,
                                      checked_tensor_type)
from vpuc.blob.rebuild_kernels import MAX_RANK, check_arch, kernels
from vpuc.blob.record_table import RecordTable, columns
from vpuc.blob.rebuild_tables import task_tables
from vpuc.blob.rebuild_lists import (act_invocations, act_list, act_ok, dma_list, dma_ok,
                                     dpu_list, dpu_ok)
from vpuc.blob.sync_columns import ListSync, sync_columns, unit_counts
from vpuc.blob.verify_columns import barrier_counts, verify_by_columns
from vpuc.blob.content import (DMA_MODE_OF, DPU_OP_OF, ELEM_OF, EXECUTOR_OF, INIT_FILE,
                               INIT_SPLAT, INIT_VALUES, LOCATION_CODE, LOCATION_OF, MPE_MODE_CODE,
                               MPE_MODE_OF, POST_OP_OF, ActTaskRec, BlobContent, DmaRec, DpuRec)
from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Barrier, Buffer, BufferKind, ConstInit, Module, Ref, Slice, View
from vpuc.ir.tasks import (Binding, DmaTask, DpuTask, DpuVariant, Executor, PostOp,
                           ScalarConst, SwKernelTask, TaskList)
from vpuc.ir.types import TensorType
from vpuc.program import InvocationImage, Program

__all__ = ["MAX_RANK", "check_arch", "rebuild", "verify_program"]

_TASK_KIND = {Executor.DMA: DmaRec, Executor.DPU: DpuRec, Executor.ACT_SHAVE: ActTaskRec}
_label, _variants = attrgetter("label"), attrgetter("variants")


def rebuild(content: BlobContent, file: str, *, expected_arch: str | Arch | None = None,
            verify: bool = True, schedule_rules: bool = False) -> Program:
    check = Checker(file)
    header = content.header
    arch = check_arch(header.arch, file, expected_arch)
    module = Module(check.name("header", header.module_name), header.module_arch)
    module.attributes = {kv.key: kv.value for kv in header.attributes}

    tensors = content.tensors
    names = [t.name for t in tensors]
    if not check.all_names(names):
        names = [check.name(f"tensor #{i}", t.name) for i, t in enumerate(tensors)]
    n_tensors = len(names)
    refs = list(map(Ref, names))    # one Ref per tensor, shared by its uses (never mutated)
    types: dict[tuple, TensorType] = {}
    made = _tensors_by_columns(check, tensors, refs, types)
    if made is None:        # a doubt: row by row, whose message names the first bad tensor
        made = _tensors_by_rows(check, tensors, refs, types)
    kinds, buffer_at, module.buffers, module.views = made
    for kind, name in ((BufferKind.INPUT, "network_inputs"),
                       (BufferKind.OUTPUT, "network_outputs")):
        actual = tuple(i for i in buffer_at if kinds[i] is kind)
        if tuple(getattr(header, name)) != actual:
            raise check.fail("header", f"{name} {list(getattr(header, name))} do not match the "
                             f"{kind} tensors {list(actual)}")

    barriers = content.barriers
    ids, physical, barrier_names = (list(c) for c in list(zip(*barriers))[:3]) if barriers \
        else ([], [], [])
    if ids != list(range(len(ids))) or (physical and min(physical) < -1) or \
            not check.all_names(barrier_names):        # row by row, for the message
        for i, b in enumerate(barriers):
            where = f"barrier #{i}"
            if b.id != i or b.physical_id < -1:
                raise check.fail(where, f"id {b.id} / physical id {b.physical_id} is invalid")
            check.name(where, b.name)
    module.barriers = list(map(Barrier, barrier_names, [None if p == -1 else p
                                                        for p in physical]))

    kernel_names = [check.name(f"kernel #{i}", k.name) for i, k in enumerate(content.kernels)]
    program = Program(module, arch, provenance={kv.key: kv.value for kv in header.provenance})
    kernels(check, content, module, program)
    sync = sync_columns(content)        # the barrier indices flattened once, for every check
    source = _tasks(check, content, module, program, refs, barrier_names, kernel_names, sync)
    program.tables = task_tables(content, [executor for executor, _, _ in source.lists], sync,
                                 names, module.barriers, source.task)
    _counts(check, content, sync)

    for c in content.constants:
        where = f"constant for tensor #{c.tensor}"
        check.index(where, c.tensor, n_tensors, "tensor")
        if kinds[c.tensor] is not BufferKind.CONST or tensors[c.tensor].base != -1 \
                or names[c.tensor] in program.constants:
            raise check.fail(where, f"'{names[c.tensor]}' is not a const buffer, or has two "
                             "constants")
        program.constants[names[c.tensor]] = c.data
    module.layers = restore_layers(content.layer_sources, check.fail)
    if verify:
        verify_program(program, content, file, schedule_rules, sync, source.task)
    return program


def _tensors_by_rows(check: Checker, tensors, refs: list[Ref], types: dict) -> tuple:
    """(kind per tensor, buffer rows, buffers, views), each record checked on its own."""
    n_tensors = len(tensors)
    kinds: list[BufferKind] = []
    slices: dict[tuple, tuple[Slice, ...]] = {}
    buffer_at: list[int] = []
    buffers, views = [], []
    for i, t in enumerate(tensors):
        kind = LOCATION_OF.get(t.location)
        tensor_type = types.get((t.dims, t.dynamic_dims, t.data_type, t.dims_order,
                                 len(t.strides)))
        base = t.base
        if kind is None or tensor_type is None or base != -1 and not (
                0 <= base < n_tensors and base != i and len(t.slices) == len(t.dims)):
            where = f"tensor #{i} '{t.name}'"      # a new type, or a bad record: row checks
            kind = check.code(where, LOCATION_OF, t.location, "memory location")
            tensor_type = checked_tensor_type(check, where, t, types)
            if base != -1:
                check.index(where, base, n_tensors, "tensor")
                if base == i or len(t.slices) != len(t.dims):
                    raise check.fail(where, "a view needs another tensor as base and one "
                                     "slice per dim")
        kinds.append(kind)
        if base == -1:
            if t.slices:
                raise check.fail(f"tensor #{i} '{t.name}'", "a buffer has slices")
            buffer_at.append(i)
            buffers.append(Buffer(t.name, kind, tensor_type, None if t.tile == -1 else t.tile,
                                  None if t.offset == -1 else t.offset,
                                  _init(check, f"tensor #{i} '{t.name}'", t.const_init)))
        else:
            pieces = slices.get(t.slices)
            if pieces is None:      # views of one shape share their (never mutated) slices
                pieces = slices[t.slices] = tuple(starmap(Slice, t.slices))
            views.append(View(t.name, refs[base], pieces))
    return kinds, buffer_at, buffers, views


def _tensors_by_columns(check: Checker, tensors, refs: list[Ref], types: dict) -> tuple | None:
    """``_tensors_by_rows``'s result made a column at a time when every record checks out
    on the columns (known locations, good types, views with another tensor as base and one
    slice per dim, buffers without slices); None on any doubt."""
    if not tensors:
        return [], [], [], []
    (names, locations, tiles, offsets, _, dims, dynamic, strides, data_types, orders, bases,
     all_slices, inits) = zip(*tensors)
    if not set(locations) <= LOCATION_OF.keys():
        return None
    keys = list(zip(dims, dynamic, data_types, orders, map(len, strides)))
    try:        # each distinct type checked and built once, on its first record
        for i in dict(zip(reversed(keys), range(len(keys) - 1, -1, -1))).values():
            checked_tensor_type(check, f"tensor #{i} '{names[i]}'", tensors[i], types)
    except VpucError:
        return None
    n = len(tensors)
    base = np.array(bases, dtype=np.int64)
    view = base != -1
    ranks = np.fromiter(map(len, dims), np.int64, n)
    cuts = np.fromiter(map(len, all_slices), np.int64, n)
    if (view & ((base < 0) | (base >= n) | (base == np.arange(n)) | (cuts != ranks))).any() \
            or (~view & (cuts != 0)).any():
        return None
    kinds = list(map(LOCATION_OF.__getitem__, locations))
    buffer_at = np.flatnonzero(~view).tolist()
    buffers = [Buffer(names[i], kinds[i], types[keys[i]], None if tiles[i] == -1 else tiles[i],
                      None if offsets[i] == -1 else offsets[i],
                      _init(check, f"tensor #{i} '{names[i]}'", inits[i])) for i in buffer_at]
    at = np.flatnonzero(view).tolist()
    view_slices = list(map(all_slices.__getitem__, at))
    # Views share their (never mutated) slices: one Slice per distinct record (a block's
    # views differ in one dim, the rest are whole), a view's tuple made of them.
    made = {rec: Slice(*rec) for rec in dict.fromkeys(chain.from_iterable(view_slices))}
    slice_of = made.__getitem__
    views = list(map(View, map(names.__getitem__, at),
                     map(refs.__getitem__, map(bases.__getitem__, at)),
                     [tuple(map(slice_of, recs)) for recs in view_slices]))
    return kinds, buffer_at, buffers, views


def _init(check: Checker, where: str, init) -> ConstInit | None:
    if init is None:
        return None
    values = tuple(checked_number(check, where, v) for v in init.values)
    if init.kind == INIT_FILE and init.path is not None and not values:
        return ConstInit(path=init.path)
    if init.kind == INIT_SPLAT and len(values) == 1 and init.path is None:
        return ConstInit(splat=values[0])
    if init.kind == INIT_VALUES and init.path is None:
        return ConstInit(values=values)
    raise check.fail(where, f"constant initializer (kind {init.kind}) is malformed")


def _tasks(check: Checker, content: BlobContent, module: Module, program: Program,
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
        checked = _list_checked(check, tl.tasks, expected, len(barrier_names),
                                None if sync is None else sync[li])
        if checked and executor is Executor.DMA:
            fast = dma_ok(tl.tasks, n_tensors)
        elif checked and executor is Executor.DPU:
            fast = dpu_ok(tl.tasks, n_tensors)
        else:
            fast = checked and act_ok(check, tl.tasks, n_tensors, kernel_names, program)
            if fast:
                program.invocations.extend(act_invocations(tl.tasks, kernel_names))
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
                   variants, mode=_mode(check, where, rec.mode))


def _list_checked(check: Checker, recs, expected, n_barriers: int,
                  sync: ListSync | None = None) -> bool:
    """Whether every record of a task list is of the list's kind, with a good label (or
    none) and barrier indices in range, its DPU variants too; checked column by column
    (the indices on ``sync``'s, when given)."""
    kinds = {recs.record} if isinstance(recs, RecordTable) else set(map(type, recs))
    if recs and kinds != {expected}:
        return False
    labels, = columns(recs, "label")
    labels = [label for label in labels if label is not None]
    if expected is DpuRec:
        labels += [label for label in columns(recs, "variants.label")[0] if label is not None]
    if not check.all_names(labels, LABEL):
        return False
    if sync is not None:
        return sync.in_range(n_barriers)
    rows = list(recs)
    if expected is DpuRec:
        rows += chain.from_iterable(map(_variants, recs))
    indices = [b for rec in rows for group in (rec.waits, rec.updates) for b in group]
    return not indices or (min(indices) >= 0 and max(indices) < n_barriers)


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


def _counts(check: Checker, content: BlobContent, sync: list[ListSync] | None = None) -> None:
    """The header's counts, and each barrier's producer and consumer counts, must match."""
    lists = {EXECUTOR_OF[tl.executor]: (tl.tasks, s) for tl, s in
             zip(content.task_lists, sync or [None] * len(content.task_lists))}
    dpu, dpu_sync = lists.get(Executor.DPU, ((), None))
    variants = int(dpu_sync.variant_count.sum()) if dpu_sync is not None and \
        dpu_sync.variant_count is not None else sum(len(t.variants) for t in dpu)
    actual = (len(lists.get(Executor.DMA, ((),))[0]), len(dpu), variants,
              len(lists.get(Executor.ACT_SHAVE, ((),))[0]), len(content.barriers),
              len(content.tensors), len(content.kernels))
    if tuple(content.header.task_counts) != actual:
        raise check.fail("header", f"task counts {list(content.header.task_counts)} do not "
                         f"match the records {list(actual)}")
    producers, consumers = barrier_counts(content) if sync is None else \
        unit_counts(sync, len(content.barriers))
    n = len(content.barriers)
    if n:
        _, _, _, recorded_p, recorded_c = zip(*content.barriers)
        bad = (np.fromiter(recorded_p, np.int64, n) != np.asarray(producers, np.int64)) | \
            (np.fromiter(recorded_c, np.int64, n) != np.asarray(consumers, np.int64))
        if bad.any():
            b = content.barriers[int(np.argmax(bad))]
            raise check.fail(f"barrier #{b.id} '{b.name}'",
                             f"producer/consumer counts {b.producer_count}/{b.consumer_count} "
                             f"do not match the tasks ({producers[b.id]}/{consumers[b.id]})")


def verify_program(program: Program, content: BlobContent, file: str,
                   schedule_rules: bool = True, sync: list[ListSync] | None = None,
                   task=None) -> None:
    """Run the module verifier, and check each view's recorded region against it."""
    from vpuc.ir.symbols import SymbolTable
    from vpuc.perf import gc_paused
    from vpuc.verifier import verify_module

    # Reading (no schedule rules) checks on columns and class representatives; the module
    # verifier runs over the whole program when they find a doubt, for its messages.
    # ``task(list, row)``: one IR task (the module's task lists may not be built yet).
    if not schedule_rules and verify_by_columns(program.module, program.arch, content, sync,
                                                task=task):
        return
    symbols = SymbolTable(program.module)
    bag = verify_module(program.module, program.arch, schedule_rules=schedule_rules,
                        symbols=symbols)
    if bag.has_errors:
        first, *rest = [d for d in bag.items if d.severity is Severity.ERROR]
        notes = tuple((None, d.message) for d in rest[:5])
        raise VpucError([Diagnostic(Severity.ERROR, None, f"{file}: the blob's program does not "
                                    f"verify: {first.message}", notes)])
    with gc_paused():
        for i, t in enumerate(content.tensors):
            region = symbols.region(t.name)
            root = region.root if region is not None else None
            if region is None or (region.byte_offset, tuple(region.strides_bits),
                                  region.type.bound_shape) != (t.data_offset, tuple(t.strides),
                                                               tuple(t.dims)) \
                    or (LOCATION_CODE[root.kind], root.tile, root.offset) != \
                    (t.location, None if t.tile == -1 else t.tile,
                     None if t.offset == -1 else t.offset):
                raise VpucError(f"{file}: blob tensor #{i} '{t.name}': recorded location, "
                                "offset, dims or strides differ from its declaration")
