"""The DPU op set, as the simulator calls it.

Every op takes and returns numpy arrays in logical NCHW order (matmul: [M, K]
x [K, N] -> [M, N]), computes in f32 and rounds once to ``out_dtype`` (default:
the first input's type).  Conv, pools and eltwise accept ``post_op`` (see
numerics.PostOp) applied after the bias.

A DPU task is split into *variants* (workloads), each writing one box of the
output given, as on the NPU, by inclusive start/end coordinates x, y, z over
W, H, C.  Passing ``variant=`` computes and returns only that box; the
simulator runs variants one at a time and stores each with ``Variant.store``.
For matmul the output [M, N] is seen as C = N (z) and H = M (y), with x = 0.

Padding of 2D ops is an int or (top, bottom, left, right).  ``avgpool``
excludes padded cells from the divisor by default (the DPU's exclude-pad
behaviour); pass ``exclude_pad=False`` to divide by the full window.
``maxpool`` never selects a padded cell.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from vpuc.diagnostics import VpucError

from . import numerics
from .conv import OutputRegion, conv_forward, crop_src, make_problem, src_view


@dataclass(frozen=True)
class Variant:
    """One DPU workload: the output box [x_start..x_end] x [y_start..y_end] x [z_start..z_end]
    over (W, H, C), inclusive, for every batch item."""

    x_start: int
    y_start: int
    z_start: int
    x_end: int
    y_end: int
    z_end: int

    def shape(self) -> tuple[int, int, int]:
        """(C, H, W) extent of the box."""
        return (self.z_end - self.z_start + 1, self.y_end - self.y_start + 1, self.x_end - self.x_start + 1)

    def check(self, out_shape: tuple[int, ...]) -> None:
        """Raise unless the box is non-empty and inside an (N, C, H, W) output."""
        _, c, h, w = out_shape
        for axis, start, end, size in (("x", self.x_start, self.x_end, w), ("y", self.y_start, self.y_end, h),
                                       ("z", self.z_start, self.z_end, c)):
            if not 0 <= start <= end < size:
                raise VpucError(f"DPU variant {self}: {axis} range [{start}, {end}] is outside 0..{size - 1}")

    def slices(self) -> tuple[slice, slice, slice, slice]:
        """Index of the box in an NCHW array."""
        return (slice(None), slice(self.z_start, self.z_end + 1),
                slice(self.y_start, self.y_end + 1), slice(self.x_start, self.x_end + 1))

    def store(self, out: np.ndarray, part: np.ndarray) -> None:
        """Write a variant's result into the full NCHW (or matmul [M, N]) output."""
        if out.ndim == 2:  # matmul: y over M rows, z over N columns
            out[self.y_start:self.y_end + 1, self.z_start:self.z_end + 1] = part
        else:
            out[self.slices()] = part

    def region(self) -> OutputRegion:
        return self._region

    @functools.cached_property
    def _region(self) -> OutputRegion:
        return OutputRegion((self.z_start, self.z_end + 1),
                            ((0, 1), (self.y_start, self.y_end + 1), (self.x_start, self.x_end + 1)))


def full_variant(out_shape: tuple[int, ...]) -> Variant:
    _, c, h, w = out_shape
    return Variant(0, 0, 0, w - 1, h - 1, c - 1)


