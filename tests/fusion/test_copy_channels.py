"""The channel of each CMX -> CMX copy of an early weight load (``vpuc/fusion/
schedule_channels.py``, ``--schedule default``): on dense layers over a 7 x 7 map
(DenseNet-121's dense block 4: BatchNorm, Relu, 1x1 to 128 channels, BatchNorm, Relu,
3x3 to 32, Concat), weight-bound, where every weight went over channel 1 twice (from DDR,
then tile to tile), the cost model puts copies on channel 0 and the next layer's costliest
weight load first in its slots; the program runs faster, computes the same bits, and
channel 0's FIFO never holds a copy ahead of a task it waits on (the compile's deadlock
proof, ``vpuc/analysis/schedule.py``, passes: it raises otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.fusion import schedule_prefetch_order
from vpuc.fusion.schedule_channels import ChannelBusy, biggest_first, copy_channels
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DmaTask
from vpuc.onnx_import.zoo import ModelBuilder

CHANNELS_IN, LAYERS, SIZE, GROWTH, BOTTLENECK = 256, 3, 7, 32, 128


def _dense_block(path):
    """``LAYERS`` dense layers on a max-pooled ``SIZE`` x ``SIZE`` map, then a global pool."""
    m = ModelBuilder(seed=3, opset=13)
    rng = np.random.default_rng(3)
    x = m.node("MaxPool", [m.input("x", [1, CHANNELS_IN, 2 * SIZE, 2 * SIZE])],
               kernel_shape=[2, 2], strides=[2, 2])

    def bn_relu(v: str, c: int) -> str:
        scale, beta, mean = (rng.standard_normal((3, c)) * 0.5).astype(np.float32)
        var = rng.uniform(0.5, 1.5, c).astype(np.float32)
        return m.node("Relu", [m.node("BatchNormalization",
                                      [v] + [m.init(a, "bn") for a in (scale, beta, mean, var)])])
    c = CHANNELS_IN
    for _ in range(LAYERS):
        w1 = (rng.standard_normal((BOTTLENECK, c, 1, 1)) * np.sqrt(2 / c)).astype(np.float32)
        u = m.node("Conv", [bn_relu(x, c), m.init(w1, "w")], kernel_shape=[1, 1])
        w3 = (rng.standard_normal((GROWTH, BOTTLENECK, 3, 3))
              * np.sqrt(2 / (9 * BOTTLENECK))).astype(np.float32)
        y = m.node("Conv", [bn_relu(u, BOTTLENECK), m.init(w3, "w")], kernel_shape=[3, 3],
                   pads=[1, 1, 1, 1])
        x = m.node("Concat", [x, y], axis=1)
        c += GROWTH
    m.output(m.node("GlobalAveragePool", [x]))
    return m.save(path / "dense.onnx", "dense")


def _compile(path, balanced: bool, monkeypatch):
    from vpuc import api
    with monkeypatch.context() as patch:
        if not balanced:       # as before: every copy on channel 1, loads in list order
            patch.setattr(schedule_prefetch_order, "copy_channels", lambda *args: [])
        return api.compile(path, schedule="default")


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    path = _dense_block(tmp_path_factory.mktemp("copies"))
    monkeypatch = pytest.MonkeyPatch()
    return _compile(path, True, monkeypatch), _compile(path, False, monkeypatch)


def _weight_copies(program) -> list[DmaTask]:
    """The CMX -> CMX copies of buffers a DMA loaded from a constant."""
    symbols = SymbolTable(program.module)
    tasks = [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DmaTask)]
    loaded = {symbols.region(t.dst).root.name for t in tasks
              if symbols.region(t.src).kind is BufferKind.CONST}
    return [t for t in tasks if symbols.region(t.src).kind is BufferKind.CMX
            and symbols.region(t.dst).kind is BufferKind.CMX
            and symbols.region(t.src).root.name in loaded]


def test_weight_copies_run_on_both_channels(programs):
    balanced, before = programs
    assert {t.channel for t in _weight_copies(before)} == {1}
    assert {t.channel for t in _weight_copies(balanced)} == {0, 1}


def test_balanced_copies_run_faster_with_the_same_bits(programs):
    """Fewer simulated cycles (the chain of a layer's weight load, its copy and the next
    layer's load no longer queues on one channel), the same output bits (only channels
    and the DMA list's order moved), no race."""
    from vpuc import api
    balanced, before = programs
    x = np.random.default_rng(4).standard_normal(
        (1, CHANNELS_IN, 2 * SIZE, 2 * SIZE)).astype(np.float16).astype(np.float32)
    fast, slow = (api.simulate(p, {"x": x}) for p in (balanced, before))
    assert fast.cycles < 0.95 * slow.cycles
    assert not fast.races
    for name, out in fast.outputs.items():
        np.testing.assert_array_equal(out, slow.outputs[name])


def _dma(label: str, waits=(), updates=(), channel: int = 1) -> DmaTask:
    return DmaTask(label, tuple(waits), tuple(updates), "%a", "%b", channel)


def test_a_copy_goes_where_it_ends_first():
    """Channel 1 busy with the segment's loads (the copy's own load and another one listed
    before the copy): the copy ends first on channel 0; with channel 0 busier it stays on
    channel 1, and so on a tie (nothing else on channel 1)."""
    gate, own0 = _dma("gate", updates=["g"]), _dma("in0", channel=0)
    load, other = _dma("w", updates=["w.copied"]), _dma("v")
    copy = _dma("w.t1", waits=["w.copied"])
    tasks = [gate, own0, load, other, copy]
    early = {id(t): "g" for t in (load, other, copy)}
    costs = {id(gate): 10.0, id(own0): 100.0, id(load): 1000.0, id(other): 500.0,
             id(copy): 900.0}

    def choose(loads):
        copy.channel = 1
        return copy_channels(tasks, loads, 0, 1, early, {id(copy)}, ChannelBusy(costs))
    assert choose([2, 3, 4]) == [4] and copy.channel == 0
    assert choose([2, 4]) == [] and copy.channel == 1          # a tie: stays
    costs[id(own0)] = 5000.0
    assert choose([2, 3, 4]) == [] and copy.channel == 1


def test_the_costliest_free_load_goes_first():
    """A load that waits on nothing and costs most leads; a copy (it waits) never does."""
    small, big, copy = _dma("s"), _dma("b"), _dma("c", waits=["b.copied"])
    tasks = [small, big, copy]
    costs = {id(small): 10.0, id(big): 500.0, id(copy): 900.0}
    assert biggest_first(tasks, [0, 1, 2], costs) == [1, 0, 2]
