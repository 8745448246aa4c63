"""The DMAs of one block of a CNN layer's job (``lower_dpu_nn.emit_jobs``): its weights
(a slice of the DDR weights, a ``const`` the lowering declares, or its weights table with
the bias, ``lower_dpu_table``) and bias, and its input rows and columns in a CMX buffer of
aligned channels (a convolution's padded channels zeroed).
"""

from __future__ import annotations

from vpuc.fusion.blocked_program import Value
from vpuc.fusion.lower_dpu import NHWC, DpuLayer, LayerEmitter, const_text
from vpuc.fusion.lower_dpu_channels import aligned, load_bias, load_padded_weights, padded
from vpuc.fusion.lower_dpu_nn_plan import Job, Plan
from vpuc.fusion.lower_dpu_table import Table
from vpuc.ir.graph import GraphOp
from vpuc.ir.types import TensorType


def load_job_input(e: LayerEmitter, k: int, x: Value, job: Job, row_range: tuple[int, int],
                   col_range: tuple[int, int], waits: str, loaded: list[str],
                   zeros: str | None = None) -> str:
    """DMA block ``k``'s input (``row_range``, ``col_range``: first and count) of the job's
    input channels into a CMX buffer of aligned channels; with ``zeros`` (a convolution
    reads across channels: zeros, not garbage) the padded channels are copied from it, CMX
    -> CMX on channel 0 after the load (``lower_dpu_channels.zero_vector``); the buffer's
    name."""
    n = x.type.dims[0]
    (lo, rows), (first_col, w) = row_range, col_range
    elem, (i0, i1) = x.type.elem, job.ins
    ic = aligned(i1 - i0)
    if loads_pads(x, job):               # its pads too: finite (resident.py), no zeros
        i1 = i0 + ic
    src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"{i0}:{i1}", f"{lo}:{lo + rows}",
                                      f"{first_col}:{first_col + w}"])
    xin = e.cmx(f"in.c{k}", TensorType((n, ic, rows, w), elem, NHWC), e.tile(k))
    real = xin if ic == i1 - i0 else e.view(f"in.r{k}", xin[1:], [f"0:{n}", f"0:{i1 - i0}",
                                                                   f"0:{rows}", f"0:{w}"])
    e.dma(f"load{k}", src, real, 0, waits, loaded, permute=x.type.order != NHWC)
    if zeros is not None and ic > i1 - i0:
        e.dma(f"zero{k}", zeros, e.view(f"in.z{k}", xin[1:], [
            f"0:{n}", f"{i1 - i0}:{ic}", f"0:{rows}", f"0:{w}"]), 0, waits, loaded)
    return xin


def loads_pads(x: Value, job: Job) -> bool:
    """Whether a block of ``job`` takes its aligned input channels from a padded ``x``'s own
    finite pads (``resident.padded_channels``): the job's channels end at ``x``'s real ones
    and their aligned count ends within the pads.  A group of a grouped convolution that
    starts off the channel multiple (ShuffleNet's 4 groups of 34 of 136, held as 144) would
    run past them: such a job loads its real channels and zeroes the rest, as from DDR."""
    (i0, i1), c = job.ins, x.type.dims[1]
    return x.padded is not None and i1 == c and i0 + aligned(i1 - i0) <= x.padded


def aligned_job(plan: Plan, job: Job) -> Job:
    """``job`` with its weights zero-padded to the DPU's channel multiples (output channels;
    a conv's input channels too)."""
    if job.weights is None:
        return job
    sizes = {0: aligned(job.weights.shape[0])}
    if plan.dpu_op == "conv":
        sizes[1] = aligned(job.weights.shape[1])
    return Job(job.ins, job.outs, padded(job.weights, sizes), job.from_ddr)


def rows_in(r0: int, r1: int, sh: int, pt: int, dh: int, kh: int, h: int):
    """(first input row, rows loaded, pad top, pad bottom) for output rows [r0, r1)."""
    first, last = r0 * sh - pt, (r1 - 1) * sh - pt + dh * (kh - 1)
    lo, hi = max(first, 0), min(last, h - 1)
    return lo, hi - lo + 1, lo - first, last - hi


def load_job_weights(e: LayerEmitter, plan: Plan, job: Job, j: int, values: dict[str, Value],
                  op: GraphOp, layer: DpuLayer, tag: str, t: int, waits: str,
                  loaded: list[str], declare: bool, block: int | None = None,
                  table: Table | None = None, beside: bool = False,
                  bias: str | None = None) -> str:
    """DMA the job's weights and bias into tile ``t``'s CMX, through its ``table`` when it
    has one (``lower_dpu_table``); the task's operand clauses.  ``beside`` (block ``block``
    of a layer streaming its weight chunks, ``lower_dpu_nn.emit_jobs``): the weights go on
    the store channel (``LayerEmitter.dma``'s ``before_store``), so their DDR latency runs
    while the other channel's chunk streams, not between two chunks of one channel.
    ``bias``: the task's bias clause when the layer loads its bias once per tile
    (``lower_dpu_bias``): no load of its own."""
    p = e.p
    (i0, i1), (o0, o1) = job.ins, job.outs
    clauses = ""
    if plan.has_weights:
        kh, kw = plan.kernel
        per_out = aligned(i1 - i0) if plan.dpu_op == "conv" else 1
        elem = values[op.operands[0]].type.elem
        dims = (aligned(o1 - o0), per_out, kh, kw)
        permute = False
        if job.from_ddr and dims[:2] != (o1 - o0, i1 - i0):    # run-time weights, padded
            wt = e.cmx(f"w.{tag}", TensorType(dims, elem, NHWC), t)
            load_padded_weights(e, values[op.operands[1]], (o0, o1), (i0, i1), wt, tag, waits, loaded)
            if bias is None:
                bias = load_bias(e, layer.bias, j, (o0, o1), tag, t, waits, loaded, declare,
                                 block)
            return clauses + f" weights({wt})" + bias
        if job.from_ddr:
            wv = values[op.operands[1]]
            src = e.view(f"w.v{tag}", wv.name, [f"{o0}:{o1}", f"0:{per_out}", f"0:{kh}",
                                                f"0:{kw}"])
            permute = wv.type.order != NHWC
        else:
            src = f"%{p}w{j}"
            if table is not None:          # the bias packed after the weights
                if declare:
                    bias = padded(layer.bias[o0:o1], {0: dims[0]})
                    e.prog.buffers.append(table.declaration(job.weights, bias, elem, src[1:]))
                return table.load(e, src, elem, tag, t, waits, loaded,
                                  block if beside else None)
            if declare:
                t_text = "x".join(map(str, dims)) + f"x{elem} NHWC"
                e.prog.buffers.append(f"const {src} : {t_text} = {const_text(job.weights, src)}")
        wt = e.cmx(f"w.{tag}", TensorType(dims, elem, NHWC), t)
        if beside and block is not None:
            e.dma(f"load_w.{tag}", src, wt, e.prog.store_channel, waits, loaded,
                  permute=permute, before_store=block)
        else:
            e.dma(f"load_w.{tag}", src, wt, 0, waits, loaded, permute=permute)
        clauses += f" weights({wt})"
    if bias is not None:
        return clauses + bias
    return clauses + load_bias(e, layer.bias, j, (o0, o1), tag, t, waits, loaded, declare,
                               block)
