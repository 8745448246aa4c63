"""The DPU's channel constraints, and the lowering around them (``lower_dpu*.py``).

Where the constraints come from (the NPU compiler, ``openvinotoolkit/npu_plugin``):

- ``src/vpux_compiler/include/vpux/compiler/dialect/VPU/nce_invariant.hpp``:
  ``VPU_CHANNEL_ALIGNMENT = 16``; ``VPUIP/nce_invariant.cpp``'s
  ``verifyConvChannels`` rejects a convolution whose output channels, or (NHWC,
  "ZMajor") input channels, are not a multiple of it;
- ``src/vpux_compiler/src/dialect/IE/passes/expand_activation_channels.cpp``:
  the compiler meets that rule by *expanding*: the input gets zero channels up
  to the multiple (``IE.Expand``), the weights zero rows and columns
  (``#const.PadWithZero``), and the result is sliced back (``IE.Slice``);
- ``src/vpux_compiler/include/vpux/compiler/dialect/VPU/interfaces/workload_splitter_base.hpp``:
  ``supportedChannelsDW = {64, 32, 16}``: a depthwise or pooling workload
  (variant) covers 64, 32 or 16 channels; ``NPU37XX/dialect/VPUIP/impl/split_cost_getter.cpp``
  splits a channelwise workload into such chunks before costing it.

Here the same expansion happens in CMX, per block, so no extra DDR traffic is
spent: a block's CMX input has ``aligned(C)`` channels (the real ones copied
in, the rest zeroed when a convolution reads them across channels: copied CMX ->
CMX from a zero vector each tile loads once, ``zero_vector``), the weights are
zero-padded constants declared by the lowering (the graph's own weights constant
is then not read, and not declared), the bias is zero-padded (and packed after the
weights when they are a constant the lowering declares: ``lower_dpu_table``), and
only the real output channels are stored.  Channelwise workloads (dwconv, pools) are cut into variants of
64/32/16 channels (``channel_chunks``).  The eltwise add/mul reads and writes
aligned channels too (``verifyEltwiseChannels``; its pad channels are never read
across, so they are not zeroed), and so does a MatMul: K and N padded, the input's
and the weights' padded K columns zeroed by DMA (``zero_pad_matrix``), only the real
N columns stored.  ``vpuc/verifier/dpu_channels.py`` checks all of it.
"""

from __future__ import annotations

import numpy as np

from vpuc.diagnostics import VpucError
from vpuc.fusion.lower_dpu_support import const_text
from vpuc.fusion.lower_dpu_table import packs_bias, packs_cheaply
from vpuc.ir.graph import CONSTANT, GraphIndex
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType

ALIGNMENT = 16                       # VPU_CHANNEL_ALIGNMENT
CHANNELWISE_CHUNKS = (64, 32, 16)    # supportedChannelsDW
CHANNELWISE_OPS = ("dwconv", "maxpool", "avgpool")
# layers whose lowering declares its own (rearranged) weights constants
REDECLARED_WEIGHTS = ("GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData")


