"""The DPU engine: one variant (workload) at a time, numerics and cycles.

Numerics call ``runtime_sim.dpu`` on in-place views of CMX (logical NCHW, or
[M, K] for matmul) and store only the variant's output box, so a variant
writes exactly the bytes it owns.  Cycles come from the cost model
(``vpuc.cost.dpu``: execution mode, per-op throughput, CMX fetch and write,
per-workload setup), fed with the variant's box and its operands' types.
"""

from __future__ import annotations

import functools
import math

from runtime_sim import dpu as ops
from runtime_sim.dpu.integer import dequantize, integer_sums, requantize
from runtime_sim.dpu.numerics import PostOp
from runtime_sim.memory import Memory
from runtime_sim.simarch import SimArch
from vpuc.cost.dpu import DpuWorkload, dpu_variant_cycles, permute_workload
from vpuc.diagnostics import VpucError
from vpuc.ir.symbols import Region, span_of
from vpuc.ir.tasks import DpuOp, DpuTask, PostOpKind
from vpuc.ir.types import TensorType

DENSE = (DpuOp.CONV, DpuOp.MATMUL)
MACS_NAME = {DpuOp.CONV: "conv2d", DpuOp.DWCONV: "depthwise_conv2d", DpuOp.MATMUL: "matmul",
             DpuOp.MAXPOOL: "maxpool", DpuOp.AVGPOOL: "avgpool", DpuOp.ADD: "add",
             DpuOp.MUL: "mul", DpuOp.PERMUTE: "permute"}


def post_op(task: DpuTask) -> PostOp | None:
    post = task.post
    if post is None:
        return None
    return _post_op(post.kind, tuple(post.params))


@functools.lru_cache(maxsize=256)
def _post_op(kind: PostOpKind, params: tuple[float, ...]) -> PostOp:
    """The numerics' PostOp of a task's post-op (frozen: one per kind and parameters)."""
    if kind is PostOpKind.RELU:
        return PostOp.relu()
    if kind is PostOpKind.LRELU:
        return PostOp.leaky_relu(params[0])
    if kind is PostOpKind.CLAMP:
        return PostOp.clamp(params[0], params[1])
    return PostOp.sigmoid() if kind is PostOpKind.SIGMOID else PostOp.tanh()


def variant_box(task: DpuTask, index: int) -> ops.Variant:
    v = task.variants[index]
    return _box(tuple(v.start), tuple(v.end))


@functools.lru_cache(maxsize=4096)
def _box(start: tuple[int, int, int], end: tuple[int, int, int]) -> ops.Variant:
    return ops.Variant(start[0], start[1], start[2], end[0], end[1], end[2])


def window(task: DpuTask, weights_shape: tuple[int, ...] | None):
    kernel = task.kernel or (tuple(weights_shape[2:4]) if weights_shape else (1, 1))
    return (tuple(kernel), tuple(task.stride or (1, 1)), tuple(task.pad or (0, 0, 0, 0)),
            tuple(task.dilation or (1, 1)))


# ------------------------------------------------------------------ cycles

def workload(task: DpuTask, index: int, tensors: dict[str, TensorType]) -> DpuWorkload:
    """The cost model's description of one variant, from its operands' tensor types."""
    box = variant_box(task, index)
    channels, rows, cols = box.shape()
    x, out = tensors["in0"], tensors["out"]
    weights = tensors.get("weights")
    w_bytes = weights.elem.nbytes if weights is not None else x.elem.nbytes
    common = dict(op=task.op.value, elem=x.elem.value, channels=channels,
                  in_bytes=x.elem.nbytes, out_bytes=out.elem.nbytes, weight_bytes=w_bytes,
                  mode=task.variants[index].mode or task.mode)
    if task.op is DpuOp.MATMUL:
        # A matmul runs as a 1x1 convolution over its rows laid along W (H = 1).
        return DpuWorkload(width=rows, height=1, in_channels=x.bound_shape[1], **common)
    if task.op is DpuOp.PERMUTE:
        return permute_workload(x.bound_shape[0] * rows * cols, channels, x.elem.value,
                                x.elem.nbytes, out.elem.nbytes, common["mode"])
    kernel, stride, _, _ = window(task, weights.bound_shape if weights else None)
    batch = x.bound_shape[0]
    if batch > 1 and pixel_batch(x, out, kernel, stride):
        # a batch of single pixels: the NHWC bytes of one row of ``batch`` pixels
        cols, batch = batch * cols, 1
    return DpuWorkload(width=cols, height=rows, batch=batch,
                       in_channels=x.bound_shape[1] if task.op in DENSE else channels,
                       kernel=kernel, stride=stride, **common)


