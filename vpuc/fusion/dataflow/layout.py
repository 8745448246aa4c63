"""Port layouts: how a tensor's logical dims sit in memory, planar or blocked.

``perm`` lists the logical dims from outermost to innermost (a ``DimsOrder``).
A *blocked* layout also splits one logical dim into an outer part, kept at its
place in ``perm``, and an inner block of ``block`` elements stored innermost:
``NCHW16c`` is N, C/16, H, W, 16.  The *memory shape* lists the dims in that
storage order, so a dense row-major array of the memory shape is exactly the
buffer's bytes; canonicalization gives body ports their memory shapes.

A dim of size 1 splits into (1, 1): a planar input broadcast along the blocked
dim gets a trailing 1, the Snippets Design Guide's "trailing 1 for broadcasting".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from vpuc.ir.types import NAMED_ORDERS, Dim, DimsOrder, Dynamic

_BLOCKED = re.compile(r"([A-Z]+)(\d+)([a-z])")


@dataclass(frozen=True)
class PortLayout:
    perm: tuple[int, ...]
    blocked_dim: int | None = None
    block: int = 1

    @staticmethod
    def planar(perm: tuple[int, ...]) -> "PortLayout":
        return PortLayout(tuple(perm))

    @property
    def rank(self) -> int:
        return len(self.perm)

    @property
    def is_blocked(self) -> bool:
        return self.blocked_dim is not None

    @staticmethod
    def parse(text: str) -> "PortLayout":
        """``NCHW``, ``order(0, 2, 1)`` or a blocked name such as ``NCHW16c``."""
        text = text.strip()
        if text in NAMED_ORDERS:
            return PortLayout(NAMED_ORDERS[text])
        match = _BLOCKED.fullmatch(text)
        if match and match.group(1) in NAMED_ORDERS:
            name, block, letter = match.group(1), int(match.group(2)), match.group(3).upper()
            perm = NAMED_ORDERS[name]
            # Dim letters name logical dims in canonical order (N, C, H, W: docs/vir.md, Types).
            logical = "".join(sorted(name, key=lambda ch: perm[name.index(ch)]))
            if letter in logical and block > 1:
                return PortLayout(perm, logical.index(letter), block)
        inner = re.fullmatch(r"order\(([\d,\s]*)\)(?::(\d+)@(\d+))?", text)
        if inner:
            perm = tuple(int(p) for p in inner.group(1).split(",") if p.strip())
            if DimsOrder(perm).is_valid():
                if inner.group(2) is None:
                    return PortLayout(perm)
                block, dim = int(inner.group(2)), int(inner.group(3))
                if block > 1 and dim < len(perm):
                    return PortLayout(perm, dim, block)
        raise ValueError(f"unknown layout '{text}'; expected a dims order such as NCHW or NHWC, "
                         "order(0, 2, 1), or a blocked layout such as NCHW16c (or order(...):16@1)")

    def __str__(self) -> str:
        order = DimsOrder(self.perm)
        if not self.is_blocked:
            return str(order)
        name = order.name
        if name is None:
            return f"{order}:{self.block}@{self.blocked_dim}"   # no letters to name it by
        logical = "".join(sorted(name, key=lambda ch: self.perm[name.index(ch)]))
        return f"{name}{self.block}{logical[self.blocked_dim].lower()}"

    def prepended(self, count: int) -> "PortLayout":
        """The layout of the tensor with ``count`` leading logical dims of 1 (numpy broadcasting)."""
        perm = tuple(range(count)) + tuple(p + count for p in self.perm)
        blocked = None if self.blocked_dim is None else self.blocked_dim + count
        return PortLayout(perm, blocked, self.block)

    def memory_dims(self, dims: tuple[Dim, ...]) -> tuple[Dim, ...]:
        """The logical ``dims`` in storage order (blocked dim split, its block innermost)."""
        out: list[Dim] = []
        inner: list[Dim] = []
        for d in self.perm:
            size = dims[d]
            if d != self.blocked_dim:
                out.append(size)
            elif size == 1:
                out.append(1)
                inner.append(1)
            elif isinstance(size, Dynamic):
                out.append(Dynamic(-(-size.bound // self.block)))
                inner.append(self.block)
            else:
                if size % self.block:
                    raise ValueError(f"dim {size} is not a multiple of the block {self.block}")
                out.append(size // self.block)
                inner.append(self.block)
        return tuple(out + inner)

    def non_unit_order(self, dims: tuple[Dim, ...]) -> list[int]:
        """The logical dims that are not 1, in storage order: what decides the bytes."""
        return [d for d in self.perm if dims[d] != 1]

    # ------------------------------------------------------------ arrays (for tests and runners)
    def to_memory(self, array: np.ndarray) -> np.ndarray:
        """A logical array (of this layout's rank) as its dense storage-order array."""
        moved = np.transpose(array, self.perm)
        if not self.is_blocked:
            return np.ascontiguousarray(moved)
        axis = self.perm.index(self.blocked_dim)
        size = moved.shape[axis]
        block = 1 if size == 1 else self.block
        split = moved.reshape(moved.shape[:axis] + (size // block, block) + moved.shape[axis + 1:])
        return np.ascontiguousarray(np.moveaxis(split, axis + 1, -1))

    def from_memory(self, array: np.ndarray) -> np.ndarray:
        """The inverse of ``to_memory``."""
        if self.is_blocked:
            axis = self.perm.index(self.blocked_dim)
            back = np.moveaxis(array, -1, axis + 1)
            array = back.reshape(back.shape[:axis] + (back.shape[axis] * back.shape[axis + 1],)
                                 + back.shape[axis + 2:])
        return np.transpose(array, np.argsort(self.perm))