def split_output(out_shape: tuple[int, ...], parts_x: int = 1, parts_y: int = 1,
                 parts_z: int = 1) -> list[Variant]:
    """Variants tiling an (N, C, H, W) output as a near-even grid (z-major order)."""
    _, c, h, w = out_shape
    if min(parts_x, parts_y, parts_z) < 1 or parts_x > w or parts_y > h or parts_z > c:
        raise VpucError(f"DPU: cannot split output {tuple(out_shape)} into "
                        f"{parts_x}x{parts_y}x{parts_z} variants")

    def cuts(size: int, parts: int) -> list[tuple[int, int]]:
        edges = [size * i // parts for i in range(parts + 1)]
        return [(edges[i], edges[i + 1] - 1) for i in range(parts)]

    return [Variant(x0, y0, z0, x1, y1, z1)
            for z0, z1 in cuts(c, parts_z) for y0, y1 in cuts(h, parts_y) for x0, x1 in cuts(w, parts_x)]


def _pads_2d(padding) -> tuple[tuple[int, int], tuple[int, int]]:
    if isinstance(padding, (int, np.integer)):
        return ((int(padding),) * 2,) * 2
    values = tuple(padding)
    if len(values) != 4:
        raise VpucError(f"DPU: padding must be an int or (top, bottom, left, right), got {padding!r}")
    top, bottom, left, right = values
    return ((top, bottom), (left, right))


def _check_4d(array: np.ndarray, what: str) -> np.ndarray:
    numerics.check_input(array, what)
    if array.ndim != 4:
        raise VpucError(f"DPU: {what} must be NCHW (4D), got shape {array.shape}")
    return array


def _conv_out_shape(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups) -> tuple[int, ...]:
    return make_problem(x.shape, w.shape, stride=stride, padding=_pads_2d(padding),
                        dilation=dilation, groups=groups).dst_shape()


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, stride=1, padding=0, dilation=1,
           groups: int = 1, post_op=None, out_dtype=None, variant: Variant | None = None) -> np.ndarray:
    """x: (N, C, H, W); w: (OC, C/groups, KH, KW); bias: (OC,)."""
    _check_4d(x, "conv2d input")
    _check_4d(w, "conv2d weights")
    region = None
    if variant is not None:
        variant.check(_conv_out_shape(x, w, stride, padding, dilation, groups))
        region = variant.region()
    return conv_forward(x, w, bias, stride=stride, padding=_pads_2d(padding), dilation=dilation,
                        groups=groups, post_op=post_op, out_dtype=out_dtype, region=region)


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, stride=1, padding=0,
                     dilation=1, post_op=None, out_dtype=None, variant: Variant | None = None) -> np.ndarray:
    """x: (N, C, H, W); w: (C * multiplier, 1, KH, KW): one filter per channel."""
    _check_4d(x, "depthwise input")
    _check_4d(w, "depthwise weights")
    if w.shape[1] != 1:
        raise VpucError(f"DPU: depthwise weights must be (C, 1, KH, KW), got {w.shape}")
    channels = x.shape[1]
    return conv2d(x, w, bias, stride=stride, padding=padding, dilation=dilation, groups=channels,
                  post_op=post_op, out_dtype=out_dtype, variant=variant)


def matmul(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, *, transpose_b: bool = False,
           post_op=None, out_dtype=None, variant: Variant | None = None) -> np.ndarray:
    """Fully connected: a [M, K] x b [K, N] (or b given as weights [N, K] with transpose_b)."""
    for array, what in ((a, "matmul A"), (b, "matmul B")):
        numerics.check_input(array, what)
        if array.ndim != 2:
            raise VpucError(f"DPU: {what} must be 2D, got shape {array.shape}")
    b_kn = b.T if transpose_b else b
    if a.shape[1] != b_kn.shape[0]:
        raise VpucError(f"DPU: matmul K mismatch: A is {a.shape}, B is {b.shape}"
                        f"{' (as [N, K])' if transpose_b else ' (as [K, N])'}")
    m, n = a.shape[0], b_kn.shape[1]
    if bias is not None:
        numerics.check_input(bias, "matmul bias")
        if bias.shape != (n,):
            raise VpucError(f"DPU: matmul bias shape {bias.shape} != ({n},)")
    rows, cols = slice(0, m), slice(0, n)
    if variant is not None:
        variant.check((1, n, m, 1))
        rows, cols = slice(variant.y_start, variant.y_end + 1), slice(variant.z_start, variant.z_end + 1)
    dtype = numerics.compute_dtype(a, b, bias)
    result = np.matmul(numerics.to_compute(a[rows], dtype), numerics.to_compute(b_kn[:, cols], dtype))
    bias_part = None if bias is None else bias[cols]
    return numerics.finish(result, bias_part, 1, post_op, a.dtype if out_dtype is None else out_dtype)


def _eltwise(a: np.ndarray, b: np.ndarray, ufunc, post_op, out_dtype, variant: Variant | None) -> np.ndarray:
    _check_4d(a, "eltwise input A")
    numerics.check_input(b, "eltwise input B")
    try:
        b = np.broadcast_to(b, a.shape)
    except ValueError:
        raise VpucError(f"DPU: eltwise input B {b.shape} does not broadcast to A {a.shape}") from None
    if variant is not None:
        variant.check(a.shape)
        a, b = a[variant.slices()], b[variant.slices()]
    dtype = numerics.compute_dtype(a, b)
    result = ufunc(numerics.to_compute(a, dtype), numerics.to_compute(b, dtype))
    return numerics.finish(result, None, 1, post_op, a.dtype if out_dtype is None else out_dtype)


