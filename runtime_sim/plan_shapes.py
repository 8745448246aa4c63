"""The operand shapes the plan builder needs, resolved once per buffer or view name:
dims, element type, order, bytes, element bytes, in DDR and the contiguous run in
bytes, without offsets or strides (all that timing needs), and a small "shape class"
per name, the key of the transfer cache.  Every view of a buffer is classed in one
tight pass: views that differ only by their offsets share one lookup.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.ir.module import BufferKind
from vpuc.ir.types import TensorType
from vpuc.task_tables import distinct_rows, views_by_name


class OperandShapes:
    """Per buffer or view name: (dims, element type, dims order, bytes, element bytes,
    in DDR, contiguous run in bytes or None) without offsets or strides, all that timing
    needs; and ``classes``, a small int per name for its (bytes, element bytes, in DDR,
    run), the key of the transfer cache.

    Given the program's view columns (``views``, a ``vpuc.task_tables.ViewTable`` whose
    module's views are unbuilt), the classes of the views of buffers are found on the
    columns instead, as ``class_column`` (per tensor index, -1 where a view of a view is
    resolved on first use), one view made per distinct shape; ``classes`` then holds the
    buffers and what was asked by name."""

    def __init__(self, module, views=None, program=None) -> None:
        self.module = module
        self._program = program
        self.cache: dict[str, tuple] = {}
        for b in module.buffers:
            t = b.type
            self.cache[b.name] = (t.bound_shape, t.elem, t.order, t.nbytes, t.elem.nbytes,
                                  b.kind is not BufferKind.CMX, None)
        self._class_ids: dict[tuple, int] = {}
        self.class_info: list[tuple] = []    # class id -> a name's shape tuple
        self.classes: dict[str, int] = {name: self._class(shape)
                                        for name, shape in self.cache.items()}
        self.class_column: np.ndarray | None = None
        if views is not None and views.current(module):
            self._view_classes_by_columns(views)
        else:
            self._view_classes(module.views)
        self.tensors: dict[str, TensorType] = {}

    def _class(self, shape: tuple) -> int:
        key = shape[3:]
        found = self._class_ids.get(key)
        if found is None:
            found = self._class_ids[key] = len(self.class_info)
            self.class_info.append(shape)
        return found

    def _view_classes(self, views) -> None:
        """The class of every view of a buffer, in one tight pass (the 100k-task program
        has 50,000 views, each used once); views of views go through ``__call__``."""
        cache, classes = self.cache, self.classes
        # A view's class depends on its base and on each slice's length and step, not on
        # where the slice starts (stop -1, "to the end", keeps the start): views that differ
        # only by their offsets (%in[k, :, :, :] for every k) share one lookup.
        by_shape: dict[tuple, int] = {}
        for view in views:
            if view.base not in cache:
                continue           # a view of a view: resolved on first use
            shape_key = (view.base,) + tuple(
                (p.start, -1, p.step) if p.stop == -1 else (p.stop - p.start, 0, p.step)
                for p in view.slices)
            found = by_shape.get(shape_key)
            if found is None:
                found = by_shape[shape_key] = self._view_class(view)
            classes[view.name] = found

    def _view_classes_by_columns(self, table) -> None:
        """``_view_classes`` on the view columns: the same shape key per view of a buffer
        (base index; per slice its start, -1 and step to the end, else its length, 0 and
        step), ``_view_class`` on one view per distinct key."""
        base, count, names = table.base, table.slice_count, table.names
        column = np.full(len(base), -1, np.int64)
        buffers = np.flatnonzero(base < 0)
        column[buffers] = [self.classes.get(names[i], -1) for i in buffers.tolist()]
        views = np.flatnonzero(base >= 0)
        views = views[column[base[views]] >= 0]     # views of (known) buffers
        firsts = np.cumsum(count) - count
        for r in np.unique(count[views]).tolist():
            group = views[count[views] == r]
            start, stop, step = np.moveaxis(table.slices[firsts[group][:, None] +
                                                         np.arange(r)], 2, 0)
            whole = stop == -1
            keys = np.concatenate([base[group][:, None], np.where(whole, start, stop - start),
                                   np.where(whole, -1, 0), step], axis=1)
            first, inverse = distinct_rows(keys)
            found = np.array([self._view_class(table.view(int(group[f])))
                              for f in first.tolist()], np.int64)
            column[group] = found[inverse]
        self.class_column = column

    def _view_class(self, view) -> int:
        """The class of ``view``, a view of a buffer (``__call__`` when its key is new)."""
        dims, elem, order, _, esize, ddr, _ = self.cache[view.base]
        count = 1
        for piece, size in zip(view.slices, dims):
            count *= _extent(piece, size)
        key = (count * esize, esize, ddr, _run(view.slices, dims, order, count, esize))
        found = self._class_ids.get(key)
        return found if found is not None else self._class(self._resolve([view]))

    @cached_property
    def views(self):
        if self._program is not None:
            return views_by_name(self._program)
        return {v.name: v for v in self.module.views}

    def __call__(self, name: str) -> tuple:
        found = self.cache.get(name)
        if found is not None:
            return found
        chain_ = []
        while name not in self.cache:
            view = self.views.get(name)
            if view is None:
                raise VpucError(f"%{name} is not a buffer or view")
            chain_.append(view)
            name = view.base
        return self._resolve(chain_)

    def _resolve(self, chain_: list) -> tuple:
        """The shapes of a chain of views (each a view of the next; the last's base in the
        cache), cached; the first's returned."""
        dims, elem, order, _, esize, ddr, run = self.cache[chain_[-1].base]
        for view in reversed(chain_):
            sizes = []
            count = 1
            for piece, size in zip(view.slices, dims):
                extent = _extent(piece, size)
                sizes.append(extent)
                count *= extent
            inner = _run(view.slices, dims, order, count, esize)
            # A view of a strided view: its runs are no longer than its base's.
            if run is not None:
                inner = min(inner, run) if inner is not None else min(run, count * esize)
            run = inner
            dims = tuple(sizes)
            self.cache[view.name] = (dims, elem, order, count * esize, esize, ddr, run)
        return self.cache[chain_[0].name]

    def shape_class(self, name: str) -> int:
        found = self.classes.get(name)
        if found is None:
            found = self.classes[name] = self._class(self(name))
        return found

    def tensor(self, name: str) -> TensorType:
        tensor = self.tensors.get(name)
        if tensor is None:
            dims, elem, order = self(name)[:3]
            tensor = self.tensors[name] = TensorType(dims, elem, order)
        return tensor


def _run(slices, dims, order, count: int, esize: int) -> int | None:
    """Bytes of a view's contiguous runs in its base's memory, None when it is one run:
    from the innermost dim outwards, whole dims extend a run, a partial one ends it."""
    run = 1
    by_dim = dict(zip(range(len(dims)), zip(slices, dims)))
    for d in reversed(order.perm):
        piece, size = by_dim[d]
        if piece.step != 1:
            break
        extent = _extent(piece, size)
        run *= extent
        if extent != size:
            break
    return None if run >= count else run * esize


def shortest_run(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _extent(piece, size: int) -> int:
    """Elements a view's slice ``piece`` takes of a dim of ``size`` (stop -1: to the end)."""
    stop = size if piece.stop == -1 else piece.stop
    step = piece.step
    extent = stop - piece.start if step == 1 else (stop - piece.start + step - 1) // step
    return max(extent, 0)
