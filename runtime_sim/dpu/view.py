"""Views: virtual tensors indexed by GEMM/loop indices, as in oneDNN's "GPU Convolution Kernel Generator" (§Tensor, Layout and View).

A view ``V(v0, ..., v(m-1))`` reads an underlying tensor ``T(t0, ..., t(n-1))``
through one index expression per tensor dim, ``t_j = F_j(v0, ...)``, plus an
access mask per tensor dim; where a mask is false the view reads a fill value
(0 for convolution padding).  The conv source seen by forward convolution is

    V(mb, g, ic, kd, kh, kw, od, oh, ow) = src[mb, g*ICg + ic, id, ih, iw]
    ih = oh*SH + kh*DH - PH        mask: 0 <= ih < IH

**Dilation convention**: ``DH`` is the distance between kernel taps, so 1
means "no dilation" (the ONNX/PyTorch convention).  The Kernel Generator's oneDNN
convention writes ``kh*(DH+1)`` with 0 meaning none; our ``DH`` is its ``DH+1``.

An index expression may divide by a constant (``od = (id + PD - kd*DD) / SD``
in backward-data); its mask then also requires the division to be exact,
which is the Kernel Generator's "stride condition".

Materializing a view (``View.gather``) has two paths:

* strided: when every expression is affine (no division) the view is a plain
  strided window over the tensor padded with the fill value, built with
  ``as_strided`` without copying anything but the padding;
* indexed: the general fallback, a fancy-index gather with broadcast index
  arrays and the mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.lib.stride_tricks import as_strided

from vpuc.diagnostics import VpucError

from .layout import Layout, from_layout


@dataclass(frozen=True)
class IndexExpr:
    """``t = (sum(coef * var) + offset) / divisor``, valid only where the division is exact."""

    terms: tuple[tuple[str, int], ...] = ()
    offset: int = 0
    divisor: int = 1

    @staticmethod
    def var(name: str) -> "IndexExpr":
        return IndexExpr(((name, 1),))

    @staticmethod
    def of(*terms: tuple[str, int], offset: int = 0, divisor: int = 1) -> "IndexExpr":
        """``IndexExpr.of(("oh", SH), ("kh", DH), offset=-PH)`` is ``oh*SH + kh*DH - PH``."""
        return IndexExpr(tuple((name, int(coef)) for name, coef in terms if coef != 0),
                         int(offset), int(divisor))

    @property
    def is_affine(self) -> bool:
        return self.divisor == 1

    def value_range(self, sizes: dict[str, int]) -> tuple[int, int]:
        """Smallest and largest value of the numerator over the view's index ranges."""
        low = high = self.offset
        for name, coef in self.terms:
            span = coef * (sizes[name] - 1)
            low += min(0, span)
            high += max(0, span)
        return low, high

    def __str__(self) -> str:
        text = ""
        for name, coef in self.terms:
            term = name if abs(coef) == 1 else f"{name}*{abs(coef)}"
            sign = "-" if coef < 0 else "+"
            text = f"{text} {sign} {term}" if text else ("-" + term if coef < 0 else term)
        if self.offset or not text:
            sign = "-" if self.offset < 0 else "+"
            text = f"{text} {sign} {abs(self.offset)}" if text else str(self.offset)
        return f"({text}) / {self.divisor}" if self.divisor != 1 else text


@dataclass(frozen=True)
class ViewDim:
    name: str
    size: int
    kind: str = ""  # GEMM role: "M", "N" or "K" (documentation for the A/B/C views)