def aligned(channels: int) -> int:
    """``channels`` rounded up to the DPU's channel multiple."""
    return -(-channels // ALIGNMENT) * ALIGNMENT


def channel_chunks(channels: int) -> list[tuple[int, int]]:
    """[start, stop) chunks of 64, 32 or 16 channels covering ``aligned(channels)``, largest
    first (as the NPU compiler's workload splitter cuts a depthwise workload)."""
    chunks, at, total = [], 0, aligned(channels)
    while at < total:
        size = next(s for s in CHANNELWISE_CHUNKS if s <= total - at)
        chunks.append((at, at + size))
        at += size
    return chunks


def padded(array: np.ndarray, sizes: dict[int, int]) -> np.ndarray:
    """``array`` with zeros appended along each axis of ``sizes`` up to that size."""
    widths = [(0, sizes.get(axis, d) - d) for axis, d in enumerate(array.shape)]
    return np.pad(array, widths) if any(w for _, w in widths) else array


def conv_aligned(in_channels: int, out_channels: int) -> bool:
    """Whether a layer's input and output channels are both DPU multiples (then a
    convolution's weights are read as they are, from the graph's constant)."""
    return in_channels % ALIGNMENT == 0 and out_channels % ALIGNMENT == 0


def reads_weights(op, index: GraphIndex, bias: np.ndarray | None = None) -> bool:
    """Whether the DPU lowering of layer ``op`` (its bias ``bias``) reads its weights operand
    from DDR (a Convolution with aligned channels whose bias is not packed); the others
    declare rearranged or padded copies, or a copy with the bias packed after it when exact
    and cheap (``packs_bias``, ``packs_cheaply``: one DMA instead of two), and the graph's
    constant is dropped."""
    if op.kind in REDECLARED_WEIGHTS:
        return False
    weights = index.producer(op.operands[1])
    if op.kind != "Convolution" or weights.kind != CONSTANT:
        return True                    # a MatMul's weights, an eltwise layer's other input
    if packs_bias(bias, weights.type.elem) and packs_cheaply(weights.type.dims, weights.type.elem):
        return False
    return conv_aligned(index.producer(op.operands[0]).type.dims[1], op.type.dims[1])


def variant_boxes(dpu_op: str, rows: list, channels: tuple[int, int]):
    """(first row, end row, first channel, last channel, mode) of a task's variants: its
    row runs ``(first, end, mode)``, each cut into channel chunks when the op is
    channelwise; a run's mode may be a tuple, one per chunk (``lower_dpu.run_cost``)."""
    z0, z1 = channels
    if dpu_op not in CHANNELWISE_OPS:
        return [(a, b, z0, z1, mode) for a, b, mode in rows]
    chunks = channel_chunks(z1 - z0 + 1)
    out = []
    for a, b, mode in rows:
        modes = mode if isinstance(mode, tuple) else (mode,) * len(chunks)
        if len(modes) != len(chunks):
            raise ValueError(f"internal: {len(modes)} modes for {len(chunks)} channel chunks")
        out += [(a, b, z0 + c0, z0 + c1 - 1, m) for (c0, c1), m in zip(chunks, modes)]
    return out


def load_padded_weights(e, wv, outs: tuple[int, int], ins: tuple[int, int], wt: str, tag: str,
                        waits: str, loaded: list[str]) -> None:
    """DMA run-time conv weights (a graph value in DDR, not a constant) into the padded CMX
    weights ``wt`` ([aligned O, aligned I, KH, KW], NHWC): the real block into its corner,
    zeros from a ``const`` splat into the two disjoint slabs beside it.  ``e`` is the
    layer's ``lower_dpu.LayerEmitter``."""
    (o0, o1), (i0, i1) = outs, ins
    ro, ri = o1 - o0, i1 - i0
    po, pi = aligned(ro), aligned(ri)
    kh, kw = wv.type.dims[2:]
    elem = wv.type.elem
    zeros = f"{e.p}wzeros.{tag}"
    e.prog.buffers.append(f"const %{zeros} : {po}x{pi}x{kh}x{kw}x{elem} NHWC = splat 0")
    src = e.view(f"w.v{tag}", wv.name, [f"{o0}:{o1}", f"{i0}:{i1}", f"0:{kh}", f"0:{kw}"])
    e.dma(f"load_w.{tag}", src, e.view(f"w.r{tag}", wt[1:], [f"0:{ro}", f"0:{ri}", f"0:{kh}", f"0:{kw}"]),
          0, waits, loaded, permute=wv.type.order != DimsOrder(NAMED_ORDERS["NHWC"]))
    slabs = [[f"0:{ro}", f"{ri}:{pi}"], [f"{ro}:{po}", f"0:{pi}"]]
    for n, (rows, cols) in enumerate(slabs):
        if rows.split(":")[0] != rows.split(":")[1] and cols.split(":")[0] != cols.split(":")[1]:
            box = [rows, cols, f"0:{kh}", f"0:{kw}"]
            e.dma(f"zero_w{n}.{tag}", e.view(f"wz.v{n}{tag}", zeros, box),
                  e.view(f"wz.c{n}{tag}", wt[1:], box), 0, waits, loaded)


def load_bias(e, bias: np.ndarray | None, j: int, outs: tuple[int, int], tag: str, t: int,
              waits: str, loaded: list[str], declare: bool, block: int | None = None) -> str:
    """DMA job ``j``'s slice [o0, o1) of the layer's f32 bias (``const %<prefix>bias``) into
    tile ``t``'s CMX, zero-padded to the aligned channel count (a ``const`` of its own,
    declared with the job's first block); the task's ``bias(...)`` clause, "" without one.
    With ``block`` (a block loading its own chunk's weights) the small load goes on the
    store channel (``LayerEmitter.dma``'s ``before_store``), its DDR latency beside the
    weights' load instead of after it."""
    if bias is None:
        return ""
    (o0, o1), p = outs, e.p
    src = f"%{p}bias"
    if aligned(o1 - o0) != o1 - o0:
        src = f"%{p}bias{j}"
        if declare:
            values = padded(bias[o0:o1], {0: aligned(o1 - o0)})
            e.prog.buffers.append(f"const {src} : {values.size}xf32 = {const_text(values, src[1:])}")
    elif (o0, o1) != (0, bias.size):
        src = e.view(f"bias.v{tag}", f"{p}bias", [f"{o0}:{o1}"])
    cmx = e.cmx(f"bias.{tag}", TensorType((aligned(o1 - o0),), ElemType.F32, DimsOrder.identity(1)), t)
    if block is None:
        e.dma(f"load_bias.{tag}", src, cmx, 0, waits, loaded)
    else:
        e.dma(f"load_bias.{tag}", src, cmx, e.prog.store_channel, waits, loaded,
              before_store=block)
    return f" bias({cmx})"


def padded_vector(values: np.ndarray, size: int) -> np.ndarray:
    return padded(np.asarray(values, np.float32), {0: size})


def zero_pad_matrix(e, name: str, buffer: str, real: tuple[int, int], pad: tuple[int, int], elem,
                    order, waits: str, updates: list[str]) -> str:
    """Zeros into the two slabs of CMX matrix ``buffer`` ([pad rows, pad cols]) beside its
    ``real`` corner (a matmul reads K across: its padded columns must be zeros, not
    garbage); the view of the corner, where the caller copies the real values."""
    (rows, cols), (prows, pcols) = real, pad
    zeros = f"{e.p}{name}.zeros"
    order_text = "NC" if order.perm == (0, 1) else "CN"
    e.prog.buffers.append(f"const %{zeros} : {prows}x{pcols}x{elem} {order_text} = splat 0")
    for n, box in enumerate(([f"0:{rows}", f"{cols}:{pcols}"], [f"{rows}:{prows}", f"0:{pcols}"])):
        if all(int(a) < int(b) for a, b in (part.split(":") for part in box)):
            e.dma(f"{name}.zero{n}", e.view(f"{name}.zv{n}", zeros, box),
                  e.view(f"{name}.zc{n}", buffer, box), 0, waits, updates)
    return e.view(f"{name}.r", buffer, [f"0:{rows}", f"0:{cols}"])


def load_block_input(e, k: int, first_row: int, x, rows: int, channels: int, waits: str,
                     loaded: list[str], step: tuple[int, int] = (1, 1),
                     zeros: str | None = None) -> str:
    """DMA a block's ``rows`` input rows from ``first_row`` of the DDR input ``x`` into a CMX
    buffer of ``aligned(channels)`` channels, NHWC; with ``zeros`` (an op that reads across
    channels: a CMX view of as many zeros as the padded channels take, ``zero_vector``)
    the padded channels are copied from it, CMX -> CMX on channel 0 after the load.  A
    transposing load (one element a cycle, far below the DDR's rate) is cut in two, the
    second half on the store channel.  ``step`` (rows, columns): only every step-th row and
    column from ``first_row`` and column 0, a strided copy (NHWC, aligned channels only):
    the input a 1x1 strided convolution reads.  The CMX buffer's name."""
    n, _, _, w = x.type.dims
    if step != (1, 1):
        assert x.type.order == DimsOrder(NAMED_ORDERS["NHWC"]) and aligned(channels) == channels
        w = (w - 1) // step[1] + 1
        src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{channels}",
                                          f"{first_row}:{first_row + (rows - 1) * step[0] + 1}"
                                          f":{step[0]}", f"0:{x.type.dims[3]}:{step[1]}"])
        xin = e.cmx(f"in.c{k}", TensorType((n, channels, rows, w), x.type.elem,
                                           DimsOrder(NAMED_ORDERS["NHWC"])), e.tile(k))
        e.dma(f"load{k}", src, xin, 0, waits, loaded)
        return xin
    cp, elem = aligned(channels), x.type.elem
    nhwc = DimsOrder(NAMED_ORDERS["NHWC"])
    xin = e.cmx(f"in.c{k}", TensorType((n, cp, rows, w), elem, nhwc), e.tile(k))
    permute = x.type.order != nhwc
    if permute and rows >= 2 and e.prog.dma_channels > 1:
        half = rows // 2
        for part, (a, b), channel in ((0, (0, half), 0), (1, (half, rows), e.prog.store_channel)):
            piece = e.view(f"in.v{k}h{part}", x.name, [f"0:{n}", f"0:{channels}",
                                                         f"{first_row + a}:{first_row + b}",
                                                         f"0:{w}"])
            into = e.view(f"in.r{k}h{part}", xin[1:], [f"0:{n}", f"0:{channels}", f"{a}:{b}",
                                                       f"0:{w}"])
            e.dma(f"load{k}" + (f".h{part}" if part else ""), piece, into, channel, waits,
                  loaded, permute=True, before_store=k if part else None)
    else:
        src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{channels}",
                                          f"{first_row}:{first_row + rows}", f"0:{w}"])
        real = xin if cp == channels else e.view(f"in.r{k}", xin[1:], [
            f"0:{n}", f"0:{channels}", f"0:{rows}", f"0:{w}"])
        e.dma(f"load{k}", src, real, 0, waits, loaded, permute=permute)
    if zeros is not None and cp > channels:
        e.dma(f"zero{k}", zeros, e.view(f"in.z{k}", xin[1:], [
            f"0:{n}", f"{channels}:{cp}", f"0:{rows}", f"0:{w}"]), 0, waits, loaded)
    return xin