def pixel_batch(x: TensorType, out: TensorType, kernel, stride) -> bool:
    """Whether a window op's input and output are ``[N, C, 1, 1]`` under a 1x1 kernel of
    stride 1: the bytes of the NHWC ``[1, C, 1, N]``, one row of N pixels (N is outermost
    and H = W = 1, so pixel n's channels are the n-th run of C values in either order).
    The NCE's workload has no batch (vpunn ``DPUWorkload``: W, H, C; the NPU compiler
    unrolls a batch or reshapes it into the spatial dims), so such a variant runs, and is
    charged, as that row: width = N x W, batch 1.  ``lower_dpu_scale_weights`` scales a 1x1 convolution's
    weights ``[O, I, 1, 1]`` (NHWC: O runs of I values) so, as a depthwise 1x1 over O pixels
    of I channels."""
    shape = (x.bound_shape[2:], out.bound_shape[2:])
    return shape == ((1, 1), (1, 1)) and tuple(kernel) == (1, 1) and tuple(stride) == (1, 1)


def variant_cycles(task: DpuTask, index: int, tensors: dict[str, TensorType],
                   arch: SimArch) -> tuple[float, int]:
    """(NCE cycles the variant occupies its DPU, dispatch included, MACs) of one variant,
    from its operands' tensor types.  The cost model charges it in its pinned mode (the
    variant's, else the task's), else in the mode it chooses, as the compiler would have."""
    w = workload(task, index, tensors)
    if task.op is DpuOp.MATMUL:
        macs = ops.macs("matmul", (w.width, w.channels), in_channels=w.in_channels)
    else:
        macs = ops.macs(MACS_NAME[task.op], (w.batch, w.channels, w.height, w.width),
                        kernel=w.kernel, in_channels=w.in_channels)
    try:
        return dpu_variant_cycles(w, arch.dpu, arch.dispatch["DPU"]), macs
    except ValueError as exc:
        raise VpucError(f"the DPU cost model cannot cost this variant: {exc}", task.loc) from None


# ------------------------------------------------------------------ regions a variant touches

