"""A Convolution split over its input channels (``lower_dpu_ksplit``): blocks of output
rows and output channels, each a series of input-channel chunks.

The layer's jobs are ``lower_dpu_nn``'s (one per group; the weights a slice of
the DDR weights or a constant that module rearranged).  A chunk of input
channels [c0, c1) of a block (output rows [r0, r1), output channels [o0, o1))
loads the input rows the window needs (the halo; padding only at the image
border, as ``lower_dpu_nn.emit_jobs``) over those channels into an NHWC CMX
buffer of ``aligned(c1 - c0)`` channels (the rest zeroed from a ``const``
splat: a convolution reads across channels), the weights [o0:o1, c0:c1] padded
to the channel multiples, and runs one DPU ``conv`` writing the f32 partial
[N, aligned(o1 - o0), rows, OW] NHWC; the first chunk loads the block's slice
of the bias.  A chunk's sum over its input channels and the whole window is the
partial of those channels; the partials of all chunks add to the layer's sum.
"""

from __future__ import annotations

from vpuc.cost import DpuWorkload
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import NHWC, DpuLayer
from vpuc.fusion.lower_dpu_channels import aligned, load_padded_weights, padded
from vpuc.fusion.lower_dpu_ksplit_schedule import TaskSchedule
from vpuc.fusion.lower_dpu_ksplit import (GRANULE, KSplitLayer, Split, depths, edges,
                                          row_counts)
from vpuc.fusion.lower_dpu_support import const_text
from vpuc.ir.types import ElemType, TensorType


