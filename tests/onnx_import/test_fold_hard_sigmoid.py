"""A HardSigmoid right after a Conv, folded into the Conv's weights and bias at import
(``vpuc/onnx_import/fold.py``): the graph holds a Conv of ``alpha w``, ``alpha b + beta``
and a Clamp to [0, 1]; imported in f32 it matches onnxruntime to f32 round-off; in a
squeeze-excite block (MobileNetV3's) the Clamp is the 1x1's DPU post-op, so the product
reads the 1x1's output with no ACT SHAVE task between them, and the block ends sooner
than with the fold left out, matching onnxruntime as closely."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import vpuc.onnx_import as onnx_import
from vpuc import api
from vpuc.fusion import lower_graph_segments
from vpuc.ir.graph import CONSTANT, PARAMETER, RESULT
from vpuc.ir.module import BufferKind
from vpuc.ir.tasks import DpuOp, DpuTask, SwKernelTask
from vpuc.onnx_import import import_onnx, write_import
from vpuc.onnx_import.zoo import ModelBuilder
from vpuc.reference.graph import run_graph

U32 = 2.0 ** -24        # f32 unit roundoff
ALPHA, BETA = 1.0 / 6, 0.5
A32 = float(np.float32(ALPHA))      # the attribute as the model stores it (f32)


def _conv_hard_sigmoid(tmp_path, extra_use: bool = False):
    """x -> Conv 3x3 (12 channels, bias) -> HardSigmoid; ``extra_use``: the Conv's output
    also a graph output (the fold must leave it)."""
    m = ModelBuilder(seed=2, opset=17)
    x = m.input("x", [1, 8, 5, 5])
    conv = m.node("Conv", [x, m.weight((12, 8, 3, 3)), m.weight((12,), 0.5)],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m.output(m.node("HardSigmoid", [conv], alpha=ALPHA, beta=BETA))
    if extra_use:
        m.output(conv)
    return m.save(tmp_path / "m.onnx", "m"), m


def _ops(imported) -> list[str]:
    return [op.kind for op in imported.module.graphs[0].ops
            if op.kind not in (PARAMETER, RESULT, CONSTANT)]


def test_import_folds_the_scale_and_shift_into_the_conv(tmp_path):
    path, m = _conv_hard_sigmoid(tmp_path)
    imported = import_onnx(path, precision="f32")
    assert _ops(imported) == ["Convolution", "Add", "Clamp"]
    clamp = next(op for op in imported.module.graphs[0].ops if op.kind == "Clamp")
    assert (clamp.attrs["min"], clamp.attrs["max"]) == (0.0, 1.0)
    w, b = (numpy_helper.to_array(i).astype(np.float64) for i in m.inits)
    folded = [a for a in imported.arrays.values() if a.shape == w.shape]
    # bit for bit: an f32 weight times the f32 alpha is exact in float64, so the fold and
    # this expression both give the correctly rounded f32 product (no BLAS, no reduction)
    assert len(folded) == 1 and np.array_equal(folded[0], (A32 * w).astype(np.float32))
    # f32: the folded weights and bias are the exact ones rounded once (U32 relative), and
    # both sides sum 72 products in f32: the difference is within (72 + 2) U32 of the sum of
    # the magnitudes of the terms
    x = np.random.default_rng(3).standard_normal((1, 8, 5, 5)).astype(np.float32)
    write_import(imported, tmp_path / "m.vir")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: x}, tmp_path)[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    terms = np.zeros((12, 5, 5))
    for i in range(5):
        for j in range(5):
            terms[:, i, j] = np.abs(A32 * w).reshape(12, -1) @ np.abs(
                padded[:, i:i + 3, j:j + 3]).reshape(-1)
    bound = (72 + 2) * U32 * (terms + np.abs(A32 * b + BETA)[:, None, None]) + U32
    assert np.all(np.abs(got[0].astype(np.float64) - want[0]) <= bound)


def test_a_conv_output_read_elsewhere_is_not_folded(tmp_path):
    path, _ = _conv_hard_sigmoid(tmp_path, extra_use=True)
    assert _ops(import_onnx(path, precision="f32")) == [
        "Convolution", "Add", "Multiply", "Add", "Clamp"]


def test_a_hard_sigmoid_after_another_op_is_not_folded(tmp_path):
    m = ModelBuilder(seed=2, opset=17)
    x = m.input("x", [1, 8, 5, 5])
    m.output(m.node("HardSigmoid", [m.node("Relu", [x])], alpha=ALPHA, beta=BETA))
    path = m.save(tmp_path / "m.onnx", "m")
    assert _ops(import_onnx(path, precision="f32")) == ["Relu", "Multiply", "Add", "Clamp"]


def _se_model(tmp_path) -> str:
    """MobileNetV3-Small's squeeze-excite block on a 14 x 14 x 96 map between a 1x1
    expansion and its 1x1 projection (``zoo._squeeze_excite``'s weights)."""
    m = ModelBuilder(seed=6, opset=17)
    x = m.input("x", [1, 16, 14, 14])
    x = m.node("Relu", [m.node("Conv", [x, m.weight((96, 16, 1, 1)), m.weight((96,), 0.1)],
                               kernel_shape=[1, 1])])
    s = m.node("GlobalAveragePool", [x])
    s = m.node("Relu", [m.node("Conv", [s, m.weight((24, 96, 1, 1)), m.weight((24,), 0.01)],
                               kernel_shape=[1, 1])])
    s = m.node("Conv", [s, m.weight((96, 24, 1, 1)), m.weight((96,), 0.01)],
               kernel_shape=[1, 1])
    y = m.node("Mul", [x, m.node("HardSigmoid", [s], alpha=ALPHA, beta=BETA)])
    m.output(m.node("Conv", [y, m.weight((24, 96, 1, 1))], kernel_shape=[1, 1]))
    return m.save(tmp_path / "se.onnx", "se")


@pytest.fixture(scope="module")
def se_runs(tmp_path_factory):
    """The block compiled and simulated with the fold and with it left out.  The product
    stays a product (the lowering would fold it into the projection's weights once the
    excitation is the 1x1's post-op: ``lower_dpu_scale_weights``, tested in
    tests/fusion/test_scale_weights.py), so both runs have its depthwise tasks."""
    path = _se_model(tmp_path_factory.mktemp("se"))
    x = np.random.default_rng(8).standard_normal((1, 16, 14, 14)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    runs = {}
    real, real_folds = onnx_import.fold_hard_sigmoids, lower_graph_segments.chosen_folds
    for folded in (True, False):
        onnx_import.fold_hard_sigmoids = real if folded else lambda nodes, *a, **k: nodes
        lower_graph_segments.chosen_folds = lambda *a, **k: {}
        try:
            program = api.compile(path)
        finally:
            onnx_import.fold_hard_sigmoids = real
            lower_graph_segments.chosen_folds = real_folds
        inputs = {b.name: x.astype(np.float16) for b in program.module.buffers
                  if b.kind is BufferKind.INPUT}
        sim = api.simulate(program, inputs)
        assert not sim.races
        runs[folded] = program, sim
    return runs, want


def test_the_excitation_is_the_convs_post_op_and_no_act_task_remains(se_runs):
    runs, _ = se_runs
    program, _ = runs[True]
    tasks = [t for tl in program.module.task_lists for t in tl.tasks]
    assert not [t for t in tasks if isinstance(t, SwKernelTask)]
    clamped = [t for t in tasks if isinstance(t, DpuTask) and t.post is not None
               and str(t.post.kind) == "clamp"]
    assert clamped and all(tuple(t.post.params) == (0.0, 1.0) for t in clamped)
    assert [t for t in tasks if isinstance(t, DpuTask) and t.op is DpuOp.DWCONV]
    unfolded = [t for tl in runs[False][0].module.task_lists for t in tl.tasks]
    assert [t for t in unfolded if isinstance(t, SwKernelTask)], "the excitation on ACT"


def _times(sim) -> dict[str, tuple[float, float]]:
    """Each task's label -> (start, end) in the simulated timeline."""
    plan, timeline = sim.result.plan, sim.result.timeline
    return {plan.task[u].label: (timeline.start[u], timeline.end[u]) for u in range(plan.size)}


def _gap(program, sim) -> float:
    """Cycles from the end of the squeeze-excite's second 1x1 (the last DPU task before the
    products) to the start of the first product (a depthwise 1x1 DPU task)."""
    dpu = [t for tl in program.module.task_lists for t in tl.tasks if isinstance(t, DpuTask)]
    times = _times(sim)
    first = min(times[t.label][0] for t in dpu if t.op is DpuOp.DWCONV)
    return first - max(times[t.label][1] for t in dpu if times[t.label][1] <= first)


def test_the_block_ends_sooner_and_matches_onnxruntime_as_closely(se_runs):
    runs, want = se_runs
    assert runs[True][1].cycles < runs[False][1].cycles
    # the products start sooner after the 1x1 by at least the excitation's ACT SHAVE task
    program, sim = runs[False]
    excite = [times for label, times in _times(sim).items() if ".excite." in label]
    assert excite
    saved = min(end - start for start, end in excite)
    assert _gap(*runs[True]) + saved <= _gap(program, sim) + 1e-6
    # the whole-model tolerance of test_import_models.py, for both: the fold moves the
    # excitation's roundings (one of each scaled weight instead of three of the 1x1's
    # output), it does not add error
    for _, sim in runs.values():
        got = next(iter(sim.outputs.values())).astype(np.float32).reshape(want.shape)
        cosine = float(np.dot(got.ravel(), want.ravel())
                       / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine >= 0.999
        assert np.max(np.abs(got - want)) <= 0.01 * (np.max(want) - np.min(want))


def test_convs_sharing_weights_keep_their_own_scales(tmp_path):
    """Two Convs of one weight tensor, each before a HardSigmoid of its own alpha: each
    gets its own scaled copy (f32 import against onnxruntime, the bound of the first test
    with a 1x1's 8 terms)."""
    m = ModelBuilder(seed=4, opset=17)
    x = m.input("x", [1, 8, 3, 3])
    w = m.weight((8, 8, 1, 1))
    a = m.node("HardSigmoid", [m.node("Conv", [x, w], kernel_shape=[1, 1])], alpha=0.25, beta=0.5)
    b = m.node("HardSigmoid", [m.node("Conv", [x, w], kernel_shape=[1, 1])], alpha=0.125, beta=0.25)
    m.output(m.node("Add", [a, b]))
    path = m.save(tmp_path / "m.onnx", "m")
    imported = import_onnx(path, precision="f32")
    assert _ops(imported).count("Clamp") == 2 and "Multiply" not in _ops(imported)
    feed = np.random.default_rng(3).standard_normal((1, 8, 3, 3)).astype(np.float32)
    write_import(imported, tmp_path / "m.vir")
    got = run_graph(imported.module.graphs[0], {imported.inputs["x"]: feed}, tmp_path)[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    weights = numpy_helper.to_array(m.inits[0]).astype(np.float64).reshape(8, 8)
    terms = np.abs(weights) @ np.abs(feed[0].reshape(8, -1).astype(np.float64))
    bound = (8 + 3) * U32 * (0.375 * terms + 0.75) + 2 * U32
    assert np.all(np.abs(got[0].reshape(8, -1) - want[0].reshape(8, -1)) <= bound)
