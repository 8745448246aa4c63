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

The op each layer becomes and its jobs are ``lower_dpu_nn_plan``'s; an eltwise Add or
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

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks,
                                   const_text, describe, layer_timing, resident_cycles,
                                   split_rows_cost)
from vpuc.fusion.fuse_epilogue import with_epilogue
from vpuc.fusion.lower_dpu_bias import TileBias, shares_bias
from vpuc.fusion.lower_dpu_channels import aligned, zero_vector, zeros_view
from vpuc.fusion.fuse_conv import epilogue_bytes
from vpuc.fusion.lower_dpu_nn_cut import cuts_channels, kept_chunks, kept_rows
from vpuc.fusion.lower_dpu_nn_load import (aligned_job, load_job_input, load_job_weights,
                                          loads_pads, rows_in)
from vpuc.fusion.lower_dpu_table import Table, box_rows, packs_bias
from vpuc.fusion.lower_dpu_deconv import DECONVOLUTIONS, deconv_jobs, upsample
from vpuc.fusion.lower_dpu_eltwise import ELTWISE, emit_eltwise
from vpuc.fusion.lower_dpu_global_pool import emit_pool
from vpuc.fusion.lower_dpu_nn_plan import (CHANNEL_GRANULE, NN_LAYERS, Job, Plan, plan_layer,
                                           split_job)
from vpuc.fusion.lower_dpu_split import (MAX_PARTS_FACTOR, InputReuse, cheapest_split,
                                         holds_inputs, row_edges, split_cycles)
