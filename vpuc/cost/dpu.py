"""The cost of one DPU workload (a variant), mechanism by mechanism.

``dpu_cost(workload, params)`` returns every term, in NCE cycles, so the
simulator charges the total and the compiler (workload splitting, mode choice)
and the fidelity bench can see which mechanism dominates.  Formulas, with
``out = W x H x C`` the workload's output cuboid and ``grid``/``block`` those of
its execution mode (``modes.py``):

- ``compute`` (execution modes, per-op throughput):
  ``padded(out) * taps / rate[op class]``; ``padded`` rounds W, H, C up to the
  mode's grid; ``taps`` is ``K_in * kh * kw`` for dense ops (conv, matmul),
  ``kh * kw`` for depthwise and pooling, 1 for eltwise (which runs through the
  PPE).  A dense op of fewer than 16 input channels (a compressed convolution,
  ``in_channels`` 4) still takes 16 per tap: the MPE's cells multiply 16 input
  channels a cycle (VPUNN ``compute_Ideal_MAC_operations_cnt``, NPU2.7 and newer:
  "Channel less than 16 are special", counted as 16); its activation and weight
  bytes are its real channels' (``DENSE_LANES``).  Dense rate: VPUNN's peak (2048 int8 MACs/cycle, halved for float) times
  a fitted efficiency; the other rates are fitted.
- ``activation fetch``: the input window the output box needs, in bytes, read
  once per channel block of the mode (a dense op re-reads its input for every
  NTK block of output channels), over a fitted CMX read bandwidth.
- ``weight fetch``: the weights of the box's channels plus their weight table
  (vpux: 16 bytes per output channel), read once per spatial block (every NTHW
  block re-reads the weights), over a fitted CMX read bandwidth.
- ``output write``: the output box's bytes over a fitted write bandwidth.
- ``setup``: the fixed per-workload cost (descriptor load, pipeline fill and
  drain) of the op class, fitted; it is the floor of tiny workloads.

The DPU overlaps fetching with computing, imperfectly: the four streaming terms
combine as a p-norm, ``(sum t_i^p)^(1/p)`` (p = infinity would be the ideal
roofline max, p = 1 no overlap at all), with p fitted; setup adds on top.
Every fitted number is in the timing TOML with the fit that produced it.

An NCE permute (``permute``: the NPU compiler's ``NCEPermute`` / PermuteQuantize,
an NCHW input written NHWC by the DPU) is an eltwise ADD of its input with itself
(PPE scale 0.5) over the input reinterpreted: ``permute_workload``.
"""

from __future__ import annotations

import math
from functools import cached_property
from dataclasses import dataclass, field

from vpuc.cost.modes import MODE_NAMES, ModeGrid

OP_CLASS = {"conv": "dense", "matmul": "dense", "dwconv": "depthwise", "maxpool": "pool",
            "avgpool": "pool", "add": "eltwise", "mul": "eltwise", "permute": "eltwise"}
DENSE_LANES = 16             # input channels an MPE cell multiplies per cycle (VPUNN, NPU2.7)
PERMUTE_LANES = 16           # pixels per channel of the input as an NCE permute reads it
CLASSES = ("dense", "depthwise", "pool", "eltwise")
WEIGHT_TABLE_BYTES = 16      # vpux: a weights table entry is 4 x int32 per output channel


@dataclass(frozen=True)
class DpuParams:
    """The DPU part of the timing model, in NCE cycles (see the timing TOML)."""
    modes: dict[str, ModeGrid]
    default_mode: str
    dense_macs_per_cycle: dict[str, float]     # peak, by input element type
    dense_efficiency: float
    rates: dict[str, float]                    # depthwise/pool MACs, eltwise elements, per cycle (f16)
    int8_speedup: float                        # window and eltwise rates for 1-byte inputs
    activation_bytes_per_cycle: float
    weight_bytes_per_cycle: float
    output_bytes_per_cycle: float
    setup: dict[str, float]                    # per op class
    overlap: float                             # the p of the p-norm
    # (workload, mode) -> its cost, workload -> its cheapest mode: the lowering asks the
    # same workloads many times (ResNet-50: 505,434 costs of a few thousand workloads)
    known: dict = field(default_factory=dict, init=False, compare=False, repr=False)


@dataclass(frozen=True)
class DpuWorkload:
    """What the cost of one variant depends on: its op, output box and operand sizes."""
    op: str                          # conv, matmul, dwconv, maxpool, avgpool, add, mul
    elem: str                        # input element type name (f16, u8, ...)
    width: int                       # output box W (a matmul's rows)
    height: int                      # output box H (1 for a matmul)
    channels: int                    # output box C
    in_channels: int                 # K of a dense op; C otherwise
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    batch: int = 1
    in_bytes: int = 2                # bytes per input element
    out_bytes: int = 2
    weight_bytes: int = 2
    mode: str | None = None          # None: the cost model chooses


@dataclass(frozen=True)
class DpuCost:
    mode: str
    setup: float
    compute: float
    activation: float
    weights: float
    output: float
    overlap: float

    @cached_property          # a cost is asked again (``DpuParams.known``)
    def streaming(self) -> float:
        terms = (self.compute, self.activation, self.weights, self.output)
        p = self.overlap
        return sum(t ** p for t in terms) ** (1.0 / p)

    @property
    def cycles(self) -> float:
        return self.setup + self.streaming

    def terms(self) -> dict[str, float]:
        return {"setup": self.setup, "compute": self.compute, "activation": self.activation,
                "weights": self.weights, "output": self.output}


