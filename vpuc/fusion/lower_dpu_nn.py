"""The CNN layers of imported models as DPU tasks, and layers split over channels.

``lower_dpu`` sends here the graph ops of ``graph_ops_nn.py`` the DPU runs,
and any Convolution whose weights do not fit a tile's CMX with one output row:

- ``GroupConvolution``: depthwise (one input and one output channel per group)
  is one ``dwconv`` (weights ``[C, 1, KH, KW]``); any other grouping is one
  ``conv`` per group over its slice of input and output channels, the way the
  NPU compiler's ``ConvertGroupConvToConv`` pass splits it (a DPU conv reads
  every input channel of its task);
- ``ConvolutionBackpropData`` and ``GroupConvolutionBackpropData``: a convolution
  over the zero-upsampled input (``lower_dpu_deconv.py``), per group;
- ``AvgPool``: ``avgpool`` when the divisor counts only real cells
  (``exclude_pad``, or no padding at all): the DPU model's average pool
  excludes padded cells (``runtime_sim/dpu/ops.py``); with ``count_include_pad``
  and padding, a ``dwconv`` whose weights are all ``1 / (KH * KW)``, as the
  NPU compiler's ``ConvertAvgPoolToDWConv`` does (the weight is rounded to the
  layer's type: one more rounding of relative size u);
- ``ReduceMean`` over H and W with ``keep_dims`` (``GlobalAveragePool``):
  ``avgpool`` with the whole H x W as its kernel;
- a ``Convolution`` whose weights exceed the budget: its output channels are
  cut into chunks (multiples of 16, the DPU's channel granule) whose weights
  fit, each chunk a series of row blocks of its own; when not even 16 output
  channels fit with one output row, its input channels are cut into chunks too
  (f32 partial sums: ``lower_dpu_ksplit_conv``).  A layer of fewer output rows
  than tiles (a global pool) is cut over its output channels, one chunk per tile.

Every layer is a list of *jobs* (a range of input channels, a range of output
channels and the weights between them); each job's output rows are cut into
blocks as in ``lower_dpu.emit_window`` (halo rows, padding only at the image
border), and all blocks of all jobs alternate over the tiles, double-buffered.
A layer of one job loads its weights once per tile, and its block count is the
one the cost model's pipeline estimate finds fastest (``vpuc.cost.blocks``);
with several jobs each block loads its job's weights (a slice of the DDR
weights, or a ``const`` this module declares, laid out NHWC), and its input
rows only when its tile does not hold them yet from an earlier chunk (chunks of
output channels read the same input: ResNet-18's last stage read each 7x7
input eleven times from DDR before).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages, loads_cycles
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks,
                                   const_text, describe, layer_timing, resident_cycles,
                                   split_rows_cost)
from vpuc.fusion.lower_dpu_channels import (aligned, conv_aligned, load_bias, load_padded_weights,
                                            padded)
from vpuc.fusion.lower_dpu_split import MAX_PARTS_FACTOR, cheapest_split, row_edges
from vpuc.fusion.lower_dpu_deconv import DECONVOLUTIONS, deconv_borders, deconv_jobs, upsample
from vpuc.fusion.lower_dpu_support import DPU_FLOATS, padding_problem, window
from vpuc.ir.graph import CONSTANT, GraphIndex, GraphOp
from vpuc.ir.types import ElemType, TensorType
from vpuc.reference.graph import constant_value

NN_LAYERS = ("GroupConvolution", "AvgPool", "ReduceMean") + DECONVOLUTIONS
ELTWISE = {"Add": "add", "Multiply": "mul"}      # marked by targets/shave.py (dpu_eltwise)
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
    if op.kind == "ReduceMean":
        if x.rank != 4 or set(op.attrs["axes"]) != {2, 3} or not op.attrs["keep_dims"]:
            return ("the DPU takes a mean over H and W of an NCHW tensor with keep_dims "
                    "(an average pool); other reductions need an ACT SHAVE kernel")
        return None
    if op.kind in ("GroupConvolution",) + DECONVOLUTIONS \
            and index.producer(op.operands[1]).kind != CONSTANT:
        return "its weights are not a constant (the DPU lowering rearranges them at compile time)"
    if op.kind in DECONVOLUTIONS:
        before, _ = deconv_borders(op, index)
        if min(before) < 0:
            return (f"its pads_begin {list(op.attrs['pads_begin'])} crop more than the dilated "
                    "kernel extent; not supported yet")
        return None
    kernel, _, begin, end, dilations = nn_window(op, index)
    return padding_problem(kernel, begin, end, dilations)


def nn_window(op: GraphOp, index: GraphIndex):
    """(kernel, strides, pads_begin, pads_end, dilations) of a layer of NN_LAYERS."""
    if op.kind == "GroupConvolution":
        kernel = tuple(index.producer(op.operands[1]).type.dims[3:])
        return (kernel, tuple(op.attrs["strides"]), tuple(op.attrs["pads_begin"]),
                tuple(op.attrs["pads_end"]), tuple(op.attrs["dilations"]))
    if op.kind == "ReduceMean":
        return tuple(index.producer(op.operands[0]).type.dims[2:]), (1, 1), (0, 0), (0, 0), (1, 1)
    return window(op, index)          # AvgPool: kernel and pads as MaxPool's


def plan_layer(layer: DpuLayer, index: GraphIndex, c: int, oc: int) -> Plan:
    """The DPU op and the jobs of a layer, before any split for CMX."""
    op = layer.op
    kernel, strides, begin, end, dil = nn_window(op, index)
    whole = [Job((0, c), (0, oc), from_ddr=op.kind == "Convolution")]
    if op.kind == "Convolution" and not conv_aligned(c, oc) \
            and index.producer(op.operands[1]).kind == CONSTANT:     # padded copies
        whole = [Job((0, c), (0, oc), constant_value(index.producer(op.operands[1])))]
    if op.kind == "Convolution":
        return Plan("conv", kernel, strides, begin, end, dil, whole)
    if op.kind == "MaxPool":
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


def takes(layer: DpuLayer, values: dict[str, Value], index: GraphIndex, tiles: int,
          budget: int) -> bool:
    """Whether this module lowers ``layer``: a layer of ``NN_LAYERS``, an eltwise Add or
    Multiply, or a Convolution or MaxPool ``lower_dpu.emit_window`` cannot run whole."""
    op = layer.op
    if op.kind in NN_LAYERS or op.kind in ELTWISE:
        return True
    _, channels, rows, _ = values[layer.output].type.dims
    few_rows = rows < tiles and channels > CHANNEL_GRANULE     # channels go to the tiles
    return few_rows or not _fits_whole(layer, values, index, budget)


def emit_nn(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
            tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    op = layer.op
    if op.kind in ELTWISE:
        emit_eltwise(prog, layer, values, tiles, prefix, gate, finish)
        return
    x = values[op.operands[0]]
    if op.kind in DECONVOLUTIONS:
        x, gate = upsample(prog, op, x, index, prefix, gate)
        dpu_op, kernel, dilations, jobs = deconv_jobs(op, index)
        plan = Plan(dpu_op, kernel, (1, 1), (0, 0), (0, 0), dilations, [Job(*j) for j in jobs])
    else:
        plan = plan_layer(layer, index, x.type.dims[1], values[layer.output].type.dims[1])
    emit_jobs(prog, layer, plan, x, values, tiles, prefix, gate, finish)


def _fits_whole(layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
                budget: int) -> bool:
    """Whether a Convolution or MaxPool runs as one job: its weights and bias with one
    output row (and its input rows), double-buffered, fit the budget."""
    op = layer.op
    x, out = values[op.operands[0]].type, values[layer.output].type
    kernel, strides, _, _, dilations = window(op, index)
    loaded = min(dilations[0] * (kernel[0] - 1) + 1, x.dims[2])
    rows = x.dims[0] * (x.dims[1] * loaded * x.dims[3] + out.dims[1] * out.dims[3])
    weights = 0
    if op.kind == "Convolution":             # as loaded: padded to the channel multiples
        o, i, kh, kw = index.producer(op.operands[1]).type.dims
        weights = aligned(o) * aligned(i) * kh * kw * x.elem.nbytes
    bias = 4 * out.dims[1] if layer.bias is not None else 0
    return weights + bias + 2 * rows * x.elem.nbytes <= budget


def emit_jobs(prog: ProgramText, layer: DpuLayer, plan: Plan, x: Value,
              values: dict[str, Value], tiles: int, prefix: str, gate: tuple[str, ...],
              finish: str | None) -> None:
    """The layer's DPU tasks over input ``x``: its jobs, each in blocks of output rows
    (module docstring)."""
    op = layer.op
    out = values[layer.output]
    n, c, h, w = x.type.dims
    _, oc, oh, ow = out.type.dims
    elem: ElemType = x.type.elem
    (kh, kw), (sh, sw), (pt, pl), (pb, pr), (dh, dw) = (plan.kernel, plan.strides, plan.begin,
                                                        plan.end, plan.dilations)
    bias_bytes = 4 if layer.bias is not None else 0

    def weight_bytes(job: Job) -> int:
        if not plan.has_weights:
            return 0
        per_out = aligned(job.ins[1] - job.ins[0]) if plan.dpu_op == "conv" else 1
        return aligned(job.outs[1] - job.outs[0]) * (per_out * kh * kw * elem.nbytes + bias_bytes)

    def io_bytes(job: Job, rows: int) -> int:
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        return n * elem.nbytes * (aligned(job.ins[1] - job.ins[0]) * loaded * w
                                  + aligned(job.outs[1] - job.outs[0]) * rows * ow)

    jobs = plan.jobs
    # fewest channel chunks whose one-row blocks fit; one per tile when the rows are too few
    first = tiles if oh < tiles and len(jobs) == 1 and oc > CHANNEL_GRANULE else 1
    for parts in range(first, oc + 1):
        jobs = [part for job in plan.jobs for part in split_job(plan, job, parts)]
        single = len(jobs) == 1
        worst = max(weight_bytes(j) * (1 if single else 2) + 2 * io_bytes(j, 1) for j in jobs)
        if worst <= prog.cmx_budget:
            break
        if all(j.outs[1] - j.outs[0] <= CHANNEL_GRANULE for j in jobs):
            if plan.dpu_op == "conv":      # the input channels cut too: f32 partial sums
                from vpuc.fusion.lower_dpu_ksplit_conv import emit_conv_ksplit
                emit_conv_ksplit(prog, layer, plan, x, values, tiles, prefix, gate, finish)
                return
            raise VpucError(f"{describe(op)} does not fit a tile's CMX: {worst} bytes with one "
                            f"output row and at most {CHANNEL_GRANULE} output channels per block "
                            f"over a budget of {prog.cmx_budget}; the {plan.dpu_op} works within "
                            "each channel: no reduction over channels to split", op.loc)
    chunkings = [jobs]
    if len(jobs) > 1:        # more chunks: the cost model weighs them (lower_dpu_split)
        for more in range(parts + 1, parts * MAX_PARTS_FACTOR + 1):
            if all(j.outs[1] - j.outs[0] <= CHANNEL_GRANULE for j in chunkings[-1]):
                break
            cut = [part for job in plan.jobs for part in split_job(plan, job, more)]
            if [j.outs for j in cut] != [j.outs for j in chunkings[-1]]:
                chunkings.append(cut)
    single = len(jobs) == 1
    timing = layer_timing(prog, op)

    def workload_of(job: Job, rows: int) -> DpuWorkload:
        return DpuWorkload(op=plan.dpu_op, elem=elem.value, width=ow, height=rows,
                           channels=aligned(job.outs[1] - job.outs[0]),
                           in_channels=aligned(job.ins[1] - job.ins[0]), kernel=(kh, kw),
                           stride=(sh, sw), batch=n, in_bytes=elem.nbytes,
                           out_bytes=elem.nbytes, weight_bytes=elem.nbytes)

    def stages(job: Job, rows: int) -> BlockStages:    # the cost model's estimate of a block
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        ins, outs = job.ins[1] - job.ins[0], job.outs[1] - job.outs[0]
        loads = [Move(n * ins * loaded * w * elem.nbytes, elem.nbytes, x.type.order != NHWC)]
        if plan.dpu_op == "conv" and aligned(ins) > ins:
            loads.append(Move(n * (aligned(ins) - ins) * loaded * w * elem.nbytes, elem.nbytes))
        compute = split_rows_cost(rows, lambda r: workload_of(job, r), timing)[1]
        store = Move(n * outs * rows * ow * elem.nbytes, elem.nbytes, out.type.order != NHWC)
        return block_stages(loads, compute, [store], timing)

    def job_stages(job: Job, rows: int) -> BlockStages:     # a block loading its job's weights
        s = stages(job, rows)
        own = [Move(weight_bytes(job) - outs_bias(job), elem.nbytes)] if plan.has_weights else []
        if outs_bias(job):
            own.append(Move(outs_bias(job), 4))
        extra = block_stages(own, 0.0, [], timing)
        return BlockStages(s.load + extra.load, s.compute, s.store, s.ddr + extra.ddr)

    def outs_bias(job: Job) -> int:
        return aligned(job.outs[1] - job.outs[0]) * bias_bytes if plan.has_weights else 0

    def resident_moves(job: Job) -> list[Move]:                # weights, then bias
        moves = [Move(weight_bytes(job) - outs_bias(job), elem.nbytes)]
        return moves + ([Move(outs_bias(job), 4)] if outs_bias(job) else [])

    # a layer whose lowering declares its weights (an avgpool's dwconv) has no operand for them
    weights_value = values.get(op.operands[1]) \
        if plan.has_weights and len(op.operands) > 1 else None
    constant_weights = weights_value is None or weights_value.kind == "const"
    if not single:
        jobs, count = cheapest_split(
            chunkings, oh, min(tiles if len(jobs) < tiles else 1, oh), tiles,
            lambda job, rows, _: 2 * (weight_bytes(job) + io_bytes(job, rows)) <= prog.cmx_budget,
            job_stages, prog.dma_channels)
    jobs = [_aligned_job(plan, job) for job in jobs]

    work = []
    for j, job in enumerate(jobs):
        if single:
            blocks = choose_blocks(oh, tiles, weight_bytes(job), lambda r: io_bytes(job, r),
                                   "output row", op, prog.cmx_budget,
                                   cost=lambda r: stages(job, r),
                                   resident_cost=resident_cycles(
                                       prog, resident_moves(job), gate, constant_weights),
                                   channels=prog.dma_channels)
        else:      # each block loads its own weights: cheapest_split chose the count
            blocks = row_edges(oh, count)
        work += [(j, r0, r1) for r0, r1 in blocks]

    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(work), balance=True)
    if layer.bias is not None and any(aligned(b - a) == b - a for a, b in (j.outs for j in jobs)):
        prog.buffers.append(f"const %{prefix}bias : {oc}xf32 = {const_text(layer.bias, prefix + 'bias')}")
    declared: set[int] = set()
    resident: dict[int, str] = {}
    inputs: dict[tuple, str] = {}          # (tile, input channels, first row, rows) -> CMX
    widest = max(aligned(j.ins[1] - j.ins[0]) - (j.ins[1] - j.ins[0]) for j in jobs)
    if plan.dpu_op == "conv" and widest:     # zeros for the padded input channels
        prog.buffers.append(f"const %{prefix}chzeros : {n}x{widest}x{h}x{w}x{elem} NHWC = splat 0")
    for k, (j, r0, r1) in enumerate(work):
        job, t = jobs[j], e.tile(k)
        e.barriers(k)
        waits, loaded = e.load_waits(k), [f"%{prefix}loaded{k}"]
        operands = ""
        if plan.has_weights or layer.bias is not None:
            if single and k >= e.used:
                operands = resident[t]
            else:
                tag = f"t{t}" if single else f"c{k}"
                operands = _load_weights(e, plan, job, j, values, op, layer, tag, t, waits,
                                         loaded, j not in declared,
                                         block=None if single else k)
                declared.add(j)
                resident[t] = operands
        lo, rows, top, bottom = _rows_in(r0, r1, sh, pt, dh, kh, h)
        (i0, i1), (o0, o1) = job.ins, job.outs
        ic, occ = aligned(i1 - i0), aligned(o1 - o0)
        # Chunks of output channels read the same input rows: a tile that already holds them
        # (loaded for an earlier chunk) reads that buffer again instead of DDR.  Its load ran
        # before that chunk's task, which runs before this one in the tile's DPU queue.
        key = (t, job.ins, lo, rows)
        xin = inputs.get(key) if not single and plan.has_weights else None
        if xin is None:
            xin = _load_input(e, k, x, job, lo, rows, plan.dpu_op == "conv", waits, loaded)
            inputs[key] = xin
        y = e.cmx(f"out.c{k}", TensorType((n, occ, r1 - r0, ow), elem, NHWC), t)
        head = (f"dpu {plan.dpu_op} on tile {t} in({xin}){operands} out({y}) kernel({kh}, {kw}) "
                f"stride({sh}, {sw}) pad({top}, {bottom}, {pl}, {pr})"
                + (f" dilation({dh}, {dw})" if plan.has_weights else "") + layer.post)
        e.task(k, head, ((0, ow - 1), r1 - r0, (0, occ - 1)), lambda r: workload_of(job, r))
        dst = e.view(f"out.v{k}", out.name, [f"0:{n}", f"{o0}:{o1}", f"{r0}:{r1}", f"0:{ow}"])
        if occ > o1 - o0:                            # only the real channels are stored
            y = e.view(f"out.r{k}", y[1:], [f"0:{n}", f"0:{o1 - o0}", f"0:{r1 - r0}", f"0:{ow}"])
        e.store(k, y, dst, permute=out.type.order != NHWC)


def _load_input(e: LayerEmitter, k: int, x: Value, job: Job, lo: int, rows: int, conv: bool,
                waits: str, loaded: list[str]) -> str:
    """DMA block ``k``'s input rows ``[lo, lo + rows)`` of the job's input channels into a CMX
    buffer of aligned channels (a convolution's padded channels zeroed: it reads across
    them); the buffer's name."""
    n, _, _, w = x.type.dims
    elem, (i0, i1) = x.type.elem, job.ins
    ic = aligned(i1 - i0)
    src = e.view(f"in.v{k}", x.name, [f"0:{n}", f"{i0}:{i1}", f"{lo}:{lo + rows}", f"0:{w}"])
    xin = e.cmx(f"in.c{k}", TensorType((n, ic, rows, w), elem, NHWC), e.tile(k))
    real = xin if ic == i1 - i0 else e.view(f"in.r{k}", xin[1:], [f"0:{n}", f"0:{i1 - i0}",
                                                                   f"0:{rows}", f"0:{w}"])
    e.dma(f"load{k}", src, real, 0, waits, loaded, permute=x.type.order != NHWC)
    if conv and ic > i1 - i0:                   # channels read across: zeros, not garbage
        pad = [f"0:{n}", f"0:{ic - (i1 - i0)}", f"0:{rows}", f"0:{w}"]
        e.dma(f"zero{k}", e.view(f"zeros.v{k}", f"{e.p}chzeros", pad),
              e.view(f"in.z{k}", xin[1:], [f"0:{n}", f"{i1 - i0}:{ic}", f"0:{rows}", f"0:{w}"]),
              e.prog.store_channel, waits, loaded, before_store=k)   # beside the load
    return xin