class ConvKSplit(KSplitLayer):
    """A Convolution (each of ``plan``'s jobs) lowered with its input channels cut into
    chunks."""

    def __init__(self, prog: ProgramText, layer: DpuLayer, plan, x: Value,
                 values: dict[str, Value], tiles: int, prefix: str) -> None:
        self.plan, self.x, self.values = plan, x, values
        self.out = values[layer.output]
        super().__init__(prog, layer, tiles, prefix, self.out.type.elem)
        self.n, _, self.h, self.w = x.type.dims
        _, self.oc, self.oh, self.ow = self.out.type.dims
        self.elem = x.type.elem
        self.widest_out = max(j.outs[1] - j.outs[0] for j in plan.jobs)
        self.widest_in = max(j.ins[1] - j.ins[0] for j in plan.jobs)

    def _loaded(self, rows: int) -> int:
        (kh, _), (sh, _), (dh, _) = self.plan.kernel, self.plan.strides, self.plan.dilations
        return min((rows - 1) * sh + dh * (kh - 1) + 1, self.h)

    def need(self, s: Split) -> int:
        """CMX bytes of a tile: two slots of input rows and weights, two f32 partials, two
        f32 totals, the f16 result, the bias."""
        kh, kw = self.plan.kernel
        icp, ocp, eb = aligned(s.depth), aligned(s.cols), self.elem.nbytes
        x = self.n * icp * self._loaded(s.rows) * self.w * eb
        w = ocp * icp * kh * kw * eb
        out = self.n * ocp * s.rows * self.ow
        bias = 4 * ocp if self.layer.bias is not None else 0
        return 2 * (x + w) + 4 * out * 4 + out * 2 + bias

    def candidates(self) -> list[Split]:
        return self.fitting(row_counts(self.oh), depths(self.widest_out), depths(self.widest_in))

    def least(self) -> Split:
        return Split(1, min(self.widest_out, GRANULE), min(self.widest_in, GRANULE))

    def bias_length(self) -> int:          # past the last block's channels
        return self.oc + GRANULE

    def blocks(self, s: Split) -> list:
        return [(j, (job.outs[0] + a, job.outs[0] + b), rows)
                for j, job in enumerate(self.plan.jobs)
                for a, b in edges(job.outs[1] - job.outs[0], s.cols)
                for rows in edges(self.oh, s.rows)]

    def chunks(self, block, s: Split) -> list[tuple[int, int]]:
        i0, i1 = self.plan.jobs[block[0]].ins
        return [(i0 + a, i0 + b) for a, b in edges(i1 - i0, s.depth)]

    def emit_chunk(self, sch: TaskSchedule, tag: str, t: int, slot: int, block,
                   chunk: tuple[int, int], first: bool) -> str:
        from vpuc.fusion.lower_dpu_nn_load import rows_in   # noqa: PLC0415 (import cycle)
        j, (o0, o1), (r0, r1) = block
        c0, c1 = chunk
        n, w, elem = self.n, self.w, self.elem
        (kh, kw), (sh, sw), (pt, pl), (_, pr), (dh, dw) = (
            self.plan.kernel, self.plan.strides, self.plan.begin, self.plan.end,
            self.plan.dilations)
        lo, rows, top, bottom = rows_in(r0, r1, sh, pt, dh, kh, self.h)
        icp, ocp, real = aligned(c1 - c0), aligned(o1 - o0), c1 - c0
        sch.scope = f"t{t}.x{slot}"
        xin = sch.cmx(f"in.{tag}", TensorType((n, icp, rows, w), elem, NHWC), t)
        src = sch.view(f"in.v{tag}", self.x.name, [f"0:{n}", f"{c0}:{c1}", f"{lo}:{lo + rows}",
                                                   f"0:{w}"])
        dst = xin if icp == real else sch.view(f"in.r{tag}", xin[1:], [f"0:{n}", f"0:{real}",
                                                                      f"0:{rows}", f"0:{w}"])
        sch.dma(f"load.{tag}", src, dst, 0, permute=self.x.type.order != NHWC)
        if icp > real:      # the channels a convolution reads across: zeros, not garbage
            zeros = f"{self.p}chzeros.{tag}"
            sch.prog.buffers.append(f"const %{zeros} : {n}x{icp - real}x{rows}x{w}x{elem} NHWC "
                                    "= splat 0")
            box = [f"0:{n}", f"0:{icp - real}", f"0:{rows}", f"0:{w}"]
            sch.dma(f"zero.{tag}", sch.view(f"zeros.v{tag}", zeros, box),
                    sch.view(f"in.z{tag}", xin[1:], [f"0:{n}", f"{real}:{icp}", f"0:{rows}",
                                                     f"0:{w}"]), 0)
        sch.scope = f"t{t}.w{slot}"
        sch.channel = self.prog.store_channel   # weights beside the inputs: latencies overlap
        wt = sch.cmx(f"w.{tag}", TensorType((ocp, icp, kh, kw), elem, NHWC), t)
        self._load_weights(sch, tag, self.plan.jobs[j], (o0, o1), (c0, c1), wt)
        sch.channel = None
        clause, reads = "", [xin, wt]
        if first and self.layer.bias is not None:
            clause, reads = self.first_bias(sch, tag, t, o0, ocp, reads)
        sch.scope = f"t{t}.p{slot}"
        part = sch.cmx(f"part.{tag}", TensorType((n, ocp, r1 - r0, self.ow), ElemType.F32,
                                                 NHWC), t)

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op="conv", elem=elem.value, width=self.ow, height=r, channels=ocp,
                               in_channels=icp, kernel=(kh, kw), stride=(sh, sw), batch=n,
                               in_bytes=elem.nbytes, out_bytes=4, weight_bytes=elem.nbytes)

        head = (f"dpu conv on tile {t} in({xin}) weights({wt}){clause} out({part}) "
                f"kernel({kh}, {kw}) stride({sh}, {sw}) pad({top}, {bottom}, {pl}, {pr}) "
                f"dilation({dh}, {dw})")
        self.dpu(sch, tag, t, head, reads, part, ((0, self.ow - 1), r1 - r0, (0, ocp - 1)),
                 workload_of)
        return part

    def _load_weights(self, sch: TaskSchedule, tag: str, job, outs: tuple[int, int],
                      ins: tuple[int, int], wt: str) -> None:
        """Weights [o0:o1, c0:c1] into ``wt``, zero-padded: a slice of the DDR weights, or a
        constant of the job's (rearranged) values."""
        (o0, o1), (c0, c1) = outs, ins
        ocp, icp, kh, kw = sch.types[wt].dims
        if job.weights is None:
            wv = self.values[self.layer.op.operands[1]]
            if (ocp, icp) != (o1 - o0, c1 - c0):
                load_padded_weights(sch, wv, outs, ins, wt, tag, "", [])
                return
            src = sch.view(f"w.v{tag}", wv.name, [f"{o0}:{o1}", f"{c0}:{c1}", f"0:{kh}",
                                                  f"0:{kw}"])
            sch.dma(f"load_w.{tag}", src, wt, 0, permute=wv.type.order != NHWC)
            return
        a, b = o0 - job.outs[0], c0 - job.ins[0]
        values = padded(job.weights[a:a + o1 - o0, b:b + c1 - c0], {0: ocp, 1: icp})
        name = f"{self.p}w.{tag}.c"
        sch.prog.buffers.append(f"const %{name} : {ocp}x{icp}x{kh}x{kw}x{self.elem} NHWC = "
                                f"{const_text(values, name)}")
        sch.dma(f"load_w.{tag}", f"%{name}", wt, 0)

    def store(self, sch: TaskSchedule, tag: str, t: int, block, y: str) -> None:
        """The real channels of the f16 result into the output."""
        _, (o0, o1), (r0, r1) = block
        box = [f"0:{self.n}", f"0:{o1 - o0}", f"0:{r1 - r0}", f"0:{self.ow}"]
        if aligned(o1 - o0) != o1 - o0:
            y = sch.view(f"out.r{tag}", y[1:], box)
        dst = sch.view(f"out.v{tag}", self.out.name, [f"0:{self.n}", f"{o0}:{o1}", f"{r0}:{r1}",
                                                      f"0:{self.ow}"])
        sch.dma(f"store.{tag}", y, dst, self.prog.store_channel,
                permute=self.out.type.order != NHWC)


def emit_conv_ksplit(prog: ProgramText, layer: DpuLayer, plan, x: Value, values: dict[str, Value],
                     tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> Split:
    """Lower ``layer`` (a convolution's ``plan`` over input ``x``) with its input channels
    split; the split chosen."""
    return ConvKSplit(prog, layer, plan, x, values, tiles, prefix).emit(gate, finish)

