"""One graph block's program text: its condensed graph cut into segments (``lower_segments``)
and each segment lowered in order, as ACT SHAVE block pipelines (``lower_act``), DPU layers
(``lower_dpu``), library kernels (``lower_library``), DMA copies (``lower_dma``) or fused
pipelines (``fuse_epilogue``), with the values between them in DDR or kept in CMX
(``resident``).  ``lower_graph`` (the pass; its docstring is the overview) parses the text
and schedules it.
"""

from __future__ import annotations

import time

from vpuc.fusion.blocked_program import ProgramText, label, sanitize
from vpuc.fusion.channel_scale_dpu import channel_scales_to_dpu
from vpuc.fusion.concat_in_place import concat_aliases
from vpuc.fusion.slice_in_place import slice_aliases, viewed_slices
from vpuc.fusion.fold_views import fold_views, folded_value
from vpuc.fusion.fuse_epilogue import emit_fused, epilogue_for, fusable
from vpuc.fusion.fuse_conv import weights_fit
from vpuc.fusion.fuse_pool import worth_fusing
from vpuc.fusion.fuse_halo_conv import chain_worth, halo_cheaper
from vpuc.fusion.lower_act import emit_act, generated_kernel
from vpuc.fusion.lower_dma import dma_ops, emit_dma
from vpuc.fusion.lower_dpu import emit_layer
from vpuc.fusion.lower_dpu_scale import choose_dpu, emit_scale, scale_product
from vpuc.fusion.lower_dpu_scale_weights import WeightsScale, chosen_folds
from vpuc.fusion.lower_gather import GATHER_OP, emit_gather
from vpuc.fusion.lower_topk import TOPK_OP, emit_topk
from vpuc.fusion.lower_library import emit_library_segment
from vpuc.fusion.lower_provenance import LayerTable, segment_ops
from vpuc.fusion.large_kernels import expand_large_kernels
from vpuc.fusion.lower_resize import expand_linear_resizes
from vpuc.fusion.power_forms import rewrite_powers
from vpuc.fusion.split_reductions import split_reductions
from vpuc.fusion.lower_segments import (graph_segments, graph_values, left_out, segment_prefix,
                                        segment_values)
from vpuc.fusion.resident import resident_room, resident_values
from vpuc.fusion.resident_measure import measured_rooms, value_reads, value_spans
from vpuc.fusion.schedule import EARLY_CMX_BYTES, early_bytes
from vpuc.fusion.schedule_layouts import ddr_layouts
from vpuc.fusion.subgraph import tokenize
from vpuc.fusion.targets import get_target
from vpuc.ir.graph import Graph
from vpuc.ir.module import Module


