"""Verifier rules for DPU tasks: operands on the tile, shapes, window params, variants.

Shapes are logical NCHW.  Conv weights are [OC, IC, KH, KW]; depthwise weights
[C, 1, KH, KW]; matmul / fully connected takes input [M, K] and weights [N, K]
and gives [M, N].  Variant coordinates are inclusive output cuboids over
(x, y, z) = (W, H, C) for 4-D outputs and (x, y, z) = (0, M, N) for matmul.
"""

from __future__ import annotations

import math

from vpuc.arch import Arch
from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import POST_OP_ARITY, DpuOp, DpuTask
from vpuc.ir.types import ElemType
from vpuc.verifier.dpu_quant import check_quant

DPU_ELEMS = (ElemType.F16, ElemType.BF16, ElemType.U8, ElemType.I8)
# The output stage also writes f32 (partial sums): the NPU compiler's NPU37XX ODU rewriter
# (openvinotoolkit/npu_plugin, src/vpux_compiler/src/NPU37XX/dialect/VPUIPDPU/rewriters/
# dpu_invariant_block_rewriters.cpp, getOutDataWidth) maps an f32 output to ODU_DTYPE_32BIT.
DPU_OUTPUT_ELEMS = DPU_ELEMS + (ElemType.F32,)
# The NCE's largest kernel side: openvinotoolkit/npu_plugin, src/vpux_compiler/include/vpux/
# compiler/dialect/VPU/nce_invariant.hpp, NCEInvariant::MAX_KERNEL_SIZE = 11 (the NPU
# compiler's HandleLargeKernels pass splits larger pooling kernels into levels).
MAX_KERNEL = 11
MAX_VARIANTS_PAIRWISE = 512  # beyond this, overlap between variants is not checked pairwise


def output_extent(task: DpuTask, out_dims: tuple[int, ...]) -> tuple[int, int, int]:
    """(W, H, C) of the output in variant coordinates."""
    if len(out_dims) == 2:
        return (1, out_dims[0], out_dims[1])
    return (out_dims[3], out_dims[2], out_dims[1])


def window_params(task: DpuTask, weights_dims=None) -> tuple:
    """(kernel, stride, pad, dilation) with defaults filled in."""
    kernel = task.kernel or (tuple(weights_dims[2:4]) if weights_dims else (1, 1))
    return (kernel, task.stride or (1, 1), task.pad or (0, 0, 0, 0), task.dilation or (1, 1))


