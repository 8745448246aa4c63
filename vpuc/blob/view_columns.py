"""A blob's views resolved a column at a time, and checked against what the blob records.

``vpuc.ir.symbols.SymbolTable`` resolves a view in Python: its base's region,
then per slice the range check, the dim, the stride and the offset.  A program
of 100k tasks has 50,000 views, so here every view whose base is resolved is
resolved at once with numpy, one level of views of views after another, by the
same arithmetic: a slice's stop of -1 is its dim, ``0 <= start < stop <= dim``
and ``step >= 1``, dim ``(stop - start + step - 1) // step``, stride ``base
stride x step``, offset ``base offset + sum(start x base stride)`` bits, which
must fall on a byte.  The result is compared with the record (its dims,
strides in bits, byte offset, and its root's location, tile and offset), as
``rebuild.verify_program`` compares the symbol table's regions.

Anything this does not settle (a bad slice, a dynamic base, a cycle, a number
that could overflow int64, a record that differs) returns None: the caller
then resolves with the symbol table, whose messages name the problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from vpuc.ir.module import Module
from vpuc.ir.symbols import SymbolTable

# Strides in bits and slice starts/steps below these keep every product and sum in int64.
_STRIDE_LIMIT = 1 << 31
_INDEX_LIMIT = 1 << 31


@dataclass
class TensorColumns:
    """Per tensor (record order): its type as a small int (equal ints, equal types), its
    root buffer's tensor index, its byte offset in the root and the root's location code."""

    type_id: np.ndarray
    root: np.ndarray
    offset: np.ndarray
    kind: np.ndarray


def tensor_columns(module: Module, tensors: tuple) -> TensorColumns | None:
    """Every tensor's resolved region as columns, checked against its record; None when
    something needs the symbol table's resolution (and its message)."""
    n = len(tensors)
    if n == 0:
        return TensorColumns(*(np.zeros(0, np.int64) for _ in range(4)))
    (_, location, tile, place, data_offset, dims, dynamic, strides, _, _, base,
     slices, _) = zip(*tensors)
    base = np.fromiter(base, np.int64, n)
    is_view = base >= 0
    buffer_at = np.flatnonzero(~is_view)
    if len(buffer_at) != len(module.buffers):
        return None
    rank = np.fromiter(map(len, dims), np.int64, n)
    width = int(rank.max())
    # Per tensor, as resolved: dims and strides in bits (padded to the widest rank),
    # offset in bits, whether its dims are static, its root's tensor index.
    shape = np.full((n, width), -1, np.int64)
    stride = np.zeros((n, width), np.int64)
    offset_bits = np.zeros(n, np.int64)
    static = np.zeros(n, bool)
    root = np.arange(n, dtype=np.int64)
    types: dict = {}
    type_id = np.zeros(n, np.int64)
    for i, buffer in zip(buffer_at.tolist(), module.buffers):
        region = SymbolTable._buffer_region(buffer)
        if (data_offset[i], strides[i], dims[i]) != (0, region.strides_bits,
                                                     region.type.bound_shape):
            return None
        r = len(dims[i])
        shape[i, :r] = region.type.bound_shape
        if any(s >= _STRIDE_LIMIT for s in region.strides_bits):
            return None
        stride[i, :r] = region.strides_bits
        static[i] = region.type.is_static
        type_id[i] = types.setdefault(region.type, len(types))
    resolved = ~is_view
    while not resolved.all():
        ready = np.flatnonzero(~resolved & resolved[np.where(is_view, base, 0)])
        if len(ready) == 0:
            return None            # a cycle of views
        if not _resolve(ready, base, rank, slices, shape, stride, offset_bits, static, root):
            return None
        resolved[ready] = True
    views = np.flatnonzero(is_view)
    if len(views) and not _recorded(views, rank, width, dims, strides, data_offset, shape,
                                    stride, offset_bits):
        return None
    place_cols = [np.fromiter(c, np.int64, n) for c in (location, tile, place)]
    if any((col[views] != col[root[views]]).any() for col in place_cols):
        return None
    if len(views):
        # A view's type: its dims, and its root's element type and dims order, here its
        # root's whole type (equal types may get two ids, never two types one id).
        root_type = type_id[root[views]]
        rows = np.concatenate([shape[views], rank[views, None], root_type[:, None]], axis=1)
        codes = row_codes(rows)
        _, ids = np.unique(codes, axis=0 if codes.ndim > 1 else None, return_inverse=True)
        type_id[views] = len(types) + ids.reshape(-1)
    return TensorColumns(type_id, root, offset_bits // 8, place_cols[0][root])


def row_codes(rows: np.ndarray) -> np.ndarray:
    """Each row of an int64 matrix as one int64, equal iff the rows are equal (mixed radix
    over each column's range), so ``np.unique`` sorts ints rather than rows (3x faster on a
    DMA list of 50k); the rows themselves when the ranges' product could overflow."""
    if not len(rows):
        return rows
    low, high = rows.min(axis=0), rows.max(axis=0)
    if float(np.prod(high.astype(np.float64) - low.astype(np.float64) + 1)) >= 2.0 ** 62:
        return rows
    span = high - low + 1
    code = np.zeros(len(rows), np.int64)
    for column, (first, size) in enumerate(zip(low.tolist(), span.tolist())):
        code = code * size + (rows[:, column] - first)
    return code


def _resolve(ready, base, rank, slices, shape, stride, offset_bits, static, root) -> bool:
    """Resolve the views ``ready`` (their bases are), grouped by rank; False on a doubt."""
    parents = base[ready]
    if not static[parents].all() or (rank[ready] != rank[parents]).any():
        return False
    for r in np.unique(rank[ready]).tolist():
        group = ready[rank[ready] == r]
        of = base[group]
        pieces = np.fromiter(chain.from_iterable(chain.from_iterable(
            slices[i] for i in group.tolist())), np.int64, 3 * r * len(group))
        start, stop, step = np.moveaxis(pieces.reshape(len(group), r, 3), 2, 0)
        size = shape[of, :r]
        stop = np.where(stop == -1, size, stop)
        if ((step < 1) | (start < 0) | (start >= stop) | (stop > size)).any() or \
                (step >= _INDEX_LIMIT).any() or (stride[of, :r] >= _STRIDE_LIMIT).any():
            return False
        shape[group, :r] = (stop - start + step - 1) // step
        stride[group, :r] = stride[of, :r] * step
        offset_bits[group] = offset_bits[of] + (start * stride[of, :r]).sum(axis=1)
        if (offset_bits[group] % 8 != 0).any() or (stride[group, :r] >= _STRIDE_LIMIT).any():
            return False
        static[group] = True
        root[group] = root[of]
    return True


def _recorded(views, rank, width, dims, strides, data_offset, shape, stride,
              offset_bits) -> bool:
    """Whether each view's record holds its resolved dims, strides and byte offset."""
    for r in np.unique(rank[views]).tolist():
        group = views[rank[views] == r]
        at = group.tolist()
        recorded_dims = np.fromiter(chain.from_iterable(dims[i] for i in at), np.int64,
                                    r * len(at)).reshape(len(at), r)
        if any(len(strides[i]) != r for i in at):
            return False
        recorded_strides = np.fromiter(chain.from_iterable(strides[i] for i in at), np.int64,
                                       r * len(at)).reshape(len(at), r)
        if not (np.array_equal(recorded_dims, shape[group, :r]) and
                (recorded_strides == stride[group, :r]).all()):
            return False
    recorded_offset = np.fromiter((data_offset[i] for i in views.tolist()), np.int64, len(views))
    return bool((recorded_offset == offset_bits[views] // 8).all())
