"""A 3x3 convolution run on its producer's output blocks in CMX, with a halo of rows
(``--schedule default``).

DenseNet-121's dense layers end in a 1x1 Convolution (BatchNorm and Relu folded in) to 128
channels and a 3x3 Convolution of that alone.  On the first dense block's 56 x 56 maps the
1x1's output (802,816 bytes in f16) misses the room resident values have (786,432 bytes,
``resident.resident_room``) by 16 KiB, so the 1x1 stored it to DDR whole and the 3x3
loaded it back with its halos (1,019,904 bytes): six layers of 1.8 MB of DMA each, on a
block whose load channel was its busiest engine.  Here the 3x3 runs on the 1x1's output
blocks instead, as ``fuse_pool`` runs a MaxPool on a convolution's: each block copied
CMX -> CMX beside the previous block's last ``kh - 1`` rows (the halo, copied from that
block, on the other tile), one DPU ``conv`` task with the 3x3's weights and bias (loaded
once per tile) computing the output rows whose last input row the block holds (the last
block: every row left, with the bottom padding), and the block's store writing those rows
of the 3x3's output.  ``HaloConvEpilogue`` is ``fuse_pool.PoolEpilogue``'s block algebra
with a convolution task.

When the 1x1 itself runs on a depthwise layer's blocks (``fuse_conv``: the dense layer's
BatchNorm and Relu on the Concat, too wide to keep), ``ChainEpilogue`` runs both on the
depthwise's blocks: the 1x1's task writes its rows straight into the 3x3's input buffer
after the halo rows (``PoolEpilogue.input_buffer``: no copy; it updates ``conv.done``,
which the 3x3's task and the next block's halo copy wait on); neither value between the
three layers ever exists whole.

DenseNet-121 (``bench/zoo_schedule_bench.py``, timing-only): 3,743,456 -> 3,636,028
cycles with the first dense block's (56 x 56) values alone on blocks: that block
961,317 -> 872,546 cycles, DPU-bound (one DPU busy 91% of it, the DDR load channel 48%,
was 94%).  Each block's DPU work is a little more than the two layers' apart (the 3x3's
blocks of 7 output rows fill the DPU's mode grid less than the separate layer's 8 and
12; cutting them to even rows saved 3.6k DPU cycles a layer but unbalanced the tiles:
no gain, not kept).

A 3x3 alone on a layer's blocks is chosen where the value would not stay in CMX
(``fuse_pool.worth_fusing``), the cost model's DMA cycles of the copies
(``cheaper_in_cmx``: each block once and its halo, CMX -> CMX) are fewer than those of the
DDR round trip they replace (the value stored, then loaded with each block's halo), and
the pair's busiest engine ends sooner fused than apart (``halo_bound``: the fused 3x3's
blocks are shorter, which costs the DPU more, repaid only where DMA or DDR bounds the
pair apart; VGG-19 23,230,243 -> 23,012,479 cycles, its 224 x 224 conv1_2 apart).  A
chain is chosen wherever the cost model finds its halo copies cheaper than the copies of
its two values kept in CMX apart (``chain_cheaper``), so also in DenseNet-121's later
blocks, where the values fit: one pipeline per dense layer instead of three segments,
each with its fill and drain (3,636,028 -> 3,304,139 cycles).  Never by model.

Expects: segments as ``lower_segments.graph_segments`` makes them.  Guarantees: the DPU
computes each output element from the same f16 inputs as the two layers apart (the
producer's rounded outputs, the zero padding at the map's border), with the same f32
accumulation and one rounding per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vpuc.cost import DpuWorkload
from vpuc.fusion.fuse_conv import (ConvEpilogue, epilogue_dpu_cycles, epilogue_weight_bytes,
                                   load_stage_weights)
from vpuc.fusion.fuse_pool import PoolEpilogue
from vpuc.fusion.halo_bound import copies, engine_bounds
from vpuc.fusion.lower_dpu_channels import aligned, variant_boxes
from vpuc.fusion.lower_dpu_support import window
from vpuc.ir.graph import CONSTANT
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, TensorType

NHWC = DimsOrder(NAMED_ORDERS["NHWC"])


def halo_fusable(first, second, index) -> bool:
    """Whether the Convolution DPU layer ``second`` can run on ``first``'s output blocks:
    it reads that output alone (a 4-D static value of aligned channels, of ``second``'s
    element type), with constant weights of an odd square window larger than 1x1, stride
    and dilation 1 and the padding that keeps the map's size, to aligned channels."""
    op = second.op
    if op.kind != "Convolution" or op.type is None or op.operands[0] != first.output \
            or len(op.operands) < 2 or first.op.kind == "MatMul":
        return False
    w, x = index.producer(op.operands[1]), index.producer(first.output).type
    y = op.type
    if w.kind != CONSTANT or w.type is None or x is None or x.rank != 4 or y.rank != 4 \
            or not x.is_static or not y.is_static or x.elem != y.elem:
        return False
    (kh, kw), strides, begin, end, dilations = window(op, index)
    n, c, h, wd = x.dims
    return (kh == kw and kh % 2 == 1 and kh > 1 and strides == (1, 1)
            and dilations == (1, 1) and tuple(begin) == tuple(end) == (kh // 2, kw // 2)
            and tuple(y.dims) == (n, y.dims[1], h, wd) and h >= 2 * kh
            and aligned(c) == c and aligned(y.dims[1]) == y.dims[1])


def _halo_bytes(x: TensorType, kh: int) -> int:
    n, c, _, w = x.dims
    return n * c * (kh - 1) * w * x.elem.nbytes


def cheaper_in_cmx(x: TensorType, kh: int, blocks: int, timing) -> bool:
    """Whether the cost model (``vpuc.cost.dma``) finds the copies of the fused stage, the
    value ``x`` CMX -> CMX once and ``kh - 1`` rows of halo per block, cheaper in DMA
    cycles than the DDR round trip they replace: ``x`` stored, then loaded with ``kh - 1``
    halo rows per block.  ``blocks``: an estimate of the producer's row blocks."""
    if timing is None:
        return False
    nb, halo = x.elem.nbytes, _halo_bytes(x, kh) * blocks
    in_cmx = copies(x.nbytes, nb, False, False, blocks, timing) \
        + copies(halo, nb, False, False, blocks, timing)
    through_ddr = copies(x.nbytes, nb, False, True, blocks, timing) \
        + copies(x.nbytes + halo, nb, True, False, blocks, timing)
    return in_cmx < through_ddr


def chain_cheaper(z: TensorType, u: TensorType, kh: int, blocks: int, timing) -> bool:
    """Whether the cost model finds a chain (``ChainEpilogue``) cheaper in DMA cycles than
    its three layers apart with their values ``z`` (the depthwise's) and ``u`` (the 1x1's)
    kept in CMX (``resident.py``): there each is stored and loaded back CMX -> CMX by the
    blocks off its tile (half of them: the others write and read it in place), the 3x3's
    loads with ``kh - 1`` halo rows each; chained, only the 3x3's halo rows are copied.
    (The chain also runs one pipeline where there were three, each with its fill and
    drain: DenseNet-121's 28 x 28 and smaller blocks, 3,636,028 -> 3,304,139 cycles.)"""
    if timing is None:
        return False
    halo = _halo_bytes(u, kh) * blocks
    apart = sum(2 * copies(v.nbytes // 2, v.elem.nbytes, False, False, max(blocks // 2, 1),
                            timing) for v in (z, u)) \
        + copies(halo // 2, u.elem.nbytes, False, False, max(blocks // 2, 1), timing)
    return copies(halo, u.elem.nbytes, False, False, blocks, timing) < apart


@dataclass
class HaloConvEpilogue(PoolEpilogue):
    """The Convolution DPU ``layer`` as a per-block stage of the DPU layer before it
    (module docstring); ``source``: its output program value (the stores' target)."""
    weights: dict = field(default_factory=dict)     # tile -> the task's operand clauses
    tag = "halo"
    rows_in_place = False       # its producer's rows copied in, as measured (DenseNet-121)

    def block_bytes(self, rows: int) -> int:
        """CMX bytes the stage adds to a block of ``rows`` input rows: its input (the rows
        and the halo), its output rows and, as an upper bound, the tile's weights and
        bias."""
        (n, c, _, w), (_, o, _, ow), (kh, kw), *_ = self.geometry()
        nb = self.layer.op.type.elem.nbytes
        return (n * c * (rows + kh - 1) * w + n * o * rows * ow + o * c * kh * kw) * nb \
            + 4 * o

    def weight_bytes(self) -> int:
        """The tile's weights and bias (``fuse_conv.epilogue_weight_bytes``)."""
        (_, c, _, _), (_, o, _, _), (kh, kw), *_ = self.geometry()
        return o * c * kh * kw * self.layer.op.type.elem.nbytes + 4 * o

    def cmx_bytes(self, n: int, rows: int, width: int) -> int:
        """``block_bytes`` without the weights, as ``fuse_conv.epilogue_bytes`` asks a
        stage (the weights: ``weight_bytes``, once per tile)."""
        return self.block_bytes(rows) - self.weight_bytes()

    def dpu_cycles(self, rows: int, timing) -> float:
        """The cost model's cycles of the stage's task on a block of ``rows`` rows (about
        as many output rows: the first block's one fewer, the last's one more)."""
        (n, c, _, _), (_, o, _, ow), (kh, kw), *_ = self.geometry()
        elem = self.layer.op.type.elem
        from vpuc.fusion.lower_dpu import split_rows_cost
        return split_rows_cost(rows, lambda r: DpuWorkload(
            op="conv", elem=elem.value, width=ow, height=r, channels=o, in_channels=c,
            kernel=(kh, kw), stride=(1, 1), batch=n, in_bytes=elem.nbytes,
            out_bytes=elem.nbytes, weight_bytes=elem.nbytes), timing)[1]

    def task(self, e, k: int, tile: int, src: str, out: str, pads: tuple, rows: int,
             waits: list[str]) -> list:
        """Block ``k``'s convolution task: ``rows`` output rows of ``src`` into ``out``."""
        (n, c, _, _), (_, o, _, ow), (kh, kw), *_ = self.geometry()
        elem = self.layer.op.type.elem
        operands = self.weights.get(tile) or load_stage_weights(
            self, e, k, tile, "halo", (o, c, kh, kw), elem)

        def workload_of(r: int) -> DpuWorkload:
            return DpuWorkload(op="conv", elem=elem.value, width=ow, height=r, channels=o,
                               in_channels=c, kernel=(kh, kw), stride=(1, 1), batch=n,
                               in_bytes=elem.nbytes, out_bytes=elem.nbytes,
                               weight_bytes=elem.nbytes)
        from vpuc.fusion.lower_dpu import split_rows
        p = e.p
        task = [f"  {e.lp}halo{k}: dpu conv on tile {tile} in({src}){operands} out({out}) "
                f"kernel({kh}, {kw}) stride(1, 1) pad({', '.join(str(v) for v in pads)}) "
                f"dilation(1, 1){self.layer.post} waits({', '.join(waits)}, "
                f"%{p}halo.loaded.t{tile}) updates(%{p}acted{k}) {{"]
        for a, b, z0, z1, mode in variant_boxes("conv", split_rows(rows, workload_of,
                                                                   self.timing), (0, o - 1)):
            task.append(f"    variant start(0, {a}, {z0}) end({ow - 1}, {b - 1}, {z1}) "
                        f"mode({mode})")
        return task + ["  }"]

@dataclass
class ChainEpilogue:
    """A ``ConvEpilogue`` (a 1x1 on a depthwise layer's blocks) then a ``HaloConvEpilogue``
    on the 1x1's output blocks, both per block of the depthwise layer (module
    docstring)."""
    first: ConvEpilogue
    second: HaloConvEpilogue

    def __post_init__(self) -> None:
        self.first.ready, self.first.target = "conv.done", None
        self.second.ready = "conv.done"

    @property
    def calls(self) -> int:
        return self.first.calls

    @property
    def refused(self) -> bool:
        return self.first.refused or self.second.refused

    @property
    def outputs(self) -> set:
        return self.second.outputs

    def emit(self, e, k: int, block: str, block_type: TensorType, tile: int, dst: str) -> str:
        """Block ``k``'s 1x1 task, then the 3x3's stage on its output; the latter's
        buffer."""
        _, slices = e.view_of.get(dst, (dst, None))
        if slices is None or len(slices) != 4:
            self.first.refused = True
            return block
        rows = tuple(int(v) for v in slices[2].split(":")[:2])
        # the 1x1 writes its rows straight into the 3x3's input buffer, after the halo
        into = self.second.input_buffer(e, k, rows, tile, block_type.elem)
        mid = self.first.emit(e, k, block, block_type, tile, dst, into)
        if self.first.refused:
            return mid
        n, _, _, w = block_type.dims
        c = self.first.layer.op.type.dims[1]
        return self.second.emit(e, k, mid, TensorType((n, c, rows[1] - rows[0], w),
                                                      block_type.elem, NHWC), tile, dst, rows)

    def flush(self, prog) -> None:
        self.second.flush(prog)

    def store_target(self, e, k: int, dst: str) -> str:
        return self.second.store_target(e, k, dst)

    def cmx_bytes(self, n: int, rows: int, width: int) -> int:
        """CMX bytes both stages add to a block of ``rows`` rows: the 3x3's input (which
        the 1x1 writes: its output) and output."""
        return self.second.cmx_bytes(n, rows, width)

    def weight_bytes(self) -> int:
        """Both stages' weights and biases, once per tile."""
        return epilogue_weight_bytes(self.first) + self.second.weight_bytes()

    def dpu_cycles(self, rows: int, timing) -> float:
        """Both stages' DPU cycles on a block of ``rows`` rows."""
        return epilogue_dpu_cycles(self.first, rows, timing) \
            + self.second.dpu_cycles(rows, timing)


def _blocks(x: TensorType, budget: int) -> int:
    """An estimate of a layer's row blocks over ``x``: a block at most a quarter of the
    ``budget`` (double-buffered beside its output), two at least (one per tile)."""
    return max(2, -(-x.nbytes // max(budget // 4, 1)))


def halo_cheaper(first, layer, index, budget: int, timing, tiles: int) -> bool:
    """Whether the 3x3 ``layer`` on the blocks of the DPU layer ``first`` ends sooner than
    the two apart: ``cheaper_in_cmx``'s copies against DDR's round trip, and the busiest
    engine of each (``halo_bound.engine_bounds``: the fused 3x3's shorter blocks cost the
    DPU more, which only a pair bound by DMA or DDR apart repays)."""
    x = index.producer(layer.op.operands[0]).type
    kh = index.producer(layer.op.operands[1]).type.dims[2]
    if not cheaper_in_cmx(x, kh, _blocks(x, budget), timing):
        return False
    fused, apart = engine_bounds(first, layer, index, budget, timing, tiles)
    return fused < apart


def chain_worth(depthwise, halo, index, budget: int, timing) -> bool:
    """``chain_cheaper`` for the chain from the ``depthwise`` layer to the 3x3 ``halo``."""
    z = index.producer(depthwise.output).type
    u = index.producer(halo.op.operands[0]).type
    kh = index.producer(halo.op.operands[1]).type.dims[2]
    return chain_cheaper(z, u, kh, _blocks(z, budget), timing)
