"""``lower_dpu_scale``: a squeeze-excite product ``x * e[c]`` as a DPU depthwise 1x1
convolution whose weights the excitation's ACT SHAVE task writes into CMX, or, when the
import folded the excitation into the 1x1 before it (``onnx_import.fold``: a HardSigmoid
right after a Conv), a copy of that 1x1's output."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc import api
from vpuc.cost.timing import default_timing
from vpuc.fusion import lower_graph_segments
from vpuc.fusion.blocked_program import ProgramText
from vpuc.fusion.lower_dpu_scale import dpu_product_cycles
from vpuc.ir.module import BufferKind
from vpuc.ir.symbols import SymbolTable
from vpuc.ir.tasks import DpuOp, DpuTask, SwKernelTask
from vpuc.ir.types import NAMED_ORDERS, DimsOrder, ElemType, TensorType
from vpuc.onnx_import.zoo import ModelBuilder

from tests.fusion.dpu_testlib import se_model


def _products(program) -> list[tuple[DpuTask, SwKernelTask]]:
    """Each depthwise 1x1 task with the ACT SHAVE task that writes (part of) its weights."""
    symbols = SymbolTable(program.module)
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    writers = {symbols.region(b.buffer).root.name: t for t in tasks
               if isinstance(t, SwKernelTask) for b in t.outputs}
    return [(t, writers.get(symbols.region(t.weights).root.name)) for t in tasks
            if isinstance(t, DpuTask) and t.op is DpuOp.DWCONV and tuple(t.kernel) == (1, 1)]


@pytest.fixture(autouse=True)
def _products_stay(monkeypatch):
    """These tests are about the product's own lowering: no product folded into the
    projection after it (``lower_dpu_scale_weights``, tests/fusion/test_scale_weights.py)."""
    monkeypatch.setattr(lower_graph_segments, "chosen_folds", lambda *a, **k: {})


def _run(program, x: np.ndarray) -> np.ndarray:
    sim = api.simulate(program, {"x": x})
    assert not sim.races
    return next(iter(sim.outputs.values()))


@pytest.fixture(scope="module")
def se(tmp_path_factory):
    return se_model(tmp_path_factory.mktemp("se"))


@pytest.mark.parametrize("excite_on_act", [True, False])
@pytest.mark.parametrize("channels", [32, 24])
def test_product_runs_on_the_dpu_bit_for_bit_as_on_act(tmp_path, monkeypatch, channels,
                                                       excite_on_act):
    """The DPU widens f16 to f32, multiplies (exact: 11 x 11 significant bits), rounds once
    to f16: the ACT SHAVE product's one rounding of the same exact product.  24 channels:
    the blocks and weights padded to 32 in CMX, the padded weights the excitation of the
    first 8 channels again (finite; their outputs never stored).  An excitation folded
    into the 1x1 (``excite_on_act`` False): no ACT SHAVE task, the weights a copy of the
    1x1's output."""
    se = se_model(tmp_path, channels=channels, excite_on_act=excite_on_act)
    x = np.random.default_rng(5).standard_normal((1, 16, 10, 10)).astype(np.float16)
    program = api.compile(se)
    products = _products(program)
    assert products and all((writer is not None) == excite_on_act for _, writer in products)
    symbols = SymbolTable(program.module)
    for dpu, writer in products:     # weights in the tile's CMX, written on that tile
        region = symbols.region(dpu.weights)
        assert region.kind is BufferKind.CMX and region.tile == dpu.tile
        assert region.type.dims == (32, 1, 1, 1)
        if excite_on_act:
            assert writer.tile == dpu.tile
            assert symbols.region(writer.outputs[0].buffer).root is region.root
    # 32 channels, the values between layers kept in CMX: the blocks on the tile holding
    # the input read it in place, those on the output's write it in place (resident.py)
    in_cmx = {b.name for b in program.module.buffers           # not a block's buffer
              if b.kind is BufferKind.CMX and "." not in b.name}
    read = [d for d, _ in products if symbols.region(d.inputs[0]).root.name in in_cmx]
    written = [d for d, _ in products if symbols.region(d.output).root.name in in_cmx]
    assert channels != 32 or (read and written)
    on_dpu = _run(program, x)
    monkeypatch.setattr(lower_graph_segments, "choose_dpu", lambda *a, **k: None)
    on_act = api.compile(se)
    assert not _products(on_act)
    want = _run(on_act, x)
    assert on_dpu.dtype == want.dtype == np.float16
    assert np.array_equal(on_dpu.view(np.uint16), want.view(np.uint16))


