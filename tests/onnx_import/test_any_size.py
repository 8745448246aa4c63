"""Zoo models at sizes other than their tests' (issue 11, section 3, "Lowering at any size";
``bench/size_sweep.py`` is the whole grid): the cases the sweep found, compile only and
small, plus numerics against onnxruntime where a fix changed the lowered program.

Numerics tolerance as ``test_fpn_compiled.py`` derives it: every layer rounds to f16
(u = 2**-11), errors of N layers compound as about sqrt(N)·u of the values, so cosine
similarity >= 0.999 and max |diff| <= 1% of the output's range against onnxruntime's f32
run; against vpuc's own f16 reference, ``vpuc run``'s default f16 tolerance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest

from vpuc import api
from vpuc.arch import load_arch
from vpuc.fusion.blocked_program import ProgramText, sanitize
from vpuc.fusion.lower_dpu import in_flight_slots
from vpuc.fusion.schedule_anchors import drop_queue_implied_waits, thin_waits
from vpuc.onnx_import.zoo import ModelBuilder, fpn_block
from vpuc.vir.parser import parse_text

NPU37XX = load_arch("NPU37XX")


def _barriers(program, prefix: str) -> list[str]:
    return [b.name for b in program.module.barriers if b.name.startswith(prefix)]


def _physical_ids(program) -> set[int]:
    return {b.physical for b in program.module.barriers}


@pytest.mark.parametrize("blocks, used, barriers, slots", [
    (13, 2, 64, 7),     # the encoder's MatMuls at full size: a slot per block, as before
    (16, 2, 64, 8),     # 32 barriers: just the layer's share
    (32, 2, 64, 5),     # the FPN block's column MatMul at size 64: 5 * 2 blocks in flight
    (16, 2, 24, 2),     # a target of 24 barriers: double buffering
    (9, 1, 64, 9),
    (40, 1, 64, 10),
])
def test_in_flight_slots_keep_a_layer_within_its_share(blocks, used, barriers, slots):
    prog = ProgramText(physical_barriers=barriers)
    assert in_flight_slots(prog, blocks, used) == slots
    share = barriers // 2
    # a slot per block: loaded and done per block; else loaded, done, stored per block in flight
    held = 2 * blocks if slots * used >= blocks else 3 * slots * used
    assert held <= share or slots == 2


def test_fpn_block_at_its_default_size_compiles(tmp_path):
    """The lead's repro (04:45): the linear Resize's column MatMul, 32 blocks of a CMX slot
    each, kept 64 barriers live and assign-physical-barriers ran out."""
    path = fpn_block(size=64, channels=32).save(tmp_path / "fpn.onnx", "fpn")
    program = api.compile(path)
    assert max(_physical_ids(program)) < NPU37XX.barriers
    # the column MatMul's blocks take their slots in turn: a block waits for a store
    assert _barriers(program, "resize_46.stored")


def test_fpn_block_on_fewer_barriers_is_numerically_right(tmp_path):
    """On a target of 24 physical barriers the column MatMul (16 blocks, a slot each on
    NPU37XX) is double-buffered instead; the program still computes the model."""
    arch = dataclasses.replace(NPU37XX, barriers=24)
    builder = fpn_block(size=16, channels=16)
    path = builder.save(tmp_path / "fpn.onnx", "fpn")
    program = api.compile(path, arch=arch)
    assert max(_physical_ids(program)) < 24
    assert _barriers(program, "resize_46.stored")
    assert not _barriers(api.compile(path), "resize_46.stored")   # NPU37XX: a slot each
    rng = np.random.default_rng(11)
    feeds = {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
             .astype(np.float32) for v in builder.inputs}
    sim = api.simulate(program, {k: v.astype(np.float16) for k, v in feeds.items()},
                       reference=True)
    assert not sim.races
    name = sanitize(builder.outputs[0].name)
    got = sim.outputs[name].astype(np.float32)
    np.testing.assert_allclose(got, sim.reference[name].astype(np.float32), rtol=4e-3, atol=1e-4)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


def test_thin_waits_keeps_few_anchors_each_at_or_after_the_wait():
    # one later segment (1) waiting on 40 stores of segment 0 on channel 1, at list places
    # 0, 2, ..., 78; the later DMAs sit at places 100 + j, the last one before the stores end
    stores = {p: f"store{p}" for p in range(0, 80, 2)}
    needs = {1000 + j: {1: (p, stores[p])} for j, p in enumerate(stores)}
    needs[999] = {1: (10, stores[10])}          # a DMA listed before most stores
    segment = {t: 1 for t in needs}
    position = {t: 100 + t - 1000 for t in needs}
    position[999] = 11
    thin_waits(needs, segment, position, cap=8)
    moved = {t: needs[t][1][0] for t in needs}
    assert len(set(moved.values())) <= 8 + 1     # the anchors, and the one kept in place
    assert 78 in moved.values()                   # the last store is an anchor
    for j, p in enumerate(stores):
        assert p <= moved[1000 + j] < p + 10      # at most ceil(40 / 8) = 5 stores later
        assert needs[1000 + j][1][1] == stores[moved[1000 + j]]
    assert moved[999] == 10                       # no anchor before it in the list


def test_maxpool_13x13_at_a_small_budget_is_exact(tmp_path):
    """MaxPool 13x13 (a cascade of 7x7 pools, ``large_kernels``) at ``cmx_budget`` 4096:
    each level some 70 blocks, the second level's loads waiting block by block on the
    first's stores: 72 barriers live without ``schedule_anchors``.  A max is exact, so
    the output equals onnxruntime's on the f16-rounded input."""
    m = ModelBuilder(0)
    x = m.input("x", [1, 16, 12, 12])
    m.output(m.node("MaxPool", [x], kernel_shape=[13, 13], strides=[1, 1], pads=[6, 6, 6, 6]))
    path = m.save(tmp_path / "mp.onnx")
    program = api.compile(path, cmx_budget=4096)
    assert max(_physical_ids(program)) < NPU37XX.barriers
    feed = np.random.default_rng(3).standard_normal((1, 16, 12, 12)).astype(np.float16)
    sim = api.simulate(program, {"x": feed})
    assert not sim.races
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": feed.astype(np.float32)})[0]
    got = sim.outputs[sanitize(m.outputs[0].name)].astype(np.float32)
    np.testing.assert_array_equal(got, want)


