"""Verifier rules for argument wiring: library declarations and run(...) bindings.

A ``kernel @k(...) from library "NAME"`` declaration must match the library's
contract (``kernels/contracts.toml``, ``vpuc.kernel_contracts``): the argument
count, their order and kinds, element types (with the contract's type
variables: ``add`` has one type for a, b and output), ranks, declared shapes
and directions.  Each error prints the contract.

A ``run(...)`` must then bind what the kernel writes under ``outputs(...)`` and
what it only reads under ``inputs(...)``: the race checker and the reference
trust those bindings, so a kernel writing an input binding would go unnoticed.
For a library kernel the buffers it passes must also fit the contract's shape
rule, which the kernel would otherwise reject at run time (status 2).
Directions come from the library's contract for library kernels, else from
the declaration; an asm, elf or generated kernel without declared directions
leaves the bindings as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.diagnostics import DiagnosticBag, Loc, VpucError
from vpuc.ir.module import Direction, KernelDecl, KernelParam, KernelSourceKind, Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import SwKernelTask
from vpuc.ir.types import Dynamic
from vpuc.kernel_contracts import (MAX_RANK, ArgContract, KernelContract, kernel_directions,
                                   library_contract)
from vpuc.kernel_library import library_source

_DOES = {Direction.IN: "only reads", Direction.OUT: "writes", Direction.INOUT: "reads and writes"}


def check_wiring(module: Module, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    for kernel in module.kernels:
        if kernel.source.kind is KernelSourceKind.LIBRARY:
            check_library_declaration(kernel, bag)
    kernels = {k.name: k for k in module.kernels}
    wirings: dict[str, _KernelWiring] = {}
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if isinstance(task, SwKernelTask) and task.kernel in kernels:
                wiring = wirings.get(task.kernel)
                if wiring is None:
                    wiring = wirings[task.kernel] = _KernelWiring(kernels[task.kernel])
                check_run_bindings(task, kernels[task.kernel], symbols, bag, wiring)


# ---------------------------------------------------------------- declarations

def check_library_declaration(kernel: KernelDecl, bag: DiagnosticBag) -> None:
    library = kernel.source.ref
    contract = library_contract(library)
    if contract is None:       # every library kernel has one: the name is unknown
        try:
            library_source(library)
        except VpucError as exc:
            bag.error(kernel.loc, f"kernel @{kernel.name}: {exc.diagnostics[0].message}")
        return
    note = ((None, contract.text()),)
    found = []

    def error(loc: Loc, message: str) -> None:
        found.append(message)
        bag.error(loc, message, note)

    params, args = kernel.params, contract.args
    if len(params) != len(args):
        what = f"kernel @{kernel.name} declares {_count(len(params))}, but library kernel " \
               f"\"{library}\" takes {len(args)}"
        if len(params) > len(args):
            extra = params[len(args)]
            error(extra.loc, f"{what}: '{extra.name}' has no place in its contract")
        else:
            missing = ", ".join(f"'{a.name}'" for a in args[len(params):])
            error(kernel.loc, f"{what}: missing {missing}")
        return
    bound: dict[str, tuple[KernelParam, object]] = {}   # type variable -> first param giving it
    for index, (param, arg) in enumerate(zip(params, args)):
        problem = _argument_problem(kernel, index, param, arg, contract, bound)
        if problem is not None:
            error(param.loc, problem)
    if not found:
        for loc, problem in _declared_shape_problems(kernel, contract):
            error(loc, problem)


def _count(n: int) -> str:
    return f"{n} argument" if n == 1 else f"{n} arguments"


def _argument_problem(kernel: KernelDecl, index: int, param: KernelParam, arg: ArgContract,
                      contract: KernelContract, bound: dict) -> str | None:
    where = f"argument {index + 1} '{param.name}' of @{kernel.name}"
    library = f"library kernel \"{contract.name}\""
    elsewhere = next((i for i, a in enumerate(contract.args)
                      if a.name == param.name and i != index), None)
    if elsewhere is not None:
        return (f"{where} is in the place of '{arg.name}'; {library} takes '{param.name}' as "
                f"argument {elsewhere + 1}: declare the arguments in the contract's order")
    if param.is_memref != arg.memref:
        have = "a memref" if param.is_memref else f"scalar {param.scalar}"
        want = f"a memref '{arg.name}'" if arg.memref else f"scalar '{arg.name}: {arg.elem}'"
        return f"{where} is {have}; {library} takes {want} there"
    if not arg.memref:
        if param.scalar.value != arg.elem:
            return f"{where} is {param.scalar}; {library} takes '{arg.name}: {arg.elem}' there"
        return None
    if param.direction is not None and param.direction is not arg.direction:
        return (f"{where} is declared '{param.direction}', but {library} "
                f"{_DOES[arg.direction]} '{arg.name}': expected '{arg.direction}'")
    elem, allowed = param.memref.elem, contract.types[arg.elem]
    if elem not in allowed:
        return (f"{where} has element type {elem}; {library} takes {arg.elem} in "
                f"{{{', '.join(str(e) for e in allowed)}}} there")
    first = bound.setdefault(arg.elem, (param, elem))
    if first[1] is not elem:
        return (f"{where} has element type {elem}, but {library} needs the element type of "
                f"'{first[0].name}' ({first[1]}) here: both are {arg.elem}")
    rank = param.memref.rank
    if rank is not None and rank > MAX_RANK:
        return f"{where} has rank {rank}; {library} takes ranks 0 to {MAX_RANK}"
    return None


@dataclass
class Operand:
    """A memref operand for ``shape_problems``: how messages name it, and its dims (None
    entries where unknown; ``dims`` None for any rank)."""

    loc: Loc | None
    label: str
    dims: tuple[int | None, ...] | None


def shape_problems(rule: str, inputs: list[Operand], out: Operand):
    """Dims that contradict the contract's shape rule, where both sides are known."""
    if out.dims is None:
        return
    if rule == "gather":
        yield from _gather_shape_problems(inputs, out)
        return
    if rule == "topk":
        yield from _topk_shape_problems(inputs, out)
        return
    for operand in inputs:
        dims = operand.dims
        if dims is None or rule != "same" and len(dims) == 0:
            continue
        if len(dims) != len(out.dims):
            also = "" if rule == "same" else " or 0"
            yield operand.loc, f"{operand.label} has rank {len(dims)}; expected the rank of " \
                               f"{out.label}, {len(out.dims)}{also}"
            continue
        for axis, (d, o) in enumerate(zip(dims, out.dims)):
            if d is None or o is None or rule == "reduce" and axis == len(dims) - 1:
                continue
            if rule != "same" and d not in (1, o):
                yield operand.loc, f"{operand.label}: dim {axis} is {d}; it broadcasts to " \
                                   f"{out.label} only if it is 1 or {o}"
            elif rule == "same" and d != o:
                yield operand.loc, f"{operand.label}: dim {axis} is {d}; {out.label} has {o}, " \
                                   "expected equal"
    if rule == "reduce" and out.dims and out.dims[-1] not in (None, 1):
        yield out.loc, f"{out.label} has {out.dims[-1]} along the reduced last dim; expected 1"


