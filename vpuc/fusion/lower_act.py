"""ACT segments of the ``lower-graph`` pass (``lower_graph.py``): the axis and the number
of blocks a run of subgraphs is cut into (``act_split.choose_cut`` weighs the even cuts),
and the block pipeline's stages: library kernels, and one kernel generated per subgraph
body at its block's size (``blocked_program.emit_blocks`` renders them)."""

from __future__ import annotations

import copy

from vpuc.diagnostics import VpucError
from vpuc.fusion.act_block_count import one_block_pays
from vpuc.fusion.act_split import box_runs, choose_cut, shave_boxes
from vpuc.fusion.blocked_program import Stage, Value, block_type, emit_blocks, sanitize, spans
from vpuc.fusion.generator.generate import generate
from vpuc.fusion.generator.kernel_graph import body_key
from vpuc.fusion.lower_library import LibraryCall
from vpuc.fusion.lower_segments import stage_io
from vpuc.fusion.schedule_layouts import nhwc_ports
from vpuc.ir.graph import PARAMETER, RESULT, Graph
from vpuc.ir.types import Dynamic, TensorType
from vpuc.verifier.graph import infer_graph

# Blocks of one segment (each ~4 tasks; lowering and the later passes take ~1 ms a task).
# A dim with no divisor near its size / budget (a large prime) would need one block a row.
MAX_BLOCKS = 4096


