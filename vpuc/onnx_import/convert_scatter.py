"""Scatters on constant indices, TopK's ArgMax rounds and CumProd, composed from graph ops.

- ScatterND / ScatterElements: the data is viewed as ``[rows, slice]`` rows (ScatterND:
  one row per indexed position, the slice the dims past the index depth; ScatterElements:
  one row per element) and the updates likewise; the constant indices say which row each
  update replaces.  A ScatterND writing a box that spans every indexed axis but one (a
  KV-cache write) is a ``Concat`` of the data before the box, the updates and the data
  after it (25,325 cycles for a [1, 8, 128, 64] cache, where the row gather took 54,125).  Reduction none: one ``Gather`` of constant rows from
  ``Concat(data, updates)`` (a DMA per run of rows), the last update of a row winning as
  onnxruntime applies them in order.  Reductions add / mul / max / min: round ``q`` gathers
  every row's q-th update (the op's identity, 0 / 1 / -inf / +inf, where a row has fewer)
  and combines it into the running result, so a row updated ``m`` times sees its updates
  in index order, as onnxruntime's loop does.
- TopK's K rounds of ArgMax's search, where ``convert_topk.py`` finds them cheaper than the
  library kernel (``convert_struct.py``): the
  greatest remaining value (``ReduceMax``), the least index holding it, that position set
  to -inf for the next round; smallest is the same on ``-x``.  A taken position's search
  key is moved past every untaken one, so inputs holding -inf cannot pick an index twice.
  Ties go to the lower index, as onnxruntime's do; ``sorted = 0`` gets the sorted order,
  one the spec allows.  Indices are exact in the graph's float type up to half of
  ``2^(mantissa + 1)``; they are converted to ``i32`` as ArgMax's are.
- CumProd: Hillis and Steele's scan, ``ceil(log2 n)`` rounds of ``y * shift(y, 2^r)``, the
  shift a ``Slice`` and a ``Pad`` of ones (the exclusive form scans the input shifted by 1).
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.ir.types import ElemType
from vpuc.onnx_import.builder import GraphBuilder
from vpuc.onnx_import.convert_struct import NUMPY_OF, _in_range, _indices, scan_attributes

# DMAs of one Gather; a barrier takes at most 256 producers (NPU37XX)
RUN_LIMIT = 128
_IDENTITY = {"add": 0.0, "mul": 1.0, "max": -np.inf, "min": np.inf}
_COMBINE = {"add": "Add", "mul": "Multiply", "max": "Maximum", "min": "Minimum"}


def _as_rows(b: GraphBuilder, name: str, rows: int, width: int) -> str:
    value = b.value(name)
    return value if b.shape(name) == (rows, width) else b.op("Reshape", [value], {"shape": (rows, width)})


def _gather_runs(b: GraphBuilder, pool: str, source: list[int]) -> str:
    """Rows ``source`` of ``pool``: one Gather of at most ``RUN_LIMIT`` runs of consecutive
    rows (a DMA each, each updating the barrier its reader waits on), several
    ``Concat``ed when there are more."""
    breaks = [i for i in range(1, len(source)) if source[i] != source[i - 1] + 1]
    starts = [0] + breaks[RUN_LIMIT - 1::RUN_LIMIT] + [len(source)]
    if len(starts) - 1 > RUN_LIMIT:
        raise b.error(f"{b.node.op_type} scatters into {len(breaks) + 1} separate runs of rows; "
                      f"vpuc's copies take up to {RUN_LIMIT * RUN_LIMIT}")
    pieces = [b.op("Gather", [pool], {"axis": 0, "indices": tuple(source[lo:hi])})
              for lo, hi in zip(starts, starts[1:])]
    return pieces[0] if len(pieces) == 1 else b.op("Concat", pieces, {"axis": 0})


def _scatter_rows(b: GraphBuilder, node, attrs, targets: np.ndarray, rows: int, width: int) -> None:
    """Output row ``r`` is data row ``r`` combined with every update ``j`` whose
    ``targets[j] == r``, in order of ``j``."""
    reduction = attrs.get("reduction", "none")
    if reduction not in ("none", *_COMBINE):
        raise b.error(f"{node.op_type} reduction '{reduction}' is not one of none, add, mul, max, min")
    shape, count = b.shape(node.input[0]), len(targets)
    data = _as_rows(b, node.input[0], rows, width)
    updates = _as_rows(b, node.input[2], count, width)
    per_row = [[] for _ in range(rows)]
    for j, r in enumerate(targets.tolist()):
        per_row[r].append(j)
    if reduction == "none":
        source = [row[-1] + rows if row else r for r, row in enumerate(per_row)]
        y = _gather_runs(b, b.op("Concat", [data, updates], {"axis": 0}), source)
    else:
        # a row without a q-th update reads its own row of a block of identities, so
        # such rows make runs with their neighbours, not one copy each
        identity = b.constant(np.full((rows, width), _IDENTITY[reduction], np.float32),
                              f"{node.output[0]}.identity")
        pool = b.op("Concat", [updates, identity], {"axis": 0})
        y = data
        for q in range(max((len(row) for row in per_row), default=0)):
            picked = [row[q] if len(row) > q else count + r for r, row in enumerate(per_row)]
            y = b.op(_COMBINE[reduction], [y, _gather_runs(b, pool, picked)])
    b.op("Reshape", [y], {"shape": tuple(shape)}, out=node.output[0])


def _box_write(b: GraphBuilder, node, shape, positions: list[np.ndarray]) -> bool:
    """A ScatterND whose updates fill, in row-major order, a box spanning every indexed
    axis but one (a KV-cache write: every batch and head, positions s0 to s1): the data
    before and after the box on that axis ``Concat``ed around the updates, no row gather
    of the whole tensor.  False (nothing added) for any other pattern."""
    depth = len(positions)
    low = [int(p.min()) for p in positions]
    extent = [int(p.max()) - lo + 1 for p, lo in zip(positions, low)]
    partial = [a for a in range(depth) if extent[a] != shape[a]]
    if len(partial) > 1 or len(positions[0]) != math.prod(extent):
        return False
    box = np.indices(extent).reshape(depth, -1) + np.asarray(low)[:, None]
    if not all(np.array_equal(p, row) for p, row in zip(positions, box)):
        return False
    box_shape = tuple(extent) + tuple(shape[depth:])
    if not partial:                      # the updates replace everything
        if b.shape(node.input[2]) == box_shape:
            b.alias(node.output[0], node.input[2])
        else:
            b.op("Reshape", [b.value(node.input[2])], {"shape": box_shape}, out=node.output[0])
        return True
    if b.shape(node.input[2]) == box_shape:
        updates = b.value(node.input[2])
    elif b.is_known(node.input[2]):      # constant updates shaped at import, not by a copy
        updates = b.constant(b.array(node.input[2]).reshape(box_shape), f"{node.output[0]}.updates")
    else:
        updates = b.op("Reshape", [b.value(node.input[2])], {"shape": box_shape})
    axis = partial[0]
    pieces = []
    for begin_at, end_at in ((0, low[axis]), (low[axis] + extent[axis], shape[axis])):
        if begin_at == end_at:
            pieces.append(None)
            continue
        begin, end = [0] * len(shape), list(shape)
        begin[axis], end[axis] = begin_at, end_at
        pieces.append(b.op("Slice", [b.value(node.input[0])],
                           {"begin": tuple(begin), "end": tuple(end), "step": (1,) * len(shape)}))
    parts = [p for p in (pieces[0], updates, pieces[1]) if p is not None]
    b.op("Concat", parts, {"axis": axis}, out=node.output[0])
    return True


def _scatter_nd(b, node, attrs):
    shape = b.shape(node.input[0])
    indices = _indices(b, node.input[1])
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 1 <= depth <= len(shape):
        raise b.error(f"ScatterND indices of shape {list(indices.shape)} do not index data of shape {list(shape)}")
    want = tuple(indices.shape[:-1]) + tuple(shape[depth:])
    if b.shape(node.input[2]) != want:
        raise b.error(f"ScatterND updates of shape {list(b.shape(node.input[2]))}; expected {list(want)}")
    wrapped = [_in_range(b, indices[..., i], d, "ScatterND") for i, d in enumerate(shape[:depth])]
    if attrs.get("reduction", "none") == "none" and _box_write(b, node, shape, [w.reshape(-1) for w in wrapped]):
        return
    targets = np.ravel_multi_index(tuple(wrapped), shape[:depth]).reshape(-1)
    _scatter_rows(b, node, attrs, targets, math.prod(shape[:depth]), math.prod(shape[depth:]))


def _scatter_elements(b, node, attrs):
    shape = b.shape(node.input[0])
    axis = b.axis(attrs.get("axis", 0), len(shape))
    indices = _indices(b, node.input[1])
    if indices.ndim != len(shape) or b.shape(node.input[2]) != indices.shape:
        raise b.error(f"ScatterElements indices {list(indices.shape)} and updates "
                      f"{list(b.shape(node.input[2]))} must have one shape, of the data's rank {len(shape)}")
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, shape)) if a != axis):
        raise b.error(f"ScatterElements indices {list(indices.shape)} exceed the data's {list(shape)} "
                      "off the scattered axis")
    position = list(np.indices(indices.shape))
    position[axis] = _in_range(b, indices, shape[axis], "ScatterElements")
    targets = np.ravel_multi_index(tuple(position), shape).reshape(-1)
    _scatter_rows(b, node, attrs, targets, math.prod(shape), 1)


def topk_count(b: GraphBuilder, node, attrs, size: int) -> int:
    if len(node.input) > 1 and node.input[1]:
        ks = _indices(b, node.input[1]).reshape(-1)
        if ks.size != 1:
            raise b.error(f"TopK K must be one integer; got {ks.size} values")
        k = int(ks[0])
    else:
        k = int(attrs["k"])          # opset 1 to 9: an attribute
    if not 1 <= k <= size:
        raise b.error(f"TopK K = {k} is outside [1, {size}], the size of the axis")
    return k


def rounds_exact(b: GraphBuilder, size: int) -> bool:
    """ArgMax's search keys (indices up to ``2 * size``) are exact in the graph's type."""
    return 2 * size <= 2 ** (np.finfo(NUMPY_OF[b.elem]).nmant + 1)


def topk_rounds(b, node, axis: int, k: int, largest: bool) -> None:
    """TopK as K rounds of ArgMax's search (the caller checked ``rounds_exact``)."""
    shape = b.shape(node.input[0])
    rank = len(shape)
    size = shape[axis]
    x = b.value(node.input[0])
    if not largest:
        x = b.op("Negative", [x])
    along = [1] * rank
    along[axis] = size
    index = np.arange(size, dtype=np.float32).reshape(along)
    name = node.output[0]
    index_const = b.constant(index, f"{name}.index")
    taken_key = b.constant(index + size, f"{name}.taken")
    past_end = b.constant(np.float32(2 * size), f"{name}.past_end")
    floor = b.constant(np.float32(-np.inf), f"{name}.removed")
    key, peaks, founds = index_const, [], []
    reduce = {"axes": (axis,), "keep_dims": True}
    for t in range(k):
        peak = b.op("ReduceMax", [x], reduce)
        away = b.op("Negative", [b.op("Select", [b.op("Equal", [x, peak]), key, past_end])])
        found = b.op("Negative", [b.op("ReduceMax", [away], reduce)])
        peaks.append(peak)
        founds.append(found)
        if t + 1 < k:
            chosen = b.op("Equal", [index_const, found])
            x = b.op("Select", [chosen, floor, x])
            key = b.op("Select", [chosen, taken_key, key])
    values_out = node.output[0] or None
    values = peaks[0] if k == 1 else b.op("Concat", peaks, {"axis": axis}, out=values_out if largest else None)
    if not largest:
        b.op("Negative", [values], out=values_out)
    elif k == 1 and values_out:
        b.values[values_out] = values
    if len(node.output) > 1 and node.output[1]:
        found = founds[0] if k == 1 else b.op("Concat", founds, {"axis": axis})
        b.op("Convert", [found], {"to": ElemType.I32}, out=node.output[1])