def sub_region(region: Region, starts: tuple[int, ...], sizes: tuple[int, ...]) -> Region:
    offset = region.byte_offset + sum(s * b // 8 for s, b in zip(starts, region.strides_bits))
    tensor = TensorType(tuple(sizes), region.type.elem, region.type.order)
    return Region(region.name, region.root, tensor, offset, region.strides_bits,
                  span_of(tensor, region.strides_bits))


def _clip(lo: int, hi: int, size: int) -> tuple[int, int]:
    lo, hi = max(lo, 0), min(hi, size - 1)
    return lo, max(hi - lo + 1, 0)


# A sub-box of an operand's region as numbers: (region, starts, sizes).
Box = tuple[Region, tuple[int, ...], tuple[int, ...]]


def variant_accesses(task: DpuTask, index: int,
                     regions: dict[str, Region]) -> tuple[list[Region], Region]:
    """(regions read, region written) by one variant: its output box and the input
    windows, weights and bias slices that box needs."""
    reads, written = variant_boxes(task, index, regions)
    return [sub_region(*r) for r in reads], sub_region(*written)


def variant_boxes(task: DpuTask, index: int,
                  regions: dict[str, Region]) -> tuple[list[Box], Box]:
    """``variant_accesses`` as boxes, no ``Region`` built: the race proof needs only
    their spans, and a strided box's rows only where two spans meet."""
    box = variant_box(task, index)
    out = regions["out"]
    reads: list[Box] = []
    if task.op is DpuOp.MATMUL:
        rows = (box.y_start, box.y_end - box.y_start + 1)
        cols = (box.z_start, box.z_end - box.z_start + 1)
        written = (out, (rows[0], cols[0]), (rows[1], cols[1]))
        a = regions["in0"]
        reads.append((a, (rows[0], 0), (rows[1], a.type.bound_shape[1])))
        w = regions["weights"]
        reads.append((w, (cols[0], 0), (cols[1], w.type.bound_shape[1])))
    else:
        n = out.type.bound_shape[0]
        c, h, w_ = box.shape()
        written = (out, (0, box.z_start, box.y_start, box.x_start), (n, c, h, w_))
        weights = regions.get("weights")
        (kh, kw), (sh, sw), (pt, _, pl, _), (dh, dw) = window(
            task, weights.type.bound_shape if weights else None)
        for key in ("in0", "in1"):
            x = regions.get(key)
            if x is None:
                continue
            _, xc, xh, xw = x.type.bound_shape
            y0, ny = _clip(box.y_start * sh - pt, box.y_end * sh - pt + dh * (kh - 1), xh)
            x0, nx = _clip(box.x_start * sw - pl, box.x_end * sw - pl + dw * (kw - 1), xw)
            c0, nc = (0, xc) if task.op is DpuOp.CONV else (box.z_start, c)
            if task.op is DpuOp.PERMUTE:          # its zero channels read nothing
                nc = max(min(box.z_end + 1, xc) - c0, 0)
            if ny and nx and nc:
                reads.append((x, (0, c0, y0, x0), (x.type.bound_shape[0], nc, ny, nx)))
        if weights is not None:
            shape = weights.type.bound_shape
            reads.append((weights, (box.z_start, 0, 0, 0), (c,) + tuple(shape[1:])))
    scale = regions.get("scale")           # the integer mode's rows of the box's channels
    if scale is not None:
        starts, sizes = [0] * scale.type.rank, list(scale.type.bound_shape)
        starts[0], sizes[0] = box.z_start, box.z_end - box.z_start + 1
        reads.append((scale, tuple(starts), tuple(sizes)))
    bias = regions.get("bias")
    if bias is not None:
        axis = 0 if bias.type.rank == 1 else 1
        starts = [0] * bias.type.rank
        sizes = list(bias.type.bound_shape)
        if sizes[axis] == math.prod(sizes):     # one dim holds the channels: the box's slice
            starts[axis], sizes[axis] = box.z_start, box.z_end - box.z_start + 1
        # else the channels span several dims (a bias packed after the weights): all of it
        reads.append((bias, tuple(starts), tuple(sizes)))
    return reads, written


def copy_boxes(written: Box, regions: dict[str, Region]) -> list[Box]:
    """The output box ``written`` in each of the output's copies on other tiles ("out.1"...,
    ``DpuTask.broadcast_outputs``): the same shape, so the same starts and sizes."""
    return [(region, written[1], written[2]) for name, region in regions.items()
            if name.startswith("out.")]


# ------------------------------------------------------------------ numerics

def run_variant(task: DpuTask, index: int, regions: dict[str, Region], memory: Memory) -> None:
    """Compute one variant from CMX and store its output box in CMX."""
    _run_box(task, variant_box(task, index), regions, memory)


def _run_box(task: DpuTask, box: ops.Variant, regions: dict[str, Region],
             memory: Memory) -> None:
    out = memory.view(regions["out"])
    x = memory.view(regions["in0"])
    weights = memory.view(regions["weights"]) if "weights" in regions else None
    bias = memory.view(regions["bias"]).reshape(-1) if "bias" in regions else None
    post, dtype = post_op(task), out.dtype
    op = task.op
    if task.quant is not None:
        part = _integer_box(task, box, x, weights, bias, memory.view(regions["scale"]), post,
                            dtype)
    elif op is DpuOp.MATMUL:
        part = ops.matmul(x, weights, bias, transpose_b=True, post_op=post, out_dtype=dtype,
                          variant=box)
    elif op is DpuOp.PERMUTE:
        part = ops.permute(x, out.shape[1], out_dtype=dtype, variant=box)
    elif op in (DpuOp.ADD, DpuOp.MUL):
        fn = ops.add if op is DpuOp.ADD else ops.mul
        part = fn(x, memory.view(regions["in1"]), post_op=post, out_dtype=dtype, variant=box)
    else:
        kernel, stride, pad, dilation = window(task, weights.shape if weights is not None else None)
        if op is DpuOp.CONV:
            part = ops.conv2d(x, weights, bias, stride=stride, padding=pad, dilation=dilation,
                              post_op=post, out_dtype=dtype, variant=box)
        elif op is DpuOp.DWCONV:
            part = ops.depthwise_conv2d(x, weights, bias, stride=stride, padding=pad,
                                        dilation=dilation, post_op=post, out_dtype=dtype,
                                        variant=box)
        else:
            pool = ops.maxpool if op is DpuOp.MAXPOOL else ops.avgpool
            part = pool(x, kernel, stride, pad, post_op=post, out_dtype=dtype, variant=box)
    box.store(out, part)
    # the output stage writes the same values into each copy on another tile
    for name, region in regions.items():
        if name.startswith("out."):
            box.store(memory.view(region), part)


def _integer_box(task: DpuTask, box: ops.Variant, x, weights, bias, scale, post, dtype):
    """One box of a task in the integer mode (``runtime_sim.dpu.integer``): exact sums,
    then requantized to u8/i8 or dequantized to f16 by its channels' rows of ``scale``."""
    quant = task.quant
    _, stride, pad, dilation = window(task, weights.shape)
    sums = integer_sums(task.op.value, x, weights, bias, quant.in_zero_point, stride=stride,
                        padding=pad, dilation=dilation, variant=box)
    rows = scale[box.z_start:box.z_end + 1]
    if dtype.kind in "iu":
        return requantize(sums, rows[:, 0], rows[:, 1], quant.out_zero_point, post, dtype)
    return dequantize(sums, rows, post)


# ------------------------------------------------------------------ variants run together

# Ops whose output channels are computed independently, each by the same operations
# whatever other channels a call computes: elementwise ops, and a depthwise convolution
# (one GEMM per channel, each of the same shape and strides).  A global pool is left out:
# its reduction over the whole window is one numpy reduce, whose order numpy chooses.
_CHANNELWISE = (DpuOp.DWCONV, DpuOp.ADD, DpuOp.MUL, DpuOp.MAXPOOL, DpuOp.AVGPOOL)


def channel_groups(task: DpuTask, regions: dict[str, Region], memory: Memory,
                   recorded: frozenset[str] = frozenset()) -> dict[int, tuple[int, ...]]:
    """Variant -> the variants computed with it in one call (its group, first variant
    first), for the variants of ``task`` that differ only in their channels: the same
    columns and rows, channel ranges that join into one without a gap or overlap.  Each
    output element is then computed by exactly the operations it gets alone.  None when
    the task has none, or when running a variant early could change what another sees: a
    variant with waits of its own (its inputs may not be ready when the first starts), an
    output sharing bytes with an input (a later variant would read the earlier's output),
    an output into a buffer of ``recorded`` (recorded as a DMA left it, ``Network.kept``:
    a DMA writing other bytes of it between two variants must not see the later one's
    output)."""
    variants = task.variants
    if len(variants) < 2 or task.op not in _CHANNELWISE or any(v.waits for v in variants):
        return {}
    out = regions["out"]
    if task.op in (DpuOp.MAXPOOL, DpuOp.AVGPOOL) and out.type.bound_shape[2:] == (1, 1):
        return {}
    if task.op is DpuOp.DWCONV:
        weights = regions.get("weights")
        # one output channel per input channel, and at least two in every call: a single
        # group's GEMM is computed in another orientation (``conv._grouped_matmul``)
        if (weights is None or weights.type.bound_shape[0] != regions["in0"].type.bound_shape[1]
                or any(v.end[2] == v.start[2] for v in variants)):
            return {}
    if out.root.name in recorded or task.broadcast_outputs:
        return {}
    key, lo, hi = memory.span(out)
    for name, region in regions.items():
        if name != "out":
            other, a, b = memory.span(region)
            if other == key and a < hi and lo < b:
                return {}
    boxes: dict[tuple, list[int]] = {}
    for index, v in enumerate(variants):
        boxes.setdefault((v.start[0], v.end[0], v.start[1], v.end[1]), []).append(index)
    groups: dict[int, tuple[int, ...]] = {}
    for members in boxes.values():
        if len(members) < 2:
            continue
        spans = sorted((variants[i].start[2], variants[i].end[2]) for i in members)
        if all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:])):
            group = tuple(members)
            groups.update((i, group) for i in members)
    return groups


