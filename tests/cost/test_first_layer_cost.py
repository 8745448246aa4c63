"""The cost of a network's first layer by its mechanisms (``vpuc/cost/dpu.py``): the NCE
permute as the eltwise workload the NPU runs, a compressed convolution's 16 lanes, and
what the lowering (``lower_dpu_permute``) saves on the model input's layer."""

from __future__ import annotations

import math

import pytest

from runtime_sim.engines.dpu import workload
from vpuc import api
from vpuc.cost import DpuWorkload, dpu_cost, load_timing
from vpuc.cost.bound import ideal_dpu_cycles
from vpuc.cost.dma import transfer_cost, transfer_cycles
from vpuc.cost.dpu import permute_workload
from vpuc.ir.tasks import DmaMode, DmaTask, DpuOp, DpuTask

TIMING = load_timing("NPU37XX")


def test_permute_is_an_eltwise_add_over_runs_of_16_pixels():
    """3x224x224 into 4 channels: 50176 pixels as 3136 runs of 16, H the 4 channels; the
    compute term is that box on the mode grid over the eltwise rate, and the add reads
    its input twice."""
    w = permute_workload(224 * 224, 4, "f16", 2, 2)
    assert (w.op, w.width, w.height, w.channels) == ("permute", 3136, 4, 16)
    dpu = TIMING.dpu
    for mode, grid in dpu.modes.items():
        cost = dpu_cost(w, dpu, mode)
        assert cost.compute == pytest.approx(grid.padded(3136, 4, 16) / dpu.rates["eltwise"])
        assert cost.activation == pytest.approx(3136 * 4 * 16 * 2 * 2
                                                / dpu.activation_bytes_per_cycle)
        assert cost.weights == 0
    # against the permuting DMA it replaces: one element per DMA cycle, DMA clock units
    dma = transfer_cost(True, 224 * 224 * 3 * 2, 2, True, 224 * 224 * 3 * 2, False, TIMING.dma)
    dma_cycles = transfer_cycles(dma, TIMING.ddr_bytes_per_cycle)
    assert dpu_cost(w, dpu).cycles * 10 < dma_cycles


def test_fewer_than_16_input_channels_take_16_lanes():
    """A compressed convolution (4 input channels) computes as 16 (VPUNN, NPU2.7), but its
    activation and weight fetch are its 4 channels'; the bound's ideal compute agrees."""
    base = dict(op="conv", elem="f16", width=112, height=8, channels=64, kernel=(7, 7),
                stride=(2, 2))
    four, sixteen = DpuWorkload(in_channels=4, **base), DpuWorkload(in_channels=16, **base)
    for mode in TIMING.dpu.modes:
        a, b = dpu_cost(four, TIMING.dpu, mode), dpu_cost(sixteen, TIMING.dpu, mode)
        assert a.compute == b.compute
        assert a.activation == pytest.approx(b.activation / 4)
        weights = lambda c: (64 * c * 49 * 2 + 16 * 64)     # weights + weight table
        assert a.weights / b.weights == pytest.approx(weights(4) / weights(16))
        assert a.cycles < b.cycles
    assert ideal_dpu_cycles(four, TIMING.dpu) == ideal_dpu_cycles(sixteen, TIMING.dpu)


def test_first_layer_permutes_on_the_dpu_and_compresses(tmp_path):
    """Every block of the NCHW input: a plain DMA of its rows, a permute into 4 NHWC
    channels, a conv reading those 4 (and 4-channel weights); the permute's workload is
    the runs of 16 pixels of its block."""
    from vpuc.onnx_import.zoo import ModelBuilder
    m = ModelBuilder(seed=0, opset=17)
    x = m.input("x", (1, 3, 64, 64))
    m.output(m.node("Conv", [x, m.weight((16, 3, 3, 3))], kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1]))
    program = api.compile(m.save(tmp_path / "m.onnx", "m"))
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    dpu = [t for t in tasks if isinstance(t, DpuTask)]
    permutes = [t for t in dpu if t.op is DpuOp.PERMUTE]
    convs = [t for t in dpu if t.op is DpuOp.CONV]
    assert permutes and len(permutes) == len(convs)
    loads = [t for t in tasks if isinstance(t, DmaTask) and ".load" in (t.label or "")]
    assert loads and all(t.mode is DmaMode.COPY for t in loads)    # no permuting load
    symbols = {b.name: b.type for b in program.module.buffers}
    for p in permutes:
        assert symbols[p.inputs[0]].dims[1] == 3 and symbols[p.output].dims[1] == 4
        tensors = {"in0": symbols[p.inputs[0]], "out": symbols[p.output]}
        w = workload(p, 0, tensors)
        rows, cols = symbols[p.output].dims[2:]
        assert (w.width, w.height) == (math.ceil(rows * cols / 16), 4)
    for c in convs:
        assert symbols[c.inputs[0]].dims[1] == 4 and symbols[c.weights].dims[1] == 4