def expected_output(task: DpuTask, in_dims, weights_dims) -> tuple[int, ...] | None:
    op = task.op
    if op is DpuOp.MATMUL:
        return (in_dims[0], weights_dims[0]) if weights_dims else None
    if op in (DpuOp.ADD, DpuOp.MUL):
        return tuple(in_dims)
    if op is DpuOp.PERMUTE:       # the output's channels may be more (zero-padded)
        return None
    kernel, stride, pad, dilation = window_params(task, weights_dims)
    n, c, h, w = in_dims
    oh = (h + pad[0] + pad[1] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w + pad[2] + pad[3] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    oc = weights_dims[0] if op is DpuOp.CONV and weights_dims else c
    return (n, oc, oh, ow)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def check_dpu_task(task: DpuTask, arch: Arch, symbols: SymbolTable, bag: DiagnosticBag,
                   checked: set[tuple] | None = None) -> None:
    """``checked``: the shape keys (``_shape_key``) that passed the shape and variant rules
    before, in this module; a task with one of them is not checked again."""
    op = task.op
    errors_before = bag.error_count
    tile_ok = 0 <= task.tile < arch.tiles
    if not tile_ok:
        bag.error(task.loc, f"dpu task on tile {task.tile}; {arch.name} has tiles "
                  f"0..{arch.tiles - 1}")
    if len(task.inputs) != op.num_inputs:
        bag.error(task.loc, f"dpu {op} takes {_plural(op.num_inputs, 'input')}; got "
                  f"{len(task.inputs)}")
    if op.has_weights and task.weights is None:
        bag.error(task.loc, f"dpu {op} needs weights(%w)")
    if not op.has_weights and (task.weights is not None or task.bias is not None):
        bag.error(task.loc, f"dpu {op} takes no weights or bias")
    if not op.has_window:
        for name in ("kernel", "stride", "pad", "dilation"):
            if getattr(task, name) is not None:
                bag.error(task.param_locs.get(name, task.loc),
                          f"dpu {op} has no window; '{name}(...)' does not apply")
    bad_params = False
    for name, size in (("kernel", 2), ("stride", 2), ("pad", 4), ("dilation", 2)):
        values = getattr(task, name)
        if values is not None and (len(values) != size or min(values) < (0 if name == "pad" else 1)):
            low = "non-negative" if name == "pad" else "positive"
            what = "(top, bottom, left, right)" if name == "pad" else "(height, width)"
            bag.error(task.param_locs.get(name, task.loc), f"{name}(...) takes {size} {low} "
                      f"integers {what}; got ({', '.join(map(str, values))})")
            bad_params = True
    if bad_params:
        return
    if task.post is not None and len(task.post.params) != POST_OP_ARITY[task.post.kind]:
        bag.error(task.post.loc, f"post {task.post.kind} takes "
                  f"{_plural(POST_OP_ARITY[task.post.kind], 'parameter')}; got "
                  f"{len(task.post.params)}")
    if not task.variants:
        bag.error(task.loc, "dpu task has no variants; expected at least one 'variant start(...) "
                  "end(...)'")
    regions = {}
    operands = [(r, "dpu input") for r in task.inputs] + [(task.output, "dpu output")]
    operands += [(r, role) for r, role in ((task.weights, "dpu weights"), (task.bias, "dpu bias"),
                                           (task.quant and task.quant.scale, "dpu scale"))
                 if r is not None]
    for ref, role in operands:
        region = symbols.require_region(ref, ref.loc, role)
        regions[role if role != "dpu input" else f"in{len(regions)}"] = region
        if region is None:
            continue
        if tile_ok and (region.kind is not BufferKind.CMX or region.tile != task.tile):
            where = f"the CMX of tile {region.tile}" if region.kind is BufferKind.CMX else "DDR"
            bag.error(ref.loc, f"{role} %{ref} is in {where}; expected the CMX of tile "
                      f"{task.tile}, where the DPU runs")
        allowed = DPU_OUTPUT_ELEMS if role == "dpu output" else DPU_ELEMS
        if role not in ("dpu bias", "dpu scale") and region.type.elem not in allowed:
            bag.error(ref.loc, f"{role} %{ref} is {region.type.elem}; the DPU "
                      + ("writes " if role == "dpu output" else "takes ")
                      + ", ".join(map(str, allowed)))
    if task.broadcast_outputs and tile_ok and regions.get("dpu output") is not None:
        _check_broadcast_outputs(task, regions["dpu output"], symbols, bag)
    if any(r is None for r in regions.values()) or bag.error_count > errors_before:
        return
    if task.quant is not None:
        check_quant(task, regions, bag)
        if bag.error_count > errors_before:
            return
    if checked is None:
        _check_shapes(task, regions, bag)
        return
    key = _shape_key(task, regions)
    if key not in checked:
        _check_shapes(task, regions, bag)
        if bag.error_count == errors_before:
            checked.add(key)


def _check_broadcast_outputs(task: DpuTask, output, symbols: SymbolTable,
                             bag: DiagnosticBag) -> None:
    """``out(%y, %copy...)``: each copy the output's type and shape in the CMX of another
    tile, one per tile, which the DPU's output stage writes besides its own."""
    tiles = {task.tile: task.output}
    for ref in task.broadcast_outputs:
        region = symbols.require_region(ref, ref.loc, "dpu output")
        if region is None:
            continue
        if region.kind is not BufferKind.CMX:
            bag.error(ref.loc, f"dpu output copy %{ref} is in DDR; a DPU writes its output "
                      "copies into the CMX of other tiles")
            continue
        if region.tile in tiles:
            first = tiles[region.tile]
            bag.error(ref.loc, f"dpu output copy %{ref} is in the CMX of tile {region.tile}, "
                      f"where %{first} already is; expected one output per tile",
                      ((first.loc, f"%{first} on tile {region.tile}"),))
            continue
        tiles[region.tile] = ref
        if region.type.elem is not output.type.elem or region.type.dims != output.type.dims:
            bag.error(ref.loc, f"dpu output copy %{ref} is {region.type}; expected the "
                      f"output %{task.output}'s {output.type}")


def _shape_key(task: DpuTask, regions) -> tuple:
    """Everything ``_check_shapes`` reads but the locations: it passes or fails alike for
    tasks of equal keys (the tasks of a tiled layer mostly share one)."""
    return (task.op, task.kernel, task.stride, task.pad, task.dilation,
            tuple((role, region.type.bound_shape) for role, region in regions.items()),
            tuple((v.start, v.end) for v in task.variants))


def _check_shapes(task: DpuTask, regions, bag: DiagnosticBag) -> None:
    op = task.op
    inp = regions["in0"].type.bound_shape
    out = regions["dpu output"].type.bound_shape
    weights = regions["dpu weights"].type.bound_shape if "dpu weights" in regions else None
    want_rank = 2 if op is DpuOp.MATMUL else 4
    if len(inp) != want_rank or len(out) != want_rank:
        bag.error(task.loc, f"dpu {op} takes a rank-{want_rank} input and output; got a "
                  f"rank-{len(inp)} input and a rank-{len(out)} output")
        return
    if op is DpuOp.ADD or op is DpuOp.MUL:
        other = regions.get("in1")
        if other is not None and other.type.bound_shape != inp:
            bag.error(task.loc, f"dpu {op} inputs have shapes {inp} and "
                      f"{other.type.bound_shape}; expected equal shapes")
    if weights is not None:
        want = {DpuOp.CONV: (None, inp[1]), DpuOp.DWCONV: (inp[1], 1),
                DpuOp.MATMUL: (None, inp[1])}[op]
        if len(weights) != (2 if op is DpuOp.MATMUL else 4) or any(
                w is not None and w != got for w, got in zip(want, weights)):
            layout = "[N, K]" if op is DpuOp.MATMUL else (
                "[OC, IC, KH, KW]" if op is DpuOp.CONV else "[C, 1, KH, KW]")
            bag.error(task.weights.loc, f"dpu {op} weights %{task.weights} have shape "
                      f"{weights}; expected {layout} for input {inp}")
            return
        if task.kernel is not None and op is not DpuOp.MATMUL and tuple(weights[2:]) != task.kernel:
            bag.error(task.param_locs.get("kernel", task.loc), f"kernel{task.kernel} does not "
                      f"match the weights %{task.weights}, whose KH, KW are {tuple(weights[2:])}")
            return
    if "dpu bias" in regions:
        bias = regions["dpu bias"].type.bound_shape
        channels = out[1]
        # (OC,) or (1, OC, 1, 1); or any shape of OC values read in logical order: a view
        # into the rows after a layer's weights, where the lowering packs its bias (the
        # NPU's weights table travels with the weights: one DMA)
        if math.prod(bias) != channels:
            bag.error(task.bias.loc, f"dpu bias %{task.bias} has shape {bias}; expected "
                      f"({channels},), one value per output channel")
    if op is DpuOp.PERMUTE and (out[1] < inp[1] or (out[0], *out[2:]) != (inp[0], *inp[2:])):
        bag.error(task.output.loc, f"dpu permute output %{task.output} has shape {tuple(out)}; "
                  f"expected the input's {tuple(inp)} with at least its {inp[1]} channels "
                  "(more are zero-padded)")
        return
    if op.has_window:
        kernel = window_params(task, weights)[0]
        if max(kernel) > MAX_KERNEL:
            bag.error(task.param_locs.get("kernel", task.loc), f"dpu {op} kernel{tuple(kernel)} "
                      f"is beyond the NCE's {MAX_KERNEL} x {MAX_KERNEL} window; split it into "
                      "levels of smaller kernels (as the NPU compiler's HandleLargeKernels does)")
    expected = expected_output(task, inp, weights)
    if expected is not None and tuple(out) != expected:
        bag.error(task.output.loc, f"dpu {op} output %{task.output} has shape {tuple(out)}; "
                  f"the input, weights and window give {expected}")
        return
    _check_variants(task, output_extent(task, out), bag)


def _check_variants(task: DpuTask, extent: tuple[int, int, int], bag: DiagnosticBag) -> None:
    covered = 0
    boxes = []
    for variant in task.variants:
        if any(s > e or s < 0 or e >= limit for s, e, limit in zip(variant.start, variant.end, extent)):
            bag.error(variant.loc, f"variant start{variant.start} end{variant.end} is outside "
                      f"the output; expected 0 <= start <= end < {extent} in (x, y, z)")
            return
        boxes.append((variant.start, variant.end, variant))
        covered += _volume(variant.start, variant.end)
    if len(boxes) <= MAX_VARIANTS_PAIRWISE:
        for i, (s1, e1, v1) in enumerate(boxes):
            for s2, e2, v2 in boxes[i + 1:]:
                if all(a0 <= b1 and b0 <= a1 for a0, a1, b0, b1 in zip(s1, e1, s2, e2)):
                    bag.error(v2.loc, "variant overlaps an earlier variant of the same task",
                              ((v1.loc, "the earlier variant"),))
                    return
    total = extent[0] * extent[1] * extent[2]
    if covered != total:
        bag.error(task.loc, f"the variants cover {covered} of the {total} output elements of "
                  f"{extent} (x, y, z); expected them to tile the output exactly")


def _volume(start, end) -> int:
    return (end[0] - start[0] + 1) * (end[1] - start[1] + 1) * (end[2] - start[2] + 1)
