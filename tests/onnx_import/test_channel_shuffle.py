"""ShuffleNet's channel shuffle (Reshape, Transpose [0, 2, 1, 3, 4], Reshape) folded at
import into the depthwise Conv and the grouped 1x1 Conv that read it
(``vpuc/onnx_import/channel_shuffle.py``): no Transpose is left in the graph, no
element-by-element PERMUTE DMA in the program but the model's NCHW input load and output
store, the program takes fewer simulated cycles than with the shuffle kept, and it
matches onnxruntime within the whole-model tolerance of docs/onnx-import.md; a shuffled
value that another op also reads is left alone."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

import vpuc.onnx_import as onnx_import
from vpuc import api
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DmaMode, DmaTask
from vpuc.onnx_import import import_onnx
from vpuc.onnx_import.zoo import ModelBuilder

C_IN, MID, C_OUT, GROUPS, SIZE = 24, 48, 48, 4, 14


def _bn(m: ModelBuilder, x: str, channels: int) -> str:
    rng = m.rng
    params = [rng.uniform(0.8, 1.2, channels), rng.uniform(-0.1, 0.1, channels),
              rng.uniform(-0.1, 0.1, channels), rng.uniform(0.5, 1.5, channels)]
    return m.node("BatchNormalization", [x, *(m.init(p.astype(np.float32), "bn") for p in params)])


def _unit(tmp_path, extra_reader=False) -> str:
    """x -> grouped 1x1 -> BN -> Relu -> shuffle -> depthwise 3x3 -> BN -> grouped 1x1 (a
    ShuffleNet v1 unit as the onnx package's light_shufflenet writes it); ``extra_reader``:
    the shuffled value is also a second output's Relu."""
    m = ModelBuilder(seed=5, opset=13)
    x = m.input("x", [1, C_IN, SIZE, SIZE])
    w1 = m.weight((MID, C_IN // GROUPS, 1, 1), np.sqrt(2 / (C_IN // GROUPS)))
    y = m.node("Relu", [_bn(m, m.node("Conv", [x, w1], kernel_shape=[1, 1], group=GROUPS), MID)])
    per_group = MID // GROUPS
    grouped = m.node("Reshape", [y, m.init(np.asarray([1, GROUPS, per_group, SIZE, SIZE], np.int64), "s")])
    swapped = m.node("Transpose", [grouped], perm=[0, 2, 1, 3, 4])
    z = m.node("Reshape", [swapped, m.init(np.asarray([1, MID, SIZE, SIZE], np.int64), "s")])
    dw = m.node("Conv", [z, m.weight((MID, 1, 3, 3), np.sqrt(2 / 9))], kernel_shape=[3, 3],
                pads=[1, 1, 1, 1], group=MID)
    w2 = m.weight((C_OUT, MID // GROUPS, 1, 1), np.sqrt(2 / (MID // GROUPS)))
    m.output(m.node("Conv", [_bn(m, dw, MID), w2], kernel_shape=[1, 1], group=GROUPS))
    if extra_reader:
        m.output(m.node("Relu", [z]))
    return m.save(tmp_path / "unit.onnx", "unit")


def _ops(path) -> list[str]:
    graph = import_onnx(path).module.graphs[0]
    return [op.kind for op in graph.ops if op.kind not in (PARAMETER, RESULT, CONSTANT)]


def _permuting_layers(program) -> set[str]:
    """The layers whose DMAs copy element by element (``DmaMode.PERMUTE``)."""
    return {t.label.split(".")[0] for tasks in program.module.task_lists for t in tasks.tasks
            if isinstance(t, DmaTask) and t.mode is DmaMode.PERMUTE}


def test_the_shuffle_folds_into_the_convs(tmp_path):
    path = _unit(tmp_path)
    ops = _ops(path)
    assert "Transpose" not in ops and "Reshape" not in ops, ops
    # the depthwise Conv stays grouped (its weights permuted); the last 1x1 becomes dense
    assert ops == ["GroupConvolution", "Add", "Relu", "GroupConvolution", "Add", "Convolution"]


def test_compiled_unit_matches_onnxruntime_without_permutes_and_sooner(tmp_path, monkeypatch):
    path = _unit(tmp_path)
    program = api.compile(path)
    # only the model's NCHW input load and output store permute (to and from NHWC)
    assert len(_permuting_layers(program)) == 2, _permuting_layers(program)
    x = np.random.default_rng(2).standard_normal((1, C_IN, SIZE, SIZE)).astype(np.float16)
    inputs = {buf.name: x for buf in program.module.buffers if buf.kind is BufferKind.INPUT}
    sim = api.simulate(program, inputs)
    assert not sim.races
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.astype(np.float32)})[0].astype(np.float64)
    got = next(iter(sim.outputs.values())).astype(np.float64).reshape(want.shape)
    # the whole-model tolerance of docs/onnx-import.md
    cosine = got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want))
    assert cosine >= 0.999, cosine
    assert np.abs(got - want).max() <= 0.01 * (want.max() - want.min())
    folded = api.simulate(program, timing_only=True).cycles
    monkeypatch.setattr(onnx_import, "fold_channel_shuffles", lambda nodes, *args: nodes)
    kept = api.compile(path)
    assert len(_permuting_layers(kept)) > 2             # the shuffle the fold removes
    assert folded < api.simulate(kept, timing_only=True).cycles


def test_a_shuffled_value_read_elsewhere_is_left_alone(tmp_path):
    ops = _ops(_unit(tmp_path, extra_reader=True))
    assert "Transpose" in ops, ops


def test_a_per_channel_mul_add_and_clip_chain_into_a_dense_conv_is_exact(tmp_path):
    """shuffle -> Mul(s) -> Add(t) -> Clip(0, 6) -> dense 1x1: imported in f32 with the
    shuffle folded (s and t permuted, the Conv's columns permuted), against onnxruntime.
    The elementwise ops round the same operands once each on both sides, so only the
    two sums of the C products differ, in order: gamma_C of sum |w| |r| each."""
    from tests.tolerances import assert_within_bound, gamma
    from vpuc.onnx_import import write_import
    from vpuc.reference.graph import run_graph
    m = ModelBuilder(seed=6, opset=13)
    x = m.input("x", [1, MID, SIZE, SIZE])
    per_group = MID // GROUPS
    grouped = m.node("Reshape", [x, m.init(np.asarray([1, GROUPS, per_group, SIZE, SIZE], np.int64), "s")])
    swapped = m.node("Transpose", [grouped], perm=[0, 2, 1, 3, 4])
    z = m.node("Reshape", [swapped, m.init(np.asarray([1, MID, SIZE, SIZE], np.int64), "s")])
    scale = m.rng.uniform(0.5, 2.0, (1, MID, 1, 1)).astype(np.float32)
    shift = m.rng.uniform(-1.0, 1.0, (MID, 1, 1)).astype(np.float32)
    bounds = [m.init(np.asarray(v, np.float32), "c") for v in (0.0, 6.0)]
    r = m.node("Clip", [m.node("Add", [m.init(shift, "t"), m.node("Mul", [z, m.init(scale, "s")])]),
                        *bounds])
    w = m.weight((C_OUT, MID, 1, 1))
    m.output(m.node("Conv", [r, w], kernel_shape=[1, 1]))
    path = m.save(tmp_path / "chain.onnx", "chain")
    imported = import_onnx(path, precision="f32")
    ops = [op.kind for op in imported.module.graphs[0].ops if op.kind not in (PARAMETER, RESULT, CONSTANT)]
    assert "Transpose" not in ops and "Reshape" not in ops and ops[-1] == "Convolution", ops
    feed = np.random.default_rng(3).standard_normal((1, MID, SIZE, SIZE)).astype(np.float32)
    write_import(imported, tmp_path / "chain.vir")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: feed}, tmp_path)[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    shuffled = feed.reshape(1, GROUPS, per_group, SIZE, SIZE).transpose(0, 2, 1, 3, 4).reshape(feed.shape)
    activations = np.clip(shuffled.astype(np.float64) * scale + shift, 0, 6)
    weights = np.abs(numpy_helper.to_array(m.inits[-1]).astype(np.float64)).reshape(C_OUT, MID)
    magnitude = np.einsum("oc,nchw->nohw", weights, activations)
    assert_within_bound(got, want, 2 * gamma(MID, np.float32) * magnitude)