def add(a: np.ndarray, b: np.ndarray, *, post_op=None, out_dtype=None,
        variant: Variant | None = None) -> np.ndarray:
    """a + b (b broadcasts to a's NCHW shape)."""
    return _eltwise(a, b, np.add, post_op, out_dtype, variant)


def mul(a: np.ndarray, b: np.ndarray, *, post_op=None, out_dtype=None,
        variant: Variant | None = None) -> np.ndarray:
    """a * b (b broadcasts to a's NCHW shape)."""
    return _eltwise(a, b, np.multiply, post_op, out_dtype, variant)


def permute(x: np.ndarray, out_channels: int, *, out_dtype=None,
            variant: Variant | None = None) -> np.ndarray:
    """NCE permute: ``x`` itself (NCHW values: the output's dims order is the layout of the
    buffer it is stored into), channels ``C..out_channels - 1`` zero.  The NPU runs it as an
    eltwise ADD of the input with itself scaled by 0.5 (``x + x`` and the halving are exact
    in binary floating point, overflow aside), so the values pass through unchanged."""
    _check_4d(x, "permute input")
    n, c, h, w = x.shape
    if out_channels < c:
        raise VpucError(f"DPU: permute to {out_channels} channels drops channels of its "
                        f"{c}-channel input")
    dtype = x.dtype if out_dtype is None else out_dtype
    box = variant or full_variant((n, out_channels, h, w))
    box.check((n, out_channels, h, w))
    part = np.zeros((n,) + box.shape(), dtype)
    real = min(box.z_end + 1, c) - box.z_start
    if real > 0:
        src = x[:, box.z_start:box.z_start + real, box.y_start:box.y_end + 1,
                box.x_start:box.x_end + 1]
        part[:, :real] = numerics.round_to(src, dtype) if src.dtype != dtype else src
    return part


def _pool_windows(x: np.ndarray, kernel, stride, padding, variant: Variant | None, fill: float):
    """The pooling windows as a view (c, 1, 1, kh, kw, n, 1, oh, ow) over x in the compute
    type (a strided window, not a copy), that view, whose mask marks real cells, and whether
    the pool has one window per channel (a global pool)."""
    _check_4d(x, "pool input")
    kernel = (kernel, kernel) if isinstance(kernel, (int, np.integer)) else tuple(kernel)
    if len(kernel) != 2 or any(not isinstance(k, (int, np.integer)) or k < 1 for k in kernel):
        raise VpucError(f"DPU: pool kernel must be an int >= 1 or (KH, KW), got {kernel!r}")
    kh, kw = kernel
    stride = (kh, kw) if stride is None else stride
    pads = _pads_2d(padding)
    if pads[0][0] >= kh or pads[0][1] >= kh or pads[1][0] >= kw or pads[1][1] >= kw:
        raise VpucError(f"DPU: pool padding {padding!r} must be smaller than the kernel {kh}x{kw}")
    n, c = x.shape[:2]
    # A pool window is the source view of a depthwise conv (one channel per group).
    p = make_problem(x.shape, (c, 1, kh, kw), stride=stride, padding=pads, groups=c)
    if variant is not None:
        variant.check(p.dst_shape())
        region = variant.region()
    else:
        region = OutputRegion((0, c), tuple((0, size) for size in p.out_size))
    # Only the box's channels and the rows and columns its windows read are widened.
    part, sub, sub_region = crop_src(x, p, region, *region.channels)
    view = src_view(sub, sub_region)
    dtype = numerics.compute_dtype(x)
    tensor = numerics.to_compute(part, dtype).reshape(n, sub.ic, 1, *part.shape[2:])
    return view.gather(tensor, fill=fill), view, p.out_size == (1, 1, 1)


_WINDOW_AXES = (1, 2, 3, 4)  # ic, kd, kh, kw of the conv source view