def run_variants(task: DpuTask, group: tuple[int, ...], regions: dict[str, Region],
                 memory: Memory) -> None:
    """``run_variant`` of every variant of a ``channel_groups`` group, as one call over the
    box they tile."""
    first = task.variants[group[0]]
    low = min(task.variants[i].start[2] for i in group)
    high = max(task.variants[i].end[2] for i in group)
    box = _box((first.start[0], first.start[1], low), (first.end[0], first.end[1], high))
    _run_box(task, box, regions, memory)


class DpuRunner:
    """Runs a plan's DPU units.  With ``together``, the variants of a task that
    ``channel_groups`` joins are computed in one call when the first of them starts
    (the rest then have nothing left to do).  Only for a run whose races are proven
    absent and which runs to its end: no unit ordered by the barriers alone can then see
    a later variant's output before that variant starts."""

    def __init__(self, plan, memory: Memory, together: bool,
                 recorded: frozenset[str] = frozenset()) -> None:
        self.plan, self.memory, self.together = plan, memory, together
        self.recorded = recorded         # see ``channel_groups``
        self.groups: dict[int, dict[int, tuple[int, ...]]] = {}   # id(task) -> its groups
        self.done: set[int] = set()      # units whose output an earlier call computed

    def run(self, unit: int) -> None:
        if unit in self.done:
            self.done.discard(unit)
            return
        plan = self.plan
        task, index, regions = plan.task[unit], plan.variant[unit], plan.dpu_regions(unit)
        group = None
        if self.together:
            groups = self.groups.get(id(task))
            if groups is None:
                groups = self.groups[id(task)] = channel_groups(task, regions, self.memory,
                                                                  self.recorded)
            group = groups.get(index)
        if group is None or group[0] != index:
            run_variant(task, index, regions, self.memory)
            return
        try:
            run_variants(task, group, regions, self.memory)
        except VpucError:
            # one of them is wrong: each alone, so the error names the variant at its start
            self.groups[id(task)] = {}
            run_variant(task, index, regions, self.memory)
            return
        self.done.update(unit - index + i for i in group[1:])
