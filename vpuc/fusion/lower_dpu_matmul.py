"""A graph MatMul as DPU ``matmul`` tasks (see ``lower_dpu`` for the common contract).

The task-level matmul takes an input [M, K] and weights [N, K] in CMX and
writes [M, N] (``docs/vir.md``, DPU tasks), so a graph MatMul (ranks >= 2,
batch dims broadcasting, ``transpose_a``/``transpose_b``, either operand a
constant or an activation) becomes one 2-D matmul per output batch item,
each cut into blocks of M rows over the tiles (double-buffered when they do
not fit the CMX budget at once).

Operands come from DDR by plain DMA copies, never a compute pass: each CMX
matrix takes the *memory* order (``NC`` or ``CN``) in which its two logical
dims appear in the DDR tensor, so a byte copy of the DDR view *is* the matrix,
transposed or not.  A transposed rank-2 square block (same shape, other
order, which a copy may not do) goes through a flat CMX staging buffer.
Weights without batch dims are loaded once per tile; batched weights with
each block.  The bias (from the folded post-op chain) runs along N.

When the weights (with the bias) and one input row do not fit a tile's CMX,
the output columns N are cut into chunks (multiples of 16, the DPU's channel
granule, as ``lower_dpu_nn`` cuts a convolution's output channels): each
chunk is a series of row blocks that load their slice of the weights and of
the bias with the block, double-buffered, and store their columns of the
result.  When not even 16 columns fit with one row, K is cut into chunks too
(f32 partial sums: ``lower_dpu_ksplit_matmul``).  Under ``--schedule default`` a
classifier's constant weights (``streams``) are cut into chunks of one deep load even
when they fit whole: the schedule streams them, both tiles computing as they arrive.
Also under ``--schedule default``, whole constant weights stay in the CMX buffer of the
first MatMul that loads them on a tile, and later MatMuls of the same constant read that
buffer with no load (``ProgramText.held_weights``; ``schedule_deps`` orders their DPU tasks
after the load, allocate-cmx keeps the buffer to its last reader): an unrolled RNN's
recurrent weights, the same for every step (a CRNN's 26-step bidirectional LSTM: 102 CMX
-> CMX copies of 32 KB on DMA1, 586,094 -> 522,787 cycles).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from vpuc import const_files

from vpuc.cost import DpuWorkload
from vpuc.fusion.blocked_program import ProgramText, Value, type_text
from vpuc.fusion import lower_dpu
from vpuc.fusion.fold_views import matrix_axes, view_slices
from vpuc.fusion.lower_dpu_channels import aligned, padded_vector, zero_pad_matrix
from vpuc.cost.blocks import BlockStages, Move, block_stages, loads_cycles
from vpuc.fusion.lower_dpu import DpuLayer, LayerEmitter, const_text, vector
from vpuc.fusion.lower_dpu_ksplit_matmul import emit_matmul_ksplit
from vpuc.fusion.lower_dpu_split import MAX_PARTS_FACTOR, cheapest_split, row_edges
from vpuc.fusion.lower_dpu_table import MatrixTable, packs_bias
from vpuc.fusion.schedule_prefetch import DEEP_LOAD_BYTES
from vpuc.fusion.schedule_room import STREAMING_RATIO
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType

GRANULE = 16     # the DPU's output channel alignment, as lower_dpu_nn.CHANNEL_GRANULE
# --schedule default: the most bytes of constant weights a MatMul leaves in CMX for later
# MatMuls of the same constant (``ProgramText.held_weights``); they stay out of the room of
# every segment in between, so at most one deep load's (``schedule_prefetch``)
HELD_WEIGHT_BYTES = DEEP_LOAD_BYTES
NC, CN = DimsOrder(NAMED_ORDERS["NC"]), DimsOrder(NAMED_ORDERS["CN"])


def matrix_order(t: TensorType, row_axis: int, col_axis: int) -> DimsOrder:
    """NC when the rows' dim is outer to the columns' dim in memory (or there is one row,
    a folded view's that moves along no axis: ``fold_views``), else CN."""
    if row_axis is None:
        return NC
    perm = t.order.perm
    return NC if perm.index(row_axis) < perm.index(col_axis) else CN


def _batch_index(dims: tuple, out_batch: tuple, index: tuple) -> tuple[int, ...]:
    """The batch index of an operand with ``dims`` for output batch ``index`` (broadcasting)."""
    batch = dims[:-2]
    offset = len(out_batch) - len(batch)
    return tuple(0 if d == 1 else index[offset + j] for j, d in enumerate(batch))


def load_matrix(e: LayerEmitter, name: str, v: Value, batch: tuple[int, ...], row_axis: int,
                rows: tuple[int, int], col_axis: int, tile: int, waits: str,
                updates: list[str], pad: tuple[int, int] | None = None,
                cols: tuple[int, int] | None = None) -> str:
    """DMA rows [r0, r1) of the matrix (row_axis, col_axis) of ``v`` into a CMX [rows, cols],
    or into the corner of a zero-padded CMX ``pad`` = (rows, cols) (the DPU's channel
    multiples, ``lower_dpu_channels.zero_pad_matrix``); ``cols``: only columns [c0, c1)
    (a chunk of K, ``lower_dpu_ksplit``)."""
    r0, r1 = rows
    c0, c1 = cols or (0, v.type.dims[col_axis])
    cols = c1 - c0
    slices = [f"{r0}:{r1}" if j == row_axis else f"{c0}:{c1}" if j == col_axis else str(batch[j])
              for j, d in enumerate(v.type.dims)]
    src = e.view(f"{name}.v", *view_slices(v, slices))
    order = matrix_order(*matrix_axes(v, row_axis, col_axis))
    padded = pad is not None and pad != (r1 - r0, cols)
    dst = e.cmx(name, TensorType(pad if padded else (r1 - r0, cols), v.type.elem, order), tile)
    if v.type.rank == 2 and row_axis == 1 and r1 - r0 == cols:
        flat = e.cmx(f"{name}.flat", vector((r1 - r0) * cols, v.type.elem), tile)
        e.dma(f"{name}.stage", src, flat, 0, waits, [])
        src = flat
        if padded:        # the transposing copy needs whole buffers: one more staging step
            whole = e.cmx(f"{name}.whole", TensorType((r1 - r0, cols), v.type.elem, order), tile)
            e.dma(f"{name}.stage2", src, whole, 0, waits, [])
            src = whole
    real = dst if not padded else zero_pad_matrix(e, name, dst[1:], (r1 - r0, cols), pad,
                                                  v.type.elem, order, waits, updates)
    e.dma(name, src, real, 0, waits, updates)
    return dst


def emit_matmul(prog: ProgramText, layer: DpuLayer, values: dict[str, Value], tiles: int,
                prefix: str, gate: tuple[str, ...], finish: str | None) -> None:
    op = layer.op
    a, b, out = values[op.operands[0]], values[op.operands[1]], values[layer.output]
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    ra, rb, ro = a.type.rank, b.type.rank, out.type.rank
    a_rows, a_cols = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)        # M, K
    b_rows, b_cols = (rb - 2, rb - 1) if tb else (rb - 1, rb - 2)        # N, K
    m, n = out.type.dims[-2:]
    k_dim = a.type.dims[a_cols]
    kp = aligned(k_dim)                      # K and N padded to the DPU's channel multiple
    elem, eb = out.type.elem, out.type.elem.nbytes
    out_batch = out.type.dims[:-2]
    items = list(itertools.product(*(range(d) for d in out_batch)))
    batched_b = any(d != 1 for d in b.type.dims[:-2])
    bias_bytes = 4 if layer.bias is not None else 0
    # --schedule default: chunks of constant weights load from a table (lower_dpu_table)
    tabled = bool(prog.prefetch_bytes) and rb == 2 and b.kind == "const" and b.init is not None
    packed = tabled and packs_bias(layer.bias, b.type.elem)

    def weight_bytes(cols: int) -> int:
        return aligned(cols) * (kp * eb + bias_bytes)

    def chunk_bytes(cols: int) -> int:      # a column chunk's weights and bias
        cp = aligned(cols)
        return (cp + MatrixTable.bias_rows(cp, kp)) * kp * eb if packed else weight_bytes(cols)

    def rows_bytes(rows: int, cols: int) -> int:
        return (rows * kp + rows * aligned(cols)) * eb

    def footprint(rows: int) -> int:        # a block of the whole N
        return rows_bytes(rows, n) + (weight_bytes(n) if batched_b else 0)

    resident = 0 if batched_b else weight_bytes(n)
    live = 1 if len(items) * m <= tiles else 2      # blocks of one row on a tile at once
    chunks = [(0, n)]
    if resident + live * footprint(1) > prog.cmx_budget:
        chunks = _column_chunks(n, lambda cols: 2 * (chunk_bytes(cols) + rows_bytes(1, cols)),
                                prog.cmx_budget)
    if chunks is None:       # not even 16 columns with one row: K is cut too
        emit_matmul_ksplit(prog, layer, values, tiles, prefix, gate, finish)
        return
    # a classifier's weights that fit whole still stream (``streams``): cut, their chunks
    # spread over the tiles, each block computing beside the next chunk's load, not one
    # tile's DPU fetching them all after the whole load (ResNet-18: 1,914,273 -> 1,903,843)
    if tabled and (len(chunks) > 1 or streams(weight_bytes(n), len(items) * m * k_dim * eb)):
        # prefetched chunks: each one deep load at most (schedule_prefetch.DEEP_LOAD_BYTES)
        chunks = max(chunks, _column_chunks(n, lambda cols: aligned(cols) * kp * eb,
                                            DEEP_LOAD_BYTES) or chunks, key=len)
    split = len(chunks) > 1
    timing = lower_dpu.layer_timing(prog, op)
    a_moves = _load_moves(a.type.elem.nbytes, k_dim, kp, a.type.rank == 2 and ta)

    def workload_of(rows: int, cols: int) -> DpuWorkload:
        return DpuWorkload(op="matmul", elem=a.type.elem.value, width=rows, height=1,
                           channels=aligned(cols), in_channels=kp, in_bytes=a.type.elem.nbytes,
                           out_bytes=eb, weight_bytes=b.type.elem.nbytes)

    def stages(job: tuple, rows: int) -> BlockStages:     # the cost model's estimate of a block
        c0, c1 = job[1]
        loads = a_moves(rows)
        # the block's own weights (and bias slice); a table's chunks are prefetched
        # (schedule_prefetch): then the block loads its rows alone
        if batched_b or (split and not tabled):
            loads += _load_moves(b.type.elem.nbytes, k_dim, kp, b.type.rank == 2 and not tb)(
                c1 - c0, aligned(c1 - c0))
            if split and layer.bias is not None:
                loads.append(Move(4 * aligned(c1 - c0), 4))
        compute = lower_dpu.split_rows_cost(rows, lambda r: workload_of(r, c1 - c0), timing)[1]
        return block_stages(loads, compute, [Move(rows * (c1 - c0) * eb, eb)], timing)

    def fits(job: tuple, rows: int, blocks: int) -> bool:
        cols = job[1][1] - job[1][0]
        if split:      # every block loads its chunk of the weights: two live per tile
            return 2 * (chunk_bytes(cols) + rows_bytes(rows, cols)) <= prog.cmx_budget
        return resident + (1 if blocks <= tiles else 2) * footprint(rows) <= prog.cmx_budget

    chunkings = [[(item, c) for c in chunks for item in items]]
    for parts in range(len(chunks) + 1, len(chunks) * MAX_PARTS_FACTOR + 1) if split else ():
        size = math.ceil(math.ceil(n / parts) / GRANULE) * GRANULE
        more = list(zip(range(0, n, size), list(range(size, n, size)) + [n]))
        if more != [c for _, c in chunkings[-1][::len(items)]]:
            chunkings.append([(item, c) for c in more for item in items])
        if size <= GRANULE:
            break
    resident_cycles = 0.0
    if not split and not batched_b:
        resident_cycles = loads_cycles(_load_moves(b.type.elem.nbytes, k_dim, kp,
                                                   b.type.rank == 2 and not tb)(n, aligned(n))
                                       + ([Move(4 * aligned(n), 4)] if layer.bias is not None
                                          else []), timing)
    first = 1 if len(items) * len(chunks) >= tiles else min(tiles, m)
    jobs, count = cheapest_split(chunkings, m, first, tiles, fits, stages, prog.dma_channels,
                                 resident_cycles)
    split = len({c for _, c in jobs}) > 1
    work = [(item, rows, c) for item, c in jobs for rows in row_edges(m, count)]
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(work),
                     slots=_slots(prog, work, tiles, split, resident, footprint))
    bias_values = None if layer.bias is None else padded_vector(layer.bias, aligned(n))
    table = None
    if split and tabled:
        table = MatrixTable([(c0, c1, aligned(c1 - c0)) for c0, c1 in sorted({c for _, c in jobs})],
                            kp, packed)
        array = constant_array(b)
        prog.redeclared.add(b.name)
        prog.buffers.append(table.declaration(array if b_rows == 0 else array.T, bias_values,
                                              b.type.elem, f"{prefix}wb"))
    separate_bias = split and layer.bias is not None and not (table is not None and packed)
    if separate_bias:
        prog.buffers.append(f"const %{prefix}bias : {aligned(n)}xf32 = {const_text(bias_values, prefix + 'bias')}")
    # --schedule default: whole constant weights another MatMul of this block loaded stay
    # in its CMX buffer (an unrolled RNN's recurrent weights, one constant for every step)
    held_key = (b.name, tb) if not split and not batched_b and prog.prefetch_bytes \
        and b.kind == "const" and b.init is not None and prog.weights_scale is None \
        and weight_bytes(n) <= HELD_WEIGHT_BYTES else None
    all_held = held_key is not None and all((held_key, e.tile(k)) in prog.held_weights
                                            for k in range(e.used))
    if not split and not batched_b and prog.prefetch_bytes and rb == 2 and b_rows == 1 \
            and n == k_dim and b.kind == "const" and b.init is not None and not all_held:
        # --schedule default: square constant weights transposed at compile time, so each
        # tile's load is a plain copy the schedule prefetches, not a staged permute
        b, b_rows, b_cols = transposed_constant(prog, prefix, b), 0, 1
    bias_of = {}
    # streamed chunks against the same rows (a classifier's one row): each tile loads the
    # rows once, with its first block; its later blocks follow that one on the tile's DPU.
    # ResNet-18: 1,889,789 -> 1,883,645 cycles (a row load per block waited on the block
    # two back, between the chunks in the DMA FIFO)
    row_once = table is not None and len({(item, rows) for item, rows, _ in work}) == 1
    row_of: dict[int, str] = {}
    for k, (item, (r0, r1), (c0, c1)) in enumerate(work):
        t = e.tile(k)
        e.barriers(k)
        loaded = [f"%{prefix}loaded{k}"]
        held = prog.held_weights.get((held_key, t)) if held_key else None
        if k < e.used and not split:    # weights and bias: once per tile, before its first block
            if not batched_b and held is None:
                held = load_matrix(e, f"w.t{t}", b, (0,) * (rb - 2), b_rows, (0, n), b_cols,
                                   t, e.load_waits(t), [f"%{prefix}loaded{t}"],
                                   pad=(aligned(n), kp))
                if held_key:
                    prog.held_weights[(held_key, t)] = held
            bias_of[t] = e.load_bias(t, bias_values)
        if k < e.used or not row_once:
            x = load_matrix(e, f"a.t{t}" if row_once else f"a.c{k}", a,
                            _batch_index(a.type.dims, out_batch, item), a_rows, (r0, r1),
                            a_cols, t, e.load_waits(k), loaded, pad=(r1 - r0, kp))
            row_of[t] = x
        x = row_of[t]
        weights, bias = held or f"%{prefix}w.t{t}", bias_of.get(t, "")
        if table is not None:
            weights, bias = table.load(e, f"{prefix}wb", (c0, c1), b.type.elem, f"c{k}", t,
                                       e.load_waits(k), loaded)
        elif batched_b or split:
            weights = load_matrix(e, f"w.c{k}", b, _batch_index(b.type.dims, out_batch, item),
                                  b_rows, (c0, c1), b_cols, t, e.load_waits(k), loaded,
                                  pad=(aligned(c1 - c0), kp))
        cp = aligned(c1 - c0)
        if separate_bias:
            cmx = e.cmx(f"bias.c{k}", vector(cp, ElemType.F32), t)
            e.dma(f"load_bias.c{k}", e.view(f"bias.v{k}", f"{prefix}bias", [f"{c0}:{c0 + cp}"]),
                  cmx, 0, e.load_waits(k), loaded)
            bias = f" bias({cmx})"
        y = e.cmx(f"out.c{k}", TensorType((r1 - r0, cp), elem, _out_order(out, ro)), t)
        head = f"dpu matmul on tile {t} in({x}) weights({weights}){bias} out({y}){layer.post}"
        # The DPU runs a matmul as a 1x1 convolution with its rows along W (H = 1).
        e.task(k, head, ((0, 0), r1 - r0, (0, cp - 1)),
               lambda rows: DpuWorkload(op="matmul", elem=a.type.elem.value, width=rows,
                                        height=1, channels=cp, in_channels=kp,
                                        in_bytes=a.type.elem.nbytes, out_bytes=eb,
                                        weight_bytes=b.type.elem.nbytes))
        slices = [str(i) for i in item] + [f"{r0}:{r1}", f"{c0}:{c1}"]
        dst = e.view(f"out.v{k}", *view_slices(out, slices))
        if cp != c1 - c0:                            # only the real columns are stored
            y = e.view(f"out.r{k}", y[1:], [f"0:{r1 - r0}", f"0:{c1 - c0}"])
        e.store(k, y, dst)


