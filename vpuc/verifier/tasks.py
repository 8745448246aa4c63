"""Verifier rules for tasks: operands, executors, tiles, DMA sizes, SW kernel contracts."""

from __future__ import annotations

from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag, Loc, closest_name
from vpuc.ir.module import BufferKind, Module, format_number
from vpuc.ir.symbols import Region, SymbolTable
from vpuc.ir.tasks import DmaMode, DmaTask, DpuTask, Executor, SwKernelTask
from vpuc.verifier.declarations import value_problem
from vpuc.verifier.dpu import check_dpu_task

TASK_EXECUTOR = {DmaTask: Executor.DMA, DpuTask: Executor.DPU, SwKernelTask: Executor.ACT_SHAVE}
TASK_WORD = {DmaTask: "dma", DpuTask: "dpu", SwKernelTask: "sw"}


def check_tasks(module: Module, arch: Arch, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    labels: dict[str, Loc] = {}
    dpu_shapes: set[tuple] = set()
    for task_list in module.task_lists:
        for task in task_list.tasks:
            expected = TASK_EXECUTOR[type(task)]
            if expected is not task_list.executor:
                bag.error(task.loc, f"a {TASK_WORD[type(task)]} task in the "
                          f"{task_list.executor} task list; expected it in 'tasks {expected}'")
            _check_label(task.label, task.loc, labels, bag)
            _check_sync(task.waits, task.updates, symbols, bag)
            if isinstance(task, DmaTask):
                check_dma(task, arch, symbols, bag)
            elif isinstance(task, DpuTask):
                for variant in task.variants:
                    _check_label(variant.label and f"{task.label}.{variant.label}", variant.loc,
                                 labels, bag)
                    _check_sync(variant.waits, variant.updates, symbols, bag)
                check_dpu_task(task, arch, symbols, bag, dpu_shapes)
            else:
                check_sw(task, arch, symbols, bag)


def _check_label(label: str | None, loc: Loc, labels: dict[str, Loc], bag: DiagnosticBag) -> None:
    if not label:
        return
    if label in labels:
        bag.error(loc, f"duplicate task label '{label}'", ((labels[label], "first used here"),))
    else:
        labels[label] = loc


def _check_sync(waits, updates, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    barriers = symbols.barriers
    if all(map(barriers.__contains__, waits)) and all(map(barriers.__contains__, updates)) \
            and (not waits or not updates or set(waits).isdisjoint(updates)):
        return      # the common case, without building the error path's tuples and sets
    for ref in tuple(waits) + tuple(updates):
        if ref not in barriers:
            what = "a buffer" if symbols.is_buffer_like(ref) else "undefined"
            bag.error(getattr(ref, "loc", None), f"%{ref} is {what}; expected a barrier in "
                      "waits(...)/updates(...)" + symbols.did_you_mean(ref, "barrier"))
    for ref in set(waits) & set(updates):
        bag.error(getattr(ref, "loc", None), f"a task both waits on and updates barrier %{ref}; "
                  "it could never start")


def check_dma(task: DmaTask, arch: Arch, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    if not 0 <= task.channel < arch.dma_channels:
        bag.error(task.loc, f"dma uses channel {task.channel}; {arch.name} has DMA channels "
                  f"0..{arch.dma_channels - 1}")
    src = symbols.require_region(task.src, task.src.loc, "dma source")
    dst = symbols.require_region(task.dst, task.dst.loc, "dma destination")
    if src is None or dst is None:
        return
    if dst.kind in (BufferKind.CONST, BufferKind.INPUT):
        what = f"{dst.kind} %{dst.root.name}"
        if dst.root.name != task.dst:
            what = f"%{task.dst}, a view of {what}"
        bag.error(task.dst.loc, f"dma writes to {what}; expected a writable buffer (cmx, ddr "
                  "or output)")
    if src.root is dst.root and src.byte_offset == dst.byte_offset:
        bag.error(task.loc, f"dma copies %{task.src} onto itself")
    s, d = src.type, dst.type
    if task.mode is DmaMode.COPY:
        if s.elem is not d.elem:
            bag.error(task.loc, f"dma from {s.elem} %{task.src} to {d.elem} %{task.dst} changes "
                      "the element type; expected equal types, or declare it 'dma convert'")
        elif s.nbytes != d.nbytes:
            bag.error(task.loc, f"dma from %{task.src} ({s.nbytes} bytes) to %{task.dst} "
                      f"({d.nbytes} bytes) changes the size; expected equal byte sizes")
        elif s.bound_shape == d.bound_shape and s.order != d.order:
            bag.error(task.loc, f"dma from {s.order} %{task.src} to {d.order} %{task.dst} "
                      "reorders the data; declare it 'dma permute'")
    elif task.mode is DmaMode.CONVERT:
        if s.bound_shape != d.bound_shape:
            bag.error(task.loc, f"dma convert from {s.shape_str()} to {d.shape_str()}; expected "
                      "equal shapes")
    elif task.mode is DmaMode.PERMUTE:
        if s.bound_shape != d.bound_shape or s.elem is not d.elem:
            bag.error(task.loc, f"dma permute from {s.shape_str()} to {d.shape_str()}; expected "
                      "equal logical shapes and element types")


def _check_on_tile(region: Region, tile: int, ref, what: str, bag: DiagnosticBag) -> None:
    if region.kind is not BufferKind.CMX or region.tile != tile:
        where = f"the CMX of tile {region.tile}" if region.kind is BufferKind.CMX else "DDR"
        bag.error(getattr(ref, "loc", None), f"{what} %{ref} is in {where}; expected a buffer "
                  f"in the CMX of tile {tile}, where the task runs")


def _check_ddr_input(task: SwKernelTask, region: Region, ref, symbols: SymbolTable,
                     bag: DiagnosticBag) -> None:
    """A library kernel may read an input in DDR (through the ACT SHAVE's caches, at its
    address in the DDR aperture: vpuc/abi/ddr_aperture.py); its shape must be static
    (a dynamic DDR tensor's dims are not in memory for the kernel to read)."""
    kernel = symbols.kernels.get(task.kernel)
    if kernel is not None and kernel.source.kind.value != "library":
        bag.error(getattr(ref, "loc", None), f"kernel input %{ref} is in DDR; only library "
                  f"kernels read DDR operands (@{task.kernel} is from {kernel.source.kind.value}); "
                  f"expected a buffer in the CMX of tile {task.tile}")
    elif not region.root.type.is_static:
        bag.error(getattr(ref, "loc", None), f"kernel input %{ref} is a dynamic tensor in DDR; "
                  "a kernel reads a DDR operand only with static dims; expected a static "
                  f"buffer, or one in the CMX of tile {task.tile}")


def check_sw(task: SwKernelTask, arch: Arch, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    if not 0 <= task.tile < arch.tiles:
        bag.error(task.loc, f"sw task on tile {task.tile}; {arch.name} has tiles "
                  f"0..{arch.tiles - 1}")
    aliases: dict[str, Region | None] = {}
    for binding, role in [(b, "input") for b in task.inputs] + [(b, "output") for b in task.outputs]:
        region = symbols.require_region(binding.buffer, binding.buffer.loc, f"kernel {role}")
        if binding.alias in aliases:
            bag.error(binding.alias.loc, f"%{binding.alias} is bound twice in one sw task")
        aliases[binding.alias] = region
        if region is None:
            continue
        if role == "output" and region.kind in (BufferKind.CONST, BufferKind.INPUT):
            what = "a const" if region.kind is BufferKind.CONST else "the network input"
            bag.error(binding.buffer.loc, f"kernel output %{binding.buffer} is {what}; expected "
                      f"a writable buffer in the CMX of tile {task.tile}")
            continue
        if role == "input" and region.kind is not BufferKind.CMX:
            _check_ddr_input(task, region, binding.buffer, symbols, bag)
        elif 0 <= task.tile < arch.tiles:
            _check_on_tile(region, task.tile, binding.buffer, f"kernel {role}", bag)
    consts = {}
    for const in task.consts:
        if const.name in consts or const.name in aliases:
            bag.error(const.loc, f"%{const.name} is defined twice in the sw task's region")
        consts[const.name] = const
        problem = value_problem(const.value, const.elem)
        if problem is not None:
            bag.error(const.loc, f"scalar constant %{const.name} = "
                      f"{format_number(const.value)} {problem}")
    kernel = symbols.kernels.get(task.kernel)
    if kernel is None:
        bag.error(task.kernel.loc, f"undefined kernel @{task.kernel}"
                  + symbols.did_you_mean(task.kernel, "kernel"))
        return
    _check_run(task, kernel, aliases, consts, bag)


def _closest(name: str, names) -> str:
    close = closest_name(name, names)
    return f"; did you mean %{close}?" if close else ""


def _check_run(task, kernel, aliases, consts, bag: DiagnosticBag) -> None:
    params = kernel.params
    if len(task.run_args) != len(params):
        bag.error(task.run_loc, f"run passes {len(task.run_args)} arguments to @{kernel.name}, "
                  f"whose contract has {len(params)}: ({', '.join(p.name for p in params)})",
                  ((kernel.loc, f"@{kernel.name} is declared here"),))
    used = set()
    for arg, param in zip(task.run_args, params):
        used.add(str(arg))
        where = f"argument '{param.name}' of @{kernel.name}"
        if param.is_memref:
            if arg in consts:
                bag.error(arg.loc, f"{where} is {param.type_str()}; got scalar constant %{arg}")
            elif arg not in aliases:
                bag.error(arg.loc, f"undefined %{arg} in run(...); expected a name bound by "
                          "inputs(... as %x) or outputs(... as %x)" + _closest(arg, aliases))
            elif aliases[arg] is not None and not param.memref.matches(aliases[arg].type):
                got = aliases[arg].type
                bag.error(arg.loc, f"{where} is {param.type_str()}; got %{arg} of type "
                          f"{got.shape_str()} (rank {got.rank})")
        else:
            if arg in aliases:
                bag.error(arg.loc, f"{where} is scalar {param.scalar}; got buffer %{arg}")
            elif arg not in consts:
                bag.error(arg.loc, f"undefined %{arg} in run(...); expected a scalar constant "
                          f"of the region, like %{param.name} = const 0.0 : {param.scalar}"
                          + _closest(arg, consts))
            elif consts[arg].elem is not param.scalar:
                bag.error(arg.loc, f"{where} is {param.scalar}; got %{arg} of type "
                          f"{consts[arg].elem}")
    for name in aliases:
        if name not in used:
            bag.warning(getattr(name, "loc", task.loc), f"%{name} is bound but not passed to run(...)")