def _conv_chain(c: int, size: int, layers: int = 3) -> ModelBuilder:
    m = ModelBuilder(0)
    x = m.input("x", [1, c, size, size])
    for _ in range(layers):
        x = m.node("Relu", [m.node("Conv", [x, m.weight((c, c, 3, 3)), m.weight((c,), 0.1)],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    m.output(x)
    return m


def test_values_kept_in_cmx_at_a_small_budget_are_numerically_right(tmp_path):
    """Three 3x3 convolutions on 96x96x16 at ``cmx_budget`` 32768: the values between them
    stay in CMX (``resident``), written in place block by block, and each next layer's
    blocks waited on the latest in-place write per tile, one barrier per earlier block
    (MobileNetV3-Small at full size and ``cmx_budget`` 65536 ran out of barriers the
    same way); thinned to anchors (``schedule_anchors``), the program still computes the
    model."""
    builder = _conv_chain(16, 96)
    path = builder.save(tmp_path / "convs.onnx")
    program = api.compile(path, cmx_budget=32768)
    assert max(_physical_ids(program)) < NPU37XX.barriers
    feed = np.random.default_rng(5).standard_normal((1, 16, 96, 96)).astype(np.float32)
    sim = api.simulate(program, {"x": feed.astype(np.float16)})
    assert not sim.races
    got = sim.outputs[sanitize(builder.outputs[0].name)].astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine >= 0.999
    assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


CROWDED = """module @crowded arch NPU37XX
input %x : 64xf16
output %y : 64xf16
cmx %a : 64xf16 tile 0
cmx %b : 64xf16 tile 0
cmx %c : 64xf16 tile 0
barrier %ready
barrier %more
tasks DMA {
  first: dma %x -> %a channel 1 updates(%ready)
  l0: dma %x -> %b channel 0 waits(%ready)
  l1: dma %x -> %c channel 0 waits(%ready, %more)
  l2: dma %x -> %b channel 0 waits(%ready)
  s0: dma %a -> %y channel 1 waits(%ready) updates(%more)
}
"""


@pytest.mark.parametrize("limit, kept", [
    (4, {"l0": ("ready",), "l1": ("ready", "more"), "l2": ("ready",), "s0": ("ready",)}),
    # 4 waiters over 3: channel 0's later two start after l0, which waited
    (3, {"l0": ("ready",), "l1": ("more",), "l2": (), "s0": ("ready",)}),
])
def test_a_crowded_barrier_keeps_one_waiter_per_queue(limit, kept):
    module = parse_text(CROWDED, "crowded.vir")
    drop_queue_implied_waits(module, limit)
    tasks = {t.label: tuple(t.waits) for tl in module.task_lists for t in tl.tasks}
    assert {k: tasks[k] for k in kept} == kept

