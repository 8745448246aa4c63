"""Names resolved to regions once per run, mostly without the symbol table.

``Plan.region`` resolves a view through a ``SymbolTable``, which declares every
name of the module first (a MobileNetV3 has 2,800 buffers and views).  Most
names a run resolves are a static buffer or a view of one: ``Regions`` makes
their ``Region`` by the symbol table's own arithmetic (``SymbolTable._slice``)
from the buffer's placement, once per name, and leaves everything else (views
of views, dynamic buffers, anything the symbol table would report) to
``Plan.region``.  The race detector's accesses and the ACT SHAVE engine's
bindings share one.
"""

from __future__ import annotations

import weakref

from runtime_sim.memory import Memory
from runtime_sim.plan import Plan
from vpuc.ir.symbols import Region
from vpuc.ir.types import TensorType
from vpuc.task_tables import views_by_name


def slice_arithmetic(slices, shape, strides) -> tuple | None:
    """``SymbolTable._slice``'s arithmetic for ``slices`` of a root of ``shape`` and bit
    ``strides``: (extents, bit strides, bit offset, bit offset of the last element from
    the first), or None where the symbol table would report the slices."""
    if len(slices) != len(shape):
        return None
    dims, view_strides, offset, last = [], [], 0, 0
    for piece, size, stride in zip(slices, shape, strides):
        start, stop, step = piece.start, piece.stop, piece.step
        if stop == -1:
            stop = size
        if step < 1 or not 0 <= start < stop <= size:
            return None
        extent = (stop - start + step - 1) // step
        dims.append(extent)
        step *= stride
        view_strides.append(step)
        offset += start * stride
        last += (extent - 1) * step
    return dims, view_strides, offset, last


class Regions:
    """``regions(name)``: ``plan.region(name)``, the same ``Region``, made once."""

    def __init__(self, plan: Plan, memory: Memory) -> None:
        # The plan resolves its operands through this object (``Plan.resolve_with``): a
        # weak reference back, so a finished run's plan and regions go by reference counting
        self._plan, self.memory = weakref.ref(plan), memory
        # by name, each made when asked while a read program's views are unbuilt
        self.views = views_by_name(plan.program)
        self.roots: dict[str, tuple | None] = {}
        self.found: dict[str, Region] = {}

    def __call__(self, name: str) -> Region:
        found = self.found.get(name)
        if found is None:
            view = None if name in self.memory.buffers else self.views.get(name)
            base = view.base if view is not None else name
            root = self.roots.get(base, False)
            if root is False:
                root = self.root(base)
            if root is None:
                found = None
            elif view is None:
                buffer = self.memory.buffers[name]
                # a dense type spans its nbytes (0 when empty, as ``span_of`` gives)
                found = Region(name, buffer, buffer.type, 0, root[1], buffer.type.nbytes)
            else:
                found = self._view_region(view, root)
            if found is None:
                found = self._plan().region(name)          # its checks, its errors
            self.found[name] = found
        return found

    def root(self, name: str) -> tuple | None:
        """(shape, strides in bits, element bits, memory, offset) of a static buffer; None
        for a dynamic or unknown name."""
        memory = self.memory
        buffer = memory.buffers.get(name)
        if buffer is None or name in memory.dynamic:
            found = None
        else:
            bits = buffer.type.elem.bits
            found = (buffer.type.bound_shape,
                     tuple(s * bits for s in buffer.type.dense_strides()),
                     bits) + memory.placement[name]
        self.roots[name] = found
        return found

    def _view_region(self, view, root: tuple) -> Region | None:
        """``SymbolTable._slice`` of a view of a static buffer; None where it would report."""
        shape, strides, bits = root[:3]
        sliced = slice_arithmetic(view.slices, shape, strides)
        if sliced is None:
            return None
        dims, view_strides, offset, last = sliced
        if offset % 8:
            return None
        buffer = self.memory.buffers[view.base]
        tensor = TensorType(tuple(dims), buffer.type.elem, buffer.type.order)
        # every extent is at least 1: ``span_of`` without its empty case
        return Region(view.name, buffer, tensor, offset // 8, tuple(view_strides),
                      (last + bits + 7) // 8)