def _cumprod(b, node, attrs):
    axis, n, exclusive, reverse = scan_attributes(b, node, attrs)
    shape = b.shape(node.input[0])
    rank = len(shape)

    def shifted(value: str, by: int) -> str:
        """``value`` moved ``by`` along the axis (towards the end; the start if reverse),
        ones filling in."""
        begin, end = [0] * rank, list(shape)
        pad_begin, pad_end = [0] * rank, [0] * rank
        if reverse:
            begin[axis], pad_end[axis] = by, by
        else:
            end[axis], pad_begin[axis] = n - by, by
        kept = b.op("Slice", [value], {"begin": tuple(begin), "end": tuple(end), "step": (1,) * rank})
        return b.op("Pad", [kept], {"pads_begin": tuple(pad_begin), "pads_end": tuple(pad_end), "value": 1.0})

    y = b.value(node.input[0])
    if exclusive and n == 1:         # nothing before the only element: the empty product
        ones = b.constant(np.ones((1,) * rank, np.float32), f"{node.output[0]}.one")
        b.op("Broadcast", [ones], {"shape": tuple(shape)}, out=node.output[0])
        return
    if exclusive:
        y = shifted(y, 1)
    step = 1
    while step < n:
        y = b.op("Multiply", [y, shifted(y, step)])
        step *= 2
    if y == b.value(node.input[0]):
        b.alias(node.output[0], node.input[0])
    else:
        b.values[node.output[0]] = y


SCATTER_CONVERTERS = {
    "ScatterND": _scatter_nd, "ScatterElements": _scatter_elements, "CumProd": _cumprod,
}