def emit_act(prog, graph, tok, seg, values, names, generated, timings, hook, tiles, blocks,
             config, prefix, gate, finish, library: dict[int, LibraryCall],
             made: dict[tuple, str], nhwc: bool = False, pipelined: bool = False) -> None:
    """``nhwc``: the segment's values are NHWC (``schedule_layouts.ddr_layouts``), and so are the
    ports of its kernels; ``pipelined``: segments overlap (``schedule_deps``), which the cut
    weighs (``act_split.choose_cut``)."""
    master = seg.master
    rank = len(master)
    used = {names[v] for v in seg.reads(tok) + seg.writes(tok)}
    seg_values = [v for v in values if v.name in used]
    softmax = any(kind == "op" for kind, _ in seg.units)
    even = _even_cuts(seg_values, master, {rank - 1} if softmax else set(), prog.cmx_budget)
    axis, chosen = even[0][:2] if even else (None, 1)
    if blocks is None and even and _one_block(prog, tok, seg, seg_values, names, even[0],
                                              tiles):
        axis, chosen = None, 1
    if blocks is None or axis is None:
        blocks = chosen
    if blocks > MAX_BLOCKS:
        first = seg.units[0]
        op = graph.ops[first[1] if first[0] == "op" else tok.subgraphs[first[1]].ops[0]]
        raise VpucError(f"lowering {op.label} ({op.type}) needs {blocks:,} blocks along dim "
                        f"{axis} (extent {master[axis]:,}): blocks divide the dim evenly and "
                        f"two slots of a block fit {prog.cmx_budget:,} bytes of CMX; more than "
                        f"{MAX_BLOCKS:,} blocks is not supported yet", op.loc)
    runs = [(blocks, master[axis] // blocks if axis is not None else None, 0)]
    outermost, inner = True, None
    if axis is not None and blocks == chosen:
        total = sum(v.type.nbytes for v in seg_values)
        cuts = [(a, master[a], n, outermost) for a, n, outermost in _even_cuts(
            seg_values, master, {rank - 1} if softmax else set(), prog.cmx_budget)]
        axis, main, size = choose_cut(cuts, total, prog.cmx_budget, tiles, pipelined)
        outermost = next(c[3] for c in cuts if c[0] == axis)
        runs = [(main, size, 0)]
        if main * size < master[axis]:      # a main run of equal blocks, then a tail block
            runs.append((1, master[axis] - main * size, main * size))
        # pipelined, no library stage, along the outermost axis: odd blocks shared by both
        # ACT SHAVEs too, so runs of them balance the tiles (``act_split.box_runs``)
        inner = _box_inner(seg_values, master, axis) \
            if pipelined and not softmax and outermost and axis == cuts[0][0] else None
        if inner is not None:
            chosen = [(count, size) for count, size, _ in runs]
            runs, offset = [], 0
            for count, size in box_runs(master[axis], chosen, total, prog.cmx_budget, tiles):
                runs.append((count, size, offset))
                offset += count * size
    shared: dict = {}       # per-tile stages' outputs (an excitation): computed once a tile
    for i, (count, chunk, offset) in enumerate(runs):
        boxes = shave_boxes(chunk, master[inner]) if inner is not None and chunk % 2 else None
        stages = act_stages(prog, graph, tok, seg, names, generated, timings, hook, config,
                            library, made, nhwc, seg_values, axis, chunk, outermost,
                            boxes, inner)
        last = i == len(runs) - 1
        shared = emit_blocks(prog, seg_values, stages, axis=axis, rank=rank,
                             extent=count * chunk if axis is not None else 1, blocks=count,
                             tiles=tiles, prefix=prefix + ("tail." if i else ""), gate=gate,
                             finish=finish if last else None, offset=offset,
                             first_tile=runs[0][0] % tiles if i else 0, inner=inner,
                             shared=shared)


def _box_inner(values: list[Value], master: tuple, axis: int) -> int | None:
    """The axis after ``axis`` in memory when every value spanning ``axis`` has the master's
    rank and one dims order, and it is at least 2 wide: a box of rows and a part of one row
    along it is then dense in each (``act_split.shave_boxes``); None otherwise."""
    spanning = [v for v in values if spans(v.type, axis, len(master))]
    orders = {v.type.order.perm for v in spanning}
    if not spanning or len(orders) != 1 or any(v.type.rank != len(master) for v in spanning):
        return None
    order = orders.pop()
    at = order.index(axis)
    if at + 1 >= len(order) or master[order[at + 1]] < 2:
        return None
    return order[at + 1]



def act_stages(prog, graph, tok, seg, names, generated, timings, hook, config,
               library: dict[int, LibraryCall], made: dict[tuple, str], nhwc: bool,
               seg_values: list[Value], axis: int | None, chunk: int | None,
               outermost: bool = True, boxes: list | None = None,
               inner: int | None = None) -> list[Stage]:
    """The block pipeline's stages for blocks of ``chunk`` elements along ``axis`` (None:
    whole tensors): library kernels, and one kernel generated per subgraph body at that
    size (an equal body, MobileNet's repeated blocks, shares one).  A block is halved over
    a tile's two ACT SHAVEs only along an ``outermost`` axis (every dim outside it in memory
    1), where its halves are dense, as kernels read them; or cut into ``boxes`` (rows along
    ``axis``, columns along ``inner``: ``act_split.shave_boxes``), a kernel per box size."""
    rank = len(seg.master)
    halves = len(boxes) if boxes else \
        2 if chunk is not None and chunk % 2 == 0 and outermost else 1
    type_of = {v.name: v.type for v in seg_values}
    stages = []
    for unit in seg.units:
        ins, outs = stage_io(tok, unit)
        ins, outs = [names[v] for v in ins], [names[v] for v in outs]
        # An output that does not span the axis (rank 0, or 1 along it) has no halves: such a
        # stage is one invocation on the whole block (and its kernel is generated for it).
        # Nor has one that boxes would cut along ``inner`` where it is 1 wide (a per-row
        # statistic): two boxes of a row would write its same bytes.
        parts = 1 if chunk is None or any(not spans(type_of[v], axis, rank) for v in outs) \
            or boxes and any(not spans(type_of[v], inner, rank) for v in outs) else halves
        if unit[0] == "op":
            call = library[unit[1]]
            prog.declare_kernel(call.declaration())
            stages.append(Stage(call.kernel, ins, outs, scalars=list(call.scalars), parts=parts))
            continue
        sub = tok.subgraphs[unit[1]]

        def kernel_of(body: Graph) -> str:
            return generated_kernel(prog, f"{graph.name}.{sub.name}",
                                    nhwc_ports(body) if nhwc else body, made, generated,
                                    timings, hook, config)

        if boxes and parts > 1:
            kernels = [kernel_of(retype(retype(sub.body, axis, rank, r1 - r0), inner, rank,
                                        x1 - x0)) for r0, r1, x0, x1 in boxes]
            stages.append(Stage(kernels[0], ins, outs, parts=parts, boxes=list(boxes),
                                box_kernels=kernels))
            continue
        body = sub.body if chunk is None else retype(sub.body, axis, rank, chunk // parts)
        stages.append(Stage(kernel_of(body), ins, outs, parts=parts))
    return stages



def generated_kernel(prog, base: str, body: Graph, made: dict[tuple, str],
                     generated: dict, timings: list, hook, config) -> str:
    """The name (``base``, ``GRAPH.SUBGRAPH``, made unique) of the kernel generated for
    ``body`` (a subgraph's body at a block's size): declared in ``prog`` and generated on
    first use, shared by every equal body (``made``: name by ``body_key``)."""
    key = body_key(body)
    if key in made:
        return made[key]
    name = base = sanitize(base)
    taken, n = set(made.values()), 1
    while name in taken:                    # the same subgraph at a tail's size
        name, n = f"{base}.{n}", n + 1
    made[key] = name
    show = (lambda stage, text, k=name: hook(f"@{k} {stage}", text)) if hook else None
    kernel = generate(body, name, print_after=show, config=config)
    timings.extend((f"{name}: {stage}", t) for stage, t in kernel.timings)
    generated[name] = kernel.obj
    params = ", ".join(f"{p.name}: {p.memref}" for p in kernel.decl.params)
    prog.kernels.append(f"kernel @{name}({params}) from generated")
    return name


def _one_block(prog, tok, seg, seg_values: list[Value], names,
               cut: tuple[int, int, bool], tiles: int) -> bool:
    """Whether the segment runs as one block rather than the even ``cut`` (``(axis, blocks,
    outermost)``, ``_even_cuts``' first): its tensors fit the CMX budget twice, as a cut's
    do, and the cost model says the blocks' fixed costs outweigh the work they share
    (``act_block_count.one_block_pays``)."""
    if prog.timing is None or 2 * sum(v.type.nbytes for v in seg_values) > prog.cmx_budget:
        return False
    axis, blocks, outermost = cut
    ops = sum(sum(1 for op in tok.subgraphs[i].body.ops if op.kind not in (PARAMETER, RESULT))
              for kind, i in seg.units if kind != "op")
    library = sum(1 for kind, _ in seg.units if kind == "op")
    return one_block_pays(seg_values, {names[v] for v in seg.reads(tok)},
                          {names[v] for v in seg.writes(tok)}, seg.master, axis, blocks,
                          outermost, ops, library, len(seg.units), tiles, prog.timing)


def _even_cuts(values: list[Value], master: tuple, forbidden: set[int],
               budget: int) -> list[tuple[int, int, bool]]:
    """``(axis, blocks, outermost)`` per axis that may be cut, outermost in memory first:
    the fewest blocks, at least four (or one per element), that divide it and fit
    ``budget`` twice; ``outermost``: every dim outside it in memory is 1."""
    if any(isinstance(d, Dynamic) for d in master):
        return []
    total = sum(v.type.nbytes for v in values)
    ddr = [v for v in values if v.kind == "input"] + [v for v in values if v.kind != "input"]
    first = next((v for v in ddr if v.type.rank == len(master)), None)
    order = first.type.order.perm if first is not None else tuple(range(len(master)))
    cuts = []
    for n, axis in enumerate(order):          # outermost in memory first
        extent = master[axis]
        if extent < 2 or axis in forbidden:
            continue
        for blocks in _divisors(extent):
            if (blocks >= 4 or blocks == extent) and 2 * total // blocks <= budget:
                cuts.append((axis, blocks, all(master[a] == 1 for a in order[:n])))
                break
    return cuts



def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (sqrt(n) steps, not n)."""
    small, large, d = [], [], 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]



def retype(body: Graph, axis: int, rank: int, size: int) -> Graph:
    """A copy of a subgraph body whose dims along master ``axis`` are ``size``."""
    out = copy.deepcopy(body)
    for op in out.ops:
        if op.type is not None and (op.kind in (PARAMETER, RESULT)):
            op.type = block_type(op.type, axis, rank, size)
        if op.kind == "Broadcast":
            t = TensorType(tuple(op.attrs["shape"]), op.type.elem, op.type.order)
            op.attrs["shape"] = block_type(t, axis, rank, size).dims
    infer_graph(out)
    return out

