"""Transposed convolutions (ONNX ConvTranspose) as DPU convolutions, for ``lower_dpu_nn``.

A transposed convolution with stride s equals a stride-1 convolution over its
input *zero-upsampled*: s - 1 zeros between input pixels, and a border of
``d·(K - 1) - pads`` zeros, with the weights transposed ([I, O] -> [O, I]) and
flipped in H and W (the NPU compiler's ``ConvertDeconv2DToConv2D`` /
``UpsamplingOp`` rewrite does the same).  The upsampled tensor is built in DDR
by two DMA copies (a zero splat, then the input into every s-th row and
column), and the convolution runs as ``lower_dpu_nn`` runs any other.

``GroupConvolutionBackpropData`` (grouped ConvTranspose; weights
``[G, I/G, O/G, KH, KW]``) is one such convolution per group over its slice of
input and output channels -- the same upsampled tensor serves every group --
or one ``dwconv`` when each group has one input and one output channel.

Expects: a typed ConvolutionBackpropData or GroupConvolutionBackpropData whose
weights are a Constant and whose pads crop no more than the dilated kernel
extent (``deconv_borders`` >= 0; ``lower_dpu_nn_plan.nn_problem`` reports the rest).
Guarantees: ``upsample`` declares the DDR tensor, its zero splat, the two
copies and the barrier the convolution waits on; ``deconv_jobs`` gives the
convolution's jobs with their rearranged weights.
"""

from __future__ import annotations

import numpy as np

from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.ir.graph import GraphIndex, GraphOp
from vpuc.ir.types import TensorType
from vpuc.reference.graph import constant_value

DECONVOLUTIONS = ("ConvolutionBackpropData", "GroupConvolutionBackpropData")


def _kernel(op: GraphOp, index: GraphIndex) -> tuple[int, int]:
    return tuple(index.producer(op.operands[1]).type.dims[-2:])


def deconv_borders(op: GraphOp, index: GraphIndex) -> tuple[tuple[int, int], tuple[int, int]]:
    """Zero rows/columns before and after the upsampled input of a transposed convolution:
    d * (K - 1) - pads_begin and d * (K - 1) - pads_end + output_padding."""
    kernel = _kernel(op, index)
    dil, pb, pe = op.attrs["dilations"], op.attrs["pads_begin"], op.attrs["pads_end"]
    extra = op.attrs["output_padding"]
    before = tuple(d * (k - 1) - p for d, k, p in zip(dil, kernel, pb))
    after = tuple(d * (k - 1) - p + e for d, k, p, e in zip(dil, kernel, pe, extra))
    return before, after


def upsample(prog: ProgramText, op: GraphOp, x: Value, index: GraphIndex, prefix: str,
             gate: tuple[str, ...]) -> tuple[Value, tuple[str, ...]]:
    """The zero-upsampled input in DDR: DMA zeros into it, then the input into every
    stride-th row and column (after the border the pads leave); its value and the gate
    the convolution waits on."""
    n, c, h, w = x.type.dims
    sh, sw = op.attrs["strides"]
    (bh, bw), (ah, aw) = deconv_borders(op, index)
    full = (n, c, bh + (h - 1) * sh + 1 + ah, bw + (w - 1) * sw + 1 + aw)
    up = Value(f"{prefix}up", TensorType(full, x.type.elem, x.type.order), "ddr")
    dims = "x".join(map(str, full)) + f"x{x.type.elem} {x.type.order}"
    prog.buffers += [f"ddr %{up.name} : {dims}", f"const %{prefix}zeros : {dims} = splat 0"]
    prog.barriers += [f"barrier %{prefix}zeroed", f"barrier %{prefix}upsampled"]
    prog.views.append(f"view %{prefix}up.v = %{up.name}[0:{n}, 0:{c}, "
                      f"{bh}:{bh + (h - 1) * sh + 1}:{sh}, {bw}:{bw + (w - 1) * sw + 1}:{sw}]")
    waits = f" waits({', '.join(f'%{g}' for g in gate)})" if gate else ""
    lp = prefix.replace("$", "_")
    prog.dma += [f"  {lp}zero: dma %{prefix}zeros -> %{up.name} channel 0{waits} "
                 f"updates(%{prefix}zeroed)",
                 f"  {lp}upsample: dma %{x.name} -> %{prefix}up.v channel 0 "
                 f"waits(%{prefix}zeroed) updates(%{prefix}upsampled)"]
    return up, (f"{prefix}upsampled",)


def deconv_jobs(op: GraphOp, index: GraphIndex):
    """(DPU op, kernel, dilations, jobs): each job (input channels, output channels,
    weights OIHW -- C1HW for a dwconv) of the convolution over the upsampled input."""
    weights = constant_value(index.producer(op.operands[1])).astype(np.float32)
    if op.kind == "ConvolutionBackpropData":
        weights = weights[None]                                  # one group
    groups, per_in, per_out = weights.shape[:3]
    # [G, I, O, KH, KW] -> per group [O, I, KH, KW], flipped in H and W
    flipped = np.ascontiguousarray(weights.transpose(0, 2, 1, 3, 4)[:, :, :, ::-1, ::-1])
    kernel, dilations = _kernel(op, index), tuple(op.attrs["dilations"])
    if groups > 1 and per_in == 1 and per_out == 1:             # depthwise
        c = groups
        return "dwconv", kernel, dilations, [((0, c), (0, c), flipped.reshape((c, 1) + kernel))]
    jobs = [((g * per_in, (g + 1) * per_in), (g * per_out, (g + 1) * per_out), flipped[g])
            for g in range(groups)]
    return "conv", kernel, dilations, jobs
