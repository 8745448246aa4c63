"""The library kernels' argument contracts, read from ``kernels/contracts.toml``.

A contract lists a kernel's arguments in params-struct order (name, memref or
scalar, element type or type variable, direction) and its type and shape rules;
the data file's header says what each field means.  The verifier checks every
``from library`` declaration and every ``run(...)`` against it
(``vpuc/verifier/wiring.py``); ``kernel_directions`` gives a library kernel's
directions from it.  The file is part of the repository: a
malformed entry is an error naming the file and the kernel.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from vpuc.diagnostics import VpucError
from vpuc.ir.module import Direction, KernelDecl, KernelSourceKind
from vpuc.ir.types import ELEM_BY_NAME, ElemType
from vpuc.kernel_library import library_names

CONTRACTS_PATH = Path(__file__).resolve().parent.parent / "kernels" / "contracts.toml"
MAX_RANK = 15                       # the driver's limit (kernels/include/driver.inc)
SHAPE_RULES = {
    "broadcast": "inputs broadcast to the output (each dim 1 or the output's, or rank 0)",
    "same": "input and output of one shape",
    "reduce": "inputs broadcast to the output but along the last dim, where the output is 1",
    "gather": "data [A, K, R], indices [N], output [A, N, R] (or data [K, R], output [N, R])",
    "topk": "input [R, N], values [R, K], indices [R, K]",
}


@dataclass(frozen=True)
class ArgContract:
    name: str
    memref: bool
    elem: str                       # a type variable (memrefs) or an element type (scalars)
    direction: Direction | None     # memrefs only

    def text(self) -> str:
        if self.memref:
            return f"{self.name}: {self.direction} memref<*x{self.elem}>"
        return f"{self.name}: {self.elem}"


@dataclass(frozen=True)
class KernelContract:
    name: str
    args: tuple[ArgContract, ...]
    types: dict[str, tuple[ElemType, ...]]
    shapes: str | None
    axis: int | None

    @property
    def memrefs(self) -> list[ArgContract]:
        return [a for a in self.args if a.memref]

    @property
    def inputs(self) -> list[ArgContract]:
        return [a for a in self.memrefs if a.direction is Direction.IN]

    @property
    def params_bytes(self) -> int:
        """Size of the params struct: a 32-byte MemRefData per memref, scalars packed."""
        return sum(32 if a.memref else ELEM_BY_NAME[a.elem].nbytes for a in self.args)

    def text(self) -> str:
        """The contract as one line: signature, type variables, shape rule."""
        parts = [f'library "{self.name}": ({", ".join(a.text() for a in self.args)})']
        for var, elems in self.types.items():
            parts.append(f"{var} in {{{', '.join(str(e) for e in elems)}}}")
        if self.shapes is not None:
            parts.append(SHAPE_RULES[self.shapes])
        return "; ".join(parts)


def _fail(name: str, message: str) -> VpucError:
    return VpucError(f"{CONTRACTS_PATH}: [{name}]: {message}")


def _arg(kernel: str, entry: object, types: dict) -> ArgContract:
    if not isinstance(entry, dict) or not {"name", "kind", "elem"} <= set(entry):
        raise _fail(kernel, f"argument {entry!r} needs name, kind and elem")
    name, kind, elem = entry["name"], entry["kind"], entry["elem"]
    if kind == "memref":
        if elem not in types:
            raise _fail(kernel, f"memref '{name}' has element type variable '{elem}', which "
                        "'types' does not define")
        direction = entry.get("direction")
        if direction not in {d.value for d in Direction}:
            raise _fail(kernel, f"memref '{name}' has direction {direction!r}; expected in, "
                        "out or inout")
        return ArgContract(name, True, elem, Direction(direction))
    if kind == "scalar":
        if elem not in ELEM_BY_NAME or "direction" in entry:
            raise _fail(kernel, f"scalar '{name}' needs an element type and no direction")
        return ArgContract(name, False, elem, None)
    raise _fail(kernel, f"argument '{name}' has kind {kind!r}; expected memref or scalar")


def _contract(name: str, table: dict) -> KernelContract:
    types: dict[str, tuple[ElemType, ...]] = {}
    for var, elems in table.get("types", {}).items():
        if not elems or any(e not in ELEM_BY_NAME for e in elems):
            raise _fail(name, f"type variable {var} = {elems!r}; expected element types")
        types[var] = tuple(ELEM_BY_NAME[e] for e in elems)
    args = tuple(_arg(name, entry, types) for entry in table.get("args", ()))
    shapes = table.get("shapes")
    if shapes is None and any(a.memref for a in args) or \
            shapes is not None and shapes not in SHAPE_RULES:
        raise _fail(name, f"shapes = {shapes!r}; expected one of {', '.join(SHAPE_RULES)}")
    if len({a.name for a in args}) != len(args):
        raise _fail(name, "two arguments share a name")
    return KernelContract(name, args, types, shapes, table.get("axis"))


@lru_cache(maxsize=1)
def library_contracts() -> dict[str, KernelContract]:
    """Every library kernel's contract, by library name."""
    try:
        data = tomllib.loads(CONTRACTS_PATH.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise VpucError(f"{CONTRACTS_PATH}: cannot read the library's contracts: {exc}") from None
    contracts = {name: _contract(name, table) for name, table in data.items()}
    missing = sorted(set(library_names()) - set(contracts))
    if missing:
        raise VpucError(f"{CONTRACTS_PATH}: no contract for library kernel(s) "
                        f"{', '.join(missing)}")
    return contracts


def library_contract(name: str) -> KernelContract | None:
    return library_contracts().get(name)


def kernel_directions(kernel: KernelDecl) -> list[Direction | None]:
    """What the kernel does with each argument: for a library kernel the library's contract
    says (a declaration contradicting it is the verifier's error), else the declaration;
    None for scalars and for undeclared asm/elf/generated memrefs (their run() bindings
    decide)."""
    contract = None
    if kernel.source.kind is KernelSourceKind.LIBRARY:
        contract = library_contract(kernel.source.ref)
    directions = []
    for i, param in enumerate(kernel.params):
        direction = param.direction if param.is_memref else None
        if param.is_memref and contract is not None and len(contract.args) == len(kernel.params) \
                and contract.args[i].memref:
            direction = contract.args[i].direction
        directions.append(direction)
    return directions