def streams(weight_bytes: int, row_bytes: int) -> bool:
    """Whether a MatMul's constant weights are ``STREAMING_RATIO`` times its rows' bytes or
    more and more than one deep load (``schedule_prefetch``): a classifier's, read once
    against one row, which the schedule streams in chunks."""
    return weight_bytes > DEEP_LOAD_BYTES and weight_bytes >= STREAMING_RATIO * row_bytes


def _slots(prog: ProgramText, work: list, tiles: int, split: bool, resident: int,
           footprint) -> int:
    """CMX slots per tile: two (double buffering), or under ``--schedule default`` one per
    block when every block of a tile fits the CMX budget at once: no block then waits for
    an earlier one's store to free its slot, which a pipelined layer's stores, queued in
    the store channel behind the previous segment's (``schedule_deps``), would make late.
    The slots are also what bounds the blocks in flight, and with them the barriers they
    hold (``lower_dpu.in_flight_slots``): the FPN block's column MatMul of 32 blocks, a
    slot each, held 64 barriers at once."""
    used = min(tiles, len(work))
    per_tile = -(-len(work) // used)
    if not prog.prefetch_bytes or split or per_tile <= 2:
        return 2
    rows = max(r1 - r0 for _, (r0, r1), _ in work)
    if resident + per_tile * footprint(rows) > prog.cmx_budget:
        return 2
    return lower_dpu.in_flight_slots(prog, len(work), used)


def constant_array(b: Value) -> np.ndarray:
    """The values of constant ``b``, in its logical dims."""
    init = b.init
    if init.path is not None:
        return const_files.load(init.path)
    if init.splat is not None:
        return np.full(b.type.dims, init.splat)
    return np.asarray(init.values).reshape(b.type.dims)


def transposed_constant(prog: ProgramText, prefix: str, b: Value) -> Value:
    """A rank-2 constant [K, N] declared again as its transpose [N, K] (NC)."""
    array = constant_array(b)
    t = TensorType(b.type.dims[::-1], b.type.elem, NC)
    prog.redeclared.add(b.name)
    name = f"{prefix}wT"
    prog.buffers.append(f"const %{name} : {type_text(t)} = "
                        f"{const_text(np.ascontiguousarray(array.T), name)}")
    return Value(name, t, "const")


def _column_chunks(n: int, need, budget: int) -> list[tuple[int, int]] | None:
    """The fewest chunks of ``n`` columns (multiples of 16 but the last) whose ``need``
    fits the budget; None if 16 columns do not."""
    for parts in range(2, n + 1):
        size = math.ceil(math.ceil(n / parts) / GRANULE) * GRANULE
        if need(min(size, n)) <= budget:
            edges = list(range(0, n, size)) + [n]
            return list(zip(edges, edges[1:]))
        if size <= GRANULE:
            break
    return None


def _load_moves(eb: int, k: int, kp: int, staged: bool):
    """The DMAs (``load_matrix``) bringing ``rows`` rows of K into a CMX [pad rows, kp]:
    the copy (through a flat staging buffer when ``staged``, a possibly transposing square
    copy), and zeros beside the real corner."""
    def moves(rows: int, pad_rows: int | None = None) -> list[Move]:
        pad_rows = rows if pad_rows is None else pad_rows
        out = [Move(rows * k * eb, eb)] * (2 if staged and rows == k else 1)
        zeros = rows * (kp - k) + (pad_rows - rows) * kp
        return out + ([Move(zeros * eb, eb)] if zeros else [])
    return moves


def _out_order(out: Value, rank: int) -> DimsOrder:
    return matrix_order(*matrix_axes(out, rank - 2, rank - 1))
