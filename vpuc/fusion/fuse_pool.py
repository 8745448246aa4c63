"""A DPU layer's MaxPool successor run on its output blocks in CMX (``--schedule default``).

ResNet's stem (a 7x7 stride-2 convolution with ReLU) is followed by a 3x3 stride-2
MaxPool that alone reads it.  As two segments, the convolution stores its whole output
to DDR (ResNet-18 at 224: 112x112x64 f16, 1,605,632 bytes) and the pool loads it back
(1,662,976 bytes with its halos), a DMA-bound segment that ran 81,844 -> 210,087 cycles
with the DPU 0.7% busy, holding stage 1 until its end.  Fused (``fuse_epilogue``'s
per-block epilogue, ``PoolEpilogue``), each output block of the convolution is pooled
where it was computed and only the pooled rows (a quarter of the bytes) are stored.

Rows.  Pool output row ``i`` reads input rows ``i sy - pt .. i sy - pt + kh - 1`` (within
``[0, H)``); it is computed with the convolution block holding the last of them, so a
block of rows ``[r0, r1)`` pools the output rows whose last input row lies there (the
last block: every row left), reading ``halo`` rows before ``r0`` that the previous block
computed.  Per block ``k`` on its tile: a CMX -> CMX copy of the block (``pool.cp``;
its bytes are the NHWC rows whatever the block's type: ``lower_dpu_fold_width``'s
folded output is byte for byte its output rows) into rows ``halo..`` of the pool's input
buffer, a copy of the previous block's last ``halo`` rows into rows ``0..halo`` of it
(``pool.halo``, updating the previous block's ``acted`` barrier, so its output slot,
which its store frees, outlives the copy; both copies on the store channel, listed
before the store of the tile's previous block, ``_before_store``), one DPU ``maxpool``
task (with the pool's post-op; listed after the tile's next convolution, which runs
while the block is copied), and the block's store of the pooled rows into the pool's
output (``store_target``).  A max is a selection of the f16 values the graph computes,
so the result is exact.

ResNet-18 at 224 (``--schedule default``, timing-only): the stem and pool end at
193,608 cycles instead of 210,087, stage 1 (DPU-bound after it) ends 271,697 ->
253,342, the network 1,728,259 -> 1,708,404 cycles.

A window convolution's blocks (``lower_dpu_window``, not the folded stem's) write their
rows straight into the pool's input buffer after the halo (``input_buffer``, as
``fuse_halo_conv``'s chain does; ``rows_in_place``): no ``pool.cp``.  SqueezeNet's stem
(7x7/2 on the permuted input, 14 blocks): 66,309 cycles of copies off the store channel,
the stem 119,391 -> 102,387 cycles, the network 498,835 -> 481,831.

``pool_fusable`` picks the pairs; anything the blocks do not allow (a block cut over
channels or columns, an output not NHWC, a block pooling no row, a halo beyond the
previous block, blocks out of order) sets ``refused`` and ``fuse_epilogue.emit_fused``
emits the two segments as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.cost import DpuWorkload
from vpuc.fusion.lower_dpu_channels import aligned, variant_boxes
from vpuc.fusion.lower_dpu_support import window
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def pool_fusable(layer, pool, index) -> bool:
    """Whether the MaxPool DPU layer ``pool`` reading only ``layer``'s output (a 4-D static
    value of aligned channels, dilation 1) can run on ``layer``'s output blocks."""
    if pool.op.kind != "MaxPool" or list(pool.op.operands) != [layer.output] \
            or pool.bias is not None:
        return False
    x, y = index.producer(layer.output).type, pool.op.type
    if x is None or y is None or x.rank != 4 or y.rank != 4 or not x.is_static \
            or not y.is_static or x.elem != y.elem:
        return False
    _, c, _, _ = x.dims
    (kh, _), (sh, _), *_, dilations = window(pool.op, index)
    return aligned(c) == c and dilations == (1, 1) and kh >= sh


def worth_fusing(nbytes: int, room: int) -> bool:
    """Whether a convolution's output of ``nbytes`` should be pooled on its blocks, given the
    ``room`` values kept in CMX have (``resident.resident_room``): only when it cannot be
    kept there, where both layers' blocks would write and read it in place with no copy
    (the copies this lowering makes cost more than they save then)."""
    return nbytes > room