def lower(graph: Graph, module: Module, generated: dict, timings: list, hook, tiles: int,
          blocks: int | None = None, config=None, timing=None, dma_channels: int = 2,
          schedule: str = "naive", gates: set[str] | None = None,
          cmx_budget: int = 1 << 20, cmx_bytes: int | None = None,
          order: list | None = None, resident: list | None = None,
          barriers: int = 64, peaks: dict | None = None,
          baseline: set[str] | None = None, exclude: set[str] = frozenset(),
          spans: dict | None = None, reads: dict | None = None,
          output_copies: bool = True) -> str | None:
    """The VIR text of the program for ``graph`` (see the module docstring); ``blocks``
    overrides the number of blocks of ACT segments (it must divide the chosen axis);
    ``schedule`` other than naive lays out values as ``schedule_layouts.ddr_layouts`` says; the
    segment gate barriers are added to ``gates``; ``cmx_budget`` is the bytes of a tile's
    CMX a layer's or segment's blocks may use (the compile option,
    ``PassContext.cmx_budget``; this default is NPU37XX's); ``cmx_bytes``, a tile's CMX,
    tells the DPU layers how much of their weights the schedule prefetches; ``order``
    receives each segment's task-label prefix and gate barrier (None for the last);
    ``resident``: under a schedule other than naive, values between DPU and ACT segments
    stay in CMX when they fit (``resident.py``), and their names are added to it (None:
    every value between segments in DDR); ``barriers``: the target's physical barriers
    (``ProgramText.physical_barriers``); ``peaks``: each segment's CMX peak per tile
    measured on a program lowered before (``resident_measure.segment_peaks``), the room
    values kept in CMX have then, and None returned when that keeps no value beyond
    ``baseline`` (the earlier program's) in CMX; ``exclude``: values kept in DDR anyway;
    ``spans`` receives each value kept in CMX's segment prefixes, ``reads`` how many
    segments read it; ``output_copies``: DPU layers may write such a value from another
    tile as an output copy (``resident.cast_blocks``)."""
    clock = time.perf_counter()
    expand_linear_resizes(graph)
    expand_large_kernels(graph)        # pools beyond the NCE's 11 x 11 window, in levels
    split_reductions(graph)            # axes not adjacent in memory: a chain of reductions
    rewrite_powers(graph)              # x ** c by square roots and products, where cheaper
    if schedule != "naive":
        channel_scales_to_dpu(graph)   # x * s[c] by a constant: a DPU depthwise 1x1
    tok = tokenize(graph, get_target("shave"))
    timings.append(("tokenize", time.perf_counter() - clock))
    library, layers, own = left_out(graph, tok)
    segments = graph_segments(graph, tok, library, layers, dma_ops(graph, tok), own)
    if schedule != "naive":
        segments = fold_views(graph, segments)
    values, names = graph_values(graph, tok, segments)
    nhwc_acts: set[int] = set()
    in_place: dict[int, set[str]] = {}
    fused = {} if schedule == "naive" else fusable(
        tok, segments, lambda seg: seg.reads(tok), lambda seg: seg.writes(tok),
        {op.operands[0] for op in graph.results})
    fused = {s: f for s, f in fused.items() if f[0] not in ("conv", "halo") or weights_fit(
        f[1], graph.index(), cmx_budget)}
    if schedule != "naive":
        seg_values = segment_values(tok, segments, names)
        values, nhwc_acts = ddr_layouts(values, seg_values)
        boxes = {i: tuple(zip(*(seg.dma.attrs[a] for a in ("begin", "end", "step"))))
                 for i, seg in enumerate(segments)
                 if seg.dma is not None and seg.dma.kind == "Slice"}
        if resident is not None:
            room = resident_room(cmx_bytes, cmx_budget, EARLY_CMX_BYTES)
            sizes = {v.name: v.type.nbytes for v in values}
            # a chain (a depthwise, its 1x1, its 3x3: fuse_halo_conv) wherever the cost model
            # finds it cheaper than the three apart, their values kept in CMX or not; other
            # pools, 1x1s or 3x3s on blocks only where the value between would not stay in
            # CMX, a 3x3 where the cost model finds its copies cheaper than DDR's round trip
            # and the pair's busiest engine sooner fused (``halo_bound``)
            chains = {s for s, f in fused.items() if f[0] == "conv" and s + 1 in fused
                      and fused[s + 1][0] == "halo" and chain_worth(
                          segments[s].layer, fused[s + 1][1], graph.index(), cmx_budget,
                          timing)}
            fused = {s: f for s, f in fused.items() if f[0] not in ("pool", "conv", "halo")
                     or s in chains or s - 1 in chains
                     or (worth_fusing(sizes[names[segments[s].layer.output]], room)
                         and (f[0] != "halo" or halo_cheaper(
                             segments[s].layer, f[1], graph.index(), cmx_budget, timing,
                             tiles)))}
            prefixes = _segment_prefixes(tok, segments, fused)
            rooms = None if peaks is None else measured_rooms(
                peaks, prefixes, tiles, cmx_bytes, EARLY_CMX_BYTES, room)
            values = resident_values(
                values, seg_values,
                {names[segments[s].layer.output] for s in fused} | set(exclude), tiles,
                room, rooms, viewed_slices(values, seg_values, boxes))
            resident += [v.name for v in values if v.tile is not None]
            if spans is not None:
                spans.update(value_spans(seg_values, prefixes, set(resident)))
            if reads is not None:
                reads.update(value_reads(seg_values, set(resident)))
            if baseline is not None and set(resident) <= baseline:
                return None
        # Concat operands a DPU layer writes straight into their slice of the result
        values, in_place = concat_aliases(values, seg_values, {
            i: seg.dma.attrs["axis"] % seg.dma.type.rank for i, seg in enumerate(segments)
            if seg.dma is not None and seg.dma.kind == "Concat"})
        # Slices of unit steps read where they lie in their source, not copied
        values, sliced = slice_aliases(values, seg_values, boxes)
        in_place.update(sliced)
    # the cost model's numbers (vpuc.cost.Timing) and the DMA channels the target has
    prog = ProgramText(timing=timing, dma_channels=dma_channels, cmx_budget=cmx_budget,
                       physical_barriers=barriers, output_copies=output_copies,
                       prefetch_bytes=0 if schedule == "naive" or cmx_bytes is None
                       else early_bytes(cmx_bytes, cmx_budget))
    prog.declare(values)
    by_name = {v.name: v for v in values}
    single = len(segments) == 1
    made: dict[tuple, str] = {}         # generated kernel by body_key
    gate: tuple[str, ...] = ()
    layers = LayerTable()
    # squeeze-excite products folded into the projection's weights (lower_dpu_scale_weights)
    folds = {} if schedule == "naive" or blocks is not None else chosen_folds(
        prog, graph, tok, segments, names, by_name, fused, tiles)
    skipped: set[int] = {fold.product for fold in folds.values()}
    def late_finish(prefix: str) -> str:
        """A gate barrier for a segment first thought the last (a fused chain's layers
        turned out to be segments after all): declared, and recorded in ``order``'s last
        entry and ``gates``."""
        finish = f"{prefix}finished"
        prog.barriers.append(f"barrier %{finish}")
        if order is not None:
            order[-1] = (order[-1][0], finish)
        if gates is not None:
            gates.add(finish)
        return finish

    for s, seg in enumerate(segments):
        if prog.weights_scale is not None:      # the last segment's fold, checked
            prog.weights_scale.finish(prog)
        copied = [g for g in seg.dma.operands if names[g] not in in_place.get(s, ())] \
            if seg.dma is not None else None
        if s in skipped or copied == []:       # a Concat all of whose operands are in place
            continue
        prefix = "" if single and seg.units else segment_prefix(tok, seg)
        layers.add(prefix, segment_ops(graph, tok, seg))
        fold = folds.get(s)
        if fold is not None:
            layers.add(prefix, segment_ops(graph, tok, segments[fold.product]))
            prog.weights_scale = WeightsScale(by_name[names[fold.se.e]], seg.layer.op,
                                              len(prog.dpu))
        sub = fused.get(s)
        # a depthwise's 1x1 whose own 3x3 runs on its blocks: both on the depthwise's
        chained = sub is not None and sub[0] == "conv" and s + 1 in fused \
            and fused[s + 1][0] == "halo"
        span = 0 if sub is None else 1 + chained
        finish = (None if s + span == len(segments) - 1
                  else f"{prefix}finished")
        if order is not None:
            order.append((label(prefix).removesuffix("."), finish))
        if finish:
            prog.barriers.append(f"barrier %{finish}")
            if gates is not None:
                gates.add(finish)
        if seg.layer is not None:
            clock = time.perf_counter()
            renamed = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
            renamed.update({g: folded_value(a, by_name[names[a.base]], tok.graph_index().producer(g).type)
                            for g, a in seg.aliases.items()})
            if fold is not None:           # the projection reads x, its weights scaled
                renamed[fold.se.y] = by_name[names[fold.se.x]]
            if sub is not None:
                tries = [(2, fused[s + 1][1])] if chained else []
                for span, halo in tries + [(1, None)]:
                    y, epilogue = epilogue_for(sub, halo, seg, graph, tok, by_name, names,
                                               made, generated, prog, config, timings, timing)
                    # a fused pool's or conv's blocks are the layer's own rows: it retargets
                    # their stores
                    into = {} if sub[0] in ("pool", "conv", "halo") \
                        else {seg.layer.output: by_name[names[y]]}
                    if span == 1 and chained and finish is None:    # the 3x3 after it
                        finish = late_finish(prefix)
                    if emit_fused(prog, seg.layer, {**renamed, **into},
                                  tok.graph_index(), tiles, prefix, gate, finish, epilogue,
                                  names[seg.layer.output], names[y]):
                        break
                else:
                    span = 0
                if span:
                    for j in range(1, span + 1):
                        skipped.add(s + j)
                        layers.add(prefix, segment_ops(graph, tok, segments[s + j]))
                    if span == 2:         # the 1x1's output never exists either
                        mid = names[segments[s + 1].layer.output]
                        prog.buffers = [b for b in prog.buffers
                                        if not b.startswith(f"ddr %{mid} :")]
                    timings.append((f"dpu {seg.layer.op.label}", time.perf_counter() - clock))
                    gate = (finish,) if finish else ()
                    continue
                if finish is None:            # the layer after it is a segment after all
                    finish = late_finish(prefix)
            emit_layer(prog, seg.layer, renamed, tok.graph_index(), tiles, prefix, gate, finish)
            timings.append((f"dpu {seg.layer.op.label}", time.perf_counter() - clock))
        elif seg.dma is not None and seg.dma.kind == GATHER_OP:
            emit_gather(prog, seg.dma, *(by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)),
                        budget=prog.cmx_budget, prefix=prefix, gate=gate, finish=finish,
                        tiles=tiles)
        elif seg.dma is not None and seg.dma.kind == TOPK_OP:
            emit_topk(prog, seg.dma, *(by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)),
                      budget=prog.cmx_budget, prefix=prefix, gate=gate, finish=finish)
        elif seg.dma is not None:
            renamed = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
            emit_dma(prog, seg.dma, renamed, prefix, gate, finish,
                     frozenset(g for g in seg.dma.operands if names[g] in in_place.get(s, ())))
        elif seg.library is not None:
            op = seg.library.op
            emit_library_segment(prog, seg.library, by_name[names[op.operands[0]]],
                                 by_name[names[op.result]], tiles=tiles, budget=prog.cmx_budget,
                                 prefix=prefix, gate=gate, finish=finish)
        elif not (schedule != "naive" and blocks is None and _scale_on_dpu(
                prog, graph, tok, seg, by_name, names, generated, timings, hook, tiles, config,
                prefix, gate, finish, made)):
            emit_act(prog, graph, tok, seg, values, names, generated, timings, hook, tiles,
                     blocks, config, prefix, gate, finish, library, made,
                     nhwc=s in nhwc_acts, pipelined=schedule != "naive")
        gate = (finish,) if finish else ()
    if prog.weights_scale is not None:
        prog.weights_scale.finish(prog)
    prog.drop_unused(prog.redeclared | {names[f.se.y] for f in folds.values()})
    prog.layers = layers.lines()
    return prog.render(sanitize(module.name), module.arch, tiles)



