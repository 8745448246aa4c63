"""The module: plain data for a whole network (the "topology" of OpenVINO's GPU graph design).

Objects refer to each other by name (``Ref``), never by pointer, so the IR is
trivially printable, comparable and serializable.  Every object keeps its source
location; locations never take part in equality, so ``parse(print(m)) == m``.
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from vpuc.diagnostics import UNKNOWN_LOC, Loc
from vpuc.ir.tasks import TaskList, copy_task_list
from vpuc.ir.types import ElemType, MemRefPattern, TensorType

if TYPE_CHECKING:
    from vpuc.ir.graph import Graph
    from vpuc.ir.provenance import LayerSource


class Ref(str):
    """A symbol reference (``%x`` or ``@k`` without its sigil) that remembers where it was written.

    It compares, hashes and prints as the plain name, so the location never
    affects equality.  The location is kept packed in one int (a module holds
    about 13 references per task; a ``Loc`` object each would be most of a
    parsed module's memory) and unpacked when asked for.
    """

    __slots__ = ("_at",)      # no per-name __dict__; the packed location (_pack_loc)

    def __new__(cls, name: str, loc: Loc = UNKNOWN_LOC) -> "Ref":
        ref = super().__new__(cls, name)
        ref._at = _pack_loc(loc)
        return ref

    @property
    def loc(self) -> Loc:
        return _unpack_loc(self._at)

    def __reduce__(self):
        return (Ref, (str(self), self.loc))


# File names of packed locations, numbered as first seen (a process parses few files).
_LOC_FILES: list[str] = [UNKNOWN_LOC.file]
_LOC_FILE_NUMBER: dict[str, int] = {UNKNOWN_LOC.file: 0}
_LINE_BITS, _COL_BITS = 32, 20


def _pack_loc(loc):
    """``loc`` as one int: file number, line, column (0 is UNKNOWN_LOC); anything that does
    not pack (another location type, numbers out of range) is kept as it is."""
    if loc is UNKNOWN_LOC:
        return 0
    if type(loc) is not Loc or not (0 <= loc.line >> _LINE_BITS == 0 <= loc.col >> _COL_BITS):
        return loc
    number = _LOC_FILE_NUMBER.get(loc.file)
    if number is None:
        number = _LOC_FILE_NUMBER.setdefault(loc.file, len(_LOC_FILES))
        if number == len(_LOC_FILES):
            _LOC_FILES.append(loc.file)
    return (number << (_LINE_BITS + _COL_BITS)) | (loc.line << _COL_BITS) | loc.col


def _unpack_loc(at) -> Loc:
    if type(at) is not int:
        return at
    if at == 0:
        return UNKNOWN_LOC
    line = (at >> _COL_BITS) & ((1 << _LINE_BITS) - 1)
    return Loc(_LOC_FILES[at >> (_LINE_BITS + _COL_BITS)], line, at & ((1 << _COL_BITS) - 1))


def loc_field() -> Loc:
    return field(default=UNKNOWN_LOC, compare=False, repr=False)


# ---------------------------------------------------------------- kernels

class KernelSourceKind(Enum):
    LIBRARY = "library"      # a kernel of our library in kernels/, by name
    ASM = "asm"              # a path to a SHAVE assembly file
    ELF = "elf"              # a path to a kernel ELF object
    GENERATED = "generated"  # produced by the fusion pipeline


@dataclass(slots=True)
class KernelSource:
    kind: KernelSourceKind
    ref: str = ""            # library name or path; empty for generated

    def __str__(self) -> str:
        if self.kind is KernelSourceKind.GENERATED:
            return "generated"
        return f'{self.kind.value} "{self.ref}"'


class Direction(Enum):
    """What a kernel does with a memref argument (docs/vir.md, "Kernels")."""

    IN = "in"          # reads it only
    OUT = "out"        # writes it (and may read what it wrote)
    INOUT = "inout"    # reads it, then writes it

    def __str__(self) -> str:
        return self.value

    @property
    def writes(self) -> bool:
        return self is not Direction.IN

    @property
    def reads(self) -> bool:
        return self is not Direction.OUT


@dataclass(slots=True)
class KernelParam:
    """One argument of a kernel's contract: a memref (becomes MemRefData) or a scalar.

    ``direction`` is what the declaration says (None: not written; a library
    kernel then takes it from the library's contract, other kernels leave it to
    the ``run()`` bindings).  Scalars are always read and carry none.
    """

    name: str
    memref: MemRefPattern | None = None
    scalar: ElemType | None = None
    loc: Loc = loc_field()
    direction: Direction | None = None

    @property
    def is_memref(self) -> bool:
        return self.memref is not None

    def type_str(self) -> str:
        return str(self.memref) if self.memref is not None else str(self.scalar)

    def __str__(self) -> str:
        """As VIR declares it: ``name: [direction] type``."""
        head = f"{self.direction} " if self.direction is not None else ""
        return f"{self.name}: {head}{self.type_str()}"


@dataclass(slots=True)
class KernelDecl:
    name: str
    params: list[KernelParam]
    source: KernelSource
    loc: Loc = loc_field()


@dataclass(slots=True)
class RuntimeDecl:
    """``VPURT.Graph``: the runtime kernel and the per-tile ACT SHAVE stack sizes."""

    kernel: Ref
    stacks: tuple[int, ...]
    loc: Loc = loc_field()


# ---------------------------------------------------------------- buffers

class BufferKind(Enum):
    INPUT = "input"     # a named network input, in DDR
    OUTPUT = "output"   # a named network output, in DDR
    DDR = "ddr"         # scratch DDR
    CMX = "cmx"         # on a tile's CMX
    CONST = "const"     # constant data, in DDR

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ConstInit:
    """Initial contents of a constant: inline values, a splat, or a .npy path."""

    values: tuple[float | int, ...] | None = None
    splat: float | int | None = None
    path: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f'file "{self.path}"'
        if self.splat is not None:
            return f"splat {format_number(self.splat)}"
        return "[" + ", ".join(format_number(v) for v in self.values or ()) + "]"


@dataclass(slots=True)
class Buffer:
    name: str
    kind: BufferKind
    type: TensorType
    tile: int | None = None      # CMX only
    offset: int | None = None    # None: left to the allocator
    init: ConstInit | None = None
    loc: Loc = loc_field()


@dataclass(slots=True)
class Slice:
    """One dim of a view: ``start:stop:step`` over the base's logical dim."""

    start: int
    stop: int
    step: int = 1

    @property
    def size(self) -> int:
        return max(0, (self.stop - self.start + self.step - 1) // self.step)

    def __str__(self) -> str:
        if self.step == 1 and self.stop == self.start + 1:
            return str(self.start)
        text = f"{self.start}:{self.stop}"
        return text if self.step == 1 else f"{text}:{self.step}"


@dataclass(slots=True)
class View:
    """A strided sub-view of a buffer (or of another view); rank is preserved."""

    name: str
    base: Ref
    slices: tuple[Slice, ...]
    loc: Loc = loc_field()


@dataclass(slots=True)
class Barrier:
    name: str
    physical: int | None = None  # None: virtual, assigned later
    loc: Loc = loc_field()


# ---------------------------------------------------------------- module

@dataclass
class Module:
    name: str
    arch: str = "NPU37XX"
    kernels: list[KernelDecl] = field(default_factory=list)
    runtime: RuntimeDecl | None = None
    buffers: list[Buffer] = field(default_factory=list)
    views: list[View] = field(default_factory=list)
    barriers: list[Barrier] = field(default_factory=list)
    task_lists: list[TaskList] = field(default_factory=list)
    # Graph-level blocks (vpuc/ir/graph.py): networks before fusion, or fused subgraph bodies.
    graphs: list["Graph"] = field(default_factory=list)
    # What the lowering recorded: the ONNX nodes behind each layer's tasks (provenance.py).
    layers: list["LayerSource"] = field(default_factory=list)
    loc: Loc = loc_field()
    # Facts the passes have established (e.g. "cmx-allocated"); printed as a comment.
    attributes: dict[str, str] = field(default_factory=dict, compare=False)

    # A module read from a blob builds its task lists, views and barriers when first asked
    # (``defer_task_lists``, ``defer_views``, ``defer_barriers``): a timing-only simulation
    # reads the blob's columns instead (vpuc/task_tables.py).
    def defer_task_lists(self, make) -> None:
        """``task_lists`` made by ``make()`` on first access (equality, printing, copies and
        pickles included); until then ``task_lists_built`` is False."""
        self.__dict__.pop("task_lists", None)
        self.__dict__["_make_task_lists"] = make

    def defer_views(self, make) -> None:
        """``views`` made by ``make()`` on first access, as ``defer_task_lists``."""
        self.__dict__.pop("views", None)
        self.__dict__["_make_views"] = make

    def defer_barriers(self, make) -> None:
        """``barriers`` made by ``make()`` on first access, as ``defer_task_lists``; until
        then ``barriers_built`` is False."""
        self.__dict__.pop("barriers", None)
        self.__dict__["_make_barriers"] = make

    @property
    def task_lists_built(self) -> bool:
        return "task_lists" in self.__dict__

    @property
    def views_built(self) -> bool:
        return "views" in self.__dict__

    @property
    def barriers_built(self) -> bool:
        return "barriers" in self.__dict__

    def __getattr__(self, name: str):
        # Only reached when a deferred field is not an instance attribute yet (the dataclass
        # keeps no class attribute for a default_factory field).
        make = self.__dict__.get(_DEFERRED.get(name, ""))
        if make is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        made = self.__dict__[name] = make()
        del self.__dict__[_DEFERRED[name]]
        return made

    def __getstate__(self) -> dict:
        self.task_lists, self.views, self.barriers  # built: a pickle holds lists, not closures
        return {k: v for k, v in self.__dict__.items() if k not in _MAKERS}


def copy_program(module: Module) -> Module:
    """A copy of a lowered program that scheduling it leaves ``module`` as it was: new
    buffers (offsets), barriers, views, task lists and tasks (``copy_task_list``); kernels,
    graphs and layer records shared, which no scheduling step changes.  Cheaper than
    parsing its text again (MobileNetV3-Small at 224: a tenth of the 0.25 s)."""
    twin = copy(module)
    twin.buffers = [copy(b) for b in module.buffers]
    twin.views = [copy(v) for v in module.views]
    twin.barriers = [copy(b) for b in module.barriers]
    twin.task_lists = [copy_task_list(tl) for tl in module.task_lists]
    twin.kernels, twin.graphs = list(module.kernels), list(module.graphs)
    twin.layers, twin.attributes = list(module.layers), dict(module.attributes)
    return twin


# Each deferrable field and the instance key of the function that makes it.
_DEFERRED = {"task_lists": "_make_task_lists", "views": "_make_views",
             "barriers": "_make_barriers"}
_MAKERS = frozenset(_DEFERRED.values())


def format_number(value: float | int) -> str:
    """Canonical text of a number: ints as ints, floats round-trippable."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value))
    return text