def _gather_shape_problems(inputs: list[Operand], out: Operand):
    """gather's rule: data [A, K, R], indices [N], output [A, N, R]; or data [K, R] and
    output [N, R] (A = 1: a table bound as it is declared, in DDR)."""
    data, indices = inputs
    rank = 2 if data.dims is not None and len(data.dims) == 2 else 3
    for operand, want in ((data, rank), (indices, 1), (out, rank)):
        if operand.dims is not None and len(operand.dims) != want:
            expected = "2 or 3" if operand is data else str(want)
            yield operand.loc, f"{operand.label} has rank {len(operand.dims)}; expected {expected}"
            return
    if rank == 2:
        data = Operand(data.loc, data.label, (1,) + tuple(data.dims))
        out = Operand(out.loc, out.label, (1,) + tuple(out.dims))
    pairs = []
    if data.dims is not None:
        pairs += [(data.dims[0], out.dims[0], "dim 0"), (data.dims[2], out.dims[2], "dim 2")]
    if indices.dims is not None:
        pairs.append((indices.dims[0], out.dims[1], "the indices' count (dim 1)"))
    for want, got, what in pairs:
        if None not in (want, got) and want != got:
            yield out.loc, f"{out.label}: {what} is {got}; expected {want}"


def _topk_shape_problems(inputs: list[Operand], out: Operand):
    """topk's rule: input [R, N], values [R, K], indices [R, K] (the indices are ``out``)."""
    data, values = inputs
    for operand in (data, values, out):
        if operand.dims is not None and len(operand.dims) != 2:
            yield operand.loc, f"{operand.label} has rank {len(operand.dims)}; expected 2"
            return
    pairs = []
    if data.dims is not None:
        pairs.append((data.dims[0], out.dims[0], "dim 0 (the rows)"))
    if values.dims is not None:
        pairs.append((values.dims[1], out.dims[1], "dim 1 (K)"))
    for want, got, what in pairs:
        if None not in (want, got) and want != got:
            yield out.loc, f"{out.label}: {what} is {got}; expected {want}"


