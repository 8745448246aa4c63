"""A ``QConvolution`` (``vpuc/ir/graph_ops_quant.py``) as DPU tasks in the integer mode
(docs/vir.md, "The DPU's integer mode"): ``dpu conv ... quant scale(%s) zero_point(zx, zy)``.

The layer's output rows are cut into blocks as ``lower_dpu_window`` cuts a float
convolution's (each block loads its input rows with the halo, padding only at the image
border; the count the cost model's pipeline estimate finds fastest among those that fit),
every operand 1 byte: u8/i8 input and output, i8 weights (``DpuWorkload`` with 1-byte
sizes, so the cost model charges the int8 rate).  Per tile, before its first block, three
constants are loaded: the weights (NHWC), the i32 bias with the input zero point folded
in (``bias - zx * sum(w)``, as the NPU compiler folds it: the DPU's sums run over the raw
input, padded cells holding ``zx``), and the scale table, each channel's requantization
scale as the PPE's fixed-point ``(mult, shift)`` (i32 ``[C, 2]``).  An i32 bias cannot
be packed after i8 weights (``lower_dpu_table`` packs a float bias exactly representable
in the weights' type), so it is a load of its own.

A weight-heavy layer (more weight bytes than input bytes: the small maps of a network's
last stages) or one whose weights do not fit a tile beside one block is cut over its
output channels instead: chunks of 16-multiples, one per tile (or smaller, so a chunk's
weights take at most a quarter of the budget), each chunk's rows in the fewest blocks
that fit, every block loading its chunk's weights, bias and table rows: each weight
crosses from DDR once, where both tiles loading all of them would move them twice.  The importer takes only layers
whose 16 output channels' weights fit (``quant_layers.KSPLIT_BYTES``): an input-channel
split would need i32 partial sums, which the integer mode does not write.
"""

from __future__ import annotations

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import Move, block_stages
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks, layer_timing,
                                   resident_cycles, split_rows_cost)
from vpuc.fusion.lower_dpu_channels import load_block_input
from vpuc.fusion.lower_dpu_support import kernel_problem, padding_problem
from vpuc.fusion.fuse_epilogue import with_epilogue
from vpuc.ir.graph import GraphIndex, GraphOp
from vpuc.ir.types import DimsOrder, ElemType, TensorType
from vpuc.reference.graph import constant_value
from vpuc.reference.graph_quant import fixed_point_table
from vpuc import const_files

GRANULE = 16            # the DPU's channel multiple (lower_dpu_nn_plan.CHANNEL_GRANULE)
CHUNK_SHARE = 4         # a chunk's weights take at most this fraction of the budget


def qconv_problem(op: GraphOp, index: GraphIndex) -> str | None:
    """Why the ``QConvolution`` ``op`` cannot run as DPU tasks; None if it can."""
    x = index.producer(op.operands[0]).type
    w = index.producer(op.operands[1]).type
    if x.dims[1] % GRANULE or w.dims[0] % GRANULE:
        return (f"its {x.dims[1]} input and {w.dims[0]} output channels are not multiples of "
                f"{GRANULE} (the importer takes only such layers)")
    kernel = tuple(w.dims[2:])
    return kernel_problem(kernel) or padding_problem(
        kernel, tuple(op.attrs["pads_begin"]), tuple(op.attrs["pads_end"]),
        tuple(op.attrs["dilations"]))


def _const(prog: ProgramText, name: str, array: np.ndarray, elem: str, order: str = "") -> None:
    dims = "x".join(str(d) for d in array.shape)
    prog.buffers.append(f"const %{name} : {dims}x{elem}{order} = "
                        f'file "{const_files.hold(np.ascontiguousarray(array), name)}"')


