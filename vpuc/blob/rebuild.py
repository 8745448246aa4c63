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
VpucError naming the record.  The task lists are checked whole but built only
when the module first asks for them (``rebuild_tasks``); the program carries
them as numpy columns meanwhile (``rebuild_tables``, ``Program.tables``).
"""

from __future__ import annotations

from functools import partial
from itertools import starmap

import numpy as np

from vpuc.arch import Arch
from vpuc.blob.content import (EXECUTOR_OF, INIT_FILE, INIT_SPLAT, INIT_VALUES, LOCATION_CODE,
                               LOCATION_OF, BlobContent)
from vpuc.blob.empty_outputs import split_empty_outputs
from vpuc.blob.fb_rows import split_rows
from vpuc.blob.layer_sources import restore as restore_layers
from vpuc.blob.rebuild_checks import Checker, checked_number, checked_tensor_type
from vpuc.blob.rebuild_kernels import MAX_RANK, check_arch, kernels
from vpuc.blob.rebuild_tables import task_tables
from vpuc.blob.rebuild_tasks import tasks
from vpuc.blob.record_table import columns
from vpuc.blob.sync_columns import (ListSync, barrier_columns, sync_columns,
                                     unit_count_arrays)
from vpuc.blob.tensor_table import tensor_arrays
from vpuc.blob.verify_columns import barrier_counts, verify_by_columns
from vpuc.diagnostics import Diagnostic, Severity, VpucError
from vpuc.ir.module import Barrier, Buffer, BufferKind, ConstInit, Module, Ref, Slice, View
from vpuc.ir.tasks import Executor
from vpuc.ir.types import TensorType
from vpuc.program import Program
from vpuc.task_tables import ViewTable, distinct_rows

__all__ = ["MAX_RANK", "check_arch", "rebuild", "verify_program"]


def rebuild(content: BlobContent, file: str, *, expected_arch: str | Arch | None = None,
            verify: bool = True, schedule_rules: bool = False) -> Program:
    check = Checker(file)
    header = content.header
    arch = check_arch(header.arch, file, expected_arch)
    module = Module(check.name("header", header.module_name), header.module_arch)
    module.attributes = {kv.key: kv.value for kv in header.attributes}

    tensors = content.tensors
    names = columns(tensors, "name")[0]
    if not check.all_names(names):
        names = [check.name(f"tensor #{i}", t.name) for i, t in enumerate(tensors)]
    n_tensors = len(names)
    refs = Refs(names)      # one Ref per tensor, made on first use
    types: dict[tuple, TensorType] = {}
    made = _tensors_by_columns(check, tensors, refs, types)
    if made is None:        # a doubt: row by row, whose message names the first bad tensor
        made = _tensors_by_rows(check, tensors, refs, types)
    kinds, buffer_at, module.buffers, views, one_view = made
    module.defer_views(views)       # made on first use (a timing-only run never asks)
    for kind, name in ((BufferKind.INPUT, "network_inputs"),
                       (BufferKind.OUTPUT, "network_outputs")):
        actual = tuple(i for i in buffer_at if kinds[i] is kind)
        if tuple(getattr(header, name)) != actual:
            raise check.fail("header", f"{name} {list(getattr(header, name))} do not match the "
                             f"{kind} tensors {list(actual)}")

    barriers = content.barriers
    ids, physical, barrier_names, _, _ = barrier_columns(barriers)
    if (ids != np.arange(len(ids))).any() or (len(physical) and physical.min() < -1) or \
            not check.all_names(barrier_names):        # row by row, for the message
        for i, b in enumerate(barriers):
            where = f"barrier #{i}"
            if b.id != i or b.physical_id < -1:
                raise check.fail(where, f"id {b.id} / physical id {b.physical_id} is invalid")
            check.name(where, b.name)
    physical = physical.tolist()

    kernel_names = [check.name(f"kernel #{i}", k.name) for i, k in enumerate(content.kernels)]
    provenance, empty = split_empty_outputs(header.provenance, check.fail)
    program = Program(module, arch, provenance=provenance, empty_outputs=empty)
    kernels(check, content, module, program)
    sync = sync_columns(content)        # the barrier indices flattened once, for every check
    source = tasks(check, content, module, program, refs, barrier_names, kernel_names, sync)
    views = None if one_view is None else ViewTable(       # the columns rebuild checked
        *(getattr(tensor_arrays(tensors), k) for k in ("base", "slice_count", "slices")),
        names, one_view)
    program.tables = task_tables(content, [executor for executor, _, _ in source.lists], sync,
                                 names, barrier_names, physical, source.task, views)
    # A Barrier per record only when asked: a timing-only simulation reads the columns.
    module.defer_barriers(partial(_barrier_list, program.tables, barrier_names, physical))
    _counts(check, content, sync)

    for c in content.constants:
        where = f"constant for tensor #{c.tensor}"
        check.index(where, c.tensor, n_tensors, "tensor")
        if kinds.get(c.tensor) is not BufferKind.CONST \
                or names[c.tensor] in program.constants:
            raise check.fail(where, f"'{names[c.tensor]}' is not a const buffer, or has two "
                             "constants")
        program.constants[names[c.tensor]] = c.data
    module.layers = restore_layers(content.layer_sources, check.fail)
    if verify:
        verify_program(program, content, file, schedule_rules, sync, source.task, one_view)
    return program


def _barrier_list(tables, names: list[str], physical: list[int]) -> list[Barrier]:
    made = list(map(Barrier, names, [None if p == -1 else p for p in physical]))
    if tables is not None:
        tables.barriers = made      # the list the columns still describe
    return made


def _tensors_by_rows(check: Checker, tensors, refs, types: dict) -> tuple:
    """(kind per buffer's tensor index, buffer rows, buffers, a function returning the views,
    None), each record checked on its own."""
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
    return {i: kinds[i] for i in buffer_at}, buffer_at, buffers, lambda: views, None


def _tensors_by_columns(check: Checker, tensors, refs, types: dict) -> tuple | None:
    """``_tensors_by_rows``'s result made on the records' int64 columns (``tensor_table``)
    when every record checks out on them (known locations, good types, views with another
    tensor as base and one slice per dim, buffers without slices), the views as a function
    making them (the module's, on first use) and one making tensor i's View alone; None on
    any doubt."""
    try:
        a = tensor_arrays(tensors)
    except OverflowError:       # plain records with a number past int64: the rows say which
        return None
    n = len(a)
    if not n:
        return {}, [], [], list, _no_view
    if not np.isin(a.location, _LOCATION_CODES).all():
        return None
    # Each distinct type (dims, dynamic flags, element type, order, strides count) checked
    # and built once, on its first record.
    dynamic = np.zeros(n, np.int64)       # an int per distinct dynamic flags (few have any)
    flagged = {}
    for i, flags in enumerate(a.dynamic_dims):
        if flags:
            dynamic[i] = flagged.setdefault(flags, len(flagged) + 1)
    keys = np.concatenate([np.stack([a.rank, a.strides_count, a.order_count, a.data_type,
                                     dynamic], axis=1), a.padded("dims"), a.padded("order")],
                          axis=1)
    first, which = distinct_rows(keys)
    try:
        made_types = [checked_tensor_type(check, f"tensor #{i} '{a.names[i]}'", tensors[i],
                                          types) for i in first.tolist()]
    except VpucError:
        return None
    base = a.base
    view = base != -1
    cuts = a.slice_count
    if (view & ((base < 0) | (base >= n) | (base == np.arange(n)) | (cuts != a.rank))).any() \
            or (~view & (cuts != 0)).any():
        return None
    names = a.names
    buffer_at = np.flatnonzero(~view).tolist()
    kinds = dict(zip(buffer_at, map(LOCATION_OF.__getitem__, a.location[buffer_at].tolist())))
    inits = columns(tensors, "const_init")[0]
    buffers = [Buffer(names[i], kinds[i], made_types[which[i]], None if tile == -1 else tile,
                      None if offset == -1 else offset,
                      _init(check, f"tensor #{i} '{names[i]}'", inits[i]))
               for i, tile, offset in zip(buffer_at, a.tile[buffer_at].tolist(),
                                          a.offset[buffer_at].tolist())]
    at = np.flatnonzero(view)
    slice_first = np.cumsum(cuts) - cuts

    def views() -> list[View]:
        if not len(at):
            return []
        # Views share their (never mutated) slices: one Slice per distinct (start, stop,
        # step) (a block's views differ in one dim, the rest are whole), a view's tuple made
        # of them.
        first_use, index = distinct_rows(a.slices)
        made = list(starmap(Slice, a.slices[first_use].tolist()))
        pieces = split_rows(list(map(made.__getitem__, index.tolist())),
                            cuts[at].tolist())
        return list(map(View, map(names.__getitem__, at.tolist()),
                        map(refs.__getitem__, base[at].tolist()), pieces))

    def one_view(i: int) -> View:
        """Tensor ``i``'s View (equal to the module's), the others left unmade."""
        first = int(slice_first[i])
        return View(names[i], refs[int(base[i])],
                    tuple(starmap(Slice, a.slices[first:first + int(cuts[i])].tolist())))
    return kinds, buffer_at, buffers, views, one_view


_LOCATION_CODES = np.array(sorted(LOCATION_OF), np.int64)


def _no_view(i: int) -> View:
    raise IndexError(f"tensor #{i} of none")


class Refs:
    """One ``Ref`` per tensor index, made on first use and shared by its uses (never
    mutated): a blob of 100k tasks names 50,000 tensors a timing-only run never asks for."""

    __slots__ = ("names", "made")

    def __init__(self, names: list[str]) -> None:
        self.names, self.made = names, {}

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> Ref:
        ref = self.made.get(index)
        if ref is None:
            ref = self.made[index] = Ref(self.names[index])
        return ref


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
    producers, consumers = map(np.asarray, barrier_counts(content)) if sync is None else \
        unit_count_arrays(sync, len(content.barriers))
    if len(content.barriers):
        _, _, _, recorded_p, recorded_c = barrier_columns(content.barriers)
        bad = (recorded_p != producers) | (recorded_c != consumers)
        if bad.any():
            b = content.barriers[int(np.argmax(bad))]
            raise check.fail(f"barrier #{b.id} '{b.name}'",
                             f"producer/consumer counts {b.producer_count}/{b.consumer_count} "
                             f"do not match the tasks ({producers[b.id]}/{consumers[b.id]})")


def verify_program(program: Program, content: BlobContent, file: str,
                   schedule_rules: bool = True, sync: list[ListSync] | None = None,
                   task=None, view=None) -> None:
    """Run the module verifier, and check each view's recorded region against it."""
    from vpuc.ir.symbols import SymbolTable
    from vpuc.perf import gc_paused
    from vpuc.verifier import verify_module

    # Reading (no schedule rules) checks on columns and class representatives; the module
    # verifier runs over the whole program when they find a doubt, for its messages.
    # ``task(list, row)``: one IR task (the module's task lists may not be built yet);
    # ``view(i)``: tensor i's View (nor its views).
    if not schedule_rules and verify_by_columns(program.module, program.arch, content, sync,
                                                task=task, view=view):
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
