"""Verifier rule: the DPU's channel constraints, on programs the graph lowering made.

- a ``conv`` reads NHWC ("ZMajor") input whose channel count is a multiple of 16,
  and each variant writes a run of output channels that starts and ends on a
  multiple of 16 (``VPU_CHANNEL_ALIGNMENT = 16``, checked by ``verifyConvChannels``
  in the NPU compiler's ``src/vpux_compiler/src/dialect/VPUIP/nce_invariant.cpp``);
- an eltwise ``add``/``mul`` likewise reads and writes a multiple of 16 channels
  (``verifyEltwiseChannels``, same file), and a ``matmul`` -- a 1x1 convolution
  to the DPU -- reads K and writes N channels that are multiples of 16;
- a ``dwconv``, ``maxpool`` or ``avgpool`` variant covers 16, 32 or 64 channels
  starting on a multiple of 16 (``supportedChannelsDW = {64, 32, 16}`` in
  ``dialect/VPU/interfaces/workload_splitter_base.hpp``);
- but a ``conv`` may read exactly 4 input channels: NPU37XX's compressed
  convolution (``VPU.NCE.CompressConvolution``, input channels padded to
  ``VPU_COMPRESSED_INPUT_CHANNEL_NUM = 4``, ``cm_sp_pattern`` naming the real ones;
  ``NCECompressConvolutionOp::getInputChannelAlignment``);
- a ``permute`` (NCE permute) writes 4 channels (a compressed convolution's input)
  or a multiple of 16, every variant all of them.

The rule applies to modules whose graph was lowered (``graph = lowered``, set by
``lower-graph``, whose ``lower_dpu_channels`` pads and chunks to meet it); beside
hand-written tasks, to the lowered blocks' tasks only (``graph-blocks``: their
label prefixes, set by ``lower_blocks.py``).
Hand-written task lists are left to their authors: the simulator's DPU takes any
channel count, and the DPU model's tests use small ones on purpose.
"""

from __future__ import annotations

from vpuc.diagnostics import DiagnosticBag
from vpuc.ir.module import Module
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DpuOp, DpuTask

ALIGNMENT = 16
CHANNELWISE = (DpuOp.DWCONV, DpuOp.MAXPOOL, DpuOp.AVGPOOL)
ALIGNED = (DpuOp.CONV, DpuOp.ADD, DpuOp.MUL, DpuOp.MATMUL)   # multiples of 16, any count
CHANNELWISE_SIZES = (16, 32, 64)
COMPRESSED_CHANNELS = 4     # VPU_COMPRESSED_INPUT_CHANNEL_NUM


def check_dpu_channels(module: Module, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    if module.attributes.get("graph") != "lowered":
        return
    # Beside hand-written tasks, the lowered ones are labelled "BLOCK.*" (lower_blocks.py).
    blocks = module.attributes.get("graph-blocks")
    prefixes = tuple(f"{b}." for b in blocks.split(",")) if blocks else None
    for task_list in module.task_lists:
        for task in task_list.tasks:
            if prefixes is not None and not (task.label or "").startswith(prefixes):
                continue
            if isinstance(task, DpuTask) and task.op is DpuOp.PERMUTE:
                _check_permute(task, symbols, bag)
            elif isinstance(task, DpuTask) and (task.op in ALIGNED or task.op in CHANNELWISE):
                _check_task(task, symbols, bag)


def _check_task(task: DpuTask, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    source = symbols.region(task.inputs[0]) if task.inputs else None
    if task.op in ALIGNED and source is not None and len(source.type.bound_shape) in (2, 4):
        channels = source.type.bound_shape[1]
        compressed = task.op is DpuOp.CONV and channels == COMPRESSED_CHANNELS
        if channels % ALIGNMENT and not compressed:
            bag.error(task.inputs[0].loc,
                      f"dpu {task.op} input %{task.inputs[0]} has {channels} channels; the DPU "
                      f"reads a multiple of {ALIGNMENT} (pad the input and weights with zero "
                      "channels)")
    for variant in task.variants:
        first, last = variant.start[2], variant.end[2]
        count = last - first + 1
        if task.op in ALIGNED:
            bad = first % ALIGNMENT or count % ALIGNMENT
            want = f"a multiple of {ALIGNMENT} channels starting on one"
        else:
            bad = first % ALIGNMENT or count not in CHANNELWISE_SIZES
            want = (", ".join(map(str, CHANNELWISE_SIZES[:-1])) + f" or {CHANNELWISE_SIZES[-1]}"
                    f" channels starting on a multiple of {ALIGNMENT}")
        if bad:
            bag.error(variant.loc, f"dpu {task.op} variant covers channels {first}..{last} "
                      f"({count}); a DPU workload of this op takes {want}")


def _check_permute(task: DpuTask, symbols: SymbolTable, bag: DiagnosticBag) -> None:
    out = symbols.region(task.output)
    if out is None or len(out.type.bound_shape) != 4:
        return
    channels = out.type.bound_shape[1]
    if channels != COMPRESSED_CHANNELS and channels % ALIGNMENT:
        bag.error(task.output.loc, f"dpu permute output %{task.output} has {channels} channels; "
                  f"the DPU writes {COMPRESSED_CHANNELS} (a compressed convolution's input) or a "
                  f"multiple of {ALIGNMENT}")
        return
    for variant in task.variants:
        if (variant.start[2], variant.end[2]) != (0, channels - 1):
            bag.error(variant.loc, f"dpu permute variant covers channels {variant.start[2]}.."
                      f"{variant.end[2]}; a permute workload writes all {channels}")