@dataclass
class PoolEpilogue:
    """The MaxPool DPU ``layer`` as a per-block stage of the DPU layer before it (module
    docstring); ``source``: the pooled value's program value (the store's target),
    ``index``: the graph's, for the pool's window."""
    layer: object
    source: object
    index: object
    timing: object
    calls: int = 0
    refused: bool = False
    outputs: set = field(default_factory=set)
    blocks: dict = field(default_factory=dict)      # k -> (CMX block, its rows r0, r1)
    targets: dict = field(default_factory=dict)     # k -> the store's pooled rows
    pending: dict = field(default_factory=dict)     # tile -> its last pool task's lines
    # the barrier a block's input is ready on: the layer's ``done``, or an earlier stage's
    ready: str = "done"
    # k -> (its input buffer, the view of its block's rows): an earlier stage writes the
    # block there itself (``input_buffer``), no copy
    pins: dict = field(default_factory=dict)
    placed: set = field(default_factory=set)        # the input buffers so written
    tag = "pool"          # its buffers' and barriers' names (``fuse_halo_conv``: "halo")
    # whether a window convolution's blocks (``lower_dpu_window``) write their rows straight
    # into the pool's input buffers (``input_buffer``), no ``pool.cp`` copy
    rows_in_place = True

    def geometry(self):
        """(input dims, output dims, kernel, strides, pads begin, pads end)."""
        (kh, kw), (sh, sw), (pt, pl), (pb, pr), _ = window(self.layer.op, self.index)
        x = self.index.producer(self.layer.op.operands[0]).type
        return x.dims, self.layer.op.type.dims, (kh, kw), (sh, sw), (pt, pl), (pb, pr)

    def pooled_rows(self, r0: int, r1: int, last: bool) -> tuple[int, int]:
        """The pool's output rows [i0, i1) computed with input rows [r0, r1)."""
        (_, _, h, _), (_, _, oh, _), (kh, _), (sh, _), (pt, _), _ = self.geometry()

        def last_row(i: int) -> int:
            return min(i * sh - pt + kh - 1, h - 1)
        i0 = next((i for i in range(oh) if last_row(i) >= r0), oh)
        i1 = oh if last else next((i for i in range(oh) if last_row(i) >= r1), oh)
        return i0, i1

    def block_bytes(self, rows: int) -> int:
        """CMX bytes the epilogue adds to a block of ``rows`` input rows: the pool's input
        (the rows and their halo, ``kh - sh`` rows) and its output rows."""
        (n, c, _, w), (_, _, _, ow), (kh, _), (sh, _), *_ = self.geometry()
        nb = self.layer.op.type.elem.nbytes
        return n * c * ((rows + kh - sh) * w + -(-rows // sh) * ow) * nb

    def out_channels(self) -> int:
        """The channels of the stage's output (a pool's are its input's)."""
        return self.layer.op.type.dims[1]

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int, dst: str,
             rows: tuple[int, int] | None = None) -> str:
        """After block ``k``'s DPU task on ``tile``: its copies, the pool task; the pooled
        buffer's name (the block's store waits on ``%KEY.actedK``).  ``rows``: the block's
        input rows, when ``dst`` is not a view of them (a stage after another)."""
        self.calls += 1
        (n, c, h, w), (_, _, _, ow), (kh, kw), (sh, sw), (pt, pl), (_, pr) = self.geometry()
        elem = block_type.elem
        base, slices = e.view_of.get(dst, (dst, None))
        rows = _rows_of(slices, (n, c, w)) if rows is None else rows
        if rows is None or self.source.type.order != NHWC \
                or block_type.nbytes != n * c * (rows[1] - rows[0]) * w * elem.nbytes \
                or (k > 0 and (k - 1 not in self.blocks or self.blocks[k - 1][2] != rows[0])):
            self.refused = True
            return block
        r0, r1 = rows
        placed = self.pins.pop(k, None)
        self.blocks[k] = (block, r0, r1) if placed is None else (placed[0], r0, r1)
        if placed is not None:
            self.placed.add(placed[0])
        i0, i1 = self.pooled_rows(r0, r1, r1 == h)
        first, end = i0 * sh - pt, (i1 - 1) * sh - pt + kh     # input rows the pool reads
        halo = r0 - max(first, 0)
        previous = self.blocks.get(k - 1)
        if i1 <= i0 or halo < 0 or (halo and (previous is None
                                              or previous[2] - previous[1] < halo)):
            self.refused = True
            return block
        held = min(end, r1) - max(first, 0)      # the pool's input rows in CMX
        p, t = e.p, self.tag
        e.prog.barriers.append(f"barrier %{p}acted{k}")
        if placed is None or halo:
            e.prog.barriers.append(f"barrier %{p}{t}ed.in{k}")
        waits = [f"%{p}{t}ed.in{k}"] if halo else []
        if placed is None:
            pin = e.cmx(f"{t}.in{k}", TensorType((n, c, halo + r1 - r0, w), elem, NHWC), tile)
            into = e.view(f"{t}.rows{k}", pin[1:], [f"0:{n}", f"0:{c}",
                                                    f"{halo}:{halo + r1 - r0}", f"0:{w}"])
            e.dma(f"{t}.cp{k}", block, into, e.prog.store_channel,
                  f" waits(%{p}{self.ready}{k})", [f"%{p}{t}ed.in{k}"])
            if k > 0:
                _before_store(e, max(k - e.used, 0))
            waits = [f"%{p}{t}ed.in{k}"]
        else:           # the earlier stage wrote the rows there: its task is what to wait on
            pin = placed[0]
            waits.append(f"%{p}{self.ready}{k}")
        if halo:
            self._halo(e, k, previous, pin, halo, (n, c, w))
        src = pin if held == halo + r1 - r0 else e.view(
            f"{t}.src{k}", pin[1:], [f"0:{n}", f"0:{c}", f"0:{held}", f"0:{w}"])
        o = self.out_channels()
        out = e.cmx(f"{t}.out{k}", TensorType((n, o, i1 - i0, ow), elem, NHWC), tile)
        top, bottom = max(-first, 0), max(end - h, 0)
        # the tile's pool of its previous block runs now, after this block's convolution
        # (which ran while that block was copied), and this block's after the next one's
        e.prog.dpu += self.pending.pop(tile, [])
        self.pending[tile] = self.task(e, k, tile, src, out, (top, bottom, pl, pr), i1 - i0,
                                       waits)
        self.targets[k] = e.view(f"{t}.v{k}", self.source.name,
                                 [f"0:{n}", f"0:{o}", f"{i0}:{i1}", f"0:{ow}"])
        self.outputs.add(out)
        return out

    def input_buffer(self, e, k: int, rows: tuple[int, int], tile: int, elem) -> str:
        """Block ``k``'s input buffer (its ``rows`` of the input after the halo rows) on
        ``tile``, declared before the stage that writes the block: the view of its rows
        that stage writes (``fuse_halo_conv.ChainEpilogue``), where ``emit`` then copies
        nothing.  The halo is as ``emit`` finds it (the rows ``pooled_rows`` reads)."""
        (n, c, h, w), _, (kh, _), (sh, _), (pt, _), _ = self.geometry()
        r0, r1 = rows
        i0, _ = self.pooled_rows(r0, r1, r1 == h)
        halo = max(r0 - max(i0 * sh - pt, 0), 0)
        t = self.tag
        pin = e.cmx(f"{t}.in{k}", TensorType((n, c, halo + r1 - r0, w), elem, NHWC), tile)
        into = e.view(f"{t}.rows{k}", pin[1:], [f"0:{n}", f"0:{c}", f"{halo}:{halo + r1 - r0}",
                                                f"0:{w}"])
        self.pins[k] = (pin, into)
        return into

    def task(self, e, k: int, tile: int, src: str, out: str, pads: tuple, rows: int,
             waits: list[str]) -> list:
        """The lines of block ``k``'s pool task: ``rows`` output rows of ``src`` into ``out``,
        ``pads`` (top, bottom, left, right), after ``waits``."""
        (n, c, _, _), (_, _, _, ow), (kh, kw), (sh, sw), *_ = self.geometry()
        elem = self.layer.op.type.elem

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op="maxpool", elem=elem.value, width=ow, height=r, channels=c,
                               in_channels=c, kernel=(kh, kw), stride=(sh, sw), batch=n,
                               in_bytes=elem.nbytes, out_bytes=elem.nbytes,
                               weight_bytes=elem.nbytes)
        from vpuc.fusion.lower_dpu import split_rows
        p = e.p
        task = [f"  {e.lp}pool{k}: dpu maxpool on tile {tile} in({src}) out({out}) "
                f"kernel({kh}, {kw}) stride({sh}, {sw}) "
                f"pad({', '.join(str(v) for v in pads)}){self.layer.post} "
                f"waits({', '.join(waits)}) updates(%{p}acted{k}) {{"]
        for a, b, z0, z1, mode in variant_boxes("maxpool", split_rows(rows, workload_of,
                                                                      self.timing), (0, c - 1)):
            task.append(f"    variant start(0, {a}, {z0}) end({ow - 1}, {b - 1}, {z1}) "
                        f"mode({mode})")
        return task + ["  }"]

    def _halo(self, e, k: int, previous, pin: str, halo: int, dims) -> None:
        """The previous block's last ``halo`` rows into rows ``0..halo`` of block ``k``'s
        pool input (module docstring)."""
        n, c, w = dims
        block, r0, r1 = previous
        block_type, _ = e.cmx_of[block]      # a placed block: its input buffer's last rows
        # the rows the buffer holds: the block's, after its own halo when placed there
        held = r1 - r0 + (block_type.dims[2] - (r1 - r0) if block in self.placed else 0)
        per_row = block_type.nbytes // held
        # the block's last rows as a view of its own dims (a folded block: its rows too)
        bn, bc, brows, bw = block_type.dims
        if per_row * brows != block_type.nbytes or bn * bc * bw * block_type.elem.nbytes \
                != per_row:
            self.refused = True
            return
        t = self.tag
        src = e.view(f"{t}.hsrc{k}", block[1:], [f"0:{bn}", f"0:{bc}",
                                                f"{brows - halo}:{brows}", f"0:{bw}"])
        dst = e.view(f"{t}.halo.v{k}", pin[1:], [f"0:{n}", f"0:{c}", f"0:{halo}", f"0:{w}"])
        p = e.p
        e.dma(f"{t}.halo{k}", src, dst, e.prog.store_channel,
              f" waits(%{p}{self.ready}{k - 1})", [f"%{p}{t}ed.in{k}", f"%{p}acted{k - 1}"])
        _before_store(e, max(k - e.used, 0))

    def flush(self, prog) -> None:
        """The last pool task of each tile, after the layer's last convolution there."""
        for tile in sorted(self.pending):
            prog.dpu += self.pending.pop(tile)

    def store_target(self, e, k: int, dst: str) -> str:
        """Block ``k``'s store goes to its pooled rows, not the convolution's (whose view,
        now unused, is dropped: the convolution's output is never declared)."""
        if k not in self.targets:
            return dst
        if dst in e.view_of:
            base, slices = e.view_of.pop(dst)
            e.prog.views.remove(f"view {dst} = {base}[{', '.join(slices)}]")
        return self.targets[k]


