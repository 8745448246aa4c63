"""A Convolution or MaxPool as DPU tasks over blocks of output rows (``lower_dpu.emit_layer``
sends here every one ``lower_dpu_nn`` does not take): each block loads its input rows with
the halo the window needs, padding only at the image border, one DPU task per block, the
weights (with the bias: ``lower_dpu_table``) once per tile.
The guarantees are ``lower_dpu``'s module docstring's.
"""

from __future__ import annotations

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages
from vpuc.diagnostics import VpucError
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import (NHWC, DpuLayer, LayerEmitter, choose_blocks, layer_timing,
                                   resident_cycles, split_rows_cost)
from vpuc.fusion.lower_dpu_channels import (aligned, load_block_input, load_window_weights,
                                            padded_vector, reads_weights, zero_vector,
                                            zeros_view)
from vpuc.fusion.fuse_epilogue import with_epilogue
from vpuc.fusion.fuse_pool import block_footprint, writes_pool_rows
from vpuc.fusion.lower_dpu_fold_width import emit_folded
from vpuc.fusion.lower_dpu_permute import (cmx_channels, load_permuted_input, permute_cycles,
                                           permutes_input)
from vpuc.fusion.lower_dpu_support import window
from vpuc.fusion.lower_dpu_table import Table, box_rows, packs_bias
from vpuc.fusion.resident import (cast_blocks, ensure_pads, held_channels, in_place_blocks,
                                  in_place_input)
from vpuc.ir.graph import CONSTANT, GraphIndex
from vpuc.ir.types import ElemType, TensorType


