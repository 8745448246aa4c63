"""Generalized convolution as GEMM (forward, backward-data, backward-weights).

Following oneDNN's "GPU Convolution Kernel Generator", every propagation kind is one GEMM ``C = A x B`` over
M/N/K dims, with A and B given as views (index expressions + padding masks):

    kind   A (M x K)   B (K x N)   C (M x N)   M               N    K
    FWD    src         weights     dst         mb.od.oh.ow     oc   ic.kd.kh.kw
    BWD_D  diff_dst    weights     diff_src    mb.id.ih.iw     ic   oc.kd.kh.kw
    BWD_W  src         diff_dst    diff_wei    ic.kd.kh.kw     oc   mb.od.oh.ow

one GEMM per group, channel counts being per group.  We evaluate the
transposed product ``C^T = B^T A^T``: the result comes out channel-major (for
mb = 1 directly in NC(D)HW order) and the spatial M dims stay innermost and
contiguous in the im2col matrix.  A view lists its dims as (g, K dims..., M
dims...), so materializing it and reshaping to (g, K, M) *is* that matrix.
BWD_W's A^T is FWD's src view; its B^T is diff_dst reshaped to (g, oc, K).
The backward kinds are in conv_backward.py.

Tensors are logical N, C, (D,) (H,) W arrays (1D, 2D or 3D spatial); weights
are (OC, IC/groups, (KD,) (KH,) KW).  Internally every problem is 3D, missing
spatial dims having size 1.  Padding is given per spatial dim as (before,
after), e.g. ((top, bottom), (left, right)) for 2D.  Dilation: 1 means none
(see view.py).
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from vpuc.diagnostics import VpucError

from . import numerics
from .view import IndexExpr, View, ViewDim

Triple = tuple[int, int, int]


@dataclass(frozen=True)
class ConvProblem:
    mb: int
    groups: int
    ic: int
    oc: int
    in_size: Triple        # (id, ih, iw)
    kernel: Triple         # (kd, kh, kw)
    out_size: Triple       # (od, oh, ow)
    stride: Triple
    dilation: Triple
    pad_before: Triple     # (front, top, left)
    pad_after: Triple      # (back, bottom, right)
    spatial_rank: int

    @property
    def icg(self) -> int:
        return self.ic // self.groups

    @property
    def ocg(self) -> int:
        return self.oc // self.groups

    def src_shape(self) -> tuple[int, ...]:
        return (self.mb, self.ic) + self.in_size[3 - self.spatial_rank:]

    def dst_shape(self) -> tuple[int, ...]:
        return (self.mb, self.oc) + self.out_size[3 - self.spatial_rank:]

    def weights_shape(self) -> tuple[int, ...]:
        return (self.oc, self.icg) + self.kernel[3 - self.spatial_rank:]


@dataclass(frozen=True)
class OutputRegion:
    """A box of the destination, half-open per dim: channels and (d, h, w)."""

    channels: tuple[int, int]
    spatial: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


def _spatial_param(value, rank: int, name: str, minimum: int) -> Triple:
    if isinstance(value, (int, np.integer)):
        values = [value] * rank
    else:
        values = list(value) if isinstance(value, (tuple, list)) else []
    if len(values) != rank or any(not isinstance(v, (int, np.integer)) or v < minimum for v in values):
        raise VpucError(f"conv: {name} must be an int >= {minimum} or {rank} of them, got {value!r}")
    return tuple([1] * (3 - rank) + [int(v) for v in values])


def _padding(padding, rank: int) -> tuple[Triple, Triple]:
    """int, one int per dim (symmetric), or one (before, after) pair per dim."""
    def is_count(value) -> bool:
        return isinstance(value, (int, np.integer)) and value >= 0

    def as_pair(value) -> tuple:
        if is_count(value):
            return (value, value)
        return tuple(value) if isinstance(value, (tuple, list)) else (value,)

    if is_count(padding):
        pairs = [(padding, padding)] * rank
    elif isinstance(padding, (tuple, list)):
        pairs = [as_pair(p) for p in padding]
    else:
        pairs = []
    if len(pairs) != rank or not all(len(p) == 2 and is_count(p[0]) and is_count(p[1]) for p in pairs):
        raise VpucError(f"conv: padding must be an int >= 0, {rank} ints, or {rank} (before, after) pairs; "
                        f"got {padding!r}")
    before = tuple([0] * (3 - rank) + [int(p[0]) for p in pairs])
    after = tuple([0] * (3 - rank) + [int(p[1]) for p in pairs])
    return before, after


def make_problem(src_shape, weights_shape, *, stride=1, padding=0, dilation=1, groups=1) -> ConvProblem:
    """Validate a convolution and compute its output size.  The simulator asks again for
    every workload of a layer: answers for hashable arguments are remembered."""
    key = (tuple(src_shape), tuple(weights_shape), stride, padding, dilation, groups)
    try:
        hash(key)
    except TypeError:                       # a list among the arguments: not remembered
        return _make_problem(*key)
    return _cached_problem(*key)


def _make_problem(src_shape, weights_shape, stride, padding, dilation, groups) -> ConvProblem:
    rank = len(src_shape) - 2
    if rank not in (1, 2, 3):
        raise VpucError(f"conv: source must be N,C plus 1-3 spatial dims, got shape {src_shape}")
    if len(weights_shape) != rank + 2:
        raise VpucError(f"conv: weights shape {weights_shape} does not match a {rank}D source {src_shape}")
    mb, ic = src_shape[:2]
    oc, icg = weights_shape[:2]
    if not isinstance(groups, (int, np.integer)) or groups < 1 or ic % groups or oc % groups:
        raise VpucError(f"conv: groups={groups} must divide input channels {ic} and output channels {oc}")
    if icg * groups != ic:
        raise VpucError(f"conv: weights {weights_shape} have {icg} input channels per group, "
                        f"source has {ic} channels in {groups} group(s)")
    stride3 = _spatial_param(stride, rank, "stride", 1)
    dilation3 = _spatial_param(dilation, rank, "dilation", 1)
    before, after = _padding(padding, rank)
    in3 = tuple([1] * (3 - rank) + list(src_shape[2:]))
    kernel3 = tuple([1] * (3 - rank) + list(weights_shape[2:]))
    if min(in3) < 1 or min(kernel3) < 1 or mb < 1 or oc < 1:
        raise VpucError(f"conv: empty source {src_shape} or weights {weights_shape}")
    out3 = []
    for size, k, s, d, lo, hi in zip(in3, kernel3, stride3, dilation3, before, after):
        span = (k - 1) * d + 1
        if size + lo + hi < span:
            raise VpucError(f"conv: dilated kernel extent {span} exceeds padded input {size + lo + hi}")
        out3.append((size + lo + hi - span) // s + 1)
    return ConvProblem(mb, groups, ic, oc, in3, kernel3, tuple(out3), stride3, dilation3, before, after, rank)


_cached_problem = functools.lru_cache(maxsize=1024)(_make_problem)


def _to_3d(array: np.ndarray, rank: int) -> np.ndarray:
    return array.reshape(array.shape[:2] + (1,) * (3 - rank) + array.shape[2:])


@functools.lru_cache(maxsize=1024)
def src_view(p: ConvProblem, region: OutputRegion | None = None, group_start: int = 0,
             groups: int | None = None) -> View:
    """FWD's A view (BWD_W's too): src seen as (g, ic, kd, kh, kw, mb, od, oh, ow)."""
    out_ranges = region.spatial if region else tuple((0, n) for n in p.out_size)
    groups = p.groups if groups is None else groups
    dims = [ViewDim("g", groups), ViewDim("ic", p.icg, "K")]
    dims += [ViewDim(k, n, "K") for k, n in zip(("kd", "kh", "kw"), p.kernel)]
    dims += [ViewDim("mb", p.mb, "M")]
    dims += [ViewDim(o, stop - start, "M") for o, (start, stop) in zip(("od", "oh", "ow"), out_ranges)]
    spatial = [IndexExpr.of((o, s), (k, d), offset=start * s - lo)
               for o, k, s, d, (start, _), lo in zip(("od", "oh", "ow"), ("kd", "kh", "kw"),
                                                     p.stride, p.dilation, out_ranges, p.pad_before)]
    channel = IndexExpr.of(("g", p.icg), ("ic", 1), offset=group_start * p.icg)
    exprs = (IndexExpr.var("mb"), channel, *spatial)
    return View(tuple(dims), (p.mb, p.ic) + p.in_size, exprs)


def _im2col(view: View, tensor: np.ndarray) -> np.ndarray:
    """Materialize a (g, k dims..., m dims...) view as the GEMM operand (g, K, M)."""
    groups = view.shape[0]
    k = math.prod(view.shape[1:5])
    return view.gather(tensor).reshape(groups, k, -1)


# With BLAS on one thread (as the simulator runs it), a single-group forward GEMM whose
# im2col would exceed this is computed in blocks of output rows, each block's im2col written
# to one reused buffer and multiplied while it is still in cache (a whole 1x64x56x56 3x3
# im2col is 7 MiB, written to DRAM and read back).  With more threads each block's product
# is a fork and join of BLAS's threads, which spin for their turn on a busy machine: measured
# 2-4x slower than one product, so then the im2col is made whole.
_BLOCK_BYTES = 2 << 20
# ... and only when each block's product is large enough that BLAS takes its general path
# (OpenBLAS's small-matrix kernels stop well below this many multiply-adds).
_BLOCK_MIN_MACS = 8_000_000
_blas_libraries: list | None = None
# The block buffer and the product are kept per thread between calls: fresh ones each call
# (2.8 MiB for the 1x64x56x56 conv) let glibc return the heap's top to the system after
# every convolution, and the next one took ~1000 page faults (1.6 us each on this VM: about
# as long as the GEMM itself).
# A product larger than the cap is not kept (a thread holds at most this much per name).
_scratch = threading.local()
_SCRATCH_CAP_BYTES = 16 << 20


def _scratch_buffer(name: str, size: int, dtype: np.dtype) -> np.ndarray:
    """``size`` elements of this thread's scratch ``name`` (contents undefined); past the
    cap, a fresh array."""
    if size * np.dtype(dtype).itemsize > _SCRATCH_CAP_BYTES:
        return np.empty(size, dtype)
    buffer = getattr(_scratch, name, None)
    if buffer is None or buffer.dtype != dtype or buffer.size < size:
        buffer = np.empty(size, dtype)
        setattr(_scratch, name, buffer)
    return buffer[:size]


def _blas_single_threaded() -> bool:
    """Whether numpy's BLAS runs on one thread now (``vpuc.perf.single_threaded_blas``,
    OPENBLAS_NUM_THREADS=1): a few microseconds to ask."""
    global _blas_libraries
    if _blas_libraries is None:
        from threadpoolctl import ThreadpoolController
        _blas_libraries = ThreadpoolController().select(user_api="blas").lib_controllers
    return all(library.num_threads == 1 for library in _blas_libraries)


def _im2col_blocks(view: View, tensor: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """One group, one image, one output depth: (1, n, M) as ``_grouped_matmul`` gives it for
    ``_im2col(view, tensor)``, computed a block of output rows at a time; None when the
    problem is not of that form, too small to gain, or BLAS has several threads.  Each
    output is the same length-K dot product either way (BLAS blocks K, not M).  The result
    is a view of this thread's scratch: the caller copies what it returns out of it."""
    groups, *k_dims, mb, od, oh, ow = view.shape
    k, n = math.prod(k_dims), w.shape[1]
    rows = _BLOCK_BYTES // (k * ow * w.itemsize)
    if (groups != 1 or mb != 1 or od != 1 or not 0 < rows < oh
            or rows * ow * k * n < _BLOCK_MIN_MACS or not _blas_single_threaded()):
        return None
    window = view.gather(tensor)[0, :, :, :, :, 0, 0]      # (ic, kd, kh, kw, oh, ow), strided
    out = _scratch_buffer("product", oh * ow * n, w.dtype).reshape(oh * ow, n)
    block = _scratch_buffer("block", k * rows * ow, w.dtype)
    weights_t = w[0].T
    count = -(-oh // rows)              # blocks of near-equal rows: no small last product
    for r0, r1 in ((oh * i // count, oh * (i + 1) // count) for i in range(count)):
        a = block[:k * (r1 - r0) * ow].reshape(window.shape[:4] + (r1 - r0, ow))
        np.copyto(a, window[..., r0:r1, :])
        np.matmul(a.reshape(k, -1).T, weights_t, out=out[r0 * ow:r1 * ow])
    return out.T[None]


def _grouped_matmul(w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """(g, n, K) x (g, K, M) -> (g, n, M).  One group is computed as the 2-D product
    (M x K)(K x n) on transposed views, the orientation of a plain GEMM with the long
    side first: measured up to 3x faster than (n x K)(K x M) under a busy machine."""
    if w.shape[0] == 1:
        return np.matmul(a[0].T, w[0].T).T[None]
    return np.matmul(w, a)


def _channels_first(result: np.ndarray, mb: int) -> np.ndarray:
    """GEMM output (g, n, mb.spatial) -> (mb, g.n, spatial), i.e. N C spatial, as a view
    where it can be: the rounding to the stored type makes the one contiguous copy."""
    groups, n = result.shape[:2]
    return result.reshape(groups * n, mb, -1).transpose(1, 0, 2)


def conv_forward(src: np.ndarray, weights: np.ndarray, bias: np.ndarray | None = None, *,
                 stride=1, padding=0, dilation=1, groups: int = 1,
                 post_op: numerics.PostOp | str | None = None, out_dtype=None,
                 region: OutputRegion | None = None) -> np.ndarray:
    """dst = post_op(conv(src, weights) + bias), rounded to ``out_dtype`` (default: src's type).

    With ``region`` only that box of dst is computed and returned."""
    numerics.check_input(src, "conv source")
    numerics.check_input(weights, "conv weights")
    p = make_problem(src.shape, weights.shape, stride=stride, padding=padding, dilation=dilation,
                     groups=groups)
    if bias is not None:
        numerics.check_input(bias, "conv bias")
        if bias.shape != (p.oc,):
            raise VpucError(f"conv: bias shape {bias.shape} != ({p.oc},)")
    region = region or OutputRegion((0, p.oc), tuple((0, n) for n in p.out_size))
    _check_region(region, p)
    dtype = numerics.compute_dtype(src, weights, bias)

    # Only the groups overlapping the region's channels are computed, and only the part of
    # src their windows read is widened and padded (a workload is a small box of a layer).
    c0, c1 = region.channels
    g0, g1 = c0 // p.ocg, (c1 - 1) // p.ocg + 1
    part, sub, sub_region = crop_src(src, p, region, g0, g1)
    view = src_view(sub, sub_region)
    tensor = _to_3d(numerics.to_compute(part, dtype), p.spatial_rank)
    w = numerics.to_compute(weights[g0 * p.ocg:g1 * p.ocg], dtype).reshape(g1 - g0, p.ocg, -1)
    product = in_scratch = _im2col_blocks(view, tensor, w)
    if product is None:
        product = _grouped_matmul(w, _im2col(view, tensor))
    result = _channels_first(product, p.mb)  # (mb, channels of the groups, spatial)
    if (c0, c1) != (g0 * p.ocg, g1 * p.ocg):
        result = result[:, c0 - g0 * p.ocg:c1 - g0 * p.ocg]
    out_spatial = tuple(stop - start for start, stop in region.spatial)[3 - p.spatial_rank:]
    result = result.reshape((p.mb, c1 - c0) + out_spatial)
    bias_part = None if bias is None else bias[c0:c1]
    # Bias and activation in place on the GEMM's (spatial x channels) output seen channels
    # first; rounding to the stored type writes it out contiguous in one pass.
    out = numerics.finish(result, bias_part, 1, post_op,
                          src.dtype if out_dtype is None else out_dtype)
    out = np.ascontiguousarray(out)  # no copy unless the output stays in the compute type
    if in_scratch is not None and np.may_share_memory(out, in_scratch):
        out = out.copy()                 # the next call reuses the blocks' product buffer
    return out


def crop_src(src: np.ndarray, p: ConvProblem, region: OutputRegion, g0: int,
             g1: int) -> tuple[np.ndarray, ConvProblem, OutputRegion]:
    """(src's channels of groups g0..g1 and the spatial span the region's windows read, the
    problem of that part with the padding its windows still reach, the region in it).  The
    windows see the same values, so the im2col matrix and the product are unchanged.  A dim
    whose windows read only padding keeps its whole extent."""
    index, sub, sub_region = _crop_plan(p, region, g0, g1)
    return src[index], sub, sub_region


@functools.lru_cache(maxsize=1024)
def _crop_plan(p: ConvProblem, region: OutputRegion, g0: int,
               g1: int) -> tuple[tuple, ConvProblem, OutputRegion]:
    rank = p.spatial_rank
    index = [slice(None), slice(g0 * p.icg, g1 * p.icg)]
    in_size, before, after, out_size, spatial = [], [], [], [], []
    for d, (start, stop) in enumerate(region.spatial):
        size, stride, pad = p.in_size[d], p.stride[d], p.pad_before[d]
        lo = start * stride - pad
        hi = (stop - 1) * stride - pad + (p.kernel[d] - 1) * p.dilation[d]   # inclusive
        first, last = max(lo, 0), min(hi, size - 1)
        if first > last:
            first, last, lo, hi = 0, size - 1, -pad, size - 1 + p.pad_after[d]
            out_size.append(p.out_size[d])
            spatial.append((start, stop))
        else:
            out_size.append(stop - start)
            spatial.append((0, stop - start))
        in_size.append(last - first + 1)
        before.append(first - lo)
        after.append(hi - last)
        if d >= 3 - rank:
            index.append(slice(first, last + 1))
    groups = g1 - g0
    sub = ConvProblem(p.mb, groups, groups * p.icg, groups * p.ocg, tuple(in_size), p.kernel,
                      tuple(out_size), p.stride, p.dilation, tuple(before), tuple(after), rank)
    channels = (region.channels[0] - g0 * p.ocg, region.channels[1] - g0 * p.ocg)
    return tuple(index), sub, OutputRegion(channels, tuple(spatial))


def _check_region(region: OutputRegion, p: ConvProblem) -> None:
    bounds = [p.oc, *p.out_size]
    for (start, stop), size in zip([region.channels, *region.spatial], bounds):
        if not 0 <= start < stop <= size:
            raise VpucError(f"conv: output region {region} is outside the output {p.dst_shape()}")
