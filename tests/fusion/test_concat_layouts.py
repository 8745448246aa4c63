"""Values between segments stay NHWC in DDR when a Concat or an ACT segment of per-channel
constants reads them (``vpuc/fusion/schedule_layouts.py``): the pattern of the ``onnx``
package's Inception v2, DenseNet-121 and SqueezeNet, where every such value used to be
stored by a permuting DMA, one element at a time, from the DPU's NHWC output into an
NCHW buffer.  A small DenseNet-like block: a stem Conv, two branch Convs concatenated
along channels, a BatchNorm of the concatenation (a per-channel scale and shift, with
Caffe2's extra Mul and Add folded into it; a DPU depthwise 1x1 under the default
schedule), Relu, a 1x1 Conv, a second Concat of that with the stem's output, and a last
1x1 Conv.  Under ``--schedule default`` no DMA permutes except the
network output's store, each schedule computes every layer within its derived bound
(``fusion_testlib.layers_within_bounds``), the Concats'
operands are written into their results in place, and the cycles drop well below those of the
same program with the Concats' values in the graph's order."""

from __future__ import annotations

import numpy as np
import pytest

from runtime_sim.bound_input import program_bound
from fusion_testlib import both_schedules, buffer_roots, layers_within_bounds
from vpuc import api
from vpuc.fusion import schedule_layouts
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaMode, DmaTask
from vpuc.onnx_import.zoo import ModelBuilder

SIZE, C = 16, 32


def _model(tmp_path) -> str:
    m = ModelBuilder(seed=12, opset=13)
    x = m.input("x", [1, 16, SIZE, SIZE])
    stem = m.node("Relu", [m.node("Conv", [x, m.weight((C, 16, 3, 3)), m.weight((C,), 0.1)],
                                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    a = m.node("Conv", [stem, m.weight((C, C, 1, 1)), m.weight((C,), 0.1)], kernel_shape=[1, 1])
    b = m.node("Conv", [stem, m.weight((C, C, 3, 3)), m.weight((C,), 0.1)],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    cat = m.node("Concat", [a, b], axis=1)
    rng = np.random.default_rng(3)
    gamma, beta, mean = (rng.standard_normal((3, 2 * C)) * 0.3 + [[1], [0], [0]]).astype(np.float32)
    var = rng.uniform(0.5, 1.5, 2 * C).astype(np.float32)
    norm = m.node("BatchNormalization", [cat, *(m.init(v, n) for v, n in (
        (gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var")))])
    axes = m.init(np.asarray([1, 2], np.int64), "axes")
    scale = m.node("Unsqueeze", [m.init(rng.uniform(0.5, 1.5, 2 * C).astype(np.float32), "s"), axes])
    shift = m.node("Unsqueeze", [m.init(rng.uniform(-0.1, 0.1, 2 * C).astype(np.float32), "t"), axes])
    act = m.node("Relu", [m.node("Add", [m.node("Mul", [norm, scale]), shift])])
    c = m.node("Conv", [act, m.weight((C, 2 * C, 1, 1)), m.weight((C,), 0.1)], kernel_shape=[1, 1])
    cat2 = m.node("Concat", [stem, c], axis=1)
    m.output(m.node("Conv", [cat2, m.weight((C, 2 * C, 1, 1))], kernel_shape=[1, 1]))
    return m.save(tmp_path / "m.onnx", "m")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = _model(tmp_path_factory.mktemp("cat"))
    x = np.random.default_rng(5).standard_normal((1, 16, SIZE, SIZE)).astype(np.float16)
    out = both_schedules(path, x, reference=True)
    return out


def test_no_permuting_store_but_the_outputs(runs):
    program, _ = runs["default"]
    root = buffer_roots(program)
    outputs = {b.name for b in program.module.buffers if b.kind is BufferKind.OUTPUT}
    permutes = [t for tl in program.module.task_lists for t in tl.tasks
                if isinstance(t, DmaTask) and t.mode is DmaMode.PERMUTE]
    assert all(t.dst.split("[")[0].lstrip("%") in outputs or root(t.dst) in outputs
               for t in permutes), [(t.label, t.src, t.dst) for t in permutes]


def test_concat_operands_are_written_in_place(runs):
    """The stem, the branch Convs and the 1x1 write their slices of the Concats' results
    directly (``concat_in_place.py``; the branch Convs read the stem's output there): no
    DDR -> DDR copy is left, and the simulation sees no race."""
    program, sim = runs["default"]
    root = buffer_roots(program)
    ddr = {b.name for b in program.module.buffers if b.kind in (BufferKind.DDR, BufferKind.OUTPUT)}
    copied = {root(t.src) for tl in program.module.task_lists for t in tl.tasks
              if isinstance(t, DmaTask) and root(t.src) in ddr
              and root(t.dst) in ddr}
    assert not copied, copied
    assert not sim.races


def test_each_schedule_computes_every_layer_within_its_bound(runs):
    layers_within_bounds(runs)


def test_cycles_against_the_per_layer_sum_and_permuting_concats(runs, monkeypatch, tmp_path):
    """Within 15 times the per-layer roofline sum on this small block (its tasks' fixed
    costs dominate, the sum counting each layer's compute and bytes alone: 9.8 with the
    values NHWC, 26.1 with the Concats' values in the graph's order, stored by permuting
    DMAs), and at most 0.6 of the cycles of the latter (32,616 against 86,419)."""
    program, sim = runs["default"]
    timed = api.simulate(program, timing_only=True)
    bound = program_bound(timed.result.plan, timed.result.timeline)
    assert timed.cycles == sim.cycles
    assert sim.cycles <= 15 * bound.per_layer, (sim.cycles, bound.per_layer)
    monkeypatch.setattr(schedule_layouts, "LAYOUT_FREE_DMA", ())
    permuting = api.simulate(api.compile(_model(tmp_path)), timing_only=True)
    assert sim.cycles <= 0.6 * permuting.cycles, (sim.cycles, permuting.cycles)