def _segment_prefixes(tok, segments, fused) -> list[str]:
    """Each segment's task-label prefix; a segment fused into the DPU layer before it
    (``fuse_epilogue``, ``fuse_pool``, ``fuse_conv``) runs on that layer's blocks and so
    takes its prefix."""
    prefixes = [segment_prefix(tok, seg) for seg in segments]
    for s in fused:
        if s + 1 < len(prefixes):
            prefixes[s + 1] = prefixes[s]
    return prefixes


def _scale_on_dpu(prog, graph, tok, seg, by_name, names, generated, timings, hook, tiles,
                  config, prefix, gate, finish, made) -> bool:
    """Emit an ACT segment that is a squeeze-excite product as DPU depthwise 1x1 tasks
    (``lower_dpu_scale``) when the cost model finds the DPU faster; whether it did."""
    renamed = {g: by_name[names[g]] for g in seg.reads(tok) + seg.writes(tok)}
    se = scale_product(tok, seg, {g: v.type for g, v in renamed.items()})
    if se is None or renamed[se.x].kind == "temp" or not renamed[se.y].in_ddr:
        return False
    # the weights come from DDR: the excitation's input, or the excitation itself; an
    # excitation computed here is read by nothing else
    source = se.s if se.excite is not None else se.e
    if renamed[source].kind == "temp" or (se.excite is not None and se.e in renamed
                                          and renamed[se.e].in_ddr):
        return False
    op = graph.index().producer(se.y)
    blocks = choose_dpu(prog, se, renamed[se.x].type, renamed[se.y].type, tiles, op, config)
    if blocks is None:
        return False
    clock = time.perf_counter()
    emit_scale(prog, se, renamed, tiles, prefix, gate, finish, blocks,
               lambda name, body: generated_kernel(prog, f"{graph.name}.{name}", body, made,
                                                   generated, timings, hook, config))
    timings.append((f"dpu scale {op.label}", time.perf_counter() - clock))
    return True