def _to_nchw(reduced: np.ndarray) -> np.ndarray:
    """(c, n, 1, oh, ow) -> (n, c, oh, ow)."""
    return reduced[:, :, 0].transpose(1, 0, 2, 3)


def _reduce_taps(windows: np.ndarray, ufunc, single: bool) -> np.ndarray:
    """Combine the window taps with ``ufunc``.  A pool of one window per channel (``single``)
    is one reduction over the window (a 56x56 window: 3,136 ufunc calls as taps, measured
    400x slower); otherwise one tap at a time: numpy's multi-axis reductions over
    overlapping strided windows are several times slower than KH*KW whole-array ufunc
    calls.  Either way an output's order of combination depends on the pool alone, not on
    the workload's box."""
    if single:
        return np.ascontiguousarray(_to_nchw(ufunc.reduce(windows[:, 0, 0], axis=(1, 2))))
    kh, kw = windows.shape[3:5]
    result = np.array(windows[:, 0, 0, 0, 0])  # (c, n, 1, oh, ow), a writable copy
    for i in range(kh):
        for j in range(kw):
            if i or j:
                ufunc(result, windows[:, 0, 0, i, j], out=result)
    return np.ascontiguousarray(_to_nchw(result))


def maxpool(x: np.ndarray, kernel, stride=None, padding=0, *, post_op=None, out_dtype=None,
            variant: Variant | None = None) -> np.ndarray:
    """Max over each window (stride defaults to the kernel); padded cells never win."""
    windows, _, single = _pool_windows(x, kernel, stride, padding, variant, fill=-np.inf)
    result = _reduce_taps(windows, np.maximum, single)
    return numerics.finish(result, None, 1, post_op, x.dtype if out_dtype is None else out_dtype)


def avgpool(x: np.ndarray, kernel, stride=None, padding=0, *, exclude_pad: bool = True, post_op=None,
            out_dtype=None, variant: Variant | None = None) -> np.ndarray:
    """Mean over each window; with exclude_pad the divisor counts only real cells."""
    windows, view, single = _pool_windows(x, kernel, stride, padding, variant, fill=0.0)
    result = _reduce_taps(windows, np.add, single)
    mask = view.mask()
    if exclude_pad and mask is not None:
        # The view's padding mask, summed over each window, counts its real cells.
        # The mask may be size 1 along a window axis it does not depend on, so
        # broadcast it to the full window first.
        window = [view.shape[axis] if axis in _WINDOW_AXES else 1 for axis in range(len(view.shape))]
        cells = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, tuple(window)))
        result /= _to_nchw(cells.sum(axis=_WINDOW_AXES)).astype(result.dtype)
    else:
        kh, kw = view.shape[3:5]
        result /= kh * kw
    return numerics.finish(result, None, 1, post_op, x.dtype if out_dtype is None else out_dtype)


_MACS_PER_OUTPUT = {
    "conv2d": lambda kernel, in_channels, groups: math.prod(kernel) * (in_channels // groups),
    "depthwise_conv2d": lambda kernel, in_channels, groups: math.prod(kernel),
    "matmul": lambda kernel, in_channels, groups: in_channels,
    "maxpool": lambda kernel, in_channels, groups: math.prod(kernel),
    "avgpool": lambda kernel, in_channels, groups: math.prod(kernel),
    "add": lambda kernel, in_channels, groups: 1,
    "mul": lambda kernel, in_channels, groups: 1,
    "permute": lambda kernel, in_channels, groups: 0,     # a copy: no network arithmetic
}


def macs(op: str, out_shape: tuple[int, ...], *, kernel: tuple[int, int] = (1, 1), in_channels: int = 1,
         groups: int = 1) -> int:
    """MACs of a (sub-)workload with output ``out_shape`` (NCHW, a Variant's box with its
    batch, or [M, N] for matmul, whose K is ``in_channels``).  Pools and eltwise count
    one MAC per window cell / element, which is how the DPU spends them."""
    if op not in _MACS_PER_OUTPUT:
        raise VpucError(f"DPU: unknown op {op!r} (expected one of {', '.join(_MACS_PER_OUTPUT)})")
    if groups < 1 or in_channels % groups:
        raise VpucError(f"DPU: groups={groups} must divide in_channels={in_channels}")
    return math.prod(out_shape) * _MACS_PER_OUTPUT[op](tuple(kernel), in_channels, groups)