def emit_window(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], index: GraphIndex,
                tiles: int, prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    """A Convolution or MaxPool: blocks of output rows, each with its input rows and halo."""
    if emit_folded(prog, layer, values, index, tiles, prefix, gate, finish):
        return              # few channels on an NCHW input, width folded in: lower_dpu_fold_width
    op = layer.op
    x, out = values[op.operands[0]], values[layer.output]
    n, c, h, w = x.type.dims
    _, oc, oh, ow = out.type.dims
    (kh, kw), (sh, sw), (pt, pl), (pb, pr), (dh, dw) = window(op, index)
    elem: ElemType = x.type.elem
    conv = op.kind == "Convolution"
    cp, ocp = aligned(c), aligned(oc)       # the DPU's channel multiples (lower_dpu_channels)
    # A 1x1 strided convolution without padding reads every sh-th row and sw-th column only:
    # its blocks load just those (a strided DMA) and run as a stride-1 convolution, instead
    # of loading every row and column between (ResNet's downsample convolutions: 4x fewer
    # input bytes, which their loads were bound by).
    step = (1, 1)
    if conv and (kh, kw) == (1, 1) and (sh, sw) != (1, 1) and (pt, pl, pb, pr) == (0, 0, 0, 0) \
            and (dh, dw) == (1, 1) and x.type.order == NHWC and cp == c \
            and ((h - 1) // sh + 1, (w - 1) // sw + 1) == (oh, ow):
        step, (h, w, sh, sw) = (sh, sw), (oh, ow, 1, 1)
    # An NCHW input (the model's) is laid out NHWC by the DPU, block by block; a convolution
    # of at most 4 input channels then reads 4 (compressed): lower_dpu_permute
    permuted = permutes_input(x.type.order, step)
    cp = cmx_channels(c, conv and index.producer(op.operands[1]).kind == CONSTANT, permuted)

    def rows_in(r0: int, r1: int) -> tuple[int, int, int, int]:
        """(first input row, rows loaded, pad top, pad bottom) for output rows [r0, r1)."""
        first, last = r0 * sh - pt, (r1 - 1) * sh - pt + dh * (kh - 1)
        lo, hi = max(first, 0), min(last, h - 1)
        return lo, hi - lo + 1, lo - first, last - hi

    def footprint(rows: int) -> int:
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        raw = n * c * loaded * w if permuted else 0       # the NCHW rows the permute reads
        # the zeros such a block copies (counted per live block: an upper bound)
        zeros = n * (cp - c) * loaded * w if pads() else 0   # the tile's zero vector
        output = n * ocp * rows * ow * elem.nbytes
        own = (raw + n * cp * loaded * w + zeros) * elem.nbytes + output
        return block_footprint(prog.epilogue, own, output, rows, pool_rows)

    def workload_of(rows: int) -> DpuWorkload:
        return DpuWorkload(op=dpu_op, elem=elem.value, width=ow, height=rows, channels=ocp,
                           in_channels=cp, kernel=(kh, kw), stride=(sh, sw), batch=n,
                           in_bytes=elem.nbytes, out_bytes=elem.nbytes, weight_bytes=elem.nbytes)

    def stages(rows: int) -> BlockStages:
        loaded = min((rows - 1) * sh + dh * (kh - 1) + 1, h)
        loads = [Move(n * c * loaded * w * elem.nbytes, elem.nbytes,
                      x.type.order != NHWC and not permuted)]
        compute = split_rows_cost(rows, workload_of, timing)[1]
        if permuted:
            compute += permute_cycles(n * loaded * w, cp, elem, timing)
        store = Move(n * oc * rows * ow * elem.nbytes, elem.nbytes, out.type.order != NHWC)
        return block_stages(loads, compute, [store], timing)

    dpu_op, timing = ("conv" if conv else "maxpool"), layer_timing(prog, op)
    # a fused pool's blocks: written after their halo rows in its input buffers, not copied
    pool_rows = writes_pool_rows(prog.epilogue) and ocp == oc
    bias = None if layer.bias is None else padded_vector(layer.bias, ocp)
    constant = not conv or index.producer(op.operands[1]).kind == CONSTANT
    # the lowering's own constant weights: a table (lower_dpu_table) holds the bias when
    # exact in their type
    own = conv and constant and not reads_weights(op, index, bias)
    packed = own and packs_bias(bias, index.producer(op.operands[1]).type.elem)

    def pads() -> bool:     # padded input channels a convolution reads across: zeroed
        # (a padded resident input's blocks load its finite pads instead: resident.py)
        return conv and cp > c and not permuted and x.padded is None

    def blocks_of() -> list[tuple[int, int]]:
        """The output row blocks for the input's ``cp`` channels in CMX."""
        resident, resident_loads = 0, []
        weights = ocp * cp * kh * kw * elem.nbytes
        if packed:                  # one load of the weights with the bias rows after them
            weights += box_rows(ocp, cp, kh, kw)[0] * cp * kh * kw * elem.nbytes
        if conv:
            resident = weights + (4 * ocp if bias is not None and not packed else 0)
            wv = values.get(op.operands[1])
            resident_loads.append(Move(weights, elem.nbytes,
                                       wv is not None and wv.type.order != NHWC))
        if bias is not None and not packed:
            resident_loads.append(Move(4 * ocp, 4))
        return choose_blocks(oh, tiles, resident, footprint, "output row", op,
                             prog.cmx_budget, cost=with_epilogue(prog, stages),
                             resident_cost=resident_cycles(prog, resident_loads, gate, constant),
                             channels=prog.dma_channels)

    try:
        blocks = blocks_of()
    except VpucError:
        if not permuted:
            raise
        # the permute's NCHW staging rows do not fit the budget: a permuting DMA lays
        # the input out instead, at 16 channels (footprint and stages read these)
        permuted = False
        cp = cmx_channels(c, conv and constant, permuted)
        blocks = blocks_of()
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(blocks))
    views_from = len(prog.views)
    e.in_place = in_place_blocks(e, out, ocp, [e.tile(k) for k in range(len(blocks))])
    e.cast = cast_blocks(e, out, ocp, [e.tile(k) for k in range(len(blocks))])
    zero_count = {k: n * (cp - c) * rows_in(r0, r1)[1] * w for k, (r0, r1) in enumerate(blocks)}
    table = None
    if packed:
        table = Table((ocp, cp, kh, kw), packed)
    zv = {}                                 # tile -> its zero vector (zero_vector)
    operands_of = {}
    for k, (r0, r1) in enumerate(blocks):
        t = e.tile(k)
        lo, rows, top, bottom = rows_in(r0, r1)
        e.barriers(k)
        if k < e.used:              # weights and bias: once per tile, before its first block
            scale = prog.weights_scale if conv else None    # a product folded in
            ready = scale.ready(e, t, f"t{t}") if scale is not None else []
            operands_of[t] = load_window_weights(
                e, op, index, values, t, e.load_waits(t), [f"%{prefix}loaded{t}"] + ready[:1],
                declare=t == 0, in_channels=cp, bias=bias, table=table) if conv else ""
            if scale is not None:
                operands_of[t] = scale.apply(e, t, operands_of[t], f"t{t}", ready)
            if not packed:
                operands_of[t] += e.load_bias(t, bias)
        if permuted:
            xin = load_permuted_input(e, k, lo, x, rows, cp, e.load_waits(k),
                                      [f"%{prefix}loaded{k}"])
        elif (xin := in_place_input(e, k, x, cp, lo, rows,
                                    whole=step == (1, 1))) is not None:
            pass                    # read where the value lives: no load
        else:
            zeros = None
            if pads():
                if t not in zv:
                    zv[t] = zero_vector(e, t, max(zero_count.values()), elem, e.load_waits(t),
                                        [f"%{prefix}loaded{t}"])
                zeros = zeros_view(e, k, zv[t], zero_count[k])
            xin = load_block_input(e, k, lo * step[0], x, rows, held_channels(x),
                                   e.load_waits(k), [f"%{prefix}loaded{k}"], step=step,
                                   zeros=zeros)
        # a padded output (resident.py) gets its blocks' pad channels too
        dst = e.view(f"out.v{k}", out.name, [f"0:{n}", f"0:{held_channels(out)}", f"{r0}:{r1}",
                                             f"0:{ow}"])
        if k in e.in_place:
            y = dst
        elif pool_rows:
            y = prog.epilogue.input_buffer(e, k, (r0, r1), t, elem)
        else:
            y = e.cmx(f"out.c{k}", TensorType((n, ocp, r1 - r0, ow), elem, NHWC), t)
        outs = f"{y}, {dst}" if k in e.cast else y      # a copy on the value's tile
        head = (f"dpu {dpu_op} on tile {t} in({xin}){operands_of[t]} out({outs}) "
                f"kernel({kh}, {kw}) stride({sh}, {sw}) pad({top}, {bottom}, {pl}, {pr})"
                + (f" dilation({dh}, {dw})" if conv else "") + layer.post)
        e.task(k, head, ((0, ow - 1), r1 - r0, (0, ocp - 1)), workload_of)
        if k in e.no_store:                  # written where the value lives: no store
            continue
        if ocp > held_channels(out):                 # only the real channels are stored
            y = e.view(f"out.r{k}", y[1:], [f"0:{n}", f"0:{oc}", f"0:{r1 - r0}", f"0:{ow}"])
        e.store(k, y, dst, permute=out.type.order != NHWC)
    ensure_pads(prog, views_from, out, prefix, gate, finish)
