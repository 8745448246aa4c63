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
- ``ReduceMean`` / ``ReduceMax`` over H and W with ``keep_dims`` (``GlobalAveragePool``,
  ``GlobalMaxPool``): ``avgpool`` / ``maxpool`` with the whole H x W as its kernel;
- a ``Convolution`` whose weights exceed the budget: its output channels are
  cut into chunks (multiples of 16, the DPU's channel granule) whose weights
  fit, each chunk a series of row blocks of its own; when not even 16 output
  channels fit with one output row, its input channels are cut into chunks too
  (f32 partial sums: ``lower_dpu_ksplit_conv``).  A layer of fewer output rows
  than tiles (a global pool) is cut over its output channels, one chunk per tile;
- a channelwise layer (dwconv, pools) whose one output row of 16 channels does not fit:
  the row's output columns are cut into the fewest equal blocks that fit, each loading
  its input columns with the halo the window needs (padding only at the image's left and
  right border, as rows pad only at the top and bottom), every block of rows x columns
  double-buffered over the tiles;
- a global pool whose window of 16 channels does not fit even for one output element:
  two levels of pooling (``lower_dpu_global_pool``).

The op each layer becomes and its jobs are ``lower_dpu_nn_plan``'s; the sizes and
cost-model stages of its blocks, and the chunks and row blocks it runs in, are
``lower_dpu_nn_sizing``'s (this module emits their tasks); an eltwise Add or
Multiply goes to ``lower_dpu_eltwise``.  Every layer is a list of *jobs* (a range of input channels, a range of output
channels and the weights between them); each job's output rows are cut into
blocks as in ``lower_dpu_window.emit_window`` (halo rows, padding only at the image
border), and all blocks of all jobs alternate over the tiles, double-buffered.
A layer of one job loads its weights once per tile, and its block count is the
one the cost model's pipeline estimate finds fastest (``vpuc.cost.blocks``);
with several jobs each block loads its job's weights (a slice of the DDR
weights, or a ``const`` this module declares, laid out NHWC), and its input
rows only when its tile does not hold them yet from an earlier chunk (chunks of
output channels read the same input: ResNet-18's last stage read each 7x7
input eleven times from DDR before), where the inputs a tile holds fit beside
the chunks' weights (``lower_dpu_split.holds_inputs``: VGG-19's 56x56 ones do
not).  Under ``--schedule default`` a layer whose
chunks' weights take the DMA longer than their blocks take the DPU (it streams its
weights: ResNet-18's stage 4) loads every second chunk on the store channel, so the
DDR latency of one chunk's load runs while the other channel's chunk streams instead
of idling the DDR between chunks (ResNet-18: 2,081,332 -> 2,047,305 cycles).
"""

from __future__ import annotations

import functools
import math

from vpuc.cost.blocks import block_stages
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (LAYER_BARRIER_SHARE, NHWC, DpuLayer, LayerEmitter,
                                   choose_blocks, const_text, resident_cycles)
from vpuc.fusion.fuse_epilogue import with_epilogue
from vpuc.fusion.lower_dpu_bias import TileBias, shares_bias
from vpuc.fusion.lower_dpu_channels import aligned, zero_vector, zeros_view
from vpuc.fusion.fuse_conv import epilogue_bytes
from vpuc.fusion.lower_dpu_nn_cut import cuts_channels
from vpuc.fusion.lower_dpu_nn_load import aligned_job, load_job_input, load_job_weights
from vpuc.fusion.lower_dpu_nn_sizing import LayerSizing, choose_chunks
from vpuc.fusion.lower_dpu_table import Table
from vpuc.fusion.lower_dpu_deconv import DECONVOLUTIONS, deconv_jobs, upsample
from vpuc.fusion.lower_dpu_eltwise import ELTWISE, emit_eltwise
from vpuc.fusion.lower_dpu_global_pool import emit_pool
from vpuc.fusion.lower_dpu_nn_plan import CHANNEL_GRANULE, NN_LAYERS, Job, Plan, plan_layer
from vpuc.fusion.lower_dpu_split import row_edges
from vpuc.fusion.lower_dpu_support import window
from vpuc.fusion.pool_stream import record_rows
from vpuc.fusion.resident import cast_blocks, ensure_pads, in_place_blocks, in_place_input
from vpuc.ir.graph import GraphIndex
from vpuc.ir.types import ElemType, TensorType


def takes(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
          tiles: int, gate: tuple[str, ...]) -> bool:
    """Whether this module lowers ``layer``: a layer of ``NN_LAYERS``, an eltwise Add or
    Multiply, a Convolution or MaxPool ``lower_dpu_window.emit_window`` cannot run whole,
    or a Convolution the cost model finds cheaper cut over its output channels than over
    its rows (``lower_dpu_nn_cut.cuts_channels``)."""
    op = layer.op
    if op.kind in NN_LAYERS or op.kind in ELTWISE:
        return True
    _, channels, rows, _ = values[layer.output].type.dims
    few_rows = rows < tiles and channels > CHANNEL_GRANULE     # channels go to the tiles
    return few_rows or not _fits_whole(layer, values, index, prog.cmx_budget) \
        or cuts_channels(prog, layer, values, index, tiles, gate)


def emit_nn(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
            tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    op = layer.op
    if op.kind in ELTWISE:
        emit_eltwise(prog, layer, values, tiles, prefix, gate, finish)
        return
    x, views_from, first_gate = values[op.operands[0]], len(prog.views), gate
    if op.kind in DECONVOLUTIONS:
        x, gate = upsample(prog, op, x, index, prefix, gate)
        dpu_op, kernel, dilations, jobs = deconv_jobs(op, index)
        plan = Plan(dpu_op, kernel, (1, 1), (0, 0), (0, 0), dilations, [Job(*j) for j in jobs])
        emit_jobs(prog, layer, plan, x, values, tiles, prefix, gate, finish)
    else:
        plan = plan_layer(layer, index, x.type.dims[1], values[layer.output].type.dims[1])
        by_channels = cuts_channels(prog, layer, values, index, tiles, gate)
        emit_pool(prog, layer, plan, x, values, tiles, prefix, gate, finish,
                  functools.partial(emit_jobs, by_channels=by_channels))
    # a padded output some path stored only the real channels of: its pads zeroed
    ensure_pads(prog, views_from, values[layer.output], prefix, first_gate, finish)


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
              finish: str | None, out: Value | None = None, by_channels: bool = False) -> None:
    """The layer's DPU tasks over input ``x`` into ``out`` (default: the layer's output):
    its jobs, each in blocks of output rows (module docstring); ``by_channels``: at least
    one chunk of output channels per tile (``lower_dpu_nn_cut``)."""
    op = layer.op
    out = out or values[layer.output]
    sizing = LayerSizing(prog, layer, plan, x, out, values)
    chunks = choose_chunks(sizing, tiles, gate, by_channels)
    if chunks is None:      # not even 16 output channels fit: f32 partial sums
        from vpuc.fusion.lower_dpu_ksplit_conv import emit_conv_ksplit
        emit_conv_ksplit(prog, layer, plan, x, values, tiles, prefix, gate, finish)
        return
    n, c, _, _ = x.type.dims
    _, oc, oh, ow = out.type.dims
    elem: ElemType = x.type.elem
    kh, kw, sh, sw, dh, dw = sizing.kh, sizing.kw, sizing.sh, sizing.sw, sizing.dh, sizing.dw
    width, timing, stage_weights = sizing.width, sizing.timing, sizing.stage_weights
    packed, conv, constant_weights = sizing.packed, sizing.conv, sizing.constant_weights
    weight_bytes, io_bytes, stages = sizing.weight_bytes, sizing.io_bytes, sizing.stages
    resident_moves, geometry = sizing.resident_moves, sizing.geometry
    single, count, kept, shares = chunks.single, chunks.count, chunks.kept, chunks.shares
    jobs = [aligned_job(plan, job) for job in chunks.jobs]

    work = []
    if kept is not None:        # chunk j's blocks on tile j, interleaved
        work = [(j, r0, r1, 0, ow) for r0, r1 in kept for j in range(len(jobs))]
    for j, job in enumerate(jobs if kept is None else []):
        if single:
            blocks = choose_blocks(oh, tiles, weight_bytes(job) + stage_weights,
                                   lambda r: io_bytes(job, r),
                                   "output row", op, prog.cmx_budget,
                                   live=2 if width < ow else None,   # blocks of columns too
                                   cost=with_epilogue(prog, lambda r: stages(job, r)),
                                   resident_cost=resident_cycles(
                                       prog, resident_moves(job), gate, constant_weights),
                                   channels=prog.dma_channels)
            if len(jobs) == 1 and width == ow:      # a global pool reading it streams (pool_stream)
                record_rows(prog, out.name, blocks, with_epilogue(prog, lambda r: stages(job, r)),
                            tiles, resident_cycles(prog, resident_moves(job), gate,
                                                   constant_weights), prog.dma_channels)
        else:      # each block loads its own weights: cheapest_split chose the count
            blocks = row_edges(oh, count)
        columns = row_edges(ow, math.ceil(ow / width))
        work += [(j, r0, r1, c0, c1) for r0, r1 in blocks for c0, c1 in columns]

    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(work))
    e.in_place = in_place_blocks(e, out, aligned(oc), [e.tile(k) for k in range(len(work))],
                                 whole=len(jobs) == 1 and width == ow)
    e.cast = cast_blocks(e, out, aligned(oc), [e.tile(k) for k in range(len(work))],
                         whole=len(jobs) == 1 and width == ow)

    def zero_count(k: int) -> int:    # the zeros block k's padded input channels take
        j, r0, r1, c0, c1 = work[k]
        return sizing.zero_count(jobs[j], r0, r1, c0, c1)

    tables: dict[int, Table] = {}
    for j, job in enumerate(jobs):
        if packed:
            per_out = aligned(job.ins[1] - job.ins[0]) if conv else 1
            tables[j] = Table((aligned(job.outs[1] - job.outs[0]), per_out, kh, kw), True)
    if layer.bias is not None and not packed \
            and any(aligned(b - a) == b - a for a, b in (j.outs for j in jobs)):
        prog.buffers.append(f"const %{prefix}bias : {oc}xf32 = {const_text(layer.bias, prefix + 'bias')}")
    # Chunks streaming their weights from DDR (prefetching schedule, a chunk's weights take
    # the DMA longer than its block the DPU): every second one on the store channel, so one
    # chunk's DDR latency hides under the other's transfer (ResNet-18's stage 4).  Not
    # where the DPU is the longer stage: the store channel's FIFO then holds the stores.
    stream = not single and kept is None and plan.has_weights and prog.dma_channels > 1 \
        and bool(prog.prefetch_bytes) and all(
            block_stages(resident_moves(job), 0.0, [], timing).load
            >= stages(job, r1 - r0).compute for job in jobs for r0, r1 in blocks)
    # Such a layer's blocks write outputs far smaller than their chunks (ResNet-18's 7x7
    # maps: 4.7 KB beside 442 KB): each keeps its own, so no chunk's DPU task waits for the
    # store of the block whose slot it takes, a store the store channel's FIFO holds
    # behind the next layers' weights (the last 3x3 layer's last chunk: 20K cycles).  Each
    # block then holds its ``loaded`` and ``done`` barriers until its store: only where they
    # fit the layer's share of the physical barriers, as in_flight_slots counts them
    # (MobileNetV3-Small's 576 -> 1024 classifier at a 12 KB budget: 30 blocks, 40 barriers)
    e.own_outputs = stream and 2 * len(work) <= prog.physical_barriers // LAYER_BARRIER_SHARE \
        and sum(n * aligned(jobs[j].outs[1] - jobs[j].outs[0]) * (r1 - r0) * (c1 - c0)
                * elem.nbytes + epilogue_bytes(prog.epilogue, n, r1 - r0, c1 - c0)
                for j, r0, r1, c0, c1 in work) <= min(weight_bytes(job) for job in jobs)
    declared: set[int] = set()
    # several chunks each loading their weights: the bias once per tile (lower_dpu_bias)
    tile_bias = TileBias(oc) if shares_bias(not single and kept is None, layer.bias, packed,
                                            [job.outs for job in jobs]) else None
    resident: dict[int, str] = {}
    inputs: dict[tuple, str] = {}          # (tile, input channels, rows, columns) -> CMX
    zv: dict[int, str] = {}                # tile -> its zero vector (zero_vector)
    for k, (j, r0, r1, c0, c1) in enumerate(work):
        job, t = jobs[j], e.tile(k)
        e.barriers(k)
        waits, loaded = e.load_waits(k), [f"%{prefix}loaded{k}"]
        operands = ""
        if plan.has_weights or layer.bias is not None:
            once = single or kept is not None       # a tile's weights, loaded once
            if once and k >= e.used:
                operands = resident[t]
            else:
                tag = f"t{t}" if once else f"c{k}"
                scale = prog.weights_scale if plan.has_weights else None   # a product folded in
                ready = scale.ready(e, t, tag) if scale is not None else []
                shared = tile_bias.clause(e, t, job.outs, tag) \
                    if tile_bias is not None else None
                operands = load_job_weights(e, plan, job, j, values, op, layer, tag, t, waits,
                                            loaded + ready[:1], j not in declared,
                                            block=None if once else k, table=tables.get(j),
                                            beside=stream and k % 2 == 1, bias=shared)
                if tile_bias is not None:
                    tile_bias.load(e, t, waits, loaded)
                if scale is not None:
                    operands = scale.apply(e, t, operands, tag, ready)
                declared.add(j)
                resident[t] = operands
        (lo, rows, top, bottom), (first_col, cols, left, right) = geometry(r0, r1, c0, c1)
        o0, o1 = job.outs
        occ = aligned(o1 - o0)
        # Chunks of output channels read the same input rows: a tile that already holds them
        # (loaded for an earlier chunk) reads that buffer again instead of DDR.  Its load ran
        # before that chunk's task, which runs before this one in the tile's DPU queue.
        key = (t, job.ins, lo, rows, first_col, cols)
        xin = inputs.get(key) if shares else None
        # no load: read in place, also by the chunks of a layer whose DPU is its longer
        # stage (their copies queued before the other tile's: ResNet-18's stage 3); not
        # when it streams its weights (stage 4: the copies are off its path, and reading
        # in place shifted its loads, 1,674,273 -> 1,698,044 cycles)
        if xin is None and (single or kept is not None or not stream) and width == ow \
                and job.ins == (0, c):
            xin = in_place_input(e, k, x, aligned(c), lo, rows)
        if xin is None:
            zeros = None
            if zero_count(k):
                if t not in zv:
                    zv[t] = zero_vector(e, t, max(zero_count(i) for i in range(len(work))),
                                        elem, waits, loaded)
                zeros = zeros_view(e, k, zv[t], zero_count(k))
            xin = load_job_input(e, k, x, job, (lo, rows), (first_col, cols), waits, loaded,
                                 zeros)
            inputs[key] = xin
        # a padded output's last chunk writes its pad channels too (resident.py), as many
        # as the value holds (a group starting off the channel multiple computes more)
        o_end = min(o0 + occ, out.padded) if out.padded and o1 == oc else o1
        dst = e.view(f"out.v{k}", out.name, [f"0:{n}", f"{o0}:{o_end}", f"{r0}:{r1}",
                                             f"{c0}:{c1}"])
        y = dst if k in e.in_place else \
            e.cmx(f"out.c{k}", TensorType((n, occ, r1 - r0, c1 - c0), elem, NHWC), t)
        outs = f"{y}, {dst}" if k in e.cast else y      # a copy on the value's tile
        head = (f"dpu {plan.dpu_op} on tile {t} in({xin}){operands} out({outs}) kernel({kh}, {kw}) "
                f"stride({sh}, {sw}) pad({top}, {bottom}, {left}, {right})"
                + (f" dilation({dh}, {dw})" if plan.has_weights else "") + layer.post)
        e.task(k, head, ((0, c1 - c0 - 1), r1 - r0, (0, occ - 1)),
               lambda r, cols=c1 - c0: sizing.workload_of(job, r, cols))
        if k in e.no_store:                  # written where the value lives: no store
            continue
        if occ > o_end - o0:              # only the real channels (and pads held) are stored
            y = e.view(f"out.r{k}", y[1:], [f"0:{n}", f"0:{o_end - o0}", f"0:{r1 - r0}",
                                             f"0:{c1 - c0}"])
        e.store(k, y, dst, permute=out.type.order != NHWC)
