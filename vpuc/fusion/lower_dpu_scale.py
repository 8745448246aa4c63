"""A squeeze-excite product ``x * e[c]`` as a DPU depthwise 1x1 convolution (``--schedule default``).

MobileNetV3's squeeze-excite blocks end in an ACT segment of two subgraphs: the
excitation ``e = HardSigmoid(s)`` on ``[1, C, 1, 1]`` and the product ``x * e``
broadcast over H and W.  On ACT SHAVE the product is most of the segment's work
(two SHAVEs a tile on every element of ``x``) while the DPU idles.  A depthwise
1x1 convolution whose per-channel weights are ``e`` computes the same product:
the simulator's DPU reads depthwise weights as ``[C, 1, KH, KW]`` (no weights
table but the optional bias, ``runtime_sim/dpu/ops.depthwise_conv2d``), which for
a 1x1 kernel is ``C`` consecutive values: the bytes of ``e``.  So:

- each tile loads ``s`` into a ``[C, 1, 1, 1]`` CMX buffer (a copy of the same
  bytes), and one ACT SHAVE task runs the excitation's kernel, generated for that
  shape, into the tile's weights buffer ``%KEY.w.tT`` (``[C, 1, 1, 1]``, NHWC);
  its task updates the ``loaded`` barrier of the tile's first block, as a
  layer's weights load does; a segment whose ``e`` another segment computed loads it
  there (MobileNetV3's: the import folds its ``HardSigmoid`` into the 1x1 before it,
  ``onnx_import/fold.py``, whose DPU post-op clamps to [0, 1], so ``e`` is that 1x1's
  output and no ACT SHAVE task sits between the 1x1 and the product);
- ``x`` is cut into blocks of rows (``lower_dpu.choose_blocks`` with the cost
  model's estimate), each loaded, multiplied by one ``dwconv`` task (channel
  chunks of 64/32/16, ``lower_dpu_channels.variant_boxes``) and stored, as
  ``lower_dpu_eltwise`` does; a block on the tile holding ``x`` (``y``), a value kept
  in CMX, reads (writes) its rows there in place (``resident.in_place_input``,
  ``in_place_blocks``).  Channels short of the DPU's multiple of 16 (MobileNetV3's 120)
  are padded in CMX (``emit_scale``), only the real ones stored.

Numerics: the DPU widens f16 to f32, multiplies (one term, exact in f32: 11 x 11
significant bits), adds no bias and rounds once to f16; the ACT product rounds
the same exact product once.  The two are bit-identical.

``scale_product`` recognises the segment; ``choose_dpu`` weighs the ACT SHAVE
product (its kernel run once, on zeros, at the size each SHAVE would take) against
the DPU blocks' compute; ``emit_scale`` emits it.  Only f16 values and a product
subgraph ending in the Multiply are taken (the excitation may precede it in the same
subgraph, element by element on ``[1, C, 1, 1]``): a product followed by another op in
its subgraph (a HardSwish, which the DPU has no post-op for) stays on ACT.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vpuc.cost import DpuWorkload
from vpuc.cost.blocks import BlockStages, Move, block_stages
from vpuc.cost.shave import act_invocation_cycles
from vpuc.fusion.act_split import MIN_BLOCKS_PER_TILE
from vpuc.fusion.blocked_program import ProgramText, Value
from vpuc.fusion.lower_dpu import NHWC, LayerEmitter, choose_blocks, split_rows_cost
from vpuc.fusion.lower_dpu_channels import aligned
from vpuc.fusion.resident import in_place_blocks, in_place_input
from vpuc.ir.graph import PARAMETER, RESULT, Graph, GraphOp
from vpuc.ir.module import Ref
from vpuc.ir.types import ElemType, TensorType
from vpuc.reference.graph import storage_dtype
from vpuc.verifier.graph import infer_graph

# ACT SHAVE cycles of a product kernel by (body, config): the oldest dropped past this many.
_PRODUCT_CYCLES: dict[tuple, int] = {}
_PRODUCT_CYCLES_KEPT = 64


@dataclass
class ScaleProduct:
    """An ACT segment that is a squeeze-excite product: ``y = x * e`` with ``x``
    ``[1, C, H, W]`` and ``e`` ``[1, C, 1, 1]`` (graph values); ``excite`` the body
    computing ``e`` from ``s`` element by element (a subgraph's, or the part of the
    product's subgraph before its Multiply) and ``name`` its subgraph's, or None when ``e``
    is read from DDR."""
    x: str
    e: str
    y: str
    excite: Graph | None = None
    name: str = ""
    s: str | None = None


def scale_product(tok, seg, types: dict[str, TensorType]) -> ScaleProduct | None:
    """The segment's squeeze-excite product, or None when it is not one the DPU can take
    (``types``: each graph value's type as the program holds it)."""
    units = seg.units
    if not 1 <= len(units) <= 2 or any(kind != "sg" for kind, _ in units):
        return None
    product = tok.subgraphs[units[-1][1]]
    if len(product.outputs) != 1:
        return None
    y = product.outputs[0]
    ty = types.get(y)
    if ty is None or ty.rank != 4 or not ty.is_static or ty.elem is not ElemType.F16 \
            or ty.dims[0] != 1:
        return None
    found = _split_product(product.body, ty.dims)
    if found is None:
        return None
    x, e, inner = found
    if any(types.get(v) is None or types[v].elem is not ElemType.F16 for v in product.inputs):
        return None
    if inner is not None:                   # the excitation in the product's subgraph
        if len(units) != 1 or len(product.inputs) != 2:
            return None
        s = next(v for v in product.inputs if v != x)
        return ScaleProduct(x, e, y, inner, product.name, s)
    if len(units) == 1:
        return ScaleProduct(x, e, y)
    excite = tok.subgraphs[units[0][1]]
    c = ty.dims[1]
    if excite.outputs != [e] or len(excite.inputs) != 1 \
            or types.get(excite.inputs[0]) is None \
            or types[excite.inputs[0]].dims != (1, c, 1, 1) \
            or types[excite.inputs[0]].elem is not ElemType.F16 \
            or not _elementwise(excite.body, (1, c, 1, 1)):
        return None
    return ScaleProduct(x, e, y, excite.body, excite.name, excite.inputs[0])


def _split_product(body: Graph, dims: tuple) -> tuple[str, str, Graph | None] | None:
    """``(x, e, excitation)`` when ``body`` ends in ``Result(Multiply(x, e))`` with ``x`` a
    Parameter of ``dims`` and ``e`` of ``[1, C, 1, 1]``: ``e`` a Parameter (excitation
    None), or computed element by element from one other Parameter by the body's other
    ops, which then form the excitation's body (ending in a Result of ``e``)."""
    results = [op for op in body.ops if op.kind == RESULT]
    if len(results) != 1 or len(results[0].operands) != 1:
        return None
    producer = {op.result: op for op in body.ops if op.result is not None}
    mul = producer.get(results[0].operands[0])
    if mul is None or mul.kind != "Multiply" or len(mul.operands) != 2 \
            or len(set(mul.operands)) != 2:
        return None
    c = dims[1]
    x = e = None
    for v in mul.operands:
        op = producer[v]
        if op.kind == PARAMETER and op.type is not None and op.type.dims == dims:
            x = v
        elif op.type is not None and op.type.dims == (1, c, 1, 1):
            e = v
    if x is None or e is None:
        return None
    users = [op for op in body.ops if x in op.operands]
    if users != [mul] or any(e in op.operands for op in body.ops if op is not mul):
        return None
    if producer[e].kind == PARAMETER:
        return (x, e, None) if len(body.ops) == 4 else None
    rest = [op for op in body.ops if op is not mul and op.result != x and op.kind != RESULT]
    inner = Graph(f"{body.name}.excite", rest + [GraphOp(RESULT, None, (e,),
                                                          type=producer[e].type)])
    params = [op for op in rest if op.kind == PARAMETER]
    if len(params) != 1 or not _elementwise(inner, (1, c, 1, 1)):
        return None
    return x, e, inner


def _elementwise(body: Graph, dims: tuple) -> bool:
    """Every op of ``body`` of shape ``dims`` or a constant of one element: each output
    element depends on the same input element alone, so a body retyped to
    ``[C, 1, 1, 1]`` (``weights_body``) computes the same values."""
    for op in body.ops:
        if op.type is None or op.kind == "Broadcast":
            return False
        if op.kind == "Constant":
            if math.prod(op.type.dims) != 1:
                return False
        elif op.type.dims != dims:
            return False
    return True


def weights_body(body: Graph, channels: int) -> Graph:
    """A copy of the excitation's body whose Parameter and Result are ``[C, 1, 1, 1]``
    NHWC: a depthwise 1x1's weights, the same bytes as ``[1, C, 1, 1]``."""
    out = copy.deepcopy(body)
    for op in out.ops:
        if op.kind in (PARAMETER, RESULT):
            op.type = TensorType((channels, 1, 1, 1), op.type.elem, NHWC)
    infer_graph(out)
    return out


def product_body(x: TensorType) -> Graph:
    """The product's kernel body at the block ``x`` (NHWC): ``x * e``, ``e`` ``[1, C, 1, 1]``
    NHWC, as the ACT segment's product runs it."""
    e = TensorType((1, x.dims[1], 1, 1), x.elem, NHWC)
    body = Graph("product", [GraphOp(PARAMETER, Ref("x"), type=x),
                             GraphOp(PARAMETER, Ref("e"), type=e),
                             GraphOp("Multiply", Ref("y"), (Ref("x"), Ref("e")), type=x),
                             GraphOp(RESULT, None, (Ref("y"),), type=x)])
    infer_graph(body)
    return body


def act_product_cycles(se: ScaleProduct, x: TensorType, tiles: int, timing, config) -> float:
    """NCE cycles a tile's ACT SHAVEs take for the product as the ACT segment runs it: each
    of the ``2 * tiles`` SHAVEs on a share of the rows (rounded up), its kernel generated
    for that share and run once on zeros (a product has no data-dependent control flow),
    plus its dispatch."""
    from vpuc.fusion.generator.generate import generate
    from vpuc.fusion.generator.kernel_graph import body_key
    from vpuc.fusion.generator.run import run_kernel
    n, c, h, w = x.dims
    rows = max(1, -(-h // (2 * tiles)))
    block = TensorType((n, c, rows, w), x.elem, NHWC)
    body = product_body(block)
    key = (body_key(body), repr(config))
    if key not in _PRODUCT_CYCLES:
        kernel = generate(body, "probe", config=config)
        params = [op for op in body.ops if op.kind == PARAMETER]
        inputs = [np.zeros(op.type.dims, dtype=storage_dtype(op.type.elem)) for op in params]
        if len(_PRODUCT_CYCLES) >= _PRODUCT_CYCLES_KEPT:
            _PRODUCT_CYCLES.pop(next(iter(_PRODUCT_CYCLES)))
        _PRODUCT_CYCLES[key] = run_kernel(kernel, inputs, [block.dims]).cycles
    return act_invocation_cycles(_PRODUCT_CYCLES[key], timing.shave_cycle,
                                 timing.dispatch["ACT_SHAVE"])


def _workload(x: TensorType):
    n, c, _, w = x.dims
    c = aligned(c)

    def workload_of(rows: int) -> DpuWorkload:
        return DpuWorkload(op="dwconv", elem=x.elem.value, width=w, height=rows, channels=c,
                           in_channels=c, batch=n, in_bytes=x.elem.nbytes,
                           out_bytes=x.elem.nbytes, weight_bytes=x.elem.nbytes)
    return workload_of


def product_blocks(prog: ProgramText, x: TensorType, y: TensorType, tiles: int, op,
            resident_cycles: float) -> list[tuple[int, int]]:
    """The product's row blocks: the count the cost model's pipeline estimate finds fastest
    among those that fit (``lower_dpu.choose_blocks``), each tile's weights ready after
    ``resident_cycles``.  As an ACT segment's (``act_split.MIN_BLOCKS_PER_TILE``), a block
    holds at most half a tile's share of the rows, so each tile has two blocks whose load,
    task and store overlap: the estimate prices every block's transfers as DDR ones, but
    the product's input and output mostly stay in CMX (``resident.py``: CMX -> CMX
    copies) and smaller blocks let the next layer start sooner, which it does not see
    (MobileNetV3's nine products as 2 or 3 blocks: 756,666 cycles; 4 blocks each:
    752,717)."""
    n, c, h, w = x.dims
    most = max(1, -(-h // (MIN_BLOCKS_PER_TILE * min(tiles, h))))      # rows a block holds
    cp = aligned(c)
    return choose_blocks(h, tiles, 2 * cp * x.elem.nbytes,
                         lambda rows: 2 * n * cp * rows * w * x.elem.nbytes
                         if rows <= most else prog.cmx_budget + 1, "row", op,
                         prog.cmx_budget, cost=product_stages(prog, x, y),
                         resident_cost=(resident_cycles, 0.0), channels=prog.dma_channels)


def product_stages(prog: ProgramText, x: TensorType, y: TensorType
                   ) -> Callable[[int], BlockStages]:
    """A product block of ``rows`` rows -> its stages: the load of its rows of ``x``, its
    DPU task, the store of its rows of ``y`` (the transfers priced as DDR ones)."""
    n, c, _, w = x.dims
    workload_of = _workload(x)

    def stages(rows: int) -> BlockStages:
        size = n * c * rows * w * x.elem.nbytes
        return block_stages([Move(size, x.elem.nbytes, x.order != NHWC)],
                            split_rows_cost(rows, workload_of, prog.timing)[1],
                            [Move(size, x.elem.nbytes, y.order != NHWC)], prog.timing)
    return stages


def dpu_product_cycles(prog: ProgramText, x: TensorType, blocks: list[tuple[int, int]],
                       tiles: int) -> float:
    """NCE cycles of the busiest tile's DPU tasks over ``blocks`` (block k on tile
    ``k % tiles``), as ``split_rows_cost`` prices them."""
    workload_of = _workload(x)
    busy = [0.0] * tiles
    for k, (r0, r1) in enumerate(blocks):
        busy[k % tiles] += split_rows_cost(r1 - r0, workload_of, prog.timing)[1]
    return max(busy)


def choose_dpu(prog: ProgramText, se: ScaleProduct, x: TensorType, y: TensorType, tiles: int,
               op, config) -> list[tuple[int, int]] | None:
    """The DPU product's row blocks when the cost model finds its DPU time per tile below
    the ACT SHAVEs' (the loads, stores and excitation are the same either way); None to
    keep the product on ACT SHAVE."""
    if prog.timing is None:
        return None
    if aligned(x.dims[1]) > 2 * x.dims[1]:
        return None         # emit_scale pads the weights with one copy of the first channels
    blocks = product_blocks(prog, x, y, tiles, op, 0.0)
    dpu = dpu_product_cycles(prog, x, blocks, tiles)
    act = act_product_cycles(se, x, tiles, prog.timing, config)
    return blocks if dpu < act else None


def emit_scale(prog: ProgramText, se: ScaleProduct, values: dict[str, Value], tiles: int,
               prefix: str, gate: tuple[str, ...], finish: str | None,
               blocks: list[tuple[int, int]], kernel_of) -> None:
    """The product as DPU depthwise 1x1 tasks (see the module docstring); ``values`` maps
    the segment's graph values to program values, ``kernel_of(name, body)`` declares the
    kernel generated for a subgraph's (retyped) body and returns its name.  Channels short
    of the DPU's multiple: the blocks and weights have ``aligned(C)``, the real ones loaded
    and stored; the padded weights are the excitation of the first channels again (their
    input loaded twice, the second time into the padding): finite values, whose outputs
    are never stored.  Zeros from a constant took a DDR load each tile, which the prefetch
    queued before the previous layer's stores (MobileNetV3's 120 channels: 1,784 cycles
    more on the critical path); the blocks' padded channels are left as they are (a
    depthwise task never reads across channels)."""
    x, y = values[se.x], values[se.y]
    n, c, h, w = x.type.dims
    cp = aligned(c)
    elem = x.type.elem
    e = LayerEmitter(prog, prefix, tiles, gate, finish, len(blocks))
    kernel = kernel_of(se.name, weights_body(se.excite, cp)) if se.excite else None
    src = values[se.s] if se.excite else values[se.e]
    pad = None if cp == c else e.view("s.pad", src.name, ["0:1", f"0:{cp - c}", "0:1", "0:1"])
    weights = {}
    for t in range(e.used):         # each tile's weights: the excitation, once
        wbuf = weights[t] = e.cmx(f"w.t{t}", TensorType((cp, 1, 1, 1), elem, NHWC), t)
        into = wbuf                 # what the excitation's input is loaded into
        if kernel is not None:
            into = e.cmx(f"s.t{t}", TensorType((cp, 1, 1, 1), elem, NHWC), t)
            prog.barriers.append(f"barrier %{prefix}excite{t}")
        ready = [f"%{prefix}excite{t}" if kernel is not None else f"%{prefix}loaded{t}"]
        real = into if cp == c else e.view(f"{into[len(e.p) + 1:]}.r", into[1:],
                                           [f"0:{c}", "0:1", "0:1", "0:1"])
        e.dma(f"load_s.t{t}", f"%{src.name}", real, 0, e.load_waits(t), ready)
        if pad is not None:
            e.dma(f"pad_s.t{t}", pad, e.view(f"{into[len(e.p) + 1:]}.p", into[1:],
                                             [f"{c}:{cp}", "0:1", "0:1", "0:1"]),
                  0, e.load_waits(t), ready)
        if kernel is not None:
            prog.act += [f"  {e.lp}excite.t{t}: sw @{kernel} on tile {t} inputs({into} as %a0) "
                         f"outputs({wbuf} as %r0) waits(%{prefix}excite{t}) "
                         f"updates(%{prefix}loaded{t}) {{", "    run(%a0, %r0)", "  }"]
            e.updated.add(f"%{prefix}loaded{t}")     # a block reading in place waits on it
    # blocks on the tile holding x (y) read (write) its rows in place: no load (store)
    e.in_place = in_place_blocks(e, y, cp, [e.tile(k) for k in range(len(blocks))])
    for k, (r0, r1) in enumerate(blocks):
        t = e.tile(k)
        e.barriers(k)
        rows = [f"0:{n}", f"0:{c}", f"{r0}:{r1}", f"0:{w}"]
        block = TensorType((n, cp, r1 - r0, w), elem, NHWC)
        inner = [f"0:{n}", f"0:{c}", f"0:{r1 - r0}", f"0:{w}"]
        xin = in_place_input(e, k, x, cp, r0, r1 - r0)
        if xin is None:
            xin = e.cmx(f"in.c{k}", block, t)
            e.dma(f"load{k}", e.view(f"in.v{k}", x.name, rows),
                  xin if cp == c else e.view(f"in.r{k}", xin[1:], inner), 0, e.load_waits(k),
                  [f"%{prefix}loaded{k}"], permute=x.type.order != NHWC)
        dst = e.view(f"out.v{k}", y.name, rows)
        out = dst if k in e.in_place else e.cmx(f"out.c{k}", block, t)
        e.task(k, f"dpu dwconv on tile {t} in({xin}) weights({weights[t]}) out({out}) "
               f"kernel(1, 1) stride(1, 1) pad(0, 0, 0, 0) dilation(1, 1)",
               ((0, w - 1), r1 - r0, (0, cp - 1)), _workload(x.type))
        if k not in e.in_place:
            e.store(k, out if cp == c else e.view(f"out.r{k}", out[1:], inner), dst,
                    permute=y.type.order != NHWC)
