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

import numpy as np

from vpuc.blob.tensor_table import tensor_arrays
from vpuc.ir.module import Module
from vpuc.ir.symbols import SymbolTable
from vpuc.task_tables import distinct_rows

__all__ = ["TensorColumns", "tensor_columns"]

# Strides in bits and slice starts/steps below these keep every product and sum in int64.
_STRIDE_LIMIT = 1 << 31
_INDEX_LIMIT = 1 << 31
_OFFSET_LIMIT = 1 << 62     # a view's offset in bits, from its root's start


@dataclass
class TensorColumns:
    """Per tensor (record order): its type as a small int (equal ints, equal types), its
    root buffer's tensor index, its byte offset in the root and the root's location code."""

    type_id: np.ndarray
    root: np.ndarray
    offset: np.ndarray
    kind: np.ndarray


def tensor_columns(module: Module, tensors) -> TensorColumns | None:
    """Every tensor's resolved region as columns, checked against its record; None when
    something needs the symbol table's resolution (and its message).  ``tensors``: the
    records, read on their int64 columns (``tensor_table.tensor_arrays``)."""
    try:
        a = tensor_arrays(tensors)
    except OverflowError:           # plain records with a number past int64
        return None
    n = len(a)
    if n == 0:
        return TensorColumns(*(np.zeros(0, np.int64) for _ in range(4)))
    base, rank = a.base, a.rank
    is_view = base >= 0
    buffer_at = np.flatnonzero(~is_view)
    views = np.flatnonzero(is_view)
    if len(buffer_at) != len(module.buffers) or (a.slice_count[views] != rank[views]).any() \
            or (a.strides_count != rank).any():
        return None
    dims, strides = a.padded("dims"), a.padded("strides", 0)
    width = dims.shape[1]
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
        r = int(rank[i])
        if (int(a.data_offset[i]), tuple(strides[i, :r].tolist()),
                tuple(dims[i, :r].tolist())) != (0, region.strides_bits, region.type.bound_shape):
            return None
        shape[i, :r] = region.type.bound_shape
        if any(s >= _STRIDE_LIMIT for s in region.strides_bits):
            return None
        stride[i, :r] = region.strides_bits
        static[i] = region.type.is_static
        type_id[i] = types.setdefault(region.type, len(types))
    first_slice = np.cumsum(a.slice_count) - a.slice_count
    resolved = ~is_view
    while not resolved.all():
        ready = np.flatnonzero(~resolved & resolved[np.where(is_view, base, 0)])
        if len(ready) == 0:
            return None            # a cycle of views
        if not _resolve(ready, base, rank, a.slices, first_slice, shape, stride, offset_bits,
                        static, root):
            return None
        resolved[ready] = True
    # Each view's record holds its resolved dims, strides and byte offset.
    if len(views) and not ((dims[views] == shape[views]).all() and
                           (strides[views] == stride[views]).all() and
                           (a.data_offset[views] == offset_bits[views] // 8).all()):
        return None
    place_cols = (a.location, a.tile, a.offset)
    if any((col[views] != col[root[views]]).any() for col in place_cols):
        return None
    if len(views):
        # A view's type: its dims, and its root's element type and dims order, here its
        # root's whole type (equal types may get two ids, never two types one id).
        root_type = type_id[root[views]]
        rows = np.concatenate([shape[views], rank[views, None], root_type[:, None]], axis=1)
        type_id[views] = len(types) + distinct_rows(rows)[1]
    return TensorColumns(type_id, root, offset_bits // 8, a.location[root])


def _resolve(ready, base, rank, slices, first_slice, shape, stride, offset_bits, static,
             root) -> bool:
    """Resolve the views ``ready`` (their bases are), grouped by rank; False on a doubt
    (a bad slice, or a number that could leave int64)."""
    parents = base[ready]
    if not static[parents].all() or (rank[ready] != rank[parents]).any():
        return False
    for r in np.unique(rank[ready]).tolist():
        group = ready[rank[ready] == r]
        of = base[group]
        if len(group) * r == len(slices):       # every slice is this group's, in order
            pieces = slices.reshape(len(group), r, 3)
        else:
            pieces = slices[first_slice[group][:, None] + np.arange(r)]
        start, stop, step = np.moveaxis(pieces, 2, 0)
        size = shape[of, :r]
        stop = np.where(stop == -1, size, stop)
        if ((step < 1) | (start < 0) | (start >= stop) | (stop > size)).any() or \
                (step >= _INDEX_LIMIT).any() or (stride[of, :r] >= _STRIDE_LIMIT).any():
            return False
        # start < size <= 2**31 and stride < 2**31: each product is below 2**62; their sum
        # with the base's offset is bounded in floats first, so it never wraps.
        products = start * stride[of, :r]
        if (offset_bits[of] + products.astype(np.float64).sum(axis=1) >= _OFFSET_LIMIT).any():
            return False
        shape[group, :r] = (stop - start + step - 1) // step
        stride[group, :r] = stride[of, :r] * step
        offset_bits[group] = offset_bits[of] + products.sum(axis=1)
        if (offset_bits[group] % 8 != 0).any() or (stride[group, :r] >= _STRIDE_LIMIT).any():
            return False
        static[group] = True
        root[group] = root[of]
    return True