def test_the_dpu_product_is_faster(se, monkeypatch):
    on_dpu = api.simulate(api.compile(se), timing_only=True).cycles
    monkeypatch.setattr(lower_graph_segments, "choose_dpu", lambda *a, **k: None)
    on_act = api.simulate(api.compile(se), timing_only=True).cycles
    assert on_dpu < on_act


def test_a_slow_depthwise_dpu_keeps_the_product_on_act(se):
    """The choice is the cost model's: a DPU whose depthwise rate is a thousandth of the
    target's runs the product slower than the ACT SHAVEs do."""
    timing = default_timing("NPU37XX")
    rates = dict(timing.dpu.rates, depthwise=timing.dpu.rates["depthwise"] / 1000)
    slow = dataclasses.replace(timing, dpu=dataclasses.replace(timing.dpu, rates=rates))
    assert _products(api.compile(se))
    assert not _products(api.compile(se, timing=slow))


def test_a_product_with_an_op_after_it_stays_on_act(tmp_path):
    """A HardSwish after the product in its subgraph: the DPU has no post-op for it."""
    m = ModelBuilder(4)
    x = m.input("x", [1, 32, 6, 6])
    s = m.node("Conv", [m.node("GlobalAveragePool", [x]), m.weight((32, 32, 1, 1))],
               kernel_shape=[1, 1])
    y = m.node("HardSwish", [m.node("Mul", [x, m.node("HardSigmoid", [s])])])
    m.output(m.node("Conv", [y, m.weight((16, 32, 1, 1))], kernel_shape=[1, 1]))
    assert not _products(api.compile(m.save(tmp_path / "hs.onnx", "hs")))


def test_naive_keeps_the_product_on_act(se):
    assert not _products(api.compile(se, schedule="naive"))


def test_each_tile_pipelines_two_blocks_and_the_estimate_is_the_simulators(se):
    """10 rows on 2 tiles: blocks of at most 3 rows (half a tile's share), and the DPU time
    ``choose_dpu`` weighed is what the simulator charges the busiest tile's product tasks:
    each variant ``dispatch + cost``, the simulator rounding each cost up to a cycle."""
    program = api.compile(se)
    products = [t for t, _ in _products(program)]
    symbols = SymbolTable(program.module)
    rows = [symbols.region(t.output).type.dims[2] for t in products]
    assert len(products) >= 4 and max(rows) <= 3 and sum(rows) == 10
    sim = api.simulate(program, timing_only=True)
    plan, timeline = sim.result.plan, sim.result.timeline
    busy = {0: 0.0, 1: 0.0}
    variants = {0: 0, 1: 0}
    labels = {t.label for t in products}
    for u in range(plan.size):
        task = plan.task[u]
        if isinstance(task, DpuTask) and task.label in labels:
            busy[task.tile] += timeline.end[u] - timeline.start[u]
            variants[task.tile] += 1
    x = TensorType((1, 32, 10, 10), ElemType.F16, DimsOrder(NAMED_ORDERS["NHWC"]))
    blocks, at = [], 0
    for r in rows:
        blocks.append((at, at + r))
        at += r
    estimate = dpu_product_cycles(ProgramText(timing=default_timing("NPU37XX")), x, blocks, 2)
    tile = max(busy, key=busy.get)
    assert estimate <= busy[tile] <= estimate + variants[tile]
