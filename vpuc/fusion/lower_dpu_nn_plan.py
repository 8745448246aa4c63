"""What DPU op and which jobs a CNN layer of an imported model becomes (``lower_dpu_nn``).

A *job* is a range of input channels, a range of output channels and the weights
between them: what one series of row blocks computes.  ``plan_layer`` maps each
graph op to its DPU op and jobs before any split for CMX (the module docstring of
``lower_dpu_nn`` says which op becomes what); ``split_job`` cuts a job over its
output channels in multiples of the DPU's channel granule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vpuc.fusion.lower_dpu import DpuLayer
from vpuc.fusion.lower_dpu_channels import reads_weights
from vpuc.fusion.lower_dpu_deconv import DECONVOLUTIONS, deconv_borders
from vpuc.fusion.lower_dpu_support import DPU_FLOATS, kernel_problem, padding_problem, window
from vpuc.ir.graph import CONSTANT, GraphIndex, GraphOp
from vpuc.reference.graph import constant_value

NN_LAYERS = ("GroupConvolution", "AvgPool", "ReduceMean", "ReduceMax") + DECONVOLUTIONS
# reductions over H and W the DPU takes as a pool of the whole H x W (as the NPU compiler's
# ConvertReduceToPooling does), as ONNX's GlobalAveragePool and GlobalMaxPool import
GLOBAL_POOLS = {"ReduceMean": "avgpool", "ReduceMax": "maxpool"}
CHANNEL_GRANULE = 16     # the DPU's output channel alignment (docs/vir.md, Lowering graphs)


@dataclass
class Job:
    """One channel range of a layer: what one series of row blocks computes."""

    ins: tuple[int, int]                 # input channels [start, stop)
    outs: tuple[int, int]                # output channels [start, stop)
    weights: np.ndarray | None = None    # conv OIHW / dwconv C1HW values this module declares
    from_ddr: bool = False               # else: a slice of the layer's weights value in DDR


@dataclass
class Plan:
    dpu_op: str                          # conv, dwconv, maxpool, avgpool
    kernel: tuple[int, int]
    strides: tuple[int, int]
    begin: tuple[int, int]
    end: tuple[int, int]
    dilations: tuple[int, int]
    jobs: list[Job]

    @property
    def has_weights(self) -> bool:
        return self.dpu_op in ("conv", "dwconv")


def nn_problem(op: GraphOp, index: GraphIndex) -> str | None:
    """Why ``op`` (one of ``NN_LAYERS``) cannot run as DPU tasks; None if it can."""
    x = index.producer(op.operands[0]).type
    if op.type.elem not in DPU_FLOATS:
        return (f"it is {op.type.elem}; the DPU lowering takes {op.kind} on f16 or bf16"
                + (" (the DPU has no f32: insert a Convert)" if op.type.elem.is_float else ""))
    if op.kind in GLOBAL_POOLS:
        if x.rank != 4 or set(op.attrs["axes"]) != {2, 3} or not op.attrs["keep_dims"]:
            return ("the DPU takes a mean or max over H and W of an NCHW tensor with keep_dims "
                    "(a pool); other reductions need an ACT SHAVE kernel")
        return None
    if op.kind in ("GroupConvolution",) + DECONVOLUTIONS \
            and index.producer(op.operands[1]).kind != CONSTANT:
        return "its weights are not a constant (the DPU lowering rearranges them at compile time)"
    if op.kind in DECONVOLUTIONS:
        if kernel_problem(index.producer(op.operands[1]).type.dims[-2:]):
            return kernel_problem(index.producer(op.operands[1]).type.dims[-2:])
        before, _ = deconv_borders(op, index)
        if min(before) < 0:
            return (f"its pads_begin {list(op.attrs['pads_begin'])} crop more than the dilated "
                    "kernel extent; not supported yet")
        return None
    kernel, _, begin, end, dilations = nn_window(op, index)
    pooled = x.dims if op.kind == "AvgPool" else ()        # a global pool goes in levels
    return kernel_problem(kernel, begin + end, pooled) \
        or padding_problem(kernel, begin, end, dilations)


def nn_window(op: GraphOp, index: GraphIndex):
    """(kernel, strides, pads_begin, pads_end, dilations) of a layer of NN_LAYERS."""
    if op.kind == "GroupConvolution":
        kernel = tuple(index.producer(op.operands[1]).type.dims[3:])
        return (kernel, tuple(op.attrs["strides"]), tuple(op.attrs["pads_begin"]),
                tuple(op.attrs["pads_end"]), tuple(op.attrs["dilations"]))
    if op.kind in GLOBAL_POOLS:
        return tuple(index.producer(op.operands[0]).type.dims[2:]), (1, 1), (0, 0), (0, 0), (1, 1)
    return window(op, index)          # AvgPool: kernel and pads as MaxPool's


def plan_layer(layer: DpuLayer, index: GraphIndex, c: int, oc: int) -> Plan:
    """The DPU op and the jobs of a layer, before any split for CMX."""
    op = layer.op
    kernel, strides, begin, end, dil = nn_window(op, index)
    whole = [Job((0, c), (0, oc), from_ddr=op.kind == "Convolution")]
    if op.kind == "Convolution" and not reads_weights(op, index, layer.bias):
        # padded copies (the bias packed after them: lower_dpu_channels.packs_bias)
        whole = [Job((0, c), (0, oc), constant_value(index.producer(op.operands[1])))]
    if op.kind == "Convolution":
        return Plan("conv", kernel, strides, begin, end, dil, whole)
    if op.kind in ("MaxPool", "ReduceMax"):
        return Plan("maxpool", kernel, strides, begin, end, dil, [Job((0, c), (0, c))])
    if op.kind == "ReduceMean" or (op.kind == "AvgPool" and (
            op.attrs["exclude_pad"] or not any(begin + end))):
        return Plan("avgpool", kernel, strides, begin, end, dil, [Job((0, c), (0, c))])
    if op.kind == "AvgPool":      # count_include_pad with padding: a dwconv of 1/(KH*KW)
        w = np.full((c, 1) + kernel, 1.0 / (kernel[0] * kernel[1]), np.float32)
        return Plan("dwconv", kernel, strides, begin, end, dil, [Job((0, c), (0, c), w)])
    w = constant_value(index.producer(op.operands[1])).astype(np.float32)   # G, O, I, KH, KW
    groups, per_out, per_in = w.shape[:3]
    if per_in == 1 and per_out == 1:
        return Plan("dwconv", kernel, strides, begin, end, dil,
                    [Job((0, c), (0, c), w.reshape((groups, 1) + kernel))])
    jobs = [Job((g * per_in, (g + 1) * per_in), (g * per_out, (g + 1) * per_out), w[g])
            for g in range(groups)]
    return Plan("conv", kernel, strides, begin, end, dil, jobs)


def _chunks(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) cut into ``parts`` ranges, multiples of the channel granule but the last."""
    size = math.ceil(math.ceil((stop - start) / parts) / CHANNEL_GRANULE) * CHANNEL_GRANULE
    edges = list(range(start, stop, size)) + [stop]
    return list(zip(edges, edges[1:]))


def split_job(plan: Plan, job: Job, parts: int) -> list[Job]:
    """``job`` cut into about ``parts`` jobs over its output channels (and, for channelwise
    ops, the same input channels)."""
    out = []
    for o0, o1 in _chunks(*job.outs, parts):
        a, b = o0 - job.outs[0], o1 - job.outs[0]
        ins = job.ins if plan.dpu_op == "conv" else (o0, o1)
        weights = None if job.weights is None else job.weights[a:b]
        out.append(Job(ins, (o0, o1), weights, job.from_ddr))
    return out
