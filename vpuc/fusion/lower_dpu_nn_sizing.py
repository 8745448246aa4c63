"""How big a CNN layer's blocks are and what the cost model says they cost
(``lower_dpu_nn.emit_jobs``), and the channel chunks and row blocks it runs in.

``LayerSizing`` holds one layer's derived quantities (its window, its element type,
whether its weights are a table with the bias in it, the output columns a block
computes) and answers, for a job (a range of input and output channels) and a block of
its output rows, the CMX bytes of the block's weights, input, output and zeros, its DPU
workload, and its transfers and stages in the cost model's pipeline estimate
(``vpuc.cost.blocks``).  ``choose_chunks`` cuts the layer's jobs into the fewest chunks
of output channels whose one-row blocks fit a tile's CMX (a channelwise op whose 16
channels do not fit: blocks of output columns with their halo), then lets the cost model
weigh more chunks and their row blocks (``lower_dpu_split``), or one chunk per tile that
keeps its weights over its row blocks (``lower_dpu_nn_cut.kept_chunks``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages
from vpuc.cost.timing import Timing
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.fuse_conv import epilogue_bytes, epilogue_weight_bytes
from vpuc.fusion.lower_dpu import NHWC, DpuLayer, describe, layer_timing, split_rows_cost
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.fusion.lower_dpu_nn_cut import kept_chunks, kept_rows
from vpuc.fusion.lower_dpu_nn_load import loads_pads, rows_in
from vpuc.fusion.lower_dpu_nn_plan import CHANNEL_GRANULE, Job, Plan, split_job
from vpuc.fusion.lower_dpu_split import (MAX_PARTS_FACTOR, InputReuse, cheapest_split,
                                         holds_inputs, split_cycles)
from vpuc.fusion.lower_dpu_table import box_rows, packs_bias


class LayerSizing:
    """One layer's window, types and weights layout over input ``x`` into ``out``, and the
    sizes and cost-model stages of its jobs' blocks (module docstring)."""

    def __init__(self, prog: ProgramText, layer: DpuLayer, plan: Plan, x: Value, out: Value,
                 values: dict[str, Value]) -> None:
        self.prog, self.layer, self.plan, self.x, self.out = prog, layer, plan, x, out
        self.n, self.c, self.h, self.w = x.type.dims
        _, self.oc, self.oh, self.ow = out.type.dims
        self.elem = x.type.elem
        (self.kh, self.kw), (self.sh, self.sw), (self.pt, self.pl), (_, self.pr), \
            (self.dh, self.dw) = plan.kernel, plan.strides, plan.begin, plan.end, plan.dilations
        # constant weights the lowering declares: a table (lower_dpu_table) with the bias
        # after them when exact in their type
        self.packed = plan.has_weights and all(j.weights is not None for j in plan.jobs) \
            and packs_bias(layer.bias, self.elem)
        self.conv = plan.dpu_op == "conv"     # reads across channels: its input's padding zeroed
        self.bias_bytes = 4 if layer.bias is not None and not self.packed else 0
        # a fused convolution stage's weights (fuse_conv, fuse_halo_conv): once per tile
        self.stage_weights = epilogue_weight_bytes(prog.epilogue)
        self.width = self.ow     # output columns per block: all of them unless a row does not fit
        # asked once the layer's chunks fit (choose_chunks), as the cost model's estimates need it
        self.timing: Timing | None = None
        # a layer whose lowering declares its weights (an avgpool's dwconv) has no operand
        # for them
        op = layer.op
        weights_value = values.get(op.operands[1]) \
            if plan.has_weights and len(op.operands) > 1 else None
        self.constant_weights = weights_value is None or weights_value.kind == "const"

    # a resident output of padded channels (resident.padded_channels) gets finite pads: a
    # channelwise op's input padding is zeroed too, unless the job's blocks load the pads
    # of a padded input with the real channels (finite, resident.py: loads_pads)
    def zeroes(self, job: Job) -> bool:
        return (self.conv or self.out.padded is not None) and not loads_pads(self.x, job)

    def weight_bytes(self, job: Job) -> int:
        if not self.plan.has_weights:
            return 0
        kh, kw = self.kh, self.kw
        per_out = aligned(job.ins[1] - job.ins[0]) if self.plan.dpu_op == "conv" else 1
        outs = aligned(job.outs[1] - job.outs[0])
        rows = box_rows(outs, per_out, kh, kw)[0] if self.packed else 0
        return (outs + rows) * per_out * kh * kw * self.elem.nbytes + outs * self.bias_bytes

    def _loaded(self, rows: int) -> tuple[int, int]:
        """The input rows and columns a block of ``rows`` output rows loads."""
        kh, kw, sh, sw, dh, dw = self.kh, self.kw, self.sh, self.sw, self.dh, self.dw
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, self.h)
        cols = self.w if self.width == self.ow \
            else min((self.width - 1) * sw + dw * (kw - 1) + 1, self.w)
        return loaded, cols

    def input_bytes(self, job: Job, rows: int) -> int:      # a block's input buffer
        loaded, cols = self._loaded(rows)
        return self.n * aligned(job.ins[1] - job.ins[0]) * loaded * cols * self.elem.nbytes

    def io_bytes(self, job: Job, rows: int) -> int:
        n = self.n
        loaded, cols = self._loaded(rows)
        ic, ins = aligned(job.ins[1] - job.ins[0]), job.ins[1] - job.ins[0]
        zeros = 0           # the tile's zero vector for such a block (an upper bound)
        if self.zeroes(job) and ic > ins:
            zeros = n * (ic - ins) * loaded * cols
        return self.input_bytes(job, rows) \
            + (n * aligned(job.outs[1] - job.outs[0]) * rows * self.width + zeros) \
            * self.elem.nbytes + epilogue_bytes(self.prog.epilogue, n, rows, self.width)

    def input_room(self, chunks: list[Job], rows: int) -> int:
        """A tile's CMX for block inputs beside the double-buffered weights, outputs and
        zeros of blocks of ``rows`` rows (``lower_dpu_split.holds_inputs``)."""
        return self.prog.cmx_budget - 2 * max(self.weight_bytes(j) + self.io_bytes(j, rows)
                                              - self.input_bytes(j, rows) for j in chunks)

    def worst_block(self, jobs: list[Job]) -> int:      # one output row, double-buffered
        single = len(jobs) == 1
        return max(self.weight_bytes(j) * (1 if single else 2) + 2 * self.io_bytes(j, 1)
                   for j in jobs) + self.stage_weights

    def workload_of(self, job: Job, rows: int, cols: int | None = None) -> DpuWorkload:
        elem = self.elem
        return DpuWorkload(op=self.plan.dpu_op, elem=elem.value, width=cols or self.width,
                           height=rows, channels=aligned(job.outs[1] - job.outs[0]),
                           in_channels=aligned(job.ins[1] - job.ins[0]),
                           kernel=(self.kh, self.kw), stride=(self.sh, self.sw), batch=self.n,
                           in_bytes=elem.nbytes, out_bytes=elem.nbytes, weight_bytes=elem.nbytes)

    def input_moves(self, job: Job, rows: int) -> list[Move]:   # a block's input (load_job_input)
        loaded, cols = self._loaded(rows)
        ins = job.ins[1] - job.ins[0]
        return [Move(self.n * ins * loaded * cols * self.elem.nbytes, self.elem.nbytes,
                     self.x.type.order != NHWC)]

    def stages(self, job: Job, rows: int) -> BlockStages:    # the cost model's estimate of a block
        outs = job.outs[1] - job.outs[0]
        compute = split_rows_cost(rows, lambda r: self.workload_of(job, r), self.timing)[1]
        store = Move(self.n * outs * rows * self.width * self.elem.nbytes, self.elem.nbytes,
                     self.out.type.order != NHWC)
        return block_stages(self.input_moves(job, rows), compute, [store], self.timing)

    def job_stages(self, job: Job, rows: int) -> BlockStages:   # a block loading its job's weights
        s = self.stages(job, rows)
        own = [Move(self.weight_bytes(job) - self.outs_bias(job), self.elem.nbytes)] \
            if self.plan.has_weights else []
        if self.outs_bias(job):
            own.append(Move(self.outs_bias(job), 4))
        extra = block_stages(own, 0.0, [], self.timing)
        return BlockStages(s.load + extra.load, s.compute, s.store, s.ddr + extra.ddr)

    def outs_bias(self, job: Job) -> int:
        return aligned(job.outs[1] - job.outs[0]) * self.bias_bytes if self.plan.has_weights \
            else 0

    def resident_moves(self, job: Job) -> list[Move]:                # weights, then bias
        moves = [Move(self.weight_bytes(job) - self.outs_bias(job), self.elem.nbytes)]
        return moves + ([Move(self.outs_bias(job), 4)] if self.outs_bias(job) else [])

    def geometry(self, r0: int, r1: int, c0: int, c1: int):
        """(first row, rows, top, bottom), (first column, columns, left, right) loaded."""
        kh, kw, sh, sw, dh, dw = self.kh, self.kw, self.sh, self.sw, self.dh, self.dw
        rows = rows_in(r0, r1, sh, self.pt, dh, kh, self.h)
        if (c0, c1) != (0, self.ow):       # a block of columns: its halo, padding at the border
            return rows, rows_in(c0, c1, sw, self.pl, dw, kw, self.w)
        return rows, (0, self.w, self.pl, self.pr)

    def zero_count(self, job: Job, r0: int, r1: int, c0: int, c1: int) -> int:
        """The zeros a block of ``job`` over those rows and columns takes for its padded
        input channels."""
        if not self.zeroes(job):
            return 0
        (_, rows, _, _), (_, cols, _, _) = self.geometry(r0, r1, c0, c1)
        return self.n * (aligned(job.ins[1] - job.ins[0]) - (job.ins[1] - job.ins[0])) \
            * rows * cols