def op_class(op: str) -> str:
    if op not in OP_CLASS:
        raise ValueError(f"no DPU cost model for op '{op}'")
    return OP_CLASS[op]


def input_window(w: DpuWorkload) -> tuple[int, int]:
    """(columns, rows) of input one output box reads, halo included."""
    (kh, kw), (sh, sw) = w.kernel, w.stride
    return (w.width - 1) * sw + kw, (w.height - 1) * sh + kh


def dpu_cost(w: DpuWorkload, params: DpuParams, mode: str | None = None) -> DpuCost:
    """Every term of one workload's cost in ``mode`` (default: its own, else the arch's)."""
    name = mode or w.mode or params.default_mode
    return remembered(params, (w, name), lambda: _dpu_cost(w, params, name))


# Answers ``DpuParams.known`` holds before it starts afresh (a process compiling and
# simulating many models; ResNet-50's compile keeps 4,272).
KNOWN_LIMIT = 1 << 17


def remembered(params: DpuParams, key, make):
    """``params.known[key]``, made by ``make()`` the first time it is asked."""
    known = params.known.get(key)
    if known is None:
        if len(params.known) >= KNOWN_LIMIT:
            params.known.clear()
        known = params.known[key] = make()
    return known


def _dpu_cost(w: DpuWorkload, params: DpuParams, name: str) -> DpuCost:
    grid = params.modes[name]
    cls = op_class(w.op)
    kh, kw = w.kernel
    out = w.width * w.height * w.channels * w.batch
    padded = grid.padded(w.width, w.height, w.channels) * w.batch
    spatial_blocks, channel_blocks = grid.blocks(w.width, w.height, w.channels)
    cols, rows = input_window(w)
    if cls == "dense":
        taps = max(w.in_channels, DENSE_LANES) * kh * kw
        peak = params.dense_macs_per_cycle.get(w.elem)
        if peak is None:
            raise ValueError(f"the DPU cost model has no dense MACs/cycle for {w.elem} "
                             f"(timing file lists {', '.join(params.dense_macs_per_cycle)})")
        rate = peak * params.dense_efficiency
        weights = w.channels * w.in_channels * kh * kw * w.weight_bytes
        in_bytes = cols * rows * w.in_channels * w.in_bytes * channel_blocks
    else:
        taps = kh * kw if cls != "eltwise" else 1
        rate = params.rates[cls] * (params.int8_speedup if w.in_bytes == 1 else 1.0)
        weights = w.channels * kh * kw * w.weight_bytes if cls == "depthwise" else 0
        inputs = 2 if cls == "eltwise" else 1
        in_bytes = cols * rows * w.channels * w.in_bytes * inputs
    if cls in ("dense", "depthwise"):
        weights += WEIGHT_TABLE_BYTES * w.channels
    in_bytes *= w.batch
    return DpuCost(
        mode=name, setup=params.setup[cls], compute=padded * taps / rate,
        activation=in_bytes / params.activation_bytes_per_cycle,
        weights=weights * spatial_blocks / params.weight_bytes_per_cycle,
        output=out * w.out_bytes / params.output_bytes_per_cycle,
        overlap=params.overlap)


def permute_workload(positions: int, out_channels: int, elem: str, in_bytes: int,
                     out_bytes: int, mode: str | None = None) -> DpuWorkload:
    """The workload an NCE permute of ``positions`` pixels (N x H x W of its output box)
    into ``out_channels`` channels runs as.  The NPU compiler (openvinotoolkit/npu_plugin,
    ``ConvertIEToVPUNCE``'s NCEPermute and its lit test ``convert_vpu_nce_to_vpuip.mlir``,
    NPU37XX: a 1x3x224x224 NCHW input is a 1x32x3x1568 NHWC tensor, the output 1x32x4x1568
    in order NWCH) reads the NCHW bytes ``[C][H][W]`` as an NHWC tensor whose channels are
    a run of consecutive pixels, whose H is the input's channels and whose W the runs; the
    DPU adds it to itself (PPE scale 0.5, task type ELTWISE) and its output data unit writes
    ``[pixel][channel]``: the NHWC tensor, channels padded with zeros.  The eltwise box is
    therefore (W, H, C) = (positions / 16, out_channels, 16) here, runs of 16 pixels (any
    multiple of 16 pads alike on the mode grid)."""
    return DpuWorkload(op="permute", elem=elem, width=-(-positions // PERMUTE_LANES),
                       height=out_channels, channels=PERMUTE_LANES, in_channels=PERMUTE_LANES,
                       in_bytes=in_bytes, out_bytes=out_bytes, weight_bytes=in_bytes, mode=mode)


def choose_mode(w: DpuWorkload, params: DpuParams) -> str:
    """The workload's pinned mode, else the cheapest (ties: the arch's default first)."""
    if w.mode is not None:
        return w.mode
    return remembered(params, w, lambda: min(
        [params.default_mode] + [m for m in MODE_NAMES if m in params.modes
                                 and m != params.default_mode],
        key=lambda m: dpu_cost(w, params, m).cycles))


def dpu_variant_cycles(w: DpuWorkload, params: DpuParams, dispatch: float) -> int | float:
    """What one variant occupies its DPU for: the runtime's dispatch plus its cost in its
    pinned mode, else in the mode ``choose_mode`` picks, rounded up to whole cycles."""
    return dispatch + math.ceil(dpu_cost(w, params, choose_mode(w, params)).cycles)