# ``--schedule default``: zero vectors up to this many bytes are one per tile for the whole
# program (``zero_vector``); the largest MobileNetV3-Small needs is 6 KB (a 28x28 layer's
# 8 padded channels of 7 rows).  A larger one, held from its first to its last user, would
# take CMX the segments between could use: such a layer loads its own.
SHARED_ZEROS_BYTES = 8 << 10


def zero_vector(e, t: int, size: int, elem: ElemType, waits: str, loaded: list[str]) -> str:
    """``size`` zeros in tile ``t``'s CMX, loaded on channel 0 from a ``splat 0`` constant:
    the source each block copies its input's padded channels from (``zeros_view``), CMX ->
    CMX after it in the channel's FIFO, instead of a DMA from DDR per block paying the DDR
    latency (870 cycles on NPU37XX) for a few KB.  Garbage in those channels is not safe
    even where their weights are zero: 0 x NaN or Inf is NaN.  Under ``--schedule default``
    (``prog.prefetch_bytes``) a vector of at most ``SHARED_ZEROS_BYTES`` is one per tile and
    element type for the whole program (``prog.zeros``): the first layer that needs it
    loads ``SHARED_ZEROS_BYTES`` of zeros, later layers copy from it (a CMX buffer DMAs of
    several segments touch: ``schedule_deps`` orders their copies after its load, and
    allocate-cmx keeps it from its first user to its last), instead of each loading its
    own (MobileNetV3-Small: 12 loads of a few bytes each paying the DDR latency).  Else a
    vector of the layer's own, ``const %<prefix>chzeros``.  The buffer's name."""
    count = SHARED_ZEROS_BYTES // elem.nbytes
    if e.prog.prefetch_bytes and size <= count:
        key = (t, elem)
        if key not in e.prog.zeros:
            name = f"chzeros.{elem}"
            if not any(k[1] is elem for k in e.prog.zeros):
                e.prog.buffers.append(f"const %{name} : {count}x{elem} = splat 0")
            zv = f"%chzeros.t{t}.{elem}"
            e.prog.cmx.append(f"cmx {zv} : {count}x{elem} tile {t}")
            # labelled apart from the layer's own vector's load: a layer whose input loads
            # its own and whose epilogue's side input is the first to take the shared one
            # loads both on that tile
            e.dma(f"load_shared_zeros.t{t}", f"%{name}", zv, 0, waits, loaded)
            e.prog.zeros[key] = zv
        return e.prog.zeros[key]
    name = f"{e.p}chzeros"
    if name not in e.declared:
        e.declared.add(name)
        e.prog.buffers.append(f"const %{name} : {size}x{elem} = splat 0")
    zv = e.cmx(f"zv.t{t}", TensorType((size,), elem, DimsOrder.identity(1)), t)
    e.dma(f"load_zeros.t{t}", f"%{name}", zv, 0, waits, loaded)
    return zv


