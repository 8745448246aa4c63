"""Memory layouts as data: dims permutations and blocked formats.

A layout says how a tensor's *logical* indices (always given in canonical
order, e.g. N, C, H, W) are placed in memory.  It is spelled the oneDNN way,
outermost dim first:

* ``NCHW``, ``NHWC``, ``NCDHW``, ``NDHWC``, ``NC``, ``C``, ``CHW``, ``HWC``:
  plain permutations;
* ``nChw16c`` (also written ``NCHW16c``): C is split into an outer part and an
  inner block of 16 channels, the block innermost.  A letter with a number
  prefix is an inner block of that dim; the bare letter is the dim's outer
  part (or the whole dim when it has no blocks).  Case carries no meaning;
* weights: ``OIHW``, ``GOIHW``, ``OIHW16i16o``, ``HWIO`` ...

Logical dims are the bare letters sorted in the canonical order G N O C I D H
W, so ``NHWC`` describes a logical NCHW tensor and ``HWIO`` a logical OIHW one.
Blocked dims whose size is not a multiple of the block are zero-padded in
memory, as oneDNN does.

Following the "GPU Convolution Kernel Generator" (§Tensor, Layout and View), ``Layout.blocks(shape)`` lists every memory block (outer
parts and plain dims included) with its dim, size and stride.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from vpuc.diagnostics import VpucError

CANONICAL_DIMS = "GNOCIDHW"
_TOKEN = re.compile(r"(\d*)([A-Za-z])")
# Logical dim letters for a positional rank, used by Layout.from_perm.
_DIMS_BY_RANK = {1: "C", 2: "NC", 3: "CHW", 4: "NCHW", 5: "NCDHW"}


@dataclass(frozen=True)
class Block:
    """One memory block: ``size`` steps of logical dim ``dim``, ``stride`` elements apart."""

    dim: str
    size: int
    stride: int


@dataclass(frozen=True)
class LayoutEntry:
    """A memory position: level 0 is the dim's outer part, level k its k-th inner block."""

    dim: str
    level: int
    block: int  # block size for level > 0; 0 for the outer part (its size depends on the shape)


