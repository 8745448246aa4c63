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
in, the rest zeroed by a DMA from a ``const`` splat when a convolution reads
them across channels), the weights are zero-padded constants declared by the
lowering (the graph's own weights constant is then not read, and not
declared), the bias is zero-padded, and only the real output channels are
stored.  Channelwise workloads (dwconv, pools) are cut into variants of
64/32/16 channels (``channel_chunks``).  MatMul (K, N) and the eltwise add/mul
are not aligned yet; ``vpuc/verifier/dpu_channels.py`` checks the rest.
"""

from __future__ import annotations

import numpy as np

from vpuc.ir.graph import GraphIndex

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


def reads_weights(op, index: GraphIndex) -> bool:
    """Whether the DPU lowering of layer ``op`` reads its weights operand from DDR (a
    Convolution with aligned channels); the others declare rearranged or padded copies,
    and the graph's constant is dropped."""
    if op.kind in REDECLARED_WEIGHTS:
        return False
    if op.kind != "Convolution":
        return True                    # a MatMul's weights, an eltwise layer's other input
    return conv_aligned(index.producer(op.operands[0]).type.dims[1], op.type.dims[1])


def variant_boxes(dpu_op: str, rows: list[tuple[int, int, str]], channels: tuple[int, int]):
    """(first row, end row, first channel, last channel, mode) of a task's variants: its
    row runs, each cut into channel chunks when the op is channelwise."""
    z0, z1 = channels
    if dpu_op not in CHANNELWISE_OPS:
        return [(a, b, z0, z1, mode) for a, b, mode in rows]
    return [(a, b, z0 + c0, z0 + c1 - 1, mode) for a, b, mode in rows
            for c0, c1 in channel_chunks(z1 - z0 + 1)]