def zeros_view(e, k: int, zv: str, count: int) -> str:
    """Block ``k``'s ``count`` zeros: the start of the tile's ``zero_vector`` ``zv``."""
    return e.view(f"zv.v{k}", zv[1:], [f"0:{count}"])


def load_window_weights(e, op, index: GraphIndex, values: dict, t: int, waits: str,
                        loaded: list[str], declare: bool, in_channels: int | None = None,
                        bias: np.ndarray | None = None, table=None) -> str:
    """A whole convolution's weights into tile ``t``'s CMX, padded to aligned channels (or to
    ``in_channels`` input channels: a compressed convolution's 4): the graph's constant as
    it is when aligned, a zero-padded ``const`` copy when not, run-time weights padded by
    DMA (``load_padded_weights``).  With a ``table`` (``lower_dpu_table.Table``) the
    constant also holds ``bias`` (padded to the aligned output channels) in rows after the
    weights.  The task's weights clause, and its bias clause when packed."""
    producer = index.producer(op.operands[1])
    o, i, kh, kw = producer.type.dims
    elem, nhwc = producer.type.elem, DimsOrder(NAMED_ORDERS["NHWC"])
    pi = in_channels or aligned(i)
    if not reads_weights(op, index, bias):           # a constant, padded at compile time
        from vpuc.reference.graph import constant_value
        dims = (aligned(o), pi, kh, kw)
        if table is not None:
            if declare:
                weights = padded(constant_value(producer).astype(np.float32),
                                 {0: aligned(o), 1: pi})
                e.prog.buffers.append(table.declaration(weights, bias, elem, f"{e.p}wpad"))
            return table.load(e, f"%{e.p}wpad", elem, f"t{t}", t, waits, loaded)
        if declare:
            weights = padded(constant_value(producer).astype(np.float32), {0: aligned(o), 1: pi})
            e.prog.buffers.append(f"const %{e.p}wpad : {aligned(o)}x{pi}x{kh}x{kw}x{elem} "
                                  f"NHWC = {const_text(weights, e.p + 'wpad')}")
        wt = e.cmx(f"w.t{t}", TensorType(dims, elem, nhwc), t)
        e.dma(f"load_w.t{t}", f"%{e.p}wpad", wt, 0, waits, loaded)
        return f" weights({wt})"
    wt = e.cmx(f"w.t{t}", TensorType((aligned(o), pi, kh, kw), elem, nhwc), t)
    if pi != aligned(i):
        raise VpucError(f"internal: run-time weights of {op.label} padded to {pi} input "
                        "channels; only constants are", op.loc)
    elif (aligned(o), aligned(i)) != (o, i):
        load_padded_weights(e, values[op.operands[1]], (0, o), (0, i), wt, f"t{t}", waits, loaded)
    else:
        wv = values[op.operands[1]]
        e.dma(f"load_w.t{t}", f"%{wv.name}", wt, 0, waits, loaded, permute=wv.type.order != nhwc)
    return f" weights({wt})"
