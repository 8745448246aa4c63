"""Rows of several invocations stacked along one leading axis, and their memories.

``path_many`` runs several invocations' path batches as one: invocation j's rows are
rows ``offset[j] .. offset[j] + counts[j] - 1`` of every batched value.  ``Rows`` makes
the values each invocation holds apart (its affine values, its registers) as such a
batch; ``StackedMemory`` is the memory the semantics see: a batched access's rows go to
their own invocation's ``WindowMemory``, an unbatched one (one address for every row)
is made by each invocation on its own memory.  The invocations touch disjoint bytes of
any memory they share, so the order between them does not matter; within one
invocation, the rows keep their order (a store's later row wins, as alone).
"""

from __future__ import annotations

import numpy as np

from runtime_sim.isa.loop_bounds import Affine
from vpuc.diagnostics import VpucError
from vpuc.shave.isa import NUM_SREGS


class Rows:
    """Per invocation: its row count and where its rows start in the stacked batch."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = list(counts)
        self.total = sum(self.counts)
        self.offsets = np.cumsum([0] + self.counts[:-1]).tolist()
        # each row's iteration number within its own invocation
        self.k = np.concatenate([np.arange(n, dtype=np.uint32) for n in self.counts])

    def affine(self, values: list[Affine]):
        """Each invocation's ``values[j]`` at its iterations (``path_batch._batch`` of each):
        one scalar when every invocation holds the same constant."""
        a0 = values[0]
        if a0.step == 0 and all(a == a0 for a in values):
            return np.uint32(a0.start)
        starts = np.repeat(np.array([a.start for a in values], np.uint32), self.counts)
        steps = np.repeat(np.array([a.step for a in values], np.uint32), self.counts)
        return starts + self.k * steps

    def same_or_rows(self, key: int, values: list):
        """Each invocation's value of register ``key`` (not batched): one value when all
        hold the same bits, else each repeated to its rows."""
        v0 = values[0]
        if all(_same(v0, v) for v in values[1:]):
            return v0
        if key < NUM_SREGS:
            stacked = np.array([int(v) for v in values], np.uint32)
        else:
            stacked = np.stack([np.asarray(v) for v in values])
        return np.repeat(stacked, self.counts, axis=0)

    def last(self, value, j: int, vector: int):
        """Invocation ``j``'s last row of a batch (``path_batch._last``), or the value."""
        if np.ndim(value) > vector:
            return value[self.offsets[j] + self.counts[j] - 1]
        return value

    def store(self, views: list, value) -> None:
        """Each invocation's rows of ``value`` (a batch, or one vector for all) into its view."""
        if type(value) is np.ndarray and value.ndim == 2 and len(value) == self.total:
            for view, lo, n in zip(views, self.offsets, self.counts):
                view[...] = value[lo:lo + n]
        else:
            for view in views:
                view[...] = value


def _same(a, b) -> bool:
    if a is b:
        return True
    if type(a) is np.ndarray or type(b) is np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return int(a) == int(b)


class StackedMemory:
    """The ``WindowMemory`` interface the semantics use, over each invocation's memory
    (``counts[j]`` rows of a batched access each).  Unchecked: the path batches were
    proven inside their bounds (the caller clears them)."""

    bounds = None

    def __init__(self, memories: list, counts: list[int]) -> None:
        self.memories = memories
        self.counts = list(counts)
        self.total = sum(self.counts)
        self.spans = []
        lo = 0
        for n in self.counts:
            self.spans.append((lo, lo + n))
            lo += n

    def times(self, t: int) -> "StackedMemory":
        """The same memories, ``t`` rows per row (an inner loop's rows x copies)."""
        return StackedMemory(self.memories, [n * t for n in self.counts])

    def _split(self, array: np.ndarray) -> list[np.ndarray]:
        if array.shape[:1] != (self.total,):
            raise VpucError(f"internal error: a batch of {array.shape} rows where the "
                            f"invocations stack {self.total}")
        return [array[lo:hi] for lo, hi in self.spans]

    def _each(self, parts: list[np.ndarray]) -> np.ndarray:
        """One unbatched result per invocation: one when all agree, else their rows."""
        p0 = parts[0]
        b0 = p0.tobytes()       # the parts: bytes of one shape (same dtype, same size)
        if all(p.dtype == p0.dtype and p.shape == p0.shape and p.tobytes() == b0
               for p in parts[1:]):
            return p0
        return np.repeat(np.stack(parts), self.counts, axis=0)

    # --- one address for every row ----------------------------------------------------------

    def read(self, address: int, size: int) -> np.ndarray:
        return self._each([memory.read(address, size) for memory in self.memories])

    def write(self, address: int, data: np.ndarray) -> None:
        for memory in self.memories:
            memory.write(address, data)

    # --- one address per row ---------------------------------------------------------------

    def read_rows(self, addresses: np.ndarray, size: int) -> np.ndarray:
        addresses = np.asarray(addresses, np.int64)
        return np.concatenate([memory.read_rows(part, size) for memory, part
                               in zip(self.memories, self._split(addresses))])

    def write_rows(self, addresses: np.ndarray, data: np.ndarray) -> None:
        addresses = np.asarray(addresses, np.int64)
        data = np.broadcast_to(data, addresses.shape + (data.shape[-1],))
        for memory, part, rows in zip(self.memories, self._split(addresses), self._split(data)):
            memory.write_rows(part, rows)

    # --- byte addresses: (16,) one vector for every row, (rows, 16) one per row -----------

    def gather(self, addresses: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
        addresses = np.asarray(addresses, np.int64)
        shape = addresses.shape if active is None else np.broadcast_shapes(
            addresses.shape, np.shape(active))
        if len(shape) < 2:
            return self._each([memory.gather(addresses, active) for memory in self.memories])
        parts = self._split(np.broadcast_to(addresses, shape))
        masks = (self._split(np.broadcast_to(np.asarray(active, bool), shape))
                 if active is not None else [None] * len(parts))
        return np.concatenate([memory.gather(part, mask) for memory, part, mask
                               in zip(self.memories, parts, masks)])

    def scatter(self, addresses: np.ndarray, values: np.ndarray,
                active: np.ndarray | None = None) -> None:
        addresses = np.asarray(addresses, np.int64)
        shapes = [addresses.shape, np.shape(values)]
        if active is not None:
            shapes.append(np.shape(active))
        shape = np.broadcast_shapes(*shapes)
        if len(shape) < 2:
            for memory in self.memories:
                memory.scatter(addresses, values, active)
            return
        parts = self._split(np.broadcast_to(addresses, shape))
        datas = self._split(np.broadcast_to(np.asarray(values, np.uint8), shape))
        masks = (self._split(np.broadcast_to(np.asarray(active, bool), shape))
                 if active is not None else [None] * len(parts))
        for memory, part, data, mask in zip(self.memories, parts, datas, masks):
            memory.scatter(part, data, mask)
