"""Element types, dims orders and tensor types of the VIR IR.

A tensor type is MLIR-like: a *logical* shape (N, C, H, W, ... in that order),
an element type, and a dims order giving the memory layout.  ``1x16x32x32xf16
NHWC`` is a 4-D tensor whose logical dims are N=1, C=16, H=32, W=32, stored with
C innermost.  Dynamic dims carry an upper bound (``?<=128``) so they can be
allocated; kernel contracts use ``memref`` patterns where ``*`` means any rank
and ``?`` any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class ElemType(Enum):
    """Element types; the value is the VIR spelling."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    U8 = "u8"
    I8 = "i8"
    U16 = "u16"
    I16 = "i16"
    U32 = "u32"
    I32 = "i32"
    I64 = "i64"

    @property
    def bits(self) -> int:
        return _ELEM_BITS[self]

    @property
    def nbytes(self) -> int:
        return _ELEM_BITS[self] // 8

    @property
    def is_float(self) -> bool:
        return self in (ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.F64)

    def __str__(self) -> str:
        return self.value


_ELEM_BITS = {
    ElemType.F16: 16, ElemType.BF16: 16, ElemType.F32: 32, ElemType.F64: 64,
    ElemType.U8: 8, ElemType.I8: 8, ElemType.U16: 16, ElemType.I16: 16,
    ElemType.U32: 32, ElemType.I32: 32, ElemType.I64: 64,
}
ELEM_BY_NAME = {e.value: e for e in ElemType}


# Named dims orders: the permutation lists logical dims from outermost to
# innermost in memory.  NHWC = (0, 2, 3, 1): N outermost, then H, W, and C
# innermost.  Any other permutation is spelled ``order(0, 2, 3, 1)``.
NAMED_ORDERS: dict[str, tuple[int, ...]] = {
    "SCALAR": (),
    "C": (0,),
    "NC": (0, 1),
    "CN": (1, 0),
    "CHW": (0, 1, 2),
    "HWC": (1, 2, 0),
    "HCW": (1, 0, 2),
    "NCHW": (0, 1, 2, 3),
    "NHWC": (0, 2, 3, 1),
    "NWHC": (0, 3, 2, 1),
    "NWCH": (0, 3, 1, 2),
    "NHCW": (0, 2, 1, 3),
    "NCWH": (0, 1, 3, 2),
    "NCDHW": (0, 1, 2, 3, 4),
    "NDHWC": (0, 2, 3, 4, 1),
}
_ORDER_NAMES = {perm: name for name, perm in NAMED_ORDERS.items() if name != "SCALAR"}


@dataclass(frozen=True, slots=True)
class DimsOrder:
    """A memory layout: logical dims listed from outermost to innermost."""

    perm: tuple[int, ...]

    @staticmethod
    def identity(rank: int) -> "DimsOrder":
        return DimsOrder(tuple(range(rank)))

    @property
    def rank(self) -> int:
        return len(self.perm)

    @property
    def name(self) -> str | None:
        return _ORDER_NAMES.get(self.perm)

    def is_valid(self) -> bool:
        return sorted(self.perm) == list(range(len(self.perm)))

    def __str__(self) -> str:
        name = self.name
        if name is not None:
            return name
        return "order(" + ", ".join(str(d) for d in self.perm) + ")"


@dataclass(frozen=True, slots=True)
class Dynamic:
    """A dynamic dim with an upper bound, spelled ``?<=bound``."""

    bound: int

    def __str__(self) -> str:
        return f"?<={self.bound}"


Dim = int | Dynamic


def dim_bound(dim: Dim) -> int:
    return dim.bound if isinstance(dim, Dynamic) else dim


@dataclass(frozen=True, slots=True)
class TensorType:
    dims: tuple[Dim, ...]
    elem: ElemType
    order: DimsOrder
    # Derived once: the verifier and allocator ask for these constantly.
    bound_shape: tuple[int, ...] = field(init=False, repr=False, compare=False)
    num_elements: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple(d.bound if isinstance(d, Dynamic) else d for d in self.dims)
        count = 1
        for size in shape:
            count *= size
        object.__setattr__(self, "bound_shape", shape)  # static sizes, or dynamic upper bounds
        object.__setattr__(self, "num_elements", count)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_static(self) -> bool:
        # A Dynamic never equals an int, so the dims equal their bounds iff none is dynamic.
        return self.dims == self.bound_shape

    @property
    def nbytes(self) -> int:
        """Bytes of a dense buffer of this type (at the upper bounds)."""
        return (self.num_elements * self.elem.bits + 7) // 8

    def dense_strides(self) -> tuple[int, ...]:
        """Strides in elements per logical dim, for a dense layout in ``order``."""
        shape = self.bound_shape
        strides = [0] * self.rank
        step = 1
        for dim in reversed(self.order.perm):
            strides[dim] = step
            step *= shape[dim]
        return tuple(strides)

    def shape_str(self) -> str:
        return "x".join(str(d) for d in self.dims + (self.elem,))

    def __str__(self) -> str:
        text = self.shape_str()
        if self.rank != 1 or self.order.perm != (0,):
            # Rank-1 tensors print without their only possible order.
            if self.rank:
                text += f" {self.order}"
        return text


@dataclass(frozen=True, slots=True)
class MemRefPattern:
    """A kernel contract's memref argument: element type and rank or shape.

    ``dims is None`` means any rank (``memref<*xf16>``); otherwise each entry is
    a static size or ``None`` for any size (``memref<?x?xf16>``).
    """

    elem: ElemType
    dims: tuple[int | None, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    def matches(self, tensor: TensorType) -> bool:
        if tensor.elem is not self.elem:
            return False
        if self.dims is None:
            return True
        if len(self.dims) != tensor.rank:
            return False
        return all(p is None or p == d for p, d in zip(self.dims, tensor.dims))

    def __str__(self) -> str:
        if self.dims is None:
            return f"memref<*x{self.elem}>"
        parts = ["?" if d is None else str(d) for d in self.dims]
        return "memref<" + "x".join(parts + [str(self.elem)]) + ">"
