"""Verifier rules for declarations: kernels, runtime, buffers, views, barriers."""

from __future__ import annotations

from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import BufferKind, Module, format_number
from vpuc.ir.symbols import SymbolTable, buffer_footprint
from vpuc.ir.types import ElemType

# Largest finite value of each float type; integers get their two's-complement range.
_FLOAT_MAX = {ElemType.F16: 65504.0, ElemType.BF16: 3.3895313892515355e38,
              ElemType.F32: 3.4028234663852886e38, ElemType.F64: float("inf")}


_INT64 = (-(1 << 63), (1 << 63) - 1)


def value_problem(value: float | int, elem: ElemType) -> str | None:
    """Why ``value`` cannot be stored as ``elem`` (a phrase such as "does not fit u8
    (0..255)"), or None if it can.  An integer literal is an int64 whatever the type (the
    blob's Number holds it as one)."""
    if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
        return (f"is an integer literal beyond 64 bits; integer literals are int64 "
                f"({_INT64[0]}..{_INT64[1]})")
    if elem.is_float:
        limit = _FLOAT_MAX[elem]
        if value == value and abs(value) != float("inf") and abs(value) > limit:
            return f"overflows {elem}, whose largest finite value is {limit:g}"
        return None
    if isinstance(value, float):
        return f"is not an integer, but {elem} holds integers"
    signed = elem.value.startswith("i")
    low, high = (-(1 << (elem.bits - 1)), (1 << (elem.bits - 1)) - 1) if signed \
        else (0, (1 << elem.bits) - 1)
    if not low <= value <= high:
        return f"does not fit {elem} ({low}..{high})"
    return None


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def check_module_header(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    executors_seen: dict = {}
    for task_list in module.task_lists:
        first = executors_seen.get(task_list.executor)
        if first is not None:
            bag.error(task_list.loc, f"second task list for {task_list.executor}; expected one "
                      "task list per executor", ((first.loc, "the first one is here"),))
        else:
            executors_seen[task_list.executor] = task_list


def check_kernels(module: Module, bag: DiagnosticBag) -> None:
    for kernel in module.kernels:
        names: dict[str, object] = {}
        for param in kernel.params:
            if param.name in names:
                bag.error(param.loc, f"kernel @{kernel.name} has two arguments named '{param.name}'")
            names[param.name] = param


def check_runtime(module: Module, arch: Arch, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    runtime = module.runtime
    if runtime is None:
        if module.graphs:
            return              # lowering the graphs declares the runtime their tasks use
        if any(tl.tasks for tl in module.task_lists if tl.executor.value == "ACT_SHAVE"):
            bag.warning(module.loc, "module has ACT SHAVE tasks but no 'runtime' declaration; "
                        "the default runtime kernel and stack sizes will be used")
        return
    kernel = symbols.kernels.get(runtime.kernel)
    if kernel is None:
        bag.error(runtime.kernel.loc, f"runtime refers to undefined kernel @{runtime.kernel}"
                  + symbols.did_you_mean(runtime.kernel, "kernel"))
    elif kernel.params:
        bag.error(runtime.kernel.loc, f"runtime kernel @{kernel.name} takes "
                  f"{_plural(len(kernel.params), 'argument')}; expected a kernel with none",
                  ((kernel.loc, f"@{kernel.name} is declared here"),))
    if len(runtime.stacks) != arch.tiles:
        bag.error(runtime.loc, f"runtime gives {_plural(len(runtime.stacks), 'stack size')}; "
                  f"expected one per tile ({arch.tiles} on {arch.name})")
    for size in runtime.stacks:
        if size <= 0 or size % 16:
            bag.error(runtime.loc, f"stack size {size} must be a positive multiple of 16 bytes")


def check_buffers(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    for buffer in module.buffers:
        where = f"{buffer.kind} %{buffer.name}"
        for dim in buffer.type.bound_shape:
            if dim <= 0:
                bag.error(buffer.loc, f"{where} has a dim of size {dim}; expected sizes >= 1")
                break
        if buffer.kind is BufferKind.CMX:
            if buffer.tile is None:
                bag.error(buffer.loc, f"{where} needs a tile: expected 'tile N'")
            elif not 0 <= buffer.tile < arch.tiles:
                bag.error(buffer.loc, f"{where} is on tile {buffer.tile}; {arch.name} has tiles "
                          f"0..{arch.tiles - 1}")
            elif buffer.offset is not None:
                end = buffer.offset + buffer_footprint(buffer)
                if buffer.offset < 0 or end > arch.cmx_bytes:
                    bag.error(buffer.loc, f"{where} occupies bytes {buffer.offset}..{end} of "
                              f"tile {buffer.tile}'s CMX; expected it to fit in "
                              f"{arch.cmx_bytes} bytes")
        elif buffer.tile is not None:
            bag.error(buffer.loc, f"{where} is in DDR; only cmx buffers have a tile")
        if buffer.offset is not None and buffer.offset < 0:
            bag.error(buffer.loc, f"{where} has negative offset {buffer.offset}")
        elif buffer.offset is not None and buffer.offset % buffer.type.elem.nbytes:
            _misaligned(buffer, where, bag)
        if buffer.kind in (BufferKind.INPUT, BufferKind.OUTPUT) and buffer.offset is not None:
            bag.error(buffer.loc, f"{where} is a network {buffer.kind}; its address is given at "
                      "run time, expected no 'at'")
        _check_init(buffer, bag)


def _misaligned(buffer, where: str, bag: DiagnosticBag) -> None:
    # Kernels get a buffer as MemRefData.dataAddr and read it through a pointer to its
    # element type (software layers HLD, "Kernel Arguments Contract"); C/C++ requires
    # such an object at a multiple of its alignment, which is its size for these types.
    elem, offset = buffer.type.elem, buffer.offset
    size = elem.nbytes
    below, above = offset - offset % size, offset - offset % size + size
    bag.error(buffer.loc, f"{where} is placed at byte {offset}, not a multiple of {size}; "
              f"{elem} elements need {size}-byte alignment (kernels read them through "
              f"{elem} pointers, C's natural alignment); expected 'at {below}' or 'at {above}'")


def _check_init(buffer, bag: DiagnosticBag) -> None:
    where = f"{buffer.kind} %{buffer.name}"
    if buffer.kind is BufferKind.CONST:
        if buffer.init is None:
            bag.error(buffer.loc, f"const %{buffer.name} has no value; expected '= [...]', "
                      "'= splat V' or '= file \"x.npy\"'")
        elif not buffer.type.is_static:
            bag.error(buffer.loc, f"const %{buffer.name} has dynamic dims; constants are static")
        elif buffer.init.values is not None and len(buffer.init.values) != buffer.type.num_elements:
            bag.error(buffer.loc, f"const %{buffer.name} has "
                      f"{_plural(len(buffer.init.values), 'value')}; expected "
                      f"{buffer.type.num_elements} for type {buffer.type.shape_str()}")
        else:
            values = buffer.init.values or ()
            if buffer.init.splat is not None:
                values = (buffer.init.splat,)
            for index, value in enumerate(values):
                problem = value_problem(value, buffer.type.elem)
                if problem is not None:
                    which = (f"splat value {format_number(value)}" if buffer.init.splat is not None
                             else f"value {format_number(value)} at index {index}")
                    bag.error(buffer.loc, f"const %{buffer.name}: {which} {problem}")
                    break  # one error per constant is enough
    elif buffer.init is not None:
        bag.error(buffer.loc, f"{where} has an initial value; only const buffers do")


def check_views(module: Module, symbols: SymbolTable) -> None:
    for view in module.views:
        symbols.region(view.name)  # resolving reports bad slices, cycles and undefined bases


def check_barriers(module: Module, arch: Arch, bag: DiagnosticBag) -> None:
    for barrier in module.barriers:
        if barrier.physical is not None and not 0 <= barrier.physical < arch.barriers:
            bag.error(barrier.loc, f"barrier %{barrier.name} uses physical id {barrier.physical}; "
                      f"{arch.name} has physical barriers 0..{arch.barriers - 1}")