@dataclass
class Chunks:
    """The jobs a layer runs (before ``aligned_job``) and how: ``single``, one job whose
    row blocks ``choose_blocks`` counts; else ``count`` row blocks per job, or ``kept``
    row blocks of one chunk per tile that keeps its weights; ``shares``, blocks read an
    input their tile loaded for an earlier chunk."""
    jobs: list[Job]
    single: bool
    count: int | None = None
    kept: list[tuple[int, int]] | None = None
    shares: bool = False


def choose_chunks(sizing: LayerSizing, tiles: int, gate: tuple[str, ...],
                  by_channels: bool) -> Chunks | None:
    """The layer's chunks and row blocks (module docstring); None when not even 16 output
    channels of a convolution fit with one output row (its input channels cut too: f32
    partial sums, ``lower_dpu_ksplit_conv``).  Sets ``sizing.width`` when a channelwise
    op's row is cut into blocks of columns, and ``sizing.timing``."""
    prog, plan, op = sizing.prog, sizing.plan, sizing.layer.op
    oc, oh, ow = sizing.oc, sizing.oh, sizing.ow
    jobs = plan.jobs
    # fewest channel chunks whose one-row blocks fit; one per tile when the rows are too few
    first = tiles if (oh < tiles or by_channels) and len(jobs) == 1 and oc > CHANNEL_GRANULE \
        else 1
    for parts in range(first, oc + 1):
        jobs = [part for job in plan.jobs for part in split_job(plan, job, parts)]
        if sizing.worst_block(jobs) <= prog.cmx_budget:
            break
        if all(j.outs[1] - j.outs[0] <= CHANNEL_GRANULE for j in jobs):
            if plan.dpu_op == "conv":      # the input channels cut too: f32 partial sums
                return None
            # a channelwise op: the row's columns cut into blocks with their halo columns
            for count in range(2, ow + 1):
                sizing.width = math.ceil(ow / count)
                if sizing.worst_block(jobs) <= prog.cmx_budget:
                    break
            else:
                raise VpucError(f"{describe(op)} does not fit a tile's CMX: "
                                f"{sizing.worst_block(jobs)} bytes with one output element and "
                                f"at most {CHANNEL_GRANULE} channels per block over a budget "
                                f"of {prog.cmx_budget}; the {plan.dpu_op} works within each "
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
    chunks = Chunks(jobs, single=len(jobs) == 1)
    sizing.timing = timing = layer_timing(prog, op)
    if chunks.single:
        return chunks
    reuse = InputReuse(lambda job: job.ins,
                       lambda job, rows: block_stages(sizing.input_moves(job, rows), 0.0, [],
                                                      timing),
                       sizing.input_bytes, sizing.input_room) \
        if plan.has_weights else None
    jobs, count = cheapest_split(
        chunkings, oh, min(tiles if len(jobs) < tiles else 1, oh), tiles,
        lambda job, rows, _: 2 * (sizing.weight_bytes(job) + sizing.io_bytes(job, rows))
        <= prog.cmx_budget,
        sizing.job_stages, prog.dma_channels, 0.0,
        # chunks of a layer with weights share their input on a tile (emit_jobs)
        reuse)
    chunks.jobs, chunks.count = jobs, count
    if by_channels and len(plan.jobs) == 1 and len(chunkings[0]) == tiles \
            and plan.has_weights and sizing.width == ow and kept_rows(prog, plan.dpu_op):
        chunks.kept = kept_chunks(
            prog, chunkings[0], oh, tiles, gate, sizing.constant_weights,
            sizing.stages, sizing.resident_moves,
            lambda count, rows: max(sizing.weight_bytes(job) + (1 if count == 1 else 2)
                                    * sizing.io_bytes(job, rows)
                                    for job in chunkings[0]) <= prog.cmx_budget,
            split_cycles(jobs, oh, count, tiles, sizing.job_stages, prog.dma_channels, 0.0,
                         reuse))
        if chunks.kept is not None:
            chunks.jobs = chunkings[0]
    # as the estimate counted them: only where the tiles hold them all (VGG-19)
    chunks.shares = chunks.kept is None and holds_inputs(chunks.jobs, oh, count, tiles, reuse)
    return chunks
