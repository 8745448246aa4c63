"""Symbol resolution: names → declarations, and views → concrete memory regions.

A ``Region`` is what every later stage needs to know about a buffer operand:
which root buffer holds it, where (memory kind, tile), its tensor type, its
byte offset inside the root, its strides in bits and the bytes it spans.
Views compose: a view of a view resolves to one region of the root.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from vpuc.diagnostics import DiagnosticBag, Loc, closest_name
from vpuc.ir.module import Barrier, Buffer, BufferKind, KernelDecl, Module, View
from vpuc.ir.types import TensorType


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    root: Buffer
    type: TensorType
    byte_offset: int              # from the start of the root buffer
    strides_bits: tuple[int, ...]  # per logical dim
    span_bytes: int               # bytes from the first to past the last element

    @property
    def kind(self) -> BufferKind:
        return self.root.kind

    @property
    def tile(self) -> int | None:
        return self.root.tile

    @property
    def is_dense(self) -> bool:
        return self.span_bytes == self.type.nbytes

    def memory_key(self) -> tuple:
        """Which memory the region lives in: DDR buffers are separate objects, CMX is per tile."""
        if self.kind is BufferKind.CMX:
            return ("cmx", self.root.tile)
        return ("ddr", self.root.name)


SHAPE_META_ALIGN = 16


def shape_meta_offset(buffer: Buffer) -> int:
    """Where a dynamic CMX buffer's dims and strides sit, from the buffer's start.

    A dynamic tensor's actual dims are only known at run time: the kernel that
    produces it writes them (seed: "located in WIN_F (dynamic case)"), so they
    live in CMX right after the data, at the upper bounds: int32 dims, then
    int64 strides in bits.
    """
    return (buffer.type.nbytes + SHAPE_META_ALIGN - 1) // SHAPE_META_ALIGN * SHAPE_META_ALIGN


def buffer_footprint(buffer: Buffer) -> int:
    """Bytes a buffer occupies in its memory, with a dynamic CMX buffer's shape metadata."""
    if buffer.kind is BufferKind.CMX and not buffer.type.is_static:
        rank = buffer.type.rank
        dims_bytes = (4 * rank + 7) // 8 * 8  # int32 dims, padded so the int64 strides align
        return shape_meta_offset(buffer) + dims_bytes + 8 * rank
    return buffer.type.nbytes


def dense_strides_bits(tensor: TensorType) -> tuple[int, ...]:
    return tuple(s * tensor.elem.bits for s in tensor.dense_strides())


def span_of(tensor: TensorType, strides_bits: tuple[int, ...]) -> int:
    if tensor.num_elements == 0:
        return 0
    last_bit = sum(map(operator.mul, tensor.bound_shape, strides_bits)) - sum(strides_bits)
    return (last_bit + tensor.elem.bits + 7) // 8