def _aligned_job(plan: Plan, job: Job) -> Job:
    """``job`` with its weights zero-padded to the DPU's channel multiples (output channels;
    a conv's input channels too)."""
    if job.weights is None:
        return job
    sizes = {0: aligned(job.weights.shape[0])}
    if plan.dpu_op == "conv":
        sizes[1] = aligned(job.weights.shape[1])
    return Job(job.ins, job.outs, padded(job.weights, sizes), job.from_ddr)


def _rows_in(r0: int, r1: int, sh: int, pt: int, dh: int, kh: int, h: int):
    """(first input row, rows loaded, pad top, pad bottom) for output rows [r0, r1)."""
    first, last = r0 * sh - pt, (r1 - 1) * sh - pt + dh * (kh - 1)
    lo, hi = max(first, 0), min(last, h - 1)
    return lo, hi - lo + 1, lo - first, last - hi


def _load_weights(e: LayerEmitter, plan: Plan, job: Job, j: int, values: dict[str, Value],
                  op: GraphOp, layer: DpuLayer, tag: str, t: int, waits: str,
                  loaded: list[str], declare: bool, block: int | None = None) -> str:
    """DMA the job's weights and bias into tile ``t``'s CMX; the task's operand clauses."""
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
            bias = load_bias(e, layer.bias, j, (o0, o1), tag, t, waits, loaded, declare, block)
            return clauses + f" weights({wt})" + bias
        if job.from_ddr:
            wv = values[op.operands[1]]
            src = e.view(f"w.v{tag}", wv.name, [f"{o0}:{o1}", f"0:{per_out}", f"0:{kh}",
                                                f"0:{kw}"])
            permute = wv.type.order != NHWC
        else:
            src = f"%{p}w{j}"
            if declare:
                t_text = "x".join(map(str, dims)) + f"x{elem} NHWC"
                e.prog.buffers.append(f"const {src} : {t_text} = {const_text(job.weights, src)}")
        wt = e.cmx(f"w.{tag}", TensorType(dims, elem, NHWC), t)
        e.dma(f"load_w.{tag}", src, wt, 0, waits, loaded, permute=permute)
        clauses += f" weights({wt})"
    return clauses + load_bias(e, layer.bias, j, (o0, o1), tag, t, waits, loaded, declare,
                               block)


