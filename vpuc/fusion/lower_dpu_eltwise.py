"""An eltwise Add or Multiply of two activations as DPU tasks (``lower_dpu_nn`` sends it here).

``targets/shave.py`` marks an Add or Multiply of two same-shape rank-4 activations
(``lower_dpu_support.dpu_eltwise``) for the DPU: blocks of rows, both operands loaded
NHWC, one DPU ``add``/``mul`` per block with the folded activation.

Channels not a multiple of 16 are padded in CMX (``lower_dpu_channels.aligned``) and the
DPU computes the pad channels too: they are zeroed after each load, copied CMX -> CMX from
a zero vector each tile loads once (``lower_dpu_channels.zero_vector``), so the DPU never
adds or multiplies whatever an earlier buffer left there (NaN or Inf bytes).  Their
results are never stored.  The cost model's choice: a CMX -> CMX copy costs the CMX
latency (``vpuc.cost.dma``) where a zero splat from DDR per block would pay the DDR read
latency and DDR traffic.
"""

from __future__ import annotations

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks, layer_timing,
                                   split_rows_cost)
from vpuc.fusion.lower_dpu_channels import aligned, zero_vector, zeros_view
from vpuc.ir.types import TensorType

ELTWISE = {"Add": "add", "Multiply": "mul"}      # marked by targets/shave.py (dpu_eltwise)


def emit_eltwise(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                 prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    """An Add or Multiply of two activations of one NCHW shape: blocks of rows, both
    operands loaded NHWC, one DPU ``add``/``mul`` per block with the folded activation."""
    op = layer.op
    a, b, out = values[op.operands[0]], values[op.operands[1]], values[layer.output]
    n, c, h, w = out.type.dims
    elem = out.type.elem
    cp = aligned(c)        # the pad channels: zeroed in CMX, computed, never stored
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

    def footprint(rows: int) -> int:     # both inputs, the output, the tile's zero vector
        return (3 * cp + (cp - c)) * n * rows * w * elem.nbytes

    blocks = choose_blocks(h, tiles, 0, footprint,
                           "row", op, prog.cmx_budget, cost=stages,
                           channels=prog.dma_channels)
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(blocks))
    zero_count = max(n * (cp - c) * (r1 - r0) * w for r0, r1 in blocks)
    zv: dict[int, str] = {}                 # tile -> its zero vector
    for k, (r0, r1) in enumerate(blocks):
        t = e.tile(k)
        e.barriers(k)
        if cp > c and t not in zv:
            zv[t] = zero_vector(e, t, zero_count, elem, e.load_waits(t), [f"%{prefix}loaded{t}"])
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
        if cp > c:          # both inputs' pad channels, after their loads on channel 0
            zeros = zeros_view(e, k, zv[t], n * (cp - c) * (r1 - r0) * w)
            pad = [f"0:{n}", f"{c}:{cp}", f"0:{r1 - r0}", f"0:{w}"]
            for i, cmx in enumerate(ins):
                e.dma(f"zero{i}.{k}", zeros, e.view(f"in{i}.z{k}", cmx[1:], pad), 0,
                      e.load_waits(k), [f"%{prefix}loaded{k}"])
        y = e.cmx(f"out.c{k}", block, t)
        e.task(k, f"dpu {ELTWISE[op.kind]} on tile {t} in({', '.join(ins)}) out({y}){layer.post}",
               ((0, w - 1), r1 - r0, (0, cp - 1)), workload_of)
        stored = y if cp == c else e.view(f"out.r{k}", y[1:], real)
        e.store(k, stored, e.view(f"out.v{k}", out.name, rows), permute=out.type.order != NHWC)