from vpuc.fusion.lower_dpu_support import window
from vpuc.fusion.resident import ensure_pads, in_place_blocks, in_place_input
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
    n, c, h, w = x.type.dims
    _, oc, oh, ow = out.type.dims
    elem: ElemType = x.type.elem
    (kh, kw), (sh, sw), (pt, pl), (_, pr), (dh, dw) = (plan.kernel, plan.strides, plan.begin,
                                                        plan.end, plan.dilations)
    # constant weights the lowering declares: a table (lower_dpu_table) with the bias after
    # them when exact in their type
    packed = plan.has_weights and all(j.weights is not None for j in plan.jobs) \
        and packs_bias(layer.bias, elem)
    conv = plan.dpu_op == "conv"     # reads across channels: its input's padding zeroed
    # a resident output of padded channels (resident.padded_channels) gets finite pads: a
    # channelwise op's input padding is zeroed too, unless the job's blocks load the pads
    # of a padded input with the real channels (finite, resident.py: loads_pads)
    def zeroes(job: Job) -> bool:
        return (conv or out.padded is not None) and not loads_pads(x, job)
    bias_bytes = 4 if layer.bias is not None and not packed else 0

    def weight_bytes(job: Job) -> int:
        if not plan.has_weights:
            return 0
        per_out = aligned(job.ins[1] - job.ins[0]) if plan.dpu_op == "conv" else 1
        outs = aligned(job.outs[1] - job.outs[0])
        rows = box_rows(outs, per_out, kh, kw)[0] if packed else 0
        return (outs + rows) * per_out * kh * kw * elem.nbytes + outs * bias_bytes

    width = ow        # output columns per block: all of them unless a row does not fit

    def input_bytes(job: Job, rows: int) -> int:      # a block's input buffer
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        cols = w if width == ow else min((width - 1) * sw + dw * (kw - 1) + 1, w)
        return n * aligned(job.ins[1] - job.ins[0]) * loaded * cols * elem.nbytes

    def io_bytes(job: Job, rows: int) -> int:
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        cols = w if width == ow else min((width - 1) * sw + dw * (kw - 1) + 1, w)
        ic, ins = aligned(job.ins[1] - job.ins[0]), job.ins[1] - job.ins[0]
        zeros = 0           # the tile's zero vector for such a block (an upper bound)
        if zeroes(job) and ic > ins:
            zeros = n * (ic - ins) * loaded * cols
        return input_bytes(job, rows) + (n * aligned(job.outs[1] - job.outs[0]) * rows * width
                                         + zeros) * elem.nbytes \
            + epilogue_bytes(prog.epilogue, n, rows, width)

    def input_room(chunks: list[Job], rows: int) -> int:
        """A tile's CMX for block inputs beside the double-buffered weights, outputs and
        zeros of blocks of ``rows`` rows (``lower_dpu_split.holds_inputs``)."""
        return prog.cmx_budget - 2 * max(weight_bytes(j) + io_bytes(j, rows)
                                         - input_bytes(j, rows) for j in chunks)

    def worst_block(jobs: list[Job]) -> int:      # one output row, double-buffered
        single = len(jobs) == 1
        return max(weight_bytes(j) * (1 if single else 2) + 2 * io_bytes(j, 1) for j in jobs)

    jobs = plan.jobs
    # fewest channel chunks whose one-row blocks fit; one per tile when the rows are too few
    first = tiles if (oh < tiles or by_channels) and len(jobs) == 1 and oc > CHANNEL_GRANULE \
        else 1
    for parts in range(first, oc + 1):
        jobs = [part for job in plan.jobs for part in split_job(plan, job, parts)]
        if worst_block(jobs) <= prog.cmx_budget:
            break
        if all(j.outs[1] - j.outs[0] <= CHANNEL_GRANULE for j in jobs):
            if plan.dpu_op == "conv":      # the input channels cut too: f32 partial sums
                from vpuc.fusion.lower_dpu_ksplit_conv import emit_conv_ksplit
                emit_conv_ksplit(prog, layer, plan, x, values, tiles, prefix, gate, finish)
                return
            # a channelwise op: the row's columns cut into blocks with their halo columns
            for count in range(2, ow + 1):
                width = math.ceil(ow / count)
                if worst_block(jobs) <= prog.cmx_budget:
                    break
            else:
                raise VpucError(f"{describe(op)} does not fit a tile's CMX: "
                                f"{worst_block(jobs)} bytes with one output element and at most "
                                f"{CHANNEL_GRANULE} channels per block over a budget of "
                                f"{prog.cmx_budget}; the {plan.dpu_op} works within each "
                                "channel: no reduction over channels to split", op.loc)
            break
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

    def workload_of(job: Job, rows: int, cols: int | None = None) -> DpuWorkload:
        return DpuWorkload(op=plan.dpu_op, elem=elem.value, width=cols or width, height=rows,
                           channels=aligned(job.outs[1] - job.outs[0]),
                           in_channels=aligned(job.ins[1] - job.ins[0]), kernel=(kh, kw),
                           stride=(sh, sw), batch=n, in_bytes=elem.nbytes,
                           out_bytes=elem.nbytes, weight_bytes=elem.nbytes)

    def input_moves(job: Job, rows: int) -> list[Move]:     # a block's input (load_job_input)
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        cols = w if width == ow else min((width - 1) * sw + dw * (kw - 1) + 1, w)
        ins = job.ins[1] - job.ins[0]
        loads = [Move(n * ins * loaded * cols * elem.nbytes, elem.nbytes, x.type.order != NHWC)]
        return loads

    def stages(job: Job, rows: int) -> BlockStages:    # the cost model's estimate of a block
        outs = job.outs[1] - job.outs[0]
        compute = split_rows_cost(rows, lambda r: workload_of(job, r), timing)[1]
        store = Move(n * outs * rows * width * elem.nbytes, elem.nbytes, out.type.order != NHWC)
        return block_stages(input_moves(job, rows), compute, [store], timing)

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
    kept = None         # row blocks of one chunk per tile that keeps its weights
    shares = False      # blocks read an input their tile loaded for an earlier chunk
    if not single:
        reuse = InputReuse(lambda job: job.ins,
                           lambda job, rows: block_stages(input_moves(job, rows), 0.0, [], timing),
                           input_bytes, input_room) \
            if plan.has_weights else None
        jobs, count = cheapest_split(
            chunkings, oh, min(tiles if len(jobs) < tiles else 1, oh), tiles,
            lambda job, rows, _: 2 * (weight_bytes(job) + io_bytes(job, rows)) <= prog.cmx_budget,
            job_stages, prog.dma_channels, 0.0,
            # chunks of a layer with weights share their input on a tile (the loop below)
            reuse)
        if by_channels and len(plan.jobs) == 1 and len(chunkings[0]) == tiles \
                and plan.has_weights and width == ow and kept_rows(prog, plan.dpu_op):
            kept = kept_chunks(prog, chunkings[0], oh, tiles, gate, constant_weights,
                                stages, resident_moves,
                                lambda count, rows: max(weight_bytes(job) + (1 if count == 1 else 2)
                                                        * io_bytes(job, rows)
                                                        for job in chunkings[0]) <= prog.cmx_budget,
                                split_cycles(jobs, oh, count, tiles, job_stages,
                                             prog.dma_channels, 0.0, reuse))
            if kept is not None:
                jobs = chunkings[0]
        # as the estimate counted them: only where the tiles hold them all (VGG-19)
        shares = kept is None and holds_inputs(jobs, oh, count, tiles, reuse)
    jobs = [aligned_job(plan, job) for job in jobs]

    work = []
    if kept is not None:        # chunk j's blocks on tile j, interleaved
        work = [(j, r0, r1, 0, ow) for r0, r1 in kept for j in range(len(jobs))]
    for j, job in enumerate(jobs if kept is None else []):
        if single:
            blocks = choose_blocks(oh, tiles, weight_bytes(job), lambda r: io_bytes(job, r),
                                   "output row", op, prog.cmx_budget,
                                   live=2 if width < ow else None,   # blocks of columns too
                                   cost=with_epilogue(prog, lambda r: stages(job, r)),
                                   resident_cost=resident_cycles(
                                       prog, resident_moves(job), gate, constant_weights),
                                   channels=prog.dma_channels)
        else:      # each block loads its own weights: cheapest_split chose the count
            blocks = row_edges(oh, count)
        columns = row_edges(ow, math.ceil(ow / width))
        work += [(j, r0, r1, c0, c1) for r0, r1 in blocks for c0, c1 in columns]

    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(work))
    e.in_place = in_place_blocks(e, out, aligned(oc), [e.tile(k) for k in range(len(work))],
                                 whole=len(jobs) == 1 and width == ow)

    def geometry(r0: int, r1: int, c0: int, c1: int):
        """(first row, rows, top, bottom), (first column, columns, left, right) loaded."""
        if (c0, c1) != (0, ow):       # a block of columns: its halo, padding at the border
            return rows_in(r0, r1, sh, pt, dh, kh, h), rows_in(c0, c1, sw, pl, dw, kw, w)
        return rows_in(r0, r1, sh, pt, dh, kh, h), (0, w, pl, pr)

    def zero_count(k: int) -> int:    # the zeros block k's padded input channels take
        j, r0, r1, c0, c1 = work[k]
        if not zeroes(jobs[j]):
            return 0
        (_, rows, _, _), (_, cols, _, _) = geometry(r0, r1, c0, c1)
        return n * (aligned(jobs[j].ins[1] - jobs[j].ins[0]) - (jobs[j].ins[1] - jobs[j].ins[0])) \
            * rows * cols

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
        head = (f"dpu {plan.dpu_op} on tile {t} in({xin}){operands} out({y}) kernel({kh}, {kw}) "
                f"stride({sh}, {sw}) pad({top}, {bottom}, {left}, {right})"
                + (f" dilation({dh}, {dw})" if plan.has_weights else "") + layer.post)
        e.task(k, head, ((0, c1 - c0 - 1), r1 - r0, (0, occ - 1)),
               lambda r, cols=c1 - c0: workload_of(job, r, cols))
        if k in e.in_place:                  # written where the value lives: no store
            continue
        if occ > o_end - o0:              # only the real channels (and pads held) are stored
            y = e.view(f"out.r{k}", y[1:], [f"0:{n}", f"0:{o_end - o0}", f"0:{r1 - r0}",
                                             f"0:{c1 - c0}"])
        e.store(k, y, dst, permute=out.type.order != NHWC)
