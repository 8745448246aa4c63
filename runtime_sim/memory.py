"""The network's memory: DDR buffers and each tile's CMX as real byte arrays.

Memory is allocated for what the program declares, not for the address space:
each DDR buffer (input, output, const, unplaced scratch) is its own array, the
placed DDR scratch buffers share one array as large as the highest byte they
use, and a tile's CMX array ends at the last byte of its last buffer.  A
region (a buffer or a view, ``vpuc.ir.symbols.Region``) becomes a numpy array
of its logical shape that *views* those bytes with the region's strides, so
engines read and write memory in place.

Dynamic tensors are stored densely at their actual dims: a DDR buffer's actual
dims are kept here (set from the user's input, or by the DMA that writes it);
a CMX buffer's actual dims live in CMX right after its data (int32 dims, then
int64 strides in bits, innermost first), where kernels read and write them.
"""

from __future__ import annotations

import numpy as np

from vpuc.abi.dtypes import data_type
from vpuc.diagnostics import VpucError
from vpuc.ir.module import Buffer, BufferKind, Module
from vpuc.ir.symbols import Region, buffer_footprint, shape_meta_offset
from vpuc.ir.types import ElemType

MIN_CMX_BYTES = 64  # a tile with ACT tasks but no buffers still maps a (tiny) WIN_F


def footprint(buffer: Buffer) -> int:
    """Bytes a buffer occupies.  A dynamic CMX buffer's shape metadata is laid out as the
    kernel ABI packs it (vpuc.abi.params): int32 dims, padding to 8, int64 strides."""
    if buffer.kind is BufferKind.CMX and not buffer.type.is_static:
        rank = buffer.type.rank
        return shape_meta_offset(buffer) + 4 * rank + (-4 * rank % 8) + 8 * rank
    return buffer_footprint(buffer)


_DTYPES: dict[ElemType, np.dtype] = {}


def numpy_dtype(elem: ElemType) -> np.dtype:
    dtype = _DTYPES.get(elem)
    if dtype is None:
        dtype = data_type(elem.value).numpy
        if dtype is None:
            raise VpucError(f"element type {elem} has no storage type in the simulator")
        _DTYPES[elem] = dtype
    return dtype


def dense_strides(shape: tuple[int, ...], perm: tuple[int, ...], nbytes: int) -> tuple[int, ...]:
    """Byte strides per logical dim of a dense tensor stored in dims order ``perm``."""
    strides = [0] * len(shape)
    step = nbytes
    for dim in reversed(perm):
        strides[dim] = step
        step *= shape[dim]
    return tuple(strides)


# What memory holds before any task writes it.  The NPU does not clear CMX or DDR between
# inferences, so a result must not depend on bytes no task wrote; zeros would make such a
# result look plausible (a zero-padded channel times a zero weight), 0xFF bytes make it NaN
# in f16, bf16 and f32 (and -1 in signed integers), which the comparisons then catch.
UNWRITTEN = 0xFF