@dataclass(frozen=True)
class View:
    dims: tuple[ViewDim, ...]
    tensor_shape: tuple[int, ...]
    exprs: tuple[IndexExpr, ...]  # one per tensor dim, in the tensor's logical order

    def __post_init__(self) -> None:
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise VpucError(f"view: duplicate dim names in {names}")
        if len(self.exprs) != len(self.tensor_shape):
            raise VpucError(f"view: {len(self.exprs)} index expressions for a "
                            f"rank-{len(self.tensor_shape)} tensor")
        for dim in self.dims:
            if dim.size < 1:
                raise VpucError(f"view: dim {dim.name} has size {dim.size}")
        for expr in self.exprs:
            if expr.divisor < 1:
                raise VpucError(f"view: index expression {expr} divides by {expr.divisor}")
            for name, _ in expr.terms:
                if name not in names:
                    raise VpucError(f"view: index expression {expr} uses unknown dim {name!r}")

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @cached_property
    def sizes(self) -> dict[str, int]:
        return {d.name: d.size for d in self.dims}

    def _grid(self, name: str) -> np.ndarray:
        """The values of one view index, shaped to broadcast over the view."""
        position = [d.name for d in self.dims].index(name)
        shape = [1] * len(self.dims)
        shape[position] = self.dims[position].size
        return np.arange(self.dims[position].size, dtype=np.int64).reshape(shape)

    def tensor_index(self, j: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Tensor index ``t_j`` over the view (broadcastable, not full size) and its
        mask, or None where it can never be out of bounds."""
        expr, size = self.exprs[j], self.tensor_shape[j]
        value = np.full([1] * len(self.dims), expr.offset, dtype=np.int64)
        for name, coef in expr.terms:
            value = value + coef * self._grid(name)
        low, high = expr.value_range(self.sizes)
        if expr.divisor == 1:
            if low >= 0 and high < size:
                return value, None
            return value, (value >= 0) & (value < size)
        exact = value % expr.divisor == 0
        value = value // expr.divisor
        return value, exact & (value >= 0) & (value < size)

    def mask(self) -> np.ndarray | None:
        """Where the view reads the tensor (broadcastable to ``shape``, read-only); None:
        everywhere.  Worked out once per view (the simulator's views recur per layer)."""
        return self._mask

    @cached_property
    def _mask(self) -> np.ndarray | None:
        combined = None
        for j in range(len(self.tensor_shape)):
            _, mask = self.tensor_index(j)
            if mask is not None:
                combined = mask if combined is None else combined & mask
        if combined is not None:
            combined.flags.writeable = False
        return combined

    def indices(self) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """Per-tensor-dim index arrays (masked entries clamped to 0) and the combined mask."""
        indices = []
        for j in range(len(self.tensor_shape)):
            value, mask = self.tensor_index(j)
            indices.append(value if mask is None else np.where(mask, value, 0))
        return tuple(indices), self.mask()

    def offsets(self, layout: "Layout | str | None" = None) -> tuple[np.ndarray, np.ndarray]:
        """The view as an element-offset array into the tensor's memory plus a full
        boolean mask (the im2col-style gather).  Without a layout the tensor is
        taken as a C-contiguous logical array."""
        indices, mask = self.indices()
        if layout is None:
            flat = _flat_offsets(indices, self.tensor_shape)
        else:
            flat = Layout.parse(layout).offsets(self.tensor_shape, indices)
        flat = np.broadcast_to(flat, self.shape)
        full_mask = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        return np.ascontiguousarray(flat), np.ascontiguousarray(full_mask)

    def gather(self, tensor: np.ndarray, fill: float = 0.0, strided: bool | None = None) -> np.ndarray:
        """The view's values from a logical tensor; masked elements read ``fill``.

        ``strided=None`` picks the strided path when possible; the result may then
        be a read-only strided window, so copy it before writing."""
        if tuple(tensor.shape) != tuple(self.tensor_shape):
            raise VpucError(f"view: tensor shape {tuple(tensor.shape)} "
                            f"!= view's tensor shape {self.tensor_shape}")
        can_stride = self._affine
        if strided is None:
            strided = can_stride
        if strided and not can_stride:
            raise VpucError("view: a view with divided index expressions has no strided form")
        return self._gather_strided(tensor, fill) if strided else self._gather_indexed(tensor, fill)

    def gather_from(self, buffer: np.ndarray, layout: "Layout | str", fill: float = 0.0) -> np.ndarray:
        """The view's values from a tensor stored in memory with ``layout``."""
        layout = Layout.parse(layout)
        if not layout.is_blocked:
            return self.gather(from_layout(buffer, layout, self.tensor_shape), fill)
        flat, mask = self.offsets(layout)
        values = buffer.reshape(-1)[flat]
        np.copyto(values, np.asarray(fill, dtype=values.dtype), where=~mask)
        return values

    def _gather_indexed(self, tensor: np.ndarray, fill: float) -> np.ndarray:
        # Masked elements get an offset past the end of the tensor, where one fill
        # value is appended; take's clip mode sends every such offset onto it.  A
        # single flat take is several times faster than fancy indexing + copyto.
        size = tensor.size
        flat = np.zeros((), dtype=np.int64)
        for j in range(len(self.tensor_shape)):
            value, mask = self.tensor_index(j)
            term = value * math.prod(self.tensor_shape[j + 1:])
            flat = flat + (term if mask is None else np.where(mask, term, size))
        if flat.shape != self.shape:
            # Some view dim is used by no expression.  Broadcast and copy: take()
            # would silently copy a read-only broadcast index array anyway.
            flat = np.broadcast_to(flat, self.shape).copy()
        source = np.append(np.ascontiguousarray(tensor).reshape(-1), np.asarray(fill, dtype=tensor.dtype))
        return source.take(flat, mode="clip")

    @cached_property
    def _affine(self) -> bool:
        return all(e.is_affine for e in self.exprs)

    @cached_property
    def _strided_plan(self) -> tuple:
        """What ``_gather_strided`` needs of the view alone: the padded shape (None: no
        padding), the tensor's place in it, the window's origin, each view index's
        coefficient per tensor dim."""
        sizes = self.sizes
        pads = []
        for expr, size in zip(self.exprs, self.tensor_shape):
            low, high = expr.value_range(sizes)
            pads.append((max(0, -low), max(0, high - (size - 1))))
        padded_shape = None
        if any(lo or hi for lo, hi in pads):
            padded_shape = tuple(s + lo + hi for s, (lo, hi) in zip(self.tensor_shape, pads))
        interior = tuple(slice(lo, lo + s) for s, (lo, _) in zip(self.tensor_shape, pads))
        origin = tuple(e.offset + lo for e, (lo, _) in zip(self.exprs, pads))
        coefs = tuple(tuple(sum(coef for name, coef in expr.terms if name == dim.name)
                            for expr in self.exprs) for dim in self.dims)
        return padded_shape, interior, origin, coefs, {}

    def _gather_strided(self, tensor: np.ndarray, fill: float) -> np.ndarray:
        padded_shape, interior, origin, coefs, known = self._strided_plan
        if padded_shape is not None:
            # Out-of-bounds indices land in a border holding the fill value.
            padded = np.full(padded_shape, fill, dtype=tensor.dtype)
            padded[interior] = tensor
            tensor = padded
        # The window starts where every view index is 0; each view index then
        # steps through memory by the sum of its coefficients times the strides
        # (remembered per tensor strides: a view's tensors are laid out alike).
        steps = tensor.strides
        found = known.get(steps)
        if found is None:
            found = known[steps] = (
                tuple(sum(c * t for c, t in zip(row, steps)) for row in coefs),
                sum(o * t for o, t in zip(origin, steps)))
        strides, offset = found
        if tensor.flags.c_contiguous:
            # Straight over the tensor's buffer: as_strided's array interface is slower.
            window = np.ndarray(self.shape, tensor.dtype, buffer=tensor, offset=offset,
                                strides=strides)
            window.flags.writeable = False
            return window
        start = tensor[tuple(slice(o, None) for o in origin)]
        return as_strided(start, shape=self.shape, strides=strides, writeable=False)


def _flat_offsets(indices: tuple[np.ndarray, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Offsets into a C-contiguous tensor; the sum only grows to full size at the end."""
    flat = np.zeros((), dtype=np.int64)
    for j, index in enumerate(indices):
        flat = flat + index * math.prod(shape[j + 1:])
    return flat