def emit_eltwise(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                 prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    """An Add or Multiply of two activations of one NCHW shape: blocks of rows, both
    operands loaded NHWC, one DPU ``add``/``mul`` per block with the folded activation."""
    op = layer.op
    a, b, out = values[op.operands[0]], values[op.operands[1]], values[layer.output]
    n, c, h, w = out.type.dims
    elem = out.type.elem
    cp = aligned(c)        # the pad channels are never read across: left as they are
    timing = layer_timing(prog, op)

    def workload_of(rows: int) -> DpuWorkload:
        return DpuWorkload(op=ELTWISE[op.kind], elem=elem.value, width=w, height=rows,
                           channels=cp, in_channels=cp, batch=n, in_bytes=elem.nbytes,
                           out_bytes=elem.nbytes, weight_bytes=0)

    def stages(rows: int) -> BlockStages:      # the cost model's estimate of one block
        size = n * c * rows * w * elem.nbytes
        return block_stages([Move(size, elem.nbytes, v.type.order != NHWC) for v in (a, b)],
                            split_rows_cost(rows, workload_of, timing)[1],
                            [Move(size, elem.nbytes, out.type.order != NHWC)], timing)

    blocks = choose_blocks(h, tiles, 0, lambda rows: 3 * n * cp * rows * w * elem.nbytes,
                           "row", op, prog.cmx_budget, cost=stages,
                           channels=prog.dma_channels)
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(blocks), balance=True)
    for k, (r0, r1) in enumerate(blocks):
        t = e.tile(k)
        e.barriers(k)
        rows = [f"0:{n}", f"0:{c}", f"{r0}:{r1}", f"0:{w}"]
        block = TensorType((n, cp, r1 - r0, w), elem, NHWC)
        real = [f"0:{n}", f"0:{c}", f"0:{r1 - r0}", f"0:{w}"]
        ins = []
        for i, v in enumerate((a, b)):
            cmx = e.cmx(f"in{i}.c{k}", block, t)
            dst = cmx if cp == c else e.view(f"in{i}.r{k}", cmx[1:], real)
            e.dma(f"load{i}.{k}", e.view(f"in{i}.v{k}", v.name, rows), dst, 0, e.load_waits(k),
                  [f"%{prefix}loaded{k}"], permute=v.type.order != NHWC)
            ins.append(cmx)
        y = e.cmx(f"out.c{k}", block, t)
        e.task(k, f"dpu {ELTWISE[op.kind]} on tile {t} in({', '.join(ins)}) out({y}){layer.post}",
               ((0, w - 1), r1 - r0, (0, cp - 1)), workload_of)
        stored = y if cp == c else e.view(f"out.r{k}", y[1:], real)
        e.store(k, stored, e.view(f"out.v{k}", out.name, rows), permute=out.type.order != NHWC)