class Memory:
    """Byte arrays keyed ``("cmx", tile)``, ``("ddr", name)`` or ``("scratch",)``.

    ``unwritten`` fills every byte a task (or the host) has to write first: CMX, the DDR
    scratch area and the outputs; constants and inputs are written whole right away."""

    def __init__(self, module: Module, tiles: int, unwritten: int = UNWRITTEN) -> None:
        self.arrays: dict[tuple, np.ndarray] = {}
        self.placement: dict[str, tuple[tuple, int]] = {}   # root buffer -> (key, byte offset)
        self.actual_dims: dict[str, tuple[int, ...]] = {}   # dynamic DDR roots
        self.buffers = {b.name: b for b in module.buffers}
        self.dynamic = {b.name for b in module.buffers if not b.type.is_static}
        self._views: dict[int, tuple[Region, np.ndarray]] = {}
        sizes: dict[tuple, int] = {("cmx", t): MIN_CMX_BYTES for t in range(tiles)}
        for buffer in module.buffers:
            key, offset = self._key(buffer)
            self.placement[buffer.name] = (key, offset)
            sizes[key] = max(sizes.get(key, 0), offset + footprint(buffer))
        preset = {("ddr", b.name) for b in module.buffers
                  if b.kind in (BufferKind.CONST, BufferKind.INPUT)}
        for key, size in sizes.items():
            if key in preset or not unwritten:
                self.arrays[key] = np.zeros(size, np.uint8)
            else:
                self.arrays[key] = np.full(size, unwritten, np.uint8)

    @staticmethod
    def _key(buffer: Buffer) -> tuple[tuple, int]:
        if buffer.kind is BufferKind.CMX:
            if buffer.offset is None:
                raise VpucError(f"CMX buffer %{buffer.name} has no offset; run allocate-cmx "
                                "before simulating")
            return ("cmx", buffer.tile), buffer.offset
        if buffer.kind is BufferKind.DDR and buffer.offset is not None:
            return ("scratch",), buffer.offset
        return ("ddr", buffer.name), 0

    @staticmethod
    def describe(key: tuple) -> str:
        if key[0] == "cmx":
            return f"CMX of tile {key[1]}"
        if key[0] == "scratch":
            return "the DDR scratch area"
        return f"DDR buffer %{key[1]}"

    def cmx(self, tile: int) -> np.ndarray:
        return self.arrays[("cmx", tile)]

    @property
    def total_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    # ------------------------------------------------------------ regions
    def locate(self, region: Region) -> tuple[tuple, int]:
        """The memory of a region and the byte where its element 0 sits."""
        key, offset = self.placement[region.root.name]
        return key, offset + region.byte_offset

    def span(self, region: Region) -> tuple[tuple, int, int]:
        """(memory, first byte, past the last byte) of the bytes the region may touch."""
        key, start = self.locate(region)
        size = footprint(region.root) if region.root.name in self.dynamic else region.span_bytes
        return key, start, start + size

    def shape_of(self, region: Region) -> tuple[int, ...]:
        """The region's logical shape; for a dynamic root, its actual dims."""
        if region.root.type.is_static:
            return region.type.bound_shape
        return self.dynamic_dims(region.root)

    def view(self, region: Region, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A numpy array of the region's logical shape viewing memory in place.  A static
        region's array is made once per Region object (the plan resolves each operand once)
        and handed out again: it aliases memory, so it always shows the current bytes."""
        cached = self._views.get(id(region))
        if cached is not None and cached[0] is region:
            return cached[1]
        array = self._view(region, shape)
        if region.root.name not in self.dynamic:
            # The region is kept with its array, so its id is not reused while cached.
            self._views[id(region)] = (region, array)
        return array

    def bytes_of(self, region: Region) -> np.ndarray:
        """The bytes from a static region's first element to past its last, in place."""
        key, offset = self.placement[region.root.name]
        start = offset + region.byte_offset
        array = self.arrays[key]
        end = start + region.span_bytes
        if start < 0 or end > len(array):
            raise VpucError(f"%{region.name} (bytes {start:#x}..{end - 1:#x}) lies outside "
                            f"{self.describe(key)} ({len(array)} bytes)")
        return array[start:end]

    def _view(self, region: Region, shape: tuple[int, ...] | None) -> np.ndarray:
        root = region.root
        key, offset = self.placement[root.name]
        start = offset + region.byte_offset
        array = self.arrays[key]
        dtype = numpy_dtype(region.type.elem)
        if root.name not in self.dynamic:
            shape, strides = region.type.bound_shape, tuple([s // 8 for s in region.strides_bits])
        else:
            shape = shape or self.dynamic_dims(root)
            strides = dense_strides(shape, region.type.order.perm, dtype.itemsize)
        last = start + dtype.itemsize
        for n, s in zip(shape, strides):
            last += (n - 1) * s
        if start < 0 or (min(shape, default=1) > 0 and last > len(array)):
            raise VpucError(f"%{region.name} (bytes {start:#x}..{last - 1:#x}) lies outside "
                            f"{self.describe(key)} ({len(array)} bytes)")
        return np.ndarray(shape, dtype, buffer=array, offset=start, strides=strides)

    # ------------------------------------------------------------ dynamic dims
    def dynamic_dims(self, buffer: Buffer) -> tuple[int, ...]:
        if buffer.kind is not BufferKind.CMX:
            return self.actual_dims.get(buffer.name, buffer.type.bound_shape)
        array, meta = self._meta(buffer)
        rank = buffer.type.rank
        inner_first = np.frombuffer(array[meta:meta + 4 * rank].tobytes(), "<i4")
        dims = [0] * rank
        for position, dim in enumerate(reversed(buffer.type.order.perm)):
            dims[dim] = int(inner_first[position])
        bounds = buffer.type.bound_shape
        if any(not 0 <= d <= b for d, b in zip(dims, bounds)):
            raise VpucError(f"dynamic buffer %{buffer.name} holds dims {tuple(dims)} in its shape "
                            f"metadata, outside its bounds {bounds}")
        return tuple(dims)

    def set_dynamic_dims(self, buffer: Buffer, dims: tuple[int, ...]) -> None:
        bounds = buffer.type.bound_shape
        if len(dims) != len(bounds) or any(not 0 <= d <= b for d, b in zip(dims, bounds)):
            raise VpucError(f"dims {tuple(dims)} do not fit %{buffer.name}, whose bounds are "
                            f"{bounds}")
        if buffer.kind is not BufferKind.CMX:
            self.actual_dims[buffer.name] = tuple(dims)
            return
        array, meta = self._meta(buffer)
        rank = buffer.type.rank
        perm = buffer.type.order.perm
        nbytes = buffer.type.elem.nbytes
        strides = dense_strides(tuple(dims), perm, nbytes)
        inner = [dims[d] for d in reversed(perm)]
        inner_strides = [strides[d] * 8 for d in reversed(perm)]
        packed = np.array(inner, "<i4").tobytes()
        packed += bytes(-len(packed) % 8) + np.array(inner_strides, "<i8").tobytes()
        array[meta:meta + len(packed)] = np.frombuffer(packed, np.uint8)

    def _meta(self, buffer: Buffer) -> tuple[np.ndarray, int]:
        key, offset = self.placement[buffer.name]
        return self.arrays[key], offset + shape_meta_offset(buffer)


def byte_intervals(region: Region, start: int) -> np.ndarray:
    """The exact bytes a static region covers, as merged [lo, hi) rows, sorted.

    The innermost dims that are contiguous in memory form one chunk; the outer
    dims enumerate the chunks, so a dense region is one row.
    """
    nbytes = region.type.elem.nbytes
    dims = sorted(((s // 8, n) for s, n in zip(region.strides_bits, region.type.bound_shape)
                   if n > 1), reverse=True)
    chunk = nbytes
    while dims and dims[-1][0] == chunk:
        chunk *= dims.pop()[1]
    starts = np.zeros(1, np.int64)
    for stride, count in dims:
        starts = (starts[:, None] + np.arange(count, dtype=np.int64) * stride).reshape(-1)
    # Each stride beyond the extent of the dims inside it (a channel slice of an NHWC
    # tensor, a row block): the chunks come in address order and never touch.
    extent = chunk
    for stride, count in reversed(dims):
        if stride <= extent:
            break
        extent += stride * (count - 1)
    else:
        starts += start
        return np.stack([starts, starts + chunk], axis=1)
    starts = np.sort(starts) + start
    ends = starts + chunk
    # Merge touching or overlapping chunks: a new row starts where no earlier chunk reaches.
    first = np.concatenate(([0], np.nonzero(starts[1:] > np.maximum.accumulate(ends)[:-1])[0] + 1))
    return np.stack([starts[first], np.maximum.reduceat(ends, first)], axis=1)
