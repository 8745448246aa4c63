"""A DPU layer's NCHW input laid out NHWC by the DPU (NCE permute), and compressed convolutions.

A model's input arrives NCHW in DDR, and a DPU layer reads NHWC.  Moving it with a
permuting DMA costs one element per DMA cycle (``vpuc/cost/dma.py``): the 150,528
elements of a 3x224x224 image take about 200,000 NCE cycles, more than the layer
they feed.  The NPU compiler does it on the DPU instead, as the first layers of
its NPU37XX networks show (openvinotoolkit/npu_plugin):

- ``IE.PermuteQuantize`` / ``VPU.NCE.Permute`` (``ConvertIEToVPUNCE``; lit test
  ``NPU37XX``: ``NCEPermute`` of a ``1x3x224x224xf16`` input into
  ``1x4x224x224``, order NHWC): an ELTWISE workload that adds the input, read as
  another shape, to itself at PPE scale 0.5 while the output data unit writes the
  result in another order (``vpuc/cost/dpu.py``, ``permute_workload``).  Here it is
  the ``dpu permute`` task: each block's NCHW rows come into CMX by a plain DMA
  (one contiguous run per channel, at the engine's rate), the DPU writes them NHWC
  into the block's input buffer, padded channels zero;
- ``VPU.NCE.CompressConvolution`` (``arch37xx::ConvToNCE`` when
  ``NCECompressConvolutionOp::isSupported``): a convolution of fewer than 4 input
  channels reads them padded to 4, not 16 (``VPU_COMPRESSED_INPUT_CHANNEL_NUM``;
  ``ConvWeightsCompression`` strips the weights' padding and sets
  ``cm_sp_pattern``), so the permute writes 4 channels and the weights hold 4 per
  tap.  The MPE still multiplies 16 channels a cycle (VPUNN counts a convolution
  of fewer than 16 input channels as 16 on NPU2.7: ``vpuc/cost/dpu.py``): what it
  saves is the input's CMX bytes and the activation and weight fetch, and the
  zero channels the DMA wrote before.

Both schedules lower this way (the layout of the model input is the same in both).  Under
``--schedule default`` such a compressed convolution may instead run with its width folded
into 16 channels on the same permuted rows (``lower_dpu_fold_width``), when the cost model
finds that faster (ResNet-18's stem).
"""

from __future__ import annotations

from vpuc.cost import Timing, choose_mode, dpu_cost
from vpuc.cost.dpu import permute_workload
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])
COMPRESSED_CHANNELS = 4          # VPU_COMPRESSED_INPUT_CHANNEL_NUM


def permutes_input(order: DimsOrder, step: tuple[int, int]) -> bool:
    """Whether a window layer's input (in DDR, in ``order``) is laid out NHWC by an NCE
    permute per block rather than by a permuting DMA: whenever it is not NHWC (a strided
    1x1 convolution's ``step`` loads need NHWC and never meet this)."""
    return order != NHWC and step == (1, 1)


def cmx_channels(channels: int, conv: bool, permuted: bool) -> int:
    """The channels of a block's input in CMX: 4 for a compressed convolution (an input of at
    most 4 channels that an NCE permute lays out), else the DPU's multiple of 16."""
    if conv and permuted and channels <= COMPRESSED_CHANNELS:
        return COMPRESSED_CHANNELS
    return aligned(channels)


def permute_cycles(positions: int, channels: int, elem, timing: Timing) -> float:
    """The cost model's cycles of one NCE permute of ``positions`` pixels into ``channels``
    channels, dispatch included."""
    w = permute_workload(positions, channels, elem.value, elem.nbytes, elem.nbytes)
    return dpu_cost(w, timing.dpu, choose_mode(w, timing.dpu)).cycles + timing.dispatch["DPU"]


def load_permuted_input(e, k: int, first_row: int, x, rows: int, channels: int, waits: str,
                        loaded: list[str]) -> str:
    """Block ``k``'s ``rows`` input rows from ``first_row`` of the NCHW DDR input ``x``: a DMA
    of the rows as they are into an NCHW CMX buffer, then a ``dpu permute`` on the block's
    tile into an NHWC buffer of ``channels`` channels (its padding zero); that buffer's name.
    The permute precedes the layer's task in the tile's DPU queue, which runs in order, so
    the layer reads what it wrote; it waits for the load's barrier as the layer does.
    ``e`` is the layer's ``lower_dpu.LayerEmitter``."""
    n, c, _, w = x.type.dims
    elem, t = x.type.elem, e.tile(k)
    raw = e.cmx(f"in.n{k}", TensorType((n, c, rows, w), elem, x.type.order), t)
    src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"0:{c}", f"{first_row}:{first_row + rows}",
                                      f"0:{w}"])
    e.dma(f"load{k}", src, raw, 0, waits, loaded)
    xin = e.cmx(f"in.c{k}", TensorType((n, channels, rows, w), elem, NHWC), t)
    workload = permute_workload(n * rows * w, channels, elem.value, elem.nbytes, elem.nbytes)
    mode = choose_mode(workload, e.timing.dpu)
    e.prog.dpu.append(f"  {e.lp}p{k}: dpu permute on tile {t} in({raw}) out({xin}) "
                      f"mode({mode}) waits(%{e.p}loaded{k}) {{")
    e.prog.dpu.append(f"    variant start(0, 0, 0) end({w - 1}, {rows - 1}, {channels - 1})")
    e.prog.dpu.append("  }")
    return xin