@dataclass(frozen=True)
class Layout:
    name: str
    dims: str                          # logical dims, canonical order ("NCHW")
    order: tuple[LayoutEntry, ...]     # memory order, outermost first

    @staticmethod
    def parse(text: "str | Layout") -> "Layout":
        if isinstance(text, Layout):
            return text
        if not isinstance(text, str) or not text or _TOKEN.sub("", text):
            raise VpucError(f"layout {text!r}: expected letters {CANONICAL_DIMS} with optional "
                            "block sizes, e.g. nChw16c")
        entries: list[LayoutEntry] = []
        levels: dict[str, int] = {}
        outer: set[str] = set()
        for number, letter in _TOKEN.findall(text):
            dim = letter.upper()
            if dim not in CANONICAL_DIMS:
                raise VpucError(f"layout {text!r}: unknown dim {letter!r} (expected one of {CANONICAL_DIMS})")
            if number:
                size = int(number)
                if size < 1:
                    raise VpucError(f"layout {text!r}: block size of {letter!r} must be positive")
                levels[dim] = levels.get(dim, 0) + 1
                entries.append(LayoutEntry(dim, levels[dim], size))
            else:
                if dim in outer:
                    raise VpucError(f"layout {text!r}: dim {dim} appears twice")
                outer.add(dim)
                entries.append(LayoutEntry(dim, 0, 0))
        missing = set(levels) - outer
        if missing:
            raise VpucError(f"layout {text!r}: blocked dim(s) {''.join(sorted(missing))} have no outer part")
        dims = "".join(d for d in CANONICAL_DIMS if d in outer)
        return Layout(text, dims, tuple(entries))

    @staticmethod
    def from_perm(perm: tuple[int, ...]) -> "Layout":
        """A plain layout from a positional permutation (outermost logical dim first)."""
        letters = _DIMS_BY_RANK.get(len(perm))
        if letters is None or sorted(perm) != list(range(len(perm))):
            raise VpucError(f"layout: {perm} is not a permutation of rank 1..5")
        return Layout.parse("".join(letters[p] for p in perm))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_blocked(self) -> bool:
        return any(e.level > 0 for e in self.order)

    def block_sizes(self, dim: str) -> tuple[int, ...]:
        """Inner block sizes of ``dim``, outermost block first."""
        return tuple(e.block for e in sorted(self.order, key=lambda e: e.level)
                     if e.dim == dim and e.level > 0)

    def _check_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        shape = tuple(int(s) for s in shape)
        if len(shape) != self.rank:
            raise VpucError(f"layout {self.name}: shape {shape} has rank {len(shape)}, "
                            f"expected {self.rank} ({self.dims})")
        return shape

    def padded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The logical shape rounded up to whole blocks."""
        shape = self._check_shape(shape)
        return tuple(_round_up(size, math.prod(self.block_sizes(d))) for d, size in zip(self.dims, shape))

    def physical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Sizes of the memory blocks in memory order."""
        padded = dict(zip(self.dims, self.padded_shape(shape)))
        return tuple(e.block if e.level else padded[e.dim] // math.prod(self.block_sizes(e.dim))
                     for e in self.order)

    def num_elements(self, shape: tuple[int, ...]) -> int:
        """Elements the tensor occupies in memory, block padding included."""
        return math.prod(self.physical_shape(shape))

    def blocks(self, shape: tuple[int, ...]) -> tuple[Block, ...]:
        """Every memory block with its element stride, outermost first (the Kernel Generator's layout blocks)."""
        sizes = self.physical_shape(shape)
        strides = _contiguous_strides(sizes)
        return tuple(Block(e.dim, size, stride) for e, size, stride in zip(self.order, sizes, strides))

    def strides(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Element stride of each logical dim; only plain (unblocked) layouts have them."""
        if self.is_blocked:
            raise VpucError(f"layout {self.name}: a blocked layout has no single stride per dim")
        by_dim = {b.dim: b.stride for b in self.blocks(shape)}
        return tuple(by_dim[d] for d in self.dims)

    def offsets(self, shape: tuple[int, ...], index: tuple) -> np.ndarray | int:
        """Element offset of logical ``index`` (ints or broadcastable integer arrays)."""
        blocks = self.blocks(shape)
        if len(index) != self.rank:
            raise VpucError(f"layout {self.name}: index has {len(index)} dims, expected {self.rank}")
        by_dim = dict(zip(self.dims, index))
        offset = 0
        for dim in self.dims:
            # Peel inner blocks off the logical index, innermost first.
            remaining = by_dim[dim]
            levels = sorted(((e.level, b) for e, b in zip(self.order, blocks) if e.dim == dim),
                            key=lambda pair: pair[0])
            for level, block in reversed(levels):
                if level == 0:
                    offset = offset + remaining * block.stride
                else:
                    offset = offset + (remaining % block.size) * block.stride
                    remaining = remaining // block.size
        return offset

    def __str__(self) -> str:
        return self.name


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _split_axes(layout: Layout, padded: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The logical shape split into (outer, block1, block2...) per dim, and the
    permutation taking that split shape to memory order."""
    split_shape: list[int] = []
    axis_of: dict[tuple[str, int], int] = {}
    for dim, size in zip(layout.dims, padded):
        blocks = layout.block_sizes(dim)
        axis_of[(dim, 0)] = len(split_shape)
        split_shape.append(size // math.prod(blocks))
        for level, block in enumerate(blocks, start=1):
            axis_of[(dim, level)] = len(split_shape)
            split_shape.append(block)
    perm = [axis_of[(e.dim, e.level)] for e in layout.order]
    return split_shape, perm


def to_layout(array: np.ndarray, layout: "Layout | str") -> np.ndarray:
    """A logical (canonical-order) array laid out in memory: a C-contiguous array
    whose shape is ``layout.physical_shape(array.shape)``."""
    layout = Layout.parse(layout)
    padded_shape = layout.padded_shape(array.shape)
    if padded_shape != array.shape:
        padded = np.zeros(padded_shape, dtype=array.dtype)
        padded[tuple(slice(0, s) for s in array.shape)] = array
        array = padded
    split_shape, perm = _split_axes(layout, padded_shape)
    return np.ascontiguousarray(array.reshape(split_shape).transpose(perm))


def from_layout(buffer: np.ndarray, layout: "Layout | str", shape: tuple[int, ...]) -> np.ndarray:
    """The logical array of ``shape`` stored in ``buffer`` (flat or physical-shaped).

    For plain layouts the result is a transposed view of ``buffer`` (no copy)."""
    layout = Layout.parse(layout)
    physical = layout.physical_shape(shape)
    if buffer.size != math.prod(physical):
        raise VpucError(f"layout {layout.name}: buffer has {buffer.size} elements, "
                        f"shape {tuple(shape)} needs {math.prod(physical)}")
    padded_shape = layout.padded_shape(shape)
    split_shape, perm = _split_axes(layout, padded_shape)
    inverse = np.argsort(perm)
    logical = buffer.reshape(physical).transpose(inverse).reshape(padded_shape)
    if padded_shape != tuple(shape):
        logical = logical[tuple(slice(0, s) for s in shape)]
    return logical