def _before_store(e, k: int) -> None:
    """Move the DMA just listed to right before block ``k``'s store, which waits for that
    block's pool: a block's copies go before the store of its tile's previous block, whose
    pool runs after the block's convolution, so they do not queue behind it (ResNet-18's
    stem: before the previous block's store, its tiles' DPUs waited ~3,700 cycles each
    for their last copies; the network 1,711,028 -> 1,708,404 cycles)."""
    at = e.store_at[k]
    e.prog.dma.insert(at, e.prog.dma.pop())
    e.store_at = {j: i + (i >= at) for j, i in e.store_at.items()}


def _rows_of(slices, dims) -> tuple[int, int] | None:
    """(r0, r1) of a store's slices of whole NHWC rows (all channels and columns), or None."""
    if slices is None or len(slices) != 4:
        return None
    n, c, w = dims
    spans = [tuple(int(v) for v in s.split(":")[:2]) for s in slices]
    if spans[0] != (0, n) or spans[1] != (0, c) or spans[3] != (0, w):
        return None
    return spans[2]


def block_footprint(epilogue, own: int, output: int, rows: int, in_place: bool = False) -> int:
    """A convolution block's CMX bytes (``own``: its input rows and ``output`` rows) with
    ``epilogue``: a fused pool copies the block once its convolution has run, when the
    input rows are dead, so the block needs the output rows and the pool's buffers if
    that is more; with ``in_place`` the convolution writes its rows into the pool's input
    buffer, which its input rows then share CMX with; any other epilogue adds nothing."""
    if isinstance(epilogue, PoolEpilogue):
        if in_place:
            return own - output + epilogue.block_bytes(rows)
        return max(own, output + epilogue.block_bytes(rows))
    return own


def writes_pool_rows(epilogue) -> bool:
    """Whether a window convolution's blocks write straight into ``epilogue``'s input
    buffers (a fused pool's: ``PoolEpilogue.rows_in_place``)."""
    return isinstance(epilogue, PoolEpilogue) and epilogue.rows_in_place