def _declared_shape_problems(kernel: KernelDecl, contract: KernelContract):
    memrefs = [(p, a) for p, a in zip(kernel.params, contract.args) if a.memref]
    operands = [Operand(p.loc, f"argument '{p.name}' of @{kernel.name} ({p.memref})",
                         p.memref.dims) for p, _ in memrefs]
    written = [i for i, (_, a) in enumerate(memrefs) if a.direction.writes]
    if written:                     # the last one written is the rule's output (topk: indices)
        out = operands.pop(written[-1])
        out.label = "output" + out.label[len("argument"):]
        yield from shape_problems(contract.shapes, operands, out)


# ---------------------------------------------------------------- run(...)

class _KernelWiring:
    """What the run() checks need of a kernel, worked out once per kernel, not per task."""

    def __init__(self, kernel: KernelDecl) -> None:
        self.contract = None
        if kernel.source.kind is KernelSourceKind.LIBRARY:
            self.contract = library_contract(kernel.source.ref)
        self.directions = kernel_directions(kernel)
        self.shaped = self.contract is not None and len(self.contract.args) == len(kernel.params)
        self.checked: set[tuple] = set()    # bound types whose shape rule held

    def notes(self, kernel: KernelDecl) -> tuple:
        notes = [(kernel.loc, f"@{kernel.name} is declared here")]
        if self.contract is not None:
            notes.append((None, self.contract.text()))
        return tuple(notes)


def check_run_bindings(task: SwKernelTask, kernel: KernelDecl, symbols: SymbolTable,
                       bag: DiagnosticBag, wiring: _KernelWiring | None = None) -> None:
    wiring = wiring or _KernelWiring(kernel)
    inputs = {b.alias for b in task.inputs}
    outputs = {b.alias for b in task.outputs}
    wired = True
    for arg, param, direction in zip(task.run_args, kernel.params, wiring.directions):
        if direction is None:
            continue
        where = f"argument '{param.name}' of @{kernel.name}"
        if direction.writes and arg in inputs and arg not in outputs:
            bag.error(arg.loc, f"{where} is written by the kernel ({direction}), but %{arg} is "
                      "bound under inputs(...); bind the buffer it writes under outputs(...)",
                      wiring.notes(kernel))
            wired = False
        elif direction is Direction.IN and arg in outputs and arg not in inputs:
            bag.error(arg.loc, f"{where} is only read by the kernel (in), but %{arg} is bound "
                      "under outputs(...); pass a binding of inputs(...) here",
                      wiring.notes(kernel))
            wired = False
    if wired and wiring.shaped:
        for loc, problem in _bound_shape_problems(task, kernel, wiring, symbols):
            bag.error(loc, problem, wiring.notes(kernel))


def _bound_shape_problems(task: SwKernelTask, kernel: KernelDecl, wiring: _KernelWiring,
                          symbols: SymbolTable):
    """The contract's shape rule on the buffers a run() passes (static dims only): what the
    kernel would reject at run time with status 2.  The rule depends on the bound types
    only, so a combination of types that passed once is not checked again."""
    contract = wiring.contract
    bound = {b.alias: b.buffer for b in task.inputs + task.outputs}
    bound_types = []
    for arg, param, slot in zip(task.run_args, kernel.params, contract.args):
        if not slot.memref:
            continue
        region = symbols.region(bound[arg]) if arg in bound else None
        if region is None or not param.memref.matches(region.type):
            return                  # reported by the task rules
        bound_types.append((arg, param, slot, region.type))
    key = tuple(t for *_, t in bound_types)
    if key in wiring.checked:
        return
    inputs, out = [], None
    for arg, param, slot, tensor in bound_types:
        dims = tuple(None if isinstance(d, Dynamic) else d for d in tensor.dims)
        shape = tensor.shape_str()
        if slot.direction.writes:
            if out is not None:     # an earlier output (topk's values): an operand of the rule
                inputs.append(out)
            out = Operand(arg.loc, f"output %{arg} of @{kernel.name} ({shape})", dims)
        else:
            inputs.append(Operand(arg.loc, f"argument '{param.name}' of @{kernel.name}, "
                                            f"%{arg} ({shape})", dims))
    problems = list(shape_problems(contract.shapes, inputs, out)) if out is not None else []
    if not problems:
        wiring.checked.add(key)
    yield from problems