class SymbolTable:
    """Lookup of every module-level name, with duplicates and bad views reported."""

    def __init__(self, module: Module, bag: DiagnosticBag | None = None) -> None:
        self.module = module
        self.bag = bag if bag is not None else DiagnosticBag()
        self.kernels: dict[str, KernelDecl] = {}
        self.buffers: dict[str, Buffer] = {}
        self.views: dict[str, View] = {}
        self.barriers: dict[str, Barrier] = {}
        self._regions: dict[str, Region | None] = {}
        self._types: dict[tuple, TensorType] = {}
        self._strides: dict[tuple, tuple] = {}
        self._declare_all()

    def _declare(self, table: dict, name: str, item, what: str, sigil: str = "%") -> None:
        previous = self._find_value(name) if sigil == "%" else table.get(name)
        if previous is not None:
            self.bag.error(item.loc, f"duplicate symbol {sigil}{name}",
                           ((previous.loc, f"{sigil}{name} was first declared here"),))
            return
        table[name] = item

    def _find_value(self, name: str):
        return self.buffers.get(name) or self.views.get(name) or self.barriers.get(name)

    def _declare_all(self) -> None:
        for kernel in self.module.kernels:
            self._declare(self.kernels, kernel.name, kernel, "kernel", "@")
        for buffer in self.module.buffers:
            self._declare(self.buffers, buffer.name, buffer, "buffer")
        for view in self.module.views:
            self._declare(self.views, view.name, view, "view")
        for barrier in self.module.barriers:
            self._declare(self.barriers, barrier.name, barrier, "barrier")

    def did_you_mean(self, name: str, kind: str) -> str:
        """"; did you mean %x?" for a misspelt name of a ``kind`` ("buffer" covers views,
        "barrier", "kernel"), or "" when nothing is close."""
        candidates = {"buffer": [*self.buffers, *self.views], "barrier": self.barriers,
                      "kernel": self.kernels}[kind]
        close = closest_name(name, candidates)
        return f"; did you mean {'@' if kind == 'kernel' else '%'}{close}?" if close else ""

    def is_buffer_like(self, name: str) -> bool:
        return name in self.buffers or name in self.views

    def region(self, name: str) -> Region | None:
        """The resolved region of a buffer or view, or None if it is not one (or is invalid).

        A chain of views is walked iteratively down to its root and resolved back
        up, so chains of any length (declared in any order) cannot overflow the stack.
        """
        if name in self._regions:
            return self._regions[name]
        chain: list[str] = []
        on_chain: set[str] = set()
        current = name
        while current not in self._regions and current in self.views and current not in on_chain:
            chain.append(current)
            on_chain.add(current)
            current = self.views[current].base
        if current in self._regions:
            base = self._regions[current]
        elif current in on_chain:
            view = self.views[current]
            self.bag.error(view.loc, f"view %{current} is defined in terms of itself")
            base = None
        elif current in self.buffers:
            base = self._buffer_region(self.buffers[current])
            self._regions[current] = base
        else:
            if chain:
                view = self.views[chain[-1]]
                self.bag.error(view.base.loc, f"view %{view.name} slices undefined buffer "
                               f"%{view.base}" + self.did_you_mean(view.base, "buffer"))
            base = None
        for view_name in reversed(chain):
            base = None if base is None else self._slice(self.views[view_name], base)
            self._regions[view_name] = base
        return self._regions.get(name)

    @staticmethod
    def _buffer_region(buffer: Buffer) -> Region:
        strides = dense_strides_bits(buffer.type)
        return Region(buffer.name, buffer, buffer.type, 0, strides, span_of(buffer.type, strides))

    def _slice(self, view: View, base: Region) -> Region | None:
        shape = base.type.bound_shape
        if len(view.slices) != len(shape):
            self.bag.error(view.loc, f"view %{view.name} has {len(view.slices)} slices but "
                           f"%{view.base} has rank {len(shape)}; expected one slice per dim")
            return None
        if not base.type.is_static:
            self.bag.error(view.loc, f"view %{view.name} slices %{view.base}, which has dynamic "
                           "dims; expected a statically shaped base")
            return None
        dims, strides, offset_bits = [], [], base.byte_offset * 8
        for piece, size, stride in zip(view.slices, shape, base.strides_bits):
            start, stop, step = piece.start, piece.stop, piece.step
            if stop == -1:
                stop = size
            if step < 1 or not (0 <= start < stop <= size):
                self._bad_slice(view, shape)
                return None
            dims.append((stop - start + step - 1) // step)
            strides.append(stride * step)
            offset_bits += start * stride
        if offset_bits % 8:
            self.bag.error(view.loc, f"view %{view.name} starts inside a byte; expected a "
                           "byte-aligned start")
            return None
        key = (tuple(dims), base.type.elem, base.type.order)
        tensor = self._types.get(key)
        if tensor is None:      # views of one shape share their type
            tensor = self._types[key] = TensorType(*key)
        strides_t = tuple(strides)
        strides_t = self._strides.setdefault(strides_t, strides_t)   # shared like the types
        return Region(view.name, base.root, tensor, offset_bits // 8, strides_t,
                      span_of(tensor, strides_t))

    def _graph_value_hint(self, name: str) -> str:
        """Why a task cannot name a value of a graph block, or ""."""
        for graph in self.module.graphs:
            op = next((op for op in graph.ops if op.result == name), None)
            if op is not None:
                return (f"; %{name} is a value inside graph @{graph.name}, which tasks do not "
                        f"see: return it with Result(%{name}) and declare the buffer it "
                        f"writes, 'ddr %{name} : {op.type}'")
        return ""

    def _bad_slice(self, view: View, shape: tuple[int, ...]) -> None:
        for axis, (piece, size) in enumerate(zip(view.slices, shape)):
            stop = size if piece.stop == -1 else piece.stop
            if piece.step < 1 or not (0 <= piece.start < stop <= size):
                self.bag.error(view.loc, f"view %{view.name}: slice {piece.start}:{stop}"
                               f"{'' if piece.step == 1 else f':{piece.step}'} of dim {axis} "
                               f"is out of range; expected 0 <= start < stop <= {size} and "
                               "step >= 1")
                return

    def require_region(self, ref: str, loc: Loc | None, role: str) -> Region | None:
        """Resolve an operand, reporting an undefined or non-buffer name."""
        if not self.is_buffer_like(ref):
            if ref in self.barriers:
                self.bag.error(loc, f"{role} %{ref} is a barrier; expected a buffer or view")
            else:
                self.bag.error(loc, f"undefined buffer %{ref} used as {role}"
                               + (self._graph_value_hint(ref) or self.did_you_mean(ref, "buffer")))
            return None
        return self.region(ref)