def emit_qconv(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
               tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    op = layer.op
    x, out = values[op.operands[0]], values[layer.output]
    n, c, h, w = x.type.dims
    _, oc, oh, ow = out.type.dims
    weights = constant_value(index.producer(op.operands[1])).astype(np.int8)
    bias = constant_value(index.producer(op.operands[2])).astype(np.int64)
    table = fixed_point_table(constant_value(index.producer(op.operands[3])))
    _, _, kh, kw = weights.shape
    (sh, sw), (pt, pl) = op.attrs["strides"], op.attrs["pads_begin"]
    (_, pr), (dh, dw) = op.attrs["pads_end"], op.attrs["dilations"]
    zx, zy = op.attrs["in_zero_point"], op.attrs["out_zero_point"]
    folded = bias - zx * weights.reshape(oc, -1).astype(np.int64).sum(1)
    if np.abs(folded).max(initial=0) >= 2 ** 31:
        raise VpucError(f"{op.label}: its bias with the input zero point folded in exceeds the "
                        "DPU's i32 bias", op.loc)
    timing = layer_timing(prog, op)
    taps = c * kh * kw                   # weight bytes per output channel
    nchw_in, nchw_out = x.type.order != NHWC, out.type.order != NHWC

    def rows_in(r0: int, r1: int) -> tuple[int, int, int, int]:
        """(first input row, rows loaded, pad top, pad bottom) for output rows [r0, r1)."""
        first, last = r0 * sh - pt, (r1 - 1) * sh - pt + dh * (kh - 1)
        lo, hi = max(first, 0), min(last, h - 1)
        return lo, hi - lo + 1, lo - first, last - hi

    def loaded_rows(rows: int) -> int:
        return min((rows - 1) * sh + dh * (kh - 1) + 1, h)

    def workload(rows: int, channels: int) -> DpuWorkload:
        return DpuWorkload(op="conv", elem=x.type.elem.value, width=ow, height=rows,
                           channels=channels, in_channels=c, kernel=(kh, kw), stride=(sh, sw),
                           batch=n, in_bytes=1, out_bytes=1, weight_bytes=1)

    def constants(channels: int) -> int:       # weights, i32 bias, i32 (mult, shift) rows
        return channels * (taps + 4 + 8)

    def footprint(rows: int, channels: int, own_weights: bool) -> int:
        io = n * c * loaded_rows(rows) * w + n * channels * rows * ow
        return io + (constants(channels) if own_weights else 0)

    def stages(rows: int, channels: int, own_weights: bool):
        loads = [Move(n * c * loaded_rows(rows) * w, 1, nchw_in)]
        if own_weights:
            loads += [Move(channels * taps, 1), Move(4 * channels, 4), Move(8 * channels, 4)]
        compute = split_rows_cost(rows, lambda r: workload(r, channels), timing)[1]
        return block_stages(loads, compute, [Move(n * channels * rows * ow, 1, nchw_out)],
                            timing)

    resident = [Move(oc * taps, 1), Move(4 * oc, 4), Move(8 * oc, 4)]
    blocks = None
    if oc * taps <= n * c * h * w:         # not weight-heavy: every tile holds all weights
        try:
            blocks = choose_blocks(oh, tiles, constants(oc), lambda r: footprint(r, oc, False),
                                   "output row", op, prog.cmx_budget,
                                   cost=with_epilogue(prog, lambda r: stages(r, oc, False)),
                                   resident_cost=resident_cycles(prog, resident, gate),
                                   channels=prog.dma_channels)
            chunks, own_weights = [(0, oc)], False
        except VpucError:       # no row blocks fit beside all the weights: chunks below
            blocks = None
    if blocks is None:
        # weight-heavy (small maps) or too large: chunks of output channels over the
        # tiles, each loading its weights once, its rows in as few blocks as fit
        fits = max(GRANULE, prog.cmx_budget // CHUNK_SHARE // (GRANULE * taps) * GRANULE)
        size = min(fits, -(-oc // (tiles * GRANULE)) * GRANULE)
        chunks, own_weights = [(o, min(o + size, oc)) for o in range(0, oc, size)], True
        blocks = choose_blocks(oh, 1, 0, lambda r: footprint(r, size, True),
                               "output row", op, prog.cmx_budget, channels=prog.dma_channels)
    items = [(o, r) for o in chunks for r in blocks]
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(items))
    _const(prog, f"{prefix}qw", weights, "i8", " NHWC")
    _const(prog, f"{prefix}qbias", folded.astype(np.int32), "i32")
    _const(prog, f"{prefix}qscale", table, "i32")
    operands = {}
    for k, ((o0, o1), (r0, r1)) in enumerate(items):
        t = e.tile(k)
        e.barriers(k)
        if own_weights or k < e.used:      # the chunk's constants: per block, or once per tile
            tag, waits = (f"c{k}", e.load_waits(k)) if own_weights else (f"t{t}", e.load_waits(t))
            loaded = [f"%{prefix}loaded{k if own_weights else t}"]
            operands[t] = _load_constants(e, prefix, (o0, o1), (c, kh, kw), tag, t, waits,
                                          loaded, whole=(o0, o1) == (0, oc))
        lo, rows, top, bottom = rows_in(r0, r1)
        xin = load_block_input(e, k, lo, x, rows, c, e.load_waits(k), [f"%{prefix}loaded{k}"])
        dst = e.view(f"out.v{k}", out.name, [f"0:{n}", f"{o0}:{o1}", f"{r0}:{r1}", f"0:{ow}"])
        y = e.cmx(f"out.c{k}", TensorType((n, o1 - o0, r1 - r0, ow), out.type.elem, NHWC), t)
        head = (f"dpu conv on tile {t} in({xin}){operands[t][0]} out({y}) kernel({kh}, {kw}) "
                f"stride({sh}, {sw}) pad({top}, {bottom}, {pl}, {pr}) dilation({dh}, {dw}) "
                f"quant scale({operands[t][1]}) zero_point({zx}, {zy})"
                + (" post relu" if op.attrs["relu"] else ""))
        e.task(k, head, ((0, ow - 1), r1 - r0, (0, o1 - o0 - 1)),
               lambda r, ch=o1 - o0: workload(r, ch))
        e.store(k, y, dst, permute=nchw_out)


def _load_constants(e: LayerEmitter, prefix: str, outs: tuple[int, int], dims, tag: str,
                    t: int, waits: str, loaded: list[str], whole: bool) -> tuple[str, str]:
    """Output channels ``outs`` of the weights, bias and scale table into tile ``t``'s CMX:
    (the task's weights and bias clauses, the scale table's buffer)."""
    (o0, o1), (c, kh, kw), size = outs, dims, outs[1] - outs[0]
    sources = {"qw": ([f"{o0}:{o1}", f"0:{c}", f"0:{kh}", f"0:{kw}"],
                      TensorType((size, c, kh, kw), ElemType.I8, NHWC)),
               "qbias": ([f"{o0}:{o1}"], TensorType((size,), ElemType.I32,
                                                    DimsOrder.identity(1))),
               "qscale": ([f"{o0}:{o1}", "0:2"], TensorType((size, 2), ElemType.I32,
                                                            DimsOrder.identity(2)))}
    buffers = {}
    for name, (slices, ttype) in sources.items():
        src = f"%{prefix}{name}" if whole else e.view(f"{name}.v{tag}", f"{prefix}{name}", slices)
        buffers[name] = e.cmx(f"{name}.{tag}", ttype, t)
        e.dma(f"load_{name}.{tag}", src, buffers[name], 0, waits, loaded)
    return f" weights({buffers['qw']}) bias({buffers['qbias']})", buffers["qscale"]
